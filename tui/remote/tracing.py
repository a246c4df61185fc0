"""Part of the stack dump, probe and job preflight programs: whether py-spy can dump this host's
Python processes. Where py-spy is (beside the interpreter, as ray[default] installs it, else on
PATH), who we are, kernel.yama.ptrace_scope, whether we hold CAP_SYS_PTRACE, who owns Ray's
processes, and a real trial: py-spy dumps a Python process that is not our descendant (what
Yama's scope 1 refuses) and says whether the kernel let it. Stdlib only, Python 3.8+.
"""

import os
import shutil
import subprocess
import sys

CAP_SYS_PTRACE = 19
TRIAL_S = 10.0
# The trial's target: a Python of ours that says when it runs. py-spy, its sibling, is not its
# ancestor: what Yama's scope 1 refuses to a tracer without CAP_SYS_PTRACE.
_SLEEPER = "import sys, time; sys.stdout.write('up\\n'); sys.stdout.flush(); time.sleep(30)"


def find_py_spy():
    """py-spy beside this interpreter (not resolved: a venv's bin/), else on PATH, else None."""
    here = os.path.join(os.path.dirname(sys.executable), "py-spy")
    if os.path.isfile(here) and os.access(here, os.X_OK):
        return here
    return shutil.which("py-spy")


def _proc_bytes(path, limit=1 << 20):
    with open(path, "rb") as f:
        return f.read(limit)


def ptrace_scope():
    try:
        return int(_proc_bytes("/proc/sys/kernel/yama/ptrace_scope", 64).strip())
    except (OSError, ValueError):
        return None  # no Yama: only ownership and capabilities decide


def has_cap_ptrace():
    try:
        for line in _proc_bytes("/proc/self/status").decode("ascii", "replace").splitlines():
            if line.startswith("CapEff:"):
                return bool(int(line.split()[1], 16) >> CAP_SYS_PTRACE & 1)
    except (OSError, ValueError, IndexError):
        pass
    return None


def user_name(uid):
    try:
        import pwd

        return pwd.getpwuid(uid).pw_name
    except (ImportError, KeyError):
        return str(uid)


def owner_uid(pid):
    """The effective uid of a process, or None when it is gone."""
    try:
        status = _proc_bytes("/proc/" + str(pid) + "/status").decode("utf-8", "replace")
        for line in status.splitlines():
            if line.startswith("Uid:"):
                return int(line.split()[2])
    except (OSError, ValueError, IndexError):
        pass
    return None


def ray_owners():
    """The users that own a raylet here (empty when Ray does not run here)."""
    names = set()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            comm = _proc_bytes("/proc/" + pid + "/comm", 256).decode("utf-8", "replace").strip()
        except OSError:
            continue
        if comm == "raylet":
            uid = owner_uid(pid)
            if uid is not None:
                names.add(user_name(uid))
    return sorted(names)


def py_spy_env():
    """py-spy's errors as one message, not a Rust backtrace."""
    return dict(os.environ, RUST_BACKTRACE="0", RUST_LIB_BACKTRACE="0")


def trial(py_spy):
    """{"ok": bool, "error": py-spy's last lines} from dumping a Python of ours."""
    try:
        target = subprocess.Popen(
            [sys.executable, "-S", "-c", _SLEEPER],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
    except OSError as exc:
        return {"ok": None, "error": "could not start a Python to try: " + str(exc)[:200]}
    try:
        if target.stdout is None or not target.stdout.readline():
            return {"ok": None, "error": "the Python to try on ended at once"}
        res = subprocess.run(
            [py_spy, "dump", "--pid", str(target.pid)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            timeout=TRIAL_S,
            env=py_spy_env(),
        )
        lines = [ln.strip() for ln in res.stderr.decode("utf-8", "replace").splitlines()]
        lines = [ln for ln in lines if ln]
        return {"ok": res.returncode == 0, "error": " ".join(lines[-2:])[-300:]}
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"ok": False, "error": str(exc)[:300]}
    finally:
        target.kill()
        target.wait()


def tracing_facts(try_it=True):
    """What decides whether py-spy can dump this host's processes (see the module text)."""
    py_spy = find_py_spy()
    euid = os.geteuid()
    return {
        "py_spy": py_spy,
        "python": sys.executable,
        "path": os.environ.get("PATH", ""),
        "uid": euid,
        "user": user_name(euid),
        "ptrace_scope": ptrace_scope(),
        "cap_ptrace": has_cap_ptrace(),
        "ray_users": ray_owners(),
        "trial": trial(py_spy) if try_it and py_spy else None,
    }
