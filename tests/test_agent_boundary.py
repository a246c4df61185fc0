"""GPU agent output is untrusted input: the boundary schema, bounded line reading, and a forged
hostile agent installed as a host's `python:` — on a real namespace sshd host (TelemetryMonitor,
`verl-tui gpus --once/--json`) and on the local transport under the Cluster screen (Pilot)."""

from __future__ import annotations

import asyncio
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from harness.cli import run_cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tui.cluster.agent_schema import (
    MAX_GPUS,
    MAX_PROCESSES,
    gpu_from_json,
    parse_line,
    parse_message,
    sample_from_json,
)
from tui.cluster.models import GPU_METRICS, GpuProcess, GpuSample, HostSample, TelemetryState
from tui.cluster.telemetry import MAX_AGENT_LINE, TelemetryMonitor
from tui.config.hosts import load_inventory, parse_inventory
from tui.transport.fleet import Fleet
from tui.transport.lines import LineSplitter

ROOT = Path(__file__).resolve().parents[1]
ESC = "\x1b"
INTERVAL = 0.2

# --- what a hostile or broken agent sends ------------------------------------------------------


def _sample(**kw) -> dict:
    return {"type": "sample", "seq": 1, "t": time.time(), "source": "nvml", **kw}


def _gpu(index=0, **kw) -> dict:
    return {
        "index": index,
        "name": "H100",
        "uuid": "GPU-1",
        "util_percent": 10.0,
        "memory_used_bytes": 1 << 30,
        "memory_total_bytes": 80 << 30,
        **kw,
    }


HOSTILE: list[bytes] = [
    json.dumps(
        {
            "type": "hello",
            "hostname": f"evil{ESC}]0;pwned\x07host",
            "driver": f"{ESC}[2J535",
            "ncpu": "many",
            "pid": -4,
        }
    ).encode(),
    json.dumps(_sample(gpus=[_gpu(util_percent="high", name=f"{ESC}]0;TITLE\x07H100")])).encode(),
    b'{"type":"sample","gpus":[{"index":0,"util_percent":NaN,"temperature_c":Infinity,'
    b'"power_w":-Infinity,"memory_used_bytes":1e400}]}',
    json.dumps(_sample(gpus=[_gpu(memory_total_bytes=10**40, power_w=1e300)])).encode(),
    json.dumps(_sample(gpus=[{"index": True, "util_percent": True}])).encode(),
    json.dumps(_sample(host=[1], gpus={"0": {}})).encode(),
    json.dumps(_sample(host={"cpu_percent": {"x": 1}, "ncpu": [8]}, gpus=[[1]])).encode(),
    json.dumps(_sample(gpus=[1, "x", None, {"index": -1}, _gpu(0), _gpu(0), _gpu(1.5)])).encode(),
    json.dumps(_sample(gpus=[{"index": i} for i in range(10_000)])).encode(),
    json.dumps(_sample(gpus=[_gpu(0, processes={"pid": 1})])).encode(),
    json.dumps(_sample(gpus=[_gpu(0, processes=[{"pid": "x"}, {"name": "y"}] * 500)])).encode(),
    json.dumps(_sample(seq="x", t="now", source=f"{ESC}[2Jevil", error=["e"])).encode(),
    json.dumps({"type": "error", "error": {"nested": [1]}}).encode(),
    b"\xff\xfe\x00\x01garbage \x9b\x1b[31m not utf-8",
    bytes(range(256)).replace(b"\n", b""),
    b"[1,2,3]",
    b'"just a string"',
    b"42",
    b"null",
    b'{"type":5}',
    b"{}",
    b"[" * 100_000,
    b'{"type":"sample","seq":' + b"9" * 5000 + b"}",
    b"x" * (3 * MAX_AGENT_LINE),  # an overlong line: dropped and counted by the stream reader
    b"",
]


