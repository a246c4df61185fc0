"""One submission pipeline (issue 11): the job form, `submit --dry-run --json` and `profile check
--json` build the same submission for the same profile and cluster (a real two-node Ray over
namespace hosts); Hydra values read and written in one place; the form says at once that Ray
is not running and checks against hosts.yaml's GPUs meanwhile."""

from __future__ import annotations

import asyncio
import json
import math
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import test_jobs
from hypothesis import given, settings
from hypothesis import strategies as st
from test_jobs import cli

from tui.jobs import hydra_values as hv

ray_up = test_jobs.ray_up  # the shared two-node cluster (ray_shared2: 4 GPUs, 12 CPUs each)

PRESET = Path(__file__).parents[1] / "profiles" / "grpo-gsm8k-qwen2.5-0.5b.yaml"


# -- Hydra values -------------------------------------------------------------------------------


def _hydra(text: str):
    return hv._parser().parse_override(f"k={text}").value()


@settings(max_examples=3000, deadline=None)
@given(st.text(alphabet="ab1_0./+-eEInfNaTrulx9", min_size=1, max_size=10))
def test_plain_texts_read_without_hydra_as_hydra_reads_them(text: str) -> None:
    quick = hv._fast(text)
    assert quick is not hv.NOT_A_VALUE  # this alphabet never needs the parser
    assert hv._same(quick, _hydra(text)), (text, quick, _hydra(text))


@settings(max_examples=1500, deadline=None)
@given(st.lists(st.text(alphabet="ab1_0./+-eEInfNaTrulx9", min_size=1, max_size=6), max_size=4))
def test_plain_lists_read_without_hydra_as_hydra_reads_them(items: list[str]) -> None:
    text = "[" + ",".join(items) + "]"
    assert hv._same(hv._fast(text), _hydra(text)), text


values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)
    | st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=12),
    lambda inner: st.lists(inner, max_size=3),
    max_leaves=6,
)


@settings(max_examples=400, deadline=None)
@given(values)
def test_format_then_parse_is_the_same_value(value) -> None:
    for text in (hv.format_value(value), hv.short_text(value)):
        back, problem = hv.parse_value(text)
        assert problem is None, (value, text, problem)
        assert hv._same(back, value), (value, text, back)


def test_not_a_value_is_public_and_never_a_plain_string() -> None:
    from tui.jobs.formstate import parse_text, texts_from_sets

    assert hv.read_value("a,b") is hv.NOT_A_VALUE  # a sweep
    assert hv.read_value("${x}") is hv.NOT_A_VALUE  # an interpolation
    assert hv.read_value("vllm") == "vllm" and hv.read_value("1e-6") == 1e-6
    assert math.isnan(hv.read_value("nan"))
    # The old sentinel was `type(read_hydra_value("a,b"))`: `str` without Hydra, so every
    # plain string was refused. Plain strings are values.
    assert parse_text("actor_rollout_ref.rollout.name", "vllm") == ("vllm", None)
    value, problem = parse_text("data.train_files", "a,b")
    assert value is None and "sweep" in problem
    assert texts_from_sets(["x.y='a b'", "x.z=a,b", "x.w=[a,1]"]) == {
        "x.y": "'a b'",
        "x.z": "a,b",
        "x.w": "[a,1]",
    }


