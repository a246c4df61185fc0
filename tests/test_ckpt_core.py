"""Checkpoints across real namespace sshd hosts: scan, collect (relayed over the cockpit's SSH
connections, sha256-checked, never overwriting), merge argv and refusal, resume overrides, CLI.

Every host sees the SAME checkpoint path (as trainer.default_local_dir is the same on every
node) but its OWN files: the path is an empty folder here, and inside each host's private mount
namespace a per-host folder of this machine is bind-mounted onto it. The test writes and reads
each host's files directly through its per-host folder.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from harness.cli import run_cli
from test_ray_lifecycle import VENV_PY, hosts_yaml

from tui.ckpt.collect import collect, copy_file, plan_collect
from tui.ckpt.hostcmd import CkptError
from tui.ckpt.merge import MergeRefused, merge, merge_argv
from tui.ckpt.resume import check_resume_path, resume_overrides, world_size_warning
from tui.ckpt.scan import build_index, host_scan_from_json, scan_fleet
from tui.config.hosts import load_inventory
from tui.transport.fleet import Fleet

MB = 1 << 20
# Spaces, both quotes, $() and backticks: must stay text on every host.
HOSTILE = "ck pt 'q' \"d\" $(touch PWNED) `touch PWNED2`"
HOSTILE_FILE = "tok en's $(touch PWNED3).json"
KINDS = ("model", "optim", "extra_state")
SIZES = {"model": 2 * MB, "optim": MB, "extra_state": 64 * 1024}


# -- per-host disks ------------------------------------------------------------------------------


def mount_disks(cluster, base: Path, names: list[str]) -> tuple[str, dict[str, Path]]:
    root = base / HOSTILE / "run1"
    root.mkdir(parents=True)
    disks = {}
    for name in names:
        disk = base / "disks" / name
        disk.mkdir(parents=True)
        res = cluster.exec_in(name, ["mount", "--bind", str(disk), str(root)])
        assert res.returncode == 0, res.stderr
        disks[name] = disk
    return str(root), disks


def clear(disks: dict[str, Path]) -> None:
    for disk in disks.values():
        for child in disk.iterdir():
            shutil.rmtree(child) if child.is_dir() else child.unlink()


def write_random(path: Path, size: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as f:
        left = size
        while left:
            n = min(left, 4 * MB)
            f.write(os.urandom(n))
            left -= n


def fsdp_shards(role_dir: Path, world: int, ranks, *, kinds=KINDS, rank0_files: bool) -> None:
    for rank in ranks:
        for kind in kinds:
            write_random(role_dir / f"{kind}_world_size_{world}_rank_{rank}.pt", SIZES[kind])
    if rank0_files:
        (role_dir / "fsdp_config.json").write_text(
            json.dumps({"FSDP_version": 1, "world_size": world})
        )
        hf = role_dir / "huggingface"
        hf.mkdir(parents=True, exist_ok=True)
        (hf / "config.json").write_text('{"architectures": ["Qwen2ForCausalLM"]}')
        (hf / HOSTILE_FILE).write_text('{"hostile": true}')


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def tree(disk: Path) -> dict[str, str]:
    """Every file under disk → sha256 (partials included, so a test sees any left behind)."""
    return {str(p.relative_to(disk)): sha(p) for p in sorted(disk.rglob("*")) if p.is_file()}


def standard_layout(disks: dict[str, Path]) -> None:
    """W=4. Step 1: node1 ranks 0-1, node2 rank 2 and rank 3 without its optim → incomplete.
    Step 2: actor and critic, node1 ranks 0-1 (+ rank-0 files, data.pt), node2 ranks 2-3 →
    complete together, on neither alone. node3: the folder exists, empty."""
    n1, n2 = disks["node1"], disks["node2"]
    fsdp_shards(n1 / "global_step_1" / "actor", 4, [0, 1], rank0_files=True)
    fsdp_shards(n2 / "global_step_1" / "actor", 4, [2], rank0_files=False)
    fsdp_shards(
        n2 / "global_step_1" / "actor", 4, [3], kinds=("model", "extra_state"), rank0_files=False
    )
    for role in ("actor", "critic"):
        fsdp_shards(n1 / "global_step_2" / role, 4, [0, 1], rank0_files=True)
        fsdp_shards(n2 / "global_step_2" / role, 4, [2, 3], rank0_files=False)
    write_random(n1 / "global_step_2" / "data.pt", 3000)
    for disk in (n1, n2):
        (disk / "latest_checkpointed_iteration.txt").write_text("2")


@pytest.fixture(scope="module")
def ck3(ns_hosts, tmp_path_factory):
    """Three hosts, each with its own disk bind-mounted on the one checkpoint path."""

    work = tmp_path_factory.mktemp("ckpt")
    cluster = ns_hosts(3, work / "hosts")
    try:
        root, disks = mount_disks(cluster, work, ["node1", "node2", "node3"])
        path = hosts_yaml(cluster, work / "hosts.yaml")
        yield cluster, path, root, disks
    finally:
        cluster.stop()


@pytest.fixture
def ck(ck3):
    disks = ck3[3]
    clear(disks)
    standard_layout(disks)
    yield ck3
    clear(disks)


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return run_cli([*args], timeout=timeout)


def no_injection(base: Path) -> None:
    for name in ("PWNED", "PWNED2", "PWNED3"):
        for where in (Path.home(), Path("/"), Path.cwd(), base):
            assert not (where / name).exists(), where / name


# -- scan ----------------------------------------------------------------------------------------


async def test_scan_hosts_incomplete_alone_complete_together(ck):
    _, path, root, disks = ck
    inv = load_inventory(path)
    async with Fleet(inv) as fleet:
        index = await scan_fleet(fleet, inv, root)
    assert index.down == {}
    assert index.latest == {"node1": 2, "node2": 2, "node3": None}
    assert [s.step for s in index.steps] == [1, 2]
    s1, s2 = index.steps
    assert s1.world_size == 4 and not s1.complete
    assert s1.missing == {"actor": {"optim": (3,)}}
    assert s1.hosts == {"node1": (0, 1), "node2": (2, 3)}
    assert s2.world_size == 4 and s2.complete and s2.complete_on == ()
    assert set(s2.roles) == {"actor", "critic"} and all(r.complete for r in s2.roles.values())
    assert s2.hosts == {"node1": (0, 1), "node2": (2, 3)}
    assert s2.latest_on == ("node1", "node2") and s2.data_on == ("node1",)
    actor = s2.roles["actor"]
    assert actor.holders["optim"][3] == ("node2",) and actor.config_on == ("node1",)
    assert actor.hf_on == ("node1",)
    on_disk = sum(
        p.stat().st_size
        for d in disks.values()
        for p in (d / "global_step_2").rglob("*")
        if p.is_file()
    )
    assert s2.size_bytes == on_disk
    assert s2.host_bytes["node2"] == sum(
        p.stat().st_size for p in (disks["node2"] / "global_step_2").rglob("*") if p.is_file()
    )
    assert f"actor/huggingface/{HOSTILE_FILE}" in s2.files

    doc = json.loads(json.dumps(index.to_json()))
    step2 = doc["steps"][1]
    assert {"step", "world_size", "complete", "hosts"} <= set(step2)
    assert step2 == {
        **step2,
        "step": 2,
        "world_size": 4,
        "complete": True,
        "hosts": {"node1": [0, 1], "node2": [2, 3]},
    }
    assert doc["steps"][0]["missing"] == {"actor": {"optim": [3]}}
    no_injection(Path(root).parents[1])


def test_cli_table_and_json(ck):
    _, path, root, _ = ck
    out = cli("ckpt", str(path), "--dir", root)
    assert out.returncode == 0, out.stderr
    rows = {ln.split()[0]: ln.split() for ln in out.stdout.splitlines() if ln.strip()[:1].isdigit()}
    # STEP W ROLES COMPLETE SIZE node1 node2 node3 [LATEST]
    assert rows["1"][:4] == ["1", "4", "actor", "no"] and rows["1"][5:8] == ["0-1", "2-3", "-"]
    assert rows["2"][:4] == ["2", "4", "actor,critic", "yes"] and rows["2"][-1] == "latest"
    assert "step 1: no host has actor optim 3" in out.stdout
    doc = json.loads(cli("ckpt", str(path), "--dir", root, "--json").stdout)
    assert [s["step"] for s in doc["steps"]] == [1, 2]
    assert doc["steps"][1]["hosts"] == {"node1": [0, 1], "node2": [2, 3]}


def test_model_pure_megatron_and_stale_world_size():
    # A megatron step (layout v2) split across two hosts; rank 0's manifest names W=2.
    files_a = [
        ["actor/model/dist_ckpt/__0_0.distcp", 10, 0],
        ["actor/model/dist_ckpt/.metadata", 1, 0],
        ["actor/optimizer/dist_ckpt/__0_0.distcp", 10, 0],
        ["actor/optimizer/dist_ckpt/.metadata", 1, 0],
        ["actor/ckpt_contents.json", 5, 0],
        ["actor/model/huggingface/config.json", 2, 0],
    ]
    files_b = [
        ["actor/model/dist_ckpt/__1_0.distcp", 10, 0],
        ["actor/optimizer/dist_ckpt/__1_0.distcp", 10, 0],
    ]
    meta = {"actor/ckpt_contents.json": {"world_size": 2, "framework": "megatron"}}
    a = host_scan_from_json(
        "a",
        {
            "exists": True,
            "latest": "3",
            "steps": {"global_step_3": {"files": files_a, "meta": meta}},
        },
    )
    b = host_scan_from_json(
        "b", {"exists": True, "steps": {"global_step_3": {"files": files_b, "meta": {}}}}
    )
    step = build_index("/r", [a, b]).step(3)
    role = step.roles["actor"]
    assert role.backend == "megatron" and role.world_size == 2 and role.complete
    assert role.kinds == ("model", "optimizer") and step.hosts == {"a": (0,), "b": (1,)}
    assert step.complete and step.complete_on == ()
    assert not build_index("/r", [b]).step(3).complete  # no manifest: world size unknown

    # Shards of an older run with another world size are reported, not counted.
    c = host_scan_from_json(
        "c",
        {
            "exists": True,
            "steps": {
                "global_step_5": {
                    "files": [
                        ["actor/model_world_size_1_rank_0.pt", 4, 0],
                        ["actor/fsdp_config.json", 4, 0],
                        ["actor/model_world_size_2_rank_0.pt", 4, 0],
                        ["actor/.verl-tui-partial.abc.model_world_size_2_rank_1.pt", 4, 0],
                    ],
                    "meta": {"actor/fsdp_config.json": {"world_size": 2}},
                }
            },
        },
    )
    role = build_index("/r", [c]).step(5).roles["actor"]
    assert role.world_size == 2 and role.missing == {"model": (1,)}
    assert any("W=1" in p for p in role.problems) and c.partials


# -- collect -------------------------------------------------------------------------------------


async def test_collect_onto_one_host_is_complete_and_verified(ck):
    _, path, root, disks = ck
    inv = load_inventory(path)
    before = {n: tree(d) for n, d in disks.items()}
    events = []
    async with Fleet(inv) as fleet:
        index = await scan_fleet(fleet, inv, root)
        plan = plan_collect(index, 2, None, "node3")
        assert {c.source for c in plan.copies} == {"node1", "node2"}
        report = await collect(fleet, index, 2, None, "node3", progress=events.append)
        assert report.ok, report.to_json()
        after = await scan_fleet(fleet, inv, root)
        assert after.step(2).complete_on == ("node3",)

        # Onto node1 next: only node2's ranks travel; node1's own files are checked, not sent.
        report1 = await collect(fleet, after, 2, "actor", "node1")
        assert report1.ok and {c.source for c in report1.copied} == {"node2"}
        assert len(report1.copied) == 6 and len(report1.present) == 9
        again = await scan_fleet(fleet, inv, root)
        assert again.step(2).roles["actor"].complete_on == ("node1", "node3")
        # Nothing left to do: same-name files on the target are verified and reported present.
        report2 = await collect(fleet, again, 2, "actor", "node3")
        assert report2.ok and not report2.copied and len(report2.present) == 15

    got = tree(disks["node3"])
    want = {
        k: v
        for n in ("node1", "node2")
        for k, v in before[n].items()
        if k.startswith("global_step_2/")
    }
    assert got == want  # every file, byte for byte, and no partial file
    assert {c.sha256 for c in report.copied} <= set(want.values())
    assert len(report.copied) == len(want) == 2 * (4 * 3 + 3) + 1
    assert tree(disks["node1"]) == {
        **before["node1"],
        **{k: v for k, v in before["node2"].items() if k.startswith("global_step_2/actor/")},
    }
    assert tree(disks["node2"]) == before["node2"]  # sources untouched
    # Progress: per file done/total, ending at the plan's byte total.
    assert events[-1].bytes_done == events[-1].bytes_total == plan.bytes_total
    big = [e for e in events if e.path == "actor/model_world_size_4_rank_3.pt"]
    assert big[0].done == 0 and big[-1].done == big[-1].total == SIZES["model"]
    assert all(a.done <= b.done for a, b in itertools.pairwise(big))
    no_injection(Path(root).parents[1])


async def test_conflicting_same_name_file_is_reported_and_untouched(ck):
    _, path, root, disks = ck
    stale = disks["node3"] / "global_step_2" / "actor" / "model_world_size_4_rank_2.pt"
    write_random(stale, SIZES["model"])  # same size, other bytes: an older run's shard
    other = disks["node3"] / "global_step_2" / "actor" / "optim_world_size_4_rank_1.pt"
    write_random(other, 1234)  # another size
    stale_sha, other_sha = sha(stale), sha(other)
    inv = load_inventory(path)
    async with Fleet(inv) as fleet:
        index = await scan_fleet(fleet, inv, root)
        report = await collect(fleet, index, 2, "actor", "node3")
        paths = {c.path for c in report.conflicts}
        assert paths == {
            "actor/model_world_size_4_rank_2.pt",
            "actor/optim_world_size_4_rank_1.pt",
        }, report.conflicts
        assert not report.ok and not report.failed and len(report.copied) == 15 - 2

        # The commit itself never overwrites: a name that exists at commit time stays.
        src = f"{root}/global_step_2/actor/model_world_size_4_rank_2.pt"
        size, _, result = await copy_file(fleet, "node2", src, "node3", src)
        assert result == "conflict" and size == SIZES["model"]
        same = f"{root}/global_step_2/actor/model_world_size_4_rank_3.pt"
        assert (await copy_file(fleet, "node2", same, "node3", same))[2] == "same"
    assert sha(stale) == stale_sha and sha(other) == other_sha
    assert not any(".verl-tui-partial" in p for p in tree(disks["node3"]))

    out = cli(
        "ckpt", str(path), "--dir", root, "--collect", "2", "--to", "node3", "--role", "actor"
    )
    assert out.returncode == 1, out.stdout + out.stderr
    assert "conflict: actor/model_world_size_4_rank_2.pt" in out.stdout


async def test_source_killed_mid_collect_leaves_no_partial(ns_cluster_factory, tmp_path):
    cluster = ns_cluster_factory(2)
    root, disks = mount_disks(cluster, tmp_path, ["node1", "node2"])
    path = hosts_yaml(cluster, tmp_path / "hosts.yaml")
    fsdp_shards(
        disks["node1"] / "global_step_9" / "actor", 2, [0], kinds=("model",), rank0_files=True
    )
    write_random(
        disks["node2"] / "global_step_9" / "actor" / "model_world_size_2_rank_1.pt", 40 * MB
    )
    inv = load_inventory(path)
    killed = []

    def progress(p):
        # Blocking here stops the relay, so the kill lands mid-file.
        if p.source == "node2" and p.done > 4 * MB and not killed:
            cluster.kill_host("node2")
            killed.append(p.done)

    async with Fleet(inv) as fleet:
        index = await scan_fleet(fleet, inv, root)
        t0 = time.monotonic()
        report = await collect(fleet, index, 9, None, "node1", progress=progress)
        took = time.monotonic() - t0
        assert killed and took < 60
        assert [f.path for f in report.failed] == ["actor/model_world_size_2_rank_1.pt"]
        assert "\n" not in report.failed[0].error and report.failed[0].source == "node2"
        assert not report.copied
        later = await scan_fleet(fleet, inv, root)
    assert set(later.down) == {"node2"} and "\n" not in later.down["node2"]
    assert later.step(9).hosts == {"node1": (0,)}
    names = set(tree(disks["node1"]))
    assert "global_step_9/actor/model_world_size_2_rank_1.pt" not in names
    assert not any(".verl-tui-partial" in n for n in names), names

    out = cli("ckpt", str(path), "--dir", root)
    assert out.returncode == 1 and "node2: not scanned:" in out.stdout


def helpers_running(cluster, name: str) -> list[str]:
    ps = cluster.exec_in(name, ["ps", "-eo", "args="])
    return [ln[:80] for ln in ps.stdout.splitlines() if "verl-tui checkpoint helper" in ln]


async def test_cancelled_collect_leaves_no_partial_and_no_helper(ck):
    cluster, path, root, disks = ck
    big = disks["node2"] / "global_step_2" / "actor" / "model_world_size_4_rank_3.pt"
    write_random(big, 30 * MB)
    inv = load_inventory(path)
    started = asyncio.Event()

    def progress(p):
        if p.path.endswith("model_world_size_4_rank_3.pt") and p.done > 4 * MB:
            started.set()

    async with Fleet(inv) as fleet:
        index = await scan_fleet(fleet, inv, root)
        task = asyncio.create_task(
            collect(fleet, index, 2, "actor", "node3", progress=progress, parallel=1)
        )
        # The step's smaller files go first, each two helpers started on two hosts: ~0.2 s
        # apiece alone, over 60 s for all of them once in a full run beside Ray bring-ups.
        await asyncio.wait_for(started.wait(), 240)
        task.cancel()  # as when the cockpit is closed mid-copy
        with pytest.raises(asyncio.CancelledError):
            await task
    names = set(tree(disks["node3"]))
    assert "global_step_2/actor/model_world_size_4_rank_3.pt" not in names
    assert not any(".verl-tui-partial" in n for n in names), names
    deadline = time.monotonic() + 10
    while (helpers_running(cluster, "node2") or helpers_running(cluster, "node3")) and (
        time.monotonic() < deadline
    ):
        await asyncio.sleep(0.2)
    assert not helpers_running(cluster, "node2") and not helpers_running(cluster, "node3")


def test_50mb_shard_streams_with_bounded_memory(ck):
    _, path, root, disks = ck
    clear(disks)
    big = disks["node2"] / "global_step_7" / "actor" / "model_world_size_1_rank_0.pt"
    write_random(big, 50 * MB)
    (big.parent / "fsdp_config.json").write_text('{"FSDP_version": 1, "world_size": 1}')

    # Peak RSS of the CLI: RUSAGE_CHILDREN is a maximum over all children reaped so far, so
    # measure in a fresh interpreter: a listing first (the baseline), then the collect.
    probe = subprocess.run(
        [
            VENV_PY,
            "-c",
            f"""