def valid_line(util: float, seq: int) -> bytes:
    return json.dumps(
        _sample(
            seq=seq,
            host={"cpu_percent": 5.0, "ncpu": 8},
            gpus=[_gpu(0, util_percent=util), _gpu(1, util_percent=util)],
        ),
        separators=(",", ":"),
    ).encode()


def forged_agent(path: Path, hostile: list[bytes], *, util: float = 42.0) -> str:
    """An executable that ignores its arguments (the agent's `-u -c SOURCE --interval`), writes
    `hostile` lines, then valid 2-GPU samples every INTERVAL s until stdin closes."""
    data = path.with_suffix(".lines")
    data.write_bytes(b"".join(line + b"\n" for line in hostile))
    path.write_text(
        f"#!{sys.executable}\n"
        "import os, sys, json, threading, time\n"
        "out = sys.stdout.buffer\n"
        f"out.write(open({str(data)!r}, 'rb').read()); out.flush()\n"
        "done = threading.Event()\n"
        "threading.Thread(target=lambda: (sys.stdin.buffer.read(), done.set()), daemon=True)"
        ".start()\n"
        "seq = 0\n"
        "while not done.wait(" + repr(INTERVAL) + "):\n"
        "    seq += 1\n"
        "    out.write(json.dumps({'type': 'sample', 'seq': seq, 't': time.time(),"
        " 'source': 'nvml', 'host': {'cpu_percent': 5.0, 'ncpu': 8}, 'gpus': ["
        f"{{'index': i, 'name': 'H100', 'util_percent': {util!r}, 'memory_used_bytes': 1,"
        " 'memory_total_bytes': 2} for i in range(2)]}).encode() + b'\\n')\n"
        "    out.flush()\n"
    )
    path.chmod(0o755)
    return str(path)


# --- the schema itself ---------------------------------------------------------------------------

NUMERIC_GPU = tuple(m.key for m in GPU_METRICS)  # the one table's per-GPU numbers
NUMERIC_HOST = ("cpu_percent", "load1", "mem_used_bytes", "mem_total_bytes", "ncpu")


def is_num(v: object) -> bool:
    return v is None or type(v) is int or (type(v) is float and math.isfinite(v))


def is_text(v: object, limit: int = 400) -> bool:
    return v is None or (
        type(v) is str and len(v) <= limit and ESC not in v and "\x07" not in v and "\n" not in v
    )


def assert_well_typed(sample: HostSample) -> None:
    assert type(sample.seq) is int and type(sample.t) is float and math.isfinite(sample.t)
    assert sample.source in ("nvml", "nvidia-smi", "none")
    assert is_text(sample.error)
    for key in NUMERIC_HOST:
        assert is_num(getattr(sample, key)), key
    assert isinstance(sample.gpus, tuple) and len(sample.gpus) <= MAX_GPUS
    indexes = [g.index for g in sample.gpus]
    assert len(set(indexes)) == len(indexes) and all(type(i) is int and i >= 0 for i in indexes)
    for g in sample.gpus:
        assert isinstance(g, GpuSample)
        for key in NUMERIC_GPU:
            assert is_num(getattr(g, key)), key
        assert is_text(g.name) and is_text(g.uuid) and is_text(g.error)
        assert g.processes is None or len(g.processes) <= MAX_PROCESSES
        for p in g.processes or ():
            assert isinstance(p, GpuProcess) and type(p.pid) is int and p.pid >= 0
            assert is_num(p.memory_bytes) and is_text(p.name)


def test_bad_fields_become_none_with_a_named_problem() -> None:
    msg = parse_line(HOSTILE[1], 100.0)
    assert msg.kind == "sample" and msg.sample is not None
    gpu = msg.sample.gpus[0]
    assert gpu.util_percent is None and gpu.memory_used_bytes == 1 << 30  # the rest is kept
    assert ESC not in gpu.name and "\x07" not in gpu.name and gpu.name.endswith("H100")
    assert (
        "gpus[0].util_percent",
        "bad data: field gpus[0].util_percent (got 'high')",
    ) in msg.problems