def test_form_state_does_not_import_hydra() -> None:
    """Importing the form's modules (on the UI loop) does not import Hydra; plain values are
    read without it."""
    code = (
        "import sys; import tui.screens.job_form.screen; from tui.jobs.formstate import "
        "parse_text, texts_from_profile; from tui.jobs.profiles import load_profile; "
        f"texts_from_profile(load_profile({str(PRESET)!r})); "
        "parse_text('trainer.nnodes', '2'); parse_text('a.b', 'Qwen/Qwen2.5-0.5B'); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'hydra'))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).parents[1],
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


# -- the Jobs screen's rows ---------------------------------------------------------------------


def test_a_job_known_only_to_the_history_says_so() -> None:
    # (Worker failures are named by their own description: tests/test_error_report.py.)
    from tui.jobs.service import JobRow

    row = JobRow("j1", "RUNNING", "true", None, None, None, None, None, on_head=False)
    assert row.status == "RUNNING" and row.status_text == "RUNNING (history)"
    assert row.to_json()["status"] == "RUNNING" and row.to_json()["on_head"] is False


# -- Ray not running: the form says so at once --------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_form_says_ray_is_not_running_at_once_and_uses_hosts_yaml(tmp_path, monkeypatch):
    from tui.app import VerlTuiApp
    from tui.config.hosts import parse_inventory
    from tui.screens.job_form.screen import RAY_NOT_RUNNING, JobFormScreen

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    # Nothing listens on the dashboard port: the head answers, Ray does not.
    inv = parse_inventory(
        f"cluster: t\npython: {sys.executable}\n"
        f"ray: {{dashboard_port: {_free_port()}}}\n"
        "hosts:\n  - name: here\n    transport: local\n    num_gpus: 4\n"
    )
    app = VerlTuiApp(inv, interval=0.5)
    async with app.run_test(size=(160, 50)) as pilot:
        loop = asyncio.get_running_loop()
        form = JobFormScreen(app.services, PRESET)
        t0 = loop.time()
        await app.push_screen(form)
        while RAY_NOT_RUNNING not in (form.cluster_note or ""):
            assert loop.time() - t0 < 3, f"still: {form.cluster_note}"
            await pilot.pause(0.02)
        said = loop.time() - t0
        assert "hosts.yaml's GPUs" in form.cluster_note
        while not (form.validated and form.fields):
            assert loop.time() - t0 < 60, "form not checked"
            await pilot.pause(0.05)
        print(f"\nform open → 'Ray is not running': {said * 1000:.0f} ms")
        assert form.resources_from == "hosts.yaml"
        assert form.report.from_cluster == {"trainer.n_gpus_per_node": 4}
        title = str(form.query_one("#form-title").render())
        assert "t: 1 node × 4 GPUs (hosts.yaml)" in title and RAY_NOT_RUNNING in title
        # The problems box is not an empty line when there are no loose problems.
        box = form.query_one("#form-problems")
        assert box.display == bool(str(box.render()).strip())
        # Submit refuses with the same words, not a timeout.
        await form._submit()
        await pilot.pause(0.1)
        assert any(RAY_NOT_RUNNING in str(n.message) for n in app._notifications)


# -- one pipeline: form, submit --dry-run --json, profile check --json --------------------------


def _comparable(doc: dict) -> dict:
    """A submission as shown, less what differs by design: its id (a fresh one per call) and
    the --json document's own insecure_host_keys field."""
    return {k: v for k, v in doc.items() if k not in ("submission_id", "insecure_host_keys")}


async def test_form_cli_and_check_build_identical_submissions(ray_up, tmp_path, monkeypatch):
    import yaml

    from tui.app import VerlTuiApp
    from tui.config.hosts import load_inventory
    from tui.jobs.pipeline import submission_json
    from tui.screens.job_form.screen import JobFormScreen

    _, hosts, env = ray_up
    doc = yaml.safe_load(PRESET.read_text())
    doc["name"] = "same-everywhere"
    doc["runtime_env"] = {"env_vars": {"WANDB_API_KEY": "s3cret-value", "PLAIN": "x y"}}
    profile = tmp_path / "same.yaml"
    profile.write_text(yaml.safe_dump(doc, sort_keys=False))

    dry = cli(
        env,
        "submit",
        str(hosts),
        str(profile),
        "--dry-run",
        "--skip-preflight",
        "--json",
        timeout=240,
    )
    assert dry.returncode == 0, dry.stderr
    from_submit = json.loads(dry.stdout)
    check = cli(env, "profile", "check", str(profile), "--hosts", str(hosts), "--json", timeout=240)
    assert check.returncode == 0, check.stdout + check.stderr
    from_check = json.loads(check.stdout)["submission"]

    monkeypatch.setenv("XDG_STATE_HOME", env["XDG_STATE_HOME"])
    inv = load_inventory(hosts)
    app = VerlTuiApp(inv, interval=0.5)
    async with app.run_test(size=(160, 50)) as pilot:
        form = JobFormScreen(app.services, profile)
        await app.push_screen(form)
        loop = asyncio.get_running_loop()
        start = loop.time()
        while not (form.validated and form.fields and form.resources_from == "ray"):
            assert loop.time() - start < 90, f"form not checked on the cluster: {form.cluster_note}"
            await pilot.pause(0.05)
        sub = await form.check()
        assert sub is not None, form.report.problems
        from_form = submission_json(sub)

    for name, got in (("profile check", from_check), ("the form", from_form)):
        assert _comparable(got) == _comparable(from_submit), name
    # What they agree on is the real thing: the cluster's sizes, the secret masked, the rest not.
    overrides = from_submit["overrides"]
    assert "trainer.n_gpus_per_node=4" in overrides and "trainer.nnodes=1" in overrides
    assert from_submit["runtime_env"]["env_vars"]["WANDB_API_KEY"] != "s3cret-value"
    assert from_submit["runtime_env"]["env_vars"]["PLAIN"] == "x y"
    assert from_submit["secrets"] == ["WANDB_API_KEY"]
    assert "s3cret-value" not in dry.stdout + check.stdout
    assert sub.env_vars["WANDB_API_KEY"] == "s3cret-value"  # the job itself gets the value


@pytest.fixture(autouse=True)
def _hydra_here():
    if not hv.hydra_available():
        pytest.fail("hydra-core is a dependency: it must be installed for these tests")
