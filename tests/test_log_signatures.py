"""Known failure signatures, severity classification and traceback tracking."""

from __future__ import annotations

import pytest

from tui.logs import ERROR, HINT, TRACEBACK, WARNING, LogStore
from tui.logs.signatures import (
    SIGNATURES,
    LineClassifier,
    classify,
    match_signature,
    split_source,
)

RAY = "(WorkerDict pid=40211, ip=10.0.0.12) "

# (signature key, a line as it appears in a real job log)
KNOWN = [
    ("nccl_timeout", "[rank3]:[E1118 03:18:39.862393585 ProcessGroupNCCL.cpp:616] [Rank 3] "
     "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, OpType=_ALLGATHER_BASE, "
     "NumelIn=1, NumelOut=8, Timeout(ms)=600000) ran for 600047 milliseconds before timing out."),
    ("nccl_timeout", RAY + "[E ProcessGroupNCCL.cpp:475] Some NCCL operations have failed or "
     "timed out. Due to the asynchronous nature of CUDA kernels, subsequent GPU operations might "
     "run on corrupted/incomplete data."),
    ("nccl_timeout", "torch.distributed.DistBackendError: [1] is setting up NCCL communicator "
     "and retrieving ncclUniqueId from [0] via c10d key-value store by key '0', but "
     "store->get('0') got error: Socket Timeout"),
    ("nccl_timeout", "RuntimeError: NCCL communicator was aborted on rank 0. Original reason "
     "for failure was: [Rank 0] Watchdog caught collective operation timeout"),
    ("gloo_full_mesh", RAY + "RuntimeError: Gloo connectFullMesh failed with "
     "[../third_party/gloo/gloo/transport/tcp/pair.cc:144] no error"),
    ("nccl_network", "node2:3456:3512 [1] NCCL WARN NET/Socket : Connect to 10.0.0.12<43563> "
     "failed : Connection refused"),
    ("nccl_network", "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/"
     "distributed/c10d/ProcessGroupNCCL.cpp:1970, unhandled system error (run with "
     "NCCL_DEBUG=INFO for details), NCCL version 2.21.5"),
    ("nccl_network", "node1:123:456 [0] NCCL WARN NET/IB : Got completion from peer "
     "10.0.0.12<50000> with error 12, opcode 0, len 0, vendor err 129"),
    ("gpus_short", "\x1b[36m(TaskRunner pid=31337, ip=10.0.0.11)\x1b[0m ValueError: Total "
     "available GPUs 8.0 is less than total desired GPUs 16"),
    ("ray_infeasible", "(autoscaler +2m3s) Warning: The following resource request cannot be "
     "scheduled right now: {'GPU': 1.0, 'CPU': 1.0}. This is likely due to all cluster "
     "resources being claimed by actors."),
    ("ray_infeasible", "(autoscaler +15s) Error: No available node types can fulfill resource "
     "requests {'GPU': 8.0}*2. Add suitable node types to this cluster to resolve this issue."),
    ("gcs_connect", "[2025-01-16 08:48:22,123 E 31337 31337] gcs_rpc_client.h:179: Failed to "
     "connect to GCS at address 10.0.0.11:6379 within 5 seconds."),
    ("gcs_connect", "ray.exceptions.RaySystemError: System error: Failed to connect to GCS. "
     "Please check if the GCS server is running and if this node can connect to the head node."),
    ("gcs_connect", "ConnectionError: Could not find any running Ray instance. Please specify "
     "the one to connect to by setting `--address` flag or `RAY_ADDRESS` environment variable."),
    ("cuda_oom", RAY + "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. "
     "GPU 0 has a total capacity of 79.10 GiB of which 1.02 GiB is free."),
    ("cuda_oom", "RuntimeError: CUDA error: out of memory"),
    ("cuda_oom", "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB "
     "(GPU 0; 79.15 GiB total capacity; 77.80 GiB already allocated)"),
    ("kv_cache", "ValueError: No available memory for the cache blocks. Try increasing "
     "`gpu_memory_utilization` when initializing the engine."),
    ("kv_cache", "ValueError: To serve at least one request with the models's max seq len "
     "(32768), (4.00 GiB KV cache is needed, which is larger than the available KV cache memory "
     "(2.10 GiB). Try increasing `gpu_memory_utilization` or decreasing `max_model_len`."),
    ("host_oom", "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low "
     "on memory. Memory on the node (IP: 10.0.0.12) where the task was running was 240.12GB / "
     "251.56GB (0.954517), which exceeds the memory usage threshold of 0.95."),
    ("host_oom", "(raylet) [2025-01-16 08:48:22,123 E 4521 4521] node_manager.cc:3193: 1 "
     "Workers (tasks / actors) killed due to memory pressure (OOM), 0 Workers crashed due to "
     "other reasons at node (ID: 8d1c, IP: 10.0.0.12) over the last time period."),
    ("mkl_gomp", "Error: mkl-service + Intel(R) MKL: MKL_THREADING_LAYER=INTEL is incompatible "
     "with libgomp.so.1 library."),
    ("upload_too_large", "RuntimeError: Request failed with status code 413: Maximum request "
     "body size 524288000 exceeded, actual body size 612345678."),
    ("upload_too_large", "aiohttp.web_exceptions.HTTPRequestEntityTooLarge: Request Entity Too "
     "Large"),
    ("upload_too_large", "ValueError: Package size (617.87MiB) exceeds the maximum size of "
     "500.00MiB. To exclude large files, add them to '.gitignore' or '.rayignore' files, or use "
     "the 'excludes' option in the runtime_env"),
    ("hydra_override", "Could not override 'actor_rollout_ref.actor.ppo_mini_batchsize'."),
    ("hydra_override", "hydra.errors.ConfigCompositionException: Could not override "
     "'trainer.bogus'."),
    ("ray_version", "RuntimeError: Version mismatch: The cluster was started with:"),
    ("ray_version", "RuntimeError: Ray version mismatch: cluster has Ray version 2.49.0 but "
     "local Ray version is 2.60.0"),
]

