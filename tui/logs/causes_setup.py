"""Signatures of failures of the job's setup: its Python environment and libraries, files and
permissions, the model and data it reads, and its config (Hydra and verl's own checks). A retry
fails the same way (retriable.py), so each hint names the setting, command or variable that
fixes it. Patterns follow tui/logs/sigdef.py's rules (bounded wildcards only)."""

from __future__ import annotations

import re

from tui.logs.sigdef import NEUTRAL, Signature, group, sig

ON_EVERY_NODE = "in the hosts.yaml python: on every node"
HYDRA_FAILED = "hydra_failed"

# -- hints that depend on the match ------------------------------------------------------------

_CUDA_LIBS = (
    "libcudart",
    "libcublas",
    "libcudnn",
    "libnccl",
    "libcusparse",
    "libcufft",
    "libcurand",
    "libnvrtc",
    "libnvjitlink",
    "libcusolver",
    "libcupti",
    "libnvtoolsext",
)

_SO_PACKAGES = (
    ("flash_attn", "flash-attn"),
    ("vllm", "vllm"),
    ("sgl_kernel", "sgl-kernel"),
    ("sglang", "sglang"),
    ("transformer_engine", "transformer-engine"),
    ("apex", "apex"),
    ("xformers", "xformers"),
    ("deepspeed", "deepspeed"),
    ("torchvision", "torchvision"),
    ("torchaudio", "torchaudio"),
    ("flashinfer", "flashinfer-python"),
    ("liger", "liger-kernel"),
    ("mamba", "mamba-ssm"),
    ("causal_conv1d", "causal-conv1d"),
)


def _import_hint(m: re.Match[str]) -> str:
    pkg = (group(m, "pkg", "pkg2") or "?").split(".")[0]
    # Its pip name from verl's own requirements (this Python's verl), else the module's name.
    from tui.jobs.pip_names import this_python

    pip = this_python().requirement(pkg).text
    return (
        f"Python package '{pkg}' is missing or broken in the interpreter that ran this worker:"
        f" install {pip} (built for this torch) into that Python on every node (hosts.yaml "
        "python:), the same version everywhere, then restart Ray (verl-tui up --restart)"
    )


def _override_hint(m: re.Match[str]) -> str:
    key = m.group("key")
    # The profile check's own table of keys verl renamed (stdlib-only module: no cycle, no cost).
    from tui.jobs.schema import renamed_to

    moved = renamed_to(key)
    if moved is not None:
        new, why = moved
        return (
            f"verl renamed '{key}': write {new}=… instead ({why}); verl-tui profile check "
            "lists every such key"
        )
    return (
        f"verl's config has no key '{key}' (removed from verl or misspelt): drop or rename "
        f"it (verl-tui profile check names the nearest real key); write +{key}=… only to add "
        "a key of your own"
    )


def _shared_lib_hint(m: re.Match[str]) -> str:
    lib = group(m, "lib", "lib2", "lib3") or "a shared library"
    low = lib.lower()
    if low.startswith("libcuda.so") or low.startswith("libnvidia-ml"):
        return (
            f"the NVIDIA driver's {lib} is not visible to this process: in a container run it "
            "with the GPUs (--gpus all, the NVIDIA container runtime; hosts.yaml container:), "
            "else install the NVIDIA driver on that node"
        )
    if low.startswith(_CUDA_LIBS):
        ver = lib.rsplit(".so.", 1)[1].split(".")[0] if ".so." in lib else ""
        cuda = f"CUDA {ver}" if ver else "the CUDA version they were built for"
        return (
            f"{lib} (the {cuda} runtime) is missing for torch/vLLM in this Python: install "
            "torch and vllm wheels built for the same CUDA (pip brings the "
            f"nvidia-*-cu{ver or 'N'} libraries) {ON_EVERY_NODE}, or add that toolkit's lib64 "
            "to LD_LIBRARY_PATH in hosts.yaml ray.env; `python -c 'import torch; "
            "print(torch.version.cuda)'` shows the CUDA torch expects"
        )
    return (
        f"the shared library {lib} cannot be loaded: install the package that provides it on "
        "every node (an OS package such as libnuma1, libibverbs1 or libgl1, or the pip package "
        "that bundles it), or add its folder to LD_LIBRARY_PATH in hosts.yaml ray.env"
    )


