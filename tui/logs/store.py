"""A job's log kept on disk: the text in anonymous temp files, per line only its offset (8
bytes) and a flag byte in memory, so a job that prints for days costs ~9 MB per million lines.

Two files: the text as received (ANSI colours included, for display) and the same text without
escape sequences (for search, classification and plain saves), which has only a sparse index
(one entry per ≥64 KiB), since it is always read in blocks. Lines are read back with
`os.pread` (a small cache covers a screenful being redrawn). Search reads blocks of a few MB and
runs one C-level scan per block, never a Python loop per line, so a million lines are searched
in a fraction of a second.
"""

from __future__ import annotations

import os
import re
import tempfile
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from itertools import accumulate
from pathlib import Path

from tui.logs.signatures import (
    ANSI_RE_B,
    ERROR,
    TRACEBACK,
    Hint,
    LineClassifier,
    scan_block,
    strip_ansi,
)

BLOCK = 4 << 20  # bytes per read when searching or saving
SLICE = 1 << 20  # characters classified at a time (bounds the temporary copies of a huge append)
INDEX_EVERY = 64 << 10  # bytes of plain text between entries of its sparse line index
MAX_PENDING = 1 << 20  # a "line" this long without a newline is cut into a line of its own
MAX_LINE_READ = 64 << 10  # longer lines are read (and shown) truncated
CACHE_LINES = 2048


def _temp_dir() -> str | None:
    # /tmp is often a RAM-backed tmpfs; a long job's log belongs on disk.
    if os.environ.get("TMPDIR"):
        return None
    return "/var/tmp" if os.access("/var/tmp", os.W_OK) else None


@dataclass(frozen=True)
class Query:
    """What to look for: a literal (default) or a regex, case-insensitive by default."""

    pattern: str
    regex: bool = False
    ignore_case: bool = True

    @classmethod
    def smart(cls, pattern: str, *, regex: bool = False) -> Query:
        """Case-insensitive unless the pattern has an upper-case letter (vim's smartcase)."""
        return cls(pattern, regex, pattern == pattern.lower())

    @cached_property
    def text_re(self) -> re.Pattern[str]:
        """The pattern over decoded text (raises re.error for a bad regex)."""
        flags = re.MULTILINE | (re.IGNORECASE if self.ignore_case else 0)
        return re.compile(self.pattern if self.regex else re.escape(self.pattern), flags)

    @cached_property
    def needle(self) -> bytes | None:
        """A literal ASCII pattern is searched in raw bytes (bytes.find), the fastest path."""
        if self.regex or not self.pattern.isascii():
            return None
        raw = self.pattern.encode()
        return raw.lower() if self.ignore_case else raw


def _fold_cr(text: str) -> str:
    """Carriage returns as a terminal shows them: a progress bar's line keeps its last state."""
    text = text.replace("\r\n", "\n")
    if "\r" not in text:
        return text
    parts = text.split("\n")
    last = len(parts) - 1
    for i, part in enumerate(parts):
        if "\r" in part:
            kept = next((s for s in reversed(part.split("\r")) if s), "")
            # The unfinished tail keeps its \r: what arrives next overwrites it.
            parts[i] = kept + "\r" if i == last and part.endswith("\r") else kept
    return "\n".join(parts)


