#!/usr/bin/env python3
"""verl-tui checkpoint helper, run on a host as ``PYTHON -c SOURCE OP ARGS...``.

Shipped inline like the probe (tui/ckpt/hostcmd.py builds the argv), so it stays one
self-contained file: stdlib only, Python 3.8+, no imports from ``tui``. Every answer is one JSON
line on stdout; a failure is ``{"error": "one line"}`` and exit status 1.

Operations (paths are plain arguments, never parsed by a shell):

``scan ROOT``
    The ``global_step_N`` folders under ROOT, every file in them (path relative to the step
    folder, size, mtime), the small JSON files that name a world size, and
    ``latest_checkpointed_iteration.txt``.
``ls DIR``
    Every file under DIR: relative path and size.
``sha PATH...``
    sha256 of each file (null where it does not exist).
``send PATH``
    Serve PATH once on 127.0.0.1: print ``{"port", "token", "size"}``, accept one connection
    that starts with the token, send exactly ``size`` bytes (hashing what it reads), print
    ``{"sent", "sha256", "changed"}`` (changed: the file's size or mtime moved meanwhile).
``recv PATH``
    Receive into a fresh temp file ``.verl-tui-partial.XXXX.NAME`` next to PATH (never PATH
    itself): print ``{"port", "token", "tmp"}``; accept one connection that starts with the
    token, then an 8-byte big-endian length, then that many bytes (hashed as written); fsync;
    answer ``{"received", "sha256"}`` on the connection; on ``commit SHA`` (its own sha256)
    hard-link the temp file to PATH -- which fails if PATH exists, so nothing is ever
    overwritten -- and answer ``{"result": "ok" | "same" | "conflict"}`` (same/conflict: PATH
    existed with that / another sha256). Anything else -- a short stream, a hang-up, stdin
    closing -- deletes the temp file.

send/recv stop when stdin closes, and when nobody presents the token within ACCEPT_TIMEOUT_S.
"""

import sys

if __name__ == "__main__":
    # `-c` puts the working directory first on sys.path: a stray json.py must not win.
    sys.path[:] = [p for p in sys.path if p not in ("", ".")]

import contextlib
import errno
import hashlib
import json
import os
import re
import socket
import stat
import struct
import tempfile
import threading

CHUNK = 1 << 20
ACCEPT_TIMEOUT_S = 60.0
IO_TIMEOUT_S = 300.0
MAX_FILES_PER_STEP = 100000
PARTIAL_PREFIX = ".verl-tui-partial."
STEP_RE = re.compile(r"^global_step_(\d+)\Z")
# Small JSON files whose world size (and layout facts) the scan reports.
META_FILES = ("fsdp_config.json", "ckpt_contents.json")
META_KEYS = ("world_size", "FSDP_version", "framework", "schema_version", "global_step")
TOKEN_BYTES = 16


def _one_line(exc):
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


def _emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def _fail(msg):
    _emit({"error": msg})
    sys.exit(1)


class NotRegular(OSError):
    """A path that is not a regular file (a FIFO, a device, a folder): never read."""


