"""Secrets (issue 10, item 8): secret env values reach the job on a real namespace Ray cluster,
but not the dry-run output, the --json output or the history file; a resubmit takes them from
the environment, or fails with one line naming the variable."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
from pathlib import Path

import pytest
from harness.cli import run_cli
from harness.raycluster import VENV_PY, wait_job

from tui.jobs.secrets import is_secret_name, masked

SECRET = "s3cr3t"
HUSH = "hush-hush-42"
PRINT_HASH = (
    "import hashlib, os\n"
    "for k in ('WANDB_API_KEY', 'MY_PRIVATE_THING'):\n"
    "    v = os.environ.get(k, '')\n"
    "    print(k, 'LEN', len(v), 'SHA', hashlib.sha256(v.encode()).hexdigest())\n"
)


def test_secret_names():
    for name in (
        "WANDB_API_KEY",
        "HF_TOKEN",
        "AWS_SECRET_ACCESS_KEY",
        "DB_PASSWORD",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "wandbApiKey",
        "OPENAI_APIKEY",
        "KEY",
        "my-token",
        "SSH_KEYS",
    ):
        assert is_secret_name(name), name
    for name in (
        "TOKENIZERS_PARALLELISM",
        "KEYBOARD",
        "MONKEY_PATCH",
        "PYTHONPATH",
        "RAY_DEBUG",
        "HF_HOME",
        "NCCL_IB_HCA",
    ):
        assert not is_secret_name(name), name
    assert is_secret_name("MY_PRIVATE_THING", ["MY_PRIVATE_THING"])
    assert masked({"HF_TOKEN": "x", "A": "1"}) == {"HF_TOKEN": "***", "A": "1"}


@pytest.fixture(scope="module")
def ray_one(ray_shared1):
    cluster, path, env = ray_shared1
    # hosts.yaml's own extra secret name (top level, validated with the rest).
    path.write_text("secret_env: [MY_PRIVATE_THING]\n" + path.read_text())
    env = {k: v for k, v in env.items() if k not in ("WANDB_API_KEY", "MY_PRIVATE_THING")}
    return cluster, path, env


def cli(env, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return run_cli([*args], env=env, timeout=timeout)


def finished_log(env, path, sid: str, timeout: float = 90) -> str:
    job = wait_job(env, path, sid, {"SUCCEEDED", "FAILED", "STOPPED"}, timeout)
    assert job["status"] == "SUCCEEDED", job
    return cli(env, "logs", str(path), sid).stdout


def _sha(v: str) -> str:
    return hashlib.sha256(v.encode()).hexdigest()


def test_secret_reaches_the_job_only(ray_one, tmp_path):
    _cluster, path, env = ray_one
    args = [
        "submit",
        str(path),
        "--env",
        f"WANDB_API_KEY={SECRET}",
        "--env",
        f"MY_PRIVATE_THING={HUSH}",
        "--env",
        "TOKENIZERS_PARALLELISM=false",
    ]
    dry = cli(env, *args, "--submission-id", "sec-1", "--dry-run", "--", VENV_PY, "-c", PRINT_HASH)
    assert dry.returncode == 0, dry.stderr
    assert SECRET not in dry.stdout + dry.stderr and HUSH not in dry.stdout + dry.stderr
    assert "***" in dry.stdout and "TOKENIZERS_PARALLELISM" in dry.stdout
    assert "false" in dry.stdout  # not a secret: shown as is
    assert dry.stdout.startswith("# secret values shown as ***: WANDB_API_KEY, MY_PRIVATE_THING")

    sub = cli(env, *args, "--submission-id", "sec-1", "--json", "--", VENV_PY, "-c", PRINT_HASH)
    assert sub.returncode == 0, sub.stderr
    assert SECRET not in sub.stdout and HUSH not in sub.stdout
    log = finished_log(env, path, "sec-1")
    assert f"WANDB_API_KEY LEN {len(SECRET)} SHA {_sha(SECRET)}" in log
    assert f"MY_PRIVATE_THING LEN {len(HUSH)} SHA {_sha(HUSH)}" in log

    # The history file on disk: references, no values.
    state = env["XDG_STATE_HOME"]
    files = subprocess.run(
        ["grep", "-rl", "-e", SECRET, "-e", HUSH, state], capture_output=True, text=True
    )
    assert files.stdout == "", files.stdout
    rec_path = next(Path(state).rglob("history/*/sec-1.json"))
    rec = json.loads(rec_path.read_text())
    env_vars = rec["runtime_env"]["env_vars"]
    assert env_vars["WANDB_API_KEY"] == {"name": "WANDB_API_KEY", "from": "env"}
    assert env_vars["MY_PRIVATE_THING"] == {"name": "MY_PRIVATE_THING", "from": "env"}
    assert env_vars["TOKENIZERS_PARALLELISM"] == "false"

    # Resubmit without the variables here: one line naming one, exit 2, nothing submitted.
    miss = cli(env, "submit", str(path), "--resubmit", "sec-1", "--submission-id", "sec-2")
    assert miss.returncode == 2, miss.stdout + miss.stderr
    lines = miss.stderr.strip().splitlines()
    assert len(lines) == 1 and "$WANDB_API_KEY" in lines[0] and "not set" in lines[0], lines
    # With them in the environment: the same job again, the values from here.
    have = {**env, "WANDB_API_KEY": SECRET, "MY_PRIVATE_THING": HUSH}
    again = cli(
        have, "submit", str(path), "--resubmit", "sec-1", "--submission-id", "sec-2", "--json"
    )
    assert again.returncode == 0, again.stderr
    assert SECRET not in again.stdout
    log2 = finished_log(env, path, "sec-2")
    assert f"WANDB_API_KEY LEN {len(SECRET)} SHA {_sha(SECRET)}" in log2
    files = subprocess.run(
        ["grep", "-rl", "-e", SECRET, "-e", HUSH, state], capture_output=True, text=True
    )
    assert files.stdout == ""
    # --env NAME: the value from here, never on the command line.
    dry2 = cli(have, "submit", str(path), "--env", "WANDB_API_KEY", "--dry-run", "--", "true")
    assert dry2.returncode == 0 and SECRET not in dry2.stdout and "***" in dry2.stdout
    unset = cli(env, "submit", str(path), "--env", "WANDB_API_KEY", "--dry-run", "--", "true")
    assert unset.returncode == 2 and "$WANDB_API_KEY is not set" in unset.stderr


def test_secret_env_is_validated(tmp_path):
    bad = tmp_path / "hosts.yaml"
    bad.write_text(
        "cluster: c\nsecret_env: [OK_NAME, 'not a name']\nhosts:\n"
        "  - name: a\n    address: 10.0.0.1\n"
    )
    res = cli({}, "submit", str(bad), "--dry-run", "--", "true")
    assert res.returncode == 2
    assert re.search(
        r"hosts\.yaml:\d+: .*secret_env.*not an environment variable name", res.stderr
    ), res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


async def test_form_asks_for_a_missing_secret(tmp_path, monkeypatch):
    from pathlib import Path

    from textual.widgets import Input, Static

    from tui.app import VerlTuiApp
    from tui.config.hosts import local_inventory
    from tui.screens.job_form.screen import JobFormScreen

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.delenv("VERLTUI_TEST_API_KEY", raising=False)
    monkeypatch.setenv("VERLTUI_SET_TOKEN", "from-env")
    preset = Path(__file__).parents[1] / "profiles" / "grpo-gsm8k-qwen2.5-0.5b.yaml"
    app = VerlTuiApp(local_inventory(), interval=0.5)
    async with app.run_test(size=(160, 50)) as pilot:
        form = JobFormScreen(
            app.services,
            preset,
            secret_refs=[
                {"name": "VERLTUI_TEST_API_KEY", "from": "env"},
                {"name": "VERLTUI_SET_TOKEN", "from": "env"},
            ],
        )
        await app.push_screen(form)
        while not (form.fields and form.validated):
            await pilot.pause(0.05)
        labels = [str(s.render()) for s in form.query(".secret-label").results(Static)]
        assert "secret: from $VERLTUI_TEST_API_KEY — not set here" in labels
        assert "secret: from $VERLTUI_SET_TOKEN — set here" in labels
        assert form._secret_values() is None  # must be filled first
        field = form.query_one("#secret-VERLTUI_TEST_API_KEY", Input)
        assert field.password
        field.value = "typed-value"
        assert form._secret_values() == {
            "VERLTUI_TEST_API_KEY": "typed-value",
            "VERLTUI_SET_TOKEN": "from-env",
        }
