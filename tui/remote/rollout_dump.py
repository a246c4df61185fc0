"""Runs ON a host, with the host's interpreter (stdlib only): verl's rollout dump folder
(``trainer.rollout_data_dir``: one ``{step}.jsonl`` per step, one JSON object per sample),
read a bounded piece at a time so the cockpit never holds a whole file.

    python -c SOURCE        (one JSON object on stdin, JSON lines on stdout)

``{"op": "list", "dir": D, "max": N}``: the step files directly in D (regular files named
``<int>.jsonl``; anything else is counted, not opened) -> ``{"steps": [[step, size], ...],
"other": n, "truncated": bool}``.

``{"op": "index", "path": P, "max_lines": N, "pattern": RE or null, "ignore_case": bool}``:
one pass over the file (N lines at most: a small N is the first page, before the whole index)
-> ``{"size": S}``, then per line ``[line, offset, length, score, output_chars, input_key,
why]`` (score null when not a number; why null, or why the line is not a sample: bad JSON, not
an object, too long), only lines whose input or output matches RE when one is given, then
``{"done": {"lines": n, "stopped": why or null}}``.

``{"op": "read", "path": P, "spans": [[offset, length], ...], "field_chars": N}``: those
lines (each a byte range of the index), parsed here -> ``{"off": o, "doc": {...}, "cut":
{field: its length}}`` per span, each field of more than N characters sent as its head and
its end; or ``{"off": o, "why": ...}`` for a line that is not a sample.

Only a regular file is opened, non-blocking (a FIFO or a device is refused, never waited on).
Everything sent is JSON with ASCII escapes, so a cut in a multi-byte character or a control
byte in the file cannot break the answer.
"""

import hashlib
import json
import os
import re
import stat
import sys

CHUNK = 1 << 20
MATCH_CHARS = 1 << 16  # the first characters of input/output a pattern is matched on
STEP_FILE = re.compile(r"^(\d{1,18})\.jsonl\Z")


def _emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")


def _open_regular(path):
    """A read-only fd of a regular file, or raise OSError naming why not."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise OSError(0, "not a regular file", path)
    return fd, st.st_size


def op_list(req):
    folder, cap = req["dir"], int(req.get("max") or 100000)
    steps, other = [], 0
    with os.scandir(folder) as it:
        for entry in it:
            m = STEP_FILE.match(entry.name)
            if not m or not entry.is_file(follow_symlinks=True):
                other += 1
                continue
            try:
                size = entry.stat(follow_symlinks=True).st_size
            except OSError:
                other += 1
                continue
            steps.append([int(m.group(1)), size])
            if len(steps) >= cap:
                _emit({"steps": sorted(steps), "other": other, "truncated": True})
                return
    _emit({"steps": sorted(steps), "other": other, "truncated": False})


def _lines(fd, max_line):
    """(offset, bytes of the line without its newline or None when longer than max_line,
    length) for every line; a long line is skipped through, never held."""
    off, buf, start, skipping = 0, b"", 0, False
    while True:
        chunk = os.read(fd, CHUNK)
        if not chunk:
            break
        buf += chunk
        pos = 0
        while True:
            nl = buf.find(b"\n", pos)
            if nl < 0:
                break
            line_len = off + nl - start
            yield start, (None if skipping else buf[pos:nl]), line_len
            start, pos, skipping = off + nl + 1, nl + 1, False
        off += pos
        buf = buf[pos:]
        if len(buf) > max_line:
            off += len(buf)
            buf, skipping = b"", True
    if buf or skipping:
        yield start, (None if skipping else buf), off + len(buf) - start


def _text(value):
    return value if isinstance(value, str) else ("" if value is None else str(value))


def op_index(req):
    fd, size = _open_regular(req["path"])
    cap = int(req.get("max_lines") or 200000)
    max_line = int(req.get("max_line") or (64 << 20))
    flags = re.IGNORECASE if req.get("ignore_case") else 0
    pattern = re.compile(req["pattern"], flags) if req.get("pattern") else None
    _emit({"size": size})
    lines, stopped = 0, None
    try:
        for off, raw, length in _lines(fd, max_line):
            lines += 1
            if not raw or not raw.strip():
                if raw is None:
                    _emit(
                        [lines, off, length, None, 0, "", "longer than " + str(max_line) + " bytes"]
                    )
                continue
            try:
                doc = json.loads(raw)
            except (ValueError, RecursionError) as exc:
                _emit([lines, off, length, None, 0, "", "bad JSON: " + str(exc)[:120]])
                continue
            if not isinstance(doc, dict):
                _emit([lines, off, length, None, 0, "", "not a JSON object"])
                continue
            inp, out = _text(doc.get("input")), _text(doc.get("output"))
            if pattern and not (
                pattern.search(inp[:MATCH_CHARS]) or pattern.search(out[:MATCH_CHARS])
            ):
                continue
            score = doc.get("score")
            if isinstance(score, bool) or not isinstance(score, (int, float)):
                score = None
            elif score != score or score in (float("inf"), float("-inf")):
                score = str(score)
            key = hashlib.sha1(inp.encode("utf-8", "replace")).hexdigest()[:16]
            _emit([lines, off, length, score, len(out), key, None])
            if lines >= cap:
                stopped = "max_lines"
                break
    finally:
        os.close(fd)
    _emit({"done": {"lines": lines, "stopped": stopped}})


def _shrunk(value, limit):
    """A field as sent: text longer than `limit` keeps its head and its end (a loop or a cut
    shows at the end), anything else as JSON text, cut the same way."""
    text = value if isinstance(value, str) else json.dumps(value)
    if len(text) <= limit:
        return (value if isinstance(value, (str, int, float, bool)) or value is None else text), 0
    half = limit // 2
    return text[:half] + "\n[... " + str(len(text) - 2 * half) + " characters ...]\n" + text[
        -half:
    ], len(text)


def op_read(req):
    fd, size = _open_regular(req["path"])
    max_line = int(req.get("max_line") or (64 << 20))
    limit = int(req.get("field_chars") or (64 << 10))
    try:
        for off, length in req["spans"]:
            off, length = int(off), int(length)
            if length > max_line:
                _emit({"off": off, "why": "longer than " + str(max_line) + " bytes"})
                continue
            want = max(0, min(length, size - off))
            data = os.pread(fd, want, off) if want else b""
            try:
                doc = json.loads(data)
            except (ValueError, RecursionError) as exc:
                _emit({"off": off, "why": "bad JSON: " + str(exc)[:120]})
                continue
            if not isinstance(doc, dict):
                _emit({"off": off, "why": "not a JSON object"})
                continue
            sent, cut = {}, {}
            for key in list(doc)[:64]:
                sent[str(key)[:200]], was = _shrunk(doc[key], limit)
                if was:
                    cut[str(key)[:200]] = was
            _emit({"off": off, "doc": sent, "cut": cut})
    finally:
        os.close(fd)


def main():
    req = json.loads(sys.stdin.readline() or "{}")
    op = {"list": op_list, "index": op_index, "read": op_read}.get(req.get("op"))
    if op is None:
        _emit({"error": "unknown op"})
        return
    try:
        op(req)
    except re.error as exc:
        _emit({"error": "bad pattern: " + str(exc)})
    except OSError as exc:
        where = getattr(exc, "filename", None) or ""
        _emit({"error": str(exc.strerror or exc) + (": " + str(where) if where else "")})


if __name__ == "__main__":
    main()
