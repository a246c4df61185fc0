"""Terminal escapes from hosts never reach the terminal from the cockpit (Pilot).

Real parts: the real agent on the local transport reading the fake libnvidia-ml.so.1 whose GPU
names carry OSC title/clipboard sequences, a clear-screen CSI and Textual markup; a real process
whose /proc/PID/comm holds an escape, listed as that GPU's process; a host whose `python:` is a
forged interpreter that runs the real agent with a hostile hostname. What Textual would write to
the terminal for the whole screen is rendered and checked, as are the widgets' own strips (the
explicit sanitizing, before the last-resort guard)."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import textwrap

import pytest
from fakenvml.fakenvml import MIB, FakeGpu, write_state
from rich.segment import Segment
from textual.strip import Strip

from tui.app import VerlTuiApp
from tui.config.hosts import parse_inventory
from tui.widgets import terminal_guard
from tui.widgets.details import DetailsPane
from tui.widgets.gpu_table import GpuTable, Row

ESC, BEL = "\x1b", "\x07"
TITLE = f"{ESC}]0;PWNED{BEL}"
CLEAR = f"{ESC}[2J"
CLIP = f"{ESC}]52;c;cm0gLXJmIC8K{BEL}"
LINK = "[@click=app.quit]x[/]"
BAD_HOSTNAME = f"node{TITLE}{CLEAR}{LINK}"
# What Textual itself writes: SGR, cursor positioning, its own modes. Anything else is injected.
TEXTUAL_OWN = re.compile(r"\x1b\[[0-9;]*m|\x1b\[\d+;\d+H|\x1b\[\?\d+[hl]|\x1b\[[0-9]*[JK]")
INJECTED = ("PWNED" + BEL, "]0;", "]52;", "\x9b", "\x9d", CLEAR)


@pytest.fixture
def hostile(fake_nvml_lib, tmp_path, monkeypatch):
    # A real process named with an escape (what the agent reads from /proc/PID/comm).
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
        import sys, time
        open('/proc/self/comm', 'w').write({(ESC + "]0;P" + BEL + CLEAR)!r})
        print('ready', flush=True)
        time.sleep(120)"""),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout.readline().strip() == "ready"
    state = tmp_path / "nvml.txt"
    write_state(
        state,
        [
            FakeGpu(name=f"H100{TITLE}{CLEAR}", util=50, processes=[(proc.pid, 1000 * MIB)]),
            FakeGpu(name=f"{LINK}{CLIP}", util=5),
        ],
    )
    monkeypatch.setenv("LD_LIBRARY_PATH", str(fake_nvml_lib))
    monkeypatch.setenv("FAKE_NVML_STATE", str(state))
    # A forged interpreter: the real agent, with a hostile hostname.
    forged = tmp_path / "forged-python"
    forged.write_text(
        f"#!{sys.executable}\n"
        + textwrap.dedent(f"""
        import socket, sys
        socket.gethostname = lambda: {BAD_HOSTNAME!r}
        args = sys.argv[1:]
        i = args.index("-c")
        sys.argv = ["-c", *args[i + 2:]]
        exec(compile(args[i + 1], "<agent>", "exec"), {{"__name__": "__main__"}})
    """)
    )
    forged.chmod(0o755)
    yield forged
    proc.kill()
    proc.wait()


def make_app(forged) -> VerlTuiApp:
    inv = parse_inventory(
        f"cluster: pilot\nhosts:\n  - name: alpha\n    transport: local\n"
        f"    python: {forged}\n  - name: beta\n    transport: local\n"
    )
    return VerlTuiApp(inv, interval=0.2)


async def wait_for(pilot, predicate, timeout=15.0):
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError("condition not met in time")
        await pilot.pause(0.05)


def terminal_output(app) -> str:
    """Exactly what Textual would write to the terminal for a full repaint of the screen."""
    update = app.screen._compositor.render_full_update()
    return update.render_segments(app.console)


def assert_inert(output: str) -> None:
    for needle in INJECTED:
        assert needle not in output, (needle, output[:300])
    rest = TEXTUAL_OWN.sub("", output)
    assert ESC not in rest and BEL not in rest, repr(rest[max(0, rest.find(ESC) - 40) :][:120])
    assert not re.search("[\x80-\x9f\u202a-\u202e\u2066-\u2069]", rest)


