"""The red line every screen shows while host keys are not checked (hosts.yaml
`insecure_skip_host_key_check: true`): the app mounts it on each screen it shows."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from tui.sanitize import one_line


def insecure_text(hosts: list[str]) -> Text:
    names = ", ".join(one_line(h) for h in hosts)
    return Text(
        f" HOST KEY CHECK OFF: {names} (insecure_skip_host_key_check): anyone on the "
        "path can pose as these hosts ",
        style="bold white on red",
    )


class InsecureBanner(Static):
    DEFAULT_CSS = """
    InsecureBanner { dock: top; height: 1; background: red; color: white; text-style: bold; }
    """

    def __init__(self, hosts: list[str]) -> None:
        super().__init__(insecure_text(hosts), id="insecure-banner")
        self.hosts = list(hosts)
