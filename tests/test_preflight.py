"""The job preflight (tui/jobs/preflight/) on real namespace sshd hosts with real verl compose.

Each host has its own HOME (so `${oc.env:HOME}/data/gsm8k/…` resolves per host, and the HF
cache ~/.cache/huggingface/hub is per host) and its own PYTHONPATH folder, where a test puts
tiny stand-in packages (`transfer_queue/__init__.py`, …): the lab's verl 0.9.1 has neither
TransferQueue nor vLLM, which is exactly what the preset must be refused for.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from harness.cli import run_cli
from harness.nshosts import NsCluster

from tui.cluster.doctor.findings import Finding
from tui.config.hosts import Inventory, load_inventory
from tui.jobs.preflight import needs_for_profile, run_preflight
from tui.jobs.profiles import load_profile
from tui.transport.fleet import Fleet

NAMES = ("node1", "node2", "node3")
REPO = Path(__file__).resolve().parent.parent
PRESET = "grpo-gsm8k-qwen2.5-0.5b"
MODEL = "Qwen/Qwen2.5-0.5B-Instruct"
# What verl imports for the preset (use_v1 default, rollout vllm, flash_attention_2 default).
PRESET_MODULES = ("transfer_queue", "vllm", "flash_attn")
# What verl 0.9.1's TaskRunners (both) import on their way, at module level, that this venv
# lacks (verl's verl-core extra lists them): importing verl.trainer.main_ppo_v0 here really dies
# on cachetools (tests/test_preflight_paths.py runs it).
PATH_MODULES = ("cachetools", "fastapi", "uvicorn")


@dataclass
class Lab:
    cluster: NsCluster
    root: Path
    homes: dict[str, Path]
    sites: dict[str, Path]
    count: int = 0

    def inventory(self, ray_env: dict[str, str] | None = None) -> Inventory:
        self.count += 1
        data = {
            "cluster": "preflighttest",
            "python": sys.executable,
            "ssh": {
                "user": "root",
                "identity_file": str(self.cluster.client_key),
                "known_hosts": str(self.cluster.known_hosts),
                "config": "",
                # No host here is meant to be unreachable: 2 s lost a run's hosts to a
                # connect on the busy 2-core box (two test workers), "not checked" = refused.
                "connect_timeout": 10,
            },
            "ray": {"num_cpus": 6, "env": ray_env or {}},
            "hosts": [
                {"name": n, "address": self.cluster.host(n).address, "num_gpus": 1} for n in NAMES
            ],
        }
        path = self.root / f"hosts{self.count}.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        return load_inventory(path)

    def prepare_data(self, name: str) -> None:
        """What verl's examples/data_preprocess/gsm8k.py leaves: ~/data/gsm8k/{train,test}.parquet
        (its default --local_save_dir), real parquet files."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        out = self.homes[name] / "data" / "gsm8k"
        out.mkdir(parents=True, exist_ok=True)
        for split in ("train", "test"):
            table = pa.table({"data_source": ["openai/gsm8k"], "prompt": [f"{split} 1+1?"]})
            pq.write_table(table, out / f"{split}.parquet")

    def cache_model(self, name: str) -> None:
        """An HF hub cache entry as huggingface_hub lays it out (snapshot with config.json)."""
        snap = (
            self.homes[name]
            / ".cache/huggingface/hub/models--Qwen--Qwen2.5-0.5B-Instruct/snapshots/0123abcd"
        )
        snap.mkdir(parents=True, exist_ok=True)
        (snap / "config.json").write_text('{"model_type": "qwen2"}')
        (snap / "model.safetensors").write_bytes(b"\0" * 4096)

    def install(self, name: str, *modules: str) -> None:
        for m in modules:
            pkg = self.sites[name] / m
            pkg.mkdir(parents=True, exist_ok=True)
            (pkg / "__init__.py").write_text("")

    def reset(self) -> None:
        for d in (*self.homes.values(), *self.sites.values()):
            shutil.rmtree(d, ignore_errors=True)
            d.mkdir(parents=True)

    def ready(self) -> None:
        """Every host as the README's preparation leaves it."""
        self.reset()
        for n in NAMES:
            self.prepare_data(n)
            self.cache_model(n)
            self.install(n, *PRESET_MODULES, *PATH_MODULES)


