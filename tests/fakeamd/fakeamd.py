"""A fake amdgpu sysfs tree: what the agent reads under /sys/class/drm on an AMD host.

File names, units and formats follow the kernel's amdgpu documentation
(Documentation/gpu/amdgpu/thermal.rst "HWMON Interfaces", "*_busy_percent";
driver-misc.rst "GPU Product Information", "GPU Memory Usage Information"; the attribute
show functions in drivers/gpu/drm/amd/pm/amdgpu_pm.c and amdgpu/amdgpu_vram_mgr.c):

=======================================  ===================================================
card<N>/device/vendor, device            PCI ids, "0x1002\\n", "0x74a1\\n"
card<N>/device/gpu_busy_percent          "%d\\n" percent (SMU's aggregate IP activity)
card<N>/device/mem_busy_percent          "%d\\n" percent (memory controller)
card<N>/device/mem_info_vram_total       "%llu\\n" bytes
card<N>/device/mem_info_vram_used        "%llu\\n" bytes
card<N>/device/product_name              FRU EEPROM product name (may be absent or empty)
card<N>/device/unique_id                 "%016llx\\n" (GFX9 and newer)
card<N>/device/pp_dpm_sclk               the shader clock's DPM levels, "%u: %uMhz %s\\n"
                                         each, the current one marked "*"
card<N>/device/hwmon/hwmon<M>/name       "amdgpu\\n"
  temp[1-3]_input, temp[1-3]_label       millidegrees C; labels "edge", "junction", "mem"
                                         (GC 9.4.3, MI300: no temp1/edge)
  power1_average, power1_input           microwatts (a product may have only one)
  power1_cap                             microwatts
=======================================  ===================================================

``card<N>/device`` is a symlink to a PCI device directory named by its address, as in real
sysfs; ``card<N>-DP-1`` connector entries and ``renderD<M>`` nodes sit beside the cards and
must be ignored. `write_tree` rewrites the tree in place (each file by atomic rename), so a
test changes values while an agent reads them. `mount_over_sys_class_drm` shows a tree at
/sys/class/drm inside one namespace host (tests/harness), and nowhere else.
"""

from __future__ import annotations

import os
import shlex
import shutil
from dataclasses import dataclass, field
from pathlib import Path

GIB = 1024**3
MIB = 1024**2
MI300X_VRAM = 196592 * MIB  # 192 GiB HBM3, as amd-smi reports it (MB)
UNREADABLE = "/proc/self/mem"  # reading offset 0 fails with EIO, even for root


@dataclass
class FakeAmdGpu:
    """One GPU. None for an optional file leaves it out (as on an ASIC without it)."""

    pci: str = "0000:0c:00.0"
    device_id: str = "0x74a1"  # MI300X OAM
    product_name: str | None = "AMD Instinct MI300X"
    unique_id: str | None = None  # default: derived from the PCI address
    busy: int = 0
    mem_busy: int | None = 0
    vram_used: int = 283 * MIB
    vram_total: int = MI300X_VRAM
    temps: dict[str, int] = field(default_factory=lambda: {"junction": 41_000, "mem": 35_000})
    power_average_uw: int | None = None  # MI300X: power1_input only
    power_input_uw: int | None = 142_000_000
    power_cap_uw: int | None = 750_000_000
    # pp_dpm_sclk's levels in MHz and the current one's position (None: no file)
    sclk_levels: tuple[int, ...] | None = (500, 1300, 2100)
    sclk_current: int = 1
    driver: str = "amdgpu"
    vendor: str = "0x1002"
    # file name (relative to device/ or "hwmon/<file>") -> raw text, replacing the value
    raw: dict[str, str] = field(default_factory=dict)
    # file names whose read fails with EIO (a symlink to /proc/self/mem)
    unreadable: set[str] = field(default_factory=set)


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    if path.is_symlink() or path.is_dir():
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    os.replace(tmp, path)