import resource, subprocess, sys, json
def cli(*a):
    return subprocess.run([sys.executable, "-m", "tui", *a], capture_output=True, text=True)
cli("ckpt", {str(path)!r}, "--dir", {root!r}, "--json")
base = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
col = cli("ckpt", {str(path)!r}, "--dir", {root!r}, "--collect", "7", "--to", "node3",
          "--json")
top = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(json.dumps({{"base": base, "top": top, "rc": col.returncode, "out": col.stdout,
                  "err": col.stderr[-2000:]}}))
""",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert probe.returncode == 0, probe.stderr
    doc = json.loads(probe.stdout)
    assert doc["rc"] == 0, doc["err"]
    report = json.loads(doc["out"])
    copied = {c["path"]: c for c in report["copied"]}
    shard = copied["actor/model_world_size_1_rank_0.pt"]
    mb_s = shard["size"] / shard["seconds"] / 1e6
    print(
        f"\n50 MiB shard relayed node2 → cockpit → node3 in {shard['seconds']:.2f} s "
        f"({mb_s:.0f} MB/s); peak RSS scan {doc['base'] / 1024:.0f} MiB, "
        f"collect {doc['top'] / 1024:.0f} MiB"
    )
    assert report["complete_on_target"] is True
    target = disks["node3"] / "global_step_7" / "actor" / "model_world_size_1_rank_0.pt"
    assert shard["sha256"] == sha(target) == sha(big)
    # The whole file in memory would add ≥ 50 MiB; the relay holds a few chunks at most.
    assert doc["top"] - doc["base"] < 25 * 1024, doc


# -- merge / resume ------------------------------------------------------------------------------


def test_merge_argv_is_verls_cli():
    assert merge_argv("/v/bin/python", "/c/global_step_2/actor", "/out/hf") == [
        "/v/bin/python",
        "-m",
        "verl.model_merger",
        "merge",
        "--backend",
        "fsdp",
        "--local_dir",
        "/c/global_step_2/actor",
        "--target_dir",
        "/out/hf",
    ]
    assert merge_argv("py", "/a b/global_step_1/critic", "/o", backend="megatron")[5] == "megatron"
    with pytest.raises(ValueError):
        merge_argv("py", "/a", "/o", backend="deepspeed")
    # verl's own parser takes exactly these words.
    from verl.model_merger.base_model_merger import parse_args

    argv = merge_argv("py", "/c/global_step_2/actor", "/out/hf")
    old = sys.argv
    try:
        sys.argv = ["verl.model_merger", *argv[3:]]
        ns = parse_args()
    finally:
        sys.argv = old
    assert (ns.operation, ns.backend, ns.local_dir, ns.target_dir) == (
        "merge",
        "fsdp",
        "/c/global_step_2/actor",
        "/out/hf",
    )


async def test_merge_refused_unless_whole_on_host_then_streams(ck, tmp_path):
    _, path, root, _ = ck
    inv = load_inventory(path)
    local = f"{root}/global_step_2/actor"
    async with Fleet(inv) as fleet:
        with pytest.raises(MergeRefused, match=r"node1 lacks model rank\(s\) 2, 3 of 4"):
            await merge(fleet, "node1", local, str(tmp_path / "hf"))
        with pytest.raises(MergeRefused, match="node3 has no"):
            await merge(fleet, "node3", local, str(tmp_path / "hf"))
        with pytest.raises(MergeRefused, match="relative"):
            await merge(fleet, "node1", local, "hf")
        with pytest.raises(MergeRefused, match="inside the checkpoint"):
            await merge(fleet, "node1", local, local + "/hf")
        with pytest.raises(MergeRefused, match="not megatron"):
            await merge(fleet, "node1", local, str(tmp_path / "hf"), backend="megatron")

        # Whole on node1 (after a collect): verl's real merger runs there with live output; on
        # random bytes it fails, and that failure comes back as one line with its status.
        index = await scan_fleet(fleet, inv, root)
        assert (await collect(fleet, index, 2, "actor", "node1")).ok
        lines: list[str] = []
        result = await merge(fleet, "node1", local, str(tmp_path / "hf"), on_line=lines.append)
    assert result.exit_status not in (0, None) and not result.ok
    assert result.error and "\n" not in result.error and lines
    assert not any(ln.startswith("verl-tui-merge-exit-status") for ln in lines)

    out = cli(
        "ckpt",
        str(path),
        "--dir",
        root,
        "--merge",
        "2",
        "--on",
        "node2",
        "--target",
        str(tmp_path / "hf2"),
    )
    assert out.returncode == 1 and out.stderr.count("\n") == 1
    assert "not merging: node2 lacks model rank(s) 0, 1 of 4" in out.stderr


def test_resume_overrides_as_verl_reads_them():
    assert resume_overrides("/ckpt/run 1/global_step_40/") == [
        "trainer.resume_mode=resume_path",
        "trainer.resume_from_path='/ckpt/run 1/global_step_40'",
    ]
    for bad in ("/ckpt/run1/global_step_40/actor", "/ckpt/run1", "ckpt/global_step_4", ""):
        with pytest.raises(ValueError):
            check_resume_path(bad)
    # What verl does with the value (ray_trainer._load_checkpoint): the step number parses.
    value = resume_overrides("/c/global_step_7")[1].split("=", 1)[1].strip("'")
    assert int(value.split("global_step_")[-1]) == 7
    assert world_size_warning(8, 2, 4) is None
    warn = world_size_warning(16, 2, 4)
    assert warn and "16" in warn and "2×4 = 8" in warn and "model_world_size_8_rank_R" in warn
    assert "reshard" in world_size_warning(16, 1, 8, backend="megatron")
    assert world_size_warning(None, 1, 8)


# -- CLI bad input -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--dir", "relative/dir"], "is relative"),
        ([], "give --dir DIR"),
        (["--dir", "/x", "--collect", "2"], "--collect STEP needs --to HOST"),
        (["--dir", "/x", "--collect", "two", "--to", "node1"], "invalid int value"),
        (["--dir", "/x", "--collect", "2", "--to", "nodeX"], "--to 'nodeX': not a host"),
        (["--dir", "/x", "--merge", "2", "--on", "node1"], "needs --on HOST and --target DIR"),
        (["--dir", "/x", "--merge", "2", "--on", "node1", "--target", "rel"], "--target"),
        (["--dir", "/x", "--role", "a/b", "--collect", "1", "--to", "node1"], "--role"),
        (["--dir", "/x", "--backend", "deepspeed"], "invalid choice"),
    ],
)
def test_cli_bad_input_one_line_exit_2(ck3, tmp_path, args, needle):
    _, path, _, _ = ck3
    out = cli("ckpt", str(path), *args)
    assert out.returncode == 2, out.stdout + out.stderr
    assert needle in out.stderr and out.stderr.count("\n") == 1, out.stderr
    assert "Traceback" not in out.stderr and not out.stdout


def test_cli_unknown_step_and_profile_dir(ck, tmp_path):
    _, path, root, _ = ck
    out = cli("ckpt", str(path), "--dir", root, "--collect", "99", "--to", "node3")
    assert out.returncode == 2 and "no global_step_99" in out.stderr and "steps: 1, 2" in out.stderr
    assert out.stderr.count("\n") == 1
    prof = tmp_path / "p.yaml"
    prof.write_text(f"name: p\noverrides:\n  trainer.default_local_dir: {json.dumps(root)}\n")
    listed = cli("ckpt", str(path), "--profile", str(prof), "--json")
    assert listed.returncode == 0 and json.loads(listed.stdout)["root"] == root
    prof.write_text("name: p\noverrides:\n  trainer.total_epochs: 1\n")
    missing = cli("ckpt", str(path), "--profile", str(prof))
    assert missing.returncode == 2 and "no trainer.default_local_dir" in missing.stderr


def test_scan_error_paths_stay_one_line(ck3):
    # A root that is a file, and an unknown step for collect planning: one-line errors.
    _, path, root, disks = ck3
    clear(disks)
    (disks["node1"] / "global_step_1").write_text("not a folder")
    inv = load_inventory(path)

    async def body():
        async with Fleet(inv) as fleet:
            index = await scan_fleet(fleet, inv, root + "/global_step_1")
            with pytest.raises(CkptError, match="no global_step_5"):
                plan_collect(index, 5, None, "node1")
            return index

    index = asyncio.run(body())
    assert "not a directory" in index.down["node1"] and set(index.down) == {"node1"}
    clear(disks)