def _open_regular(path):
    """A binary file object of the regular file at `path`: opened with O_NONBLOCK (a FIFO never
    waits for a writer), then checked with fstat on that descriptor. NotRegular otherwise
    (FileNotFoundError when there is none)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegular(f"{path} is not a regular file")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


def _read_small(path, cap):
    """At most `cap` bytes of a regular file; NotRegular or ValueError (too big) otherwise."""
    with _open_regular(path) as f:
        data = f.read(cap + 1)
    if len(data) > cap:
        raise ValueError(f"{path} is over {cap} bytes")
    return data


def _sha_file(path):
    h = hashlib.sha256()
    with _open_regular(path) as f:
        while True:
            chunk = f.read(CHUNK)
            if not chunk:
                return h.hexdigest()
            h.update(chunk)


# ---------------------------------------------------------------------------- listing


def _walk(top):
    """(relative path, size, mtime) of every file under top; symlinked dirs are not entered."""
    out = []
    errors = []

    def onerror(exc):
        errors.append(_one_line(exc))

    for dirpath, dirnames, filenames in os.walk(top, onerror=onerror):
        dirnames.sort()
        for name in sorted(filenames):
            full = os.path.join(dirpath, name)
            try:
                st = os.stat(full)
            except OSError as exc:
                errors.append(_one_line(exc))
                continue
            if not stat.S_ISREG(st.st_mode):
                continue
            out.append([os.path.relpath(full, top), st.st_size, st.st_mtime])
            if len(out) >= MAX_FILES_PER_STEP:
                return out, errors, True
    return out, errors, False


def _meta(step_dir, rel):
    """The facts of a small JSON file verl writes next to the shards (None if unreadable)."""
    try:
        data = json.loads(_read_small(os.path.join(step_dir, rel), 1 << 20).decode("utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    return {k: data[k] for k in META_KEYS if k in data}


def op_scan(root):
    out = {"root": root, "exists": os.path.isdir(root), "latest": None, "steps": {}, "errors": []}
    if not out["exists"]:
        if os.path.exists(root):
            _fail(f"{root} is not a directory")
        _emit(out)
        return
    try:
        raw = _read_small(os.path.join(root, "latest_checkpointed_iteration.txt"), 256)
        out["latest"] = raw.decode("utf-8", "replace").strip()
    except FileNotFoundError:
        pass
    except (OSError, ValueError) as exc:
        out["errors"].append(_one_line(exc))
    try:
        names = sorted(os.listdir(root))
    except OSError as exc:
        _fail(f"cannot list {root}: {_one_line(exc)}")
    for name in names:
        m = STEP_RE.match(name)
        step_dir = os.path.join(root, name)
        if not m or not os.path.isdir(step_dir):
            continue
        files, errors, truncated = _walk(step_dir)
        meta = {}
        for rel, _size, _mtime in files:
            if os.path.basename(rel) in META_FILES:
                facts = _meta(step_dir, rel)
                if facts is not None:
                    meta[rel] = facts
        out["steps"][name] = {"files": files, "meta": meta, "truncated": truncated}
        out["errors"] += errors
    _emit(out)


def op_ls(top):
    if not os.path.isdir(top):
        _fail(f"{top} is not a directory")
    files, errors, truncated = _walk(top)
    _emit(
        {"files": [[rel, size] for rel, size, _ in files], "errors": errors, "truncated": truncated}
    )


def op_sha(paths):
    out = {}
    for path in paths:
        try:
            out[path] = _sha_file(path)
        except FileNotFoundError:
            out[path] = None
        except OSError as exc:  # a FIFO or a folder named: said, never waited on
            _fail(f"cannot read {path}: {_one_line(exc)}")
    _emit({"sha256": out})


# ---------------------------------------------------------------------------- transfer


def _watch_stdin(on_eof):
    """Run on_eof when stdin closes: the cockpit finished with us, or its connection died."""

    def watch():
        # os.read, not sys.stdin: a daemon thread blocked inside a buffered reader stalls
        # (or aborts) the interpreter's shutdown.
        try:
            while os.read(0, 65536):
                pass
        except OSError:
            pass
        on_eof()

    threading.Thread(target=watch, daemon=True).start()


def _listen():
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    srv.settimeout(ACCEPT_TIMEOUT_S)
    return srv, os.urandom(TOKEN_BYTES).hex()


def _accept(srv, token):
    """The first connection that presents the token (other local users' probes are dropped)."""
    want = token.encode()
    while True:
        try:
            conn, _ = srv.accept()
        except socket.timeout:  # noqa: UP041 (an alias of TimeoutError only from 3.10)
            return None
        conn.settimeout(IO_TIMEOUT_S)
        got = b""
        try:
            while len(got) < len(want):
                more = conn.recv(len(want) - len(got))
                if not more:
                    break
                got += more
        except OSError:
            got = b""
        if got == want:
            srv.close()
            return conn
        conn.close()


def op_send(path):
    try:
        f = _open_regular(path)  # held until the process exits
        before = os.fstat(f.fileno())
    except OSError as exc:
        _fail(f"cannot read {path}: {_one_line(exc)}")
    size = before.st_size
    _watch_stdin(lambda: os._exit(3))
    srv, token = _listen()
    _emit({"port": srv.getsockname()[1], "token": token, "size": size})
    conn = _accept(srv, token)
    if conn is None:
        _fail(f"nobody connected within {ACCEPT_TIMEOUT_S:g} s")
    h = hashlib.sha256()
    sent = 0
    try:
        while sent < size:  # exactly the announced size: the receiver expects that many
            chunk = f.read(min(CHUNK, size - sent))
            if not chunk:
                break
            h.update(chunk)
            conn.sendall(chunk)
            sent += len(chunk)
        conn.shutdown(socket.SHUT_WR)
        after = os.fstat(f.fileno())
    except OSError as exc:
        _fail(f"sending {path}: {_one_line(exc)}")
    changed = (after.st_size, after.st_mtime_ns) != (before.st_size, before.st_mtime_ns)
    _emit({"sent": sent, "sha256": h.hexdigest(), "changed": changed})
    conn.close()
    os._exit(0)  # done: no interpreter shutdown to wait for


def _recv_exact(conn, n):
    data = b""
    while len(data) < n:
        more = conn.recv(n - len(data))
        if not more:
            break
        data += more
    return data


def _link_no_clobber(tmp, final, sha):
    """Give tmp the name final unless final exists: "ok", or "same"/"conflict" (tmp dropped)."""
    try:
        os.link(tmp, final)  # atomic, and refuses an existing name: never an overwrite
    except FileExistsError:
        pass
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK):
            raise
        # No hard links on this file system: a rename, checked first (racy only against
        # another writer of this very name).
        if not os.path.lexists(final):
            os.rename(tmp, final)
            return "ok"
    else:
        os.unlink(tmp)
        return "ok"
    result = "same" if _sha_file(final) == sha else "conflict"
    os.unlink(tmp)
    return result


