"""verl-tui supervisor lease, kept ON the head: ``PYTHON -u -c SOURCE DIR NAME OP OWNER_JSON TTL``.

One supervisor acts per cluster. Its claim is a lease file DIR/NAME holding the owner's JSON
(with a random ``token``) and ``expires`` (the head's clock, so every taker judges expiry by
one clock). Each call takes a short ``flock`` on the file, so read-decide-write is atomic.
OP: ``acquire`` (take it when free, expired or already ours, and renew: the heartbeat),
``takeover`` (take it when its holder's token is OWNER_JSON's ``expect``: the caller checked that
the holder's process is dead), ``release`` (clear it when ours), ``read``. Prints one JSON line:
``{"held": doc}``, ``{"busy": doc, "left": s}``, ``{"released": bool}``, ``{"doc": doc,
"left": s}`` or ``{"error": why}``. Stdlib only, Python 3.8+, no imports from ``tui``.
"""

import sys

if __name__ == "__main__":
    # `-c` puts the working directory first on sys.path: a stray json.py must not win.
    sys.path[:] = [p for p in sys.path if p not in ("", ".")]

import contextlib
import fcntl
import json
import os
import time

from tui.remote.shared_files import open_shared


def _say(doc):
    print(json.dumps(doc), flush=True)


def _read(fd):
    raw = os.pread(fd, 65536, 0)
    try:
        doc = json.loads(raw) if raw.strip() else {}
    except ValueError:
        doc = {}
    return doc if isinstance(doc, dict) else {}


def _write(fd, doc):
    data = json.dumps(doc).encode()
    os.ftruncate(fd, 0)
    os.pwrite(fd, data, 0)


def main(argv):
    d, name, op, owner, ttl = argv[0], argv[1], argv[2], json.loads(argv[3]), float(argv[4])
    try:
        os.makedirs(d, exist_ok=True)
        fd = open_shared(os.path.join(d, name))
        with contextlib.suppress(OSError):
            os.fchmod(fd, 0o666)  # another user's verl-tui must be able to take it over
        fcntl.flock(fd, fcntl.LOCK_EX)  # held for this call only: milliseconds
    except OSError as exc:
        _say({"error": f"{d}: {exc.strerror or exc}"})
        return
    now = time.time()
    doc = _read(fd)
    token = doc.get("token")
    expires = doc.get("expires")
    left = expires - now if isinstance(expires, (int, float)) else 0.0
    ours = bool(token) and token == owner.get("token")
    if op == "read":
        _say({"doc": doc, "left": left})
    elif op == "release":
        if ours:
            os.ftruncate(fd, 0)
        _say({"released": ours})
    elif op in ("acquire", "takeover"):
        free = not token or left <= 0
        taken = op == "takeover" and bool(token) and token == owner.get("expect")
        if free or ours or taken:
            new = {k: v for k, v in owner.items() if k != "expect"}
            if ours and "since" in doc:
                new["since"] = doc["since"]  # a renewal keeps the first time it was taken
            new["expires"] = now + ttl
            new["renewed"] = now
            new["head_pid"] = os.getpid()
            _write(fd, new)
            _say({"held": new})
        else:
            _say({"busy": doc, "left": left})
    else:
        _say({"error": f"unknown op {op!r}"})


if __name__ == "__main__":
    main(sys.argv[1:])
