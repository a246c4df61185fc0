"""hosts.yaml `env_setup:` on real namespace hosts whose shell start-up is hostile (BASH_ENV
prepends a venv without Ray, as a cluster's .bashrc does with conda base or `module load`).

The setup activates the right interpreter (a script that prepends this venv's bin dir, like
`conda activate`), `python:` is the bare name `python`, and the fake NVML is only found through
variables the setup exports. So: the probe shows the resolved interpreter, `gpus --once` sees the
GPUs (the agent ran after the setup; setup noise on stdout did not corrupt its lines), `up`
starts Ray whose raylets carry the setup's environment (a job's tasks on every node print it),
and a failing setup is one line naming the host and the setup's output, at once."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from fakenvml.fakenvml import FakeGpu, write_state
from harness.cli import run_cli
from test_jobs import wait_status
from test_ray_lifecycle import VENV_PY

from tui.cluster.probe import probe_all, resolve_python
from tui.config.hosts import load_inventory
from tui.transport.fleet import Fleet
from tui.transport.types import EnvSetupFailed

VENV_BIN = os.path.dirname(VENV_PY)


def cli(env, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return run_cli([*args], env=env, timeout=timeout)


def write_hosts(cluster, path: Path, *, setup: list[str], per_host: dict | None = None) -> Path:
    lines = [
        "cluster: envsetup",
        "python: python",  # bare: what env_setup puts first on PATH
        "env_setup:",
        *(f"  - {json.dumps(s)}" for s in setup),
        "ssh:",
        "  user: root",
        f"  identity_file: {cluster.client_key}",
        f"  known_hosts: {cluster.known_hosts}",
        "  config: ''",
        "  connect_timeout: 5",
        "ray:",
        "  memory: 1000000000",
        "  object_store_memory: 100000000",
        "  start_timeout: 60",
        "hosts:",
    ]
    for h in cluster.hosts:
        lines += [f"  - name: {h.name}", f"    address: {h.address}"]
        for key, value in (per_host or {}).get(h.name, {}).items():
            lines.append(f"    {key}: {json.dumps(value)}")
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def envhosts(ns_hosts, ray_bring_up, tmp_path_factory, fake_nvml_lib):
    """Two hosts with a hostile start-up file; a hosts.yaml whose env_setup fixes it; Ray up."""

    work = tmp_path_factory.mktemp("envsetup")
    bare = work / "bare"
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--without-pip", str(bare)], check=True)
    startup = work / "startup.sh"
    startup.write_text(f'export PATH="{bare}/bin:$PATH"\n')
    activate = work / "activate.sh"  # what `conda activate verl` amounts to
    activate.write_text(
        f'export PATH="{VENV_BIN}:$PATH"\nexport VERL_S4_MARK="activated-$(hostname)"\n'
    )
    for name in ("node1", "node2"):
        write_state(work / f"{name}.nvml", [FakeGpu(util=11), FakeGpu(util=22)])
    host_env = {n: {"BASH_ENV": str(startup)} for n in ("node1", "node2")}
    # ~/.bashrc runs it for every SSH command (as a cluster's conda base does); BASH_ENV for
    # the `bash -c` Ray starts workers with.
    cluster = ns_hosts(2, work / "hosts", host_env=host_env, bashrc=f". {startup}\n")
    setup = [
        f"source {activate}",
        "echo 'setup noise on stdout'; echo 'setup noise on stderr' >&2",
        f'export LD_LIBRARY_PATH={fake_nvml_lib} FAKE_NVML_STATE="{work}/$(hostname).nvml"',
    ]
    path = write_hosts(cluster, work / "hosts.yaml", setup=setup)
    env = {**os.environ, "XDG_STATE_HOME": str(work / "state")}
    try:
        t0 = time.monotonic()
        up = ray_bring_up(env, path)
        print(f"up with env_setup: {time.monotonic() - t0:.1f} s")
        yield cluster, path, env, work, up.stdout
    finally:
        cluster.stop()  # Ray goes with the hosts (test_zz_down_stops_ray_inside_the_setup: down)


def test_without_setup_the_start_up_python_wins(envhosts):
    """The pitfall: a bare `python` on these hosts is the start-up file's, without Ray."""
    cluster, _, _, _, _ = envhosts
    out = cluster.ssh("node1", "python -c 'import sys; print(sys.executable); import ray'")
    assert out.stdout.strip() != VENV_PY, out.stdout
    assert "No module named 'ray'" in out.stderr, out.stdout + out.stderr


def test_probe_table_shows_the_resolved_interpreter(envhosts):
    _, _, _, _, up_out = envhosts
    rows = [ln for ln in up_out.splitlines() if ln.startswith(("node1 ", "node2 "))][:2]
    assert [r.split()[0] for r in rows] == ["node1", "node2"], up_out
    for row in rows:
        assert row.rstrip().endswith(f"python → {VENV_PY}"), row


