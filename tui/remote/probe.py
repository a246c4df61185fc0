#!/usr/bin/env python3
"""verl-tui host probe: prints ONE JSON object of facts about this host, then exits 0.

Shipped to hosts as ``PYTHON -c SOURCE --ports 6379,8265`` with the host's configured
interpreter (see tui/cluster/probe.py): SOURCE is this module joined with its parts
(amd_cards, probe_gpus) into one self-contained text by the loader (tui/remote/__init__.py):
stdlib only, Python 3.8+ (older ones still report their version), no imports from ``tui``
once joined, and never ``import ray``/``torch``/``numpy`` -- seconds of import time, and the
probe must work where they are broken. Versions come from package metadata instead.

Every section is guarded: a failure lands in ``errors[section]`` as one line and that section's
fields stay null. Output keys are documented on tui.cluster.probe.HostFacts.
"""

import sys

if __name__ == "__main__":
    # `-c` puts the working directory first on sys.path: a stray json.py in $HOME must not win.
    sys.path[:] = [p for p in sys.path if p not in ("", ".")]

import glob
import json
import os
import platform
import re
import shutil
import socket
import struct
import subprocess
import tempfile
import time

# Parts of this program (tui/remote/__init__.py BUNDLES): the loader joins them after this
# text and drops this import, so their names are used only inside functions here.
from tui.remote.hf_cache import hub_cache
from tui.remote.probe_gpus import _amd_gpus, _nvidia_gpus
from tui.remote.tracing import tracing_facts

PROBE_PROTOCOL = 1
PACKAGES = (
    "ray",
    "verl",
    "debugpy",
    "numpy",
    "numexpr",
    "mkl",
    "mkl-service",
    "nvidia-ml-py",
    "torch",
    "vllm",
    "sglang",
)
ENV_KEYS = (
    "NCCL_SOCKET_IFNAME",
    "GLOO_SOCKET_IFNAME",
    "NCCL_IB_HCA",
    "NCCL_IB_DISABLE",
    "NUMEXPR_MAX_THREADS",
    "MKL_THREADING_LAYER",
    "MKL_SERVICE_FORCE_INTEL",
    "HF_HOME",
    "HF_HUB_CACHE",
    "TRANSFORMERS_CACHE",
    "XDG_CACHE_HOME",
    "CUDA_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
    "RAY_ADDRESS",
    "RAY_USE_MULTIPROCESSING_CPU_COUNT",
    "RAY_DEFAULT_PYTHON_VERSION_MATCH_LEVEL",
    "LD_LIBRARY_PATH",
    "PYTHONPATH",
    "VIRTUAL_ENV",
)
# Processes that are Ray's own: gcs_server/raylet binaries, ray::* workers and agents,
# ray-dashboard-* modules, and Python processes running code from the ray package.
RAY_COMMS = ("gcs_server", "raylet")
RAY_CMDLINE_RE = re.compile(r"[/\\](?:site|dist)-packages[/\\]ray[/\\]|(?:^|\s)-m\s+ray\.")
IBSTAT_TIMEOUT_S = 10.0


def _one_line(exc):
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


def _read(path, limit=1 << 20):
    with open(path, "rb") as f:
        return f.read(limit).decode("utf-8", "replace")


# ------------------------------------------------------------------------------ sections


def python_section():
    return {
        "executable": sys.executable,
        "realpath": os.path.realpath(sys.executable) if sys.executable else None,
        "version": platform.python_version(),
        "implementation": platform.python_implementation(),
        "prefix": sys.prefix,
        "base_prefix": getattr(sys, "base_prefix", sys.prefix),
    }


def _metadata_version(name):
    try:
        from importlib import metadata
    except ImportError:  # Python < 3.8: look for the dist-info folder ourselves
        return _scan_version(name)
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _scan_version(name):
    norm = re.sub(r"[-_.]+", "_", name).lower()
    for entry in sys.path:
        for meta in glob.glob(os.path.join(entry, "*.dist-info")) + glob.glob(
            os.path.join(entry, "*.egg-info")
        ):
            base = os.path.basename(meta).rsplit(".", 1)[0]
            dist, _, version = base.partition("-")
            if re.sub(r"[-_.]+", "_", dist).lower() == norm and version:
                return version
    return None


