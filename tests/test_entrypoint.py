"""A profile's entrypoint: the verl module its job runs. A script launching another Hydra entry
point of verl (one_step_off_policy's main_ppo) imports with that module and no config of this
machine's; the check composes that entry's own config (verl 0.9.1's, read here); every
submission (the one builder, tui/jobs/profiles.verl_command) and every exported script runs
that module, and the export imports back to the same profile. A hostile value is refused when
the profile loads, in one line naming profile.yaml:LINE; an old profile without the field is
main_ppo's, loaded and written as before."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from tui.commands.profile import run_profile_check
from tui.commands.profile_io import run_import
from tui.config.hosts import parse_inventory
from tui.config.yamlfile import ConfigError
from tui.jobs.exporter import to_dstack, to_ray_job_submit, to_sbatch
from tui.jobs.history import JobRecord
from tui.jobs.importer import import_script
from tui.jobs.pipeline import JobSpec, prepare_submission
from tui.jobs.profiles import (
    DEFAULT_ENTRYPOINT,
    Profile,
    entry_note,
    load_profile,
    parse_profile,
    profile_to_yaml,
    save_profile,
)
from tui.jobs.queue import Needs, entry_for
from tui.jobs.submit import verl_submission
from tui.jobs.sweep import parse_grid, plan_sweep
from tui.jobs.validate import check_profile
from tui.supervisor.rebuild import profile_spec, retry_id

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tests" / "fixtures" / "shell_constructs" / "44_entry_in_variable.sh"
ONE_STEP = "verl.experimental.one_step_off_policy.main_ppo"
PYTHON = "/opt/venv/bin/python3"
INV = parse_inventory(
    f"cluster: t\nray: {{dashboard_port: 8265}}\nhosts:\n  - name: here\n    transport: local\n"
    f"    python: {PYTHON}\n"
)


def _import(text: str, source: str = "<script>", cwd: str | None = None) -> Profile:
    return import_script(text, source=source, cwd=cwd or str(SCRIPT.parent)).profile


def _submitted(profile: Profile, **spec: object) -> list[str]:
    """The argv `submit` (form, CLI, queue, sweep, supervisor) would send: the one pipeline."""
    sub, report = prepare_submission(INV, JobSpec(profile, **spec), None)  # type: ignore[arg-type]
    assert sub is not None, [(p.key, p.message) for p in report.errors]
    return sub.entrypoint_argv


def _bash_runs(script: str, tmp: Path) -> list[str]:
    """What the exported script's `ray job submit … -- CMD` hands Ray to run: real bash, with a
    stand-in `ray` that records the words after `--`."""
    stubs = tmp / "bin"
    stubs.mkdir(exist_ok=True)
    ray = stubs / "ray"
    ray.write_text(
        '#!/bin/bash\nwhile [ "$1" != "--" ]; do shift; done; shift\n'
        'printf "%s\\0" "$@" > "$RECORD"\n'
    )
    ray.chmod(0o755)
    (tmp / "run.sh").write_text(script)
    record = tmp / "argv"
    env = {"PATH": f"{stubs}:/usr/bin:/bin", "RECORD": str(record), "HOME": str(tmp)}
    done = subprocess.run(
        ["bash", str(tmp / "run.sh")], env=env, capture_output=True, timeout=30, check=False
    )
    assert done.returncode == 0, done.stderr
    return record.read_bytes().decode().split("\0")[:-1]


def test_other_entry_point_imports_checks_submits_and_exports_its_module(tmp_path: Path) -> None:
    profile = _import(SCRIPT.read_text(), str(SCRIPT))
    assert profile.entrypoint == ONE_STEP
    # Its own config is the cluster verl's: no folder of this machine's is recorded.
    assert (profile.config_name, profile.config_path) == (None, None)
    assert profile.overrides["rollout.n_gpus_per_node"] == 4

    report = check_profile(profile)
    assert report.ok and report.errors == [], [(p.key, p.message) for p in report.problems]
    assert report.config is not None and report.config["rollout"]["n_gpus_per_node"] == 4
    # verl's own file searches file://verl/trainer/config: the cluster's job must run from a
    # verl checkout for it to find ppo_trainer (Hydra resolves it against the working dir).
    (note,) = report.warnings
    assert note.key == "entrypoint" and "file://verl/trainer/config" in note.message
    # main_ppo's ppo_trainer has no top-level rollout: the same keys are refused there.
    as_main = check_profile(profile.model_copy(update={"entrypoint": DEFAULT_ENTRYPOINT}))
    assert {"rollout.nnodes", "rollout.n_gpus_per_node"} <= {p.key for p in as_main.errors}

    argv = _submitted(profile)
    assert argv[:3] == [PYTHON, "-m", ONE_STEP]
    assert not any(a.startswith("--config") for a in argv)  # the entry's own config applies
    assert "rollout.n_gpus_per_node=4" in argv
    assert _submitted(profile, print_config=True)[:5] == [PYTHON, "-m", ONE_STEP, "--cfg", "job"]

    # profile YAML → export script → import again: the same entrypoint and overrides.
    text = profile_to_yaml(profile)
    assert f"entrypoint: {ONE_STEP}\n" in text
    again = parse_profile(text, tmp_path / "p.yaml")
    assert again.entrypoint == ONE_STEP
    script = to_ray_job_submit(again, python="python3")
    ran = _bash_runs(script, tmp_path)
    assert ran[:3] == ["python3", "-m", ONE_STEP]
    back = _import(script, "export.sh", str(tmp_path))
    assert back.entrypoint == ONE_STEP and back.overrides == profile.overrides
    assert (back.config_name, back.config_path) == (None, None)
    for other in (
        to_sbatch(again, nodes=1, gpus_per_node=4),
        to_dstack(again, nodes=1, gpus_per_node=4),
    ):
        assert f"-m {ONE_STEP}" in other and "verl.trainer.main_ppo" not in other

    assert entry_note(profile) == f"   -m {ONE_STEP}"  # the job form's title line


def test_config_the_script_names_is_kept_and_submitted() -> None:
    """Only what the script set is kept: the entry's own folder and name, however written,
    drop out; another config of the entry is named on the cluster's command line."""
    head = f"python3 -m {ONE_STEP} trainer.nnodes=1 "
    own = _import(head + "--config-path=config --config-name=one_step_off_ppo_trainer\n")
    assert (own.entrypoint, own.config_name, own.config_path) == (ONE_STEP, None, None)
    mega = _import(head + "--config-name one_step_off_ppo_megatron_trainer\n")
    assert (mega.config_name, mega.config_path) == ("one_step_off_ppo_megatron_trainer", None)
    report = check_profile(mega)
    assert report.config is not None and "rollout" in report.config
    assert "megatron" in report.config["actor_rollout_ref"]["actor"]
    assert report.overrides[0] == "--config-name=one_step_off_ppo_megatron_trainer"
    # A name the entry's folder does not have is refused here, as Hydra would there.
    wrong = check_profile(mega.model_copy(update={"config_name": "ppo_trainer"}))
    assert [p.key for p in wrong.errors] == ["config_name"]