def test_non_finite_huge_and_bool_numbers_are_refused() -> None:
    nan = parse_line(HOSTILE[2], 1.0)
    g = nan.sample.gpus[0]
    assert (g.util_percent, g.temperature_c, g.power_w, g.memory_used_bytes) == (None,) * 4
    assert {p for p, _ in nan.problems} == {
        "gpus[0].util_percent",
        "gpus[0].temperature_c",
        "gpus[0].power_w",
        "gpus[0].memory_used_bytes",
    }
    huge = parse_line(HOSTILE[3], 1.0)
    assert huge.sample.gpus[0].memory_total_bytes is None and huge.sample.gpus[0].power_w is None
    assert any("a huge int" in m for _, m in huge.problems)
    boolean = parse_line(HOSTILE[4], 1.0)
    assert boolean.sample.gpus == ()  # an index that is a bool is no index: the entry goes
    assert boolean.problems[0][0] == "gpus[0].index"


def test_wrong_shapes_never_raise() -> None:
    shapes = parse_line(HOSTILE[5], 7.0)
    assert shapes.kind == "sample" and shapes.sample.gpus == () and shapes.sample.ncpu is None
    assert [p for p, _ in shapes.problems] == ["host", "gpus"]
    assert "not an object, got a list of 1" in shapes.problems[0][1]
    dup = parse_line(HOSTILE[7], 7.0)
    assert [g.index for g in dup.sample.gpus] == [0]
    assert any("duplicate" in m for _, m in dup.problems)
    many = parse_line(HOSTILE[8], 7.0)
    assert len(many.sample.gpus) == MAX_GPUS
    assert any(f"more than {MAX_GPUS}" in m for _, m in many.problems)
    procs = parse_line(HOSTILE[10], 7.0)
    assert procs.sample.gpus[0].processes == ()
    assert len(procs.problems) == 8 and procs.dropped_problems > 0  # bounded, counted
    top = parse_line(HOSTILE[11], 7.0)
    assert top.sample.seq == 0 and top.sample.t == 7.0 and top.sample.error is None


@pytest.mark.parametrize("raw", HOSTILE[13:22])
def test_not_agent_json_is_invalid_not_an_exception(raw: bytes) -> None:
    msg = parse_line(raw.decode("utf-8", "replace"), 1.0)
    assert msg.kind in ("invalid", "other")
    if raw == b'{"type":5}' or raw == b"{}":
        assert msg.kind == "invalid"


def test_from_json_wrappers_validate_too() -> None:
    s = sample_from_json({"host": [1], "gpus": [{"index": 0, "util_percent": "x"}]}, 3.0)
    assert s.gpus[0].util_percent is None and s.mem_total_bytes is None
    assert gpu_from_json({"index": "zero"}) is None
    assert sample_from_json([1], 3.0).gpus == ()