def _abi_hint(m: re.Match[str]) -> str:
    so = group(m, "so").lower()
    pip = next((p for mod, p in _SO_PACKAGES if mod in so), "")
    what = f"'{pip}'" if pip else "a compiled extension"
    fix = (
        "pip install flash-attn --no-build-isolation (or the prebuilt wheel for this torch, "
        "CUDA and cxx11abi)"
        if pip == "flash-attn"
        else f"reinstall {pip or 'it'} built for this torch"
    )
    return (
        f"{what} was built against a different torch/CUDA than the one installed (undefined "
        f"symbol in its compiled module): {fix} {ON_EVERY_NODE}; install torch, vllm and "
        "flash-attn as one matching set"
    )


def _perm_hint(m: re.Match[str]) -> str:
    path = group(m, "path")
    low = path.lower()
    if ".triton" in low:
        return (
            f"Triton's cache '{path}' is not writable (a user without a home directory): set "
            "TRITON_CACHE_DIR (and HOME) to a writable folder in hosts.yaml ray.env"
        )
    if ".cache" in low or "huggingface" in low or low.endswith(".lock") or "/hub/" in low:
        return (
            f"the Hugging Face cache is not writable ('{path}'; a user without a home directory "
            "gets '/.cache', a shared cache's .lock files belong to another user): set HF_HOME "
            "(and XDG_CACHE_HOME) to a folder this user can write on every node, in the job env "
            "or hosts.yaml ray.env"
        )
    return (
        f"the worker's user cannot write '{path}': fix its owner/mode on every node, or point "
        "the setting that names it (trainer.default_local_dir, data paths, HF_HOME) at a "
        "folder that user can write"
    )


def _data_hint(m: re.Match[str]) -> str:
    path = group(m, "path", "path2")
    if path:
        return (
            f"the data file '{path}' does not exist on the node that reads it (verl's TaskRunner "
            "may run on any node): put data.train_files / data.val_files on shared storage or at "
            "the same path on every node; verl-tui check --profile P checks them"
        )
    return (
        "a data file is not readable parquet (empty, truncated, a git-lfs pointer, or JSON "
        "renamed .parquet): regenerate it (verl's examples/data_preprocess scripts write "
        "parquet) and point data.train_files / data.val_files at the new file"
    )


def _hydra_append_hint(m: re.Match[str]) -> str:
    key = group(m, "key")
    return (
        f"'+{key}=…' adds a key, but verl's config already has '{key}': write {key}=… to "
        f"change it (or ++{key}=… to set it either way)"
    )


def _struct_hint(m: re.Match[str]) -> str:
    key = group(m, "key")
    return (
        f"verl's config has no key '{key}' here: check the spelling (verl-tui profile check "
        f"names the nearest real key), or write +{key}=… to add a key of your own"
    )


# -- the table ---------------------------------------------------------------------------------

