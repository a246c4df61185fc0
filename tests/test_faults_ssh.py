"""Stalled, half-answering and flapping SSH hosts (issue 23): every wait has a deadline.

Real OpenSSH hosts in namespaces (tests/harness). A host is made hostile through hosts.yaml's
`env_setup`, which runs before every command there: `sleep 100000` is a host whose commands
never answer (a hung NFS mount), a half JSON line on the command's stdout then a sleep is one
that answers partly and stalls, and a step that kills its own session's sshd a moment later is
a host whose connection drops after each exec. `up`, `down`, `check` and `gpus --once` must each
end within their deadline plus a margin, name the host in one line, show the other hosts'
results and leave nothing running on the stalled host. Deadlines are small here through
hosts.yaml's ssh.command_timeout (the product's own knob).

Also: ssh.user (and the other ssh fields) refused at load naming the line, and the command lines
the doctor prints to copy are quoted (run through a real shell, the host-key fix line writes the
key into a known_hosts file whose name has a space and a quote).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
from harness.cli import run_cli

from tui.config.hosts import load_inventory
from tui.config.yamlfile import ConfigError
from tui.shellcmd import copy_line
from tui.transport.deadline import CommandTimeout, within
from tui.transport.fleet import Fleet

PY = sys.executable
CT = 6.0  # ssh.command_timeout in these files: a healthy probe answers well within it

STALL = "sleep 100000"
# A half JSON line on the command's own stdout (env_setup's stdout goes to stderr; fd 3 is
# the command's), then nothing.
HALF_LINE = "printf '{\"held\": 1' >&3; sleep 100000"
# Kill this session's sshd (the nearest sshd ancestor, never the listener, PID 1) 0.3 s after
# each exec, and hold the command back until then: the connection drops under every command
# before it can answer.
DROP = (
    'p=$$; while [ "$p" -gt 1 ]; do case "$(cat /proc/$p/comm)" in sshd*) break;; esac; '
    "p=$(cut -d' ' -f4 /proc/$p/stat); done; "
    '[ "$p" -gt 1 ] && (sleep 0.3; kill -9 "$p") </dev/null >/dev/null 2>&1 & sleep 1'
)


@pytest.fixture(scope="module")
def hosts(tmp_path_factory):
    """Three hosts (node1 the head) shared by the module; each test writes its own hosts.yaml
    and state dir. Left as found: no test leaves a process on a host (asserted)."""
    from harness.nshosts import NsCluster

    work = tmp_path_factory.mktemp("faults")
    cluster = NsCluster(3, work / "hosts")
    cluster.start()
    try:
        yield cluster, work
    finally:
        cluster.stop()


def write_hosts(cluster, path: Path, faulty: dict[str, str], **ssh_fields) -> Path:
    extra = {name: {"env_setup": [setup]} for name, setup in faulty.items()}
    return cluster.write_hosts_yaml(
        path,
        python=PY,
        extra_host_fields=extra,
        ssh_fields={"connect_timeout": 5, "command_timeout": CT, **ssh_fields},
        top_fields={"ray": {"memory": 1000000000, "object_store_memory": 100000000}},
    )


def cli(work: Path, *args: str, limit: float) -> tuple[subprocess.CompletedProcess, float]:
    """Run verl-tui; a run past `limit` seconds is the hang this module is about."""
    env = {**os.environ, "XDG_STATE_HOME": str(work / "state")}
    t0 = time.monotonic()
    try:
        proc = run_cli([*args], env=env, timeout=limit)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"verl-tui {' '.join(args[:2])} still running after {limit:.0f} s: {exc}")
    took = time.monotonic() - t0
    print(f"verl-tui {args[0]}: {took:.1f} s\n{proc.stdout}\n{proc.stderr}")
    assert "Traceback" not in proc.stdout + proc.stderr
    return proc, took


def left_on(cluster, name: str, pattern: str = "sleep 100000") -> list[str]:
    """The host's processes matching `pattern` (a stall the transport gave up on must have
    been killed with its group), after up to 10 s for the kill to land."""
    deadline = time.monotonic() + 10
    while True:
        ps = cluster.exec_in(name, ["ps", "-eo", "pid,args"]).stdout.splitlines()
        found = [line for line in ps if pattern in line and "ps -eo" not in line]
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


# ---- up / down / check / gpus against a stalled, half-answering or flapping host ----------------


def test_up_names_a_stalled_worker_and_probes_the_rest(hosts, tmp_path):
    cluster, _ = hosts
    path = write_hosts(cluster, tmp_path / "hosts.yaml", {"node2": STALL})
    proc, took = cli(tmp_path, "up", str(path), limit=CT + 60)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        "verl-tui up: not starting: some hosts cannot be used",
        f"  node2: `probe` gave no answer in {CT:g} s (host stalled?)",
    ]
    table = {ln.split()[0]: ln for ln in proc.stdout.splitlines() if ln.startswith("node")}
    assert "3.11" in table["node1"] and "3.11" in table["node3"], proc.stdout  # probed
    assert "gave no answer" in table["node2"]
    assert took < CT + 30
    assert left_on(cluster, "node2") == []


def test_up_with_a_head_that_prints_half_a_line_and_stalls(hosts, tmp_path):
    """The head lock's helper must answer one line: half a JSON line is no answer. up goes on
    with this machine's lock only, then refuses the head whose probe does not finish."""
    cluster, _ = hosts
    path = write_hosts(cluster, tmp_path / "hosts.yaml", {"node1": HALF_LINE})
    proc, took = cli(tmp_path, "up", str(path), limit=2 * CT + 60)
    assert proc.returncode == 1
    lock = [ln for ln in proc.stdout.splitlines() if " lock " in ln]
    assert len(lock) == 1 and lock[0].endswith(
        f"no lock on the head: `cluster lock` gave no answer in {CT:g} s (host stalled?)"
    ), proc.stdout
    # Did not finish (the half line came), or, on a host so loaded that the setup had not
    # printed it yet, gave no answer: either way node1, at its deadline.
    assert re.fullmatch(
        rf"  node1: `probe` (did not finish in {CT:g} s|gave no answer in {CT:g} s "
        r"\(host stalled\?\))",
        proc.stderr.strip().splitlines()[-1],
    ), proc.stderr
    assert took < 2 * CT + 30
    assert left_on(cluster, "node1") == []