json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.text(max_size=30),
    st.sampled_from([float("nan"), float("inf"), 10**40, -1, 2**63, "1e3"]),
)
json_any = st.recursive(
    json_leaf,
    lambda kids: st.one_of(
        st.lists(kids, max_size=5), st.dictionaries(st.text(max_size=12), kids, max_size=5)
    ),
    max_leaves=25,
)
gpu_like = st.fixed_dictionaries(
    {},
    optional={k: json_any for k in ("index", *NUMERIC_GPU, "name", "uuid", "error", "processes")},
)
process_like = st.fixed_dictionaries(
    {}, optional={"pid": json_any, "name": json_any, "memory_bytes": json_any}
)
gpu_like = st.one_of(
    gpu_like,
    st.builds(lambda g, ps: {**g, "processes": ps}, gpu_like, st.lists(process_like, max_size=4)),
)
message_like = st.fixed_dictionaries(
    {"type": st.sampled_from(["sample", "hello", "error", "other", 3, None])},
    optional={
        "seq": json_any,
        "t": json_any,
        "source": json_any,
        "error": json_any,
        "driver": json_any,
        "hostname": json_any,
        "ncpu": json_any,
        "host": st.one_of(
            json_any, st.fixed_dictionaries({}, optional={k: json_any for k in NUMERIC_HOST})
        ),
        "gpus": st.one_of(json_any, st.lists(st.one_of(gpu_like, json_any), max_size=6)),
    },
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(message_like, json_any))
def test_property_any_json_value_gives_typed_output(msg) -> None:
    line = parse_message(msg, 5.0)
    assert line.kind in ("hello", "sample", "error", "other", "invalid")
    if line.sample is not None:
        assert_well_typed(line.sample)
    if line.hello is not None:
        h = line.hello
        assert all(is_text(v) for v in (h.hostname, h.driver, h.python, h.error))
        assert all(is_num(v) for v in (h.ncpu, h.pid, h.agent))
    for path, problem in line.problems:
        assert type(path) is str and is_text(problem) and problem.startswith("bad data: field ")
    # Whatever came in, the --json form of a sample is strict JSON (no NaN/Infinity).
    if line.sample is not None:
        json.dumps([g.to_json() for g in line.sample.gpus], allow_nan=False)


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.binary(max_size=300).map(lambda b: b.decode("utf-8", "replace")),
        st.text(max_size=300),
        message_like.map(json.dumps),
    )
)
def test_property_any_line_never_raises(text: str) -> None:
    line = parse_line(text, 5.0)
    assert line.kind in ("hello", "sample", "error", "other", "invalid")
    if line.sample is not None:
        assert_well_typed(line.sample)


# --- bounded line reading ------------------------------------------------------------------------


def test_splitter_drops_overlong_lines_and_keeps_memory_bounded() -> None:
    sp = LineSplitter(max_line=100)
    out = sp.feed(b"ok1\n" + b"x" * 50)
    assert out == [b"ok1"]
    for _ in range(10_000):  # a megabyte-sized line without a newline, in chunks
        assert sp.feed(b"y" * 100) == []
        assert len(sp._buf) <= 100
    assert sp.oversize == 1
    assert sp.feed(b"tail of the long one\nok2\nz" * 1) == [b"ok2"]
    assert sp.feed(b"\n" + b"w" * 101 + b"\nok3\n") == [b"z", b"ok3"]
    assert sp.oversize == 2 and sp.flush() is None
    sp.feed(b"partial")
    assert sp.flush() == b"partial"


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=40), max_size=30), st.integers(min_value=1, max_value=20))
def test_property_splitter_matches_split(chunks: list[bytes], limit: int) -> None:
    sp = LineSplitter(max_line=limit)
    got = [line for c in chunks for line in sp.feed(c)]
    tail = sp.flush()
    whole = b"".join(chunks).split(b"\n")
    expect = [w for w in whole[:-1] if len(w) <= limit]
    assert got == expect
    assert sp.oversize == sum(1 for w in whole[:-1] if len(w) > limit) + (
        1 if len(whole[-1]) > limit else 0
    )
    assert tail == (whole[-1] if whole[-1] and len(whole[-1]) <= limit else None)


# --- a forged hostile agent on a real SSH host -----------------------------------------------------


def hosts_yaml(cluster, path: Path, python: str) -> Path:
    lines = [
        "cluster: hostile",
        f"python: {python}",
        "telemetry:",
        f"  interval: {INTERVAL}",
        "ssh:",
        "  user: root",
        f"  identity_file: {cluster.client_key}",
        f"  known_hosts: {cluster.known_hosts}",
        "  config: ''",
        "  connect_timeout: 3",
        "hosts:",
    ]
    for h in cluster.hosts[:1]:
        lines += [f"  - name: {h.name}", f"    address: {h.address}"]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def ns_one(ns_hosts, tmp_path_factory):

    cluster = ns_hosts(1, tmp_path_factory.mktemp("hostile"))
    yield cluster
    cluster.stop()


