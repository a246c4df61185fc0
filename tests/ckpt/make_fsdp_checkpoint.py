"""Write a real verl FSDP checkpoint of a tiny, randomly initialised causal LM (no download).

Two CPU processes (gloo, world size 2) build the model the way verl's FSDP engine does
(``verl/workers/engine/fsdp/transformer_impl.py``: FSDP1 FULL_SHARD over verl's device mesh
with verl's wrap policy, bf16 mixed precision, verl's optimizer and LR
scheduler), take one training step and save through verl's own ``FSDPCheckpointManager`` with
verl's default ``save_contents`` (model, optimizer, extra). Then, like
``RayPPOTrainer._save_checkpoint``, the driver writes ``global_step_N/data.pt`` and
``latest_checkpointed_iteration.txt``. Result, under ``out_dir`` (the trainer's
``default_local_dir``)::

    latest_checkpointed_iteration.txt          "N"
    global_step_N/data.pt                      dataloader state (StatefulDataLoader)
    global_step_N/actor/fsdp_config.json       {"FSDP_version": 1, "world_size": 2}
    global_step_N/actor/{model,optim,extra_state}_world_size_2_rank_{0,1}.pt
    global_step_N/actor/huggingface/           config, generation config, tokenizer

plus ``reference.pt`` (next to ``out_dir`` unless ``reference_path`` is given): the full fp32
state dict as saved, a fixed ``input_ids`` and the logits of that model on it (also with its
weights rounded to bf16, which is what verl's merger writes).

CPU only: the one patch is verl's device helpers (``get_device_name`` -> "cpu",
``get_device_id`` -> cpu), which report "cuda" on a host without a GPU. The checkpoint code is
not patched.

Usage: python tests/ckpt/make_fsdp_checkpoint.py OUT_DIR [--step N] [--seed S]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WORLD_SIZE = 2
VOCAB_SIZE = 128
INPUT_LEN = 12

# A tiny Qwen2 (verl's most common family); untied embeddings, like the 7B-class models.
MODEL_CONFIG = dict(
    vocab_size=VOCAB_SIZE,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=128,
    tie_word_embeddings=False,
    bos_token_id=1,
    eos_token_id=2,
    pad_token_id=0,
)


def _cpu_env(env: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ if env is None else env)
    env["CUDA_VISIBLE_DEVICES"] = ""
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    env.setdefault("GLOO_SOCKET_IFNAME", "lo")
    env.setdefault("VERL_LOGGING_LEVEL", "WARNING")
    env.setdefault("PYTHONWARNINGS", "ignore")
    return env


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --------------------------------------------------------------------------------------------
# base model (what actor_rollout_ref.model.path would point at)
# --------------------------------------------------------------------------------------------


def build_tokenizer():
    """A tiny word-level fast tokenizer, built locally: verl's merger needs one in huggingface/."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["<pad>", "<s>", "</s>", "<unk>"]
    words = [f"w{i}" for i in range(VOCAB_SIZE - len(specials))]
    vocab = {tok: i for i, tok in enumerate(specials + words)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        unk_token="<unk>",
    )


def write_base_model(path: Path, seed: int) -> None:
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig, Qwen2Config

    torch.manual_seed(seed)
    config = Qwen2Config(**MODEL_CONFIG)
    config.architectures = ["Qwen2ForCausalLM"]
    model = AutoModelForCausalLM.from_config(config, torch_dtype=torch.float32)
    model.save_pretrained(path)
    GenerationConfig(bos_token_id=1, eos_token_id=2, pad_token_id=0).save_pretrained(path)
    build_tokenizer().save_pretrained(path)


# --------------------------------------------------------------------------------------------
# one rank
# --------------------------------------------------------------------------------------------