# Lines that mention the same words but are not those failures.
UNRELATED = [
    "(TaskRunner pid=1, ip=10.0.0.2) step:10 - perf/max_memory_allocated_gb:71.2 - "
    "perf/cpu_memory_used_gb:120.0 - timing_s/gen:12.3",
    "actor_rollout_ref.rollout.gpu_memory_utilization: 0.6",
    "  nccl_timeout: 600",
    "Python patch version mismatch: The cluster was started with:",
    "Version mismatch: expected: 3, actual: 4",
    "INFO: the batch is too large for one pass; splitting it",
    "GCS server started on port 6379",
    "Total available GPUs: 16",
    "Could not find the config file, using defaults",
    "node1:123:456 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC/read",
    "Watchdog: all collectives healthy",
    "Processed prompts: 100%|██████████| 256/256 [00:12<00:00, 20.1it/s]",
]


def test_every_signature_has_an_example():
    assert {key for key, _ in KNOWN} == {sig.key for sig in SIGNATURES}


@pytest.mark.parametrize(("key", "line"), KNOWN)
def test_known_failure_gets_its_hint(key, line):
    # Through the store: the needle scan must find the line for the rules to see it.
    store = LogStore()
    try:
        store.append("filler line\n" + line + "\nanother line\n")
        hint = store.hint(1)
        assert hint is not None and hint.key == key, (line, hint)
        assert store.flags(1) & HINT and store.flags(1) & (ERROR | WARNING)
        assert store.hint_lines() == [1]
    finally:
        store.close()


@pytest.mark.parametrize("line", UNRELATED)
def test_unrelated_lines_get_no_hint(line):
    assert match_signature(split_source(line)[1]) is None
    store = LogStore()
    try:
        store.append(line + "\n")
        assert store.hint(0) is None and not store.flags(0) & (ERROR | HINT)
    finally:
        store.close()


def test_host_oom_is_not_a_cuda_oom():
    found = match_signature("ray.exceptions.OutOfMemoryError: Task was killed due to the node "
                            "running low on memory.")
    assert found is not None and found[0].key == "host_oom"


def test_hint_text_names_the_culprit():
    _, hint = match_signature("Could not override 'trainer.nnodez'.")
    assert "trainer.nnodez" in hint.text and "+trainer.nnodez=" in hint.text
    _, hint = match_signature("ValueError: Total available GPUs 8 is less than total desired "
                              "GPUs 16")
    assert "16 GPUs" in hint.text and "8 free" in hint.text
    for key in ("nccl_timeout", "gloo_full_mesh"):
        sig = next(s for s in SIGNATURES if s.key == key)
        assert "NCCL_SOCKET_IFNAME" in sig.hint and "GLOO_SOCKET_IFNAME" in sig.hint
    mkl = next(s for s in SIGNATURES if s.key == "mkl_gomp")
    assert "MKL_SERVICE_FORCE_INTEL" in mkl.hint
    oom = next(s for s in SIGNATURES if s.key == "cuda_oom")
    assert "gpu_memory_utilization" in oom.hint and "micro_batch" in oom.hint
    upload = next(s for s in SIGNATURES if s.key == "upload_too_large")
    assert "excludes" in upload.hint


