"""AMD GPUs: the agent's amdgpu sysfs backend, its amd-smi / rocm-smi fallbacks (recorded real
outputs, tests/fakeamd/fixtures/SOURCES.md), mixed NVIDIA + AMD hosts, the probe's count, the
doctor's GPU checks, and — over real SSH to namespace hosts with a fake amdgpu tree mounted
over /sys/class/drm in their own mount namespace — `gpus --json`, the Cluster screen under
Pilot and `up` giving Ray that many GPUs. No AMD hardware is involved anywhere."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fakeamd.fakeamd import GIB, MIB, FakeAmdGpu, mount_over_sys_class_drm, write_tree
from fakenvml.fakenvml import FakeGpu, write_state
from harness.cli import run_cli

from tui.cluster.agent_schema import parse_line
from tui.cluster.doctor import _gpu_findings, effective_gpus
from tui.cluster.probe import facts_from_json
from tui.cluster.telemetry import agent_argv
from tui.config.hosts import parse_inventory
from tui.remote import gpu_amd, python_argv

FIXTURES = Path(__file__).with_name("fakeamd") / "fixtures"
VENV_PY = sys.executable


def run_agent_once(env: dict[str, str]) -> tuple[dict, dict]:
    proc = subprocess.run(
        agent_argv(VENV_PY, 0.2, once=True),
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    hello, sample = (json.loads(line) for line in proc.stdout.splitlines())
    for line in proc.stdout.splitlines():  # the cockpit takes it unchanged: no bad field
        parsed = parse_line(line, time.time())
        assert parsed.kind in ("hello", "sample") and parsed.problems == [], parsed.problems
    return hello, sample


def amd_env(drm: Path, **extra: str) -> dict[str, str]:
    # No pynvml and no nvidia-smi for this agent: an AMD-only host.
    return {
        **os.environ,
        "VERL_TUI_AGENT_DRM": str(drm),
        "LD_LIBRARY_PATH": "/nonexistent",
        **extra,
    }


# --- sysfs, the agent run as production runs it -----------------------------------------------


def test_busy_and_idle_gpus_with_units_converted(tmp_path):
    drm = write_tree(
        tmp_path,
        [
            FakeAmdGpu(
                pci="0000:22:00.0",
                busy=97,
                mem_busy=41,
                vram_used=150 * GIB,
                temps={"junction": 71_000, "mem": 60_000},
                power_input_uw=688_500_000,
            ),
            FakeAmdGpu(pci="0000:0c:00.0", busy=0, unique_id="5d9b4a1e2c3f4d5e"),  # idle
            # an ASIC with an edge sensor and an averaged power reading (a Radeon, say)
            FakeAmdGpu(
                pci="0000:38:00.0",
                device_id="0x744c",
                product_name=None,
                temps={"edge": 38_000, "junction": 47_000},
                power_average_uw=55_000_000,
                power_input_uw=60_000_000,
                power_cap_uw=None,
            ),
        ],
    )
    hello, sample = run_agent_once(amd_env(drm))
    assert hello["source"] == sample["source"] == "amdgpu-sysfs" and hello["error"] is None
    g0, g1, g2 = sample["gpus"]
    # ROCm's order: by PCI address, whatever the card numbers are.
    assert g0["uuid"] == "5d9b4a1e2c3f4d5e" and g0["util_percent"] == 0.0
    assert g1["util_percent"] == 97.0 and g1["mem_util_percent"] == 41.0
    assert g1["memory_used_bytes"] == 150 * GIB and g1["memory_total_bytes"] == 196592 * MIB
    assert g1["temperature_c"] == 71.0  # MI300: junction, there is no edge sensor
    assert g1["power_w"] == 688.5 and g1["power_limit_w"] == 750.0
    assert g1["name"] == "AMD Instinct MI300X" and g1["vendor"] == "amd"
    assert g2["name"] == "AMD GPU 0x744c"  # no FRU product name: the PCI device id
    assert g2["temperature_c"] == 38.0 and g2["power_w"] == 55.0  # edge; the average
    assert g2["power_limit_w"] is None
    assert [g["index"] for g in sample["gpus"]] == [0, 1, 2]
    assert all(g["error"] is None and g["processes"] is None for g in sample["gpus"])


def test_odd_values_and_unreadable_files_become_null(tmp_path):
    drm = write_tree(
        tmp_path,
        [
            FakeAmdGpu(
                pci="0000:0c:00.0",
                raw={
                    "gpu_busy_percent": "150\n",
                    "mem_busy_percent": "-3\n",
                    "mem_info_vram_used": "abc\n",
                    "hwmon/temp2_input": "\n",
                    "hwmon/power1_input": "18446744073709551615\n",
                },
            ),
            FakeAmdGpu(
                pci="0000:22:00.0",
                vram_used=300 * GIB,  # more used than there is
                unreadable={"gpu_busy_percent", "power1_input"},
            ),
            FakeAmdGpu(
                pci="0000:38:00.0",
                unreadable={
                    "gpu_busy_percent",
                    "mem_info_vram_used",
                    "temp2_input",
                    "temp3_input",
                    "power1_input",
                },
            ),
        ],
    )
    _, sample = run_agent_once(amd_env(drm))
    odd, partly, dead = sample["gpus"]
    assert odd["util_percent"] is None and odd["mem_util_percent"] is None
    assert odd["memory_used_bytes"] is None and odd["power_w"] is None
    assert odd["temperature_c"] == 35.0  # the junction reading is empty: the mem channel
    assert odd["error"] is None
    assert partly["util_percent"] is None and partly["power_w"] is None
    assert partly["memory_used_bytes"] is None and partly["memory_total_bytes"] == 196592 * MIB
    assert partly["temperature_c"] == 41.0 and partly["error"] is None  # the rest still shown
    # Nothing readable: one error naming the file and the OS error.
    assert dead["error"] == "cannot read gpu_busy_percent: Input/output error"


def test_gpu_that_disappears_keeps_its_index_and_comes_back(tmp_path):
    gpus = [FakeAmdGpu(pci=f"0000:{b:02x}:00.0", busy=10 * i) for i, b in enumerate((12, 34, 56))]
    drm = write_tree(tmp_path, gpus)
    proc = subprocess.Popen(
        agent_argv(VENV_PY, 0.2),
        env=amd_env(drm),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:

        def next_sample(pred):
            for _ in range(100):
                msg = json.loads(proc.stdout.readline())
                if msg["type"] == "sample" and pred(msg["gpus"]):
                    return msg["gpus"]
            raise AssertionError("no such sample")

        next_sample(lambda g: len(g) == 3)
        write_tree(tmp_path, [gpus[0], gpus[2]])  # the middle one falls off the bus
        seen = next_sample(lambda g: g[1]["error"] is not None)
        assert [g["index"] for g in seen] == [0, 1, 2]
        assert seen[1]["error"] == f"GPU 0000:22:00.0 is gone from {drm}"
        assert seen[2]["util_percent"] == 20.0  # the last one did not move to index 1
        write_tree(tmp_path, gpus)
        back = next_sample(lambda g: g[1]["error"] is None)
        assert back[1]["util_percent"] == 10.0
    finally:
        proc.stdin.close()
        assert proc.wait(10) == 0


def test_mixed_host_lists_nvidia_then_amd(tmp_path, fake_nvml_lib):
    state = tmp_path / "nvml.state"
    write_state(state, [FakeGpu(util=55), FakeGpu(util=66)])
    drm = write_tree(tmp_path / "amd", [FakeAmdGpu(busy=77)])
    env = {
        **os.environ,
        "VERL_TUI_AGENT_DRM": str(drm),
        "LD_LIBRARY_PATH": str(fake_nvml_lib),
        "FAKE_NVML_STATE": str(state),
    }
    hello, sample = run_agent_once(env)
    assert hello["source"] == sample["source"] == "nvml+amdgpu-sysfs"
    assert [(g["index"], g["vendor"], g["util_percent"]) for g in sample["gpus"]] == [
        (0, "nvidia", 55.0),
        (1, "nvidia", 66.0),
        (2, "amd", 77.0),
    ]
    assert hello["driver"] == "550.54.15"  # NVIDIA's driver stays in the hello


def test_nvidia_only_host_is_unchanged(tmp_path, fake_nvml_lib):
    state = tmp_path / "nvml.state"
    write_state(state, [FakeGpu(util=5)])
    env = {
        **os.environ,
        "VERL_TUI_AGENT_DRM": str(tmp_path / "no-drm"),
        "LD_LIBRARY_PATH": str(fake_nvml_lib),
        "FAKE_NVML_STATE": str(state),
    }
    _, sample = run_agent_once(env)
    assert sample["source"] == "nvml" and "vendor" not in sample["gpus"][0]


# --- amd-smi / rocm-smi: recorded real outputs ---------------------------------------------------


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_rocm_smi_recorded_outputs():
    (g,) = gpu_amd.parse_rocm_smi(fixture("rocm-smi-rx7900xt-marimo-9237.json"))
    assert (g["index"], g["name"], g["util_percent"]) == (0, "Radeon RX 7900 XT", 0.0)
    assert g["memory_total_bytes"] == 21458059264 and g["memory_used_bytes"] == 27856896
    (g,) = gpu_amd.parse_rocm_smi(fixture("rocm-smi-rx7900xt-ollama-3144.json"))
    assert g["name"] == "Radeon RX 7900 XT" and g["uuid"] == "0xd8607413b0e3a90b"
    assert (g["temperature_c"], g["power_w"], g["power_limit_w"]) == (38.0, 55.0, 265.0)
    assert g["mem_util_percent"] == 0.0 and g["memory_used_bytes"] is None
    both = gpu_amd.parse_rocm_smi(fixture("rocm-smi-showmemuse-2x-rx6800-rocm_smi_lib-120.json"))
    assert [g["index"] for g in both] == [0, 1]
    assert both[0]["mem_util_percent"] == pytest.approx(0.10168946267106549)


def test_amd_smi_recorded_outputs():
    (g,) = gpu_amd.parse_amd_smi_metric(fixture("amd-smi-metric-power-amdsmi-changelog.json"))
    assert g["power_w"] == 10.0 and g["util_percent"] is None
    (g,) = gpu_amd.parse_amd_smi_metric(fixture("amd-smi-metric-usage-w7700-beszel-737.json"))
    assert (g["util_percent"], g["mem_util_percent"]) == (42.0, 1.0)
    (g,) = gpu_amd.parse_amd_smi_metric(fixture("amd-smi-metric-mi300x-dpx-amdsmi-134.json"))
    assert g["util_percent"] == 0.0 and g["vendor"] == "amd"
    (g,) = gpu_amd.parse_amd_smi_metric(fixture("amd-smi-metric-rx7800xt-ajean-39.json"))
    assert g["memory_total_bytes"] == 16368 * MIB and g["memory_used_bytes"] == 14569 * MIB
    assert (g["util_percent"], g["temperature_c"]) == (2.0, 41.0)


@pytest.mark.parametrize(
    ("tool", "name"),
    [
        ("amd-smi", "amd-smi-metric-rx7800xt-ajean-39.json"),
        ("rocm-smi", "rocm-smi-rx7900xt-ollama-3144.json"),
    ],
)
def test_cli_fallback_when_sysfs_has_no_card(tmp_path, tool, name):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    script = bindir / tool
    script.write_text(f'#!/bin/sh\necho "$@" >> {tmp_path}/argv\ncat {FIXTURES / name}\n')
    script.chmod(0o755)
    env = amd_env(tmp_path / "no-drm", PATH=f"{bindir}:{os.environ['PATH']}")
    hello, sample = run_agent_once(env)
    assert hello["source"] == sample["source"] == tool
    (g,) = sample["gpus"]
    assert g["vendor"] == "amd" and g["util_percent"] is not None
    first = (tmp_path / "argv").read_text().splitlines()[0].split()
    assert first[-1] == "--json" and (first[0] == "metric" if tool == "amd-smi" else True)


def test_cli_that_fails_or_answers_garbage_is_no_amd_host(tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "amd-smi").write_text("#!/bin/sh\necho 'not json'\n")
    (bindir / "rocm-smi").write_text("#!/bin/sh\necho 'ERROR: no GPU' >&2\nexit 2\n")
    for p in bindir.iterdir():
        p.chmod(0o755)
    env = amd_env(tmp_path / "no-drm", PATH=f"{bindir}:{os.environ['PATH']}")
    _, sample = run_agent_once(env)
    assert sample["source"] == "none" and sample["gpus"] == []  # as before: no NVML here


# --- the probe and the doctor --------------------------------------------------------------------


def probe(env: dict[str, str]):
    proc = subprocess.run(
        python_argv(VENV_PY, "probe"), env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    return facts_from_json("h", json.loads(proc.stdout))


def test_probe_counts_amd_and_mixed(tmp_path, fake_nvml_lib):
    drm = write_tree(tmp_path / "amd", [FakeAmdGpu(pci=f"0000:{b}:00.0") for b in ("0c", "22")])
    facts = probe(amd_env(drm))
    assert (facts.gpu_count, facts.amd_gpu_count, facts.gpu_source) == (2, 2, "amdgpu-sysfs")
    assert facts.gpu_names == ("AMD Instinct MI300X",) * 2 and facts.gpu_error is None
    state = tmp_path / "nvml.state"
    write_state(state, [FakeGpu()])
    mixed = probe(
        {**amd_env(drm), "LD_LIBRARY_PATH": str(fake_nvml_lib), "FAKE_NVML_STATE": str(state)}
    )
    assert (mixed.gpu_count, mixed.amd_gpu_count, mixed.gpu_source) == (3, 2, "nvml+amdgpu-sysfs")


INV = parse_inventory(
    "cluster: t\nhosts:\n  - name: a\n    address: 10.0.0.1\n  - name: b\n    address: 10.0.0.2\n"
)


def facts_for(tmp_path, drm_gpus: int, **env: str):
    drm = write_tree(
        tmp_path / f"amd{drm_gpus}",
        [FakeAmdGpu(pci=f"0000:{i + 12:02x}:00.0") for i in range(drm_gpus)],
    )
    return probe(amd_env(drm, **env))


def test_doctor_gpu_checks_on_amd_hosts(tmp_path):
    eight = facts_for(tmp_path, 8)
    assert effective_gpus(INV.host("a"), eight) == (8, "amdgpu-sysfs")
    ok = _gpu_findings(INV, {"a": eight, "b": eight})
    assert [(f.status, f.finding) for f in ok] == [("ok", "8 GPU(s) on each of 2 node(s)")]
    uneven = _gpu_findings(INV, {"a": eight, "b": facts_for(tmp_path, 4)})
    assert [f.status for f in uneven] == ["fail"] and "4 on b; 8 on a" in uneven[0].finding
    hip = facts_for(tmp_path, 8, HIP_VISIBLE_DEVICES="0,1,2,3")
    assert effective_gpus(INV.host("a"), hip) == (4, "HIP_VISIBLE_DEVICES=0,1,2,3")


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"ROCR_VISIBLE_DEVICES": "0,1", "HIP_VISIBLE_DEVICES": "0,1"}, "verl's workers refuse"),
        ({"ROCR_VISIBLE_DEVICES": "0,1"}, "Ray refuses to start on AMD GPUs"),
        ({"HIP_VISIBLE_DEVICES": "0,1", "CUDA_VISIBLE_DEVICES": "1,0"}, "verl requires the same"),
    ],
)
def test_doctor_visible_devices_rule(tmp_path, env, says):
    f = facts_for(tmp_path, 2, **env)
    fails = [x for x in _gpu_findings(INV, {"a": f}) if x.status == "fail"]
    assert len(fails) == 1 and says in fails[0].finding and fails[0].host == "a"


def test_doctor_warns_on_mixed_vendors(tmp_path, fake_nvml_lib):
    state = tmp_path / "nvml.state"
    write_state(state, [FakeGpu()])
    drm = write_tree(tmp_path / "amd", [FakeAmdGpu()])
    f = probe(
        {**amd_env(drm), "LD_LIBRARY_PATH": str(fake_nvml_lib), "FAKE_NVML_STATE": str(state)}
    )
    warns = [x for x in _gpu_findings(INV, {"a": f}) if x.status == "warn"]
    assert len(warns) == 1 and "NVIDIA and AMD GPUs on one host (1 + 1)" in warns[0].finding


# --- real SSH, namespace hosts with a fake amdgpu tree over /sys/class/drm ---------------------


def hosts_yaml(cluster, path: Path) -> Path:
    lines = [
        "cluster: amdtest",
        f"python: {VENV_PY}",
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
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def amd_hosts(ns_cluster_factory, fake_nvml_lib, tmp_path):
    """node1: AMD only (8 MI300X, as the grpo-mi300 preset wants); node2: mixed (2 fake NVIDIA + 1 MI300X). Each sees its
    own tree at /sys/class/drm; this process and other hosts see none."""
    state = tmp_path / "node2.nvml"
    write_state(state, [FakeGpu(util=60), FakeGpu(util=61)])
    cluster = ns_cluster_factory(
        2,
        host_env={"node2": {"LD_LIBRARY_PATH": str(fake_nvml_lib), "FAKE_NVML_STATE": str(state)}},
    )
    trees = {"node1": tmp_path / "amd-node1", "node2": tmp_path / "amd-node2"}
    write_tree(
        trees["node1"],
        [
            FakeAmdGpu(pci=f"0000:{b:02x}:00.0", busy=90 + i)
            for i, b in enumerate((0x0C, 0x22, 0x38, 0x5C, 0x9F, 0xAF, 0xBF, 0xDF))
        ],
    )
    write_tree(trees["node2"], [FakeAmdGpu(busy=5)])
    for name, tree in trees.items():
        mount_over_sys_class_drm(cluster, name, tree / "drm")
    assert not Path("/sys/class/drm").exists()  # the test process's view is untouched
    return cluster, trees, hosts_yaml(cluster, tmp_path / "hosts.yaml")


def gpus_json(path: Path, *extra: str) -> dict:
    proc = run_cli(
        ["gpus", str(path), "--json", "--once", "--interval", "0.3", *extra], timeout=120
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return {h["name"]: h for h in json.loads(proc.stdout.splitlines()[-1])["hosts"]}


def test_gpus_json_and_cluster_screen_over_ssh(amd_hosts):
    _, trees, path = amd_hosts
    hosts = gpus_json(path)
    node1, node2 = hosts["node1"], hosts["node2"]
    assert node1["source"] == "amdgpu-sysfs"
    assert [(g["index"], g["util_percent"], g["vendor"]) for g in node1["gpus"]] == [
        (i, 90.0 + i, "amd") for i in range(8)
    ]
    g = node1["gpus"][0]
    assert (g["temperature_c"], g["power_w"], g["memory_total_bytes"]) == (
        41.0,
        142.0,
        196592 * MIB,
    )
    assert node2["source"] == "nvml+amdgpu-sysfs"
    assert [(g["vendor"], g["util_percent"]) for g in node2["gpus"]] == [
        ("nvidia", 60.0),
        ("nvidia", 61.0),
        ("amd", 5.0),
    ]

    asyncio.run(_cluster_screen(path, trees["node1"]))


async def _cluster_screen(path: Path, node1_tree: Path) -> None:
    from tui.app import VerlTuiApp
    from tui.config.hosts import load_inventory
    from tui.widgets.gpu_table import GpuTable

    app = VerlTuiApp(load_inventory(path), interval=0.3)
    async with app.run_test(size=(160, 40)) as pilot:
        table = app.screen.query_one(GpuTable)

        async def screen_shows(*needles: str) -> str:
            deadline = time.monotonic() + 60
            while True:
                lines = [table.render_line(y).text for y in range(table.size.height)]
                text = str(app.screen.query_one("#summary").render()) + "\n" + "\n".join(lines)
                if all(n in text for n in needles):
                    return text
                assert time.monotonic() < deadline, (needles, text)
                await pilot.pause(0.2)

        # (vendor words are dropped in the name column: "AMD Instinct ", "NVIDIA ")
        text = await screen_shows("GPUs 11", "MI300X", "H100 80GB HBM3")
        assert text.count("MI300X") == 9 and "AMD Instinct" not in text and "no NVML" not in text
        assert "8 GPUs · mean util 94%" in text and "3 GPUs" in text
        # The test drives the tree; the host's streaming agent sees it on its next sweep:
        # one GPU hot and full, six gone from sysfs (kept at their indexes, with an error).
        write_tree(
            node1_tree,
            [
                FakeAmdGpu(pci="0000:0c:00.0", busy=3),
                FakeAmdGpu(
                    pci="0000:22:00.0", busy=100, vram_used=196000 * MIB, temps={"junction": 95_000}
                ),
            ],
        )
        # Indexes did not shift: six error rows; the summary (it trails the table by up to
        # half a second) counts the five that answer.
        text = await screen_shows(
            "95°C", "GPU 0000:38:00.0 is gone", "GPU 0000:df:00.0 is gone", "GPUs 5 "
        )
        assert text.count(" is gone from /sys/class/drm") == 6


@pytest.mark.ray  # brings Ray up itself
def test_up_gives_ray_the_amd_gpus_and_the_mi300_preset_fits(amd_hosts, tmp_path):
    path = amd_hosts[2]
    # node1 alone: 8 MI300X. verl's bundles want 3 CPUs per GPU; this machine has 2 cores.
    path.write_text(
        path.read_text().split("  - name: node2")[0].replace("ray:\n", "ray:\n  num_cpus: 24\n")
    )
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}
    try:
        up = run_cli(["up", str(path)], env=env, timeout=240)
        assert up.returncode == 0, up.stdout + up.stderr
        st = run_cli(["status", str(path), "--json"], env=env, timeout=120)
        assert st.returncode == 0, st.stderr
        (node,) = json.loads(st.stdout)["nodes"]
        assert node["host"] == "node1" and node["gpus"] == 8
        # The MI300 preset (1 node x 8 GPUs) checked against this live AMD cluster.
        check = run_cli(
            ["profile", "check", "grpo-mi300", "--hosts", str(path), "--json"], env=env, timeout=240
        )
        doc = json.loads(check.stdout)
        assert check.returncode == 0 and doc["ok"] is True, check.stdout + check.stderr
        assert not [p for p in doc["problems"] if p["level"] == "error"]
    finally:
        run_cli(["down", str(path)], env=env, timeout=120, text=False)