class LogStore:
    """Append-only lines with per-line flags (ERROR, WARNING, TRACEBACK, HINT) and hints."""

    def __init__(self) -> None:
        tmp = _temp_dir()
        # Open for the store's lifetime (close() ends it); deleted by the OS when closed.
        self._file = tempfile.TemporaryFile(prefix="verl-tui-log-", dir=tmp)  # noqa: SIM115
        self._pfile = tempfile.TemporaryFile(prefix="verl-tui-log-", dir=tmp)  # noqa: SIM115
        self._fd, self._pfd = self._file.fileno(), self._pfile.fileno()
        self._classifier = LineClassifier()
        self._reset()

    def _reset(self) -> None:
        self._offsets = array("Q")  # start byte of every complete line (display file)
        self._flags = array("B")
        self._size = 0  # bytes of complete lines in the display file
        self._psize = 0  # … and in the plain file
        self._pidx_line = array("Q", [0])  # sparse index of the plain file: line → byte
        self._pidx_off = array("Q", [0])
        self._pending = ""
        self._hints: dict[int, Hint] = {}
        self._hint_lines: list[int] = []
        self._error_lines = array("I")  # first line of each run of error/traceback lines
        self._cache: dict[int, str] = {}
        self._plain_cache: dict[int, str] = {}
        self.max_line_length = 0  # bytes (≈ cells) of the longest line, for horizontal scroll

    # -- writing -----------------------------------------------------------------------------

    def append(self, text: str) -> int:
        """Add text; returns the number of new complete lines. A trailing partial line waits
        in `pending` for its newline."""
        if not text:
            return 0
        if self._pending:
            text = self._pending + text
        if "\r" in text:
            text = _fold_cr(text)
        cut = text.rfind("\n") + 1
        if not cut:
            if len(text) <= MAX_PENDING:
                self._pending = text
                return 0
            text, cut = text + "\n", len(text) + 1
        self._pending = text[cut:]
        added = 0
        start = 0
        while start < cut:  # slices keep the temporary copies of a huge append small
            end = cut if cut - start <= SLICE else text.find("\n", start + SLICE) + 1 or cut
            added += self._add(text[start:end])
            start = end
        return added

    def flush_pending(self) -> int:
        """Treat the partial last line as complete (the log ended without a newline)."""
        pending, self._pending = self._pending.rstrip("\r"), ""
        return self._add(pending + "\n") if pending else 0

    def _add(self, complete: str) -> int:
        if self._file.closed:  # its descriptor number may belong to another file by now
            raise ValueError("the log store is closed")
        data = complete.encode("utf-8", "replace")
        plain = ANSI_RE_B.sub(b"", data) if b"\x1b" in data else data
        first = len(self._offsets)
        if self._psize - self._pidx_off[-1] >= INDEX_EVERY:
            self._pidx_line.append(first)
            self._pidx_off.append(self._psize)
        _write_all(self._fd, data)
        if plain is not data:
            _write_all(self._pfd, plain)
        else:
            _write_all(self._pfd, data)
        parts = data.split(b"\n")
        parts.pop()  # after the final newline
        sizes = [len(p) + 1 for p in parts]
        self._offsets.extend(accumulate(sizes[:-1], initial=self._size))
        self._size += len(data)
        self._psize += len(plain)
        self._flags.frombytes(bytes(len(sizes)))
        self.max_line_length = max(self.max_line_length, max(sizes) - 1)
        self._classify(plain, first)
        return len(sizes)

    def _classify(self, data: bytes, first: int) -> None:
        """Every line goes to the signatures; `scan_block` skips, by C-level scans of the whole
        block, the lines no rule can fire on (the same path `verl-tui explain` takes)."""
        for line_no, flags, hint, _text in scan_block(self._classifier, data, first):
            self._mark(line_no, flags, hint)

    def _mark(self, line: int, flags: int, hint: Hint | None) -> None:
        self._flags[line] = flags
        if flags & ERROR and (line == 0 or not self._flags[line - 1] & (ERROR | TRACEBACK)):
            self._error_lines.append(line)
        if hint is not None:
            self._hints[line] = hint
            self._hint_lines.append(line)

    def clear(self) -> None:
        for fd in (self._fd, self._pfd):
            os.ftruncate(fd, 0)
            os.lseek(fd, 0, os.SEEK_SET)
        self._classifier.reset()
        self._reset()

    def close(self) -> None:
        self._file.close()
        self._pfile.close()
        self._cache.clear()
        self._plain_cache.clear()

    @property
    def closed(self) -> bool:
        return self._file.closed

    # -- reading -----------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._offsets)

    @property
    def pending(self) -> str:
        """The partial last line (no newline yet), as a terminal would show it."""
        return self._pending.rstrip("\r")

    @property
    def nbytes(self) -> int:
        return self._size

    def line(self, i: int) -> str:
        """Line `i` as received (ANSI colour codes included), without its newline."""
        cached = self._cache.get(i)
        if cached is not None:
            return cached
        n = len(self._offsets)
        if not 0 <= i < n:
            raise IndexError(i)
        if self._file.closed:
            raise ValueError("the log store is closed")
        start = self._offsets[i]
        size = (self._offsets[i + 1] if i + 1 < n else self._size) - 1 - start
        text = os.pread(self._fd, min(size, MAX_LINE_READ), start).decode("utf-8", "replace")
        if size > MAX_LINE_READ:
            text += "…"
        if len(self._cache) >= CACHE_LINES:
            self._cache.clear()
        self._cache[i] = text
        return text

    def plain(self, i: int) -> str:
        """Line `i` without ANSI escape sequences: what is shown and searched."""
        cached = self._plain_cache.get(i)
        if cached is None:
            cached = strip_ansi(self.line(i))
            if len(self._plain_cache) >= CACHE_LINES:
                self._plain_cache.clear()
            self._plain_cache[i] = cached
        return cached

    def flags(self, i: int) -> int:
        return self._flags[i]

    def hint(self, i: int) -> Hint | None:
        return self._hints.get(i)

    def hint_lines(self) -> list[int]:
        """Lines with a hint, ascending. The store's own list: read, don't modify."""
        return self._hint_lines

    def error_lines(self) -> array:
        """The first line of every run of error/traceback lines, ascending (read-only)."""
        return self._error_lines

    # -- the plain file, in blocks -----------------------------------------------------------

    def _plain_pos(self, line: int) -> int:
        """Byte offset of `line` in the plain file (its end for line == len)."""
        if line >= len(self._offsets):
            return self._psize
        e = bisect_right(self._pidx_line, line) - 1
        pos, skip = self._pidx_off[e], line - self._pidx_line[e]
        while skip:  # at most one append's worth of text past the index entry
            data = os.pread(self._pfd, 256 << 10, pos)
            k = data.count(b"\n")
            if k >= skip:
                rest = data.split(b"\n", skip)[-1]
                return pos + len(data) - len(rest)
            pos, skip = pos + len(data), skip - k
        return pos

    def _pread_lines(self, pos: int, end: int) -> bytes:
        """Whole lines from `pos` (a line start): about BLOCK bytes, at least one line."""
        size = min(BLOCK, end - pos)
        while True:
            data = os.pread(self._pfd, size, pos)
            if pos + len(data) >= end:
                return data
            cut = data.rfind(b"\n") + 1
            if cut:
                return data[:cut]
            size *= 2  # one line longer than a block

    def _plain_blocks(self, lo: int, hi: int) -> Iterator[tuple[int, bytes]]:
        """(first line, block of whole lines) for lines [lo, hi) of the plain file. Blocks end at
        index entries where one is in reach, so no block's lines need counting."""
        pos, end, line = self._plain_pos(lo), self._plain_pos(hi), lo
        idx_line, idx_off = self._pidx_line, self._pidx_off
        while pos < end:
            j = bisect_right(idx_off, min(pos + BLOCK, end)) - 1
            if idx_off[j] > pos:
                nxt, nxt_line = idx_off[j], idx_line[j]
                yield line, _pread_all(self._pfd, nxt - pos, pos)
                pos, line = nxt, nxt_line
            else:  # past the last entry (or a huge line): count this one
                data = self._pread_lines(pos, end)
                yield line, data
                pos, line = pos + len(data), line + data.count(b"\n")

    def _plain_blocks_back(self, hi: int) -> Iterator[tuple[int, bytes]]:
        """(first line, block) for lines [0, hi), last block first; blocks start at index
        entries (entry 0 is line 0), so none needs counting."""
        end = self._plain_pos(hi)
        idx_line, idx_off = self._pidx_line, self._pidx_off
        while end > 0:
            j = bisect_left(idx_off, max(0, end - BLOCK))
            if j == len(idx_off) or idx_off[j] >= end:
                j = bisect_left(idx_off, end) - 1  # no entry in reach: the one before `end`
            yield idx_line[j], _pread_all(self._pfd, end - idx_off[j], idx_off[j])
            end = idx_off[j]

    # -- search ------------------------------------------------------------------------------

    @staticmethod
    def _as_query(pattern: str | Query, regex: bool, ignore_case: bool) -> Query:
        return pattern if isinstance(pattern, Query) else Query(pattern, regex, ignore_case)

    @staticmethod
    def _bytes_hay(q: Query, data: bytes) -> bytes:
        """What a literal needle is searched in (lowered like the needle, if ignore_case)."""
        return data.lower() if q.ignore_case else data

    @staticmethod
    def _text_hay(data: bytes) -> str:
        """What a regex is searched in."""
        return data.decode("utf-8", "replace")

    def find(
        self,
        pattern: str | Query,
        start: int = 0,
        *,
        backwards: bool = False,
        regex: bool = False,
        ignore_case: bool = True,
    ) -> int | None:
        """The first line at or after `start` (or the last at or before it, `backwards`) that
        matches, ANSI codes ignored; None if there is none. Raises re.error for a bad regex."""
        q = self._as_query(pattern, regex, ignore_case)
        n = len(self._offsets)
        if not q.pattern or not n:
            return None
        if q.needle is None:
            q.text_re  # noqa: B018 -- a bad regex raises here, before any reading
        if backwards:
            if start < 0:
                return None
            for first, data in self._plain_blocks_back(min(start, n - 1) + 1):
                if q.needle is not None:
                    hay = self._bytes_hay(q, data)
                    pos = hay.rfind(q.needle)
                    if pos >= 0:
                        return first + hay.count(b"\n", 0, pos)
                else:
                    text = self._text_hay(data)
                    pos = -1
                    for pos in _regex_lines(q.text_re, text):  # noqa: B007 -- the last one
                        pass
                    if pos >= 0:
                        return first + text.count("\n", 0, pos)
            return None
        for first, data in self._plain_blocks(max(0, start), n):
            if q.needle is not None:
                hay = self._bytes_hay(q, data)
                pos = hay.find(q.needle)
                if pos >= 0:
                    return first + hay.count(b"\n", 0, pos)
            else:
                text = self._text_hay(data)
                pos = next(_regex_lines(q.text_re, text), -1)
                if pos >= 0:
                    return first + text.count("\n", 0, pos)
        return None

    def matching(
        self,
        pattern: str | Query,
        start: int = 0,
        end: int | None = None,
        *,
        regex: bool = False,
        ignore_case: bool = True,
    ) -> array:
        """Every line in [start, end) that matches, ascending, as array('I'). To keep a filter
        current, call again with start = the previous end."""
        q = self._as_query(pattern, regex, ignore_case)
        n = len(self._offsets)
        end = n if end is None else min(end, n)
        out = array("I")
        if not q.pattern or start >= end:
            return out
        for first, data in self._plain_blocks(max(0, start), end):
            line, last = first, 0
            if q.needle is not None:
                hay = self._bytes_hay(q, data)
                needle, nl = q.needle, b"\n"
                pos = hay.find(needle)
                while pos >= 0:
                    line += hay.count(nl, last, pos)
                    out.append(line)
                    last = hay.find(nl, pos) + 1
                    line += 1
                    pos = hay.find(needle, last)
            else:
                text = self._text_hay(data)
                for pos in _regex_lines(q.text_re, text):
                    line += text.count("\n", last, pos)
                    out.append(line)
                    last = text.find("\n", pos) + 1
                    line += 1
        return out

    # -- saving ------------------------------------------------------------------------------

    def save(self, path: str | os.PathLike[str], *, plain: bool = False) -> Path:
        """Write every line (and the partial last one) to `path`, as received or, with `plain`,
        without ANSI codes. Returns the path written."""
        target = Path(path).expanduser()
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, size = (self._pfd, self._psize) if plain else (self._fd, self._size)
        with open(target, "wb") as f:
            pos = 0
            while pos < size:
                chunk = os.pread(fd, min(BLOCK, size - pos), pos)
                if not chunk:
                    break
                f.write(chunk)
                pos += len(chunk)
            if self._pending:
                tail = strip_ansi(self.pending) if plain else self.pending
                f.write(tail.encode("utf-8", "replace"))
        return target


def _regex_lines(rx: re.Pattern[str], hay: str) -> Iterator[int]:
    """Where each matching line first matches, as if every line were searched alone: one
    C-level search per hit over the whole block; a match that runs across a line end (a
    pattern like `a\\s+b`) is tried again within its own line."""
    pos, search = 0, rx.search
    while True:
        m = search(hay, pos)
        if m is None:
            return
        start = m.start()
        eol = hay.find("\n", start)
        if eol < 0:
            eol = len(hay)
        if m.end() > eol:
            m = search(hay, hay.rfind("\n", 0, start) + 1, eol)
            if m is None:
                pos = eol + 1
                continue
            start = m.start()
        yield start
        pos = eol + 1


def _pread_all(fd: int, size: int, pos: int) -> bytes:
    chunks = []
    while size > 0:
        chunk = os.pread(fd, size, pos)
        if not chunk:
            break
        chunks.append(chunk)
        pos, size = pos + len(chunk), size - len(chunk)
    return b"".join(chunks) if len(chunks) != 1 else chunks[0]


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    done = 0
    while done < len(data):
        done += os.write(fd, view[done:])
