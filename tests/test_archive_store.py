"""The run archive's files without a cluster: verl's own lines archived in gzip members with a
line index, followers that never store a character twice (also two processes at once), the
size bound with oldest-first cleanup, and damaged files that become one-line warnings."""

from __future__ import annotations

import gzip
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest
from harness.cli import run_cli as verl_tui
from test_metrics_parse import verl_line

from tui.archive.store import ArchiveStore, parse_size
from tui.archive.writer import ArchiveWriter
from tui.config.yamlfile import ConfigError

VENV_PY = sys.executable


def log_text(steps: int, noise: int = 0, seed: int = 0) -> str:
    rnd = random.Random(seed)
    out = []
    for s in range(1, steps + 1):
        out.append(f"(TaskRunner pid=42, ip=10.0.0.2) {verl_line(s)}\n")
        # Incompressible filler, so sizes on disk are what the bound tests need.
        out += [f"noise {rnd.getrandbits(256):064x}\n" for _ in range(noise)]
    return "".join(out)


def archive(store: ArchiveStore, sid: str, text: str, chunk: int = 4096) -> ArchiveWriter:
    w = ArchiveWriter(store, sid)
    for i in range(0, len(text), chunk):
        w.feed(text[i : i + chunk])
    w.finish("SUCCEEDED", None)
    return w


def test_log_members_line_index_and_series(tmp_path, monkeypatch):
    monkeypatch.setattr("tui.archive.writer.FLUSH_BYTES", 2000)  # many members
    store = ArchiveStore("c", tmp_path)
    text = log_text(40)
    archive(store, "j1", text, chunk=700)
    meta = store.meta("j1")
    assert meta is not None and meta["final"] and meta["status"] == "SUCCEEDED"
    assert len(meta["log"]["members"]) > 5
    raw = (store.job_dir("j1") / "log.gz").read_bytes()
    assert gzip.decompress(raw).decode() == store.read_log("j1") == text
    lines = text.splitlines(keepends=True)
    for start in (0, 1, 17, 39, 40):
        assert store.read_log("j1", start) == "".join(lines[start:])
    series, _total = store.series("j1")
    assert [s for s, _ in series["critic/score/mean"]] == list(range(1, 41))
    assert series["actor/kl_loss"][0][1] == 0.00123  # np.float64(...) unwrapped
    # A second follower of the same log (the stream from its start) adds nothing.
    before = raw
    archive(store, "j1", text + "tail line\n", chunk=999)
    assert store.read_log("j1") == text + "tail line\n"
    assert (store.job_dir("j1") / "log.gz").read_bytes().startswith(before)


def test_two_processes_follow_one_job(tmp_path):
    """Two followers in two processes at once: the archive holds the log exactly once."""
    text = log_text(60, noise=5)
    src = tmp_path / "log.txt"
    src.write_text(text)
    code = (
        "import sys; from pathlib import Path; sys.path.insert(0, 'tests')\n"
        "from tui.archive.store import ArchiveStore\n"
        "from tui.archive.writer import ArchiveWriter\n"
        f"t = Path({str(src)!r}).read_text(); s = ArchiveStore('c', Path({str(tmp_path)!r}))\n"
        "w = ArchiveWriter(s, 'j2')\n"
        "import tui.archive.writer as m; m.FLUSH_BYTES = 3000\n"
        "for i in range(0, len(t), 1111): w.feed(t[i:i+1111])\n"
        "w.finish('SUCCEEDED', None)\n"
    )
    procs = [subprocess.Popen([VENV_PY, "-c", code]) for _ in range(2)]
    assert [p.wait(60) for p in procs] == [0, 0]
    store = ArchiveStore("c", tmp_path)
    assert store.read_log("j2") == text
    assert store.meta("j2")["log"]["chars"] == len(text)


def test_cleanup_keeps_the_bound_oldest_first(tmp_path):
    store = ArchiveStore("c", tmp_path, max_bytes=parse_size("200K"))
    for i in range(6):
        archive(store, f"run-{i}", log_text(10, noise=150, seed=i))  # ~55 KB each on disk
        os.utime(store.job_dir(f"run-{i}") / "meta.json", (1000 + i, 1000 + i))
        store.cleanup()
        assert store.total_bytes() <= store.max_bytes
    left = sorted(p.name for p in store.dir.iterdir())
    assert left[-1] == "run-5" and "run-0" not in left and "run-1" not in left
    # The kept ones are the newest, without gaps.
    assert left == [f"run-{i}" for i in range(6 - len(left), 6)]
    # A run being followed is never removed under its follower, even past the bound.
    big = ArchiveWriter(store, "busy")
    with store.job_lock("busy"):
        store.max_bytes = 1
        store.cleanup()
    assert store.job_dir("busy").is_dir() and not store.job_dir("run-5").exists()
    big.finish("RUNNING", None, done=False)


