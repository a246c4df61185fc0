"""Stall detection's judgement (tui/supervisor/stall.py) on synthetic progress, its thresholds
(hosts.yaml `stall:` and a profile's `stall:`, errors at file:line), and the log reader's
remote command (tui/supervisor/stall_log.py) run by a real sh on real files: only new lines,
at a line end, bounded, a replaced file read again."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tui.config.hosts import parse_inventory
from tui.config.stall import StallOptions, StallOverride
from tui.config.yamlfile import ConfigError
from tui.jobs.profiles import load_profile
from tui.supervisor.stall import LOG_MARKS, GpuState, JobProgress, judge, watchdog_line
from tui.supervisor.stall_log import _READ

GIB = 1 << 30
T0 = 1_800_000_000.0
OPTS = StallOptions(factor=3, min_s=60, startup_s=300)


def _step(n: int, took: float = 10.0) -> str:
    return f"(TaskRunner pid=7, ip=10.0.0.1) step:{n} - timing_s/step:{took} - actor/loss:0.5"


def test_no_step_past_factor_times_the_median_is_a_stall_and_a_new_step_clears_it() -> None:
    p = JobProgress(started_at=T0)
    for n in range(1, 6):
        p.feed_lines([_step(n, took=40.0)], T0 + 40 * n)
    last = T0 + 200
    assert p.median_step_s == 40.0
    # factor 3 × 40 s = 120 s > min_s 60: not yet at 119 s, a stall at 121 s.
    assert judge(p, OPTS, last + 119) is None
    stall = judge(p, OPTS, last + 121)
    assert stall is not None and stall.reasons == ["no_step"]
    assert stall.since == last and stall.last_step == 5 and stall.limit_s == 120
    assert stall.evidence == "no step for 2.0 min (last step 5); median step 40 s"
    p.feed_lines([_step(6, took=40.0)], last + 130)
    assert judge(p, OPTS, last + 131) is None


def test_the_floor_wins_over_fast_steps_and_the_gaps_stand_in_for_timing() -> None:
    p = JobProgress(started_at=T0)
    # No timing_s/step: the median is the wall-clock gap between step lines (2 s).
    for n in range(1, 4):
        p.feed_lines([f"step:{n} - actor/loss:0.1"], T0 + 2 * n)
    assert p.median_step_s == 2.0
    assert judge(p, OPTS, T0 + 6 + 59) is None  # 3 × 2 s is under the 60 s floor
    assert judge(p, OPTS, T0 + 6 + 61) is not None


def test_the_first_step_gets_the_startup_allowance() -> None:
    p = JobProgress(started_at=T0)
    p.feed_lines(["Total training steps: 100", "some other line"], T0 + 5)
    assert judge(p, OPTS, T0 + 299) is None
    stall = judge(p, OPTS, T0 + 301)
    assert stall is not None and stall.reasons == ["no_first_step"] and stall.since == T0
    assert stall.evidence.startswith("no first step 5.0 min after the start")
    assert judge(p, OPTS.model_copy(update={"enabled": False}), T0 + 10_000) is None


def test_a_watchdog_line_after_the_last_step_is_a_stall_at_once() -> None:
    p = JobProgress(started_at=T0)
    p.feed_lines([_step(1)], T0 + 10)
    line = (
        "(WorkerDict pid=4242) [rank1]:[E1124 ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog "
        "caught collective operation timeout: WorkNCCL(SeqNum=8812, OpType=ALLREDUCE) ran for "
        "600020 milliseconds before timing out.\x1b]0;pwn\x07"
    )
    p.feed_lines([line], T0 + 20)
    stall = judge(p, OPTS, T0 + 21)
    assert stall is not None and stall.reasons == ["watchdog"]
    assert "Watchdog caught collective operation timeout" in stall.evidence
    assert "\x1b" not in stall.evidence and "\x07" not in stall.evidence
    assert not watchdog_line("[c10d] The hostname of the client socket cannot be retrieved")


def test_gpus_holding_memory_in_an_unchanged_pattern_are_evidence() -> None:
    p = JobProgress(started_at=T0)
    p.feed_lines([_step(1, took=120.0)], T0 + 120)
    # Busy while training, then 16 GPUs flat at 0 % from T0+200 on.
    p.feed_gpus([GpuState(f"n{i // 8}:{i % 8}", 80.0, 61 * GIB) for i in range(16)], T0 + 150)
    for t in (200, 400, 800):
        p.feed_gpus([GpuState(f"n{i // 8}:{i % 8}", 0.0, 61 * GIB) for i in range(16)], T0 + t)
    stall = judge(p, OPTS, T0 + 120 + 14 * 60)
    assert stall is not None and stall.reasons == ["no_step", "gpus_idle"]
    assert "16 GPUs hold 61 GiB each, 0 % busy since" in stall.evidence
    # The asymmetry of a dead all-reduce: the waiting rank spins, the absent one sleeps.
    p.feed_gpus([GpuState("a:0", 100.0, 20 * GIB), GpuState("a:1", 0.0, 20 * GIB)], T0 + 900)
    stall = judge(p, OPTS, T0 + 1000)
    assert stall is not None and "gpus_split" in stall.reasons
    assert "2 GPUs hold 20 GiB each, 1 100 % busy, 1 0 % busy" in stall.evidence
    # GPUs that hold nothing, or work at a changing middling rate, are no evidence.
    p.feed_gpus([GpuState("a:0", 100.0, 0), GpuState("a:1", 0.0, 0)], T0 + 1010)
    assert judge(p, OPTS, T0 + 1020).reasons == ["no_step"]  # type: ignore[union-attr]
    p.feed_gpus([GpuState("a:0", 50.0, 20 * GIB)], T0 + 1030)
    assert judge(p, OPTS, T0 + 1040).reasons == ["no_step"]  # type: ignore[union-attr]


def test_hosts_yaml_stall_block_is_checked_at_file_line(tmp_path: Path) -> None:
    base = "hosts:\n  - name: a\n"
    inv = parse_inventory(base + "stall:\n  factor: 2\n  min_s: 5\n  startup_s: 20\n")
    assert (inv.stall.factor, inv.stall.min_s, inv.stall.startup_s) == (2, 5, 20)
    assert parse_inventory(base).stall == StallOptions()
    for bad, want in (
        (
            "stall:\n  factr: 2\n",
            "<hosts.yaml>:4: stall.factr: unknown key (did you mean 'factor'?)",
        ),
        ("stall:\n  factor: 0.5\n", "<hosts.yaml>:4: stall.factor:"),
        ("stall:\n  min_s: -1\n", "<hosts.yaml>:4: stall.min_s:"),
        ("stall:\n  enabled: maybe\n", "<hosts.yaml>:4: stall.enabled:"),
        ("stall: 3\n", "<hosts.yaml>:3: stall:"),
    ):
        with pytest.raises(ConfigError) as err:
            parse_inventory(base + bad)
        assert str(err.value).startswith(want), str(err.value)
        assert "\n" not in str(err.value)


def test_a_profile_overrides_the_keys_it_names(tmp_path: Path) -> None:
    prof = tmp_path / "p.yaml"
    prof.write_text("name: p\noverrides: {}\nstall:\n  min_s: 30\n  retry: true\n")
    over = load_profile(prof).stall
    assert over == StallOverride(min_s=30, retry=True)
    merged = StallOptions(factor=5).merged(over)
    assert (merged.factor, merged.min_s, merged.retry, merged.startup_s) == (5, 30, True, 1800)
    prof.write_text("name: p\noverrides: {}\nstall:\n  startup: 30\n")
    with pytest.raises(ConfigError) as err:
        load_profile(prof)
    assert f"{prof}:4" in str(err.value) and "startup" in str(err.value)


def _read(path: Path, off: int, cap: int = 1 << 20, ocap: int = 1 << 20) -> tuple[list[str], str]:
    marks = [w for m in LOG_MARKS for w in ("-e", m)]
    res = subprocess.run(
        ["sh", "-c", _READ, "sh", str(path), str(off), str(cap), "4000", str(ocap), *marks],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    head, _, rest = res.stdout.partition("\n")
    return head.split(), rest


def test_the_remote_read_takes_new_whole_lines_only(tmp_path: Path) -> None:
    log = tmp_path / "job-driver-x.log"
    body = "noise\nstep:1 - a:1\nnoise\nstep:2 - a"  # step 2's line is being written
    log.write_text(body)
    (off, end, size, _mtime), text = _read(log, 0)
    assert (int(off), int(end), int(size)) == (0, body.rfind("\n") + 1, len(body))
    assert text == "step:1 - a:1\n"
    with log.open("a") as f:
        f.write(":2\nWatchdog caught collective operation timeout\n")
    (_o, end2, size2, _m), text = _read(log, int(end))
    assert int(end2) == int(size2)
    assert text == "step:2 - a:2\nWatchdog caught collective operation timeout\n"
    # A file replaced by a shorter one is read from its start again.
    log.write_text("step:1 - a:1\n")
    (off3, _end3, _s, _m), text = _read(log, int(end2))
    assert int(off3) == 0 and text == "step:1 - a:1\n"
    # One line longer than a whole chunk is passed, not waited for forever.
    log.write_text("x" * 5000)
    (_o, end4, _s, _m), _text = _read(log, 0, cap=1000)
    assert int(end4) == 1000
    # A FIFO put in the log's place is not opened (it would hold the read): exit 4.
    fifo = tmp_path / "fifo.log"
    os.mkfifo(fifo)
    marks = [w for m in LOG_MARKS for w in ("-e", m)]
    res = subprocess.run(
        ["sh", "-c", _READ, "sh", str(fifo), "0", "1000", "4000", "1000", *marks], timeout=10
    )
    assert res.returncode == 4
    # The output is bounded whatever the log holds.
    log.write_text("step:1 - a:1\n" * 10000)
    _head, text = _read(log, 0, ocap=500)
    assert len(text) <= 500


def test_a_jobs_profile_stall_block_wins_for_its_keys_and_a_broken_one_is_named(
    tmp_path: Path,
) -> None:
    from types import SimpleNamespace

    from tui.jobs.history import JobRecord
    from tui.supervisor.stall_duty import StallDuty

    inv = parse_inventory("hosts:\n  - name: a\nstall:\n  factor: 2\n  min_s: 5\n")
    prof = tmp_path / "p.yaml"
    prof.write_text("name: p\noverrides: {}\nstall:\n  min_s: 30\n")
    rec = JobRecord("job-1", "c", 0.0, "python x.py", profile="p", profile_path=str(prof))
    duty, ctx = StallDuty(), SimpleNamespace(inv=inv)
    opts, problem = duty.options(ctx, rec)  # type: ignore[arg-type]
    assert (opts.factor, opts.min_s, problem) == (2, 30, "")
    prof.write_text("name: p\noverrides: {}\nstall:\n  min_s: 45\n")  # edited: read again
    assert duty.options(ctx, rec)[0].min_s == 45  # type: ignore[arg-type]
    prof.write_text("name: p\nstall: [1]\n")
    opts, problem = duty.options(ctx, rec)  # type: ignore[arg-type]
    assert opts == inv.stall and f"{prof}:2" in problem and "hosts.yaml's" in problem


def test_the_jobs_table_and_the_jobs_view_mark_a_stalled_job() -> None:
    from tui.commands.jobs_table import jobs_table
    from tui.jobs.service import JobRow
    from tui.screens.jobs.view import stall_detail, status_text

    row = JobRow("job-1", "RUNNING", "python x.py", T0, None, "node1", None, None)
    stall = {"evidence": "no step for 14 min (last step 3)\x1b[2J", "since": T0}
    text = jobs_table([row], {"job-1": stall})
    assert "RUNNING" in text and "STALLED: no step for 14 min (last step 3)" in text
    assert "\x1b" not in text
    assert status_text(row, stall, "") == ("RUNNING STALLED", "bold red")
    assert status_text(row, None, "green") == ("RUNNING", "green")
    assert stall_detail(stall).plain.startswith("stall: no step for 14 min")


@pytest.mark.parametrize("value", ["-1", "0.1", "nan", "inf", "99999"])
def test_watch_gpus_interval_is_checked_before_anything_connects(tmp_path: Path, value) -> None:
    """`watch --gpus S`: the GPU samples behind the stall check's evidence (0: none)."""
    from harness.cli import run_cli

    hosts = tmp_path / "hosts.yaml"
    hosts.write_text("hosts:\n  - name: a\n    address: 192.0.2.1\n")  # TEST-NET: never reached
    p = run_cli(["watch", str(hosts), "--once", "--gpus", value], timeout=60)
    assert p.returncode == 2 and p.stderr.count("\n") == 1, p.stderr
    assert f"--gpus {float(value):g}: give 0.5 to 3600 seconds, or 0 for none" in p.stderr
