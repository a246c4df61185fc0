"""Issue 6 end to end with verl's real checkpoint: a tiny random Qwen2 trained one step with
FSDP (world size 2, CPU gloo) and saved by verl's own FSDPCheckpointManager, its files split
across two namespace sshd hosts the way a two-node run leaves them (each node its own rank,
the rank-0 node the config and tokenizer, the driver node data.pt); `verl-tui ckpt` lists each
host incomplete and the step complete together; collect copies the missing shards onto node1
over the cockpit's SSH connections; verl's model_merger runs there; the Hugging Face folder it
writes loads in transformers and gives the trained model's logits."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from ckpt.make_fsdp_checkpoint import files_by_writer
from harness.cli import run_cli
from test_ray_lifecycle import hosts_yaml

STEP = 3


@pytest.fixture(scope="module")
def real_ckpt(fsdp_checkpoint: dict) -> dict:
    assert fsdp_checkpoint["step_dir"].name == f"global_step_{STEP}"
    return fsdp_checkpoint


def _copy(src_root: Path, rel: str, dst_root: Path) -> None:
    src, dst = src_root / rel.rstrip("/"), dst_root / rel.rstrip("/")
    dst.parent.mkdir(parents=True, exist_ok=True)
    if rel.endswith("/"):
        shutil.copytree(src, dst)
    else:
        shutil.copy2(src, dst)


def cli(env, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return run_cli([*args], env=env, timeout=timeout)


def split_across_hosts(real_ckpt, cluster, tmp_path) -> tuple[Path, dict[str, Path]]:
    """One path for every node (trainer.default_local_dir), each node's own files behind it:
    node1 what rank 0 and the driver wrote, node2 what rank 1 wrote."""
    root = tmp_path / "ckpt" / "run"
    root.mkdir(parents=True)
    disks = {h.name: tmp_path / "disks" / h.name for h in cluster.hosts}
    writers = files_by_writer(STEP)
    layout = {"node1": writers["rank0"] + writers["driver"], "node2": writers["rank1"]}
    for name, disk in disks.items():
        disk.mkdir(parents=True)
        for rel in layout[name]:
            _copy(real_ckpt["out_dir"], rel, disk)
        res = cluster.exec_in(name, ["mount", "--bind", str(disk), str(root)])
        assert res.returncode == 0, res.stderr
    return root, disks


def test_list_collect_merge_real_verl_checkpoint(real_ckpt, ns_cluster_factory, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM

    cluster = ns_cluster_factory(2)
    hosts = hosts_yaml(cluster, tmp_path / "hosts.yaml")
    root, disks = split_across_hosts(real_ckpt, cluster, tmp_path)
    writers = files_by_writer(STEP)
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}

    listed = cli(env, "ckpt", str(hosts), "--dir", str(root), "--json")
    assert listed.returncode == 0, listed.stderr
    [step] = json.loads(listed.stdout)["steps"]
    assert step["step"] == STEP and step["world_size"] == 2
    assert step["complete"] is True  # all ranks exist somewhere ...
    assert step["hosts"] == {"node1": [0], "node2": [1]}
    assert step["complete_on"] == []  # ... but on neither host alone

    # verl's merger on node1 alone fails (the cockpit refuses before running it).
    refused = cli(
        env,
        "ckpt",
        str(hosts),
        "--dir",
        str(root),
        "--merge",
        str(STEP),
        "--on",
        "node1",
        "--target",
        str(tmp_path / "out-refused"),
    )
    assert refused.returncode != 0 and "rank" in (refused.stderr + refused.stdout).lower()
    assert "Traceback" not in refused.stderr

    collected = cli(
        env, "ckpt", str(hosts), "--dir", str(root), "--collect", str(STEP), "--to", "node1"
    )
    assert collected.returncode == 0, collected.stdout + collected.stderr
    for rel in writers["rank1"]:
        a, b = disks["node1"] / rel, disks["node2"] / rel
        assert a.read_bytes() == b.read_bytes(), rel
    again = json.loads(cli(env, "ckpt", str(hosts), "--dir", str(root), "--json").stdout)
    assert again["steps"][0]["complete_on"] == ["node1"]

    target = tmp_path / "merged-hf"
    merged = cli(
        env,
        "ckpt",
        str(hosts),
        "--dir",
        str(root),
        "--merge",
        str(STEP),
        "--on",
        "node1",
        "--target",
        str(target),
    )
    assert merged.returncode == 0, merged.stdout + merged.stderr
    assert "model.safetensors" in merged.stdout  # what it produced is listed
    # node1 wrote the folder on its own disk view; the merger ran there, not here.
    ref = torch.load(real_ckpt["reference"], weights_only=False)
    model = AutoModelForCausalLM.from_pretrained(target, dtype=torch.float32).eval()
    with torch.no_grad():
        logits = model(input_ids=ref["input_ids"]).logits.float()
    assert torch.allclose(logits, ref["logits_bf16_weights"], atol=1e-5, rtol=0)
    assert torch.equal(logits.argmax(-1), ref["logits"].argmax(-1))


async def test_checkpoints_screen_collect_merge_and_resume_pick(
    real_ckpt, ns_cluster_factory, tmp_path, monkeypatch
):
    """Pilot: 5 → the folder → the step is spread (no host holds it alone) → c collects onto
    node1 with a progress bar → complete there → m merges (live output, files listed); the job
    form's ctrl+o picks it: resume_mode and resume_from_path set, a world-size warning shown."""
    from textual.widgets import Input, RichLog

    from tui.app import VerlTuiApp
    from tui.config.hosts import load_inventory
    from tui.screens.checkpoints import CheckpointsScreen
    from tui.screens.ckpt_picker import CheckpointPickerScreen
    from tui.screens.job_form.screen import JobFormScreen

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    cluster = ns_cluster_factory(2)
    inv = load_inventory(hosts_yaml(cluster, tmp_path / "hosts.yaml"))
    root, _ = split_across_hosts(real_ckpt, cluster, tmp_path)
    app = VerlTuiApp(inv, interval=1.0)

    async def until(pilot, predicate, timeout, what):
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not predicate():
            if loop.time() > deadline:
                raise AssertionError(f"{what}: not within {timeout} s")
            await pilot.pause(0.2)

    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("5")
        screen = app.screen
        assert isinstance(screen, CheckpointsScreen)
        prompt = screen.query_one("#ckpt-prompt", Input)
        assert not prompt.has_focus  # keys go to the table; `/` asks for the folder
        await pilot.press("slash")
        await pilot.pause(0.2)
        assert prompt.has_focus
        prompt.value = str(root)
        await pilot.press("enter")
        await until(
            pilot, lambda: screen.index is not None and screen.current is not None, 60, "scanned"
        )
        step = screen.current
        assert step.step == STEP and step.complete and step.complete_on == ()
        assert "spread" in str(screen.query_one("#ckpt-steps").get_row_at(0)[2])
        await pilot.press("m")  # not complete on node1 alone: refused with a reason
        await pilot.pause(0.3)
        assert screen.busy is None
        await pilot.press("c")
        await until(
            pilot,
            lambda: screen.current is not None and screen.current.complete_on == ("node1",),
            120,
            "collected onto node1",
        )
        out = screen.query_one("#ckpt-output", RichLog)
        text = "\n".join(str(line.text) for line in out.lines)
        assert "sha256 checked" in text and "model_world_size_2_rank_1.pt" in text
        await pilot.press("m")
        target = tmp_path / "merged-ui"
        box = screen.query_one("#ckpt-prompt", Input)
        assert box.has_focus
        box.value = str(target)
        await pilot.press("enter")
        await until(
            pilot, lambda: any("merged into" in str(line.text) for line in out.lines), 180, "merged"
        )
        assert (target / "model.safetensors").is_file()
        await pilot.press("escape")

        preset = Path(__file__).resolve().parents[1] / "profiles" / "grpo-gsm8k-qwen2.5-0.5b.yaml"
        form = JobFormScreen(
            app.services,
            preset,
            initial_sets=[f"trainer.default_local_dir={root}"],
        )
        await app.push_screen(form)
        await until(pilot, lambda: "trainer.default_local_dir" in form.fields, 60, "form ready")
        await pilot.press("ctrl+o")
        await until(
            pilot,
            lambda: isinstance(app.screen, CheckpointPickerScreen) and app.screen.index is not None,
            60,
            "picker scanned",
        )
        await pilot.press("enter")
        await until(pilot, lambda: "trainer.resume_from_path" in form.fields, 10, "resume set")
        assert form.fields["trainer.resume_mode"].text == "resume_path"
        assert (
            form.fields["trainer.resume_from_path"].text.strip("'\"")
            == f"{root}/global_step_{STEP}"
        )
        await pilot.press("ctrl+t", "y")  # discard the draft (it asks first)