def packages_section(errors):
    out = {}
    for name in PACKAGES:
        try:
            out[name] = _metadata_version(name)
        except Exception as exc:  # a broken METADATA file must not hide the others
            out[name] = None
            errors["packages." + name] = _one_line(exc)
    return out


_MKL_CONFIG_RE = re.compile(r"mkl_rt|['\"]name['\"]\s*:\s*['\"]mkl", re.IGNORECASE)


def mkl_section(packages):
    """Whether numpy is linked with MKL, read from its build config without importing it."""
    import importlib.util

    numpy_mkl = None
    libs = []
    spec = importlib.util.find_spec("numpy")  # a top-level find_spec does not run numpy
    if spec is not None and spec.submodule_search_locations:
        root = next(iter(spec.submodule_search_locations))
        config = os.path.join(root, "__config__.py")
        if os.path.exists(config):
            numpy_mkl = bool(_MKL_CONFIG_RE.search(_read(config)))
        for pattern in (
            os.path.join(root, ".libs", "*mkl*"),
            os.path.join(os.path.dirname(root), "numpy.libs", "*mkl*"),
        ):
            libs += glob.glob(pattern)
    libs += glob.glob(os.path.join(sys.prefix, "lib", "libmkl_rt.so*"))
    libs += glob.glob(os.path.join(sys.prefix, "lib", "libmkl_core.so*"))
    present = bool(numpy_mkl or libs or packages.get("mkl") or packages.get("mkl-service"))
    return {"numpy_mkl": numpy_mkl, "libs": sorted(set(libs))[:10], "present": present}


def gpu_section():
    """NVIDIA GPUs first, then AMD ones (the agent's index order); ``amd_count`` says how
    many of ``count`` are AMD's, ``source`` is "+"-joined when both vendors are present."""
    nvidia = _nvidia_gpus()
    try:
        amd = _amd_gpus()
    except Exception as exc:  # never lose the NVIDIA answer to an AMD probing bug
        nvidia["amd_error"] = _one_line(exc)
        return nvidia
    if amd is None:
        return dict(nvidia, amd_count=0)
    if not nvidia.get("count"):  # no NVIDIA stack, or none found: an AMD host
        return {
            "count": amd["count"],
            "names": amd["names"],
            "driver": None,
            "source": amd["source"],
            "error": None,
            "amd_count": amd["count"],
        }
    return {
        "count": nvidia["count"] + amd["count"],
        "names": nvidia["names"] + amd["names"],
        "driver": nvidia.get("driver"),
        "source": f"{nvidia['source']}+{amd['source']}",
        "error": None,
        "amd_count": amd["count"],
    }


def _cgroup_cpu_quota():
    """CPUs allowed by a cgroup quota (v1 cfs or v2 cpu.max), as Ray reads them; None: none."""
    try:
        quota = float(_read("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"))
        period = float(_read("/sys/fs/cgroup/cpu/cpu.cfs_period_us"))
        return quota / period if quota > 0 and period > 0 else None
    except (OSError, ValueError):
        pass
    try:
        quota_s, period_s = _read("/sys/fs/cgroup/cpu.max").split()
    except (OSError, ValueError):
        return None
    if quota_s.isdigit() and period_s.isdigit() and int(period_s) > 0:
        return max(float(quota_s) / float(period_s), 1.0)
    return None


def _cgroup_cpuset():
    try:
        text = _read("/sys/fs/cgroup/cpuset/cpuset.cpus").strip()
    except OSError:
        return None
    count = 0
    for part in text.split(","):
        if "-" in part:
            lo, hi = part.split("-")
            count += int(hi) - int(lo) + 1
        elif part.strip():
            count += 1
    return count or None