@pytest.mark.parametrize("stalled", ["node2", "node1"])
def test_down_reports_a_stalled_host_and_stops_the_others(hosts, tmp_path, stalled):
    """node2: a worker; node1: the head (its lock and its `ray stop` both time out)."""
    cluster, _ = hosts
    path = write_hosts(cluster, tmp_path / "hosts.yaml", {stalled: STALL})
    proc, took = cli(tmp_path, "down", str(path), limit=4 * CT + 60)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        f"verl-tui down: {stalled}: `ray stop` gave no answer in {2 * CT:g} s (host stalled?)"
    ]
    for other in {"node1", "node2", "node3"} - {stalled}:
        assert re.search(rf"✓ {other} +stop +no Ray process left", proc.stdout), proc.stdout
    assert took < 4 * CT + 40
    assert left_on(cluster, stalled) == []


def test_check_fails_the_stalled_host_within_its_timeout(hosts, tmp_path):
    cluster, _ = hosts
    path = write_hosts(cluster, tmp_path / "hosts.yaml", {"node2": STALL})
    timeout = 15.0
    proc, took = cli(tmp_path, "check", str(path), "--json", "--timeout", "15", limit=timeout + 40)
    assert proc.returncode == 1
    rows = json.loads(proc.stdout)["checks"]
    interp = {r["host"]: r for r in rows if r["check"] == "python-interpreter"}
    assert interp["node2"]["status"] == "fail"
    assert "`probe` gave no answer in" in interp["node2"]["finding"]
    assert "ssh.command_timeout" in interp["node2"]["fix"]
    ok = [r for r in rows if r["check"] == "python-interpreter" and r["status"] == "ok"]
    assert "node1" in json.dumps(ok) and "node3" in json.dumps(ok)  # the others answered
    assert took < timeout + 15
    assert left_on(cluster, "node2") == []


@pytest.mark.parametrize("fault", ["flapping", "stalled"])
def test_gpus_once_ends_by_its_timeout(hosts, tmp_path, fault):
    """A host whose connection drops 0.3 s after each exec (the agent never gets to answer)
    or whose agent never answers: gpus --once --timeout 8 prints one line per host and exits
    1 about then; it used to print 'Connection lost' and never exit."""
    cluster, _ = hosts
    setup = DROP if fault == "flapping" else STALL
    path = write_hosts(cluster, tmp_path / "hosts.yaml", {"node2": setup})
    proc, took = cli(tmp_path, "gpus", str(path), "--once", "--timeout", "8", limit=40)
    assert proc.returncode == 1
    lines = proc.stdout.strip().splitlines()
    assert [ln.split()[0] for ln in lines] == ["node1", "node2", "node3"], proc.stdout
    assert "[no NVML]" in lines[0] and "[no NVML]" in lines[2]  # the others answered
    if fault == "stalled":
        assert lines[1] == "node2  [starting]  no sample in 8 s (host stalled?)"
    else:
        assert re.match(r"node2  \[(lost|connecting|starting)\]  \S", lines[1]), lines[1]
    assert took < 8 + 12
    if fault == "stalled":
        assert left_on(cluster, "node2") == []