@pytest.fixture(scope="module")
def lab(ns_hosts, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    root = tmp_path_factory.mktemp("preflight")
    homes = {n: root / f"home-{n}" for n in NAMES}
    sites = {n: root / f"site-{n}" for n in NAMES}
    host_env = {n: {"HOME": str(homes[n]), "PYTHONPATH": str(sites[n])} for n in NAMES}
    cluster = ns_hosts(3, root / "cluster", host_env=host_env)
    try:
        yield Lab(cluster, root, homes, sites)
    finally:
        cluster.stop()


async def preflight(inv: Inventory, *sets: str, profile: str = PRESET) -> list[Finding]:
    prof = load_profile(REPO / "profiles" / f"{profile}.yaml")
    found, needs = needs_for_profile(inv, prof, sets)
    assert needs is not None, found
    async with Fleet(inv) as fleet:
        return found + await run_preflight(fleet, inv, needs, timeout=20)


def rows(findings: list[Finding], check: str, status: str | None = None) -> list[Finding]:
    return [f for f in findings if f.check == check and (status is None or f.status == status)]


def show(findings: list[Finding]) -> str:
    return "\n".join(f"{f.status} {f.check} {f.host}: {f.finding} | {f.fix}" for f in findings)


def job_failures(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.status == "fail"]


def test_a_hosts_module_distributions_are_what_packages_distributions_says() -> None:
    """The host names the distribution of each module it has (the cockpit names a module
    missing elsewhere by it: tui/jobs/pip_names.py) without reading every distribution's file
    list: for every top-level module of this venv, and for one it lacks, the same answer as
    importlib.metadata.packages_distributions()."""
    import importlib.metadata as metadata

    from tui.remote.job_preflight import installed_from

    every = metadata.packages_distributions()
    assert installed_from(every) == every
    assert installed_from(["verl", "yaml", "no_such_module_here"]) == {
        "verl": every["verl"],
        "yaml": every["yaml"],
    }
    assert every["yaml"] == ["PyYAML"]


# --------------------------------------------------------------------------- failing cases


async def test_the_lab_as_it_is_refuses_the_preset_for_transfer_queue_and_vllm(lab):
    """verl 0.9.1 without TransferQueue and vLLM: exactly those (and flash-attn, verl's default
    attention, and what verl's TaskRunner imports on its way) fail, on every host, each naming
    the module, the config key and verl's file; the pip name comes from verl's own metadata."""
    lab.ready()
    for n in NAMES:
        shutil.rmtree(lab.sites[n])
        lab.sites[n].mkdir()
    findings = await preflight(lab.inventory())
    failed = {f.check for f in job_failures(findings)}
    assert failed == {f"import:{m}" for m in (*PRESET_MODULES, *PATH_MODULES)}, show(findings)
    tq = rows(findings, "import:transfer_queue", "fail")
    assert len(tq) == 1 and tq[0].host is None and "(all 3 hosts)" in tq[0].finding
    assert "trainer.use_v1" in tq[0].finding and "verl/trainer/main_ppo.py" in tq[0].finding
    # verl's Requires-Dist: TransferQueue>=0.1.10 in its verl-core extra (quoted for the shell)
    assert "'TransferQueue>=0.1.10' (verl's verl-core extra)" in tq[0].fix, tq[0].fix
    # The legacy TaskRunner is offered with what it needs too (cachetools is missing here).
    assert "or trainer.use_v1=false (verl's legacy TaskRunner), which needs " in tq[0].fix
    assert "cachetools" in tq[0].fix.split("which needs", 1)[1]
    cachetools = rows(findings, "import:cachetools", "fail")[0]
    assert "verl/workers/rollout/router.py imports it" in cachetools.finding, cachetools
    vllm = rows(findings, "import:vllm", "fail")[0]
    assert "actor_rollout_ref.rollout.name" in vllm.finding
    assert "vllm_async_server.py" in vllm.finding


async def test_a_module_missing_on_one_host_names_that_host(lab):
    lab.ready()
    shutil.rmtree(lab.sites["node2"] / "vllm")
    findings = await preflight(lab.inventory())
    bad = job_failures(findings)
    assert [(f.check, f.host) for f in bad] == [("import:vllm", "node2")], show(findings)


async def test_use_v1_false_needs_no_transfer_queue(lab):
    """verl 0.9.1 still has the legacy TaskRunner (main_ppo_v0): use_v1=false is valid."""
    lab.ready()
    for n in NAMES:
        shutil.rmtree(lab.sites[n] / "transfer_queue")
    findings = await preflight(lab.inventory(), "trainer.use_v1=false")
    assert job_failures(findings) == [], show(findings)
    assert not rows(findings, "import:transfer_queue")


async def test_the_legacy_runner_is_offered_alone_only_once_its_own_imports_are_there(lab):
    """The way around a missing TransferQueue (trainer.use_v1=false) is checked on its own code
    path (verl's main_ppo_v0.TaskRunner, read from verl's source): offered plainly while that
    path's imports are there; with cachetools gone, taking it fails on cachetools, naming
    where verl imports it and the pip package (verl's metadata)."""
    lab.ready()
    for n in NAMES:
        shutil.rmtree(lab.sites[n] / "transfer_queue")
    findings = await preflight(lab.inventory())
    tq = rows(findings, "import:transfer_queue", "fail")
    assert len(tq) == 1 and tq[0].fix.endswith(
        ", or trainer.use_v1=false (verl's legacy TaskRunner)"
    ), show(findings)

    for n in NAMES:
        shutil.rmtree(lab.sites[n] / "cachetools")
    findings = await preflight(lab.inventory(), "trainer.use_v1=false")
    assert {f.check for f in job_failures(findings)} == {"import:cachetools"}, show(findings)
    row = rows(findings, "import:cachetools", "fail")[0]
    assert "verl.trainer.main_ppo_v0.TaskRunner (trainer.use_v1=false)" in row.finding
    assert "workers.rollout.router" in row.finding and "(all 3 hosts)" in row.finding
    assert row.fix.endswith("-m pip install cachetools (verl's verl-core extra)"), row.fix


async def test_missing_data_on_one_host_is_an_error_naming_it(lab):
    lab.ready()
    (lab.homes["node3"] / "data/gsm8k/train.parquet").unlink()
    findings = await preflight(lab.inventory())
    bad = job_failures(findings)
    assert [(f.check, f.host) for f in bad] == [("path:data.train_files", "node3")], show(findings)
    assert str(lab.homes["node3"]) + "/data/gsm8k/train.parquet" in bad[0].finding
    assert "${oc.env:HOME}" in bad[0].finding  # what it was resolved from
    ok = rows(findings, "path:data.train_files", "ok")
    assert len(ok) == 1 and "(2 hosts: node1, node2)" in ok[0].finding


async def test_unreadable_data_and_a_model_folder_without_config(lab):
    lab.ready()
    model = lab.root / "models" / "qwen"
    model.mkdir(parents=True, exist_ok=True)
    (model / "weights.safetensors").write_bytes(b"x")
    findings = await preflight(lab.inventory(), f"actor_rollout_ref.model.path={model}")
    bad = rows(findings, "path:actor_rollout_ref.model.path", "fail")
    assert len(bad) == 1 and "no config.json" in bad[0].finding, show(findings)
    (model / "config.json").write_text("{}")
    findings = await preflight(lab.inventory(), f"actor_rollout_ref.model.path={model}")
    assert job_failures(findings) == [], show(findings)
    assert not rows(findings, "hf:actor_rollout_ref.model.path")  # a folder, not an HF id


async def test_tilde_and_shell_variables_are_errors_with_the_fix(lab):
    lab.ready()
    findings = await preflight(
        lab.inventory(),
        "data.train_files='~/data/gsm8k/train.parquet'",
        "data.val_files='$HOME/data/gsm8k/test.parquet'",
        "actor_rollout_ref.model.path='${oc.env:VT_UNSET_ROOT}/qwen'",
    )
    tilde = rows(findings, "path:data.train_files", "fail")
    assert len(tilde) == 1 and tilde[0].host is None, show(findings)
    assert "'~' is not expanded" in tilde[0].finding
    assert tilde[0].fix.startswith("data.train_files=${oc.env:HOME}/data/gsm8k/train.parquet")
    var = rows(findings, "path:data.val_files", "fail")
    assert len(var) == 1 and "$HOME is not expanded" in var[0].finding
    assert var[0].fix.startswith("data.val_files=${oc.env:HOME}/data/gsm8k/test.parquet")
    unset = rows(findings, "path:actor_rollout_ref.model.path", "fail")
    assert len(unset) == 1 and "unset on this host: $VT_UNSET_ROOT" in unset[0].finding
    assert "(all 3 hosts)" in unset[0].finding and "ray.env" in unset[0].fix


async def test_hf_id_not_cached_warns_naming_hosts_and_fails_offline(lab):
    lab.ready()
    for n in ("node2", "node3"):
        shutil.rmtree(lab.homes[n] / ".cache")
    findings = await preflight(lab.inventory())
    warn = rows(findings, "hf:actor_rollout_ref.model.path", "warn")
    assert len(warn) == 1 and "(2 hosts: node2, node3)" in warn[0].finding, show(findings)
    assert MODEL in warn[0].finding and "download" in warn[0].finding
    assert job_failures(findings) == []

    findings = await preflight(lab.inventory(ray_env={"HF_HUB_OFFLINE": "1"}))
    bad = job_failures(findings)
    assert [(f.check, f.host) for f in bad] == [
        ("hf:actor_rollout_ref.model.path", "node2"),
        ("hf:actor_rollout_ref.model.path", "node3"),
    ], show(findings)
    assert "HF_HUB_OFFLINE=1 forbids the download" in bad[0].finding
    assert str(lab.homes["node2"]) + "/.cache/huggingface/hub" in bad[0].finding


async def test_small_dev_shm_warns(lab):
    lab.ready()
    lab.cluster.exec_in("node2", ["mount", "-o", "remount,size=64m", "/dev/shm"], check=True)
    try:
        findings = await preflight(lab.inventory())
    finally:
        lab.cluster.exec_in("node2", ["mount", "-o", "remount,size=50%", "/dev/shm"], check=True)
    warn = rows(findings, "dev-shm", "warn")
    assert [f.host for f in warn] == ["node2"], show(findings)
    assert "/dev/shm is 64 MiB" in warn[0].finding and "--shm-size" in warn[0].fix
    assert job_failures(findings) == []


async def test_checkpoint_dir_without_room_warns(lab):
    """A checkpoint of the cached model (4 KiB of weights → 24 KiB) on a 16 KiB tmpfs."""
    lab.ready()
    small = lab.root / "ckpt-small"
    small.mkdir(exist_ok=True)
    # Each host has its own mount namespace: the tmpfs goes into every one of them.
    for n in NAMES:
        mount = ["mount", "-t", "tmpfs", "-o", "size=16k", "vt-ckpt", str(small)]
        lab.cluster.exec_in(n, mount, check=True)
    try:
        findings = await preflight(lab.inventory(), f"trainer.default_local_dir={small}/run")
    finally:
        for n in NAMES:
            lab.cluster.exec_in(n, ["umount", str(small)], check=True)
    warn = rows(findings, "disk:checkpoint", "warn")
    assert len(warn) == 1 and "(all 3 hosts)" in warn[0].finding, show(findings)
    assert "below 24 KiB (one checkpoint ≈ 6 × 4 KiB of weights)" in warn[0].finding


async def test_unresolvable_node_name_fails_on_every_host(lab):
    lab.ready()
    inv = lab.inventory()
    data = yaml.safe_load(Path(inv.source).read_text())
    data["hosts"][1]["node_ip"] = "node2.invalid"
    path = lab.root / "hosts-badname.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    findings = await preflight(load_inventory(path))
    bad = rows(findings, "resolve", "fail")
    assert len(bad) == 1 and "node2.invalid" in bad[0].finding, show(findings)
    assert "(all 3 hosts)" in bad[0].finding


# --------------------------------------------------------------------------- passing case


async def test_every_preset_passes_once_the_hosts_are_prepared(lab):
    """README's preparation (gsm8k.py's parquet files, the model in the HF cache, verl's
    runtime packages): no preset fails a data, model or import check on any host."""
    lab.ready()
    inv = lab.inventory()
    for n in NAMES:  # the other presets' models, cached too
        for repo in ("Qwen--Qwen3-32B", "Qwen--Qwen2.5-7B-Instruct"):
            snap = lab.homes[n] / f".cache/huggingface/hub/models--{repo}/snapshots/0"
            snap.mkdir(parents=True, exist_ok=True)
            (snap / "config.json").write_text("{}")
    for preset in sorted(p.stem for p in (REPO / "profiles").glob("*.yaml")):
        findings = await preflight(inv, profile=preset)
        assert job_failures(findings) == [], (preset, show(findings))
        assert rows(findings, "path:data.train_files", "ok"), preset
        assert rows(findings, "hf:actor_rollout_ref.model.path", "ok"), preset


def test_check_profile_cli_end_to_end(lab):
    """`verl-tui check HOSTS --profile P --json` on 3 hosts: the doctor's rows and the job's;
    exit 1 while the lab lacks TransferQueue/vLLM, 0 once they are there."""
    lab.ready()
    inv = lab.inventory()
    argv = ["check", str(inv.source), "--profile", PRESET, "--json"]
    t0 = time.monotonic()
    proc = run_cli(argv, timeout=120, cwd=REPO)
    took = time.monotonic() - t0
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = json.loads(proc.stdout)
    checks = {c["check"] for c in out["checks"]}
    assert {"ssh-reach", "ray-version", "path:data.train_files", "import:vllm"} <= checks
    assert out["summary"]["fail"] == 0
    print(f"check --profile on 3 hosts: {took:.1f} s")

    shutil.rmtree(lab.sites["node1"] / "vllm")
    proc = run_cli([*argv[:-1], "--set", "trainer.use_v1=false"], timeout=120, cwd=REPO)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("✗ import:vllm"))
    assert "node1" in line and "actor_rollout_ref.rollout.name" in line


