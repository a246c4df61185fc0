"""The job form's widgets: one field per override key, the add-a-key input."""

from tui.widgets.jobform.addkey import AddKey
from tui.widgets.jobform.field import FormField

__all__ = ["AddKey", "FormField"]
