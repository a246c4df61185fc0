"""Regenerate screenshots/ from a real run: the cockpit over real OpenSSH hosts in network
namespaces (the test harness), each host's agent reading a fake libnvidia-ml.so.1 whose values
change while we watch. Needs root, sshd, gcc and rsvg-convert (librsvg2-bin).

    .venv/bin/python scripts/screenshots.py

The real-GPU screenshot (cluster_real_gpus.*) comes from scripts/real_gpu_check.py on a GPU
machine; this script only converts it to PNG if the SVG is present.
"""

from __future__ import annotations

import asyncio
import math
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from fakenvml.fakenvml import MIB, FakeGpu, build_fake_nvml, write_state  # noqa: E402
from harness.nshosts import NsCluster  # noqa: E402

from tui.app import VerlTuiApp  # noqa: E402
from tui.config.hosts import load_inventory  # noqa: E402

OUT = ROOT / "screenshots"
SIZE = (160, 46)


def gpus_at(host_i: int, step: int) -> list[FakeGpu]:
    out = []
    for g in range(8):
        wave = 0.5 + 0.5 * math.sin((step + 5 * g + 11 * host_i) / 4.0)
        idle = host_i == 1 and g == 5
        out.append(FakeGpu(
            util=2 if idle else int(55 + 44 * wave),
            mem_util=int(30 * wave),
            memory_used=(80_900 if (host_i == 2 and g == 3) else int(40_000 + 30_000 * wave)) * MIB,
            temperature=86 if (host_i == 0 and g == 6) else int(50 + 18 * wave),
            power_mw=75_000 if idle else int(200_000 + 450_000 * wave),
            processes=[] if idle else [(4000 + 10 * host_i + g, int(38_000 + 30_000 * wave) * MIB)],
        ))
    return out


class Scenario:
    """Three GPU hosts whose load moves, one that will die, and one that never answers."""

    def __init__(self, work: Path):
        self.lib = build_fake_nvml(work / "nvml")
        self.states = {f"node{i}": work / f"node{i}.nvml" for i in range(1, 5)}
        for i, path in enumerate(self.states.values()):
            write_state(path, gpus_at(i, 0))
        env = {name: {"LD_LIBRARY_PATH": str(self.lib), "FAKE_NVML_STATE": str(path)}
               for name, path in self.states.items()}
        self.cluster = NsCluster(4, work / "hosts", host_env=env)
        self.stop = threading.Event()
        self.hosts_yaml = work / "hosts.yaml"

    def start(self) -> None:
        self.cluster.start()
        c = self.cluster
        lines = ["cluster: grpo-qwen3-32b", f"python: {sys.executable}", "ssh:", "  user: root",
                 f"  identity_file: {c.client_key}", f"  known_hosts: {c.known_hosts}",
                 "  config: ''", "  connect_timeout: 3", "hosts:"]
        names = ["gpu-a01", "gpu-a02", "gpu-a03", "gpu-a04"]
        for name, h in zip(names, c.hosts, strict=True):
            lines += [f"  - name: {name}", f"    address: {h.address}"]
        lines += ["  - name: gpu-a05", f"    address: {c.unused_address()}"]
        self.hosts_yaml.write_text("\n".join(lines) + "\n")
        threading.Thread(target=self._animate, daemon=True).start()

    def _animate(self) -> None:
        step = 0
        while not self.stop.wait(0.25):
            step += 1
            for i, path in enumerate(self.states.values()):
                write_state(path, gpus_at(i, step))

    def close(self) -> None:
        self.stop.set()
        self.cluster.stop()


async def shoot(scenario: Scenario) -> list[Path]:
    inv = load_inventory(scenario.hosts_yaml)
    app = VerlTuiApp(inv, interval=0.25)
    shots = []

    def save(name: str) -> None:
        path = OUT / f"{name}.svg"
        app.save_screenshot(str(path))
        shots.append(path)

    async with app.run_test(size=SIZE) as pilot:
        await asyncio.sleep(28)  # ~110 samples of history per GPU
        scenario.cluster.kill_host("node4")
        await asyncio.sleep(2.5)
        await pilot.press("j", "j")
        await pilot.pause(0.5)
        save("cluster")
        await pilot.press("question_mark")
        await pilot.pause(0.5)
        save("help")
        await pilot.press("escape", "s")
        await pilot.pause(0.5)
        await pilot.press("slash", *"a02")
        await pilot.pause(0.6)
        save("filter_sort")
        await pilot.press("escape", "G")
        await pilot.pause(0.5)
        save("host_problems")
        await pilot.press("ctrl+p")
        await pilot.pause(0.3)
        await pilot.press(*"sort")
        await pilot.pause(0.6)
        save("command_palette")
    return shots


def to_png(svg: Path) -> Path:
    # rsvg collapses runs of spaces unless told to keep them (Textual's SVG relies on them).
    text = svg.read_text().replace("<svg ", '<svg xml:space="preserve" ', 1)
    png = svg.with_suffix(".png")
    with tempfile.NamedTemporaryFile("w", suffix=".svg") as tmp:
        tmp.write(text)
        tmp.flush()
        subprocess.run(["rsvg-convert", tmp.name, "-o", str(png)], check=True)
    return png


def main() -> int:
    if not shutil.which("rsvg-convert"):
        print("needs rsvg-convert: apt-get install librsvg2-bin", file=sys.stderr)
        return 2
    OUT.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        scenario = Scenario(Path(tmp))
        try:
            scenario.start()
            t0 = time.monotonic()
            shots = asyncio.run(shoot(scenario))
        finally:
            scenario.close()
    real = OUT / "cluster_real_gpus.svg"
    if real.exists():
        shots.append(real)
    for svg in shots:
        print(to_png(svg).relative_to(ROOT), f"({time.monotonic() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