async def test_hostile_gpu_host_and_process_names_render_inert(hostile) -> None:
    app = make_app(hostile)
    async with app.run_test(size=(150, 40)) as pilot:
        table = app.screen.query_one(GpuTable)
        await wait_for(
            pilot,
            lambda: (
                len(table.rows) == 6
                and all(
                    ht.latest is not None and ht.latest.gpus for ht in app.monitor.hosts.values()
                )
            ),
        )
        await wait_for(pilot, lambda: app.monitor.hosts["alpha"].hostname is not None)
        # The widgets' own strips are clean before any guard: explicit sanitizing.
        lines = [table.render_line(y) for y in range(table.size.height)]
        texts = "".join(seg.text for strip in lines for seg in strip)
        assert "H100" in texts and "[@click=app.quit]" in texts  # names shown as text …
        assert ESC not in texts and BEL not in texts  # … that cannot act
        # Host row, GPU row (process with the hostile comm), and the cluster header.
        table.cursor = table.rows.index(Row("alpha"))
        await pilot.pause(0.1)
        host_pane = app.screen.query_one(DetailsPane)
        assert "node" in str(host_pane.render()) and ESC not in str(host_pane.render())
        assert_inert(terminal_output(app))
        table.cursor = table.rows.index(Row("alpha", 0))
        await pilot.pause(0.1)
        details = str(app.screen.query_one(DetailsPane).render())
        assert "pid " in details and ESC not in details and BEL not in details
        assert_inert(terminal_output(app))
        # Markup in a GPU name stays text: no live action. (A cluster name with markup is
        # refused when hosts.yaml loads: test_cluster_name_with_markup_is_refused.)
        table.cursor = table.rows.index(Row("alpha", 1))
        await pilot.pause(0.1)
        summary = app.screen.query_one("#summary")
        assert "pilot" in str(summary.render())
        output = terminal_output(app)
        assert_inert(output)
        assert "[@click=app.quit]x[/]" in TEXTUAL_OWN.sub("", output)
        for widget in app.screen.query("*"):
            for span in getattr(widget.render(), "spans", []):
                assert "@click" not in str(span.style), (widget, span)
        await pilot.press("q")


def test_guard_drops_controls_textual_would_write() -> None:
    terminal_guard.install()
    assert terminal_guard.installed()
    from rich.console import Console

    strip = Strip([Segment(f"a{TITLE}b{CLEAR}c\x9b2J\u202ed")])
    out = strip.render(Console())
    assert out == "a]0;PWNEDb[2Jc2Jd", repr(out)
    assert strip.cell_length == Strip([Segment("a]0;PWNEDb[2Jc2Jd")]).cell_length


async def test_forged_agent_stderr_is_shown_inert(tmp_path) -> None:
    # An interpreter that writes hostile text on stderr and exits: the host's error text.
    forged = tmp_path / "broken-python"
    forged.write_text(
        f"#!/bin/sh\nprintf '{ESC}]0;PWNED{BEL}{ESC}[2Jboom [@click=app.quit]q[/]' >&2\nexit 3\n"
    )
    forged.chmod(0o755)
    inv = parse_inventory(f"hosts:\n  - name: alpha\n    transport: local\n    python: {forged}\n")
    app = VerlTuiApp(inv, interval=0.2)
    async with app.run_test(size=(150, 30)) as pilot:
        await wait_for(pilot, lambda: "boom" in (app.monitor.hosts["alpha"].display_error or ""))
        await pilot.pause(0.3)
        table = app.screen.query_one(GpuTable)
        texts = "".join(seg.text for y in range(table.size.height) for seg in table.render_line(y))
        assert "boom" in texts and ESC not in texts
        assert_inert(terminal_output(app))
        await pilot.press("q")


def test_cluster_name_with_markup_is_refused() -> None:
    """The cluster's name becomes a state folder and a header: markup or escapes in it are
    refused at load, in one line naming the key, before anything draws it."""
    from tui.config.yamlfile import ConfigError

    for bad in (f"{LINK}pilot", f"pilot{TITLE}"):
        with pytest.raises(ConfigError) as err:
            parse_inventory(f"cluster: {bad!r}\nhosts:\n  - name: alpha\n    transport: local\n")
        message = str(err.value)
        assert "cluster" in message and "\n" not in message and ESC not in message
