"""Launch scripts against verl 0.9.1, decided independently of the code under test
(tests/derive_verl_examples.py: bash runs a script with a recording python, Hydra composes
verl's own config from that argv):

- verl's example scripts, as facts (tests/fixtures/verl_examples/facts.json: each script's
  source URL at its commit, the argv bash passes to main_ppo, the config name/path, the
  verdict): Hydra still gives each recorded argv its verdict, and `check_profile` agrees;
- this project's own launch scripts (tests/fixtures/launch_scripts, written here): the import
  reads what bash runs, and check agrees with verl on each.
"""

from __future__ import annotations

import json
import re
import shlex
import time
from pathlib import Path
from typing import Any

import pytest
from derive_verl_examples import (
    FACTS,
    LAUNCH_SCRIPTS,
    REPO_MARK,
    HydraOracle,
    classify,
    derive,
    full_compose,
    hydra_args,
    script_argv,
)
from harness.cli import run_cli
from omegaconf import OmegaConf

from tui.jobs import schema
from tui.jobs.importer import ImportResult, import_script
from tui.jobs.validate import Report, check_profile

# Slow tier: verl's config composed for ~130 recorded argv by Hydra and by check (about a
# minute of CPU, most of it resolving verl's ${…} interpolations).
# The module fixture composes all 126 recorded argv with Hydra (~50 s on a quiet 2-core machine,
# 390 s measured on a loaded one): its first test gets room beyond the suite's 300 s.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[1]
DATA = json.loads(FACTS.read_text())
SCRIPTS: list[dict[str, Any]] = DATA["scripts"]
OWN_SCRIPTS = sorted(p.name for p in LAUNCH_SCRIPTS.glob("*.sh"))
# A project's own Hydra config (verl's multi-turn examples have theirs) is stood in for by this
# repository's own, built on the same verl config through the same mechanism.
STAND_IN_DIR = LAUNCH_SCRIPTS / "config"
STAND_IN = {"ppo_trainer": "multiturn_fsdp", "ppo_megatron_trainer": "multiturn_megatron"}
# Check agrees with verl's Hydra on ≥95 % of the valid argv and of the invalid ones (a few
# values Hydra takes as text verl's own startup refuses: check is stricter there, and right).
TARGET = 0.95


def here_argv(entry: dict[str, Any]) -> list[str]:
    """The recorded argv as it runs here: a custom config becomes the stand-in on the same
    verl config."""
    argv: list[str] = entry["argv"]
    if not entry.get("config_path"):
        return argv
    (base,) = entry["config_extends"]
    _, _, overrides = hydra_args(argv, REPO)
    return [f"--config-path={STAND_IN_DIR}", f"--config-name={STAND_IN[base]}", *overrides]


def import_argv(argv: list[str]) -> ImportResult:
    """The import of a launch line that passes exactly `argv` to main_ppo."""
    line = "python3 -m verl.trainer.main_ppo " + " ".join(shlex.quote(a) for a in argv)
    return import_script(line + "\n", source="facts.json")


def refused_at_import(result: ImportResult) -> set[str]:
    """Keys whose value verl itself would refuse (Hydra cannot parse it): reported by the
    import with the key, before any check."""
    return {
        u.text.strip("'\"").split("=", 1)[0].lstrip("+~")  # the word as written, maybe quoted
        for u in result.unmapped
        if "verl would refuse" in u.reason and "=" in u.text
    }


def agrees(verdict: dict[str, Any], report: Report, result: ImportResult) -> bool:
    """Check agrees with verl: a valid argv checks clean, an invalid one has every key verl
    refuses named."""
    if verdict["valid"]:
        return not report.errors
    flagged = {p.key for p in report.errors} | refused_at_import(result)
    wanted = {k for k in verdict["keys"] if k}
    return wanted <= flagged if wanted else bool(flagged)


@pytest.fixture(scope="module")
def oracle() -> HydraOracle:
    return HydraOracle()


# -- verl's examples, as facts ---------------------------------------------------------------


def test_facts_name_their_source_and_hold_no_script() -> None:
    commit = DATA["source_commit"]
    assert DATA["source_repo"] == "volcengine/verl" and re.fullmatch(r"[0-9a-f]{40}", commit)
    assert len(SCRIPTS) >= 100
    assert sum(e["valid"] for e in SCRIPTS) >= 50 and sum(not e["valid"] for e in SCRIPTS) >= 20
    for e in SCRIPTS:
        assert e["url"] == f"https://github.com/volcengine/verl/blob/{commit}/{e['script']}"
        assert e["argv"] and all(isinstance(a, str) for a in e["argv"])
        assert e["valid"] == (not e["keys"])
    # the facts and how to re-derive them: no script, no config of verl's
    assert sorted(p.name for p in FACTS.parent.iterdir()) == ["README.md", "facts.json"]


def test_verl_gives_each_recorded_argv_its_verdict(oracle: HydraOracle) -> None:
    started = time.perf_counter()
    wrong = {}
    for e in SCRIPTS:
        fresh = classify(here_argv(e), REPO, oracle)
        if (fresh["valid"], fresh["keys"]) != (e["valid"], e["keys"]):
            wrong[e["script"]] = (fresh["keys"], e["keys"])
    print(f"\n{len(SCRIPTS)} argv composed by Hydra in {time.perf_counter() - started:.1f} s")
    assert not wrong


