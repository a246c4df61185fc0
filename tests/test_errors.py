"""The error model (issue 27, item 5): one base for every error a user reads (tui/errors.py),
one CLI presenter (tui/commands/present.py) whose exit status comes from the error's kind."""

from __future__ import annotations

import ast
import asyncio
import importlib
import os
import time
from pathlib import Path

import pytest
from harness.cli import run_cli

from tui.ckpt.hostcmd import CkptError
from tui.cluster.dashboard import BadJobId, DashboardError, DashboardHTTPError, check_job_id
from tui.cluster.lock import LockHeld
from tui.cluster.ray_cluster import BringUpError, ClusterBusy
from tui.commands import UnknownCommand, unknown_message
from tui.commands.present import error_line, fail, fail_job, fail_with
from tui.config.yamlfile import ConfigError
from tui.errors import EXIT_CODES, VerlTuiError, exit_code, hint_of, title_of
from tui.jobs.queue import JobQueue, Needs, QueueEntry
from tui.jobs.schema import SchemaError
from tui.state import StateError
from tui.supervisor.lease import LeaseHeld
from tui.transport.local import LocalTransport
from tui.transport.types import EnvSetupFailed, HostShell, TransportError

TUI = Path(__file__).resolve().parents[1] / "tui"

# Raised and caught inside one module, never shown as they are (each becomes a host's state, a
# problem line or a DashboardError at its boundary); OutputLost is a BaseException on purpose.
INTERNAL = {
    "tui.transport.ssh.ConnectFailure",  # classified into the host's LinkStatus
    "tui.transport.sshfiles.FileProblem",  # becomes a ConnectFailure naming the file
    "tui.transport.http._PastDeadline",  # becomes HttpTimeout
    "tui.cluster.agent_delta.BadDelta",  # a line of the host's problem list
    "tui.cluster.agent_delta.StaleDelta",  # a delta skipped until the next full sample
    "tui.cluster.dashboard_schema.AnswerError",  # becomes a DashboardError
    "tui.jobs.verl_compose._Unresolvable",  # the fast resolution declines: OmegaConf's way
    "tui.interrupts.OutputLost",  # ends a command like KeyboardInterrupt does
}
# What may hold a user's error: everything but the UI (its own presenter) and the remote
# programs (stdlib only, shipped to hosts).
SKIP = ("tui/remote/", "tui/screens/", "tui/widgets/", "tui/app.py", "tui/palette.py")


def _exception_classes() -> list[type[BaseException]]:
    """Every exception class defined in a module below the UI (found with ast, then imported)."""
    found = []
    for path in sorted(TUI.rglob("*.py")):
        rel = path.relative_to(TUI.parent).as_posix()
        if rel.startswith(SKIP):
            continue
        tree = ast.parse(path.read_text())
        names = [n.name for n in tree.body if isinstance(n, ast.ClassDef) and n.bases]
        if not names:
            continue
        module = importlib.import_module(rel.removesuffix(".py").replace("/", "."))
        for name in names:
            cls = getattr(module, name)
            if isinstance(cls, type) and issubclass(cls, BaseException):
                found.append(cls)
    return found


def test_every_error_below_the_ui_derives_from_the_one_base():
    classes = _exception_classes()
    assert len(classes) >= 40  # the walk found the families (not an empty pass)
    outside = [
        f"{c.__module__}.{c.__qualname__}"
        for c in classes
        if not issubclass(c, VerlTuiError) and f"{c.__module__}.{c.__qualname__}" not in INTERNAL
    ]
    assert outside == [], "derive these from tui.errors.VerlTuiError (or list why not)"
    for c in classes:
        if issubclass(c, VerlTuiError) and c is not VerlTuiError:
            assert c.kind in EXIT_CODES and c.title and c.title != "error", c


def test_kind_gives_the_exit_status_the_docs_promise():
    owner = None
    cases = {
        ConfigError("x", "hosts.yaml", 3): 2,  # bad input: exit 2 (docs/commands.md)
        SchemaError("verl missing"): 2,
        UnknownCommand("verl-tui", "gpu", ["gpus"]): 2,
        LockHeld(owner, "head"): 3,  # another action holds the cluster (docs/reliability.md)
        ClusterBusy("busy"): 3,
        LeaseHeld(owner, 10): 3,  # `watch` while another supervisor runs
        TransportError("node1: down"): 1,
        DashboardError("HTTP 500"): 1,
        BringUpError("not starting"): 1,
        StateError("disk full"): 1,
        ValueError("not ours"): 1,
    }
    assert {type(e).__name__: exit_code(e) for e in cases} == {
        type(e).__name__: code for e, code in cases.items()
    }
    with pytest.raises(BadJobId) as bad:  # a ConfigError and a DashboardError: bad input wins
        check_job_id("../x", "JOB")
    assert isinstance(bad.value, DashboardError) and bad.value.exit_code == 2
    assert isinstance(StateError("x"), OSError)  # `except OSError` callers still take it


