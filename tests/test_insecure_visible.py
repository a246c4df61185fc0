"""insecure_skip_host_key_check is visible everywhere: a red line on every cockpit screen, a
warning on stderr of every command that reads the hosts file, insecure_host_keys in every JSON
document, a warn row (with a fix) in `check`.

Real parts: the CLI as a subprocess, a real SSH connection attempt (to a closed port: refused
at once, so no host is reachable and nothing hangs), the app under Pilot."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

import pytest
from harness.cli import run_cli as verl_tui

from tui.app import VerlTuiApp
from tui.cluster.doctor import host_key_findings
from tui.config.hosts import parse_inventory
from tui.widgets.banner import InsecureBanner

HOSTS = """\
cluster: lab
ssh: {port: 9, connect_timeout: 2}
hosts:
  - name: head1
    address: 127.0.0.1
    ssh: {insecure_skip_host_key_check: true}
  - name: local1
    transport: local
"""
SECURE = HOSTS.replace("insecure_skip_host_key_check: true", "connect_timeout: 2")
WARNING = "verl-tui: warning: host keys are NOT checked for head1"


@pytest.fixture
def hosts_file(tmp_path: Path) -> Path:
    path = tmp_path / "hosts.yaml"
    path.write_text(HOSTS)
    return path


def run_cli(*args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return verl_tui([*args], timeout=timeout)


@pytest.mark.parametrize(
    "args",
    [
        ["gpus", "--once", "--json", "--timeout", "3"],
        ["check", "--json", "--timeout", "8"],
        ["status", "--json"],
        ["ckpt", "--dir", "/nonexistent-ckpt", "--json"],
    ],
)
def test_json_commands_warn_and_mark_the_document(hosts_file: Path, args: list[str]) -> None:
    proc = run_cli(args[0], str(hosts_file), *args[1:])
    assert proc.stderr.splitlines()[0].startswith(WARNING), proc.stderr
    assert "Traceback" not in proc.stderr
    doc = json.loads(proc.stdout.splitlines()[0] if args[0] == "gpus" else proc.stdout)
    assert doc["insecure_host_keys"] is True, proc.stdout


@pytest.mark.parametrize(
    "args",
    [["gpus", "--once", "--timeout", "3"], ["jobs"], ["debug"], ["down"], ["logs", "somejob"]],
)
def test_text_commands_warn_first(hosts_file: Path, args: list[str]) -> None:
    if args[0] == "down":
        # `down` on a local host runs `ray stop` on this machine, which would stop every Ray
        # here, the namespace hosts' included: the refused SSH host alone is enough.
        hosts_file.write_text(HOSTS.split("  - name: local1")[0])
    proc = run_cli(args[0], str(hosts_file), *args[1:])
    assert proc.stderr.splitlines()[0].startswith(WARNING), (args, proc.stderr)
    assert "Traceback" not in proc.stderr


def test_secure_file_has_no_warning_and_false_flag(tmp_path: Path) -> None:
    path = tmp_path / "hosts.yaml"
    path.write_text(SECURE)
    proc = run_cli("gpus", str(path), "--once", "--json", "--timeout", "3")
    assert "warning" not in proc.stderr
    assert json.loads(proc.stdout.splitlines()[0])["insecure_host_keys"] is False


def test_check_has_a_warn_row_with_a_fix(hosts_file: Path) -> None:
    proc = run_cli("check", str(hosts_file), "--json", "--timeout", "8")
    rows = [c for c in json.loads(proc.stdout)["checks"] if c["check"] == "host-keys"]
    assert [(r["status"], r["host"]) for r in rows] == [("warn", "head1")], rows
    assert "ssh-keyscan -p 9 127.0.0.1" in rows[0]["fix"]
    text = run_cli("check", str(hosts_file), "--timeout", "8").stdout
    assert any(line.startswith("! host-keys") and "head1" in line for line in text.splitlines())


def test_host_key_findings_ok_when_checked() -> None:
    inv = parse_inventory(SECURE)
    [row] = host_key_findings(inv)
    assert row.status == "ok" and row.host is None


async def test_banner_on_every_screen(hosts_file: Path) -> None:
    from tui.config.hosts import load_inventory

    app = VerlTuiApp(load_inventory(hosts_file), interval=0.5)
    seen: dict[str, str] = {}
    async with app.run_test(size=(140, 40)) as pilot:
        actions = [
            None,
            app.action_show_jobs,
            app.action_node_logs,
            app.action_debugger,
            app.action_checkpoints,
            app.action_doctor,
            app.action_help,
        ]
        for action in actions:
            if action is not None:
                app.action_show_cluster()
                await pilot.pause(0.1)
                action()
            await pilot.pause(0.3)
            screen = app.screen
            banners = list(screen.query(InsecureBanner))
            assert banners, f"no banner on {type(screen).__name__}"
            region = banners[0].region
            assert region.y == 0 and region.height == 1 and region.width > 0
            seen[type(screen).__name__] = str(banners[0].render())
        app.action_show_cluster()
        await pilot.pause(0.1)
        await pilot.press("q")
        await asyncio.sleep(0)
    assert {
        "ClusterScreen",
        "JobsScreen",
        "NodeLogsScreen",
        "DebuggerScreen",
        "CheckpointsScreen",
        "DoctorScreen",
        "HelpScreen",
    } <= set(seen), seen
    assert all("HOST KEY CHECK OFF: head1" in text for text in seen.values())


async def test_no_banner_when_keys_are_checked(tmp_path: Path) -> None:
    app = VerlTuiApp(parse_inventory(SECURE), interval=0.5)
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.pause(0.2)
        await pilot.press("2")
        await pilot.pause(0.2)
        assert not app.screen.query(InsecureBanner)
        await pilot.press("q")