def cpu_section():
    try:
        affinity = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        affinity = None
    count = os.cpu_count()
    quota = _cgroup_cpu_quota()
    cpuset = _cgroup_cpuset()
    # Ray's own rule (ray._private.utils.get_num_cpus): cpu_count, unless a cgroup quota or a
    # v1 cpuset says otherwise (the smaller of the two), truncated.
    ray_cpus = count
    if not os.environ.get("RAY_USE_MULTIPROCESSING_CPU_COUNT"):
        limits = [x for x in (quota, cpuset) if x]
        if limits:
            ray_cpus = int(min(limits))
    return {
        "count": count,
        "affinity": affinity,
        "cgroup_quota": quota,
        "cgroup_cpuset": cpuset,
        "ray_detected": ray_cpus,
    }


def memory_section():
    mem = {}
    for line in _read("/proc/meminfo").splitlines():
        key, _, rest = line.partition(":")
        fields = rest.split()
        if fields and fields[0].isdigit():
            mem[key] = int(fields[0]) * (1024 if fields[1:2] == ["kB"] else 1)
    limit = None
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = _read(path).strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < (1 << 60):
            limit = int(text)
        break
    return {
        "total": mem.get("MemTotal"),
        "available": mem.get("MemAvailable"),
        "cgroup_limit": limit,
    }


# ioctl numbers from <linux/sockios.h>, flags from <net/if.h>
SIOCGIFFLAGS = 0x8913
SIOCGIFADDR = 0x8915
IFF_UP = 0x1
IFF_LOOPBACK = 0x8
IFF_RUNNING = 0x40


def _ipv6_by_interface():
    out = {}
    try:
        text = _read("/proc/net/if_inet6")
    except OSError:
        return out
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 6:
            continue
        raw, scope, name = fields[0], int(fields[3], 16), fields[5]
        addr = socket.inet_ntop(socket.AF_INET6, bytes.fromhex(raw))
        out.setdefault(name, []).append({"address": addr, "link_local": scope == 0x20})
    return out


def interfaces_section():
    import fcntl

    v6 = _ipv6_by_interface()
    out = []
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        for _index, name in socket.if_nameindex():
            packed = struct.pack("256s", name.encode()[:15])
            entry = {
                "name": name,
                "ipv4": [],
                "ipv6": [a["address"] for a in v6.get(name, []) if not a["link_local"]],
                "up": None,
                "loopback": name == "lo",
                "running": None,
            }
            try:
                flags = struct.unpack("H", fcntl.ioctl(sock, SIOCGIFFLAGS, packed)[16:18])[0]
                entry["up"] = bool(flags & IFF_UP)
                entry["running"] = bool(flags & IFF_RUNNING)
                entry["loopback"] = bool(flags & IFF_LOOPBACK)
            except OSError:
                pass
            try:
                # The interface's primary IPv4 address (what NCCL and Gloo bind to).
                res = fcntl.ioctl(sock, SIOCGIFADDR, packed)
                entry["ipv4"].append(socket.inet_ntoa(res[20:24]))
            except OSError:
                pass  # no IPv4 address on this interface
            out.append(entry)
    finally:
        sock.close()
    return out


def env_section():
    return {key: os.environ[key] for key in ENV_KEYS if key in os.environ}


def hf_cache_section():
    path, source = hub_cache(os.environ)
    path = os.path.abspath(path)
    out = {
        "path": path,
        "source": source,
        "exists": os.path.isdir(path),
        "readable": False,
        "writable": False,
        "checked": None,
        "error": None,
    }
    # Absent: the hub creates it on first use, so what matters is its nearest existing parent.
    checked = path
    while not os.path.exists(checked) and os.path.dirname(checked) != checked:
        checked = os.path.dirname(checked)
    out["checked"] = checked
    if not os.path.isdir(checked):
        out["error"] = f"{checked} is not a directory"
        return out
    out["readable"] = os.access(checked, os.R_OK | os.X_OK)
    try:
        fd, tmp = tempfile.mkstemp(prefix=".verl-tui-probe-", dir=checked)
        os.close(fd)
        os.unlink(tmp)
        out["writable"] = True
    except OSError as exc:
        out["error"] = f"cannot create a file in {checked}: {exc.strerror or exc}"
    return out