# ---- the transport's deadlines, one level down ----------------------------------------------------


async def test_run_and_first_line_deadlines_end_the_command(hosts, tmp_path):
    """run() past its timeout and a stream whose first line does not come: CommandTimeout
    naming host and command, soon after the deadline, and the command's group killed."""
    cluster, _ = hosts
    inv = load_inventory(write_hosts(cluster, tmp_path / "hosts.yaml", {"node2": HALF_LINE}))
    async with Fleet(inv) as fleet:
        transport = await fleet.ready("node2", 20)
        t0 = time.monotonic()
        with pytest.raises(CommandTimeout) as err:
            await transport.run(["true"], timeout=2 * CT, what="true")
        assert time.monotonic() - t0 < 2 * CT + 6
        # The half line came: slow, not silent.
        assert str(err.value) == f"node2: `true` did not finish in {2 * CT:g} s"
        assert err.value.answered
        stream = await transport.stream(["cat"], first_line=CT, what="cat")
        t0 = time.monotonic()
        seen = []
        with pytest.raises(CommandTimeout) as err:
            async for line in stream.lines():
                seen.append(line)
        assert seen == []  # the half line is never handed on as a line
        assert str(err.value) == f"node2: `cat` gave no answer in {CT:g} s (host stalled?)"
        assert time.monotonic() - t0 < CT + 6
        await stream.close()
        # The same deadline on a stream whose lines go to a callback (telemetry's mode), on a
        # healthy host: a silent command times out, a talking one is left alone.
        node1 = await fleet.ready("node1", 20)
        got: list[str] = []
        quiet = await node1.stream(["sleep", "100"], on_line=got.append, first_line=2)
        with pytest.raises(CommandTimeout, match="gave no answer in 2 s"):
            await quiet.finished()
        await quiet.close()
        # (the deadline twice CT: a loaded box took over CT to start the command and say a)
        talking = await node1.stream(
            ["sh", "-c", f"echo a; sleep {2 * CT + 1:g}; echo b"],
            on_line=got.append,
            first_line=2 * CT,
        )
        await talking.finished()  # b comes after the first-line deadline: a disarmed it
        await talking.close()
        assert got == ["a", "b"]
    assert left_on(cluster, "node2") == []
    assert left_on(cluster, "node1", "sleep 100") == []


def _running(pid: int) -> bool:
    """Whether `pid` is alive (not gone, not a zombie), after up to 2 s for a kill to land."""
    deadline = time.monotonic() + 2
    while True:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1][0]
        except (OSError, IndexError):
            return False
        if state == "Z" or time.monotonic() > deadline:
            return state != "Z"
        time.sleep(0.05)


async def test_local_transport_has_the_same_deadlines(tmp_path):
    """The local transport (localhost, no SSH): the same CommandTimeout, and the command's
    whole group killed (the shell's child too, not only the shell)."""
    from tui.transport.local import LocalTransport

    transport = LocalTransport("here", command_timeout=0.5)
    pids = tmp_path / "pids"
    script = f"sleep 100 & echo $! > {shlex.quote(str(pids))}; printf half; wait"
    t0 = time.monotonic()
    with pytest.raises(CommandTimeout) as err:
        await transport.run(["sh", "-c", script], what="sleeper")
    assert time.monotonic() - t0 < 0.5 + 3
    assert str(err.value) == "here: `sleeper` did not finish in 0.5 s"
    assert not _running(int(pids.read_text()))
    stream = await transport.stream(["sh", "-c", "printf half; sleep 100"], first_line=0.5)
    with pytest.raises(CommandTimeout) as err:
        assert [line async for line in stream.lines()] == []
    assert "gave no answer in 0.5 s (host stalled?)" in str(err.value)
    await stream.close()
    assert stream.exit_status is not None  # ended, not left running


async def test_within_never_loses_a_cancel():
    """The race asyncio.wait_for (before 3.12) loses: the awaited thing finishes in the same
    loop turn as the caller is cancelled. within() raises the cancel."""
    loop = asyncio.get_running_loop()
    inner = loop.create_future()
    outer = asyncio.ensure_future(within(inner, 10))
    await asyncio.sleep(0)  # outer waits on inner now
    inner.set_result("done")
    outer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await outer
    with pytest.raises(asyncio.TimeoutError):
        await within(asyncio.sleep(5), 0.05)


# ---- copy-paste injection: ssh fields at load, quoted fix lines ---------------------------------


