"""`verl-tui explain` through the real CLI, each run a process of its own (harness/cli.py; the
installed console script where a reader leaves early)."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from harness.cli import run_cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tui.logs import LogStore, prefilter
from tui.logs.signatures import CLASS_NEEDLES, MIN_LITERAL, PREFILTER, SIGNATURES

ROOT = Path(__file__).resolve().parent.parent
CLI = ROOT / ".venv" / "bin" / "verl-tui"
DRIVER = ROOT / "tests" / "fixtures" / "failure_logs" / "driver.log"


def explain(
    *args: str, stdin: bytes | None = None, timeout: float = 120, fresh: bool = False
) -> subprocess.CompletedProcess[bytes]:
    """`verl-tui explain ARGS`: a process of its own, forked from the warm interpreter
    (harness/cli.py), or a fresh interpreter that is this process's own child (`fresh`: its
    memory shows in RUSAGE_CHILDREN)."""
    return run_cli(["explain", *args], input=stdin, timeout=timeout, text=False, fresh=fresh)


def no_traceback(p: subprocess.CompletedProcess[bytes]) -> None:
    # stdout may quote a log's own traceback; stderr is ours alone
    assert b"Traceback" not in p.stderr, p.stderr[-2000:]


def test_driver_log_findings_and_exit_code():
    p = explain(str(DRIVER))
    no_traceback(p)
    assert p.returncode == 1 and p.stderr == b""
    out = p.stdout.decode()
    lines = out.splitlines()
    heads = [
        ln.split(": ", 2)[0].rsplit(":", 1)[1] + " " + ln.split(": ", 2)[1]
        for ln in lines
        if not ln.startswith("    ") and ": error: " in ln
    ]
    assert heads == ["6 error", "10 error", "13 error", "16 error", "17 error"]
    hints = [ln.split("hint (", 1)[1].split(")", 1)[0] for ln in lines if "hint (" in ln]
    assert hints == ["host_oom", "actor_died", "hydra_failed"]
    assert lines[-1].endswith("17 lines, 5 errors, 0 warnings, 3 with a known cause")


def test_json_shape_and_the_pane_agrees():
    p = explain(str(DRIVER), "--json")
    no_traceback(p)
    assert p.returncode == 1
    doc = json.loads(p.stdout)
    assert list(doc) == ["findings"]
    for f in doc["findings"]:
        assert list(f) == ["line", "text", "severity", "hint"]
        assert f["severity"] in ("error", "warning")
    hinted = {f["line"]: f["hint"] for f in doc["findings"] if f["hint"]}
    # One matcher: the log pane's store gives the same lines the same hints.
    store = LogStore()
    try:
        store.append(DRIVER.read_text(encoding="utf-8"))
        assert {i + 1: store.hint(i).text for i in store.hint_lines()} == hinted
    finally:
        store.close()
    assert [f["line"] for f in doc["findings"]] == [6, 10, 13, 16, 17]


def test_stdin_dash():
    p = explain("-", stdin=DRIVER.read_bytes())
    assert p.returncode == 1
    assert p.stdout.decode().splitlines()[0].startswith("<stdin>:6: error: ")


def test_benign_log_exits_0_with_no_findings(tmp_path):
    lines = [
        ln
        for ln in (ROOT / "tests/fixtures/failure_logs/lines.txt")
        .read_text()
        .split("[benign]", 1)[1]
        .splitlines()
        if ln and not ln.startswith("# ")
    ]
    log = tmp_path / "ok.log"
    log.write_text("\n".join(lines) + "\n")
    p = explain(str(log), "--json")
    assert p.returncode == 0, p.stdout
    assert json.loads(p.stdout) == {"findings": []}


@pytest.mark.parametrize("kind", ["missing", "directory", "fifo", "unreadable"])
def test_bad_input_is_one_line_exit_2(tmp_path, kind):
    target = tmp_path / "x.log"
    if kind == "directory":
        target.mkdir()
    elif kind == "fifo":
        os.mkfifo(target)
    elif kind == "unreadable":
        if os.geteuid() == 0:
            target = Path("/proc/self/mem")  # root reads any mode; this one refuses read()
        else:
            target.write_text("x\n")
            target.chmod(0)
    p = explain(str(target), timeout=30)
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert p.stdout == b""
    err = p.stderr.decode()
    assert err.count("\n") == 1 and err.startswith("verl-tui explain: ") and str(target) in err


def test_empty_file_and_usage_errors(tmp_path):
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    p = explain(str(empty))
    assert p.returncode == 0 and p.stdout.decode().endswith(
        "0 lines, 0 errors, 0 warnings, 0 with a known cause\n"
    )
    p = explain()
    assert p.returncode == 2 and p.stderr.count(b"\n") == 1
    help_text = " ".join(explain("--help").stdout.decode().split())  # argparse wraps lines
    assert "Exit 0: no error found; 1: errors found; 2: bad input" in help_text


def test_huge_lines_binary_and_escapes(tmp_path):
    log = tmp_path / "mixed.log"
    log.write_bytes(
        b"x" * 3_000_000
        + b" tail\n"
        + b"\xff\xfe\x00 \x1b]0;pwned\x07\x1b[2J RuntimeError: CUDA error: out of memory\n"
        + b"y" * 2_500_000  # a last line without a newline, longer than a block
        + b"\nModuleNotFoundError: No module named 'sglang'"
    )
    p = explain(str(log))
    no_traceback(p)
    assert p.returncode == 1
    out = p.stdout.decode()
    assert "mixed.log:2: error: " in out and "hint (cuda_oom)" in out
    assert "mixed.log:4: error: ModuleNotFoundError" in out and "'sglang'" in out
    assert "\x1b" not in out and "\x07" not in out  # sanitized: nothing acts on the terminal
    assert out.rstrip().endswith("4 lines, 2 errors, 0 warnings, 2 with a known cause")


def test_streams_a_large_file_in_bounded_memory(tmp_path):
    block = DRIVER.read_bytes() * 200
    log = tmp_path / "big.log"
    with open(log, "wb") as f:
        for _ in range(50):  # ~50 MB
            f.write(block * 3)
    size = log.stat().st_size
    # The same command on a small log first: the children's peak so far, whatever ran before.
    small = tmp_path / "small.log"
    small.write_bytes(DRIVER.read_bytes())
    assert explain(str(small), "--json", fresh=True).returncode == 1
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    p = explain(str(log), "--json", timeout=300, fresh=True)
    assert p.returncode == 1
    rss_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    assert rss_kb < max(before, 1) + size // 1024 // 2, (rss_kb, size)
    assert len(json.loads(p.stdout)["findings"]) > 1000


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=4000), st.booleans())
def test_random_bytes_never_traceback(data, via_stdin):
    import tempfile

    if via_stdin:
        p = explain("-", stdin=data, timeout=60)
    else:
        with tempfile.NamedTemporaryFile(suffix=".log") as f:
            f.write(data)
            f.flush()
            p = explain(f.name, timeout=60)
    no_traceback(p)
    assert p.returncode in (0, 1), p.stderr
    assert p.stderr == b""
    assert b"lines, " in p.stdout


def test_reader_leaving_early_is_not_an_error(tmp_path):
    """`verl-tui explain big.log | head -1`: no traceback, no message; the exit status is a
    Unix tool's when its reader goes away (141, as SIGPIPE ends cat or git): the same for every
    command (tui/interrupts.py)."""
    log = tmp_path / "big.log"
    log.write_bytes(DRIVER.read_bytes() * 3000)
    exe = [str(CLI)] if CLI.exists() else [sys.executable, "-m", "tui"]
    proc = subprocess.Popen(
        [*exe, "explain", str(log)], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == 141
    assert first.startswith(str(log).encode() + b":6: error: ")
    assert err == b""


def test_progress_bars_crlf_and_colours_read_as_the_pane_reads_them(tmp_path):
    text = (
        "\x1b[36m(TaskRunner pid=1, ip=10.0.0.2)\x1b[0m start\r\n"
        "Processed prompts: 10%|█| 1/10\rProcessed prompts: 100%|██████████| 10/10\r\n"
        "Loading: 50%\rRuntimeError: CUDA error: out of memory\n"
        "\x1b[31m[2025-02-16 16:06:26,552 W 1 1] gcs_client.cc:178: Failed to get cluster ID "
        "from GCS server: TimedOut\x1b[0m\n"
    )
    log = tmp_path / "bars.log"
    log.write_bytes(text.encode())
    doc = json.loads(explain(str(log), "--json").stdout)
    store = LogStore()
    try:
        store.append(text)
        pane = {i + 1: (store.plain(i), store.hint(i).text) for i in store.hint_lines()}
    finally:
        store.close()
    assert {f["line"]: (f["text"], f["hint"]) for f in doc["findings"] if f["hint"]} == pane
    assert sorted(pane) == [3, 4]


def test_anchor_choice_is_the_greedy_cover_of_the_table():
    """The prefilter's anchors (chosen at every start-up from an index of words, not by
    reading every literal again each round) are the greedy cover its rule defines: each round
    the word in most uncovered literals (the longer, then the greater on a tie), or the
    longest literal once no word is shared."""
    literals = sorted({lit for sig in SIGNATURES for lit in sig.literals})
    left = [lit for lit in literals if not any(n in lit for n in CLASS_NEEDLES)]
    healthy = prefilter._HEALTHY.lower()
    chosen = []
    while left:
        counts = {}
        for w in {w for lit in left for w in prefilter._WORD_RE.findall(lit)}:
            rare = w not in prefilter._STOP_WORDS and w not in healthy
            if len(w) >= MIN_LITERAL and rare and not w.isdigit():
                counts[w] = sum(w in lit for lit in left)
        word = max(counts, key=lambda w: (counts[w], len(w), w)) if counts else ""
        if not word or counts[word] == 1:
            word = max(left, key=len)
        chosen.append(word)
        left = [lit for lit in left if word not in lit]
    assert PREFILTER.anchors == (*CLASS_NEEDLES, *sorted(chosen))
    assert all(any(a in lit for a in PREFILTER.anchors) for lit in literals)