def test_oracle_composes_as_hydra_does(oracle: HydraOracle) -> None:
    """The oracle's shortcut (one defaults-list compose per config and group choice) gives
    Hydra's full compose, value for value: a custom config on Megatron's, and an invalid argv
    with two refused keys."""
    by_script = {e["script"]: e for e in SCRIPTS}
    custom = by_script["examples/sglang_multiturn/run_qwen2.5-3b_megatron_gsm8k_multiturn.sh"]
    config_dir, name, overrides = hydra_args(here_argv(custom), REPO)
    assert name == "multiturn_megatron"
    full = OmegaConf.to_container(full_compose(config_dir, name, overrides))
    assert full == OmegaConf.to_container(oracle(config_dir, name, overrides))
    invalid = by_script["examples/ppo_trainer/run_gemma.sh"]
    assert len(invalid["keys"]) == 2
    assert classify(invalid["argv"], REPO) == classify(invalid["argv"], REPO, oracle)


@pytest.fixture(scope="module")
def checked() -> dict[str, tuple[bool, Report, ImportResult]]:
    """(check agrees with verl, report, import) for every recorded argv."""
    started = time.perf_counter()
    out = {}
    for e in SCRIPTS:
        result = import_argv(here_argv(e))
        report = check_profile(result.profile)
        out[e["script"]] = (agrees(e, report, result), report, result)
    print(f"\n{len(out)} argv imported and checked in {time.perf_counter() - started:.1f} s")
    return out


def test_valid_argv_check_clean(checked: dict[str, tuple[bool, Report, ImportResult]]) -> None:
    valid = [e["script"] for e in SCRIPTS if e["valid"]]
    failed = {s: [str(p) for p in checked[s][1].errors] for s in valid if not checked[s][0]}
    rate = 1 - len(failed) / len(valid)
    print(f"valid for verl {DATA['verl_version']}: {len(valid) - len(failed)}/{len(valid)} clean")
    for script, errors in failed.items():
        print(f"  false alarm {script}: {errors[:2]}")
    assert rate >= TARGET, failed


def test_invalid_argv_are_caught_naming_every_key(
    checked: dict[str, tuple[bool, Report, ImportResult]],
) -> None:
    invalid = [e for e in SCRIPTS if not e["valid"]]
    missed = {
        e["script"]: (e["keys"], [str(p) for p in checked[e["script"]][1].errors])
        for e in invalid
        if not checked[e["script"]][0]
    }
    rate = 1 - len(missed) / len(invalid)
    print(
        f"invalid for verl {DATA['verl_version']}: {len(invalid) - len(missed)}/{len(invalid)} "
        "caught naming every refused key"
    )
    for script, why in missed.items():
        print(f"  missed {script}: {why}")
    assert rate >= TARGET, missed


def test_megatron_config_name_is_model_engine_megatron(
    checked: dict[str, tuple[bool, Report, ImportResult]],
) -> None:
    megatron = [
        e["script"]
        for e in SCRIPTS
        if e["config_name"].startswith("ppo_megatron_trainer") and e["valid"]
    ]
    assert len(megatron) >= 10
    for script in megatron:
        _, report, result = checked[script]
        assert result.profile.overrides.get("model_engine") == "megatron", script
        assert result.profile.config_name is None
        assert report.config is not None
        assert report.config["actor_rollout_ref"]["actor"]["strategy"] == "megatron"


def test_ppo_megatron_trainer_is_model_engine_megatron() -> None:
    """verl 0.9.1's ppo_megatron_trainer.yaml says it is ppo_trainer with model_engine=megatron:
    the import maps it so; both compose to the same config."""
    alias = schema.compose([], "ppo_megatron_trainer.yaml")
    mapped = schema.compose(["model_engine=megatron"])
    assert alias == mapped and alias["actor_rollout_ref"]["actor"]["strategy"] == "megatron"


# -- this project's own launch scripts -------------------------------------------------------


def import_own(name: str) -> ImportResult:
    path = LAUNCH_SCRIPTS / name
    # The scripts run from their project's root: the folder that holds them.
    return import_script(
        path.read_text(encoding="utf-8"), source=str(path), cwd=str(LAUNCH_SCRIPTS)
    )


@pytest.mark.parametrize("name", OWN_SCRIPTS)
def test_own_script_imports_what_bash_runs(name: str, oracle: HydraOracle) -> None:
    argv = script_argv(LAUNCH_SCRIPTS / name, LAUNCH_SCRIPTS)
    assert argv is not None
    verdict = classify(argv, LAUNCH_SCRIPTS, oracle)
    assert verdict["valid"] == (not name.startswith("invalid_")), verdict
    result = import_own(name)
    report = check_profile(result.profile)
    assert agrees(verdict, report, result), [str(p) for p in report.errors]
    if verdict["valid"]:
        # what the import composes is what verl composes from the argv bash passes
        config_dir, config_name, overrides = hydra_args(argv, LAUNCH_SCRIPTS)
        composed = OmegaConf.to_container(oracle(config_dir, config_name, overrides))
        assert report.config == composed