async def test_monitor_keeps_a_hostile_host_alive_and_reports(ns_one, tmp_path) -> None:
    agent = forged_agent(tmp_path / "agent", HOSTILE)
    inv = load_inventory(hosts_yaml(ns_one, tmp_path / "hosts.yaml", agent))
    fleet = Fleet(inv)
    monitor = TelemetryMonitor(fleet, inv, interval=INTERVAL, retry=0.5)
    fleet.start()
    monitor.start()
    try:
        ht = monitor.hosts["node1"]
        deadline = time.monotonic() + 30
        while not (
            ht.latest
            and ht.latest.gpus
            and ht.latest.gpus[0].util_percent == 42.0
            and ht.latest.seq >= 3
        ):
            assert time.monotonic() < deadline, (ht.state, ht.error, ht.problems)
            await asyncio.sleep(0.1)
        assert ht.state == TelemetryState.OK and ht.display_state == "up"
        assert not any(t.done() for t in monitor._tasks)  # the host's task never ended
        problems = "\n".join(ht.current_problems(time.time()))
        for expected in (
            "field gpus[0].util_percent (got ",
            "field host (not an object, got a list of 1)",
            f"field gpus (more than {MAX_GPUS}, kept the first",
            "not JSON",
            "1 line over 1 MiB dropped",
        ):
            assert expected in problems, problems
        assert ESC not in problems and "\x07" not in problems
        assert ht.hostname.startswith("evil") and ESC not in ht.hostname
        assert ht.driver is None or ESC not in ht.driver
        assert ht.bad_lines >= 9 and ht.oversize_lines == 1
        doc = json.dumps(ht.to_json(), allow_nan=False)  # strict JSON, right types
        assert json.loads(doc)["gpus"][0]["util_percent"] == 42.0
    finally:
        await monitor.close()
        await fleet.close()


def run_gpus(hosts: Path, *args: str, timeout: float = 90) -> subprocess.CompletedProcess:
    return run_cli(["gpus", str(hosts), *args], cwd=ROOT, timeout=timeout)


def strict_json(text: str) -> dict:
    def refuse(name: str) -> None:
        raise AssertionError(f"non-standard JSON constant {name}")

    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize("first", [1, 2, 5, 8, 13])
def test_gpus_cli_against_hostile_first_lines(ns_one, tmp_path, first) -> None:
    """`gpus --once` text and `--json` when the very first sample is hostile."""
    agent = forged_agent(tmp_path / "agent", [HOSTILE[0], HOSTILE[first]], util=7.0)
    hosts = hosts_yaml(ns_one, tmp_path / "hosts.yaml", agent)
    text = run_gpus(hosts, "--once", "--timeout", "20")
    assert "Traceback" not in text.stderr and text.returncode in (0, 1), text.stderr
    assert ESC not in text.stdout and "\x07" not in text.stdout
    assert text.stdout.startswith("node1  [")
    out = run_gpus(hosts, "--once", "--json", "--timeout", "20")
    assert "Traceback" not in out.stderr and out.returncode in (0, 1), out.stderr
    doc = strict_json(out.stdout)
    host = doc["hosts"][0]
    assert all(type(p) is str for p in host["problems"])
    for key in NUMERIC_HOST:
        assert is_num(host[key]), key
    for g in host["gpus"]:
        assert type(g["index"]) is int
        for key in NUMERIC_GPU:
            assert is_num(g[key]), (key, g[key])
        assert is_text(g["name"]) and is_text(g["uuid"]) and is_text(g["error"])
    if first == 1:  # the string where a number belongs: null plus a named problem
        assert out.returncode == 0 and host["gpus"][0]["util_percent"] is None
        assert "bad data: field gpus[0].util_percent (got 'high')" in host["problems"]
        assert "problem: bad data: field gpus[0].util_percent (got 'high')" in text.stdout