@dataclass
class Head:
    path: Path
    env: dict[str, str]

    def cli(self, *args: str) -> subprocess.CompletedProcess:
        return run_cli([*args], env=self.env, cwd=REPO, timeout=240)


@pytest.fixture(scope="module")
def ray_head(lab, ray_shared1) -> Head:
    """The session's shared one-host Ray cluster (harness RayPool): submits need a live head;
    the preflight then asks its node1. Its hosts.yaml copy gives the jobs node1's lab HOME and
    PYTHONPATH in ray.env, where verl's TaskRunner reads them: the preflight resolves the data
    paths, the HF cache and the modules with the job's env (tui/remote/job_preflight.py), so
    what a test does to lab.sites["node1"] and lab.homes["node1"] is what that host offers."""
    data = yaml.safe_load(ray_shared1.path.read_text())
    data.setdefault("ray", {})["env"] = {
        **(data["ray"].get("env") or {}),
        "HOME": str(lab.homes["node1"]),
        "PYTHONPATH": str(lab.sites["node1"]),
    }
    assert [h["name"] for h in data["hosts"]] == ["node1"], data["hosts"]
    ray_shared1.path.write_text(yaml.safe_dump(data, sort_keys=False))
    return Head(ray_shared1.path, ray_shared1.env)


def _head_jobs(head: Head) -> set[str]:
    return {
        j["submission_id"]
        for j in json.loads(head.cli("jobs", str(head.path), "--json").stdout)["jobs"]
    }


