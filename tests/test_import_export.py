"""Profile import from real-world verl launch scripts, and export to ray job submit / Slurm /
dstack: exact overrides, env, unmapped lines with line numbers, unresolved variables; round
trips through bash; hostile values run through the generated scripts with stub binaries."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tui.commands.profile_io import format_report, run_export, run_import
from tui.jobs.exporter import to_dstack, to_ray_job_submit, to_sbatch
from tui.jobs.importer import ImportResult, Unmapped, import_script, read_hydra_value
from tui.jobs.profiles import Profile, RuntimeEnv, load_profile

SCRIPTS = Path(__file__).parent / "fixtures" / "scripts"
PWNED = Path("/tmp/pwned_x")


def imported(name: str) -> ImportResult:
    path = SCRIPTS / name
    return import_script(path.read_text(), source=str(path))


def unmapped(result: ImportResult) -> list[tuple[int, str]]:
    return [(u.line, u.text) for u in result.unmapped]


def typed(value: Any) -> str:
    # Equality that also tells True from 1 and 1 from 1.0.
    return json.dumps(value, sort_keys=True)


# --- import: the fixture scripts -------------------------------------------------------------

GRPO_OVERRIDES = {
    "algorithm.adv_estimator": "grpo",
    "data.train_files": ["/data/gsm8k/train.parquet", "/data/math/train.parquet"],
    "data.val_files": ["/data/gsm8k/test.parquet", "/data/math/test.parquet"],
    "data.train_batch_size": 1024,
    "data.max_prompt_length": 512,
    "data.max_response_length": 1024,
    "data.filter_overlong_prompts": True,
    "data.truncation": "error",
    "actor_rollout_ref.model.path": "Qwen/Qwen2.5-3B-Instruct",
    "actor_rollout_ref.actor.optim.lr": 1e-6,
    "actor_rollout_ref.model.use_remove_padding": True,
    "actor_rollout_ref.actor.ppo_mini_batch_size": 256,
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 16,
    "actor_rollout_ref.actor.use_kl_loss": True,
    "actor_rollout_ref.actor.kl_loss_coef": 0.001,
    "actor_rollout_ref.actor.kl_loss_type": "low_var_kl",
    "actor_rollout_ref.model.enable_gradient_checkpointing": True,
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": 32,
    "actor_rollout_ref.rollout.tensor_model_parallel_size": 2,
    "actor_rollout_ref.rollout.name": "vllm",
    "actor_rollout_ref.rollout.gpu_memory_utilization": 0.6,
    "actor_rollout_ref.rollout.n": 5,
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": 32,
    "algorithm.use_kl_in_reward": False,
    "trainer.critic_warmup": 0,
    "trainer.logger": ["console", "wandb"],
    "trainer.project_name": "verl_grpo_example_gsm8k",
    "trainer.experiment_name": "qwen2.5-3b grpo",
    "trainer.n_gpus_per_node": 8,
    "trainer.nnodes": 1,
    "+trainer.val_before_train": False,
    "~actor_rollout_ref.rollout.engine_kwargs": None,
    "trainer.save_freq": 20,
    "trainer.test_freq": 5,
    "trainer.total_epochs": 15,
}


def test_plain_script_continuations_and_comments():
    r = imported("run_qwen2_5-3b_grpo.sh")
    p = r.profile
    assert r.command_line == 13
    assert p.name == "run_qwen2_5-3b_grpo"
    # Line 26 ends `\\  # fits on 80 GB`: bash passes ' ' (the escaped blank) as an argument
    # and ends the command there, so main_ppo gets the keys up to line 26 and refuses ' '; the
    # keys after it are commands of their own, never passed (bash's own argv, checked below).
    passed = dict(list(GRPO_OVERRIDES.items())[:13])
    assert typed(p.overrides) == typed(passed)
    assert len(_bash_argv(SCRIPTS / "run_qwen2_5-3b_grpo.sh")) == len(passed) + 1
    assert p.runtime_env == RuntimeEnv()
    assert p.python is None
    assert r.unresolved_vars == []
    assert [(u.line, u.text) for u in r.refused] == [(26, "\\  (bash passes ' ')")]
    assert "would refuse this argument" in r.refused[0].reason
    lines = unmapped(r)
    assert lines[:2] == [
        (26, "\\  (bash passes ' ')"),
        (26, "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16 \\  # fits on 80 GB"),
    ]
    assert "bash passes ' ' as an argument and ends the command" in r.unmapped[1].reason
    assert [line for line, _ in lines[2:]] == [27, 32]
    assert all("outside the verl command" in u.reason for u in r.unmapped[2:])


def _bash_argv(script: Path) -> list[str]:
    """The arguments bash passes to main_ppo (python3 replaced by a printer)."""
    prog = "python3() { shift 2; printf '%s\\0' \"$@\"; }\n" + script.read_text()
    out = subprocess.run(
        ["bash", "-c", prog], capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"}
    )
    return out.stdout.split("\0")[:-1]


def test_ray_job_submit_with_runtime_env_json_and_env_prefixes():
    r = imported("submit_dapo_2nodes.sh")
    p = r.profile
    assert r.command_line == 8
    assert p.python == "/opt/verl/.venv/bin/python3"
    assert p.runtime_env.env_vars == {
        "NCCL_DEBUG": "WARN",
        "TOKENIZERS_PARALLELISM": "true",  # --runtime-env-json
        "HYDRA_FULL_ERROR": "1",
        "VLLM_USE_V1": "1",  # prefixes after --
        "PYTHONUNBUFFERED": "1",  # python3 -u
    }
    assert p.runtime_env.working_dir == "./"
    assert p.runtime_env.excludes == [".git", "data/", "*.parquet"]
    assert typed(p.overrides) == typed(
        {
            "algorithm.adv_estimator": "grpo",
            "data.train_files": "/mnt/data/dapo-math-17k.parquet",
            "data.val_files": "/mnt/data/aime-2024.parquet",
            "data.prompt_key": "prompt",
            "data.train_batch_size": 512,
            "data.max_prompt_length": 2048,
            "data.max_response_length": 8192,
            "actor_rollout_ref.model.path": "/mnt/models/Qwen2.5-7B-Instruct",
            "actor_rollout_ref.actor.optim.lr": 1e-6,
            "actor_rollout_ref.actor.ppo_mini_batch_size": 32,
            "actor_rollout_ref.actor.use_dynamic_bsz": True,
            "actor_rollout_ref.actor.ppo_max_token_len_per_gpu": 24576,
            "actor_rollout_ref.actor.ulysses_sequence_parallel_size": 2,
            "actor_rollout_ref.model.use_remove_padding": True,
            "actor_rollout_ref.rollout.name": "vllm",
            "actor_rollout_ref.rollout.tensor_model_parallel_size": 4,
            "actor_rollout_ref.rollout.n": 16,
            "actor_rollout_ref.rollout.val_kwargs.temperature": 0.6,
            "actor_rollout_ref.rollout.val_kwargs.do_sample": True,
            "trainer.logger": ["console", "wandb"],
            "trainer.project_name": "dapo",
            "trainer.experiment_name": "qwen7b dapo 8k",
            "trainer.default_local_dir": "/mnt/ckpt/qwen7b-dapo",  # "${CKPT_DIR}" resolved
            "trainer.nnodes": 2,
            "trainer.n_gpus_per_node": 8,
            "trainer.save_freq": 50,
            "trainer.total_training_steps": 500,
        }
    )
    assert unmapped(r) == [
        (3, "set -euo pipefail"),
        (8, '--address="http://10.0.0.11:8265"'),
        (10, "--no-wait"),
    ]
    assert r.unresolved_vars == []


def test_exports_dollar_at_tee_defaults_and_command_substitution():
    r = imported("run_deepseek7b_ppo_logged.sh")
    p = r.profile
    assert r.command_line == 18
    assert p.runtime_env.env_vars == {
        "VLLM_ATTENTION_BACKEND": "XFORMERS",
        "WANDB_PROJECT": "verl-ppo",
        # Not set in the script: its default is used, and the import says so.
        "NCCL_SOCKET_IFNAME": "eth0",
        "PYTHONUNBUFFERED": "1",
    }
    o = p.overrides
    assert o["data.train_files"] == "/data/gsm8k/train.parquet"  # $DATA_DIR/…
    assert o["data.val_files"] == "/data/gsm8k/test.parquet"  # ${DATA_DIR}/…
    assert o["data.train_batch_size"] == 1024  # ${BATCH_SIZE:-1024}: the default, said so
    assert o["actor_rollout_ref.model.path"] == "deepseek-ai/deepseek-llm-7b-chat"
    assert o["critic.model.path"] == "deepseek-ai/deepseek-llm-7b-chat"
    assert o["trainer.project_name"] == "verl-ppo"  # an exported variable, used later
    assert o["trainer.experiment_name"] == "$EXP_NAME"
    assert o["trainer.default_local_dir"] == "/checkpoints/run_$TIMESTAMP"
    assert o["trainer.nnodes"] == 1  # NNODES=${NNODES:-1}
    assert o["trainer.logger"] == ["console", "wandb"]
    assert len(o) == 24
    assert unmapped(r) == [
        (4, "set -x"),
        (16, 'mkdir -p "$LOG_DIR"'),
        (42, "$@"),
        (42, "2>&1"),
        (42, "| tee $LOG_DIR/${EXP_NAME}.log"),
    ]
    assert "script's own arguments" in r.unmapped[2].reason
    assert r.unresolved_vars == ["EXP_NAME", "TIMESTAMP"]
    assert [(a.line, a.text, a.value) for a in r.assumed] == [
        (8, "${NCCL_SOCKET_IFNAME:-eth0}", "eth0"),
        (10, "${NNODES:-1}", "1"),
        (22, "${BATCH_SIZE:-1024}", "1024"),
    ]
    assert all("default is used" in a.why for a in r.assumed)
    assert "$(date +%s)" in r.var_notes["TIMESTAMP"]
    assert "TIMESTAMP" in r.var_notes["EXP_NAME"]


def test_ray_on_slurm_script_launcher_prefix_loops_and_slurm_variables():
    r = imported("ray_on_slurm_apptainer.sh")
    p = r.profile
    assert r.command_line == 37
    assert p.overrides["trainer.nnodes"] == "${SLURM_NNODES}"
    assert p.overrides["trainer.n_gpus_per_node"] == "${SLURM_GPUS_PER_NODE}"
    assert p.overrides["data.train_files"] == "/path/to/gsm8k/train.parquet"
    assert p.runtime_env.env_vars["PYTHONUNBUFFERED"] == "1"
    lines = {u.line: u.reason for u in r.unmapped}
    assert sorted(lines) == [22, 26, 29, 31, 34, 37, 53]
    assert lines[22].startswith("cluster lifecycle")
    assert lines[29].startswith("loop")
    assert "inside the loop at line 29" in lines[31]
    assert lines[37].startswith("launcher prefix")
    assert r.unmapped[-2].text == "2>&1" and r.unmapped[-1].text == "| tee verl_demo_slurm.log"
    assert r.unresolved_vars == ["ip_head", "SLURM_GPUS_PER_NODE", "SLURM_NNODES"]


# --- import: forms, one at a time -------------------------------------------------------------


@pytest.mark.parametrize(
    ("script", "python", "env"),
    [
        ("python -m verl.trainer.main_ppo a.b=1", None, {}),
        ("python3 -m verl.trainer.main_ppo a.b=1", None, {}),
        ("python3 -u -m verl.trainer.main_ppo a.b=1", None, {"PYTHONUNBUFFERED": "1"}),
        ("/opt/venv/bin/python3 -m verl.trainer.main_ppo a.b=1", "/opt/venv/bin/python3", {}),
        (
            "HYDRA_FULL_ERROR=1 VLLM_USE_V1=1 python3 -m verl.trainer.main_ppo a.b=1",
            None,
            {"HYDRA_FULL_ERROR": "1", "VLLM_USE_V1": "1"},
        ),
        (
            "env A=1 B='x y' /usr/bin/python3.11 -m verl.trainer.main_ppo a.b=1",
            "/usr/bin/python3.11",
            {"A": "1", "B": "x y"},
        ),
        ("PY=/opt/v/bin/python3\n$PY -m verl.trainer.main_ppo a.b=1", "/opt/v/bin/python3", {}),
    ],
)
def test_entrypoint_forms(script, python, env):
    r = import_script(script + "\n")
    assert r.profile.overrides == {"a.b": 1}
    assert r.profile.python == python
    assert r.profile.runtime_env.env_vars == env
    assert r.unmapped == []


def test_hydra_forms_quoting_and_values():
    r = import_script(
        "python3 -m verl.trainer.main_ppo \\\n"
        "  +trainer.new_key=1 ++trainer.forced=x ~trainer.gone \\\n"
        "  data.files=[a.parquet,b.parquet] 'trainer.experiment_name=value with spaces' \\\n"
        "  trainer.project_name=\"double quoted\" 'single.quote=$NOT_EXPANDED' \\\n"
        '  a.sweep=x,y a.list=\'["x", "y"]\' a.null=null a.f=1e-4 a.s="\'7\'" \\\n'
        "  a.ansi=$'tab\\there' a.empty= \\\n"
        "  'a.interp=${oc.env:HOME}/x'\n"
    )
    assert typed(r.profile.overrides) == typed(
        {
            "+trainer.new_key": 1,
            "++trainer.forced": "x",
            "~trainer.gone": None,
            "data.files": ["a.parquet", "b.parquet"],
            "trainer.experiment_name": "value with spaces",
            "trainer.project_name": "double quoted",
            "single.quote": "$NOT_EXPANDED",
            "a.list": ["x", "y"],
            "a.null": None,
            "a.f": 1e-4,
            "a.s": "7",
            "a.ansi": "tab\there",
            "a.empty": "",
            "a.interp": "${oc.env:HOME}/x",
        }
    )
    assert r.unresolved_vars == []  # single quotes: nothing to resolve
    # ${oc.env:…} is the one interpolation a profile keeps (resolved where verl runs)
    assert [(u.line, u.text) for u in r.unmapped] == [(5, "a.sweep=x,y")]
    assert "sweep" in r.unmapped[0].reason


def test_variables_resolve_only_from_plain_literals():
    r = import_script(
        "DATA=/d\n"
        "export MODEL=/m/qwen\n"
        'OUT="${DATA}/out"\n'
        'python3 -m verl.trainer.main_ppo a.d=${DATA:-/e} a.m=$MODEL a.o="$OUT" '
        'a.h=$HOME/x a.n=${NOPE:-/f} a.c="$(hostname)"\n'
    )
    o = r.profile.overrides
    assert o == {
        "a.d": "/d",
        "a.m": "/m/qwen",
        "a.o": "/d/out",
        "a.h": "$HOME/x",
        "a.n": "/f",
        "a.c": "$(hostname)",
    }
    assert r.profile.runtime_env.env_vars == {"MODEL": "/m/qwen"}
    assert r.unresolved_vars == ["HOME", "$(hostname)"]
    assert [(a.text, a.value) for a in r.assumed] == [("${NOPE:-/f}", "/f")]


def test_other_commands_loops_second_commands_and_heredocs():
    r = import_script(
        "python3 examples/data_preprocess/gsm8k.py --local_save_dir ~/data/gsm8k\n"  # 1
        "cat > notes.txt <<EOF\n"  # 2
        "python3 -m verl.trainer.main_ppo not.this=1\n"  # 3: heredoc text, not a command
        "EOF\n"  # 4
        "for lr in 1e-6 5e-7; do\n"  # 5
        "  nohup python3 -m verl.trainer.main_ppo actor.lr=$lr > run_$lr.log 2>&1 &\n"  # 6
        "done\n"  # 7
        "python3 -m verl.trainer.main_ppo a.b=2\n"  # 8
        "export WANDB_API_KEY\n"
    )  # 9
    # The loop's values are known: read pass by pass, as bash runs it; the first run is the
    # profile, the second pass and line 8 are further runs.
    assert r.command_line == 6
    assert r.profile.overrides == {"actor.lr": 1e-6}
    assert [u.line for u in r.unmapped] == [1, 2, 5, 6, 6, 6, 6, 6, 6, 8, 9]
    reasons = [u.reason for u in r.unmapped]
    assert reasons[0].startswith("another python command")
    assert reasons[1].startswith("other command") and r.unmapped[1].text == "cat > notes.txt <<EOF"
    assert reasons[2].startswith("loop over 2 value(s): read pass by pass")
    assert any("pass 1 of 2 of the for loop at line 5 (lr=1e-6)" in x for x in reasons)
    assert reasons[-3].startswith("a second verl command: only the first (line 6)")
    assert reasons[-2].startswith("a second verl command: only the first (line 6)")
    assert "environment" in reasons[-1]
    assert r.unresolved_vars == ["WANDB_API_KEY"]


def test_bash_c_inside_ray_job_submit_and_pipes():
    r = import_script(
        'ray job submit --working-dir . --runtime-env-json=\'{"pip": ["x"]}\' -- '
        'bash -c "cd /w && export PYTHONPATH=/w; python3 -m verl.trainer.main_ppo a.b=1" '
        "|& tee log\n"
    )
    assert r.command_line == 1
    assert r.profile.overrides == {"a.b": 1}
    assert r.profile.runtime_env.env_vars == {"PYTHONPATH": "/w"}
    assert r.profile.runtime_env.working_dir == "."
    texts = [u.text for u in r.unmapped]
    assert texts == ['pip: ["x"]', "bash -c", "cd /w", "|& tee log"]


def test_no_verl_command():
    r = import_script("#!/bin/bash\necho hello\n", source="x.sh")
    assert r.command_line is None
    assert r.unmapped == [Unmapped(2, "echo hello", "prints only")]


# --- the CLI halves ------------------------------------------------------------------------------


def test_run_import_writes_profile_and_reports(tmp_path, capsys):
    out = tmp_path / "profiles" / "logged.yaml"
    script = SCRIPTS / "run_deepseek7b_ppo_logged.sh"
    assert run_import(script, out) == 0
    report = capsys.readouterr().out
    assert f"{script}:18: verl command imported as profile 'run_deepseek7b_ppo_logged'" in report
    assert f"{script}:42: | tee $LOG_DIR/${{EXP_NAME}}.log — output piped" in report
    assert f"{script}:4: set -x — shell option" in report
    assert "  TIMESTAMP — set at line 13 to $(date +%s)" in report
    loaded = load_profile(out)
    assert typed(loaded.model_dump()) == typed(imported(script.name).profile.model_dump())
    assert [p.name for p in out.parent.iterdir()] == ["logged.yaml"]  # no temp file left


def test_run_import_exit_codes(tmp_path, capsys):
    out = tmp_path / "p.yaml"
    assert run_import(tmp_path / "missing.sh", out) == 2
    assert run_import(tmp_path, out) == 2
    binary = tmp_path / "bin.sh"
    binary.write_bytes(b"\xff\xfe\x00python3")
    assert run_import(binary, out) == 2
    plain = tmp_path / "plain.sh"
    plain.write_text("echo hi\n")
    assert run_import(plain, out) == 1
    assert not out.exists()
    err = capsys.readouterr().err
    assert f"{tmp_path / 'missing.sh'}: file not found" in err
    assert "no `python -m verl.trainer.main_ppo` command found" in err


def test_run_export_kinds_and_errors(tmp_path, capsys):
    prof = tmp_path / "p.yaml"
    assert run_import(SCRIPTS / "submit_dapo_2nodes.sh", prof) == 0
    capsys.readouterr()
    assert run_export(prof, "ray-job", None, nodes=1, gpus_per_node=8) == 0
    assert capsys.readouterr().out.startswith("#!/usr/bin/env bash\n")
    for kind in ("ray-job", "sbatch", "dstack"):
        dest = tmp_path / f"out.{kind}"
        assert run_export(prof, kind, dest, nodes=2, gpus_per_node=8) == 0
        assert dest.read_text().strip()
        assert bool(dest.stat().st_mode & 0o100) == (kind != "dstack")
    assert run_export(prof, "kubernetes", None, nodes=1, gpus_per_node=1) == 2
    assert run_export(prof, "sbatch", None, nodes=0, gpus_per_node=1) == 2
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\noverrides:\n  'bad key': 1\n")
    assert run_export(bad, "ray-job", None, nodes=1, gpus_per_node=1) == 2
    assert f"{bad}:3:" in capsys.readouterr().err


def test_report_without_output_names_the_problem():
    r = import_script("echo x\n", source="s.sh")
    text = format_report(r, Path("s.sh"), None)
    assert text.splitlines() == [
        "s.sh: no `python -m verl.trainer.main_ppo` command found (nor another verl entry point)",
        "not imported (1):",
        "  s.sh:1: echo x — prints only",
    ]


# --- export: round trips and shapes -----------------------------------------------------------


@pytest.mark.parametrize("name", sorted(p.name for p in SCRIPTS.glob("*.sh")))
def test_round_trip_through_ray_job_script(name, tmp_path):
    first = imported(name).profile
    script = tmp_path / "submit.sh"
    script.write_text(to_ray_job_submit(first))
    subprocess.run(["bash", "-n", str(script)], check=True)
    again = import_script(script.read_text(), source=str(script))
    assert again.command_line is not None
    assert list(again.profile.overrides) == list(first.overrides)
    assert typed(again.profile.overrides) == typed(first.overrides)
    assert again.profile.runtime_env == first.runtime_env
    assert again.profile.python == first.python
    # Values kept as written (unresolved `$X`) are single-quoted text now: nothing to resolve.
    assert again.unresolved_vars == []
    assert [u.text for u in again.unmapped] == [
        "set -euo pipefail",
        "--address http://127.0.0.1:8265",
    ]


@pytest.mark.parametrize("name", sorted(p.name for p in SCRIPTS.glob("*.sh")))
def test_sbatch_and_dstack_parse(name, tmp_path):
    profile = imported(name).profile
    sb = tmp_path / "job.sbatch"
    sb.write_text(to_sbatch(profile, nodes=2, gpus_per_node=4, partition="gpu", time="04:00:00"))
    subprocess.run(["bash", "-n", str(sb)], check=True)
    text = sb.read_text()
    for line in (
        "#SBATCH --nodes=2",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --gres=gpu:4",
        "#SBATCH --cpus-per-task=16",
        "#SBATCH --partition=gpu",
        "#SBATCH --time=04:00:00",
    ):
        assert line in text.splitlines()
    assert 'srun --nodes=1 --ntasks=1 -w "$head_node" \\' in text
    assert '    trainer.nnodes="$SLURM_NNODES" \\' in text
    task = yaml.safe_load(to_dstack(profile, nodes=2, gpus_per_node=4))
    assert task["type"] == "task" and task["nodes"] == 2
    assert task["resources"]["gpu"] == 4
    assert task.get("env", []) == [f"{k}={v}" for k, v in profile.runtime_env.env_vars.items()]
    commands = tmp_path / "commands.sh"
    commands.write_text("\n".join(task["commands"]))
    subprocess.run(["bash", "-n", str(commands)], check=True)
    assert "DSTACK_MASTER_NODE_IP" in commands.read_text()


def test_exports_refuse_bad_slurm_names():
    p = Profile(name="x")
    with pytest.raises(ValueError, match="partition"):
        to_sbatch(p, nodes=1, gpus_per_node=1, partition="gpu\n#SBATCH --x")


# --- hostile values: the generated scripts run with stub binaries ---------------------------

HOSTILE = [
    "$(touch /tmp/pwned_x)",
    "`touch /tmp/pwned_x`",
    "; touch /tmp/pwned_x #",
    "line1\nline2 $(touch /tmp/pwned_x)",
    'it\'s "quoted" \\ ${HOME} $HOME !x * ~',
    "-rf --now",
]


def _hostile_profile(python: str | None) -> Profile:
    overrides: dict[str, Any] = {f"trainer.v{i}": v for i, v in enumerate(HOSTILE)}
    overrides["+trainer.list"] = ["$(touch /tmp/pwned_x)", "a b", "x'y"]
    overrides["~trainer.gone"] = None
    overrides["data.train_batch_size"] = 64
    return Profile(
        name="hostile",
        description="evil\n$(touch /tmp/pwned_x)\ncomment end",
        python=python,
        overrides=overrides,
        runtime_env=RuntimeEnv(
            env_vars={"EVIL": "$(touch /tmp/pwned_x)`id`;'\"", "PLAIN": "1"},
            working_dir="/tmp/wd $(touch /tmp/pwned_x)",
            excludes=["*.log", "$(touch /tmp/pwned_x)"],
        ),
    )


STUB_HEAD = f"""#!{sys.executable}
import json, os, shlex, subprocess, sys
def log(entry):
    with open(os.environ["STUB_LOG"], "a") as f:
        f.write(json.dumps(entry) + "\\n")
