"""The job preflight's parts that need no host: the import map read from verl's own source
(a verl upgrade that moves a cited import fails here), the shipped presets' paths, and the
classification of path values (~, $VAR, HF ids)."""

from __future__ import annotations

import importlib.util
import re
import shutil
from pathlib import Path

import pytest
from harness.cli import run_cli

from tui.jobs.preflight import classify_value, configs_for, job_needs
from tui.jobs.preflight.imports import (
    NEEDS,
    ROLLOUT_ENGINES,
    SOURCE_FILES,
    logger_modules,
    required_modules,
    rollout_modules,
    witness,
)
from tui.jobs.profiles import load_profile, to_hydra_overrides

REPO = Path(__file__).resolve().parent.parent
PRESETS = sorted((REPO / "profiles").glob("*.yaml"))


def verl_root() -> Path:
    spec = importlib.util.find_spec("verl")
    assert spec is not None and spec.submodule_search_locations
    return Path(next(iter(spec.submodule_search_locations)))


@pytest.mark.parametrize("need", NEEDS, ids=lambda n: n.module)
def test_every_cited_import_is_still_in_verl(need) -> None:
    """Fails loudly when a verl upgrade moves or drops an import the map cites."""
    assert witness(verl_root(), need) is None


def test_rollout_engines_and_loggers_are_read_from_verl() -> None:
    root = verl_root()
    loaders = rollout_modules(root)
    # every engine verl registers is one the map knows (a new one fails here)
    assert set(loaders) == set(ROLLOUT_ENGINES)
    for name, module_file in loaders.items():
        text = (root / module_file).read_text()
        assert re.search(rf"^\s*(import|from) {ROLLOUT_ENGINES[name]}\b", text, re.M), name
    loggers = logger_modules(root)
    assert loggers["wandb"] == ["wandb"] and loggers["mlflow"] == ["mlflow"]
    assert "console" not in loggers  # verl's own LocalLogger: nothing to install


def test_import_map_files_are_what_verl_source_ships() -> None:
    from tui.jobs.verl_source import SPEC

    root = verl_root()
    for rel in SOURCE_FILES:
        assert rel in SPEC["py"] and (root / rel).exists(), rel


def test_a_verl_without_the_cited_import_is_reported_not_used(tmp_path: Path) -> None:
    """An edited copy of verl (TaskRunnerV1.run no longer imports transfer_queue): the map's
    entry is not used, and the note names the file and the scope. The TaskRunner's path still
    reaches it (verl/trainer/ppo/v1/agent_loop_tq.py imports it at module level): that import,
    read from the same source, is what the module is then asked for."""
    root = tmp_path / "verl"
    shutil.copytree(verl_root() / "trainer", root / "trainer")
    main = root / "trainer" / "main_ppo.py"
    main.write_text(main.read_text().replace("import transfer_queue as tq", "tq = None"))
    cfg = {"trainer": {"use_v1": True, "logger": ["console"]}}
    mods, notes = required_modules(cfg, root)
    tq = [m for m in mods if m.module == "transfer_queue"]
    assert len(tq) == 1 and not tq[0].listed, tq
    assert tq[0].cite == "verl/trainer/ppo/v1/agent_loop_tq.py"
    assert any(
        "verl/trainer/main_ppo.py (TaskRunnerV1.run) no longer imports transfer_queue" in n
        for n in notes
    ), notes
    assert witness(verl_root(), NEEDS[0]) is None  # the real one still has it


def test_modules_follow_the_config() -> None:
    root = verl_root()

    def mods(*sets: str) -> set[str]:
        _, resolved = configs_for(["actor_rollout_ref.rollout.name=vllm", *sets])
        return {m.module for m in required_modules(resolved, root)[0] if m.listed}

    assert mods("trainer.logger=[console]") == {"transfer_queue", "vllm", "flash_attn"}
    assert mods(
        "trainer.use_v1=false",
        "trainer.logger=[console,wandb]",
        "actor_rollout_ref.rollout.name=sglang",
        "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",
    ) == {"sglang", "wandb"}


