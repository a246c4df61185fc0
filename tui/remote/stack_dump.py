"""verl-tui: py-spy stack dumps of some of this host's processes: ``PYTHON -u -S -c SOURCE``.

Reads one JSON request on stdin: ``{"pids": [...], "native": bool, "timeout": seconds per
process, "max_bytes": output kept per process, "parallel": dumps at once}``. Prints one JSON
line per pid as its dump ends (``{"proc": {...}}``), then ``{"done": {...}}`` with what this
host's tracing depends on (who we are, kernel.yama.ptrace_scope, CAP_SYS_PTRACE, where py-spy
is). Without py-spy it prints only ``{"done": ...}`` with ``"py_spy": null``.

py-spy is looked for beside the interpreter (``ray[default]`` installs it in the same bin/),
then on PATH (tui/remote/tracing.py, a part joined into this program). Each dump runs ``py-spy
dump --pid P --json [--native]`` with its own deadline; a py-spy too old for --json is run
again without it (the text is parsed by the caller). Stdlib only, Python 3.8+; its imports
from ``tui.remote`` are its parts, joined by the loader.
"""

import json
import subprocess
import sys
import threading
import time

from tui.remote.tracing import _proc_bytes, find_py_spy, py_spy_env, tracing_facts, user_name

ENV_KEYS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "RAY_JOB_ID")
ERR_BYTES = 4000
CMD_CHARS = 300
RETRIES = 3  # a process traced by someone else when we came
RAW_BYTES = 64 << 20  # py-spy's own answer, read whole before it is made compact
MAX_THREADS = 256
MAX_FRAMES = 128


def describe(pid):
    """What /proc says of the process: its owner, a few env keys, its command line."""
    out = {"pid": pid}
    base = f"/proc/{pid}/"
    try:
        for line in _proc_bytes(base + "status").decode("utf-8", "replace").splitlines():
            if line.startswith("Uid:"):
                uid = int(line.split()[2])  # effective
                out["uid"] = uid
                out["user"] = user_name(uid)
    except (OSError, ValueError, IndexError):
        out["gone"] = True
        return out
    try:
        raw = _proc_bytes(base + "cmdline", 64 * 1024)
        out["cmd"] = raw.replace(b"\0", b" ").decode("utf-8", "replace").strip()[:CMD_CHARS]
    except OSError:
        pass
    try:
        env = {}
        for item in _proc_bytes(base + "environ").split(b"\0"):
            key, _, value = item.partition(b"=")
            k = key.decode("ascii", "replace")
            if k in ENV_KEYS:
                env[k] = value.decode("utf-8", "replace")[:64]
        out["env"] = env
    except OSError:
        pass  # another user's process: its environment is not ours to read
    return out


def run_py_spy(argv, timeout):
    """(exit status or None on timeout, stdout up to RAW_BYTES, stderr's tail, cut there?)."""
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=py_spy_env(),
        )
    except OSError as exc:
        return 127, "", str(exc), False
    try:
        out, err = proc.communicate(timeout=timeout)
        code = proc.returncode
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        code = None
    return (
        code,
        out[:RAW_BYTES].decode("utf-8", "replace"),
        err[-ERR_BYTES:].decode("utf-8", "replace"),
        len(out) > RAW_BYTES,
    )


def compact(text, pid, max_bytes):
    """py-spy's answer within max_bytes: its JSON re-written with only the fields the cockpit
    reads (the main thread first, then the others while they fit), or its text cut at a line.
    Returns (text, cut?)."""
    try:
        threads = json.loads(text)
    except ValueError:
        threads = None
    if not isinstance(threads, list):
        if len(text) <= max_bytes:
            return text, False
        return text[:max_bytes].rpartition("\n")[0], True
    rows = []
    for t in threads[:MAX_THREADS]:
        if not isinstance(t, dict):
            continue
        frames = [
            {
                "name": f.get("name"),
                "short_filename": f.get("short_filename") or f.get("filename"),
                "line": f.get("line"),
            }
            for f in (t.get("frames") or [])[:MAX_FRAMES]
            if isinstance(f, dict)
        ]
        row = {
            "os_thread_id": t.get("os_thread_id"),
            "thread_name": t.get("thread_name"),
            "active": t.get("active"),
            "frames": frames,
        }
        rows.append((t.get("os_thread_id") != pid, json.dumps(row, separators=(",", ":"))))
    rows.sort(key=lambda r: r[0])  # the main thread first: it is kept whatever else is cut
    kept, size = [], 2
    for _, doc in rows:
        if kept and size + len(doc) + 1 > max_bytes:
            break
        kept.append(doc)
        size += len(doc) + 1
    return "[" + ",".join(kept) + "]", len(kept) < len(rows) or len(threads) > MAX_THREADS


def tracer_of(pid):
    """The pid tracing this process now (a debugger, another py-spy), or 0."""
    try:
        for line in _proc_bytes(f"/proc/{pid}/status").decode("utf-8", "replace").splitlines():
            if line.startswith("TracerPid:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def dump(py_spy, pid, native, timeout, max_bytes):
    info = describe(pid)
    if info.get("gone"):
        return info
    base = [py_spy, "dump", "--pid", str(pid)] + (["--native"] if native else [])
    args = [*base, "--json"]
    for attempt in range(RETRIES + 1):
        code, out, err, cut = run_py_spy(args, timeout)
        if code not in (0, None) and "--json" in err and "unexpected" in err.lower():
            args = base  # a py-spy before --json: its text is parsed by the caller
            code, out, err, cut = run_py_spy(args, timeout)
        if code in (0, None) or attempt == RETRIES:
            break
        # One tracer at a time: a process another dump (or a debugger) holds refuses us, and
        # may have let go by the time we look; a refusal is tried once more in any case.
        tracer = tracer_of(pid)
        refused = "permission denied" in err.lower() or "not permitted" in err.lower()
        if not tracer and not (refused and attempt == 0):
            break
        time.sleep(0.2 * (attempt + 1))
    if code == 0:
        out, trimmed = compact(out, pid, max_bytes)
        cut = cut or trimmed
    info.update(rc=code, out=out, err=err, cut=cut)
    tracer = tracer_of(pid) if code not in (0, None) else 0
    if tracer:
        info["tracer"] = tracer
    return info


def main():
    try:
        req = json.loads(sys.stdin.read(1 << 20))
        pids = [int(p) for p in req["pids"]][:4096]
        native = bool(req.get("native"))
        timeout = float(req.get("timeout", 20))
        max_bytes = int(req.get("max_bytes", 256 * 1024))
        parallel = max(1, min(int(req.get("parallel", 8)), 64))
    except (ValueError, KeyError, TypeError) as exc:
        print(json.dumps({"error": f"bad request: {exc}"}), flush=True)
        return
    py_spy = find_py_spy()
    done = tracing_facts(try_it=False)
    if py_spy is not None:
        lock = threading.Lock()
        todo = list(pids)

        def worker():
            while True:
                with lock:
                    if not todo:
                        return
                    pid = todo.pop(0)
                doc = json.dumps({"proc": dump(py_spy, pid, native, timeout, max_bytes)})
                with lock:
                    sys.stdout.write(doc + "\n")
                    sys.stdout.flush()

        threads = [threading.Thread(target=worker) for _ in range(min(parallel, len(pids)))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    print(json.dumps({"done": done}), flush=True)


if __name__ == "__main__":
    main()