"""

STUBS = {
    # Ray 2.60's `ray job submit` re-joins the entrypoint with shlex.join and the head runs it
    # through a shell, with the runtime env's env_vars: do exactly that.
    "ray": STUB_HEAD
    + """
args = sys.argv[1:]
log({"prog": "ray", "argv": args})
if args[:1] == ["status"]:
    print(" 1 node_a\\n 1 node_b")
if args[:2] == ["job", "submit"]:
    cut = args.index("--")
    opts, entry = args[2:cut], args[cut + 1:]
    rt = {}
    for i, o in enumerate(opts):
        if o == "--runtime-env-json":
            rt = json.loads(opts[i + 1])
    env = {**os.environ, **rt.get("env_vars", {})}
    sys.exit(subprocess.run(shlex.join(entry), shell=True, env=env).returncode)
""",
    "python3": STUB_HEAD
    + """
log({"prog": "python3", "argv": sys.argv[1:], "env": {k: os.environ.get(k) for k in ("EVIL", "PLAIN")}})
""",
    "srun": STUB_HEAD
    + """
args = sys.argv[1:]
log({"prog": "srun", "argv": args})
i = 0
while args[i].startswith("-"):
    i += 2 if args[i] in ("-w", "-N", "-n") else 1
os.execvp(args[i], args[i:])
""",
    "scontrol": "#!/bin/sh\nprintf 'node1\\nnode2\\n'\n",
    "hostname": "#!/bin/sh\necho 10.0.0.1 fe80::1\n",
    "sleep": "#!/bin/sh\nexit 0\n",
}


@pytest.fixture
def stubs(tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name, body in STUBS.items():
        (bindir / name).write_text(body)
        (bindir / name).chmod(0o755)
    log = tmp_path / "calls.jsonl"
    env = {
        "PATH": f"{bindir}:/usr/bin:/bin",
        "STUB_LOG": str(log),
        "HOME": str(tmp_path),
        "SLURM_JOB_NODELIST": "node[1-2]",
        "SLURM_CPUS_PER_TASK": "32",
        "SLURM_GPUS_PER_NODE": "8",
        "SLURM_NNODES": "2",
        "SLURM_JOB_NUM_NODES": "2",
        "DSTACK_NODE_RANK": "0",
        "DSTACK_MASTER_NODE_IP": "10.0.0.1",
        "DSTACK_NODES_NUM": "2",
        "DSTACK_GPUS_PER_NODE": "8",
    }
    PWNED.unlink(missing_ok=True)
    yield bindir, log, env
    PWNED.unlink(missing_ok=True)


def _calls(log: Path, prog: str) -> list[dict]:
    return [c for c in map(json.loads, log.read_text().splitlines()) if c["prog"] == prog]


def _received(argv: list[str]) -> dict[str, Any]:
    """What verl would read from its argv: key → Hydra's value."""
    assert argv[:2] == ["-m", "verl.trainer.main_ppo"]
    out = {}
    for word in argv[2:]:
        key, eq, value = word.partition("=")
        out[key] = read_hydra_value(value) if eq else None
    return out


