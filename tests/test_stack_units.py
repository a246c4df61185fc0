"""`verl-tui stack`'s parts that need no cluster: py-spy's answers parsed at the boundary
(hostile ones included), identical stacks grouped with the odd ones first and ranks named as
ranges, a waiting placement group weighed against the free resources, and the host program run
for real: as a second real OS user (nobody) against a root process it names the owner and the
fix, and a request it cannot read is one error line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tui.cluster.tracing import TracingFacts
from tui.remote import python_argv
from tui.stack.model import (
    Frame,
    ProcessDump,
    StackReport,
    Target,
    Thread,
    frame_lines,
    group_dumps,
)
from tui.stack.pyspy import (
    HostAnswer,
    parse_json_dump,
    parse_text_dump,
    problems_of,
    take_proc,
)
from tui.stack.ray_view import ActorRow, RayView, death_text, pg_why

FIXTURES = Path(__file__).parent / "fixtures" / "stack"
WAIT = (
    Frame("all_reduce", "torch/distributed/distributed_c10d.py", 2501),
    Frame("train_step", "workload.py", 40),
    Frame("actor_method_executor", "ray/_private/function_manager.py", 689),
)


def proc(
    rank: int | None, frames: tuple[Frame, ...], host: str = "node1", pid: int = 0
) -> ProcessDump:
    target = Target(host, pid or 1000 + (rank or 0), "WorkerDict", rank=rank)
    return ProcessDump(target, (Thread("MainThread", frames, main=True),))


def test_identical_stacks_are_one_group_the_odd_one_first_with_ranks_as_ranges() -> None:
    sleeping = (Frame("__next__", "torch/utils/data/dataloader.py", 631), *WAIT[1:])
    # The same wait reached from a neighbouring line is the same place.
    moved = (Frame("all_reduce", WAIT[0].file, 2503), *WAIT[1:])
    dumps = [proc(r, WAIT if r % 2 else moved) for r in range(16) if r != 7]
    dumps.append(proc(7, sleeping, host="node2"))
    groups = group_dumps(dumps)
    assert [len(g.dumps) for g in groups] == [1, 15]
    assert groups[0].summary == "rank 7: __next__ ← train_step ← actor_method_executor"
    assert groups[1].who == "ranks 0–6, 8–15"
    assert groups[1].summary.startswith("ranks 0–6, 8–15: all_reduce ← train_step")

    report = StackReport("raysubmit_x", dumps=dumps, expected=17)
    doc = report.to_json()
    assert doc["groups"][0]["processes"] == [
        {"host": "node2", "pid": 1007, "role": "WorkerDict", "rank": 7}
    ]
    assert doc["groups"][0]["frames"][0] == "__next__ (torch/utils/data/dataloader.py:631)"
    text = report.text_lines()
    assert text[0] == "raysubmit_x: 16 of 17 process(es) dumped in 0.0 s"


def test_processes_without_a_rank_are_named_by_role_and_host_pid() -> None:
    driver = ProcessDump(
        Target("node1", 42, "driver"),
        (Thread("MainThread", (Frame("get", "ray/_private/worker.py", 9),), main=True),),
    )
    native_a = proc(None, (Frame("0x7f93cdc4524a", "libc.so.6"), *WAIT), pid=5)
    native_b = proc(None, (Frame("0x7f0000000000", "libc.so.6"), *WAIT), pid=6)
    groups = group_dumps([driver, native_a, native_b])
    assert groups[0].who == "driver node1:42"
    assert groups[1].who == "WorkerDict node1:5; WorkerDict node1:6"  # addresses differ: same


def test_py_spy_json_and_text_dumps_parse_and_hostile_ones_stay_bounded_text() -> None:
    doc = [
        {
            "os_thread_id": 77,
            "thread_name": "Main\x1b]0;pwned\x07Thread",
            "active": False,
            "frames": [
                {"name": "wait\x1b[2J", "short_filename": "threading.py", "line": 320},
                {"name": 5, "short_filename": "x.py"},  # not a frame: dropped
                {"name": "run", "filename": "/a/b.py", "line": True},
            ],
        },
        "not a thread",
        {
            "os_thread_id": 78,
            "frames": [{"name": "f" * 5000, "short_filename": "y.py", "line": 1}] * 500,
        },
    ]
    threads = parse_json_dump(json.dumps(doc), 77)
    assert threads is not None and len(threads) == 2
    main, other = threads
    assert main.main and main.idle and not other.main
    assert "\x1b" not in main.name and "\x1b" not in main.frames[0].name
    assert [f.name for f in main.frames][1] == "run" and main.frames[1].line == 0
    assert len(other.frames) == 128 and len(other.frames[0].name) <= 200
    assert parse_json_dump("[" * 100_000, 1) is None
    assert parse_json_dump('{"a": 1}', 1) is None

    text = (
        "Process 77: python train.py\nPython v3.11.7\n\n"
        'Thread 77 (idle): "MainThread"\n'
        "    all_reduce (torch/distributed/distributed_c10d.py:2501)\n"
        "    train_step (workload.py:40)\n"
        "Thread 0x7F0A (active)\n"
        "    clock_nanosleep (libc.so.6)\n"
    )
    t1, t2 = parse_text_dump(text, 77)
    assert t1.main and t1.idle and t1.name == "MainThread"
    assert [str(f) for f in t1.frames] == [
        "all_reduce (torch/distributed/distributed_c10d.py:2501)",
        "train_step (workload.py:40)",
    ]
    assert t2.frames == (Frame("clock_nanosleep", "libc.so.6"),) and not t2.idle


def test_each_failure_is_one_line_per_host_that_names_its_fix() -> None:
    targets = {p: Target("node3", p, "WorkerDict") for p in (10, 11, 12, 13, 14)}
    nocap = TracingFacts(py_spy="/v/bin/py-spy", user="root", uid=0, cap_ptrace=False)
    answer = HostAnswer("node3", facts=nocap)
    denied = {"rc": 1, "err": "Error: Failed\nCaused by:\n 0: Permission denied (os error 13)\n"}
    for pid in (10, 11):
        take_proc(answer, {"pid": pid, "user": "root", **denied}, targets)
    take_proc(answer, {"pid": 12, "gone": True}, targets)
    take_proc(answer, {"pid": 13, "rc": None}, targets)
    take_proc(answer, {"pid": 99, "rc": 0, "out": "[]"}, targets)  # a pid we did not ask for
    take_proc(answer, {"pid": 14, "rc": 0, "out": "[]", "env": {"RANK": "3"}}, targets)
    lines = problems_of(answer, "python3")
    assert lines[0].startswith("ptrace denied for pids 10, 11")
    assert "--cap-add SYS_PTRACE" in lines[0]
    assert any("did not finish for pid 13" in ln for ln in lines)
    assert any("pid 12 exited before the dump" in ln for ln in lines)
    assert lines[-1] == "1 line(s) of its answer not understood"
    assert answer.dumps[0].target.rank == 3

    yama = HostAnswer(
        "node4", facts=TracingFacts(py_spy="/p", user="alice", uid=1000, ptrace_scope=1)
    )
    take_proc(yama, {"pid": 10, "user": "alice", **denied}, targets)
    assert "sysctl kernel.yama.ptrace_scope=0" in problems_of(yama, "python3")[0]

    missing = HostAnswer("node5", facts=TracingFacts(python="/opt/py/bin/python3"))
    assert problems_of(missing, "python3") == [
        "py-spy not found beside /opt/py/bin/python3 nor on PATH: `/opt/py/bin/python3 -m pip "
        "install py-spy` on node5 (ray[default] installs it)"
    ]


def test_a_waiting_placement_group_says_what_it_needs_against_each_nodes_free() -> None:
    free = {"node1": {"GPU": 2.0, "CPU": 30.0}, "node3": {"GPU": 4.0, "CPU": 8.0}}
    why = pg_why([{"GPU": 8.0, "CPU": 1.0}], free)
    assert why.startswith("needs 8 GPU on one node") and "the largest free is 4 GPU on node3" in why
    assert pg_why([{"CPU": 1.0}] * 3, free).endswith(
        "which the nodes have free now: its strategy (STRICT_SPREAD/STRICT_PACK) or custom "
        "resources keep it waiting"
    )
    assert "free in all: 6 GPU" in pg_why([{"GPU": 4.0}] * 2, free)
    assert death_text({"actor_died_error_context": {"error_message": "OOM\x1b[2J killed"}}) == (
        "OOM killed"
    )
    assert death_text("nonsense") == ""


# ---- the host program, for real -------------------------------------------------------------


@pytest.fixture
def shared_bin() -> Iterator[Path]:
    """py-spy in a folder the second user can reach (ours lives under /root)."""
    folder = Path(tempfile.mkdtemp(prefix="vt-stack-"))
    folder.chmod(0o755)
    shutil.copy(Path(sys.executable).parent / "py-spy", folder / "py-spy")
    (folder / "py-spy").chmod(0o755)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_the_host_program_as_another_user_names_the_owner_and_the_fix(shared_bin) -> None:
    target = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        time.sleep(0.2)
        argv = python_argv("/usr/bin/python3", "stack_dump", site=False)
        req = {"pids": [target.pid], "timeout": 10}
        res = subprocess.run(
            ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", *argv],
            input=json.dumps(req),
            capture_output=True,
            text=True,
            timeout=60,
            env={"PATH": f"{shared_bin}:/usr/bin:/bin"},
        )
    finally:
        target.kill()
        target.wait()
    lines = [json.loads(ln) for ln in res.stdout.splitlines()]
    assert lines[-1]["done"]["user"] == "nobody" and lines[-1]["done"]["py_spy"].startswith(
        str(shared_bin)
    ), res.stdout + res.stderr
    answer = HostAnswer("node1", facts=TracingFacts.parse(lines[-1]["done"]))
    take_proc(answer, lines[0]["proc"], {target.pid: Target("node1", target.pid, "driver")})
    assert problems_of(answer, "/usr/bin/python3") == [
        f"pid {target.pid} belongs to root, not nobody: connect as root (ssh.user in "
        "hosts.yaml) to dump it"
    ]


def test_a_request_the_host_program_cannot_read_is_one_error_line() -> None:
    argv = python_argv(sys.executable, "stack_dump", site=False)
    res = subprocess.run(argv, input='{"pids": "x"}', capture_output=True, text=True, timeout=30)
    assert res.returncode == 0 and json.loads(res.stdout)["error"].startswith("bad request")
    assert os.path.basename(argv[0]).startswith("python")


def test_a_recorded_native_dump_of_a_hung_nccl_job_names_both_ranks_places() -> None:
    """The host program's answer recorded on two H200s (bench/device_stack.sh): rank 0 waits in
    cudaDeviceSynchronize after its NCCL all_reduce, rank 1 sleeps before it. The groups name
    the first symbols, not the addresses around them, and fold those."""
    lines = (FIXTURES / "h200x2_nccl_native.jsonl").read_text().splitlines()
    docs = [json.loads(ln) for ln in lines]
    procs = [d["proc"] for d in docs if "proc" in d]
    answer = HostAnswer("gpu-host", facts=TracingFacts.parse(docs[-1]["done"]))
    targets = {p["pid"]: Target("gpu-host", p["pid"], "rank") for p in procs}
    for p in procs:
        take_proc(answer, p, targets)
    assert problems_of(answer, "python3") == []
    by_rank = {g.dumps[0].target.pid: g for g in group_dumps(answer.dumps)}
    waiting, sleeping = by_rank[648], by_rank[649]
    assert (
        waiting.where
        == "cuCtxSynchronize_v2 ← cudaDeviceSynchronize ← c10::cuda::device_synchronize ← …"
    )
    assert sleeping.where == "clock_nanosleep ← skip_collective ← train_step ← …"
    shown = frame_lines(waiting.frames)
    assert shown[0] == "… 9 frames in libcuda.so.580.159.04"
    assert "train_step (device_stack.py:36)" in shown


def test_rays_view_lines_put_the_troubled_actors_first_and_say_what_tasks_wait_on() -> None:
    view = RayView(
        actors=[
            ActorRow("WorkerDict_0:0", "ALIVE", "node1", 11, 0),
            ActorRow("WorkerDict_0:1", "DEAD", "node2", 12, 0, death="OOM killed"),
            ActorRow("TaskRunner", "ALIVE", "node1", 10, 2),
        ],
        pending=[("generate", "PENDING_NODE_ASSIGNMENT", 4)],
        running=3,
    )
    lines = view.lines()
    assert lines[:2] == [
        "WorkerDict_0:1 DEAD on node2 pid 12: OOM killed",
        "TaskRunner ALIVE on node1 pid 10, restarted 2×",
    ]
    assert lines[2] == "2 of 3 actor(s) alive; 3 task(s) running"
    assert lines[3] == (
        "4 task(s) generate: PENDING_NODE_ASSIGNMENT, waits for a node with the resources it "
        "asks for"
    )
    assert view.to_json()["actor_states"] == {"ALIVE": 2, "DEAD": 1}


MANY_THREADS = """
import sys, threading, time
def deep(n):
    return deep(n - 1) if n else time.sleep(60)
