"""What a new user meets in the first hour, through real parts (issue 24):

- the job preflight follows the code path each way around a missing module takes, read from the
  real verl 0.9.1 source: `trainer.use_v1=false` reaches cachetools (verl/workers/rollout/
  router.py), checked on a namespace sshd host whose interpreter is this venv's Python with a
  site-packages lacking cachetools (built as tests/test_no_verl.py builds one); the same
  interpreter importing verl's legacy TaskRunner really dies on the module the preflight names;
- a failing Hydra run's hint says the cause follows, and the exception line that ends the
  traceback carries it (a real Hydra app, through `verl-tui explain`);
- `-V`, `version`, `help`; one level of shell quoting that a real shell reads back; the doctor's
  failures first; GLOO_SOCKET_IFNAME not suggested when it is set; dist/ ignored; the wheel's
  SPDX license with no setuptools warning.
"""

from __future__ import annotations

import json
import site
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from harness.cli import run_cli

from tui.cluster.doctor.findings import CHECKS, Finding
from tui.cluster.doctor.runner import arrange
from tui.config.hosts import Inventory, load_inventory
from tui.jobs.preflight import needs_for_profile, run_preflight
from tui.jobs.profiles import load_profile
from tui.shellcmd import copy_line
from tui.transport.fleet import Fleet

REPO = Path(__file__).resolve().parent.parent
PRESET = REPO / "profiles" / "grpo-gsm8k-qwen2.5-0.5b.yaml"


def cli(*args: str, timeout: float = 120, **kw) -> subprocess.CompletedProcess[str]:
    return run_cli(args, timeout=timeout, cwd=REPO, **kw)


# ---- item 5: the way around a missing module is checked on its own path ----------------------