def _python_dir(tmp_path: Path) -> str:
    # An interpreter path that is itself hostile (directories may hold `$(`, spaces, `;`).
    d = tmp_path / "py $(touch /tmp/pwned_x); x"
    d.mkdir(parents=True)
    (d / "python3").write_text(STUBS["python3"])
    (d / "python3").chmod(0o755)
    return str(d / "python3")


@pytest.mark.parametrize("kind", ["ray-job", "sbatch", "dstack"])
def test_hostile_values_stay_text(kind, stubs, tmp_path):
    _, log, env = stubs
    python = _python_dir(tmp_path)
    profile = _hostile_profile(python)
    address = "http://127.0.0.1:8265/$(touch /tmp/pwned_x)"
    if kind == "ray-job":
        text = to_ray_job_submit(profile, address=address)
    elif kind == "sbatch":
        text = to_sbatch(profile, nodes=2, gpus_per_node=8)
    else:
        task = yaml.safe_load(to_dstack(profile, nodes=2, gpus_per_node=8))
        for item in task["env"]:  # dstack's env: list of NAME=VALUE
            k, _, v = item.partition("=")
            env[k] = v
        text = "\n".join(task["commands"])
    script = tmp_path / "run.sh"
    script.write_text(text)
    subprocess.run(["bash", "-n", str(script)], check=True)
    done = subprocess.run(
        ["bash", str(script)], env=env, capture_output=True, text=True, timeout=20
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert not PWNED.exists()

    submits = [c["argv"] for c in _calls(log, "ray") if c["argv"][:2] == ["job", "submit"]]
    assert len(submits) == 1
    argv = submits[0]
    cut = argv.index("--")
    assert argv[cut + 1] == python  # the interpreter path, literally
    opts = argv[2:cut]
    if kind == "ray-job":
        assert opts[opts.index("--address") + 1] == address
    rt = json.loads(opts[opts.index("--runtime-env-json") + 1])
    assert rt["working_dir"] == "/tmp/wd $(touch /tmp/pwned_x)"
    assert rt["excludes"] == ["*.log", "$(touch /tmp/pwned_x)"]
    if kind != "dstack":
        assert rt["env_vars"] == profile.runtime_env.env_vars

    (ran,) = _calls(log, "python3")
    assert ran["env"] == {"EVIL": "$(touch /tmp/pwned_x)`id`;'\"", "PLAIN": "1"}
    received = _received(ran["argv"])
    expected = dict(profile.overrides)
    if kind == "sbatch":
        expected |= {"trainer.nnodes": 2, "trainer.n_gpus_per_node": 8}
    if kind == "dstack":
        expected |= {"trainer.nnodes": 2, "trainer.n_gpus_per_node": 8}
    assert typed(received) == typed(expected)
    if kind == "sbatch":
        heads = [c["argv"] for c in _calls(log, "srun") if "--head" in c["argv"]]
        assert heads and "--node-ip-address=10.0.0.1" in heads[0]


def test_hostile_description_stays_a_comment():
    text = to_ray_job_submit(_hostile_profile(None))
    comments = [line for line in text.splitlines() if "evil" in line]
    assert comments == ["# evil $(touch /tmp/pwned_x) comment end"]