def _patch_verl_device_helpers() -> None:
    """verl's platform layer falls back to 'nvidia' when no accelerator is present, so
    get_device_name() == 'cuda' and get_device_id() asserts. Point the two helpers that the
    FSDP build uses at the CPU. Nothing in verl/utils/checkpoint is touched."""
    import torch
    import verl.utils.fsdp_utils as fsdp_utils
    import verl.workers.engine.fsdp.utils as engine_utils

    engine_utils.get_device_name = lambda: "cpu"  # create_device_mesh
    fsdp_utils.get_device_id = lambda: torch.device("cpu")  # init_fn (param_init_fn)


def _worker(args: argparse.Namespace) -> None:
    import warnings

    warnings.filterwarnings("ignore")
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    rank = int(os.environ["RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", rank=rank, world_size=world_size)

    _patch_verl_device_helpers()

    from torch.distributed.fsdp import FullStateDictConfig, MixedPrecision, StateDictType
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    from verl.trainer.config import CheckpointConfig
    from verl.utils.checkpoint.fsdp_checkpoint_manager import FSDPCheckpointManager
    from verl.utils.fsdp_utils import get_fsdp_wrap_policy, get_init_weight_context_manager, init_fn
    from verl.utils.torch_functional import get_constant_schedule_with_warmup
    from verl.workers.config.optimizer import FSDPOptimizerConfig, build_optimizer
    from verl.workers.engine.fsdp.utils import create_device_mesh, get_sharding_strategy

    base = args.base_model
    hf_config = AutoConfig.from_pretrained(base)
    tokenizer = AutoTokenizer.from_pretrained(base)

    # FSDPEngine._init_device_mesh / _build_module / _build_fsdp_module, with verl's defaults
    # (fsdp_size=-1, model_dtype fp32, mixed_precision None -> bf16/fp32/fp32, reshard True).
    device_mesh = create_device_mesh(world_size=world_size, fsdp_size=-1)
    # verl puts rank != 0 on meta and lets FSDP broadcast rank 0's weights
    # (sync_module_states=True); torch's FSDP1 refuses that for CPU tensors ("requires them to
    # be on GPU"). Every rank loads the same base model from disk instead (verl's own
    # use_meta_tensor=False path), so no sync is needed.
    init_context = get_init_weight_context_manager(use_meta_tensor=False, mesh=device_mesh)
    with init_context():
        module = AutoModelForCausalLM.from_pretrained(
            base, torch_dtype=torch.float32, config=hf_config
        )
    module.to(torch.float32)
    dist.barrier()

    module = FSDP(
        module,
        param_init_fn=init_fn,
        auto_wrap_policy=get_fsdp_wrap_policy(module=module, config={}, is_lora=False),
        device_id=torch.device("cpu"),
        sharding_strategy=get_sharding_strategy(device_mesh, zero3_enable=True),
        mixed_precision=MixedPrecision(
            param_dtype=torch.bfloat16, reduce_dtype=torch.float32, buffer_dtype=torch.float32
        ),
        sync_module_states=False,  # True on GPU in verl; see above
        device_mesh=device_mesh,
        forward_prefetch=False,
        use_orig_params=False,
        cpu_offload=None,
    )
    optim_config = FSDPOptimizerConfig(lr=1e-3, total_training_steps=10)
    optimizer = build_optimizer(module.parameters(), optim_config)
    lr_scheduler = get_constant_schedule_with_warmup(optimizer=optimizer, num_warmup_steps=0)

    # One real step, so the optimizer shards carry Adam state and the scheduler has counted.
    g = torch.Generator().manual_seed(args.seed + 1 + rank)
    batch = torch.randint(3, VOCAB_SIZE, (2, 16), generator=g)
    loss = module(input_ids=batch, labels=batch).loss
    loss.backward()
    module.clip_grad_norm_(max_norm=optim_config.clip_grad)
    optimizer.step()
    lr_scheduler.step()
    optimizer.zero_grad(set_to_none=True)

    checkpoint_manager = FSDPCheckpointManager(
        model=module,
        optimizer=optimizer,
        lr_scheduler=lr_scheduler,
        processing_class=tokenizer,
        checkpoint_config=CheckpointConfig(),  # save_contents: model, optimizer, extra
        trust_remote_code=False,
    )
    # RayPPOTrainer._save_checkpoint: default_local_dir/global_step_N/actor
    actor_dir = os.path.join(args.out_dir, f"global_step_{args.step}", "actor")
    checkpoint_manager.save_checkpoint(
        local_path=actor_dir, hdfs_path=None, global_step=args.step, max_ckpt_to_keep=None
    )
    dist.barrier()

    # Reference: the full model as checkpointed, and its fp32 logits on a fixed input.
    # (offload_to_cpu=True breaks on CPU-resident flat params: the unshard frees their storage.)
    cfg = FullStateDictConfig(offload_to_cpu=False, rank0_only=False)
    with FSDP.state_dict_type(module, StateDictType.FULL_STATE_DICT, cfg):
        full = module.state_dict()
    if rank == 0:
        full = {k: v.detach().clone().float() for k, v in full.items()}
        ref = AutoModelForCausalLM.from_config(hf_config, torch_dtype=torch.float32)
        ref.load_state_dict(full)
        ref.eval()
        input_ids = torch.randint(
            3, VOCAB_SIZE, (1, INPUT_LEN), generator=torch.Generator().manual_seed(1234)
        )
        with torch.no_grad():
            logits = ref(input_ids=input_ids).logits.float()
            # verl's merger writes bf16 weights: the same model with bf16-rounded weights,
            # computed in fp32, is what a merged model loaded as fp32 must reproduce exactly.
            ref.load_state_dict({k: v.bfloat16().float() for k, v in full.items()})
            logits_bf16_weights = ref(input_ids=input_ids).logits.float()
        torch.save(
            {
                "state_dict": full,
                "input_ids": input_ids,
                "logits": logits,
                "logits_bf16_weights": logits_bf16_weights,
                "step": args.step,
                "seed": args.seed,
            },
            args.reference,
        )
    dist.barrier()
    dist.destroy_process_group()


# --------------------------------------------------------------------------------------------
# driver
# --------------------------------------------------------------------------------------------


def _write_driver_files(out_dir: Path, step: int) -> None:
    """What RayPPOTrainer._save_checkpoint writes itself after the workers: data.pt, tracker."""
    import warnings

    import torch
    from torchdata.stateful_dataloader import StatefulDataLoader

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torchdata: "'set_vital' is deprecated"
        # Mid-epoch after `step` batches (a run of many steps has gone through several epochs
        # of a small dataset: only the position within the epoch is kept).
        loader = StatefulDataLoader(list(range(16)), batch_size=2, shuffle=False)
        it = iter(loader)
        for _ in range(step % len(loader) or len(loader) - 1):
            next(it)
    step_dir = out_dir / f"global_step_{step}"
    step_dir.mkdir(parents=True, exist_ok=True)
    torch.save(loader.state_dict(), step_dir / "data.pt")
    with open(out_dir / "latest_checkpointed_iteration.txt", "w") as f:
        f.write(str(step))


def files_by_writer(step: int, world_size: int = WORLD_SIZE) -> dict[str, list[str]]:
    """Which files (relative to ``out_dir``) each process writes, i.e. what each node holds after
    a multi-node run without a shared filesystem. Keys: "rank0".."rank{W-1}" (the actor
    workers; rank 0 alone writes fsdp_config.json and huggingface/) and "driver" (the trainer
    process: data.pt and the tracker). Directories are listed with a trailing "/"."""
    actor = f"global_step_{step}/actor"
    out: dict[str, list[str]] = {}
    for rank in range(world_size):
        out[f"rank{rank}"] = [
            f"{actor}/{kind}_world_size_{world_size}_rank_{rank}.pt"
            for kind in ("model", "optim", "extra_state")
        ]
    out["rank0"] += [f"{actor}/fsdp_config.json", f"{actor}/huggingface/"]
    out["driver"] = [f"global_step_{step}/data.pt", "latest_checkpointed_iteration.txt"]
    return out


def make_fsdp_checkpoint(
    out_dir: str | os.PathLike,
    step: int = 1,
    *,
    reference_path: str | os.PathLike | None = None,
    seed: int = 0,
    timeout: float = 300.0,
) -> dict:
    """Write a world-size-2 verl FSDP checkpoint of a tiny random Qwen2 under ``out_dir``.

    ``out_dir`` plays verl's ``trainer.default_local_dir``. ``reference_path`` (default
    ``<out_dir>/../reference.pt``) receives {"state_dict" (fp32, as checkpointed), "input_ids",
    "logits" (fp32 model), "logits_bf16_weights" (same, weights rounded to bf16 as the merger
    writes them), "step", "seed"}.
    Returns {"out_dir", "step_dir", "actor_dir", "tracker", "reference", "seconds"} (Paths).
    Runs two CPU processes with gloo; raises RuntimeError with their output if one fails.
    """
    t0 = time.monotonic()
    out_dir = Path(out_dir).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    reference = Path(reference_path) if reference_path else out_dir.parent / "reference.pt"
    reference = reference.resolve()
    env = _cpu_env()
    with tempfile.TemporaryDirectory(prefix="verl-tui-base-model-") as tmp:
        base = Path(tmp) / "base_model"
        # The base model is written in a subprocess too, so the caller's process never imports
        # verl/torch.distributed state from here.
        cmd = [sys.executable, __file__, "--_base", str(base), "--seed", str(seed)]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0:
            raise RuntimeError(
                f"make_fsdp_checkpoint: writing the base model failed\n{proc.stdout}{proc.stderr}"
            )
        for attempt in range(3):  # the free port can be taken between probing and binding
            try:
                _run_ranks(env, out_dir, step, seed, base, reference, time.monotonic() + timeout)
                break
            except RuntimeError as e:
                if attempt == 2 or "Address already in use" not in str(e):
                    raise
    _write_driver_files(out_dir, step)
    step_dir = out_dir / f"global_step_{step}"
    return {
        "out_dir": out_dir,
        "step_dir": step_dir,
        "actor_dir": step_dir / "actor",
        "tracker": out_dir / "latest_checkpointed_iteration.txt",
        "reference": reference,
        "seconds": time.monotonic() - t0,
    }


def _run_ranks(
    env: dict, out_dir: Path, step: int, seed: int, base: Path, reference: Path, deadline: float
) -> None:
    env = {
        **env,
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(_free_port()),
        "WORLD_SIZE": str(WORLD_SIZE),
    }
    procs = []
    for rank in range(WORLD_SIZE):
        cmd = [
            sys.executable, __file__, "--_worker", str(out_dir), "--step", str(step), "--seed", str(seed),
            "--base-model", str(base), "--reference", str(reference),
        ]  # fmt: skip
        rank_env = {**env, "RANK": str(rank), "LOCAL_RANK": str(rank)}
        procs.append(
            subprocess.Popen(
                cmd, env=rank_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            )
        )
    outputs, failed = [], False
    for rank, p in enumerate(procs):
        try:
            out, _ = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            out, _ = p.communicate()
            failed = True
        outputs.append(f"--- rank {rank} (rc={p.returncode}) ---\n{out}")
        failed |= p.returncode != 0
    if failed:
        raise RuntimeError("make_fsdp_checkpoint: a rank failed\n" + "\n".join(outputs))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out_dir", nargs="?")
    p.add_argument("--step", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--reference", default=None)
    p.add_argument("--_worker", dest="worker_out", default=None, help=argparse.SUPPRESS)
    p.add_argument("--_base", dest="base_out", default=None, help=argparse.SUPPRESS)
    p.add_argument("--base-model", dest="base_model", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.base_out:
        write_base_model(Path(args.base_out), args.seed)
    elif args.worker_out:
        args.out_dir = args.worker_out
        _worker(args)
    else:
        if not args.out_dir:
            p.error("OUT_DIR is required")
        info = make_fsdp_checkpoint(
            args.out_dir, args.step, reference_path=args.reference, seed=args.seed
        )
        print(json.dumps({k: str(v) for k, v in info.items()}, indent=2))


if __name__ == "__main__":
    main()
