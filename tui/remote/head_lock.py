"""verl-tui cluster lock, held ON the head: ``PYTHON -u -c SOURCE DIR NAME OWNER_JSON MAX_HOLD``.

Takes a ``flock`` on DIR/NAME (created world-writable, so another user's verl-tui can take it
over once free) and prints one JSON line: ``{"held": pid}`` (the owner JSON, with
``head_pid``, is written into the file), ``{"busy": owner}`` (the holder's JSON) or
``{"error": why}``. While held it waits for stdin to close -- the caller closes it when done, or
its SSH channel dies with it -- or for MAX_HOLD seconds; the kernel drops the flock when the
process exits. Stdlib only, Python 3.8+, no imports from ``tui`` (see tui/cluster/lock.py).
"""

import sys

if __name__ == "__main__":
    # `-c` puts the working directory first on sys.path: a stray json.py must not win.
    sys.path[:] = [p for p in sys.path if p not in ("", ".")]

import contextlib
import fcntl
import json
import os
import select
import time


def _say(doc):
    print(json.dumps(doc), flush=True)


def main(argv):
    d, name, owner, max_hold = argv[0], argv[1], json.loads(argv[2]), float(argv[3])
    try:
        os.makedirs(d, exist_ok=True)
        fd = os.open(os.path.join(d, name), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o666)
        with contextlib.suppress(OSError):
            os.fchmod(fd, 0o666)  # another user's verl-tui must be able to take it over
    except OSError as exc:
        _say({"error": f"{d}: {exc.strerror or exc}"})
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        doc = {}
        for _ in range(10):  # the holder may be between truncate and write
            raw = os.pread(fd, 65536, 0)
            try:
                doc = json.loads(raw)
                break
            except ValueError:
                time.sleep(0.02)
        _say({"busy": doc})
        return
    owner["head_pid"] = os.getpid()
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(owner).encode(), 0)
    _say({"held": os.getpid()})
    deadline = time.monotonic() + max_hold
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        r, _, _ = select.select([0], [], [], left)
        if r and not os.read(0, 4096):
            break  # stdin closed: the caller is done or gone
    os.ftruncate(fd, 0)


if __name__ == "__main__":
    main(sys.argv[1:])
