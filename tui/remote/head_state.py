"""verl-tui's shared files ON the head: ``PYTHON -u -c SOURCE DIR NAME OP VERSION MAX``.

State every user of one cluster shares (the queue) lives in DIR next to the supervisor's
lease. Each call takes an exclusive ``flock`` on DIR/NAME.lock for its few milliseconds.
OP ``read`` prints ``{"text": ..., "version": ...}`` (text "" and version "" when there is no
file); OP ``write`` reads the new text on stdin and replaces the file only when its version is
still VERSION (the caller's read: compare-and-swap), atomically (temp file, fsync, rename, fsync
of DIR), answering ``{"written": version}`` or ``{"conflict": version}``. The version is the
SHA-256 of the file's bytes. A FIFO, folder or link where the file belongs, a file over MAX
bytes or text that is not UTF-8 is ``{"error": why}``, never a wait. DIR and the files are
made writable by every user (several users' verl-tui share them; the cluster is theirs in
common); a DIR this account may not write (another's, 0755; or sticky, where one user cannot
replace another's file) is one line naming what an admin runs once. Stdlib only, Python
3.8+, no imports from ``tui``.
"""

import sys

if __name__ == "__main__":
    # `-c` puts the working directory first on sys.path: a stray json.py must not win.
    sys.path[:] = [p for p in sys.path if p not in ("", ".")]

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import stat

from tui.remote.shared_files import open_shared


def _say(doc):
    print(json.dumps(doc), flush=True)


def _version(data):
    return hashlib.sha256(data).hexdigest() if data else ""


def _shared_dir(d):
    os.makedirs(d, mode=0o777, exist_ok=True)
    st = os.lstat(d)
    if not stat.S_ISDIR(st.st_mode):
        raise OSError(f"{d} is not a folder")
    if st.st_uid == os.geteuid():
        with contextlib.suppress(OSError):
            os.chmod(d, 0o777)  # another user's verl-tui replaces files here too


def _current(path, limit):
    """The file's bytes (b"" when absent); OSError naming what is wrong with it."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except FileNotFoundError:
        return b""
    except OSError as exc:
        raise OSError(f"{path}: {exc.strerror or exc} (not a plain file?)") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(f"{path}: not a plain file")
        if st.st_size > limit:
            raise OSError(f"{path}: {st.st_size} bytes, more than {limit}")
        chunks, left = [], limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        if len(data) > limit:
            raise OSError(f"{path}: more than {limit} bytes")
        return data
    finally:
        os.close(fd)


def _replace(d, path, data):
    tmp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666)
    try:
        with contextlib.suppress(OSError):
            os.fchmod(fd, 0o666)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    os.close(fd)
    os.rename(tmp, path)
    dfd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def main(argv):
    d, name, op, expect, limit = argv[0], argv[1], argv[2], argv[3], int(argv[4])
    path = os.path.join(d, name)
    try:
        _shared_dir(d)
        lock = open_shared(path + ".lock")
        with contextlib.suppress(OSError):
            os.fchmod(lock, 0o666)
        fcntl.flock(lock, fcntl.LOCK_EX)  # held for this call only: milliseconds
        data = _current(path, limit)
        version = _version(data)
        if op == "read":
            _say({"text": data.decode("utf-8"), "version": version})
        elif op == "write":
            new = sys.stdin.buffer.read(limit + 1)
            if len(new) > limit:
                _say({"error": f"{path}: the new text is more than {limit} bytes"})
            elif version != expect:
                _say({"conflict": version})
            else:
                new.decode("utf-8")
                _replace(d, path, new)
                _say({"written": _version(new)})
        else:
            _say({"error": f"unknown op {op!r}"})
    except UnicodeDecodeError:
        _say({"error": f"{path}: not UTF-8 text"})
    except OSError as exc:
        where = exc.filename or d
        if exc.errno in (errno.EACCES, errno.EPERM):
            _say({"error": _not_shared(d, where, exc.strerror)})
        else:
            _say({"error": f"{where}: {exc.strerror}" if exc.strerror else str(exc)})


def _not_shared(d, where, why):
    """The one line for a folder this account may not write: what an admin runs once."""
    import pwd

    try:
        user = pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        user = str(os.geteuid())
    return (
        f"{where}: {why} for {user}; every verl-tui user of this cluster writes {d}: an admin "
        f"runs once on the head: install -d -m 0777 {d} (not sticky: 1777 stops one user "
        "replacing another's file; or a group's: install -d -m 2775 -g GROUP)"
    )


if __name__ == "__main__":
    main(sys.argv[1:])