def test_gpus_json_keeps_streaming_after_garbage(ns_one, tmp_path) -> None:
    """Continuous --json: binary garbage and an overlong line are counted, samples go on."""
    agent = forged_agent(tmp_path / "agent", HOSTILE[12:], util=55.0)
    hosts = hosts_yaml(ns_one, tmp_path / "hosts.yaml", agent)
    proc = subprocess.Popen(
        [sys.executable, "-m", "tui", "gpus", str(hosts), "--json", "--interval", str(INTERVAL)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        docs = []
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            assert line, proc.stderr.read()
            docs.append(strict_json(line))
            host = docs[-1]["hosts"][0]
            if (
                host["gpus"]
                and host["gpus"][0]["util_percent"] == 55.0
                and any("over 1 MiB dropped" in p for p in host["problems"])
            ):
                break
        else:
            raise AssertionError(docs[-1])
        assert host["state"] == "up"
        assert any("lines not JSON" in p for p in host["problems"])  # several: plural
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=20)
    assert proc.returncode == 143 and "Traceback" not in err


async def test_agent_error_line_then_recovery_with_backoff(tmp_path) -> None:
    """An agent that reports an error and exits: host state `error` with its message, the agent
    is started again, and the host recovers when it behaves (local transport: same monitor)."""
    runs = tmp_path / "runs"
    bad = tmp_path / "bad"
    forged_agent(bad, [json.dumps({"type": "error", "error": f"boom{ESC}[2J"}).encode()])
    script = tmp_path / "agent"
    script.write_text(
        "#!/bin/sh\n"
        f"echo run >> {runs}\n"
        f"if [ $(wc -l < {runs}) -le 2 ]; then {bad} --error-once </dev/null | head -n 1; "
        "exit 3; fi\n"
        f"exec {forged_agent(tmp_path / 'good', [])}\n"
    )
    script.chmod(0o755)
    inv = parse_inventory(
        f"cluster: t\nhosts:\n  - name: h\n    transport: local\n    python: {script}\n"
    )
    fleet = Fleet(inv)
    monitor = TelemetryMonitor(fleet, inv, interval=INTERVAL, retry=0.3)
    states: list[tuple[str, str | None]] = []
    ht = monitor.hosts["h"]
    monitor.add_listener(lambda name: states.append((ht.display_state, ht.error)))
    fleet.start()
    monitor.start()
    try:
        deadline = time.monotonic() + 30
        while not (ht.state == TelemetryState.OK and ht.latest and ht.latest.gpus):
            assert time.monotonic() < deadline, states
            await asyncio.sleep(0.05)
    finally:
        await monitor.close()
        await fleet.close()
    assert ("error", "boom") in states  # the agent's own words, sanitized
    assert runs.read_text().count("run") == 3


async def test_unexpected_failure_is_error_state_and_rearmed(
    fake_nvml_lib, tmp_path, monkeypatch
) -> None:
    """A bug while reading (here: the parser raising once) ends nothing: state `error` with the
    message, the agent is restarted, the host comes back."""
    from fakenvml.fakenvml import FakeGpu, write_state

    import tui.cluster.telemetry as telemetry

    state = tmp_path / "nvml.txt"
    write_state(state, [FakeGpu(util=33)])
    monkeypatch.setenv("LD_LIBRARY_PATH", str(fake_nvml_lib))
    monkeypatch.setenv("FAKE_NVML_STATE", str(state))
    real, calls = telemetry.parse_line, []

    def flaky(line, received):
        calls.append(line)
        if len(calls) == 2:
            raise RuntimeError(f"unforeseen{ESC}]0;x\x07")
        return real(line, received)

    monkeypatch.setattr(telemetry, "parse_line", flaky)
    inv = parse_inventory("cluster: t\nhosts:\n  - name: h\n    transport: local\n")
    fleet = Fleet(inv)
    monitor = TelemetryMonitor(fleet, inv, interval=INTERVAL, retry=0.3)
    ht = monitor.hosts["h"]
    seen: list[tuple[str, str | None]] = []
    monitor.add_listener(lambda name: seen.append((ht.display_state, ht.error)))
    fleet.start()
    monitor.start()
    try:
        deadline = time.monotonic() + 30
        while not (len(calls) > 4 and ht.state == TelemetryState.OK):
            assert time.monotonic() < deadline, seen
            await asyncio.sleep(0.05)
        assert ht.latest.gpus[0].util_percent == 33
    finally:
        await monitor.close()
        await fleet.close()
    errors = [e for s, e in seen if s == "error"]
    assert errors and errors[0].startswith("telemetry failed: RuntimeError: unforeseen")
    assert ESC not in errors[0] and "\x07" not in errors[0]


# --- the Cluster screen with a hostile host (Pilot) ----------------------------------------------


async def test_cluster_screen_stays_up_and_shows_problems(tmp_path) -> None:
    from textual.widgets import Static

    from tui.app import VerlTuiApp
    from tui.widgets.gpu_table import GpuTable, Row

    agent = forged_agent(tmp_path / "agent", HOSTILE, util=64.0)
    inv = parse_inventory(
        f"cluster: pilot\nhosts:\n  - name: hostile\n    transport: local\n    python: {agent}\n"
    )
    app = VerlTuiApp(inv, interval=INTERVAL)
    async with app.run_test(size=(150, 40)) as pilot:
        table = app.screen.query_one(GpuTable)
        ht = app.monitor.hosts["hostile"]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while not (
            ht.latest
            and ht.latest.gpus
            and ht.latest.gpus[0].util_percent == 64.0
            and len(table.rows) == 3
        ):
            assert loop.time() < deadline, (ht.state, ht.error, table.rows)
            await pilot.pause(0.1)
        await pilot.pause(0.3)
        lines = [table.render_line(y).text for y in range(table.size.height)]
        assert any("64%" in line for line in lines)
        await pilot.press("g")  # the host's row: its details pane
        assert table.current_row == Row("hostile")
        await pilot.pause(0.3)
        details = str(app.screen.query_one("#details", Static).render())
        assert "bad data: field" in details or "not JSON" in details, details
        assert ESC not in details
        await pilot.press("j")
        await pilot.pause(0.2)
        assert app.is_running
    assert app.return_code in (0, None)


def test_forged_agent_prints_what_it_was_given(tmp_path) -> None:
    """The forged agent itself: hostile bytes verbatim, then valid samples (guards the tests)."""
    agent = forged_agent(tmp_path / "agent", [b"\xffraw", b"[1]"], util=9.0)
    proc = subprocess.Popen(
        [agent, "-u", "-c", "ignored"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        assert proc.stdout.readline() == b"\xffraw\n"
        assert proc.stdout.readline() == b"[1]\n"
        sample = json.loads(proc.stdout.readline())
        assert sample["gpus"][1]["util_percent"] == 9.0
    finally:
        proc.stdin.close()
        proc.wait(10)
    assert proc.returncode == 0
    assert os.access(agent, os.X_OK)


# --- a 100 MB line without a newline does not blow memory ---------------------------------------

HUGE_LINE = [
    "sh",
    "-c",
    "head -c 100000000 /dev/zero | tr '\\0' x; echo; echo ok; printf 'no newline at the end'",
]


async def read_all_traced(stream) -> tuple[list[str], int]:
    import tracemalloc

    tracemalloc.start()
    try:
        got = [line async for line in stream.lines()]
        return got, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        await stream.close()


async def test_local_stream_drops_a_100mb_line_in_bounded_memory() -> None:
    from tui.transport.local import LocalTransport

    stream = await LocalTransport().stream(HUGE_LINE, max_line=1 << 20)
    got, peak = await read_all_traced(stream)
    assert got == ["ok", "no newline at the end"] and stream.oversize_lines == 1
    assert peak < 8 << 20, peak


async def test_ssh_stream_drops_a_100mb_line_in_bounded_memory(ns_one, tmp_path) -> None:
    inv = load_inventory(hosts_yaml(ns_one, tmp_path / "hosts.yaml", sys.executable))
    async with Fleet(inv) as fleet:
        transport = await fleet.ready("node1", 20)
        stream = await transport.stream(HUGE_LINE, max_line=1 << 20)
        got, peak = await read_all_traced(stream)
    assert got == ["ok", "no newline at the end"] and stream.oversize_lines == 1
    assert peak < 16 << 20, peak


async def test_ssh_streams_do_not_keep_their_command(ns_one, tmp_path) -> None:
    """The channel would keep the command line (a shipped program's whole source) for the
    stream's life: 64 MiB at 1,024 agent streams. It is dropped once sent; the command ran."""
    inv = load_inventory(hosts_yaml(ns_one, tmp_path / "hosts.yaml", sys.executable))
    big = "x" * 100_000  # one argument may be at most 128 KiB (MAX_ARG_STRLEN)
    async with Fleet(inv) as fleet:
        transport = await fleet.ready("node1", 20)
        for on_line in (None, [].append):
            stream = await transport.stream(
                ["sh", "-c", "echo started; cat >/dev/null", "sh", big], on_line=on_line
            )
            try:
                assert stream._proc.channel.get_command() is None
                if on_line is None:
                    assert await anext(aiter(stream.lines())) == "started"
            finally:
                await stream.close()


# --- on_line streams: lines handed over from the transport's receive path ------------------------


async def test_ssh_on_line_stream_bounded_and_keeps_the_last_line(ns_one, tmp_path) -> None:
    """The telemetry's mode: each line goes to on_line as its packet arrives (no reader
    task); the same bounds as lines(): a 100 MB line dropped and counted, memory flat, and a
    last line without a newline still delivered when the output ends."""
    import tracemalloc

    inv = load_inventory(hosts_yaml(ns_one, tmp_path / "hosts.yaml", sys.executable))
    got: list[str] = []
    async with Fleet(inv) as fleet:
        transport = await fleet.ready("node1", 20)
        tracemalloc.start()
        try:
            stream = await transport.stream(HUGE_LINE, max_line=1 << 20, on_line=got.append)
            await asyncio.wait_for(stream.finished(), 60)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
            await stream.close()
    assert got == ["ok", "no newline at the end"] and stream.oversize_lines == 1
    assert peak < 16 << 20, peak


async def test_ssh_on_line_consumer_error_ends_the_stream_not_the_connection(
    ns_one, tmp_path
) -> None:
    """An exception in on_line (a bug in a consumer) must not reach asyncssh, whose receive
    path it runs in (it would drop the connection and every other channel): finished() raises
    it, the command is ended, and the same connection runs the next command."""
    inv = load_inventory(hosts_yaml(ns_one, tmp_path / "hosts.yaml", sys.executable))
    seen: list[str] = []

    def consume(line: str) -> None:
        seen.append(line)
        if len(seen) == 3:
            raise ValueError(f"consumer bug at {line}")

    async with Fleet(inv) as fleet:
        transport = await fleet.ready("node1", 20)
        endless = ["sh", "-c", "i=0; while :; do i=$((i+1)); echo line$i; sleep 0.01; done"]
        stream = await transport.stream(endless, on_line=consume)
        try:
            with pytest.raises(ValueError, match="consumer bug at line3"):
                await asyncio.wait_for(stream.finished(), 20)
        finally:
            await stream.close()
        assert seen == ["line1", "line2", "line3"]  # nothing handed over after the error
        result = await transport.run(["echo", "same connection"], timeout=10)
        assert result.ok and result.stdout.strip() == "same connection"
        assert fleet.status("node1").state.value == "up"


async def test_local_on_line_stream_same_contract() -> None:
    from tui.transport.local import LocalTransport

    got: list[str] = []
    stream = await LocalTransport().stream(HUGE_LINE, max_line=1 << 20, on_line=got.append)
    try:
        await asyncio.wait_for(stream.finished(), 60)
    finally:
        await stream.close()
    assert got == ["ok", "no newline at the end"] and stream.oversize_lines == 1

    def boom(line: str) -> None:
        raise RuntimeError(line)

    stream = await LocalTransport().stream(["echo", "first"], on_line=boom)
    try:
        with pytest.raises(RuntimeError, match="first"):
            await stream.finished()
    finally:
        await stream.close()