def _parse_ibstat(text):
    ports = []
    ca = port = None
    for raw in text.splitlines():
        line = raw.strip()
        m = re.match(r"CA '([^']+)'", line)
        if m:
            ca, port = m.group(1), None
            continue
        m = re.match(r"Port (\d+):$", line)
        if m and ca is not None:
            port = {
                "ca": ca,
                "port": int(m.group(1)),
                "state": None,
                "physical_state": None,
                "rate": None,
                "link_layer": None,
            }
            ports.append(port)
            continue
        if port is None or ":" not in line:
            continue
        key, _, value = line.partition(":")
        key, value = key.strip().lower(), value.strip()
        if key == "state":
            port["state"] = value
        elif key == "physical state":
            port["physical_state"] = value
        elif key == "rate":
            port["rate"] = value
        elif key == "link layer":
            port["link_layer"] = value
    return ports


def _sysfs_ib():
    ports = []
    for port_dir in sorted(glob.glob("/sys/class/infiniband/*/ports/*")):
        parts = port_dir.split(os.sep)

        def attr(name, port_dir=port_dir):
            try:
                value = _read(os.path.join(port_dir, name)).strip()
            except OSError:
                return None
            return value.split(":", 1)[1].strip() if ":" in value else value  # "4: ACTIVE"

        state, phys = attr("state"), attr("phys_state")
        ports.append(
            {
                "ca": parts[-3],
                "port": int(parts[-1]) if parts[-1].isdigit() else 0,
                "state": state.capitalize() if state else None,
                "physical_state": phys,
                "rate": attr("rate"),
                "link_layer": attr("link_layer"),
            }
        )
    return ports


def ib_section():
    ibstat = shutil.which("ibstat")
    if ibstat is not None:
        proc = subprocess.run([ibstat], capture_output=True, text=True, timeout=IBSTAT_TIMEOUT_S)
        if proc.returncode == 0:
            return {"source": "ibstat", "ports": _parse_ibstat(proc.stdout), "error": None}
        msg = (proc.stderr or proc.stdout).strip().splitlines()
        return {
            "source": "ibstat",
            "ports": [],
            "error": "ibstat: " + (msg[0] if msg else f"exit {proc.returncode}"),
        }
    if os.path.isdir("/sys/class/infiniband"):
        return {"source": "sysfs", "ports": _sysfs_ib(), "error": None}
    return {"source": None, "ports": [], "error": None}


def _decode_addr(hexaddr):
    raw = bytes.fromhex(hexaddr)
    if len(raw) == 4:
        return socket.inet_ntop(socket.AF_INET, struct.pack("<I", struct.unpack(">I", raw)[0]))
    # tcp6: four 32-bit words, each in host (little-endian) order
    words = struct.unpack(">4I", raw)
    return socket.inet_ntop(socket.AF_INET6, struct.pack("<4I", *words))


def _proc_text(pid, name):
    try:
        return _read(f"/proc/{pid}/{name}", 4096)
    except OSError:
        return None