def _link(path: Path, target: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_symlink() and os.readlink(path) == target:
        return
    tmp = path.with_name(f".{path.name}.lnk")
    if tmp.is_symlink():
        tmp.unlink()
    tmp.symlink_to(target)
    os.replace(tmp, path)


def _files(gpu: FakeAmdGpu) -> dict[str, str | None]:
    uid = (
        gpu.unique_id
        if gpu.unique_id is not None
        else (
            "%016x" % (0x5A00_0000_0000_0000 | int(gpu.pci.replace(":", "").replace(".", ""), 16))
        )
    )
    files: dict[str, str | None] = {
        "vendor": f"{gpu.vendor}\n",
        "device": f"{gpu.device_id}\n",
        "gpu_busy_percent": f"{gpu.busy}\n",
        "mem_busy_percent": None if gpu.mem_busy is None else f"{gpu.mem_busy}\n",
        "mem_info_vram_total": f"{gpu.vram_total}\n",
        "mem_info_vram_used": f"{gpu.vram_used}\n",
        "product_name": None if gpu.product_name is None else f"{gpu.product_name}\n",
        "pp_dpm_sclk": None
        if gpu.sclk_levels is None
        else "".join(
            f"{i}: {mhz}Mhz{' *' if i == gpu.sclk_current else ''}\n"
            for i, mhz in enumerate(gpu.sclk_levels)
        ),
        "unique_id": None if uid == "" else f"{uid}\n",
        "hwmon/name": "amdgpu\n",
        "hwmon/power1_average": None
        if gpu.power_average_uw is None
        else f"{gpu.power_average_uw}\n",
        "hwmon/power1_input": None if gpu.power_input_uw is None else f"{gpu.power_input_uw}\n",
        "hwmon/power1_cap": None if gpu.power_cap_uw is None else f"{gpu.power_cap_uw}\n",
    }
    channels = {"edge": 1, "junction": 2, "mem": 3}
    for label, milli in gpu.temps.items():
        n = channels[label]
        files[f"hwmon/temp{n}_input"] = f"{milli}\n"
        files[f"hwmon/temp{n}_label"] = f"{label}\n"
    for name in (
        "temp1_input",
        "temp2_input",
        "temp3_input",
        "temp1_label",
        "temp2_label",
        "temp3_label",
    ):
        files.setdefault(f"hwmon/{name}", None)
    files.update(gpu.raw)
    return files


def write_tree(root: Path, gpus: list[FakeAmdGpu]) -> Path:
    """Make or update ``root/drm`` (what is shown as /sys/class/drm) for ``gpus``, card0..;
    GPUs no longer listed disappear. Returns ``root/drm``."""
    root = Path(root)
    drm, devices = root / "drm", root / "devices"
    drm.mkdir(parents=True, exist_ok=True)
    devices.mkdir(parents=True, exist_ok=True)
    _write(drm / "version", "drm 1.1.0 20060810\n")
    wanted_cards, wanted_devs = set(), set()
    for n, gpu in enumerate(gpus):
        dev = devices / gpu.pci
        wanted_devs.add(gpu.pci)
        card = drm / f"card{n}"
        wanted_cards.update({f"card{n}", f"card{n}-DP-1", f"renderD{128 + n}"})
        (card).mkdir(exist_ok=True)
        _link(card / "device", str(dev))
        (drm / f"card{n}-DP-1").mkdir(exist_ok=True)
        _write(drm / f"card{n}-DP-1" / "status", "disconnected\n")
        (drm / f"renderD{128 + n}").mkdir(exist_ok=True)
        _link(drm / f"renderD{128 + n}" / "device", str(dev))
        drivers = root / "drivers" / gpu.driver
        drivers.mkdir(parents=True, exist_ok=True)
        _link(dev / "driver", str(drivers))
        for rel, text in _files(gpu).items():
            path = dev / rel.replace("hwmon/", "hwmon/hwmon3/")
            if rel.split("/")[-1] in gpu.unreadable:
                _link(path, UNREADABLE)
            elif text is None:
                if path.is_symlink() or path.exists():
                    path.unlink()
            else:
                _write(path, text)
    for entry in drm.iterdir():
        if entry.name != "version" and entry.name not in wanted_cards:
            shutil.rmtree(entry) if not entry.is_symlink() else entry.unlink()
    for entry in devices.iterdir():
        if entry.name not in wanted_devs:
            shutil.rmtree(entry)
    return drm


def mount_script(tree: Path, keep: Path) -> str:
    """Shell run inside a host's mount namespace: /sys/class becomes a tmpfs holding the same
    entries (bind-mounted back from ``keep``, an empty directory) plus ``drm`` bound to
    ``tree``. Other hosts and the test process see nothing of it."""
    tree = shlex.quote(str(Path(tree).resolve()))
    return (
        f'set -e; keep={shlex.quote(str(keep))}; mount --bind /sys/class "$keep"; '
        "mount -t tmpfs -o mode=0755 vt-sysclass /sys/class; "
        'for e in "$keep"/*; do n=${e##*/}; mkdir /sys/class/"$n"; '
        'mount --bind "$e" /sys/class/"$n"; done; '
        f"mkdir -p /sys/class/drm; mount --bind {tree} /sys/class/drm"
    )


def mount_over_sys_class_drm(cluster, host: str, tree: Path) -> None:
    """Show ``tree`` (from `write_tree`) at /sys/class/drm inside namespace host ``host``."""
    keep = Path(tree).resolve().parent / f"sysclass-{host}"
    keep.mkdir(exist_ok=True)
    proc = cluster.exec_in(host, ["sh", "-c", mount_script(tree, keep)], timeout=30)
    if proc.returncode != 0:
        raise RuntimeError(
            f"mounting the fake amdgpu tree on {host} failed: "
            f"{(proc.stderr or proc.stdout).strip()}"
        )