def test_submit_refuses_on_a_failed_preflight_and_skip_preflight_overrides(lab, ray_head):
    """`verl-tui submit`: the preset is refused while TransferQueue is missing on the head
    (exit 1, the finding on stderr, nothing on the head); --skip-preflight sends it anyway."""
    lab.ready()
    shutil.rmtree(lab.sites["node1"] / "transfer_queue")
    path, cli = ray_head.path, ray_head.cli
    before = _head_jobs(ray_head)  # the shared head may hold other modules' finished jobs
    res = cli("submit", str(path), PRESET, "--submission-id", "pf-refused")
    assert res.returncode == 1, res.stdout + res.stderr
    assert "✗ import:transfer_queue" in res.stderr and "node1" in res.stderr
    assert "not submitted: the job preflight failed" in res.stderr
    assert _head_jobs(ray_head) == before  # nothing sent

    res = cli("submit", str(path), PRESET, "--submission-id", "pf-forced", "--skip-preflight")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "submitted pf-forced" in res.stdout
    # the hosts file given, no placeholder, quoted as a shell reads it back
    follow = res.stdout.split("follow: ", 1)[1].strip()
    assert shlex.split(follow) == ["verl-tui", "logs", str(path), "pf-forced", "--follow"]
    cli("stop", str(path), "pf-forced")


