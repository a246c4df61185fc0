"""Part of job_preflight (stdlib only): import, in a child of this host's interpreter, what the
job's entry point imports when it starts (verl's trainer module, its dataset module and so its
data stack), so an install that cannot start a job (numpy/pyarrow/torch/transformers/flash-attn
built against each other's other versions: "pyarrow requires NumPy 2.0 or newer") is named
before the job, with the error and the versions of the stack.

Importing torch takes 10-90 s of a busy host, so the answer is cached on the host per install
(in /tmp/verl-tui-<uid>, private): a fingerprint of the interpreter, the modules, the job's
PYTHONPATH and every sys.path folder's mtime (pip adds or removes a folder there on every
install, upgrade or removal). The child writes the cache
itself and runs in its own session under its own time limit: when the preflight's wait ends
first, the child finishes and the next check reads its answer. One child per fingerprint at a
time (a marker file, made with O_EXCL, holds its pid): checks asking at once wait for it.
"""

import contextlib
import hashlib
import json
import os
import subprocess
import sys
import time

STARTUP_STACK = (
    "numpy",
    "pyarrow",
    "pandas",
    "datasets",
    "torch",
    "transformers",
    "flash-attn",
    "tensordict",
    "ray",
    "verl",
)
STARTUP_HARD_LIMIT = 600  # s: a child still importing then is ended (by its own alarm)
_KEEP = 64  # cached answers kept per host

# The child: imports each module in order, stops at the first failure, adds the stack's
# versions (from metadata: nothing more imported), writes the answer atomically, prints it.
_CHILD = r"""
import importlib, json, os, signal, sys, traceback
mods, stack, path, limit = json.loads(sys.argv[1])
signal.alarm(int(limit))
out = {"ok": True}
for m in mods:
    try:
        importlib.import_module(m)
    except BaseException as exc:
        where = ""
        for fr in reversed(traceback.extract_tb(exc.__traceback__)):
            for mark in ("site-packages/", "dist-packages/"):
                if mark in fr.filename:
                    where = fr.filename.split(mark, 1)[1].split("/")[0].split(".")[0]
                    break
            if where:
                break
        text = " ".join(("%s: %s" % (type(exc).__name__, exc)).split())[:400]
        out = {"ok": False, "module": m, "error": text, "package": where}
        # An install's fault is kept until the install changes; anything else (a vanished
        # folder, memory, the alarm) is said once and tried again next time.
        out["transient"] = not isinstance(exc, (ImportError, AttributeError, TypeError))
        break
versions = {}
try:
    import importlib.metadata as md
    for d in stack:
        try:
            versions[d] = md.version(d)
        except Exception:
            pass
except Exception:
    pass
out["versions"] = versions
tmp = path + ".%d.tmp" % os.getpid()
try:
    with open(tmp, "w") as fh:
        fh.write(json.dumps(out))
    os.replace(tmp, path)
    os.unlink(path + ".running")
except OSError:
    pass
sys.stdout.write("\n" + json.dumps(out) + "\n")
"""


def _cache_dir():
    """/tmp/verl-tui-<uid>/startup-imports, made private; None when it is not ours alone (a
    folder another user made could hold a forged answer: then nothing is cached)."""
    top = os.path.join(os.environ.get("TMPDIR") or "/tmp", f"verl-tui-{os.getuid()}")
    folder = os.path.join(top, "startup-imports")
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        for d in (top, folder):
            st = os.lstat(d)
            if st.st_uid != os.getuid() or st.st_mode & 0o022 or not os.path.isdir(d):
                return None
    except OSError:
        return None
    return folder


