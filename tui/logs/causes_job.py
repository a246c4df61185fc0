"""Signatures of failures of the job itself: memory, the GPU and its driver, the Python
environment, files and disks, data, config. A retry fails the same way (retriable.py), so each
hint names the setting, command or variable that fixes it. Order matters within the table: the
more specific cause first (a /dev/shm "No space left on device" is shared memory, not a disk).
Patterns follow tui/logs/sigdef.py's rules (bounded wildcards only)."""

from __future__ import annotations

import re

from tui.logs.sigdef import NEUTRAL, Signature, sig

ON_EVERY_NODE = "in the hosts.yaml python: on every node"


# -- hints that depend on the match ------------------------------------------------------------


def _disk_hint(m: re.Match[str]) -> str:
    text = m.string.lower()
    if "spill" in text or "/tmp/ray" in text or "object creation" in text or "outofdisk" in text:
        return (
            "the disk under Ray's temp dir (/tmp/ray: logs and spilled objects) is full: free "
            "space there, or send spilled objects to a bigger disk with RAY_object_spilling_config="
            '\'{"type":"filesystem","params":{"directory_path":"/big/disk"}}\' in hosts.yaml '
            "ray.env, then restart Ray (verl-tui up --restart); `df -h /tmp` on that node"
        )
    return (
        "a disk is full (No space left on device): free space on that node (`df -h`), keep "
        "fewer checkpoints (trainer.max_actor_ckpt_to_keep), write them to a bigger disk "
        "(trainer.default_local_dir), and move HF_HOME / TMPDIR (hosts.yaml ray.env) off a "
        "small root disk"
    )


def _sglang_hint(m: re.Match[str]) -> str:
    text = m.group(0).lower()
    knob = "actor_rollout_ref.rollout.gpu_memory_utilization (SGLang's mem_fraction_static)"
    if "unbalanced" in text:
        return (
            "SGLang found less free memory on some GPUs than others: another process holds GPU "
            "memory (a rollout server left from an earlier run: verl-tui down, or the PIDs "
            "nvidia-smi lists); free the GPUs and resubmit"
        )
    if "increase" in text:
        return (
            f"SGLang has no room for its KV cache after loading the weights: raise {knob}, or "
            "raise rollout.tensor_model_parallel_size, or offload the actor (param/optimizer "
            "offload) so more of the GPU is free"
        )
    return (
        f"SGLang ran out of GPU memory while serving: lower {knob} and "
        "rollout.max_num_batched_tokens, or raise rollout.tensor_model_parallel_size"
    )


# -- the table ---------------------------------------------------------------------------------