async def test_form_shows_the_preflight_and_submits_on_a_second_press(lab, ray_head, monkeypatch):
    """The job form: submit runs the preflight; a missing data file is shown on its field
    (naming the host), nothing is sent; submit again sends it anyway."""
    from textual.widgets import OptionList

    from tui.app import VerlTuiApp
    from tui.jobs.history import JobHistory
    from tui.screens.job_form.screen import JobFormScreen
    from tui.screens.jobs.screen import JobsScreen
    from tui.screens.profile_picker import ProfilePickerScreen

    lab.ready()
    (lab.homes["node1"] / "data/gsm8k/test.parquet").unlink()
    monkeypatch.setenv("XDG_STATE_HOME", ray_head.env["XDG_STATE_HOME"])
    inv = load_inventory(ray_head.path)
    before = {r.submission_id for r in JobHistory(inv.cluster).all()}
    app = VerlTuiApp(inv, interval=0.5)

    async def until(pilot, predicate, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            await pilot.pause(0.1)

    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.press("2")
        await until(pilot, lambda: isinstance(app.screen, JobsScreen), 20, "Jobs")
        await pilot.press("n")
        await until(
            pilot,
            lambda: isinstance(app.screen, ProfilePickerScreen) and bool(app.screen.entries),
            30,
            "the profile list",
        )
        picker = app.screen
        want = (REPO / "profiles" / f"{PRESET}.yaml").resolve()
        index = next(i for i, e in enumerate(picker.entries) if e.path.resolve() == want)
        picker.query_one(OptionList).highlighted = index
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, JobFormScreen), 30, "the form")
        form = app.screen
        await until(
            pilot,
            lambda: form.validated and bool(form.fields) and form.resources is not None,
            60,
            "the form checked on the cluster",
        )
        await pilot.press("ctrl+s")
        field = form.fields["data.val_files"]
        await until(pilot, lambda: "preflight" in field.problem_text, 60, "the preflight")
        assert "node1" in field.problem_text and "test.parquet" in field.problem_text
        assert isinstance(app.screen, JobFormScreen)  # not submitted
        assert {r.submission_id for r in JobHistory(inv.cluster).all()} == before
        box = str(form.query_one("#form-problems").render())
        assert "job preflight: 1 problem, not submitted" in box

        await pilot.press("ctrl+s")  # the same config again: sent anyway
        await until(pilot, lambda: isinstance(app.screen, JobsScreen), 60, "back on Jobs")
    new = {r.submission_id for r in JobHistory(inv.cluster).all()} - before
    assert len(new) == 1
    ray_head.cli("stop", str(ray_head.path), new.pop())