def test_entry_point_this_verl_lacks_is_one_finding() -> None:
    report = check_profile(Profile(name="x", entrypoint="verl.trainer.no_such_main"))
    assert report.config is None
    (problem,) = report.errors
    assert problem.key == "entrypoint" and "verl.trainer.no_such_main" in problem.message
    assert ONE_STEP in problem.message  # what the selected verl has


@pytest.mark.parametrize(
    "value",
    [
        "verl.x; rm -rf /",
        "os",
        "../x",
        "verl." + "a" * 10240,
        "verl.trainer.main_ppo --cfg job",
        "verl.$(id)",
        "verl..x",
        "verl.import.x",
        "-c",
        "",
        None,
        7,
        ["verl.a"],
        "verl.a\nb",
    ],
    ids=lambda v: repr(v)[:24],
)
def test_hostile_entrypoint_is_refused_at_load(tmp_path: Path, value: object) -> None:
    path = tmp_path / "profile.yaml"
    shown = yaml.safe_dump({"entrypoint": value}, default_flow_style=True, width=1 << 20)
    path.write_text(f"name: p\noverrides: {{a.b: 1}}\n{shown.strip()[1:-1]}\n")
    with pytest.raises(ConfigError) as err:
        load_profile(path)
    msg = str(err.value)
    assert msg.startswith(f"{path}:3: entrypoint: ") and "\n" not in msg and len(msg) < 300