def processes_and_listeners(ports):
    """Listeners on `ports` with their owners, and Ray's processes; one pass over /proc."""
    listening = {}  # socket inode -> (port, address)
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = _read(path, 1 << 26).splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 10 or fields[3] != "0A":  # 0A: TCP_LISTEN
                continue
            hexaddr, _, hexport = fields[1].partition(":")
            port = int(hexport, 16)
            if port in ports:
                listening[fields[9]] = (port, _decode_addr(hexaddr))
    listeners = {str(p): None for p in ports}
    ray = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        comm = (_proc_text(pid, "comm") or "").strip()
        cmdline = None
        # A zombie (a container's PID 1 that reaps nothing, once Ray was stopped) runs nothing.
        if (_proc_text(pid, "stat") or "").rpartition(")")[2].split()[:1] == ["Z"]:
            continue
        if comm in RAY_COMMS or comm.startswith(("ray::", "ray-dashboard")):
            ray.setdefault(comm, []).append(int(pid))
        elif comm.startswith("python"):
            cmdline = (_proc_text(pid, "cmdline") or "").replace("\0", " ").strip()
            if RAY_CMDLINE_RE.search(cmdline):
                ray.setdefault("python (ray)", []).append(int(pid))
        if all(listeners.get(str(port)) for port, _ in listening.values()):
            continue  # every listener has its owner: no more fd tables to read
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if not link.startswith("socket:["):
                continue
            hit = listening.get(link[8:-1])
            if hit is None or listeners.get(str(hit[0])):
                continue
            if cmdline is None:
                cmdline = (_proc_text(pid, "cmdline") or "").replace("\0", " ").strip()
            listeners[str(hit[0])] = {
                "pid": int(pid),
                "name": comm,
                "address": hit[1],
                "cmdline": cmdline[:300],
                "ray": bool(
                    comm in RAY_COMMS
                    or comm.startswith(("ray::", "ray-dashboard"))
                    or RAY_CMDLINE_RE.search(cmdline)
                ),
            }
    # A listener whose owner we may not see (another user's process): known, owner unknown.
    for port, address in listening.values():
        if listeners.get(str(port)) is None:
            listeners[str(port)] = {
                "pid": None,
                "name": None,
                "address": address,
                "cmdline": None,
                "ray": False,
            }
    return listeners, ray


# ------------------------------------------------------------------------------ main


def _parse_ports(argv):
    ports = []
    for i, arg in enumerate(argv):
        value = None
        if arg == "--ports" and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith("--ports="):
            value = arg.split("=", 1)[1]
        if value:
            ports += [int(p) for p in value.split(",") if p.strip().isdigit()]
    return sorted(set(p for p in ports if 0 < p < 65536))


def main(argv):
    started = time.time()
    errors = {}
    out = {"protocol": PROBE_PROTOCOL}

    def guard(key, fn, *args):
        try:
            out[key] = fn(*args)
        except Exception as exc:
            out[key] = None
            errors[key] = _one_line(exc)

    guard("hostname", socket.gethostname)
    guard("python", python_section)
    guard("path", lambda: os.environ.get("PATH"))
    guard("packages", packages_section, errors)
    guard("mkl", mkl_section, out.get("packages") or {})
    guard("gpus", gpu_section)
    guard("cpus", cpu_section)
    guard("memory", memory_section)
    guard("interfaces", interfaces_section)
    guard("env", env_section)
    guard("hf_cache", hf_cache_section)
    guard("infiniband", ib_section)
    guard("tracing", tracing_facts)  # py-spy and ptrace, for `verl-tui stack`
    ports = []
    try:
        ports = _parse_ports(argv)
    except ValueError as exc:
        errors["ports"] = _one_line(exc)
    guard("procs", processes_and_listeners, set(ports))
    procs = out.pop("procs", None) or ({str(p): None for p in ports}, {})
    out["listeners"], out["ray_processes"] = procs
    out["ray_running"] = any(k in out["ray_processes"] for k in RAY_COMMS)
    out["errors"] = errors
    out["probe_s"] = round(time.time() - started, 4)
    out["time"] = time.time()  # last: the cockpit pairs it with when the answer arrived
    sys.stdout.write(json.dumps(out, separators=(",", ":")) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except BaseException as exc:  # the cockpit must always get one JSON line
        sys.stdout.write(
            json.dumps({"protocol": PROBE_PROTOCOL, "fatal": _one_line(exc), "time": time.time()})
            + "\n"
        )
        sys.stdout.flush()
    # A daemon thread stuck in a wedged driver must not keep the process alive.
    os._exit(0)