async def test_a_sweep_is_refused_at_its_first_run_whose_preflight_fails(lab):
    """`verl-tui sweep` and the form's sweep builder: every combination's preflight, in order;
    here the second run's data file exists on no host."""
    import asyncio

    from tui.jobs.flow import first_failing_preflight
    from tui.jobs.pipeline import JobSpec
    from tui.jobs.sweep import parse_grid, plan_sweep

    lab.ready()
    inv = lab.inventory()
    spec = JobSpec(load_profile(REPO / "profiles" / f"{PRESET}.yaml"))
    grid = parse_grid(
        "data.train_files=${oc.env:HOME}/data/gsm8k/train.parquet,"
        "${oc.env:HOME}/data/gsm8k/missing.parquet"
    )
    plan = await asyncio.to_thread(plan_sweep, inv, spec, [grid], name="pf", resources=None)
    assert plan.ok and len(plan.subs) == 2, plan.invalid
    async with Fleet(inv) as fleet:
        refused = await first_failing_preflight(fleet, inv, plan)
    assert refused is not None
    run, findings = refused
    assert run is plan.runs[1] and "missing.parquet" in run.label, show(findings)
    bad = job_failures(findings)
    assert [(f.check, f.host) for f in bad] == [("path:data.train_files", n) for n in NAMES], show(
        findings
    )
    assert all("missing.parquet" in f.finding for f in bad)