def test_str_stays_the_one_line_and_message_title_hint_are_kept():
    err = ConfigError("ssh.port: not a number", "hosts.yaml", 3, hint="see docs/hosts-yaml.md")
    assert str(err) == "hosts.yaml:3: ssh.port: not a number"
    assert (err.message, err.title, err.hint, err.kind) == (
        "ssh.port: not a number",
        "bad input",
        "see docs/hosts-yaml.md",
        "bad_input",
    )
    plain = VerlTuiError("it broke", title="stack dump", hint="verl-tui jobs", kind="refused")
    assert (str(plain), title_of(plain), hint_of(plain), plain.exit_code) == (
        "it broke",
        "stack dump",
        "verl-tui jobs",
        3,
    )
    assert VerlTuiError.title == "error" and VerlTuiError.kind == "failed"  # class untouched
    assert title_of(OSError("x")) == "system error" and hint_of(OSError("x")) is None


def test_the_cli_line_prefix_hint_and_sanitizing():
    err = CkptError("node2: \x1b[31mred\x1b]0;title\x07 and\nmore")
    line = error_line(err, "verl-tui ckpt")
    assert line.startswith("verl-tui ckpt: node2: ") and "\x1b" not in line and "\x07" not in line
    # An error made of lines keeps them (a bring-up names each host on its own line).
    up = BringUpError("not starting: some hosts cannot be used", {"node2": "down\x1b[2J"})
    assert error_line(up, "verl-tui up").splitlines() == [
        "verl-tui up: not starting: some hosts cannot be used",
        "  node2: down",
    ]
    hinted = VerlTuiError("x was queued by alice", hint="--force cancels it anyway")
    assert error_line(hinted, "verl-tui queue") == (
        "verl-tui queue: x was queued by alice (--force cancels it anyway)"
    )
    said = VerlTuiError("cannot read (see verl-tui jobs)", hint="see verl-tui jobs")
    assert error_line(said, "verl-tui logs").count("see verl-tui jobs") == 1  # not twice
    assert error_line(StateError("disk full")) == "verl-tui: error: disk full"
    assert unknown_message("verl-tui profile", "chek", ["check", "list"]) == (
        "verl-tui profile: unknown command 'chek' (did you mean 'check'?)"
    )
    assert unknown_message("verl-tui", "zzz", ["gpus"]) == (
        "verl-tui: unknown command 'zzz' (see verl-tui --help)"
    )


def test_fail_prints_one_line_and_returns_the_kind_s_status(capsys):
    assert fail(LockHeld(None, "head"), "verl-tui up") == 3
    assert (
        capsys.readouterr().err == "verl-tui up: cluster busy: another verl-tui (owner unknown)\n"
    )
    assert fail_with("verl-tui rollouts", "--grep: bad regex", kind="bad_input") == 2
    assert capsys.readouterr().err == "verl-tui rollouts: --grep: bad regex\n"
    # The head's 404 for an unknown id is the job that is not there; other errors as they are.
    gone = DashboardHTTPError("HTTP 404: Job x not found", 404)
    assert fail_job(gone, "verl-tui stack", "x") == 1
    assert capsys.readouterr().err == (
        "verl-tui stack: no job 'x' on the head (verl-tui jobs lists them)\n"
    )
    assert fail_job(TransportError("node1 is down"), "verl-tui stack", "x") == 1
    assert capsys.readouterr().err == "verl-tui stack: node1 is down\n"


def test_cli_exit_status_by_kind(tmp_path, monkeypatch):
    """Through the real command line: bad input 2, refused 3, one line each, no traceback."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    env = {**os.environ}
    bad = tmp_path / "bad.yaml"
    bad.write_text("cluster: c\nhosts:\n  - name: n1\n    address: [1\n")
    out = run_cli(["jobs", str(bad)], env=env, timeout=60)
    assert out.returncode == 2 and out.stdout == "", out
    assert out.stderr.startswith(f"verl-tui: error: {bad}:") and out.stderr.count("\n") == 1

    # Another user's entry in the queue of a cluster on this machine: refused without --force.
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text("cluster: errs\nhosts:\n  - name: h\n    transport: local\n")
    JobQueue("errs").add(
        QueueEntry(
            submission_id="theirs-1",
            cluster="errs",
            queued_at=time.time(),
            entrypoint_argv=["python3", "-c", "print(1)"],
            needs=Needs(1, 1),
            owner="alice@login9",
        )
    )
    out = run_cli(["queue", str(hosts), "--cancel", "theirs-1"], env=env, timeout=60)
    assert out.returncode == 3, out
    assert out.stderr.startswith("verl-tui queue: theirs-1 was queued by alice@login9, not you")
    assert out.stderr.endswith("(--force cancels it anyway)\n") and out.stderr.count("\n") == 1
    assert [e.submission_id for e in JobQueue("errs").entries()] == ["theirs-1"]  # kept


def test_a_host_s_env_setup_failure_names_the_key_that_fixes_it():
    """A real env_setup step failing (the local transport runs it as a host's shell does)."""
    failing = LocalTransport("here", HostShell(("echo about to fail", "false")))
    with pytest.raises(EnvSetupFailed) as err:
        asyncio.run(failing.run(["true"]))
    assert err.value.hint == "here's env_setup: in hosts.yaml" and err.value.exit_code == 1
    assert error_line(err.value, "verl-tui logs") == (
        "verl-tui logs: here: env_setup failed (exit 1) at `false`: about to fail "
        "(here's env_setup: in hosts.yaml)"
    )
