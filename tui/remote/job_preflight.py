"""Runs ON a host, with the host's interpreter (stdlib only): what one verl job needs of this
host, looked at without importing anything heavy.

    python -c SOURCE        (one JSON object on stdin, one JSON line on stdout)

Input (paths travel only here, never on a shell line)::

    {"env": {NAME: VALUE},            the job's env_vars (hosts.yaml ray.env + profile + --env)
     "paths": [{"value": str, "model": bool}],   data files / model folders, raw config text
     "hf_ids": [str], "modules": [str], "disks": {label: path},
     "resolve": [host name or address], "shm_need": int,
     "startup": {"modules": [dotted name], "wait": seconds}}

``${oc.env:NAME}`` / ``${oc.env:NAME,default}`` in a path is resolved here with this host's
environment overlaid with the job's env_vars: that is where verl's TaskRunner resolves it.
Modules are only located (``importlib.util.find_spec`` of the top-level name), never imported.
"""

import contextlib
import csv
import importlib.util
import io
import json
import os
import re
import socket
import sys

from tui.remote.hf_cache import hub_cache
from tui.remote.startup_imports import check_startup
from tui.remote.tracing import tracing_facts

_MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*\Z")
_OC_ENV = re.compile(r"\$\{oc\.env:([A-Za-z_][A-Za-z0-9_]*)(?:,([^}]*))?\}")
_TRUE = ("1", "true", "yes", "on")
_WEIGHTS = (".safetensors", ".bin", ".pt", ".pth", ".gguf")


def _one(text):
    return " ".join(str(text).split())[:300]


def resolve_env(value, env):
    """(value with every ${oc.env:...} replaced, the names that were unset and had no default)."""
    missing = []

    def sub(m):
        name, default = m.group(1), m.group(2)
        if name in env:
            return env[name]
        if default is not None:
            return default.strip().strip("'\"")
        missing.append(name)
        return m.group(0)

    return _OC_ENV.sub(sub, value), missing


def _weights_bytes(folder):
    total = 0
    for root, _dirs, names in os.walk(folder, followlinks=True):
        for name in names:
            if name.endswith(_WEIGHTS):
                with contextlib.suppress(OSError):  # blobs: stat follows the snapshot links
                    total += os.stat(os.path.join(root, name)).st_size
    return total


def check_path(item, env):
    value = str(item.get("value", ""))
    path, missing = resolve_env(value, env)
    out = {"value": value, "path": path}
    if missing:
        out["error"] = "unset on this host: " + ", ".join("$" + n for n in missing)
        return out
    if "${" in path:
        out["error"] = "interpolation not resolved"
        return out
    try:
        st = os.stat(path)
    except OSError as exc:
        out["exists"] = False
        out["error"] = _one(exc.strerror or exc)
        return out
    out["exists"] = True
    is_dir = os.path.isdir(path)
    out["kind"] = "dir" if is_dir else "file"
    out["readable"] = os.access(path, os.R_OK | (os.X_OK if is_dir else 0))
    if out["readable"] and not is_dir:
        try:
            with open(path, "rb") as fh:
                fh.read(1)
        except OSError as exc:
            out["readable"] = False
            out["error"] = _one(exc.strerror or exc)
    if item.get("model"):
        out["config_json"] = is_dir and os.path.isfile(os.path.join(path, "config.json"))
        out["bytes"] = _weights_bytes(path) if is_dir else st.st_size
    return out


def check_hf(ids, env):
    cache, source = hub_cache(env)
    offline = [
        n for n in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE") if env.get(n, "").lower() in _TRUE
    ]
    models = {}
    for repo in ids:
        folder = os.path.join(cache, "models--" + repo.replace("/", "--"), "snapshots")
        found = None
        try:
            for snap in sorted(os.listdir(folder)):
                if os.path.isfile(os.path.join(folder, snap, "config.json")):
                    found = os.path.join(folder, snap)
                    break
        except OSError:
            pass
        models[repo] = {
            "cached": found is not None,
            "bytes": _weights_bytes(found) if found else 0,
        }
    return {"cache": cache, "source": source, "offline": offline, "models": models}


def _top_levels(dist, wanted):
    """The top-level modules `dist` installs, as packages_distributions() reads them
    (top_level.txt, else the first part of each .py file it lists), looked for only among
    `wanted`: a RECORD that names none of them is not parsed (most of a venv's are not)."""
    declared = (dist.read_text("top_level.txt") or "").split()
    if declared:
        return wanted.intersection(declared)
    record = dist.read_text("RECORD")
    if record is None:  # an egg-info install lists its files elsewhere
        paths = [str(f) for f in dist.files or []]
    elif any(w in record for w in wanted):
        paths = [row[0] for row in csv.reader(io.StringIO(record)) if row]
    else:
        return set()
    out = set()
    for path in paths:
        parts = [p for p in path.split("/") if p and p != "."]
        if parts and os.path.splitext(parts[-1])[1] == ".py":
            out.add(parts[0] if len(parts) > 1 else os.path.splitext(parts[0])[0])
    return out & wanted


def installed_from(names):
    """Top-level module -> the distributions that install it, for `names` alone (the answer
    of packages_distributions() for them, without reading every distribution's file list
    and metadata: ~0.5 s of CPU a host and preflight in a 170-package venv, now ~0.1 s)."""
    wanted = set(names)
    out = {}
    try:
        import importlib.metadata as metadata

        for dist in metadata.distributions():
            hits = _top_levels(dist, wanted)
            if hits:
                name = dist.metadata["Name"]
                for module in sorted(hits):
                    out.setdefault(module, []).append(name)
    except Exception:  # a broken installation's metadata
        return {}
    return out


