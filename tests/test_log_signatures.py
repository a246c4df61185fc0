"""Known failure signatures, severity classification and traceback tracking."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tui.logs import ERROR, HINT, TRACEBACK, WARNING, LogStore
from tui.logs.signatures import (
    PREFILTER,
    SIGNATURES,
    LineClassifier,
    candidate_starts,
    classify,
    match_signature,
    required_literals,
    split_source,
)

RAY = "(WorkerDict pid=40211, ip=10.0.0.12) "

# (signature key, a line as it appears in a real job log)
KNOWN = [
    (
        "nccl_timeout",
        "[rank3]:[E1118 03:18:39.862393585 ProcessGroupNCCL.cpp:616] [Rank 3] "
        "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, OpType=_ALLGATHER_BASE, "
        "NumelIn=1, NumelOut=8, Timeout(ms)=600000) ran for 600047 milliseconds before timing out.",
    ),
    (
        "nccl_timeout",
        RAY + "[E ProcessGroupNCCL.cpp:475] Some NCCL operations have failed or "
        "timed out. Due to the asynchronous nature of CUDA kernels, subsequent GPU operations might "
        "run on corrupted/incomplete data.",
    ),
    (
        "nccl_timeout",
        "torch.distributed.DistBackendError: [1] is setting up NCCL communicator "
        "and retrieving ncclUniqueId from [0] via c10d key-value store by key '0', but "
        "store->get('0') got error: Socket Timeout",
    ),
    (
        "nccl_timeout",
        "RuntimeError: NCCL communicator was aborted on rank 0. Original reason "
        "for failure was: [Rank 0] Watchdog caught collective operation timeout",
    ),
    (
        "gloo_full_mesh",
        RAY + "RuntimeError: Gloo connectFullMesh failed with "
        "[../third_party/gloo/gloo/transport/tcp/pair.cc:144] no error",
    ),
    (
        "nccl_network",
        "node2:3456:3512 [1] NCCL WARN NET/Socket : Connect to 10.0.0.12<43563> "
        "failed : Connection refused",
    ),
    (
        "nccl_network",
        "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/"
        "distributed/c10d/ProcessGroupNCCL.cpp:1970, unhandled system error (run with "
        "NCCL_DEBUG=INFO for details), NCCL version 2.21.5",
    ),
    (
        "nccl_ib",
        "node1:123:456 [0] NCCL WARN NET/IB : Got completion from peer "
        "10.0.0.12<50000> with error 12, opcode 0, len 0, vendor err 129",
    ),
    (
        "gpus_short",
        "\x1b[36m(TaskRunner pid=31337, ip=10.0.0.11)\x1b[0m ValueError: Total "
        "available GPUs 8.0 is less than total desired GPUs 16",
    ),
    (
        "placement_pending",
        "(autoscaler +2m3s) Warning: The following resource request cannot be "
        "scheduled right now: {'GPU': 1.0, 'CPU': 1.0}. This is likely due to all cluster "
        "resources being claimed by actors.",
    ),
    (
        "placement_pending",
        "(autoscaler +15s) Error: No available node types can fulfill resource "
        "requests {'GPU': 8.0}*2. Add suitable node types to this cluster to resolve this issue.",
    ),
    (
        "placement_pending",
        " {'GPU': 1.0, 'CPU': 3.0} * 8 (STRICT_PACK): 1+ pending placement groups",
    ),
    (
        "vllm_pg_gpus",
        "ValueError: The number of required GPUs exceeds the total number of "
        "available GPUs in the placement group.",
    ),
    (
        "gcs_connect",
        "[2025-02-16 16:06:26,552 W 350061 350061] gcs_client.cc:178: Failed to get "
        "cluster ID from GCS server: TimedOut: Timed out while waiting for GCS to become available.",
    ),
    (
        "nccl_timeout",
        "[rank4]:[E318 07:39:53.792780659 ProcessGroupNCCL.cpp:1834] [PG ID 2 PG "
        "GUID 9 Rank 4] Timeout at NCCL work: 610, last enqueued NCCL work: 616, last completed "
        "NCCL work: 609.",
    ),
    ("vllm_cumem_oom", "CUDA Error: out of memory at /workspace/csrc/cumem_allocator.cpp:62"),
    (
        "actor_died",
        "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.",
    ),
    (
        "host_oom",
        "[Sun Mar 30 08:24:00 2025] Out of memory: Killed process 7899 (python) "
        "total-vm:26184840kB, anon-rss:15370088kB",
    ),
    ("hf_cache_perm", "[rank1]: PermissionError: [Errno 13] Permission denied: '/.cache'"),
    ("import_missing", RAY + "ModuleNotFoundError: No module named 'transfer_queue'"),
    ("hydra_failed", "Error executing job with overrides: ['algorithm.adv_estimator=grpo']"),
    (
        "gcs_connect",
        "[2025-01-16 08:48:22,123 E 31337 31337] gcs_rpc_client.h:179: Failed to "
        "connect to GCS at address 10.0.0.11:6379 within 5 seconds.",
    ),
    (
        "gcs_connect",
        "ray.exceptions.RaySystemError: System error: Failed to connect to GCS. "
        "Please check if the GCS server is running and if this node can connect to the head node.",
    ),
    (
        "gcs_connect",
        "ConnectionError: Could not find any running Ray instance. Please specify "
        "the one to connect to by setting `--address` flag or `RAY_ADDRESS` environment variable.",
    ),
    (
        "cuda_oom",
        RAY + "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. "
        "GPU 0 has a total capacity of 79.10 GiB of which 1.02 GiB is free.",
    ),
    ("cuda_oom", "RuntimeError: CUDA error: out of memory"),
    (
        "cuda_oom",
        "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB "
        "(GPU 0; 79.15 GiB total capacity; 77.80 GiB already allocated)",
    ),
    (
        "kv_cache",
        "ValueError: No available memory for the cache blocks. Try increasing "
        "`gpu_memory_utilization` when initializing the engine.",
    ),
    (
        "kv_cache",
        "ValueError: To serve at least one request with the models's max seq len "
        "(32768), (4.00 GiB KV cache is needed, which is larger than the available KV cache memory "
        "(2.10 GiB). Try increasing `gpu_memory_utilization` or decreasing `max_model_len`.",
    ),
    (
        "host_oom",
        "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low "
        "on memory. Memory on the node (IP: 10.0.0.12) where the task was running was 240.12GB / "
        "251.56GB (0.954517), which exceeds the memory usage threshold of 0.95.",
    ),
    (
        "host_oom",
        "(raylet) [2025-01-16 08:48:22,123 E 4521 4521] node_manager.cc:3193: 1 "
        "Workers (tasks / actors) killed due to memory pressure (OOM), 0 Workers crashed due to "
        "other reasons at node (ID: 8d1c, IP: 10.0.0.12) over the last time period.",
    ),
    (
        "mkl_gomp",
        "Error: mkl-service + Intel(R) MKL: MKL_THREADING_LAYER=INTEL is incompatible "
        "with libgomp.so.1 library.",
    ),
    (
        "upload_too_large",
        "RuntimeError: Request failed with status code 413: Maximum request "
        "body size 524288000 exceeded, actual body size 612345678.",
    ),
    (
        "upload_too_large",
        "aiohttp.web_exceptions.HTTPRequestEntityTooLarge: Request Entity Too Large",
    ),
    (
        "upload_too_large",
        "ValueError: Package size (617.87MiB) exceeds the maximum size of "
        "500.00MiB. To exclude large files, add them to '.gitignore' or '.rayignore' files, or use "
        "the 'excludes' option in the runtime_env",
    ),
    ("hydra_override", "Could not override 'actor_rollout_ref.actor.ppo_mini_batchsize'."),
    (
        "hydra_override",
        "hydra.errors.ConfigCompositionException: Could not override 'trainer.bogus'.",
    ),
    ("ray_version", "RuntimeError: Version mismatch: The cluster was started with:"),
    (
        "ray_version",
        "RuntimeError: Ray version mismatch: cluster has Ray version 2.49.0 but "
        "local Ray version is 2.60.0",
    ),
    # -- the long tail: each cause in the shape its library prints it, behind the prefixes
    # the launchers add (tui/logs/lineprefix.py)
    (
        "shm_full",
        "[default3]:ERROR: Unexpected bus error encountered in worker. This might be "
        "caused by insufficient shared memory (shm).",
    ),
    (
        "shm_full",
        "node1:77:88 [2] NCCL WARN Error: failed to extend /dev/shm/nccl-Ab12 to 9637892 bytes",
    ),
    ("disk_full", RAY + "OSError: [Errno 28] No space left on device: '/tmp/ray/spill/x'"),
    (
        "object_store_full",
        "ray.exceptions.ObjectStoreFullError: Failed to put object "
        "ffffffff in object store because it is full. Object size is 2 GiB.",
    ),
    ("nofile", "[1,3]<stderr>:OSError: [Errno 24] Too many open files"),
    (
        "cuda_driver_old",
        "RuntimeError: The NVIDIA driver on your system is too old (found version 11040).",
    ),
    ("torch_cpu_only", "AssertionError: Torch not compiled with CUDA enabled"),
    ("no_gpu", "RuntimeError: No CUDA GPUs are available"),
    ("gpu_busy", "RuntimeError: CUDA error: all CUDA-capable devices are busy or unavailable"),
    ("cuda_ordinal", "[rank5]: RuntimeError: CUDA error: invalid device ordinal"),
    (
        "gpu_arch",
        "RuntimeError: CUDA error: no kernel image is available for execution on the device",
    ),
    (
        "bf16_unsupported",
        "ValueError: Bfloat16 is only supported on GPUs with compute "
        "capability of at least 8.0. Your Tesla V100-SXM2-32GB GPU has compute capability 7.0.",
    ),
    (
        "illegal_memory_access",
        "(WorkerDict pid=7, ip=10.0.0.3) RuntimeError: CUDA error: an "
        "illegal memory access was encountered",
    ),
    (
        "device_assert",
        "../aten/src/ATen/native/cuda/Indexing.cu:1289: indexSelectLargeIndex: "
        "block: [1,0,0], thread: [64,0,0] Assertion `srcIndex < srcSelectDimSize` failed.",
    ),
    (
        "sglang_memory",
        "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
    ),
    (
        "seq_too_long",
        "ValueError: The decoder prompt (length 9000) is longer than the maximum "
        "model length of 8192.",
    ),
    ("sigkill", "torch.distributed.elastic.multiprocessing.api: exitcode  : -9 (pid: 4242)"),
    ("segfault", "(WorkerDict pid=9) *** SIGSEGV received at time=1759184497 on cpu 3 ***"),
    ("fpe", "Fatal Python error: Floating point exception"),
    (
        "abi_mismatch",
        "ImportError: /venv/lib/python3.10/site-packages/flash_attn_2_cuda."
        "cpython-310-x86_64-linux-gnu.so: undefined symbol: _ZN3c104cuda9SetDeviceEi",
    ),
    (
        "glibcxx",
        "ImportError: /opt/conda/lib/libstdc++.so.6: version `GLIBCXX_3.4.30' not "
        "found (required by /venv/lib/python3.10/site-packages/vllm/_C.abi3.so)",
    ),
    (
        "shared_lib",
        "ImportError: libcudart.so.12: cannot open shared object file: No such file or directory",
    ),
    (
        "cuda_fork",
        "RuntimeError: Cannot re-initialize CUDA in forked subprocess. To use CUDA "
        "with multiprocessing, you must use the 'spawn' start method",
    ),
    ("port_in_use", "OSError: [Errno 98] Address already in use"),
    (
        "permission_denied",
        "PermissionError: [Errno 13] Permission denied: '/mnt/shared/checkpoints/global_step_10'",
    ),
    (
        "model_not_found",
        "OSError: /models/Qwen2.5-7B is not a local folder and is not a valid "
        "model identifier listed on 'https://huggingface.co/models'",
    ),
    (
        "model_too_new",
        "ValueError: The checkpoint you are trying to load has model type "
        "`qwen3` but Transformers does not recognize this architecture.",
    ),
    (
        "chat_template",
        "ValueError: Cannot use chat template functions because "
        "tokenizer.chat_template is not set and no template argument was passed!",
    ),
    (
        "wandb_key",
        "(TaskRunner pid=55) wandb: ERROR api_key not configured (no-tty). call "
        "wandb.login(key=[your_api_key])",
    ),
    (
        "data_read",
        "FileNotFoundError: [Errno 2] No such file or directory: '/root/data/gsm8k/train.parquet'",
    ),
    (
        "ckpt_mismatch",
        "FileNotFoundError: [Errno 2] No such file or directory: "
        "'ckpt/global_step_50/actor/model_world_size_8_rank_0.pt'",
    ),
    ("dataset_column", "KeyError: 'reward_model'"),
    (
        "batch_divisible",
        "AssertionError: real_train_batch_size (60) must be divisible by "
        "minimal possible batch size (16)",
    ),
    (
        "hydra_append",
        "Could not append to config. An item is already at 'actor_rollout_ref.rollout.n'.",
    ),
    ("hydra_struct", "omegaconf.errors.ConfigAttributeError: Key 'ppo_epoch' is not in struct"),
    (
        "config_missing_value",
        "omegaconf.errors.MissingMandatoryValue: Missing mandatory value: data.train_files",
    ),
    ("hydra_parse", "LexerNoViableAltException: trainer.logger=[console,wandb"),
    ("config_type", "Value 'abc' could not be converted to Integer"),
    (
        "runtime_env_setup",
        "ray.exceptions.RuntimeEnvSetupError: Failed to set up runtime environment.",
    ),
    (
        "vllm_engine_dead",
        "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an "
        "issue. See stack trace (above) for the root cause.",
    ),
    (
        "nccl_peer_lost",
        "RuntimeError: NCCL communicator was aborted on rank 3. Original "
        "reason for failure was: NCCL error: remote process exited or there was a network error",
    ),
    (
        "c10d_timeout",
        "torch.distributed.DistNetworkError: The client socket has timed out "
        "after 900s while trying to connect to (10.0.0.11, 29500).",
    ),
    (
        "nccl_duplicate_gpu",
        "ncclInvalidUsage: Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1b000",
    ),
    (
        "nccl_cuda",
        "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:"
        "1970, unhandled cuda error (run with NCCL_DEBUG=INFO for details)",
    ),
    (
        "ray_connection",
        "2021-03-22T21:35:51Z F0322 14:35:51.321081 9 315 gcs_client.cc:207] "
        "Couldn't reconnect to GCS server. The last attempted GCS server address was 10.0.0.1:6379",
    ),
    ("node_died", "ray.exceptions.NodeDiedError: node 10.0.0.2 has been marked dead"),
    (
        "worker_register",
        "(raylet) [2025-01-16 08:48:22,123 E 45 45] worker_pool.cc:581: Some "
        "workers of the worker process(1234) have not registered within the timeout.",
    ),
    (
        "host_oom",
        "Memory on the node (IP: 10.0.0.12, ID: 8d1c) where the task (actor ID: 7c, "
        "name=WorkerDict.__init__) was running was 240.1GB / 251.5GB (0.954), which exceeds the "
        "memory usage threshold of 0.95.",
    ),
    (
        "gpus_short",
        "(TaskRunner pid=3) AssertionError: Not enough GPUs to run the reward "
        "model. world_size (4) < rollout_world_size (8).",
    ),
    # variants of the same causes in other libraries' words
    (
        "c10d_timeout",
        "torch.distributed.DistBackendError: [3] is setting up NCCL communicator "
        "and retrieving ncclUniqueId from [0] via c10d key-value store by key '0', but "
        "store->get('0') got error: Connection reset by peer",
    ),
    (
        "host_oom",
        "slurmstepd: error: Detected 1 oom_kill event in StepId=123.0. Some of the "
        "step tasks have been OOM Killed.",
    ),
    ("sigkill", "Killed"),
    (
        "model_not_found",
        "FileNotFoundError: [Errno 2] No such file or directory: '/models/x/config.json'",
    ),
    ("disk_full", "ray.exceptions.OutOfDiskError: Local disk is full"),
    ("shared_lib", "OSError: libnccl.so.2: cannot open shared object file: No such file"),
    ("wandb_key", "wandb: ERROR Error while calling W&B API: user is not logged in"),
    (
        "batch_divisible",
        "AssertionError: normalized ppo_mini_batch_size 4 should be divisible "
        "by ppo_micro_batch_size_per_gpu 8",
    ),
    ("gpu_busy", "RuntimeError: CUDA error: CUDA-capable device(s) is/are busy or unavailable"),
    ("no_gpu", "nvidia-container-cli: initialization error: nvml error: driver not loaded"),
    ("gpu_arch", "ValueError: Cannot use FlashAttention-2 backend for Volta and Turing GPUs."),
    ("nvml_mismatch", "Failed to initialize NVML: Driver/library version mismatch"),
    ("gpu_hardware", "RuntimeError: CUDA error: uncorrectable ECC error encountered"),
    (
        "gpu_hardware",
        "[Mon Jan  6 10:00:00 2025] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU "
        "has fallen off the bus.",
    ),
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
    # scary-looking but harmless: deprecations, retries, NCCL/vLLM/Ray chatter
    "/opt/verl/verl/utils/x.py:12: DeprecationWarning: `torch.cuda.amp.autocast` is deprecated",
    "node1:1:2 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.0.0.1<0>",
    "node1:1:2 [0] NCCL INFO [Service thread] Connection closed by localRank 2",
    "INFO 01-16 08:48:22 [executor_base.py:115] Maximum concurrency for 4096 tokens per "
    "request: 61.53x",
    "2025-01-16 08:48:22,123 INFO worker.py:1654 -- Could not find a previously running Ray "
    "instance, starting a new one",
    "Retrying (Retry(total=4, connect=None, read=None)) after connection broken by "
    "'ReadTimeoutError'",
    "[W socket.cpp:663] [c10d] The client socket has failed to connect to [localhost]:29500 "
    "(errno: 99 - Cannot assign requested address).",
    "(raylet) Spilled 6144 MiB, 12 objects, write throughput 1257 MiB/s.",
    "KV cache pool is full. Retract requests. #retracted_reqs: 1, #new_token_ratio: 0.7",
    "wandb: Network error (ConnectionError), entering retry loop.",
    "Killed old checkpoints: removed global_step_10",
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
    found = match_signature(
        "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory."
    )
    assert found is not None and found[0].key == "host_oom"


def test_hint_text_names_the_culprit():
    _, hint = match_signature("Could not override 'trainer.nnodez'.")
    assert "trainer.nnodez" in hint.text and "+trainer.nnodez=" in hint.text
    # a key verl renamed: the hint names the new key (the profile check's own table)
    _, hint = match_signature("Could not override 'critic.model.fsdp_config.param_offload'.")
    assert "critic.fsdp.param_offload" in hint.text and "renamed" in hint.text
    _, hint = match_signature("ModuleNotFoundError: No module named 'flash_attn'")
    assert "flash_attn" in hint.text and "every node" in hint.text
    _, hint = match_signature(
        "ValueError: Total available GPUs 8 is less than total desired GPUs 16"
    )
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


@pytest.mark.parametrize(
    ("line", "expected"),
    [
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
    ],
)
def test_classify(line, expected):
    assert classify(split_source(line)[1]) == expected


@pytest.mark.parametrize(
    ("line", "source", "message"),
    [
        ("(TaskRunner pid=1234, ip=10.0.0.2) hello", "(TaskRunner pid=1234, ip=10.0.0.2)", "hello"),
        ("(pid=99) x", "(pid=99)", "x"),
        ("(raylet) [2025] y", "(raylet)", "[2025] y"),
        ("(raylet, ip=10.0.0.3) y", "(raylet, ip=10.0.0.3)", "y"),
        ("(autoscaler +1m2s) Warning: z", "(autoscaler +1m2s)", "Warning: z"),
        ("[rank3]:[E1118 a] b", "[rank3]:", "[E1118 a] b"),
        (
            "(WorkerDict pid=5, ip=1.2.3.4) [rank0]: Traceback",
            "(WorkerDict pid=5, ip=1.2.3.4) [rank0]:",
            "Traceback",
        ),
        (
            "(WorkerDict pid=5) oops \x1b[32m[repeated 7x across cluster]\x1b[0m".replace(
                "\x1b[32m", ""
            ).replace("\x1b[0m", ""),
            "(WorkerDict pid=5)",
            "oops",
        ),
        ("(not a prefix) text", "", "(not a prefix) text"),
        ("[default3]:[rank3]: Traceback", "[default3]:[rank3]:", "Traceback"),
        ("[1,3]<stderr>:OSError: x", "[1,3]<stderr>:", "OSError: x"),
        ("  3: Traceback (most", "  3:", "Traceback (most"),
        (
            "[36m(WorkerDict pid=1, ip=10.0.0.2)[0m Fatal",
            "[36m(WorkerDict pid=1, ip=10.0.0.2)[0m",
            "Fatal",
        ),
        (
            "\ufffd[2m\ufffd[36m(raylet)\ufffd[0m Spilled",
            "\ufffd[2m\ufffd[36m(raylet)\ufffd[0m",
            "Spilled",
        ),
        (
            "(Worker pid=1, ip=10.0.0.2, actor_id=ab12) x",
            "(Worker pid=1, ip=10.0.0.2, actor_id=ab12)",
            "x",
        ),
        ("[rank12]:    raise x", "[rank12]:", "   raise x"),
        ("[2025] y", "", "[2025] y"),
        ("[INFO] text", "", "[INFO] text"),
    ],
)
def test_split_source(line, source, message):
    assert split_source(line) == (source, message)


def _feed(lines: list[str]) -> list[int]:
    clf = LineClassifier()
    return [clf.feed(i, line)[0] for i, line in enumerate(lines)]


def test_python_traceback_with_chained_exception():
    flags = _feed(
        [
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
        ]
    )
    assert flags == [
        TRACEBACK | ERROR,
        TRACEBACK,
        TRACEBACK,
        TRACEBACK,
        TRACEBACK | ERROR,
        0,
        TRACEBACK,
        0,
        TRACEBACK | ERROR,
        TRACEBACK,
        TRACEBACK,
        TRACEBACK | ERROR,
        0,
    ]


def test_ray_task_error_keeps_remote_frames():
    pre = "(TaskRunner pid=9, ip=10.0.0.2) "
    flags = _feed(
        [
            "Traceback (most recent call last):",
            '  File "/opt/verl/verl/trainer/main_ppo.py", line 42, in main',
            "    ray.get(runner.run.remote(config))",
            "ray.exceptions.RayTaskError(ValueError): ray::TaskRunner.run() (pid=9, ip=10.0.0.2)",
            '  File "/opt/verl/verl/trainer/main_ppo.py", line 120, in run',
            "    trainer.init_workers()",
            "ValueError: Total available GPUs 8 is less than total desired GPUs 16",
            pre + "unrelated",
        ]
    )
    assert flags[:3] == [TRACEBACK | ERROR, TRACEBACK, TRACEBACK]
    assert flags[3] == TRACEBACK | ERROR
    assert flags[4:6] == [TRACEBACK, TRACEBACK]
    assert flags[6] & (TRACEBACK | ERROR) == TRACEBACK | ERROR
    assert flags[7] == 0


def test_interleaved_tracebacks_tracked_per_origin():
    a, b = "(WorkerDict pid=1, ip=10.0.0.2) ", "(WorkerDict pid=2, ip=10.0.0.3) "
    flags = _feed(
        [
            a + "Traceback (most recent call last):",
            b + "Traceback (most recent call last):",
            a + '  File "/a.py", line 1, in f',
            b + '  File "/b.py", line 1, in g',
            a + "OSError: a",
            b + "    g()",
            b + "OSError: b",
        ]
    )
    assert all(f & TRACEBACK for f in flags)
    assert flags[4] & ERROR and flags[6] & ERROR and not flags[5] & ERROR


def test_unterminated_traceback_is_closed():
    clf = LineClassifier()
    clf.feed(0, "Traceback (most recent call last):")
    for i in range(1, 500):
        clf.feed(i, f"    frame {i}")
    assert not clf.active  # a traceback of 400+ lines is not one: stop following it


# -- real failure lines from public issues (tests/fixtures/failure_logs/lines.txt) --------------

CORPUS = Path(__file__).parent / "fixtures" / "failure_logs" / "lines.txt"


def _corpus() -> list[tuple[str | None, str, str]]:
    """(expected signature or None for benign, line, public source) in file order."""
    out: list[tuple[str | None, str, str]] = []
    section, source = None, ""
    for raw in CORPUS.read_text(encoding="utf-8").splitlines():
        if not raw.strip():
            continue
        if raw.startswith("# "):
            source = raw[2:]
            continue
        if raw.startswith("[") and raw.endswith("]") and " " not in raw:
            section = raw[1:-1]
            continue
        out.append((None if section == "benign" else section, raw, source))
    return out


REAL = _corpus()


def _store_hint(line: str) -> tuple[str | None, int]:
    """The hint key and flags the log store (prefilter and all) gives `line`."""
    store = LogStore()
    try:
        store.append("filler line\n" + line + "\n")
        hint = store.hint(1)
        return (hint.key if hint else None), store.flags(1)
    finally:
        store.close()


def test_corpus_is_real_and_covers_the_new_classes():
    keys = {key for key, _, _ in REAL}
    assert all(src.startswith("https://github.com/") for _, _, src in REAL)
    for key in (
        "host_oom",
        "actor_died",
        "hf_cache_perm",
        "vllm_cumem_oom",
        "placement_pending",
        "kv_cache",
        "vllm_pg_gpus",
        "gcs_connect",
        "nccl_timeout",
        "hydra_failed",
        "hydra_override",
        "import_missing",
        None,
    ):
        assert key in keys, key
    assert sum(key is None for key, _, _ in REAL) >= 20


@pytest.mark.parametrize(
    ("key", "line", "source"),
    REAL,
    ids=[f"{k or 'benign'}-{i}" for i, (k, _, _) in enumerate(REAL)],
)
def test_real_line_gets_exactly_its_hint(key, line, source):
    got, flags = _store_hint(line)
    assert got == key, (source, line)
    if key is not None:
        assert flags & HINT and flags & (ERROR | WARNING)
    else:
        assert not flags & HINT


def test_real_corpus_rate():
    """The issue's bar, over the whole corpus at once: ≥ 90 % of lines with a known cause get the
    right hint, and no benign line gets one."""
    known = [(k, line) for k, line, _ in REAL if k is not None]
    right = sum(_store_hint(line)[0] == k for k, line in known)
    assert right / len(known) >= 0.9, (right, len(known))
    assert [line for k, line, _ in REAL if k is None and _store_hint(line)[0] is not None] == []


# -- the prefilter is derived from the patterns and never hides a match --------------------------


def _slow_match(msg: str) -> str | None:
    """Every signature's regex on the line, no prefilter: what the prefilter must not change."""
    for sig in SIGNATURES:
        if sig.pattern.search(msg):
            return sig.key
    return None