def _hosts_text(user: str, **extra: str) -> str:
    fields = "".join(f"  {k}: {json.dumps(v)}\n" for k, v in extra.items())
    return f"cluster: c\nssh:\n  user: {json.dumps(user)}\n{fields}hosts:\n  - name: node1\n"


@pytest.mark.parametrize(
    ("text", "key"),
    [
        (_hosts_text("$(touch {mark})"), "ssh.user"),
        (_hosts_text("root; touch {mark}"), "ssh.user"),
        (_hosts_text("-oProxyCommand=touch {mark}"), "ssh.user"),
        (_hosts_text("root", known_hosts="/tmp/kh\n$(touch {mark})"), "ssh.known_hosts"),
        (_hosts_text("root", identity_file=""), "ssh.identity_file"),
        ("cluster: c\nhosts:\n  - name: node1\n    ssh:\n      user: 'a b'\n", "hosts[0].ssh.user"),
        ("cluster: c\nssh:\n  port: yes\nhosts:\n  - name: node1\n", "ssh.port"),
    ],
)
def test_ssh_fields_refused_at_load_naming_the_line(tmp_path, text, key):
    mark = tmp_path / "pwned"
    path = tmp_path / "hosts.yaml"
    path.write_text(text.replace("{mark}", str(mark)))
    with pytest.raises(ConfigError) as err:
        load_inventory(path)
    message = str(err.value)
    assert message.startswith(f"{path}:") and f": {key}: " in message, message
    line_no = int(message.split(":")[1])
    assert key.rsplit(".", 1)[-1] in path.read_text().splitlines()[line_no - 1]
    if "$(touch" in text:  # the case, through the CLI as well: exit 2, one line
        proc = run_cli(["check", str(path)], timeout=60)
        assert proc.returncode == 2 and proc.stdout == ""
        assert proc.stderr.strip() == f"verl-tui: error: {message}"
    assert not mark.exists()


@pytest.mark.parametrize("user", ["root", "first.last@corp.example", "svc$", "a_b-c.d"])
def test_real_login_names_load(tmp_path, user):
    """The rule refuses shell and option syntax, not real names: a directory's fully qualified
    one (SSSD) and a machine account's trailing '$' included."""
    path = tmp_path / "hosts.yaml"
    path.write_text(_hosts_text(user))
    assert load_inventory(path).hosts[0].ssh.user == user


def test_copy_line_round_trips_hostile_words():
    words = ["ssh", "-p", "22", "$(touch x)@h", "a b", "it's", 'q"uote', "`id`", "~/my keys/k", ";"]
    line = copy_line(words, append_to="/tmp/a b/known's")
    assert shlex.split(line) == [*words, ">>", "/tmp/a b/known's"]
    assert line.startswith("ssh -p 22 '$(touch x)@h' 'a b' ") and "~/'my keys/k'" in line


def test_fix_lines_are_quoted_and_work_in_a_shell(hosts, tmp_path):
    """A known_hosts path with a space and a quote, and an identity file with a space that the
    host does not accept: check's fix lines round-trip through shlex.split, and the host-key
    line, run by a real shell, writes the host's key into that file (then check connects)."""
    cluster, _ = hosts
    weird = tmp_path / "my known's hosts"
    key = tmp_path / "a key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    path = cluster.write_hosts_yaml(
        tmp_path / "hosts.yaml",
        python=PY,
        names=["node1", "node2"],
        extra_host_fields={
            "node1": {"ssh": {"known_hosts": str(weird)}},
            "node2": {"ssh": {"identity_file": str(key)}},
        },
        ssh_fields={"connect_timeout": 5},
    )
    proc, _ = cli(tmp_path, "check", str(path), "--json", "--timeout", "20", limit=60)
    reach = {r["host"]: r for r in json.loads(proc.stdout)["checks"] if r["check"] == "ssh-reach"}
    address = {h.name: h.address for h in cluster.hosts}
    keyscan = reach["node1"]["fix"].split("then: ", 1)[1]
    assert shlex.split(keyscan) == ["ssh-keyscan", address["node1"], ">>", str(weird)]
    try_ssh = reach["node2"]["fix"].split("try: ", 1)[1]
    assert shlex.split(try_ssh) == [
        "ssh",
        "-i",
        str(key),
        "-p",
        "22",
        f"root@{address['node2']}",
        "true",
    ]
    subprocess.run(["sh", "-c", keyscan], check=True, capture_output=True, timeout=30)
    assert address["node1"] in weird.read_text()
    proc, _ = cli(tmp_path, "check", str(path), "--json", "--timeout", "20", limit=60)
    reach = {r["host"]: r for r in json.loads(proc.stdout)["checks"] if r["check"] == "ssh-reach"}
    assert reach["node1"]["status"] == "ok", reach["node1"]