def test_dry_runs_run_the_preflight_and_exit_as_the_real_commands_would(lab, ray_head):
    """`submit --dry-run` and `sweep --dry-run` on a live head: the same job preflight as the
    real command (exit 1 / 2 with its findings while TransferQueue is missing on the head,
    the command still printed); --skip-preflight says loudly that it was not run; once the
    host is ready both pass."""
    lab.ready()
    shutil.rmtree(lab.sites["node1"] / "transfer_queue")
    path, cli = str(ray_head.path), ray_head.cli
    dry = cli("submit", path, PRESET, "--dry-run")
    assert dry.returncode == 1, dry.stdout + dry.stderr
    assert "verl.trainer.main_ppo" in dry.stdout  # the command, as before
    assert "✗ import:transfer_queue" in dry.stderr and "node1" in dry.stderr
    assert "dry run: the real submit would be refused: the job preflight failed" in dry.stderr

    skipped = cli("submit", path, PRESET, "--dry-run", "--skip-preflight")
    assert skipped.returncode == 0, skipped.stdout + skipped.stderr
    assert "the job preflight was NOT run (--skip-preflight)" in skipped.stderr
    assert "import:transfer_queue" not in skipped.stderr

    grid = ("--grid", "data.max_prompt_length=256,512")
    sweep = cli("sweep", path, PRESET, *grid, "--name", "pfdry", "--dry-run")
    assert sweep.returncode == 2, sweep.stdout + sweep.stderr
    assert "the real sweep would queue nothing" in sweep.stderr
    assert "✗ import:transfer_queue" in sweep.stderr

    lab.ready()
    dry = cli("submit", path, PRESET, "--dry-run")
    assert dry.returncode == 0 and "job preflight" not in dry.stderr, dry.stderr
    sweep = cli("sweep", path, PRESET, *grid, "--name", "pfdry", "--dry-run")
    assert sweep.returncode == 0 and "2 combinations valid" in sweep.stdout, sweep.stderr