@pytest.fixture(scope="module")
def without_cachetools(tmp_path_factory) -> Path:
    """An interpreter: this venv's Python on a site-packages of symlinks to every package of
    the venv except cachetools (whatever the venv has), nothing else on its path."""
    root = tmp_path_factory.mktemp("nocachetools")
    src = Path(site.getsitepackages()[0])
    dst = root / "site-packages"
    dst.mkdir()
    for entry in src.iterdir():
        if entry.name.split("-")[0].split(".")[0].lower() != "cachetools":
            (dst / entry.name).symlink_to(entry)
    python = root / "python-without-cachetools"
    python.write_text(f'#!/bin/sh\nPYTHONPATH={dst} exec {sys.executable} -S "$@"\n')
    python.chmod(0o755)
    probe = subprocess.run(
        [str(python), "-c", "import importlib.util as u; print(u.find_spec('cachetools'))"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert probe.stdout.strip() == "None", probe.stdout + probe.stderr
    return python


def _inventory(cluster, path: Path, python: Path) -> Inventory:
    cluster.write_hosts_yaml(path, python=str(python), names=["node1"])
    return load_inventory(path)


async def test_the_legacy_path_is_checked_for_cachetools_and_the_real_import_agrees(
    ns_cluster3, tmp_path: Path, without_cachetools: Path
) -> None:
    inv = _inventory(ns_cluster3, tmp_path / "hosts.yaml", without_cachetools)
    found, needs = needs_for_profile(inv, load_profile(PRESET), ["trainer.use_v1=false"])
    assert needs is not None, found
    async with Fleet(inv) as fleet:
        findings = await run_preflight(fleet, inv, needs, timeout=60)
    missing = {f.check.removeprefix("import:") for f in findings if f.status == "fail"}
    assert "cachetools" in missing and "transfer_queue" not in missing, missing
    row = next(f for f in findings if f.check == "import:cachetools")
    assert "verl/workers/rollout/router.py imports it" in row.finding
    assert "main_ppo_v0.TaskRunner (trainer.use_v1=false)" in row.finding
    # its pip name from verl's own metadata, read on the host
    assert row.fix.endswith("-m pip install cachetools (verl's verl-core extra)"), row.fix

    # The same interpreter, importing what verl's legacy TaskRunner imports, dies on a module
    # the preflight named (not on one it missed).
    real = subprocess.run(
        [str(without_cachetools), "-c", "import verl.trainer.main_ppo_v0"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert real.returncode != 0
    last = real.stderr.strip().splitlines()[-1]
    assert last.startswith("ModuleNotFoundError: No module named "), real.stderr[-2000:]
    assert last.split("'")[1].split(".")[0] in missing, (last, missing)


async def test_the_default_path_offers_the_legacy_runner_with_what_it_needs_too(
    ns_cluster3, tmp_path: Path, without_cachetools: Path
) -> None:
    """transfer_queue missing (it is, in this venv): its fix offers trainer.use_v1=false only
    together with cachetools, which that path imports and this interpreter lacks."""
    inv = _inventory(ns_cluster3, tmp_path / "hosts.yaml", without_cachetools)
    found, needs = needs_for_profile(inv, load_profile(PRESET), [])
    assert needs is not None, found
    async with Fleet(inv) as fleet:
        findings = await run_preflight(fleet, inv, needs, timeout=60)
    tq = next(f for f in findings if f.check == "import:transfer_queue")
    assert tq.status == "fail"
    way = tq.fix.split(", or trainer.use_v1=false (verl's legacy TaskRunner), which needs ")[1]
    assert "cachetools" in way.split(" too: ")[0] and "pip install cachetools" in way, tq.fix


# ---- item 6: Hydra's summary, then the traceback -------------------------------------------

HYDRA_APP = """
import hydra

@hydra.main(config_path=None, config_name=None, version_base=None)
def main(cfg):
    import cachetools_not_installed_here  # noqa

main()
"""


def test_the_hydra_hint_points_down_to_the_exception_that_ends_the_traceback(
    tmp_path: Path,
) -> None:
    app = tmp_path / "app.py"
    app.write_text(HYDRA_APP)
    run = subprocess.run(
        [sys.executable, str(app), "+x=1"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,  # Hydra writes outputs/DATE/TIME/ under its working folder
    )
    assert run.returncode == 1 and "Error executing job with overrides" in run.stderr
    log = tmp_path / "driver.log"
    log.write_text(run.stderr)
    out = cli("explain", str(log)).stdout
    hints = {
        ln.split("hint (", 1)[1].split(")", 1)[0]: ln for ln in out.splitlines() if "hint (" in ln
    }
    assert "the traceback that follows this line" in hints["hydra_failed"]
    assert "just above" not in out
    # the exception line gets the missing-module hint, which names it (and its pip name)
    cause = hints.get("import_missing") or hints["hydra_cause"]
    assert "cachetools_not_installed_here" in cause, out


# ---- item 12: the small things -------------------------------------------------------------


def test_version_and_help_words() -> None:
    from tui import __version__

    for words in (["-V"], ["--version"], ["version"]):
        res = cli(*words)
        assert res.returncode == 0 and res.stdout == f"verl-tui {__version__}\n", words
    top = cli("help")
    assert top.returncode == 0 and "commands (verl-tui COMMAND --help" in top.stdout
    sub = cli("help", "submit")
    assert sub.returncode == 0 and sub.stdout == cli("submit", "--help").stdout
    nope = cli("help", "nope")
    assert nope.returncode == 2 and nope.stderr.count("\n") == 1 and "nope" in nope.stderr


def test_a_quoted_override_is_quoted_one_level_and_a_shell_reads_it_back() -> None:
    argv = ["python3", "-m", "verl.trainer.main_ppo", "algorithm.adv_estimator='grpo'"]
    argv += ["data.files=['/a b','c']", "x=$HOME's", "plain"]
    script = "cd '/w d' && exec python3 -m verl.trainer.main_ppo \"$@\" `id` 'a\\b\n'"
    argv += ["sh", "-c", script, "--", "it's!", '"\'"', "'"]
    line = copy_line(argv)
    assert "'\"'\"'" not in line.split("it")[0]  # no nested quoting before the `!` word
    assert "\"algorithm.adv_estimator='grpo'\"" in line
    assert '"x=\\$HOME\'s"' in line and '\\"\\$@\\"' in line
    echoed = subprocess.run(
        ["bash", "-c", f"for a in {line}; do printf '%s\\0' \"$a\"; done"],
        capture_output=True,
        timeout=30,
        check=True,
    )
    assert echoed.stdout.decode().split("\0")[:-1] == argv


def test_the_doctor_lists_failures_first() -> None:
    def f(check: str, status: str, host: str) -> Finding:
        return Finding(check, CHECKS[check], status, host, f"{check} {status}", "fix")  # type: ignore[arg-type]

    out = arrange(
        [f("ssh-reach", "ok", "h1"), f("memory", "warn", "h1"), f("debugpy", "fail", "h1")],
        ["h1"],
    )
    assert [x.status for x in out] == ["fail", "warn", "ok"]


def test_a_set_gloo_socket_ifname_is_not_suggested_again(tmp_path: Path) -> None:
    """The host's answer from the real remote program (run here), its hostname made
    unresolvable only in what it reports: the finding follows GLOO_SOCKET_IFNAME."""
    from tui.jobs.preflight import JobNeeds, evaluate_answers
    from tui.remote import python_argv

    inv = load_inventory(_local_hosts(tmp_path))
    for env, status in (({}, "warn"), ({"GLOO_SOCKET_IFNAME": "eth0"}, "ok")):
        req = {"env": env, "resolve": ["no-such-host.invalid"]}
        res = subprocess.run(
            python_argv(sys.executable, "job_preflight"),
            input=json.dumps(req),
            capture_output=True,
            text=True,
            timeout=60,
        )
        answer = json.loads(res.stdout.splitlines()[-1])
        answer["hostname"] = "no-such-host.invalid"
        rows = [
            r
            for r in evaluate_answers(inv, JobNeeds(env=env), {"localhost": answer})
            if r.check == "hostname"
        ]
        assert [r.status for r in rows] == [status], rows
        assert ("GLOO_SOCKET_IFNAME" in rows[0].fix) == (status == "warn"), rows


def _local_hosts(tmp_path: Path) -> Path:
    path = tmp_path / "local.yaml"
    path.write_text(yaml.safe_dump({"hosts": [{"name": "localhost", "transport": "local"}]}))
    return path


def test_dist_is_ignored_and_the_wheel_has_the_spdx_license(tmp_path: Path) -> None:
    ignored = subprocess.run(
        ["git", "check-ignore", "-q", "dist/verl_tui-0.1.0.tar.gz"], cwd=REPO, timeout=30
    )
    assert ignored.returncode == 0
    pip = [sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "--no-build-isolation"]
    build = subprocess.run(
        [*pip, "-w", str(tmp_path), str(REPO)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert build.returncode == 0, build.stdout[-2000:] + build.stderr[-2000:]
    said = build.stdout + build.stderr  # -v: the build backend's own output included
    assert "SetuptoolsDeprecationWarning" not in said and "TOML table" not in said, said[-3000:]
    import zipfile

    (wheel,) = tmp_path.glob("verl_tui-*.whl")
    with zipfile.ZipFile(wheel) as z:
        meta = z.read(next(n for n in z.namelist() if n.endswith("METADATA"))).decode()
        assert any(n.endswith("licenses/LICENSE") for n in z.namelist())
    assert "License-Expression: Apache-2.0" in meta


def test_resource_refusals_name_the_hosts_yaml_keys_that_fix_them() -> None:
    """The validator's (and the queue's blocked reason's) refusals: which hosts.yaml key, on
    which host, and that Ray must restart to count it."""
    from tui.jobs.queue import Needs
    from tui.jobs.rules_base import ClusterResources, NodeResources

    few_cpus = ClusterResources([NodeResources("node1", 4, 12), NodeResources("node2", 4, 2)])
    (p,) = Needs(2, 4).problems(few_cpus)
    assert "short: node2 (2 CPUs)" in p.message
    assert "fix: hosts.yaml ray: num_cpus: 12 (or more)" in p.message
    assert "ctrl+r reloads hosts.yaml, R restarts Ray" in p.message
    few_gpus = ClusterResources([NodeResources("node1", 1.0, 12), NodeResources("node2", 1.0, 12)])
    (p,) = Needs(1, 4).problems(few_gpus)
    assert "hosts.yaml num_gpus: under node1, node2" in p.message, p.message
    assert "lower trainer.nnodes / trainer.n_gpus_per_node" in p.message


def test_a_missing_modules_pip_name_comes_from_the_hosts_metadata(without_cachetools) -> None:
    """Two real interpreters answer the preflight's module question: this venv's (it has yaml,
    installed from PyYAML) and one without cachetools. yaml missing somewhere is named by the
    distribution the other host installed it from; cachetools by verl's own Requires-Dist;
    a module nobody knows by its top-level name."""
    from tui.jobs.pip_names import PipNames
    from tui.remote import python_argv

    def ask(python: str) -> dict:
        req = {"modules": ["yaml", "cachetools", "vt_nowhere_mod"]}
        res = subprocess.run(
            python_argv(python, "job_preflight"),
            input=json.dumps(req),
            capture_output=True,
            text=True,
            timeout=120,
        )
        return json.loads(res.stdout.splitlines()[-1])

    here, bare = ask(sys.executable), ask(str(without_cachetools))
    assert here["modules"]["yaml"]["dists"] == ["PyYAML"]
    assert not bare["modules"]["cachetools"]["found"]
    names = PipNames([bare, here])
    assert names.requirement("yaml").text == "PyYAML" and names.requirement("yaml").source == (
        "installed"
    )
    cachetools = names.requirement("cachetools")
    assert (cachetools.name, cachetools.extra, cachetools.source) == (
        "cachetools",
        "verl-core",
        "verl",
    )
    assert names.fix("/x/python", "vt_nowhere_mod") == "/x/python -m pip install vt_nowhere_mod"


def test_ray_start_failures_say_what_they_mean_and_where_to_look() -> None:
    """`ray start` on a loaded host (a 2-core box running three Ray nodes): the raylet gave up
    on its dashboard agent and Ray printed only an RPC deadline. The line says what it means
    and which log says why; an error Ray words well stays as it is."""
    from tui.cluster.ray_plan import start_failure

    out = (
        "Local node IP: 10.201.21.12\n"
        "2026-11-28 06:15:24,011\tERROR services.py:1 -- "
        "Failed to get node info b'RPC error: Deadline Exceeded'\n"
    )
    line = start_failure(out)
    assert line.startswith("Failed to get node info b'RPC error: Deadline Exceeded' (")
    assert "a loaded host" in line and "raylet.out" in line and "l on its row" in line
    plain = "ValueError: --port 6379 is already in use"
    assert start_failure(plain) == plain