@pytest.mark.parametrize("path", PRESETS, ids=lambda p: p.stem)
def test_shipped_presets_have_no_tilde_or_shell_variables(path: Path) -> None:
    prof = load_profile(path)
    text = path.read_text()
    assert not re.search(r":\s*~", text) and not re.search(r"\$(?!\{oc\.env:)", text)
    raw, resolved = configs_for(to_hydra_overrides(prof.overrides))
    needs = job_needs(raw, resolved, env={}, verl_root=None)
    assert needs.local == [], needs.local  # nothing decided against it before any host
    assert {p.key for p in needs.paths} >= {"data.train_files", "data.val_files"}
    assert all(p.value.startswith("${oc.env:HOME}/data/gsm8k/") for p in needs.paths[:2])
    assert needs.hf_ids[0][0] == "actor_rollout_ref.model.path"


@pytest.mark.parametrize(
    ("value", "model", "expect"),
    [
        ("/data/x.parquet", False, "path"),
        ("${oc.env:HOME}/x.parquet", False, "path"),
        ("hdfs://nn/x.parquet", False, "remote"),
        ("Qwen/Qwen2.5-0.5B-Instruct", True, "hf"),
        ("~/x.parquet", False, "fail"),
        ("$HOME/x", False, "fail"),
        ("${HOME}/x", True, "fail"),
        ("data/x.parquet", False, "fail"),  # relative, no working_dir
    ],
)
def test_classify_value(value: str, model: bool, expect: str) -> None:
    got = classify_value("k", value, model=model, working_dir=None)
    assert (got if isinstance(got, str) else got.status) == expect
    if expect == "fail":
        assert "${oc.env:" in got.fix or "/absolute/path" in got.fix


def test_check_profile_bad_input_is_one_line_exit_2(tmp_path: Path) -> None:
    """Decided before any host is asked (the address is never reached)."""

    hosts = tmp_path / "hosts.yaml"
    hosts.write_text("hosts:\n  - {name: a, address: 10.255.255.1}\n")
    for extra, says in (
        (["--profile", "no-such-preset"], "no-such-preset"),
        (["--profile", "grpo-gsm8k-qwen2.5-0.5b", "--set", "noequals"], "noequals"),
        (["--set", "a=1"], "--set: needs --profile"),
    ):
        proc = run_cli(["check", str(hosts), *extra], cwd=REPO, timeout=60)
        assert proc.returncode == 2, (extra, proc.stdout, proc.stderr)
        assert says in proc.stderr and "Traceback" not in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


async def test_a_submission_that_no_longer_composes_is_one_failed_row() -> None:
    """(A resubmission from the history whose key this verl no longer has): no exception, no
    host asked — one failed row saying why, with the way around it."""
    from types import SimpleNamespace

    from tui.config.hosts import local_inventory
    from tui.jobs.preflight import preflight_submission

    sub = SimpleNamespace(overrides=["trainer.nnodez=2"], env_vars={}, working_dir=None)
    rows = await preflight_submission(None, local_inventory(), sub)  # type: ignore[arg-type]
    assert [(r.check, r.status) for r in rows] == [("preflight", "fail")]
    assert "trainer.nnodez" in rows[0].finding and "--skip-preflight" in rows[0].fix


@pytest.mark.parametrize(
    "value",
    [
        "${oc.env:HOME}/data/x.parquet",
        "${oc.env:DATA_ROOT,/data}/x.parquet",
        "a${oc.env:A}b${oc.env:B}c",
        "\\${oc.env:HOME}",  # a backslash, then literal text
        "${oc.env:HOME",  # not an interpolation: literal
    ],
)
def test_env_interpolation_round_trips_through_profile_text(value: str) -> None:
    from tui.jobs import hydra_values as hv

    for text in (hv.format_value(value), hv.short_text(value)):
        back, problem = hv.parse_value(text)
        assert problem is None and back == value, (value, text, back, problem)