def test_builders_refuse_what_skipped_the_model() -> None:
    """A profile built without validation (model_construct) still cannot put a word other than
    a verl module into the job's command or an exported script."""
    bad = Profile.model_construct(**{**Profile(name="p").__dict__, "entrypoint": "os; id"})
    with pytest.raises(ValueError, match="not a verl module"):
        verl_submission(INV, name="p", overrides=[], entrypoint=bad.entrypoint)
    with pytest.raises(ValueError, match="not a verl module"):
        to_ray_job_submit(bad)


def test_old_profile_without_the_field_runs_main_ppo(tmp_path: Path) -> None:
    text = "name: old\noverrides:\n  trainer.nnodes: 1\n  trainer.n_gpus_per_node: 1\n"
    path = tmp_path / "old.yaml"
    path.write_text(text)
    profile = load_profile(path)
    assert profile.entrypoint == DEFAULT_ENTRYPOINT and entry_note(profile) == ""
    assert profile_to_yaml(profile) == text  # written back as it was
    ran = _bash_runs(to_ray_job_submit(profile), tmp_path)
    assert ran[:3] == ["python3", "-m", DEFAULT_ENTRYPOINT]
    # A shipped preset (none has the field) submits main_ppo.
    preset = load_profile(ROOT / "profiles" / "grpo-mi300.yaml")
    assert "entrypoint" not in (ROOT / "profiles" / "grpo-mi300.yaml").read_text()
    assert _submitted(preset)[:3] == [PYTHON, "-m", DEFAULT_ENTRYPOINT]


def test_import_and_check_commands_name_the_entry_point(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`profile import SCRIPT -o P` writes the entrypoint and says where `-m MODULE` went;
    `profile check P` says which module it checked, in its text and its --json."""
    out = tmp_path / "off.yaml"
    assert run_import(SCRIPT, out) == 0
    said = capsys.readouterr().out
    assert f"  entrypoint: -m {ONE_STEP}\n" in said
    assert load_profile(out).entrypoint == ONE_STEP
    assert run_profile_check(out, hosts=None, sets=[], as_json=False) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("44_entry_in_variable: 0 errors") and f"(runs {ONE_STEP})" in last
    assert run_profile_check(out, hosts=None, sets=[], as_json=True) == 0
    assert json.loads(capsys.readouterr().out)["entrypoint"] == ONE_STEP


def test_sweep_queue_and_supervisor_retry_run_the_entry_point(tmp_path: Path) -> None:
    """The other submit paths build through the same pipeline: a sweep's runs (validated with
    the entry's config: its grid is on a key only that config has), their queue entries, and
    the supervisor's retry of a recorded job, rebuilt from its profile file."""
    path = tmp_path / "off.yaml"
    save_profile(_import(SCRIPT.read_text(), str(SCRIPT)), path)
    spec = JobSpec(load_profile(path))
    grid = parse_grid("rollout.n_gpus_per_node=2,4")
    plan = plan_sweep(INV, spec, [grid], name="off", resources=None)
    assert plan.ok and len(plan.subs) == 2
    for sub, cfg in zip(plan.subs, plan.configs, strict=True):
        entry = entry_for(sub, INV, needs=Needs.from_config(cfg), profile_path=str(path))
        assert entry.entrypoint_argv[:3] == [PYTHON, "-m", ONE_STEP]
    assert {c["rollout"]["n_gpus_per_node"] for c in plan.configs} == {2, 4}

    rec = JobRecord(
        submission_id="off-1",
        cluster="t",
        submitted_at=0.0,
        entrypoint="",
        profile="off",
        profile_path=str(path),
        overrides=["rollout.n_gpus_per_node=2"],
    )
    retry, _ = profile_spec(INV, rec, retry_id(rec, 2), [])
    argv = _submitted(retry.profile, sets=retry.sets, submission_id=retry.submission_id)
    assert argv[:3] == [PYTHON, "-m", ONE_STEP] and "rollout.n_gpus_per_node=2" in argv
