"""The job form's widgets: one field per override key, the add-a-key input, the run switches
and secret fields."""

from tui.widgets.jobform.addkey import AddKey, AddKeyBox
from tui.widgets.jobform.field import FormField
from tui.widgets.jobform.toggles import FormToggles, SecretFields

__all__ = ["AddKey", "AddKeyBox", "FormField", "FormToggles", "SecretFields"]