def test_every_literal_holds_an_anchor():
    for sig in SIGNATURES:
        assert sig.literals, sig.key
        for lit in sig.literals:
            assert any(a in lit for a in PREFILTER.anchors), (sig.key, lit)
            assert i_of(sig) in PREFILTER.candidates(lit), (sig.key, lit)


def i_of(sig) -> int:
    return next(i for i, s in enumerate(SIGNATURES) if s is sig)


def test_required_literals_of_a_pattern():
    assert required_literals(re.compile(r"ab(?:cde|fgh)x+|ijk\d")) == ("cde", "fgh", "ijk")
    assert required_literals(re.compile(r"(?:Foo|^)Bar baz '(?P<k>x|y)'")) == ("bar baz '",)
    with pytest.raises(ValueError):
        required_literals(re.compile(r"a|bcdef"))  # one alternative has no 3-char literal
    with pytest.raises(ValueError):
        required_literals(re.compile(r"(?:abc)?\d+"))


def test_healthy_lines_rarely_pass_the_prefilter():
    """Healthy lines reach Python only when they hold a severity word; metric, NCCL INFO, vLLM
    INFO and progress lines do not."""
    healthy = [line for k, line, _ in REAL if k is None]
    data = ("\n".join(healthy) + "\n").encode()
    passed = len(candidate_starts(data))
    severity = sum(
        any(n in line.lower() for n in ("error", "warn", "exception")) for line in healthy
    )
    assert passed <= severity + 2, (passed, severity)


_FRAGMENTS = sorted(
    {lit for sig in SIGNATURES for lit in sig.literals}
    | {
        "CUDA Error: out of memory at /x/cumem_allocator.cpp:62",
        "(pid=1) ",
        "Could not override 'critic.model.fsdp_config.x'",
        "No module named 'vllm'",
        "Out of memory: Killed process 1 (python)",
        "[Errno 13] Permission denied: '/.cache'",
        "ImportError: /a/flash_attn_2_cuda.so: undefined",
        "Total available GPUs 8 is less than total desired GPUs 16",
    }
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.one_of(st.sampled_from(_FRAGMENTS), st.text(max_size=12)), max_size=6),
    st.booleans(),
)
def test_prefilter_never_hides_a_match(parts, upper):
    line = "".join(parts).replace("\n", " ").replace("\r", " ")
    if upper:
        line = line.upper()
    msg = split_source(line)[1]
    slow = _slow_match(msg)
    found = match_signature(msg)
    assert (found[0].key if found else None) == slow
    if slow is not None:
        assert candidate_starts(line.encode("utf-8", "replace") + b"\n") == [0]