def test_resolve_python_after_setup(envhosts):
    _, path, _, _, _ = envhosts
    inv = load_inventory(path)

    async def go() -> tuple[str, dict]:
        async with Fleet(inv) as fleet:
            facts = await probe_all(fleet, inv)
            return await resolve_python(fleet, "node2"), facts

    resolved, facts = asyncio.run(go())
    assert resolved == VENV_PY
    assert facts["node1"].ok and facts["node1"].python_executable == VENV_PY
    assert facts["node1"].ray_version  # the setup's interpreter has Ray; the start-up one not
    assert facts["node1"].path_env.startswith(VENV_BIN + ":")


def test_gpus_once_runs_the_agent_after_setup(envhosts):
    _, path, env, _, _ = envhosts
    out = cli(env, "gpus", str(path), "--once", "--json", timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    doc = json.loads(out.stdout.splitlines()[-1])
    for host in doc["hosts"]:
        # FAKE_NVML_STATE comes from the setup only; its stdout noise is no bad agent line.
        assert host["state"] == "up", host
        assert host["problems"] == [], host
        assert [g["util_percent"] for g in host["gpus"]] == [11, 22], host


def test_raylets_and_job_carry_the_setup_environment(envhosts):
    """A job (bare `python` rewritten to the resolved interpreter) runs a task on every node:
    each raylet was started after the setup, so its workers see VERL_S4_MARK."""
    _, path, env, work, _ = envhosts
    prog = work / "where.py"
    prog.write_text(
        "import os, socket, sys, ray\n"
        "from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy as On\n"
        "ray.init()\n"
        "@ray.remote(num_cpus=0)\n"
        "def where():\n"
        "    return socket.gethostname(), os.environ.get('VERL_S4_MARK'), sys.executable\n"
        "print('DRIVER', sys.executable, os.environ.get('VERL_S4_MARK'))\n"
        "for n in ray.nodes():\n"
        "    if n['Alive']:\n"
        "        s = On(n['NodeID'], soft=False)\n"
        "        print('NODE', *ray.get(where.options(scheduling_strategy=s).remote()))\n"
    )
    sid = f"envsetup-{os.getpid()}"
    out = cli(env, "submit", str(path), "--submission-id", sid, "--", "python", str(prog))
    assert out.returncode == 0, out.stdout + out.stderr
    status = wait_status(env, path, sid, {"SUCCEEDED", "FAILED", "STOPPED"}, 120)["status"]
    log = cli(env, "logs", str(path), sid).stdout
    assert status == "SUCCEEDED", log
    assert f"DRIVER {VENV_PY} activated-node1" in log
    nodes = sorted(ln.split()[1:] for ln in log.splitlines() if ln.startswith("NODE "))
    assert nodes == [
        ["node1", "activated-node1", VENV_PY],
        ["node2", "activated-node2", VENV_PY],
    ], log


def test_failing_setup_is_one_line_per_host(envhosts):
    """`conda activate` where there is no conda, and a step that reads stdin: each host's error
    names the host, the step and its output; nothing hangs; a traceback never shows."""
    cluster, _, env, work, _ = envhosts
    bad = write_hosts(
        cluster,
        work / "bad.yaml",
        setup=["echo loading"],
        per_host={
            "node1": {"env_setup": ["echo activating verl", "conda activate nonexistent"]},
            "node2": {"env_setup": "read -r answer"},
        },
    )
    t0 = time.monotonic()
    out = cli(env, "gpus", str(bad), "--once", timeout=60)
    took = time.monotonic() - t0
    assert out.returncode == 1, out.stdout + out.stderr
    assert "Traceback" not in out.stdout + out.stderr
    heads = {ln.split()[0]: ln for ln in out.stdout.splitlines() if ln.startswith("node")}
    assert "node1: env_setup failed (exit 127) at `conda activate nonexistent`" in heads["node1"]
    assert "activating verl" in heads["node1"] and "conda: command not found" in heads["node1"]
    assert "node2: env_setup failed (exit 1) at `read -r answer`" in heads["node2"]
    assert took < 30, took
    print(heads["node1"], f"({took:.1f} s)", sep="\n")

    inv = load_inventory(bad)

    async def go() -> dict:
        async with Fleet(inv) as fleet:
            with pytest.raises(EnvSetupFailed, match="node2: env_setup failed"):
                await (await fleet.ready("node2", 10)).run(["true"], timeout=10)
            return await probe_all(fleet, inv)

    facts = asyncio.run(go())
    assert not facts["node1"].ok and facts["node1"].reached
    # The host stands beside its error in every table, so the error does not name it again.
    assert facts["node1"].error.startswith("env_setup failed (exit 127)")
    assert "\n" not in facts["node1"].error


def test_zz_down_stops_ray_inside_the_setup(envhosts):
    cluster, path, env, _, _ = envhosts
    out = cli(env, "down", str(path))
    assert out.returncode == 0, out.stdout + out.stderr
    for h in cluster.hosts:
        ps = cluster.exec_in(h.name, ["ps", "-eo", "comm="]).stdout.split()
        assert not [n for n in ps if n in ("raylet", "gcs_server")], (h.name, ps)


# ---- hosts.yaml validation and the local transport (no hosts needed) --------------------------

GOOD = "hosts:\n  - name: a\n  - name: b\n"


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ("env_setup: 3\n", 1, "env_setup is a shell line or a list of shell lines"),
        ("env_setup:\n  - ok\n  - 3\n", 3, "env_setup[1]: Input should be a valid string"),
        ('env_setup: "a\\x07b"\n', 1, "control character U+0007"),  # the YAML reader's
        ('env_setup: ["a\\rb"]\n', 1, "env_setup[0]: contains a control character"),
        ("env_setup: [" + ",".join(["x"] * 33) + "]\n", 1, "at most 32 env_setup lines"),
        ("env_setup:\n  - ok\n  - {a: 1}\n", 3, "env_setup[1]: Input should be a valid string"),
        ("env_setup: " + "x" * 4097 + "\n", 1, "longer than 4096 characters"),
        ("container: {runtime: docker}\n", 1, "container needs runtime:"),
        ("container: {runtime: lxc, name: a}\n", 1, "container.runtime: Input should be"),
        ("container:\n  exec: []\n", 2, "container.exec: Tuple should have at least 1"),
        ("container: {exec: [bwrap], name: x}\n", 1, "either exec: [...] or runtime:"),
        ("container: {runtime: podman, name: 'a;b'}\n", 1, "container names use letters"),
        ('container: {exec: ["a\\nb"]}\n', 1, "exec words are non-empty one-line strings"),
        ("contaner: {runtime: podman, name: a}\n", 1, "unknown key (did you mean 'container'?)"),
    ],
)
def test_bad_env_setup_and_container_name_file_and_line(tmp_path, text, line, message):
    from tui.config.yamlfile import ConfigError

    path = tmp_path / "hosts.yaml"
    path.write_text(text + GOOD)
    with pytest.raises(ConfigError) as err:
        load_inventory(path)
    assert str(err.value).startswith(f"{path}:{line}: "), str(err.value)
    assert message in str(err.value)