def test_one_run_past_the_bound_keeps_metrics_not_log(tmp_path):
    store = ArchiveStore("c", tmp_path, max_bytes=20_000)
    archive(store, "huge", log_text(30, noise=100))
    meta = store.meta("huge")
    assert meta["log"].get("truncated") is True
    assert len(store.series("huge")[0]["critic/score/mean"]) == 30


def test_damaged_files_are_one_line_warnings(tmp_path):
    store = ArchiveStore("c", tmp_path)
    text = log_text(20)
    archive(store, "cut", text)
    archive(store, "bad", text)
    # A log cut short mid-member; a meta that is not JSON; a series file that is not gzip.
    path = store.job_dir("cut") / "log.gz"
    path.write_bytes(path.read_bytes()[:-30])
    (store.job_dir("bad") / "meta.json").write_text('{"submission_id": "bad", ')
    (store.job_dir("cut") / "metrics.json.gz").write_bytes(b"\x1f\x8bnot gzip")
    assert store.meta("bad") is None
    assert store.series("cut") is None
    partial = store.read_log("cut")
    assert partial is not None and text.startswith(partial)
    warnings = store.take_warnings()
    assert len(warnings) == 3 and all("\n" not in w for w in warnings), warnings
    assert any("meta.json:1: damaged: not JSON" in w for w in warnings)
    assert any("metrics.json.gz: damaged (bad gzip data)" in w for w in warnings)
    assert any("log.gz: damaged (cut short)" in w for w in warnings)
    # Bytes past what meta vouches for (a crash mid-append) are dropped by the next writer.
    archive(store, "crash", text[:5000])
    log = store.job_dir("crash") / "log.gz"
    with open(log, "ab") as f:
        f.write(b"\x1f\x8b half a member")
    archive(store, "crash", text)
    assert store.read_log("crash") == text and not store.take_warnings()


def hosts_file(tmp_path: Path) -> Path:
    path = tmp_path / "hosts.yaml"
    path.write_text("cluster: c\nhosts:\n  - name: h1\n    address: 127.0.0.1\n")
    return path


def run_cli(env, *args: str) -> subprocess.CompletedProcess:
    return verl_tui([*args], env=env, timeout=120)


def test_compare_cli_offline_warnings_and_bad_setting(tmp_path):
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}
    store = ArchiveStore("c", tmp_path / "state" / "verl-tui" / "archive")
    for sid in ("a1", "a2", "a3"):
        archive(store, sid, log_text(5))
    (store.job_dir("a3") / "meta.json").write_text("garbage")
    path = hosts_file(tmp_path)
    out = run_cli(env, "compare", str(path), "a1", "a2", "a3", "--offline", "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert [r["submission_id"] for r in doc["runs"]] == ["a1", "a2"]
    assert doc["config_diff"] == {}
    err = out.stderr.strip().splitlines()
    assert any("a3" in e and "unreadable" in e for e in err) and "Traceback" not in out.stderr
    assert any("no archived run 'a3'" in e for e in err)

    bad = run_cli({**env, "VERL_TUI_ARCHIVE_MAX": "lots"}, "compare", str(path), "a1", "a2")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    assert "VERL_TUI_ARCHIVE_MAX" in bad.stderr
    nine = run_cli(env, "compare", str(path), *[f"j{i}" for i in range(9)], "--offline")
    assert nine.returncode == 2 and "2 to 8" in nine.stderr


def test_parse_size():
    assert parse_size("2G") == 2 << 30 and parse_size("500MiB") == 500 << 20
    assert parse_size("1048576") == 1 << 20 and parse_size(" 1.5k ") == 1536
    for bad in ("", "lots", "-1G", "2 PB"):
        with pytest.raises(ConfigError, match="VERL_TUI_ARCHIVE_MAX"):
            parse_size(bad)


def test_writer_flushes_on_time(tmp_path):
    """A slow log (a line now and then) still reaches the archive every FLUSH_S."""
    now = [0.0]
    store = ArchiveStore("c", tmp_path)
    w = ArchiveWriter(store, "slow", clock=lambda: now[0])
    w.feed("first line\n")
    assert store.read_log("slow") == ""
    now[0] += 5
    w.feed("second line\n")
    assert store.read_log("slow") == "first line\nsecond line\n"
    assert time.time() - store.meta("slow")["updated_at"] < 60


def test_an_archive_that_cannot_be_written_only_warns(tmp_path):
    """The job's folder cannot be made (a file is in its place): the follower reads on, the
    archive is skipped with one warning."""
    store = ArchiveStore("c", tmp_path)
    store.dir.mkdir(parents=True)
    store.job_dir("blocked").write_text("not a folder")
    w = ArchiveWriter(store, "blocked")
    w.feed(log_text(3))
    w.finish("SUCCEEDED", None)
    assert w.disabled and not store.job_dir("blocked").is_dir()
    warnings = store.take_warnings()
    assert len(warnings) == 1 and "blocked: not archived" in warnings[0], warnings