@pytest.mark.parametrize(("line", "expected"), [
    ("2025-01-16 08:48:22,123 - root - ERROR - failed to load", ERROR),
    ("ERROR 01-16 08:48:22 [engine.py:12] engine died", ERROR),
    ("[E1118 03:18:39.862393585 ProcessGroupNCCL.cpp:616] something", ERROR),
    ("[2025-01-16 08:48:22,123 E 31337 31337] core_worker.cc:12: oops", ERROR),
    ("ValueError: bad value", ERROR),
    ("ray.exceptions.RayTaskError(ValueError): ray::TaskRunner.run()", ERROR),
    ("Error: job failed", ERROR),
    ("CRITICAL: disk full", ERROR),
    ("WARNING 01-16 08:48:22 [config.py:1] chunked prefill is on", WARNING),
    ("[W1118 03:18:39.86 socket.cpp:1] warn about things", WARNING),
    ("/opt/verl/x.py:12: UserWarning: this is deprecated", WARNING),
    ("Warning: The following resource request cannot be scheduled", WARNING),
    ("[2025-01-16 08:48:22,123 W 1 2] raylet.cc:1: slow", WARNING),
    ("num_errors=0 warnings=0", 0),
    ("error_count: 0", 0),
    ("Errors: none", 0),
    ("INFO all good", 0),
    ("step:3 - actor/entropy:0.5", 0),
])
def test_classify(line, expected):
    assert classify(split_source(line)[1]) == expected


@pytest.mark.parametrize(("line", "source", "message"), [
    ("(TaskRunner pid=1234, ip=10.0.0.2) hello", "(TaskRunner pid=1234, ip=10.0.0.2)", "hello"),
    ("(pid=99) x", "(pid=99)", "x"),
    ("(raylet) [2025] y", "(raylet)", "[2025] y"),
    ("(raylet, ip=10.0.0.3) y", "(raylet, ip=10.0.0.3)", "y"),
    ("(autoscaler +1m2s) Warning: z", "(autoscaler +1m2s)", "Warning: z"),
    ("[rank3]:[E1118 a] b", "[rank3]:", "[E1118 a] b"),
    ("(WorkerDict pid=5, ip=1.2.3.4) [rank0]: Traceback", "(WorkerDict pid=5, ip=1.2.3.4) "
     "[rank0]:", "Traceback"),
    ("(WorkerDict pid=5) oops \x1b[32m[repeated 7x across cluster]\x1b[0m".replace(
        "\x1b[32m", "").replace("\x1b[0m", ""), "(WorkerDict pid=5)", "oops"),
    ("(not a prefix) text", "", "(not a prefix) text"),
    ("[INFO] text", "", "[INFO] text"),
])
def test_split_source(line, source, message):
    assert split_source(line) == (source, message)


def _feed(lines: list[str]) -> list[int]:
    clf = LineClassifier()
    return [clf.feed(i, line)[0] for i, line in enumerate(lines)]


def test_python_traceback_with_chained_exception():
    flags = _feed([
        "Traceback (most recent call last):",
        '  File "/x.py", line 3, in <module>',
        "    main()",
        "    ^^^^^^",
        "KeyError: 'a'",
        "",
        "During handling of the above exception, another exception occurred:",
        "",
        "Traceback (most recent call last):",
        '  File "/x.py", line 5, in <module>',
        "    raise RuntimeError('b')",
        "RuntimeError: b",
        "next line",
    ])
    assert flags == [TRACEBACK | ERROR, TRACEBACK, TRACEBACK, TRACEBACK, TRACEBACK | ERROR, 0,
                     TRACEBACK, 0, TRACEBACK | ERROR, TRACEBACK, TRACEBACK, TRACEBACK | ERROR, 0]


def test_ray_task_error_keeps_remote_frames():
    pre = "(TaskRunner pid=9, ip=10.0.0.2) "
    flags = _feed([
        "Traceback (most recent call last):",
        '  File "/opt/verl/verl/trainer/main_ppo.py", line 42, in main',
        "    ray.get(runner.run.remote(config))",
        "ray.exceptions.RayTaskError(ValueError): ray::TaskRunner.run() (pid=9, ip=10.0.0.2)",
        '  File "/opt/verl/verl/trainer/main_ppo.py", line 120, in run',
        "    trainer.init_workers()",
        "ValueError: Total available GPUs 8 is less than total desired GPUs 16",
        pre + "unrelated",
    ])
    assert flags[:3] == [TRACEBACK | ERROR, TRACEBACK, TRACEBACK]
    assert flags[3] == TRACEBACK | ERROR
    assert flags[4:6] == [TRACEBACK, TRACEBACK]
    assert flags[6] & (TRACEBACK | ERROR) == TRACEBACK | ERROR
    assert flags[7] == 0


def test_interleaved_tracebacks_tracked_per_origin():
    a, b = "(WorkerDict pid=1, ip=10.0.0.2) ", "(WorkerDict pid=2, ip=10.0.0.3) "
    flags = _feed([
        a + "Traceback (most recent call last):",
        b + "Traceback (most recent call last):",
        a + '  File "/a.py", line 1, in f',
        b + '  File "/b.py", line 1, in g',
        a + "OSError: a",
        b + "    g()",
        b + "OSError: b",
    ])
    assert all(f & TRACEBACK for f in flags)
    assert flags[4] & ERROR and flags[6] & ERROR and not flags[5] & ERROR


def test_unterminated_traceback_is_closed():
    clf = LineClassifier()
    clf.feed(0, "Traceback (most recent call last):")
    for i in range(1, 500):
        clf.feed(i, f"    frame {i}")
    assert not clf.active  # a traceback of 400+ lines is not one: stop following it
