"""A validating pattern anchored with `^…$` also accepts the text with one trailing newline
(`$` matches before a final "\\n"), so "node1\\n" passed hosts.yaml's name check. Every
whole-text pattern in tui/ ends with `\\Z`; this walks the source so a new one cannot slip in."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

TUI = Path(__file__).resolve().parents[1] / "tui"
ANCHORED_DOLLAR = re.compile(r're\.compile\(r?"\^[^"\n]*\$"\)')


def test_no_whole_text_pattern_ends_with_dollar() -> None:
    found = [
        f"{path.relative_to(TUI.parent)}:{n}: {line.strip()}"
        for path in sorted(TUI.rglob("*.py"))
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if ANCHORED_DOLLAR.search(line)
    ]
    assert not found, "use \\Z, not $, to end a whole-text pattern:\n" + "\n".join(found)


@pytest.mark.parametrize("key", ["name", "cluster", "user"])
def test_a_trailing_newline_never_reaches_a_name(tmp_path: Path, key: str) -> None:
    """Refused in one line naming the file, or trimmed: never kept with its newline."""
    from tui.config.hosts import load_inventory
    from tui.config.yamlfile import ConfigError

    value = '"x1\\n"'
    text = (
        f"cluster: {value if key == 'cluster' else 'c1'}\n"
        f"hosts:\n  - name: {value if key == 'name' else 'node1'}\n    address: 10.0.0.1\n"
        + (f"    ssh: {{user: {value}}}\n" if key == "user" else "")
    )
    path = tmp_path / "hosts.yaml"
    path.write_text(text)
    try:
        inv = load_inventory(path)
    except ConfigError as err:
        message = str(err)
        assert "\n" not in message and "hosts.yaml:" in message
        return
    host = inv.hosts[0]
    kept = {"name": host.name, "cluster": inv.cluster, "user": host.ssh.user if host.ssh else ""}
    assert "\n" not in (kept[key] or "")
