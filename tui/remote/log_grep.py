"""Runs ON a host, with the host's interpreter (stdlib only): a regex searched in the files of
Ray's session log folder, each read with a byte bound, all of them with a total bound.

    python -c SOURCE        (one JSON object on stdin, JSON lines on stdout)

Input::

    {"dir": folder, "pattern": regex, "ignore_case": bool,
     "file_bytes": int, "total_bytes": int, "max_matches": int}

Only regular files directly in the folder are read (a FIFO, a device or a link is skipped, and
each file is opened non-blocking). A file bigger than `file_bytes` is searched in its last
`file_bytes` (the newest lines); the lines before are counted, not searched or sent, so line
numbers are the file's own. Each line is matched on its first 4,096 characters and sent cut to
500. Output: {"m": [file, line, text]} per match, {"skip": [file, why]} per file not searched
in full, then {"done": {"files": n, "bytes": n, "matches": n, "stopped": why or null}}.
"""

import json
import os
import re
import stat
import sys

MATCH_CHARS = 4096
SENT_CHARS = 500
CHUNK = 1 << 20


def _emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")


def _count_lines(fd, upto):
    """Newlines in the first `upto` bytes (read in chunks, kept nowhere)."""
    os.lseek(fd, 0, os.SEEK_SET)
    count, left = 0, upto
    while left > 0:
        chunk = os.read(fd, min(CHUNK, left))
        if not chunk:
            break
        count += chunk.count(b"\n")
        left -= len(chunk)
    return count


def _read_tail(fd, size, limit):
    """(first line number of the text, the text): the whole file, or its last `limit` bytes
    from the first whole line."""
    start = max(0, size - limit)
    first = 1
    if start:
        first += _count_lines(fd, start)
    os.lseek(fd, start, os.SEEK_SET)
    parts, left = [], size - start
    while left > 0:
        chunk = os.read(fd, min(CHUNK, left))
        if not chunk:
            break
        parts.append(chunk)
        left -= len(chunk)
    data = b"".join(parts)
    if start and not data.startswith(b"\n"):
        cut = data.find(b"\n")
        data = b"" if cut < 0 else data[cut + 1 :]
        first += 1
    elif start:
        data = data[1:]
        first += 1
    return first, data


def search(req):
    folder = str(req.get("dir") or "")
    try:
        flags = re.IGNORECASE if req.get("ignore_case") else 0
        rx = re.compile(str(req.get("pattern") or ""), flags)
    except re.error as exc:
        _emit({"error": "bad pattern: " + str(exc)[:200]})
        return
    file_bytes = max(1, int(req.get("file_bytes") or 0))
    total_left = max(1, int(req.get("total_bytes") or 0))
    matches_left = max(1, int(req.get("max_matches") or 0))
    try:
        with os.scandir(folder) as listing:
            entries = sorted(listing, key=lambda e: e.name)
    except OSError as exc:
        _emit({"error": f"{folder}: {exc.strerror or exc}"})
        return
    files = read = found = 0
    stopped = None
    for entry in entries:
        if total_left <= 0:
            stopped = "total byte bound reached"
            break
        if matches_left <= 0:
            stopped = "match bound reached"
            break
        name = entry.name
        try:
            fd = os.open(entry.path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
        except OSError:
            continue  # a link, or gone since the listing
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                continue
            limit = min(file_bytes, total_left)
            if st.st_size > limit:
                why = f"searched its last {limit} of {st.st_size} bytes"
                _emit({"skip": [name, why]})
            first, data = _read_tail(fd, st.st_size, limit)
        except OSError as exc:
            _emit({"skip": [name, str(exc.strerror or exc)[:200]]})
            continue
        finally:
            os.close(fd)
        files += 1
        read += len(data)
        total_left -= len(data)
        lines = data.decode("utf-8", "replace").split("\n")
        if lines and lines[-1] == "":
            lines.pop()  # after the last newline: no line
        for i, line in enumerate(lines):
            if rx.search(line[:MATCH_CHARS]):
                _emit({"m": [name, first + i, line[:SENT_CHARS]]})
                found += 1
                matches_left -= 1
                if matches_left <= 0:
                    break
    _emit({"done": {"files": files, "bytes": read, "matches": found, "stopped": stopped}})


def main():
    try:
        req = json.loads(sys.stdin.read() or "{}")
    except ValueError:
        req = None
    if not isinstance(req, dict):
        _emit({"error": "input is not a JSON object"})
        return
    search(req)


if __name__ == "__main__":
    main()
