"""Slurm allocations as the inventory, against a real Slurm (Debian's slurmctld + slurmd +
munge; tests/harness/slurm.py) whose slurmd's run inside two namespace sshd hosts:

- `verl-tui slurm JOBID --base base.yaml -o hosts.yaml` on an `sbatch -N 2 --gres=gpu:4`
  allocation, then `gpus --once` (fake NVML), `up`, a submitted job and `down` through that file;
- `verl-tui --slurm JOBID` opening the cockpit (tmux);
- the errors: no such job, a pending job, no scontrol, a bad base file, a hostile job name;
- our hostlist parser against `scontrol show hostnames`;
- `profile export --format sbatch` submitted with `sbatch --print-config` and seen to bring Ray
  up on both nodes and run verl's main_ppo (`--cfg job`) through the head's Jobs API.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import yaml
from fakenvml.fakenvml import FakeGpu, write_state
from harness.cli import run_cli
from harness.raycluster import wait_job

from tui.cluster.slurm import expand_hostlist, gpus_in

VENV_PY = sys.executable
VENV_BIN = str(Path(VENV_PY).parent)
ROOT = Path(__file__).resolve().parents[1]
GPUS = 4
TIMINGS: dict[str, float] = {}


def cli(env: dict[str, str], *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return run_cli([*args], env=env, timeout=timeout, stdin=subprocess.DEVNULL)


def base_yaml(ns, path: Path) -> Path:
    path.write_text(
        "\n".join(
            [
                "# keys every node shares; the allocation adds the hosts",
                "cluster: slurmtest",
                f"python: {VENV_PY}",
                "ssh:",
                "  user: root",
                f"  identity_file: {ns.client_key}",
                f"  known_hosts: {ns.known_hosts}",
                "  config: ''",
                "  connect_timeout: 5",
                "ray:",
                # Several Ray nodes share this machine: keep each one small.
                "  memory: 1000000000",
                "  object_store_memory: 100000000",
                "  start_timeout: 60",
                "telemetry:",
                "  interval: 0.5",
                "secret_env: [SLURMTEST_PASS]",
                # Runs before every command on the hosts; Ray (and so the job) inherits it.
                "env_setup: export VERL_TUI_SLURM_SETUP=from-base",
            ]
        )
        + "\n"
    )
    return path


@pytest.fixture(scope="module")
def slurm(ns_hosts, tmp_path_factory, fake_nvml_lib):
    """Two namespace hosts (4 fake GPUs each) with Slurm over them; yields
    (ns, slurm, work dir, env for the CLI)."""
    from harness.slurm import SlurmCluster

    work = tmp_path_factory.mktemp("slurm")
    host_env = {}
    for i, name in enumerate(("node1", "node2"), start=1):
        state = work / f"{name}.nvml"
        write_state(state, [FakeGpu(util=10 * i + g) for g in range(GPUS)])
        host_env[name] = {"LD_LIBRARY_PATH": str(fake_nvml_lib), "FAKE_NVML_STATE": str(state)}
    ns = ns_hosts(2, work / "hosts", host_env=host_env)
    cluster = SlurmCluster(ns, work / "slurm", gpus_per_node=GPUS)
    try:
        cluster.start()  # fails loudly (HarnessError with the daemons' logs), never skips
        TIMINGS["slurm start-up"] = cluster.startup_seconds or 0.0
        env = cluster.env(
            {
                **os.environ,
                "XDG_STATE_HOME": str(work / "state"),
                "PATH": f"{VENV_BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}",
            }
        )
        yield ns, cluster, work, env
    finally:
        try:
            cluster.stop()  # scancel first, then the daemons
        finally:
            ns.stop()
        print("\nslurm timings (s): " + ", ".join(f"{k} {v:.2f}" for k, v in TIMINGS.items()))


def _allocate(cluster, work: Path, *args: str) -> str:
    job = cluster.sbatch(
        f"--chdir={work}", "-o", str(work / "alloc-%j.out"), *args, "--wrap", "sleep 600"
    )
    cluster.wait_state(job, ("RUNNING",))
    return job


def _one_line_error(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


# --- the hostlist parser, against Slurm's own -----------------------------------------------

VALID = [
    "node[1-2]",
    "node1",
    "a,b[1-2],c",
    "n[08-11]",
    "n[1-3,5,7-8]",
    "n[9-11]",
    "n[098-101]",
    "gpu-[001-004]",
    "rack[1-2]-n[3,5]",
    "n[1-2]x[3-4]",
    "n[01-1]",
    "n[1-2],m[3-4]",
    "a.b.c,d_e[7]",
]
MALFORMED = [
    "n[3-1]",
    "n[]",
    "n[a-b]",
    "n[1-2]]",
    "n[1-2,]",
    "n[,1]",
    "n[1--2]",
    "n[-1]",
    "n[1-99999]",
]


def test_hostlist_expansion_matches_scontrol(slurm):
    _, cluster, _, _ = slurm
    for expr in VALID:
        theirs = cluster.run("scontrol", "show", "hostnames", expr).stdout.split()
        assert expand_hostlist(expr) == theirs, expr
    for expr in MALFORMED:
        theirs = cluster.run("scontrol", "show", "hostnames", expr, check=False)
        assert theirs.returncode != 0 or "Invalid" in theirs.stdout + theirs.stderr, expr
        with pytest.raises(ValueError):
            expand_hostlist(expr)
    # Stricter than Slurm where Slurm guesses: an unclosed bracket, spaces, an open range.
    for expr in ("n[1-2", "n[1- 2]", "n[1-]", "n1 n2", "n[1-2];rm", ""):
        with pytest.raises(ValueError):
            expand_hostlist(expr)


def test_gres_strings():
    assert gpus_in("gpu:4(IDX:0-3)") == 4
    assert gpus_in("gpu:a100:2(IDX:0-1),gpu:v100:1(IDX:2)") == 3
    assert gpus_in("gpu:4(IDX:0,2-4)") == 4
    assert gpus_in("gres:gpu:8") == 8 and gpus_in("gres/gpu:2") == 2
    assert gpus_in("gpu:1g.5gb:2(IDX:0)") == 2
    assert gpus_in("nic:1(IDX:0)") is None and gpus_in("(null)") is None


# --- allocation → hosts.yaml → gpus, up, a job, down ----------------------------------------


@pytest.mark.ray  # brings Ray up itself
def test_allocation_inventory_up_job_down(slurm):
    ns, cluster, work, env = slurm
    base = base_yaml(ns, work / "base.yaml")
    hosts = work / "hosts.yaml"
    t0 = time.monotonic()
    job = _allocate(cluster, work, "-N", "2", f"--gres=gpu:{GPUS}")
    t_running = time.monotonic()
    out = cli(env, "slurm", job, "--base", str(base), "-o", str(hosts))
    t_file = time.monotonic()
    assert out.returncode == 0, out.stderr
    assert f"Slurm job {job}: node1 (head) + 1 worker, {2 * GPUS} GPUs" in out.stderr
    doc = yaml.safe_load(hosts.read_text())
    assert doc["hosts"] == [
        {"name": "node1", "address": ns.host("node1").address, "role": "head", "num_gpus": GPUS},
        {"name": "node2", "address": ns.host("node2").address, "num_gpus": GPUS},
    ]
    # The base's keys, as they were.
    assert doc["cluster"] == "slurmtest" and doc["python"] == VENV_PY
    assert doc["ssh"]["identity_file"] == str(ns.client_key)
    assert doc["ray"]["object_store_memory"] == 100000000
    assert doc["telemetry"] == {"interval": 0.5} and doc["secret_env"] == ["SLURMTEST_PASS"]
    assert doc["env_setup"] == "export VERL_TUI_SLURM_SETUP=from-base"
    printed = cli(env, "slurm", job, "--base", str(base))
    assert printed.returncode == 0 and printed.stdout == hosts.read_text(), printed.stderr

    gpus = cli(env, "gpus", str(hosts), "--once", "--json")
    assert gpus.returncode == 0, gpus.stderr
    snap = json.loads(gpus.stdout.splitlines()[0])
    utils = {h["name"]: [g["util_percent"] for g in h["gpus"]] for h in snap["hosts"]}
    assert utils == {"node1": [10, 11, 12, 13], "node2": [20, 21, 22, 23]}, snap
    # NodeAddr reached the host Slurm named (its own hostname says so).
    assert {h["name"]: h["hostname"] for h in snap["hosts"]} == {"node1": "node1", "node2": "node2"}

    try:
        up = cli(env, "up", str(hosts))
        t_up = time.monotonic()
        assert up.returncode == 0, up.stdout + up.stderr
        TIMINGS["sbatch → RUNNING"] = t_running - t0
        TIMINGS["RUNNING → hosts.yaml written"] = t_file - t_running
        TIMINGS["hosts.yaml → Ray up (2 nodes)"] = t_up - t_file
        prog = (
            "import ray; ray.init(); nodes = [n for n in ray.nodes() if n['Alive']]; "
            "print('ALIVE', len(nodes), int(sum(n['Resources'].get('GPU', 0) for n in nodes)));"
            "import os; print('SETUP', os.environ.get('VERL_TUI_SLURM_SETUP'))"
        )
        sid = f"slurm-{uuid.uuid4().hex[:6]}"
        sub = cli(env, "submit", str(hosts), "--submission-id", sid, "--", "python", "-c", prog)
        assert sub.returncode == 0, sub.stdout + sub.stderr
        status = _wait_job(env, hosts, sid)
        logs = cli(env, "logs", str(hosts), sid)
        assert status == "SUCCEEDED", logs.stdout + logs.stderr
        assert f"ALIVE 2 {2 * GPUS}" in logs.stdout, logs.stdout
        assert "SETUP from-base" in logs.stdout, logs.stdout  # the base's env_setup ran
    finally:
        down = cli(env, "down", str(hosts))
    assert down.returncode == 0, down.stdout + down.stderr
    cluster.run("scancel", job)
    cluster.wait_state(job, ("CANCELLED", "COMPLETED"))


def _wait_job(env, hosts: Path, sid: str, timeout: float = 120) -> str:
    return wait_job(env, hosts, sid, {"SUCCEEDED", "FAILED", "STOPPED"}, timeout)["status"]


# --- errors: one line, exit 2 ---------------------------------------------------------------


def test_errors_are_one_line(slurm):
    ns, cluster, work, env = slurm
    base = base_yaml(ns, work / "base-err.yaml")

    assert "Slurm job 987654: not found" in _one_line_error(cli(env, "slurm", "987654"))
    assert "is not a Slurm job id" in _one_line_error(cli(env, "slurm", "12;id"))

    held = cluster.sbatch(f"--chdir={work}", "-o", "/dev/null", "--hold", "--wrap", "true")
    try:
        msg = _one_line_error(cli(env, "slurm", held, "--base", str(base)))
        assert f"Slurm job {held} is PENDING" in msg and "not RUNNING" in msg, msg
    finally:
        cluster.run("scancel", held)

    no_slurm = {**env, "PATH": "/nonexistent"}
    assert "scontrol: not found on PATH" in _one_line_error(cli(no_slurm, "slurm", "12"))

    # The base file is checked by the hosts.yaml loader: errors name base.yaml:line.
    bad = work / "bad-base.yaml"
    bad.write_text("python: /x/python3\nssh:\n  user: root\n  usr: typo\n")
    msg = _one_line_error(cli(env, "slurm", "987654", "--base", str(bad)))
    assert msg.endswith(f"{bad}:4: ssh.usr: unknown key (did you mean 'user'?)"), msg
    bad.write_text("python: /x/python3\nhosts:\n  - name: a\n")
    msg = _one_line_error(cli(env, "slurm", "987654", "--base", str(bad)))
    assert f"{bad}:2: hosts: leave it out of a base file" in msg, msg
    bad.write_text("python: /x/python3\nray:\n  port: 0\n")
    msg = _one_line_error(cli(env, "slurm", "987654", "--base", str(bad)))
    assert f"{bad}:3: ray.port: Input should be greater than or equal to 1" in msg, msg
    job = _allocate(cluster, work, "-N", "1")
    try:
        # No GRES asked: the inventory leaves num_gpus to NVML.
        out = cli(env, "slurm", job)
        assert out.returncode == 0, out.stderr
        (host,) = yaml.safe_load(out.stdout)["hosts"]
        assert host == {"name": "node1", "address": ns.host("node1").address, "role": "head"}
    finally:
        cluster.run("scancel", job)


def test_inside_salloc_the_job_id_is_implied(slurm):
    """`salloc … verl-tui slurm` (SLURM_JOB_ID from salloc) writes that allocation's file."""
    ns, cluster, work, env = slurm
    base = base_yaml(ns, work / "base-salloc.yaml")
    hosts = work / "salloc-hosts.yaml"
    argv = [VENV_PY, "-m", "tui", "slurm", "--base", str(base), "-o", str(hosts)]
    done = subprocess.run(
        ["salloc", "-N", "2", f"--gres=gpu:{GPUS}", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        env={k: v for k, v in env.items() if k != "SLURM_JOB_ID"},
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr
    job = done.stderr.split("Granted job allocation ", 1)[1].split()[0]
    assert f"Slurm job {job}: node1 (head) + 1 worker, {2 * GPUS} GPUs" in done.stderr
    doc = yaml.safe_load(hosts.read_text())
    assert [(h["name"], h["num_gpus"]) for h in doc["hosts"]] == [("node1", 4), ("node2", 4)]
    assert doc["ssh"]["known_hosts"] == str(ns.known_hosts)
    cluster.wait_state(job, ("COMPLETED",))  # salloc released the allocation after the command
    no_job = {k: v for k, v in env.items() if k != "SLURM_JOB_ID"}
    assert "give a JOBID" in _one_line_error(cli(no_job, "slurm"))


def test_hostile_job_name_cannot_plant_nodes(slurm):
    """A job name holding a newline and `NodeList=`/`JobState=` lines: scontrol prints it as
    it is; the parser refuses the second key instead of believing it."""
    _, cluster, work, env = slurm
    name = "x\n   NodeList=evil[1-2]\n   JobState=RUNNING"
    job = cluster.sbatch(
        f"--chdir={work}", "-o", "/dev/null", "-J", name, "-N", "1", "--wrap", "sleep 600"
    )
    try:
        cluster.wait_state(job, ("RUNNING",))
        shown = cluster.run("scontrol", "show", "job", job).stdout
        out = cli(env, "slurm", job)
        print("hostile job name kept by Slurm:", "\n   NodeList=evil" in shown)
        if "\n   NodeList=evil" in shown:  # Slurm kept the newline: refused
            assert "lines (cannot read the job)" in _one_line_error(out)
        else:  # Slurm dropped or escaped it: the real node, nothing else
            assert out.returncode == 0, out.stderr
            assert [h["name"] for h in yaml.safe_load(out.stdout)["hosts"]] == ["node1"]
        assert "evil" not in out.stdout
    finally:
        cluster.run("scancel", job)


# --- the cockpit on an allocation ---------------------------------------------------------


def test_cockpit_opens_on_the_allocation(slurm):
    ns, cluster, work, env = slurm
    assert shutil.which("tmux"), "tmux is required (run-tests installs it)"
    base = base_yaml(ns, work / "base-cockpit.yaml")
    job = _allocate(cluster, work, "-N", "2", f"--gres=gpu:{GPUS}")
    session = f"vt-{uuid.uuid4().hex[:8]}"
    keep = ("PATH", "SLURM_CONF", "XDG_STATE_HOME", "HOME")
    exports = " ".join(f"{k}={shlex.quote(env[k])}" for k in keep if k in env)
    entry = shlex.join([VENV_PY, "-m", "tui", "--slurm", job, "--base", str(base)])
    cmd = f"env TERM=xterm-256color {exports} {entry}; echo EXITED:$?; sleep 60"
    try:
        subprocess.run(
            ["tmux", "new-session", "-d", "-s", session, "-x", "150", "-y", "40", cmd], check=True
        )
        screen = _wait_screen(session, "hosts 2/2 up")
        assert "node1" in screen and "node2" in screen and "Traceback" not in screen
        subprocess.run(["tmux", "send-keys", "-t", session, "q"], check=True)
        _wait_screen(session, "EXITED:0")
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
        cluster.run("scancel", job)
    written = work / "state" / "verl-tui" / "slurm" / f"job-{job}.yaml"
    assert [h["name"] for h in yaml.safe_load(written.read_text())["hosts"]] == ["node1", "node2"]
    missing = run_cli(["--slurm", "987654"], env=env, timeout=None)
    assert missing.returncode == 2 and "Slurm job 987654: not found" in missing.stderr


def _wait_screen(session: str, needle: str, timeout: float = 30.0) -> str:
    deadline = time.monotonic() + timeout
    screen = ""
    while time.monotonic() < deadline:
        screen = subprocess.run(
            ["tmux", "capture-pane", "-p", "-t", session], capture_output=True, text=True
        ).stdout
        if needle in screen:
            return screen
        time.sleep(0.3)
    raise AssertionError(f"{needle!r} not on screen after {timeout} s:\n{screen}")


# --- the exported sbatch script under Slurm -----------------------------------------------


@pytest.mark.ray  # brings Ray up itself
def test_exported_sbatch_brings_ray_up(slurm):
    ns, cluster, work, env = slurm
    script = work / "verl.sbatch"
    preset = ROOT / "profiles" / "grpo-gsm8k-qwen2.5-0.5b.yaml"
    out = cli(
        env,
        "profile",
        "export",
        str(preset),
        "--format",
        "sbatch",
        "--nodes",
        "2",
        "--gpus-per-node",
        str(GPUS),
        "--cpus-per-task",  # Ray's CPUs per node; the test nodes have 16 "CPUs" each
        "4",
        "-o",
        str(script),
    )
    assert out.returncode == 0, out.stderr
    text = script.read_text().splitlines()
    for line in ("--nodes=2", f"--gres=gpu:{GPUS}", "--ntasks-per-node=1", "--cpus-per-task=4"):
        assert f"#SBATCH {line}" in text, line
    # The dry run: Ray up on the allocation exactly as for training, then the training command
    # itself through the head's Jobs API with main_ppo's --cfg job (real verl composes and
    # prints its config on the cluster, then exits: no GPU work).
    t0 = time.monotonic()
    job = cluster.sbatch(f"--chdir={work}", str(script), "--print-config", env={**env})
    state = cluster.wait_state(job, ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"), timeout=400)
    TIMINGS["sbatch script → Ray up → verl job done"] = time.monotonic() - t0
    log = (work / f"slurm-{job}.out").read_text()
    assert state == "COMPLETED", log
    assert "Ray: 2 of 2 nodes alive" in log, log
    status = log[log.index("Active:") : log.index("Pending:")]
    assert status.count(" 1 node_") == 2, status
    assert f"0.0/{2 * GPUS}.0 GPU" in log, log  # --num-gpus from the script, on both nodes
    # verl's composed config, with the allocation's topology in it.
    assert "nnodes: 2\n" in log and f"n_gpus_per_node: {GPUS}\n" in log, log
    assert "succeeded" in log, log
    for h in ns.hosts:
        assert f"({h.address})" in log  # each node's NodeAddr became its Ray node address
    # The job ended: Slurm took its steps down, Ray with them, on both hosts.
    deadline = time.monotonic() + 30
    while True:
        left = {
            h.name: ps
            for h in ns.hosts
            if (ps := ns.exec_in(h.name, ["pgrep", "-l", "raylet|gcs_server"]).stdout.strip())
        }
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert not left, left


def test_array_job_needs_one_task(slurm):
    """`scontrol show job ARRAYID` prints one record per task: name a task (`ID_N`)."""
    ns, cluster, work, env = slurm
    job = cluster.sbatch(
        f"--chdir={work}", "-o", "/dev/null", "--array=0-1", "-N", "1", "--wrap", "sleep 600"
    )
    try:
        for task in ("0", "1"):
            cluster.wait_state(f"{job}_{task}", ("RUNNING",))
        msg = _one_line_error(cli(env, "slurm", job))
        assert f"Slurm job {job} has 2 records" in msg and f"e.g. {job}_0" in msg, msg
        out = cli(env, "slurm", f"{job}_1")
        assert out.returncode == 0, out.stderr
        doc = yaml.safe_load(out.stdout)
        assert doc["cluster"] == f"slurm-{job}_1"
        (host,) = doc["hosts"]
        assert host["name"] in ("node1", "node2")
        assert host["address"] == ns.host(host["name"]).address
    finally:
        cluster.run("scancel", job)


# --- scontrol output is untrusted -------------------------------------------------------------

_JOB_TEXT = """JobId=7 JobName=wrap
   UserId=alice(1000) GroupId=alice(1000) MCS_label=N/A
   JobState=RUNNING Reason=None Dependency=(null)
   NodeList=gpu-[001-002]
   BatchHost=gpu-001
   {detail}
   Command=(null)
   {tres}
"""


class _JobText:
    """A job record in scontrol's layout; an empty part leaves its line out."""

    @staticmethod
    def format(detail: str, tres: str) -> str:
        text = _JOB_TEXT.format(detail=detail, tres=tres)
        return "\n".join(line for line in text.splitlines() if line.strip()) + "\n"


JOB_TEXT = _JobText()


def test_job_records_from_other_slurm_versions():
    from tui.cluster.slurm import parse_job

    # Slurm 23+ spells the request gres/gpu:N; no per-node detail lines without -d.
    info = parse_job(JOB_TEXT.format(detail="", tres="TresPerNode=gres/gpu:8"), "7")
    assert info.nodes == ("gpu-001", "gpu-002") and info.gpus == {"gpu-001": 8, "gpu-002": 8}
    # Detail lines win over the request, node by node (typed GPUs summed).
    detail = (
        "Nodes=gpu-001 CPU_IDs=0-7 Mem=0 GRES=gpu:a100:2(IDX:0-1),gpu:v100:1(IDX:2)\n"
        "     Nodes=gpu-002 CPU_IDs=0-7 Mem=0 GRES=gpu:a100:4(IDX:0-3)"
    )
    info = parse_job(JOB_TEXT.format(detail=detail, tres="TresPerNode=gres:gpu:4"), "7")
    assert info.gpus == {"gpu-001": 3, "gpu-002": 4}


@pytest.mark.parametrize(
    "detail, tres, message",
    [
        ("Nodes=gpu-001 CPU_IDs=0 Mem=0 GRES=gpu:4(IDX:0-3)", "", "do not match NodeList"),
        ("Nodes=gpu-00[1-3] CPU_IDs=0 Mem=0 GRES=gpu:4", "", "do not match NodeList"),
        ("NodeList=evil[1-2]", "", "2 NodeList= lines"),
        ("JobState=RUNNING", "", "2 JobState= lines"),
    ],
)
def test_job_records_that_do_not_add_up_are_refused(detail, tres, message):
    from tui.cluster.slurm import SlurmError, parse_job

    with pytest.raises(SlurmError, match=message):
        parse_job(JOB_TEXT.format(detail=detail, tres=tres), "7")


def test_node_records_are_checked():
    from tui.cluster.slurm import SlurmError, parse_nodes

    line = "NodeName={n} Arch=x86_64 Gres=gpu:4 NodeAddr={a} NodeHostName={n} OS=Linux {tail}"
    wanted = ("n1", "n2")
    ok = "\n".join(line.format(n=n, a=f"10.0.0.{i}", tail="") for i, n in enumerate(wanted, 1))
    assert parse_nodes(ok, wanted) == {"n1": "10.0.0.1", "n2": "10.0.0.2"}
    # Free text after NodeAddr (OS, Reason) cannot replace it.
    fake = line.format(n="n1", a="10.0.0.1", tail="Reason=x NodeAddr=6.6.6.6")
    assert parse_nodes(fake, ("n1",)) == {"n1": "10.0.0.1"}
    bad = [
        (line.format(n="n1", a="10.0.0.1;id", tail=""), "is not a host name or IP address"),
        (line.format(n="n1", a="-oProxyCommand=x", tail=""), "is not a host name"),
        (line.format(n="n9", a="10.0.0.9", tail=""), "unexpected node"),
        (ok + "\n" + line.format(n="n1", a="10.0.0.7", tail=""), "listed twice"),
        (line.format(n="n1", a="10.0.0.1", tail=""), "no record for n2"),
        ("garbage\n" + ok, "not a node record"),
    ]
    for text, message in bad:
        with pytest.raises(SlurmError, match=message):
            parse_nodes(text, wanted if "n2" in message or "twice" in message else ("n1",))


def test_sbatch_script_refuses_unknown_arguments(tmp_path):
    from tui.jobs.exporter import to_sbatch
    from tui.jobs.profiles import Profile

    script = tmp_path / "x.sbatch"
    script.write_text(to_sbatch(Profile(name="x"), nodes=1, gpus_per_node=1))
    # It stops before touching Slurm or Ray (neither is on this PATH).
    done = subprocess.run(
        ["/bin/bash", str(script), "ray", "status"],
        capture_output=True,
        text=True,
        env={"PATH": "/nonexistent"},
        timeout=10,
    )
    assert done.returncode == 2 and "unknown argument: ray" in done.stderr, done.stderr


# --- the harness itself -----------------------------------------------------------------------

_KILLED_RUN = """
import sys, time
sys.path.insert(0, {tests!r})
from pathlib import Path
from harness.nshosts import NsCluster
from harness.slurm import SlurmCluster
ns = NsCluster(1, Path({work!r}) / "hosts")
ns.start()
s = SlurmCluster(ns, Path({work!r}) / "slurm", gpus_per_node=1)
s.start()
print("READY", s._ctld.pid, s._munged.pid, flush=True)
time.sleep(600)
"""


def test_daemons_of_a_killed_run_are_reaped(tmp_path):
    """A test run SIGKILLed mid-way leaves slurmctld and munged (own sessions) behind: the next
    start kills those whose owner is dead, and only those."""
    from harness import nshosts
    from harness.slurm import cleanup_stale

    code = _KILLED_RUN.format(tests=str(Path(__file__).parent), work=str(tmp_path))
    run = subprocess.Popen([VENV_PY, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        line = run.stdout.readline() if run.stdout else ""
        assert line.startswith("READY"), line
        pids = [int(p) for p in line.split()[1:]]
    finally:
        run.kill()
        run.wait(10)
    assert all(nshosts._pid_alive(p) for p in pids)  # orphaned, still running
    assert sorted(cleanup_stale()) == sorted(pids)
    deadline = time.monotonic() + 10
    while any(nshosts._pid_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(nshosts._pid_alive(p) for p in pids)
    nshosts.cleanup_stale()  # the dead run's namespace host