SETUP_SIGNATURES: tuple[Signature, ...] = (
    sig(
        "abi_mismatch",
        r"(?P<so>[\w.+\-/]{0,300}\.so(?:\.\d{1,6}){0,4}): undefined symbol|undefined symbol: \w",
        _abi_hint,
        "an extension built for another torch",
    ),
    sig(
        "glibcxx",
        r"version `(?:GLIBCXX|CXXABI|GLIBC)_[\d.]{1,12}' not found",
        "the C/C++ runtime this process loads is older than the one a library was built with "
        "(often conda's libstdc++ first on the path): update it (conda install -c conda-forge "
        "libstdcxx-ng) or put the system's newer libstdc++ first in LD_LIBRARY_PATH (hosts.yaml "
        "ray.env)",
        "libstdc++/glibc too old",
    ),
    sig(
        "shared_lib",
        r"(?P<lib>[\w.+\-]{1,100}\.so(?:\.\d{1,6}){0,4}): cannot open shared object file"
        r"|cannot open shared object file"
        r"|error while loading shared libraries: (?P<lib2>[\w.+\-]{1,100})"
        r"|(?:Could not|Unable to) load (?:library )?(?P<lib3>lib[\w.+\-]{1,100}\.so)",
        _shared_lib_hint,
        "a shared library is missing",
    ),
    sig(
        "cuda_fork",
        r"Cannot re-initialize CUDA in forked subprocess",
        "CUDA was started before a fork (vLLM or a DataLoader forked after torch.cuda init): "
        "set VLLM_WORKER_MULTIPROC_METHOD=spawn in the job env or hosts.yaml ray.env",
        "CUDA in a forked subprocess",
    ),
    sig(
        "port_in_use",
        r"Address already in use|\[Errno 98\]|\bEADDRINUSE\b",
        "a port this job needs is taken — most often by processes left from an earlier run "
        "(vLLM/SGLang servers, torchrun): stop them (verl-tui down, or the PIDs `ss -ltnp` "
        "names) or choose another port (MASTER_PORT, hosts.yaml ray.port / dashboard_port)",
        "a port already in use",
    ),
    sig(
        "hf_cache_perm",
        r"\[Errno 13\] Permission denied: '(?P<path>[^'\n]{0,300}?"
        r"(?:\.cache|huggingface|\.triton|\.lock)[^'\n]{0,300})'",
        _perm_hint,
        "the Hugging Face cache is not writable",
    ),
    sig(
        "permission_denied",
        r"\[Errno 13\] Permission denied: '(?P<path>[^'\n]{1,300})'",
        _perm_hint,
        "a path the worker cannot write",
    ),
    sig(
        "model_not_found",
        r"We couldn't connect to 'https://huggingface\.co'|LocalEntryNotFoundError"
        r"|is not a local folder and is not a valid model identifier|Repository Not Found for url"
        r"|GatedRepoError|access a gated repo|Cannot access gated repo|host='huggingface\.co'"
        r"|No such file or directory: '[^'\n]{0,300}?(?:config|tokenizer\w{0,20})\.json'"
        r"|Can't load (?:the )?(?:tokenizer|config"
        r"|configuration) for|does not appear to have a file named",
        "the model path is not a folder on this node and the Hugging Face Hub was unreachable "
        "or refused: put the model at the same path on every node (or shared storage) for "
        "actor_rollout_ref.model.path; for a Hub id set HF_TOKEN (gated repos) or HF_ENDPOINT "
        "(a mirror) in hosts.yaml ray.env, or HF_HUB_OFFLINE=1 with a filled HF_HOME cache",
        "the model or tokenizer cannot be found",
    ),
    sig(
        "model_too_new",
        r"but Transformers does not recognize this architecture"
        r"|Model architectures \[[^\]\n]{1,200}\] are not supported"
        r"|Tokenizer class \w{1,100} does not exist or is not currently imported",
        "the installed transformers (or vLLM) is older than this model: upgrade it within "
        f"verl's supported range (pip install -U transformers; a newer vllm) {ON_EVERY_NODE}",
        "transformers/vLLM too old for the model",
    ),
    sig(
        "chat_template",
        r"chat_template is not set|Cannot use chat template functions"
        r"|Cannot use apply_chat_template|no chat template",
        "the tokenizer has no chat template (a base model's tokenizer): use the instruct/chat "
        "model's tokenizer (actor_rollout_ref.model.tokenizer_path), or give one as a Jinja "
        "string in actor_rollout_ref.model.custom_chat_template",
        "a tokenizer without a chat template",
        ignore_case=True,
    ),
    sig(
        "wandb_key",
        r"api_key not configured|wandb\.errors\.(?:errors\.)?(?:UsageError|AuthenticationError)"
        r"|wandb: ERROR .{0,200}?(?:API key|api_key|authenticat|not logged in)",
        "wandb has no API key on the node that logs (verl logs from its TaskRunner, on any "
        "node): set WANDB_API_KEY in hosts.yaml ray.env or the job env (names ending in KEY are "
        "masked), or WANDB_MODE=offline, or drop wandb from trainer.logger",
        "wandb without an API key",
        ignore_case=True,
    ),
    sig(
        "data_read",
        r"No such file or directory: '(?P<path>[^'\n]{1,300}?\.(?:parquet|jsonl|arrow))'"
        r"|Unable to find '(?P<path2>[^'\n]{1,300}?\.parquet)'"
        r"|Parquet magic bytes not found|Could not open Parquet input source"
        r"|Couldn't deserialize thrift|Parquet file size is 0 bytes|ArrowInvalid"
        r"|Invalid parquet file",
        _data_hint,
        "a data file is missing or not parquet",
    ),
    sig(
        "ckpt_mismatch",
        r"size mismatch for [\w.\-]{1,200}: copying a param with shape"
        r"|Error\(s\) in loading state_dict for|Missing key\(s\) in state_dict"
        r"|Unexpected key\(s\) in state_dict"
        r"|doesn't match the size of optimizer's group"
        r"|model_world_size_\d{1,6}_rank_\d{1,6}\.pt",
        "the checkpoint being resumed does not fit the model built now: resume with the same "
        "model (actor_rollout_ref.model.path) and, for verl's FSDP shards "
        "(model_world_size_N_rank_R.pt), the same trainer.nnodes × trainer.n_gpus_per_node "
        "that saved it; else start fresh (trainer.resume_mode=disable) or point "
        "trainer.resume_from_path at a matching checkpoint (verl's model_merger turns shards "
        "into an HF model to start from)",
        "a checkpoint that does not fit the model (resume)",
    ),
    sig(
        "dataset_column",
        r"KeyError: '(?P<col>prompt|data_source|reward_model|ability|extra_info|ground_truth)'",
        "the dataset lacks the column '{col}' that verl reads: regenerate the parquet with "
        "verl's columns (data_source, prompt as a chat list, ability, reward_model with "
        "ground_truth, extra_info) or name your prompt column in data.prompt_key",
        "a dataset column verl needs is missing",
    ),
    sig(
        "batch_divisible",
        r"must be divisible by minimal possible batch size|should be larger than 0 after normaliz"
        r"|normalized \w{1,60}_batch_size \d{1,9} should be"
        r"|(?:mini|micro)_batch_size.{0,80}?(?:must|should) be (?:divisible|larger|greater|>=)"
        r"|train_batch_size \(\d{1,9}\) must be|must be >= n_gpus"
        r"|is not divisible by infer_world_size|must be divisible by gpus_per_node"
        r"|should be divisible by tensor_model_parallel_size|n_gpus \(\d{1,9}\) must be divisible",
        "verl splits each batch over the GPUs: data.train_batch_size × rollout.n must divide by "
        "trainer.nnodes × trainer.n_gpus_per_node (÷ the model-parallel size); "
        "ppo_mini_batch_size × rollout.n must cover every data-parallel rank and divide by "
        "ppo_micro_batch_size_per_gpu; the rollout's tensor_model_parallel_size must divide "
        "n_gpus_per_node; verl-tui profile check works these out before submit",
        "batch sizes that do not divide over the GPUs",
    ),
    sig(
        "hydra_append",
        r"Could not append to config\. An item is already at '(?P<key>[^'\n]{1,300})'",
        _hydra_append_hint,
        "a config error (+key for a key that exists)",
    ),
    sig(
        "hydra_struct",
        r"Key '(?P<key>[^'\n]{1,300})' is not in struct",
        _struct_hint,
        "a config error (unknown key)",
    ),
    sig(
        "config_missing_value",
        r"Missing mandatory value: (?P<key>[\w.\[\]]{1,300})",
        "the config key '{key}' has no value (???): set it, e.g. {key}=… on the command line "
        "or in the profile",
        "a config error (missing value)",
    ),
    sig(
        "hydra_parse",
        r"LexerNoViableAltException|no viable alternative at input|token recognition error at"
        r"|mismatched input '.{1,60}?' expecting|Error parsing override '(?P<ov>[^'\n]{1,300})'",
        "Hydra could not parse an override: quote values holding commas, brackets, '=' or "
        "spaces as key='\"…\"' (a list as key='[a,b]'); verl-tui profile check shows how each "
        "value parses",
        "a config error (an override Hydra cannot parse)",
    ),
    sig(
        "config_type",
        r"Value '(?P<val>[^'\n]{0,200})' (?:could not be converted to|is not a valid) "
        r"(?P<typ>\w{1,30})",
        "a config value has the wrong type: '{val}' where verl expects {typ}; fix the value "
        "(verl-tui profile check names the key)",
        "a config error (wrong type)",
    ),
    sig(
        "hydra_override",
        r"Could not override '(?P<key>[^'\n]{1,300})'",
        _override_hint,
        "a config error (unknown or renamed key)",
    ),
    sig(
        "import_missing",
        r"(?:ModuleNotFoundError: |^)No module named '(?P<pkg>[A-Za-z_][A-Za-z0-9_.]{0,100})'"
        r"|ImportError: .{0,300}?\b(?P<pkg2>transfer_queue|vllm|sglang|flash_attn)(?:[\W_]|$)",
        _import_hint,
        "a package is missing on the cluster",
    ),
    sig(
        "mkl_gomp",
        r"MKL_THREADING_LAYER=INTEL is incompatible with libgomp",
        "numpy's MKL clashes with torch's libgomp: set MKL_SERVICE_FORCE_INTEL=1 (or "
        "MKL_THREADING_LAYER=GNU) in the job env or hosts.yaml ray.env, or import numpy first",
        "MKL/libgomp clash in the job's environment",
    ),
    sig(
        "upload_too_large",
        r"Request Entity Too Large|RequestEntityTooLarge|Maximum request body size \d+ exceeded"
        r"|Package size \([^)]{0,300}\) exceeds the maximum size|status code 413\b",
        "the job's working_dir is too big to upload: exclude checkpoints, data, outputs, .venv "
        "and .git (runtime_env excludes or .rayignore) and keep data on shared storage",
        "the working_dir is too large to upload",
    ),
    sig(
        "runtime_env_setup",
        r"RuntimeEnvSetupError|Failed to set up runtime environment",
        "Ray could not build the job's runtime_env (pip/conda/working_dir) on a node: "
        "runtime_env_setup-*.log in that node's /tmp/ray/session_latest/logs says why (a pip "
        "package that fails to build, no network); install packages into hosts.yaml python: "
        "instead of runtime_env pip",
        "the job's runtime_env could not be built",
    ),
    sig(
        "vllm_engine_dead",
        r"EngineDeadError|Engine loop has died|Background loop has errored already"
        r"|EngineCore encountered a fatal error",
        "vLLM's engine died earlier; its own first error above (EngineCore or a vLLM worker) is "
        "the cause — most often out of memory (actor_rollout_ref.rollout.gpu_memory_utilization) "
        "or a NCCL error between its tensor-parallel ranks",
        "vLLM's engine died",
        NEUTRAL,
    ),
    sig(
        "ray_version",
        r"\bVersion mismatch: The cluster was started with|Ray version mismatch",
        "the job's Ray (or Python) differs from the cluster's: install the same versions on "
        "every host and in the job's interpreter (hosts.yaml python:), then restart Ray",
        "Ray/Python versions differ across the cluster",
    ),
    sig(
        HYDRA_FAILED,
        r"^Error executing job with overrides:",
        "Hydra's summary after verl failed: the cause is the exception at the end of the "
        "traceback that follows this line (the next hint shows it); HYDRA_FULL_ERROR=1 adds "
        "Hydra's own frames",
        "verl failed under Hydra (the cause follows)",
        NEUTRAL,
    ),
)
