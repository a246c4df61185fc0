"""Which cards are amdgpu GPUs, from /sys/class/drm: shared by the GPU agent (which reads
each card's telemetry, tui/remote/gpu_amd.py) and the probe (which counts them), so both see
the same GPUs in the same order. A part joined into their sources by the loader
(tui/remote/__init__.py): stdlib only, Python 3.8+.
"""

import os

DRM_ROOT = os.environ.get("VERL_TUI_AGENT_DRM", "/sys/class/drm")
AMD_VENDOR_ID = "0x1002"
# PCI device ids -> marketing names where product_name (the board's FRU EEPROM) is absent;
# the ids are the ones Ray's AMD accelerator manager knows (ray/_private/accelerators/amd_gpu.py).
AMD_DEVICE_NAMES = {
    "0x738c": "AMD Instinct MI100",
    "0x7408": "AMD Instinct MI250X",
    "0x740c": "AMD Instinct MI250X/MI250",
    "0x740f": "AMD Instinct MI210",
    "0x74a0": "AMD Instinct MI300A",
    "0x74a1": "AMD Instinct MI300X",
    "0x74a2": "AMD Instinct MI308X",
    "0x74a5": "AMD Instinct MI325X",
    "0x74a9": "AMD Instinct MI300X HF",
    "0x75a0": "AMD Instinct MI350X",
    "0x75a3": "AMD Instinct MI355X",
}


class _Unreadable(Exception):
    """A sysfs file that exists but cannot be read (EIO, EACCES, a directory...)."""


def _sysfs(path):
    """A sysfs attribute's text, stripped; None when absent; _Unreadable when it fails."""
    try:
        with open(path, "rb") as f:
            return f.read(4096).decode("ascii", "replace").strip()
    except FileNotFoundError:
        return None
    except OSError as err:
        raise _Unreadable(f"{os.path.basename(path)}: {err.strerror or err}") from None


def _amd_cards(root):
    """[(pci address, card dir)] of the amdgpu devices under ``root``, by PCI address."""
    try:
        names = os.listdir(root)
    except OSError:
        return []
    cards = []
    for name in names:
        # card0 is the device; card0-DP-1 (connectors) and renderD128 are not.
        if not name.startswith("card") or not name[4:].isdigit():
            continue
        device = os.path.join(root, name, "device")
        try:
            if _sysfs(os.path.join(device, "vendor")) != AMD_VENDOR_ID:
                continue
        except _Unreadable:
            continue
        driver = os.path.join(device, "driver")
        if os.path.lexists(driver) and os.path.basename(os.path.realpath(driver)) != "amdgpu":
            continue  # e.g. an AMD device bound to vfio-pci for a VM
        cards.append((os.path.basename(os.path.realpath(device)), int(name[4:]), device))
    cards.sort(key=lambda c: (c[0], c[1]))
    return [(pci, device) for pci, _, device in cards]