def op_recv(final):
    folder = os.path.dirname(final) or "."
    try:
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(
            prefix=PARTIAL_PREFIX, suffix="." + os.path.basename(final), dir=folder
        )
    except OSError as exc:
        _fail(f"cannot write in {folder}: {_one_line(exc)}")
    mask = os.umask(0)
    os.umask(mask)
    os.fchmod(fd, 0o666 & ~mask)

    def drop_partial(code=0):
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        os._exit(code)

    def give_up(msg, conn=None):
        _emit({"error": msg})
        if conn is not None:
            with contextlib.suppress(OSError):
                conn.sendall((json.dumps({"error": msg}) + "\n").encode())
        drop_partial(1)

    _watch_stdin(drop_partial)
    srv, token = _listen()
    _emit({"port": srv.getsockname()[1], "token": token, "tmp": tmp})
    conn = _accept(srv, token)
    if conn is None:
        give_up(f"nobody connected within {ACCEPT_TIMEOUT_S:g} s")
    h = hashlib.sha256()
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    try:
        header = _recv_exact(conn, 8)
        if len(header) != 8:
            give_up("no length header", conn)
        size = struct.unpack(">Q", header)[0]
        received = 0
        while received < size:
            n = conn.recv_into(buf, min(CHUNK, size - received))
            if not n:
                break
            h.update(view[:n])
            pos = 0
            while pos < n:
                pos += os.write(fd, view[pos:n])
            received += n
        if received != size:
            give_up(f"the stream ended after {received} of {size} bytes", conn)
        os.fsync(fd)
        os.close(fd)
        sha = h.hexdigest()
        conn.sendall((json.dumps({"received": received, "sha256": sha}) + "\n").encode())
        # The cockpit compares with the sender's sha256, then says "commit SHA" (or hangs up).
        line = b""
        while not line.endswith(b"\n") and len(line) < 200:
            more = conn.recv(200)
            if not more:
                break
            line += more
        if line.strip() != ("commit " + sha).encode():
            give_up("not committed")
        result = _link_no_clobber(tmp, final, sha)
        conn.sendall((json.dumps({"result": result}) + "\n").encode())
        _emit({"result": result})
    except OSError as exc:
        give_up(f"receiving into {folder}: {_one_line(exc)}", conn)
    conn.close()
    os._exit(0)


def main(argv):
    if not argv:
        _fail("usage: OP ARGS...")
    op, args = argv[0], argv[1:]
    arity = {"scan": 1, "ls": 1, "send": 1, "recv": 1}
    if op in arity and len(args) != arity[op]:
        _fail(f"{op} takes {arity[op]} argument(s)")
    try:
        if op == "scan":
            op_scan(args[0])
        elif op == "ls":
            op_ls(args[0])
        elif op == "sha":
            op_sha(args)
        elif op == "send":
            op_send(args[0])
        elif op == "recv":
            op_recv(args[0])
        else:
            _fail(f"unknown operation {op!r}")
    except SystemExit:
        raise
    except Exception as exc:  # one line for the cockpit, never a traceback
        _fail(_one_line(exc))


if __name__ == "__main__":
    main(sys.argv[1:])