def verl_requires():
    """The installed verl's Requires-Dist lines (the cockpit names missing packages by them)."""
    try:
        import importlib.metadata as metadata

        return [_one(r) for r in (metadata.requires("verl") or [])[:400]]
    except Exception:  # no verl distribution metadata here
        return []


def check_modules(names, env):
    # The job's PYTHONPATH (ray.env / env_vars) is on the workers' sys.path: look there too.
    extra = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p not in sys.path]
    sys.path[0:0] = extra
    out = {}
    for name in names:
        try:
            spec = importlib.util.find_spec(name)  # a top-level name: nothing is imported
        except (ImportError, ValueError) as exc:
            out[name] = {"found": False, "error": _one(exc)}
            continue
        origin = None
        if spec is not None:
            origin = spec.origin or ",".join(spec.submodule_search_locations or [])
        out[name] = {"found": spec is not None, "origin": _one(origin or "")}
    found = [n for n in out if out[n]["found"]]
    dists = installed_from(found) if found else {}
    for name in found:
        out[name]["dists"] = [_one(d)[:100] for d in dists.get(name, [])[:4]]
    return out


def _existing(path):
    path = os.path.abspath(path)
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    return path


def ray_temp_dir(env):
    # Ray's own rule (ray._private.utils.get_user_temp_dir): RAY_TMPDIR, else the temp dir.
    return os.path.join(env.get("RAY_TMPDIR") or env.get("TMPDIR") or "/tmp", "ray")


def check_disk(value, env):
    path, missing = resolve_env(value, env) if value else (ray_temp_dir(env), [])
    out = {"path": path}
    if missing or "${" in path:
        out["error"] = "unset on this host: " + ", ".join("$" + n for n in missing)
        return out
    probe = _existing(path)
    out["checked"] = probe
    try:
        st = os.statvfs(probe)
    except OSError as exc:
        out["error"] = _one(exc.strerror or exc)
        return out
    out["free"] = st.f_bavail * st.f_frsize
    out["writable"] = os.access(probe, os.W_OK)
    return out


def meminfo_available():
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def check_limits():
    out = {"mem_available": meminfo_available()}
    try:
        st = os.statvfs("/dev/shm")
        out["shm"] = {"total": st.f_blocks * st.f_frsize, "free": st.f_bavail * st.f_frsize}
    except OSError as exc:
        out["shm"] = {"error": _one(exc.strerror or exc)}
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        inf = resource.RLIM_INFINITY
        out["nofile"] = [-1 if soft == inf else soft, -1 if hard == inf else hard]
    except (ImportError, OSError, ValueError):
        out["nofile"] = None
    return out


def check_names(names):
    out = {}
    for name in names:
        try:
            infos = socket.getaddrinfo(name, None, proto=socket.IPPROTO_TCP)
            out[name] = {"ok": True, "addrs": sorted({i[4][0] for i in infos})[:4]}
        except (OSError, UnicodeError) as exc:
            out[name] = {"ok": False, "error": _one(exc)}
    return out


def startup_imports(req, env):
    """The job's start-up imports (startup_imports.py), where the entry point's package is
    found at all (a host without verl is the doctor's finding, not this one's)."""
    startup = req.get("startup")
    if not isinstance(startup, dict):
        return None
    mods = [str(m) for m in startup.get("modules") or [] if _MODULE.match(str(m))][:8]
    if not mods:
        return None
    try:
        found = importlib.util.find_spec(mods[0].split(".")[0]) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        return {"skipped": mods[0].split(".")[0] + " not found"}
    try:
        wait = max(1.0, min(float(startup.get("wait") or 20), 600.0))
    except (TypeError, ValueError):
        wait = 20.0
    return check_startup(mods, env, wait)


def main():
    try:
        req = json.loads(sys.stdin.read() or "{}")
    except ValueError:
        req = None
    if not isinstance(req, dict):
        print(json.dumps({"error": "input is not a JSON object"}))
        return
    env = dict(os.environ)
    env.update({str(k): str(v) for k, v in (req.get("env") or {}).items()})
    me = socket.gethostname()
    answer = {
        "hostname": me,
        "python": sys.executable,
        "paths": [check_path(p, env) for p in req.get("paths") or [] if isinstance(p, dict)],
        "hf": check_hf([str(i) for i in req.get("hf_ids") or []], env),
        "modules": check_modules([str(m) for m in req.get("modules") or []], env),
        "verl_requires": verl_requires() if req.get("modules") else [],
        "disks": {
            str(k): check_disk(str(v or ""), env) for k, v in (req.get("disks") or {}).items()
        },
        "limits": check_limits(),
        "resolve": check_names([str(n) for n in req.get("resolve") or []] + [me]),
        # The job's or the host's: Gloo binds it instead of the hostname's address.
        "gloo_ifname": _one(env.get("GLOO_SOCKET_IFNAME", ""))[:100],
        # py-spy and ptrace, so `verl-tui stack` works when the job hangs.
        "tracing": tracing_facts(),
    }
    # Last: it may wait for the child's imports up to the time the request allows.
    answer["startup"] = startup_imports(req, env)
    sys.stdout.write(json.dumps(answer) + "\n")


if __name__ == "__main__":
    main()
