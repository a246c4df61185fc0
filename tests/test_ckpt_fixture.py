"""The checkpoint fixture (tests/ckpt/make_fsdp_checkpoint.py) writes verl's real FSDP layout,
and verl's own model merger turns it into a Hugging Face model whose forward pass matches the
model that was checkpointed; with one rank's shard missing the merger fails."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from ckpt.make_fsdp_checkpoint import files_by_writer

STEP = 3
WS = 2


@pytest.fixture(scope="module")
def ckpt(fsdp_checkpoint: dict) -> dict:
    """The run's checkpoint (conftest: trained once at step CKPT_STEP, read-only)."""
    assert fsdp_checkpoint["step_dir"].name == f"global_step_{STEP}"
    return fsdp_checkpoint


def _merge(local_dir: Path, target_dir: Path) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "CUDA_VISIBLE_DEVICES": "",
        "OMP_NUM_THREADS": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    cmd = [sys.executable, "-m", "verl.model_merger", "merge", "--backend", "fsdp",
           "--local_dir", str(local_dir), "--target_dir", str(target_dir)]  # fmt: skip
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)


def _tree(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


def test_layout_is_verls(ckpt: dict) -> None:
    import torch
    from torch.distributed.tensor import DTensor, Shard

    out: Path = ckpt["out_dir"]
    actor = f"global_step_{STEP}/actor"
    tree = _tree(out)
    hf = {p for p in tree if p.startswith(f"{actor}/huggingface/")}
    assert tree - hf == {
        "latest_checkpointed_iteration.txt",
        f"global_step_{STEP}/data.pt",
        f"{actor}/fsdp_config.json",
        *(
            f"{actor}/{k}_world_size_{WS}_rank_{r}.pt"
            for k in ("model", "optim", "extra_state")
            for r in range(WS)
        ),
    }
    hf_names = {p.rsplit("/", 1)[1] for p in hf}
    assert {
        "config.json",
        "generation_config.json",
        "tokenizer.json",
        "tokenizer_config.json",
    } <= hf_names
    assert hf_names <= {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                        "special_tokens_map.json", "chat_template.jinja"}  # fmt: skip

    # files_by_writer covers the tree exactly (this is what each node holds).
    by_writer = files_by_writer(STEP, WS)
    listed = {f for files in by_writer.values() for f in files}
    assert {f for f in listed if not f.endswith("/")} | hf == tree
    assert by_writer["rank1"] == [
        f"{actor}/{k}_world_size_2_rank_1.pt" for k in ("model", "optim", "extra_state")
    ]

    assert (out / "latest_checkpointed_iteration.txt").read_text() == str(STEP)
    assert (out / actor / "fsdp_config.json").read_text().replace(" ", "").replace("\n", "") == (
        '{"FSDP_version":1,"world_size":2}'
    )
    for r in range(WS):
        sd = torch.load(out / actor / f"model_world_size_{WS}_rank_{r}.pt", weights_only=False)
        v = sd["model.embed_tokens.weight"]
        assert isinstance(v, DTensor) and v.placements == (Shard(0),)
        assert v.device_mesh.mesh_dim_names == ("fsdp",) and v.to_local().shape == (64, 64)
        optim = torch.load(out / actor / f"optim_world_size_{WS}_rank_{r}.pt", weights_only=False)
        assert {"exp_avg", "exp_avg_sq", "step"} <= set(next(iter(optim["state"].values())))
        extra = torch.load(
            out / actor / f"extra_state_world_size_{WS}_rank_{r}.pt", weights_only=False
        )
        assert extra["lr_scheduler"]["last_epoch"] == 1 and "cpu" in extra["rng"]
    assert torch.load(out / f"global_step_{STEP}" / "data.pt", weights_only=False)


def test_verl_merger_output_matches_model(ckpt: dict, tmp_path: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    target = tmp_path / "merged"
    proc = _merge(ckpt["actor_dir"], target)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ref = torch.load(ckpt["reference"], weights_only=False)

    model = AutoModelForCausalLM.from_pretrained(target, dtype=torch.float32).eval()
    with torch.no_grad():
        logits = model(input_ids=ref["input_ids"]).logits.float()
    # The merger writes bf16: bit-for-bit the reference weights rounded to bf16 ...
    merged = model.state_dict()
    assert set(merged) == set(ref["state_dict"])
    for k, v in ref["state_dict"].items():
        assert torch.equal(merged[k], v.bfloat16().float()), k
    assert torch.allclose(logits, ref["logits_bf16_weights"], atol=1e-5, rtol=0)
    # ... and within bf16 rounding of the fp32 model that was trained.
    assert torch.allclose(logits, ref["logits"], atol=2e-2, rtol=0)
    assert torch.equal(logits.argmax(-1), ref["logits"].argmax(-1))
    # the tokenizer came through too (the merger requires one in huggingface/)
    from transformers import AutoTokenizer

    assert AutoTokenizer.from_pretrained(target).eos_token == "</s>"


def test_verl_merger_fails_with_a_rank_missing(ckpt: dict, tmp_path: Path) -> None:
    # What the rank-0 node holds on its own: every rank-1 file is elsewhere.
    partial = tmp_path / "actor"
    shutil.copytree(ckpt["actor_dir"], partial, ignore=shutil.ignore_patterns("*_rank_1.pt"))
    proc = _merge(partial, tmp_path / "merged")
    assert proc.returncode != 0
    assert (
        f"FileNotFoundError: [Errno 2] No such file or directory: '{partial}/model_world_size_2_rank_1.pt'"
        in proc.stderr
    ), proc.stderr
    # The merger leaves no model behind (it does create the empty target folder).
    assert not (tmp_path / "merged" / "model.safetensors").exists()