JOB_SIGNATURES: tuple[Signature, ...] = (
    sig(
        "vllm_cumem_oom",
        r"CUDA Error: out of memory at .{0,300}?cumem",
        "vLLM could not take its GPU memory back on wake-up (sleep mode): the actor's weights, "
        "grads or optimizer still fill the GPU; lower actor_rollout_ref.rollout."
        "gpu_memory_utilization (e.g. 0.5) or turn on the actor's param/optimizer offload",
        "CUDA out of memory (vLLM wake-up)",
        ignore_case=True,
    ),
    sig(
        "shm_full",
        r"\bBus error\b|\bSIGBUS\b|bus error encountered|shared memory \(shm\)"
        r"|out of shared memory|unable to write to file </torch_"
        r"|(?:failed to extend|creating shared memory segment) /dev/shm"
        r"|/dev/shm/.{0,200}?(?:No space left|[Bb]us error)"
        r"|unable to (?:allocate|mmap|open) shared memory",
        "shared memory (/dev/shm) is too small or full for DataLoader workers, NCCL or Ray: "
        "start the container with --shm-size=64g or --ipc=host (hosts.yaml container:), or "
        "mount -o remount,size=64g /dev/shm on the host; fewer data.dataloader_num_workers "
        "needs less; verl-tui check shows each host's /dev/shm",
        "shared memory (/dev/shm) exhausted",
        ignore_case=True,
    ),
    sig(
        "disk_full",
        r"No space left on device|\[Errno 28\]|\bENOSPC\b|Disk quota exceeded|\[Errno 122\]"
        r"|is over \d{1,3}% full|OutOfDiskError|local disk is full|database or disk is full",
        _disk_hint,
        "a disk is full",
        ignore_case=True,
    ),
    sig(
        "object_store_full",
        r"ObjectStoreFullError|object store is full|Failed to put object .{0,200}? in object store"
        r"|object store (?:memory )?(?:is )?(?:at capacity|out of memory)|plasma store is full",
        "Ray's object store (shared memory) is full: raise ray.object_store_memory in hosts.yaml "
        "(bytes; /dev/shm must hold it) and restart Ray (verl-tui up --restart); a smaller "
        "data.train_batch_size or rollout.n moves less through it",
        "Ray's object store is full",
        ignore_case=True,
    ),
    sig(
        "nofile",
        r"Too many open files|\[Errno 24\]|\bEMFILE\b|received 0 items of ancdata",
        "a process hit its open-files limit (ulimit -n): raise it on every node before Ray "
        "starts — hosts.yaml env_setup: 'ulimit -n 65536' (within the hard limit of "
        "/etc/security/limits.conf, or the container's --ulimit nofile=65536:65536) — then "
        "verl-tui up --restart; verl-tui check shows each host's limit",
        "too many open files (ulimit -n)",
        ignore_case=True,
    ),
    sig(
        "cuda_driver_old",
        r"driver version is insufficient for CUDA runtime|cudaErrorInsufficientDriver"
        r"|NVIDIA driver on your system is too old|CUDA_ERROR_UNSUPPORTED_PTX_VERSION"
        r"|provided PTX was compiled with an unsupported toolchain"
        r"|forward compatibility was attempted on non supported HW"
        r"|unsupported display driver / cuda driver combination",
        "the node's NVIDIA driver is older than the CUDA that torch/vLLM were built for "
        "(nvidia-smi shows the newest CUDA the driver supports): upgrade the driver, or install "
        f"torch/vllm built for an older CUDA (e.g. the cu121 wheels) {ON_EVERY_NODE}; in a "
        "container, use an image whose CUDA the host driver supports",
        "NVIDIA driver too old for the CUDA runtime",
        ignore_case=True,
    ),
    sig(
        "nvml_mismatch",
        r"Driver/library version mismatch",
        "the NVIDIA kernel module and its user-space libraries differ (the driver was upgraded "
        "without a reboot): reboot that node, or reload the nvidia kernel modules, then restart "
        "Ray there (verl-tui up --restart)",
        "NVIDIA driver/library version mismatch",
    ),
    sig(
        "gpu_hardware",
        r"uncorrectable ECC error|cudaErrorECCUncorrectable|GPU has fallen off the bus"
        r"|NVML_ERROR_GPU_IS_LOST|\bXid\b.{0,40}?\b(?:48|63|64|74|79|94|95)\b",
        "a GPU failed in hardware (an uncorrectable ECC error, an Xid, fell off the bus): take "
        "that node out (hosts.yaml, or reset the GPU: nvidia-smi -r / reboot), check `dmesg` "
        "for the Xid, and resubmit on healthy nodes",
        "a GPU hardware fault",
        NEUTRAL,
    ),
    sig(
        "torch_cpu_only",
        r"Torch not compiled with CUDA enabled",
        "the interpreter that ran this worker has a CPU-only torch: install the CUDA build "
        "(pip install torch --index-url https://download.pytorch.org/whl/cu124, matching "
        f"verl's pin) {ON_EVERY_NODE}",
        "a CPU-only torch",
    ),
    sig(
        "no_gpu",
        r"No CUDA GPUs are available|Found no NVIDIA driver|no CUDA-capable device is detected"
        r"|CUDA driver initialization failed|cudaErrorNoDevice|CUDA_ERROR_NO_DEVICE"
        r"|nvml error: driver not loaded",
        "this process sees no GPU: Ray gave it none (the worker asked for 0 GPUs, or "
        "CUDA_VISIBLE_DEVICES is set empty in ray.env / the job env — let Ray set it), the "
        "container was started without --gpus all, or the driver is not loaded (nvidia-smi on "
        "that node); `ray status` shows the GPUs Ray counts",
        "no GPU visible to the process",
    ),
    sig(
        "gpu_busy",
        r"(?:devices are|device\(s\) is/are) busy or unavailable|cudaErrorDevicesUnavailable",
        "the GPUs are held by another process or set to exclusive-process mode: stop leftovers "
        "of an earlier run (verl-tui down; nvidia-smi lists the PIDs) or set the default "
        "compute mode (nvidia-smi -c 0)",
        "GPUs busy or exclusive",
    ),
    sig(
        "cuda_ordinal",
        r"invalid device ordinal|cudaErrorInvalidDevice",
        "a process asked for a GPU index it cannot see: CUDA_VISIBLE_DEVICES (ray.env or the "
        "job env) lists fewer GPUs than trainer.n_gpus_per_node or a tensor-parallel group "
        "needs; unset it and let Ray assign GPUs, and make n_gpus_per_node match the node",
        "GPU index out of range",
    ),
    sig(
        "gpu_arch",
        r"no kernel image is available for execution|cudaErrorNoKernelImageForDevice"
        r"|is not compatible with the current PyTorch installation"
        r"|FlashAttention only supports (?:Ampere|Turing|Hopper)"
        r"|Cannot use FlashAttention-2 backend for",
        "the installed torch/vLLM/flash-attn has no kernels for this GPU's architecture "
        "(`nvidia-smi --query-gpu=compute_cap --format=csv`): install builds for it "
        f"{ON_EVERY_NODE}; FlashAttention 2 needs Ampere or newer — on older GPUs set "
        "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",
        "the build has no kernels for this GPU",
    ),
    sig(
        "bf16_unsupported",
        r"Bfloat16 is only supported on GPUs with compute capability"
        r"|(?:bf16|bfloat16) is not supported|does not support (?:bf16|bfloat16)",
        "this GPU (compute capability below 8.0: V100, T4) has no bfloat16: run in float16 "
        "with actor_rollout_ref.rollout.dtype=float16 and actor_rollout_ref.actor.fsdp_config."
        "dtype=float16 (ref and critic alike), or use Ampere or newer GPUs",
        "bfloat16 on a GPU without it",
        ignore_case=True,
    ),
    sig(
        "illegal_memory_access",
        r"an illegal memory access was encountered|cudaErrorIllegalAddress"
        r"|CUDA_ERROR_ILLEGAL_ADDRESS|an illegal instruction was encountered"
        r"|CUDA error: misaligned address|unspecified launch failure",
        "a CUDA kernel faulted (CUDA errors are reported late, so the frame shown may be wrong): "
        "rerun with CUDA_LAUNCH_BLOCKING=1 in the job env to name the kernel; during vLLM "
        "rollout try VLLM_ATTENTION_BACKEND=XFORMERS (or FLASHINFER) and "
        "actor_rollout_ref.rollout.enforce_eager=True, and install torch, vllm and flash-attn "
        "as one matching set",
        "a CUDA kernel faulted (illegal memory access)",
    ),
    sig(
        "device_assert",
        r"device-side assert triggered|srcIndex < srcSelectDimSize"
        r"|Assertion `[^`\n]{1,200}` failed",
        "a GPU kernel's bounds check failed — most often a token id at or above the model's "
        "vocabulary (the tokenizer is not the model's: actor_rollout_ref.model.path / "
        "tokenizer_path) or a label out of range; CUDA_LAUNCH_BLOCKING=1 in the job env names "
        "the op",
        "a device-side assert (index out of range)",
    ),
    sig(
        "cuda_oom",
        r"CUDA out of memory|CUDA error: out of memory|torch\.(?:cuda\.)?OutOfMemoryError"
        r"|Cuda failure 'out of memory'|CUBLAS_STATUS_ALLOC_FAILED|cudaErrorMemoryAllocation"
        r"|CUDA_ERROR_OUT_OF_MEMORY",
        "a GPU ran out of memory: lower actor_rollout_ref.rollout.gpu_memory_utilization "
        "(the KV cache share), the *micro_batch_size_per_gpu / ppo_max_token_len_per_gpu, or "
        "turn on param/optimizer offload and gradient checkpointing",
        "CUDA out of memory",
        ignore_case=True,
    ),
    sig(
        "kv_cache",
        r"No available memory for the cache blocks"
        r"|KV cache is needed, which is larger than the available KV cache memory"
        r"|is larger than the maximum number of tokens that can be stored in KV cache"
        r"|Insufficient memory for KV cache",
        "vLLM has no room for its KV cache: raise "
        "actor_rollout_ref.rollout.gpu_memory_utilization, or lower rollout.max_model_len / "
        "max_num_batched_tokens, or raise rollout.tensor_model_parallel_size",
        "no GPU memory for vLLM's KV cache",
        ignore_case=True,
    ),
    sig(
        "sglang_memory",
        r"Please try to increase --mem-fraction-static|memory capacity is unbalanced"
        r"|(?:Prefill|Decode) out of memory",
        _sglang_hint,
        "SGLang's GPU memory (mem_fraction_static)",
    ),
    sig(
        "seq_too_long",
        r"maximum context length is \d{1,9} tokens|longer than the maximum model length"
        r"|max_num_batched_tokens \(\d{1,9}\) is smaller than max_model_len"
        r"|Input prompt \(\d{1,9} tokens\) is too long|greater than the derived max_model_len"
        r"|exceeds (?:the )?max_model_len",
        "prompt + response do not fit the rollout's model length: keep data.max_prompt_length "
        "+ data.max_response_length within actor_rollout_ref.rollout.max_model_len and the "
        "model's max_position_embeddings, set data.filter_overlong_prompts=True to drop long "
        "prompts, and keep rollout.max_num_batched_tokens ≥ max_model_len",
        "a sequence longer than the model length",
        ignore_case=True,
    ),
    sig(
        "host_oom",
        r"killed due to (?:the )?node running low on memory|killed due to memory pressure"
        r"|Out of memory: Kill(?:ed)? process|invoked oom-killer|\boom-kill:"
        r"|exceeds the memory usage threshold|DefaultCPUAllocator: can't allocate memory"
        r"|\[Errno 12\] Cannot allocate memory|std::bad_alloc|Detected \d{1,6} oom[-_]kill event"
        r"|\bOOMKilled\b|OOM Killed",
        "a node ran out of host RAM (Ray's memory monitor or the kernel's OOM killer killed a "
        "worker, or an allocation failed): lower host memory use (rollout batch, "
        "data.dataloader_num_workers, CPU offload, reward workers) or add RAM; raising "
        "RAY_memory_usage_threshold in hosts.yaml ray.env only moves the line; `ray memory` and "
        "`dmesg` show the holders",
        "a node ran out of host memory",
        ignore_case=True,
    ),
    sig(
        "sigkill",
        r"Signal 9 \(SIGKILL\)|Signals\.SIGKILL|killed by signal 9|exitcode *: -9\b"
        r"|exit code 137\b|\d{1,9} Killed {1,20}(?:python|ray|torchrun|bash)|^Killed\s{0,5}$",
        "a process was killed with SIGKILL — most often the kernel's OOM killer (host RAM; "
        "`dmesg` on that node), else a scheduler or container memory limit (Slurm --mem, "
        "docker --memory) or `ray stop --force`: lower host memory use or raise the limit",
        "killed by SIGKILL",
    ),
    sig(
        "segfault",
        r"Segmentation fault|SIGSEGV received|received signal SIGSEGV|Signal 11 \(SIGSEGV\)"
        r"|Signals\.SIGSEGV|exitcode *: -11\b|Fatal Python error: Aborted"
        r"|terminate called after throwing an instance of|\bSIGABRT\b",
        "a native library crashed the process (segfault or abort): the stack above (Python's "
        "faulthandler, or the 'what():' line) names the module — most often torch, vllm, "
        "flash-attn or NCCL builds that do not match: reinstall them as one matching set "
        f"{ON_EVERY_NODE}; PYTHONFAULTHANDLER=1 in the job env prints every thread's stack",
        "a native crash (SIGSEGV/abort)",
        ignore_case=True,
    ),
    sig(
        "fpe",
        r"Floating point exception|\bSIGFPE\b|Signal 8 \(SIGFPE\)|exitcode *: -8\b",
        "a native library divided by zero (SIGFPE): the faulthandler stack above names it — "
        "most often a zero-sized batch reaching a kernel (a filter that left no samples, a "
        "batch smaller than the GPUs: data.train_batch_size × rollout.n over the GPUs) or "
        f"mismatched torch/CUDA libraries (reinstall as one set {ON_EVERY_NODE})",
        "a native crash (SIGFPE)",
    ),
)