for _ in range(40):
    threading.Thread(target=deep, args=(100,), daemon=True).start()
sys.stdout.write("up\\n"); sys.stdout.flush()
time.sleep(60)
"""


def test_a_dump_over_its_size_bound_keeps_the_main_thread_and_what_fits() -> None:
    """41 threads 100 frames deep, with 20 kB allowed: the host program re-writes py-spy's
    answer compactly and keeps the main thread first, then the others while they fit."""
    target = subprocess.Popen([sys.executable, "-c", MANY_THREADS], stdout=subprocess.PIPE)
    try:
        assert target.stdout is not None and target.stdout.readline() == b"up\n"
        argv = python_argv(sys.executable, "stack_dump", site=False)
        for max_bytes, whole in ((1 << 20, True), (20_000, False)):
            req = {"pids": [target.pid], "max_bytes": max_bytes}
            res = subprocess.run(argv, input=json.dumps(req), capture_output=True, text=True)
            proc = json.loads(res.stdout.splitlines()[0])["proc"]
            assert len(proc["out"]) <= max_bytes and proc["cut"] is not whole
            threads = parse_json_dump(proc["out"], target.pid)
            assert threads is not None and threads[0].main
            assert (len(threads) == 41) is whole, len(threads)
    finally:
        target.kill()
        target.wait()