def test_arrays_defaults_and_arithmetic() -> None:
    r = import_own("grpo_fsdp_arrays.sh")
    o = r.profile.overrides
    assert o["data.max_prompt_length"] == 1024  # $((512 * 2)), inside an array
    assert o["actor_rollout_ref.actor.ppo_max_token_len_per_gpu"] == 8192  # $(((P + R) * 2))
    assert o["actor_rollout_ref.model.path"] == "Qwen/Qwen2.5-1.5B-Instruct"
    assert o["trainer.n_gpus_per_node"] == 8
    assert {(a.text, a.value) for a in r.assumed} >= {("${GPUS_PER_NODE:-8}", "8")}
    assert r.profile.runtime_env.env_vars == {"VLLM_USE_V1": "1", "RAY_DEDUP_LOGS": "0"}
    r = import_own("ppo_critic_positional.sh")
    assert r.profile.overrides["actor_rollout_ref.rollout.tensor_model_parallel_size"] == 2
    assert {(a.text, a.value) for a in r.assumed} >= {("${1:-2}", "2")}
    r = import_own("megatron_grpo.sh")
    o = r.profile.overrides
    assert o["model_engine"] == "megatron"
    assert o["actor_rollout_ref.actor.megatron.pipeline_model_parallel_size"] == 2  # $((8 / 4))
    assert o["trainer.experiment_name"] == "qwen14b-tp4-pp2"


def test_custom_config_is_kept() -> None:
    r = import_own("multiturn_tools.sh")
    assert r.profile.config_name == "multiturn_fsdp"
    assert r.profile.config_path == str(STAND_IN_DIR)
    report = check_profile(r.profile)
    assert report.config is not None and not report.errors
    assert report.config["actor_rollout_ref"]["rollout"]["multi_turn"]["enable"] is True
    assert report.overrides[:2] == [
        f"--config-path={STAND_IN_DIR}",
        "--config-name=multiturn_fsdp",
    ]
    # the custom config finds verl's through a path relative to the job's directory
    assert any(p.key == "config_path" and p.level == "warn" for p in report.problems)


def test_refused_keys_say_what_verl_has_instead() -> None:
    report = check_profile(import_own("invalid_renamed_critic.sh").profile)
    (p,) = [p for p in report.errors if p.key == "critic.model.fsdp_config.param_offload"]
    assert "verl renamed this key: use critic.fsdp.param_offload" in p.message
    # the hint for a key Megatron's config lacks comes from Megatron's keys, not FSDP's
    report = check_profile(import_own("invalid_megatron_keys.sh").profile)
    (p,) = [p for p in report.errors if p.key == "actor_rollout_ref.actor.router_replay.mode"]
    assert "actor_rollout_ref.actor.megatron.router_replay.mode" in p.message


def test_derive_records_a_script_as_facts(oracle: HydraOracle) -> None:
    """The derivation tool on a tree of scripts (here this project's own): URL at the commit,
    the argv bash passes, the custom config and what it builds on, the verdict."""
    script = LAUNCH_SCRIPTS / "invalid_multiturn_interaction.sh"
    fact = derive(script, LAUNCH_SCRIPTS, "example/project", "0" * 40, oracle)
    assert fact["url"] == (
        "https://github.com/example/project/blob/" + "0" * 40 + "/invalid_multiturn_interaction.sh"
    )
    assert fact["argv"][:2] == [
        f"--config-path={REPO_MARK}/config",
        "--config-name=multiturn_megatron",
    ]
    assert fact["config_path"] == f"{REPO_MARK}/config"
    assert fact["config_extends"] == ["ppo_megatron_trainer"]
    assert not fact["valid"]
    assert fact["keys"] == ["actor_rollout_ref.rollout.multi_turn.interaction_config_path"]


@pytest.mark.parametrize("name", ["grpo_fsdp_arrays.sh", "invalid_reward_model_arrays.sh"])
def test_profile_check_through_the_cli(name: str, tmp_path: Path) -> None:
    """`verl-tui profile import` then `profile check`, as a user migrating would: each a
    process of its own (harness/cli.py)."""
    out = tmp_path / "p.yaml"
    imp = run_cli(
        ["profile", "import", str(LAUNCH_SCRIPTS / name), "-o", str(out)], cwd=LAUNCH_SCRIPTS
    )
    assert imp.returncode == 0, imp.stderr
    chk = run_cli(["profile", "check", str(out), "--json"], cwd=LAUNCH_SCRIPTS)
    result = json.loads(chk.stdout)
    errors = {p["key"] for p in result["problems"] if p["level"] == "error"}
    if name.startswith("invalid_"):
        assert chk.returncode == 1 and errors == {
            "reward_model.use_reward_loop",
            "reward_model.micro_batch_size_per_gpu",
            "trainer.use_legacy_worker_impl",
        }
    else:
        assert chk.returncode == 0 and result["ok"] and not errors, chk.stdout
    assert "Traceback" not in chk.stderr + imp.stderr