def startup_fingerprint(modules, env):
    """The interpreter, the modules, the job's PYTHONPATH entries, and the mtime of every
    folder of the interpreter's own sys.path (an install, upgrade or removal changes its
    site-packages folder). Edits inside a PYTHONPATH folder are not followed: a test or a
    user who rewrites it on every run would pay the imports on every check."""
    parts = [sys.executable, os.path.realpath(sys.executable), json.dumps(modules)]
    parts += [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    for p in sys.path:
        if not p or p in parts:
            continue  # the working directory (not the install), or a PYTHONPATH entry
        try:
            parts.append(f"{p}:{os.stat(p).st_mtime_ns}")
        except OSError:
            parts.append(p + ":-")
    return hashlib.sha256("\n".join(parts).encode("utf-8", "replace")).hexdigest()[:24]


def _read(path):
    try:
        with open(path) as fh:
            data = json.loads(fh.read(1 << 16))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _running(marker):
    """The pid in `marker` when that process still runs, else None."""
    try:
        with open(marker) as fh:
            pid = int(fh.read(32).strip() or "0")
        if pid > 0:
            os.kill(pid, 0)
            return pid
    except (OSError, ValueError):
        pass
    return None


def _held(marker):
    """Whether another check's child imports for this fingerprint now: the marker names a
    running process, or it was made a moment ago and its pid is not written yet."""
    if _running(marker) is not None:
        return True
    try:
        st = os.stat(marker)
    except OSError:
        return False
    return st.st_size == 0 and time.time() - st.st_mtime < 5


def _claim(marker):
    """Whether this check starts the child: it made the marker (O_EXCL, so of two checks
    asking at once only one imports; it holds this process's pid until the child's). A
    marker whose process is gone is taken over."""
    for _ in range(2):
        try:
            fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            if _held(marker):
                return False
            with contextlib.suppress(OSError):
                os.unlink(marker)
            continue
        except OSError:
            return True  # no marker can be made here: import without one
        with os.fdopen(fd, "w") as fh:
            fh.write(str(os.getpid()))
        return True
    return False


def _prune(folder):
    try:
        names = [n for n in os.listdir(folder) if n.endswith(".json")]
        names.sort(key=lambda n: os.stat(os.path.join(folder, n)).st_mtime)
        for n in names[:-_KEEP]:
            os.unlink(os.path.join(folder, n))
    except OSError:
        pass


def check_startup(modules, env, wait):
    """The start-up imports' answer: {"ok", "module", "error", "package", "versions",
    "cached", "seconds"}, or {"pending": seconds} while the child still imports, or
    {"error": why} when it cannot be run."""
    started = time.time()
    folder = _cache_dir()
    if folder is None:  # no private cache: the answer lives in a folder of its own
        import tempfile

        folder = tempfile.mkdtemp(prefix="verl-tui-startup-")
    key = startup_fingerprint(modules, env)
    path = os.path.join(folder, key + ".json")
    marker = path + ".running"
    done = _read(path)
    if done is not None:
        if done.get("transient"):
            with contextlib.suppress(OSError):
                os.unlink(path)
        done["cached"] = True
        return done
    if _claim(marker):
        child_env = dict(env)
        child_env.pop("PYTHONSTARTUP", None)
        args = json.dumps([list(modules), list(STARTUP_STACK), path, STARTUP_HARD_LIMIT])
        try:
            proc = subprocess.Popen(
                [sys.executable, "-c", _CHILD, args],
                env=child_env,
                cwd="/",  # stable: a home or working folder may go away meanwhile
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,  # outlives this preflight when its wait ends first
            )
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(marker)
            return {"error": f"cannot run {sys.executable}: {exc.strerror or exc}"}
        try:
            with open(marker, "w") as fh:
                fh.write(str(proc.pid))
        except OSError:
            pass
    while time.time() - started < wait:
        done = _read(path)
        if done is not None:
            break
        pid = _running(marker)
        if pid is not None:
            # reap our own child when it has ended (no zombie keeps the marker alive)
            with contextlib.suppress(OSError):
                os.waitpid(pid, os.WNOHANG)
        if not _held(marker) and _read(path) is None:
            return {"error": f"{sys.executable} ended without an answer (killed, or out of memory)"}
        time.sleep(0.2)
    if done is None:
        return {"pending": round(time.time() - started, 1)}
    with contextlib.suppress(OSError):
        os.unlink(marker)
    if done.get("transient"):
        with contextlib.suppress(OSError):
            os.unlink(path)
    _prune(folder)
    done["cached"] = False
    done["seconds"] = round(time.time() - started, 1)
    return done