def test_per_host_env_setup_and_container_override_the_top_level(tmp_path):
    path = tmp_path / "hosts.yaml"
    path.write_text(
        "env_setup: source /opt/conda/etc/profile.d/conda.sh && conda activate verl\n"
        "container: {runtime: docker, name: verl}\n"
        "hosts:\n"
        "  - name: a\n"
        "  - name: b\n    env_setup: [module load cuda/12.4, 'export X=1']\n"
        "    container: {runtime: apptainer, name: verl-inst}\n"
        "  - name: c\n    env_setup: []\n    container: null\n"
    )
    a, b, c = load_inventory(path).hosts
    assert a.env_setup == ("source /opt/conda/etc/profile.d/conda.sh && conda activate verl",)
    assert a.container is not None and a.container.prefix() == ("docker", "exec", "-i", "verl")
    assert b.env_setup == ("module load cuda/12.4", "export X=1")
    assert b.container is not None
    assert b.container.prefix() == ("apptainer", "exec", "instance://verl-inst")
    assert c.env_setup == () and c.container is None


def test_local_transport_setup_keeps_stdout_and_stdin_for_the_command():
    """The setup's stdout goes to stderr and it cannot eat the command's stdin; the command's
    env words come after the setup (they win); quoting survives every layer."""
    from tui.transport.local import LocalTransport
    from tui.transport.types import HostShell

    shell = HostShell(("export A=from-setup B=from-setup; echo noise", "read -r x || true"))
    transport = LocalTransport("here", shell)
    res = asyncio.run(
        transport.run(
            ["sh", "-c", 'printf "%s|%s|%s|" "$A" "$B" "$1"; cat', "sh", 'it\'s "$x"'],
            input="stdin line\n",
            env={"B": "from-env"},
        )
    )
    assert res.ok, res.stderr
    assert res.stdout == 'from-setup|from-env|it\'s "$x"|stdin line\n'
    assert "noise" in res.stderr

    failing = LocalTransport("here", HostShell(("echo about to fail", "false", "echo never")))
    with pytest.raises(EnvSetupFailed) as err:
        asyncio.run(failing.run(["true"]))
    assert str(err.value) == "here: env_setup failed (exit 1) at `false`: about to fail"
