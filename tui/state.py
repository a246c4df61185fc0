"""Where verl-tui keeps what must survive a crash (job history, the queue, form drafts, the
run archive, the supervisor's files, locks; the XDG state dir), and the one way each of them is
named, read and written.

- Names: `state_path(kind, cluster, *parts)` is the only way a state location is built. The
  cluster name is checked (`name_problem`: one safe path segment, never "", "." or "..") and
  mapped to a folder name the way every version before kept them for ASCII names; the other
  parts must already be safe segments (job ids are checked by their callers, then here again).
- Reads: `read_state_bytes` / `read_state_text` / `read_state_json` / `read_state_jsonl` open a
  regular file only, without blocking (a FIFO, a folder or a device is refused, never waited
  on), at most a size cap, and report a damaged file as a StateError naming it (and the line):
  a damaged file is never read as "empty". `gunzip_bounded` inflates within a cap.
- Writes: `atomic_write_*` write a temp file in the same folder, fsync it, rename it over the
  target and fsync the folder, so a crash or a power cut leaves the old file or the new one.
  A full disk, a quota, a read-only or forbidden folder is a StateError naming the folder.

StateError is an OSError (code that already survives a full disk keeps doing so) whose text is
one line; the CLI and the cockpit print it as it is.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import stat
import tempfile
import unicodedata
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tui.errors import VerlTuiError

MAX_STATE_BYTES = 16 << 20  # a state file bigger than this was not written by us
MAX_NAME_BYTES = 100  # a cluster name is one folder name, with room for what follows it

KINDS = frozenset(
    {"history", "queue", "drafts", "archive", "supervisor", "locks", "slurm", "crash"}
)


class StateError(VerlTuiError, OSError, title="state folder"):
    """A state file or folder that cannot be read or written: one line naming it."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


def state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")
    return Path(base) / "verl-tui"


# -- names -----------------------------------------------------------------------------------

# What every earlier version turned into '_' in a folder name (ASCII names keep their folders).
_UNSAFE_ASCII = re.compile(r"[^A-Za-z0-9._-]")
_PART_RE = re.compile(r"[A-Za-z0-9._-]{1,255}")
# Unicode categories a name may not hold: controls, format (zero-width, bidi), surrogates,
# private use, unassigned, line and paragraph separators.
_BAD_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})


def name_problem(name: object) -> str | None:
    """Why `name` cannot be a cluster's folder name (one clause), or None when it can."""
    if not isinstance(name, str):
        return "is not a text"
    if not name.strip():
        return "is empty"
    if name in (".", ".."):
        return "is a dot segment ('.' or '..')"
    for c in name:
        if c in "/\\":
            return f"holds a path separator ({c!r})"
        if unicodedata.category(c) in _BAD_CATEGORIES:
            return f"holds the control or invisible character U+{ord(c):04X}"
    if name != name.strip():
        return "starts or ends with a space"
    if name[0] in "-.":
        return f"starts with {name[0]!r}"
    if len(name.encode("utf-8")) > MAX_NAME_BYTES:
        return f"is longer than {MAX_NAME_BYTES} bytes"
    return None


def check_cluster_name(name: object) -> str:
    """`name` when it is a valid cluster name, else ValueError (one clause, for hosts.yaml)."""
    problem = name_problem(name)
    if problem is not None:
        raise ValueError(
            f"cluster name {_shown(name)} {problem}; use letters, digits, '.', '_', '-'"
        )
    assert isinstance(name, str)
    return name


def cluster_segment(cluster: str) -> str:
    """The folder name of a cluster: the name with every character outside [A-Za-z0-9._-]
    as '_' (what earlier versions wrote), plus a hash of the name when it is not ASCII (two
    such names would otherwise share one folder)."""
    problem = name_problem(cluster)
    if problem is not None:
        raise StateError(f"cluster name {_shown(cluster)} {problem}: fix `cluster:` in hosts.yaml")
    folder = _UNSAFE_ASCII.sub("_", cluster)
    if not cluster.isascii():
        folder += "-" + hashlib.sha256(cluster.encode("utf-8")).hexdigest()[:12]
    return folder


def safe_segment(text: str) -> str:
    """Free text (a profile's name) as a file-name stem: characters outside [A-Za-z0-9._-]
    become '_'. Used inside a part (`f"{safe_segment(name)}.json"`), never as a whole part."""
    return _UNSAFE_ASCII.sub("_", text) or "_"


def _check_part(part: str) -> str:
    if not isinstance(part, str) or not _PART_RE.fullmatch(part) or part in (".", ".."):
        raise StateError(f"refusing the state path part {_shown(part)} (not one safe file name)")
    return part


def state_path(
    kind: str, cluster: str | None = None, *parts: str, root: Path | None = None
) -> Path:
    """`<state dir>/<kind>[/<cluster folder>]/<parts…>`: the one way a state location is built.
    `root` stands for `<state dir>/<kind>` (tests, a supervisor given its own state dir)."""
    if kind not in KINDS:
        raise ValueError(f"unknown state kind {kind!r}")
    path = root if root is not None else state_dir() / kind
    if cluster is not None:
        path = path / cluster_segment(cluster)
    for part in parts:
        path = path / _check_part(part)
    return path


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


# -- reading ---------------------------------------------------------------------------------

_KINDS_OF_FILE = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def file_kind(mode: int) -> str | None:
    """None for a regular file, else what it is, in words."""
    if stat.S_ISREG(mode):
        return None
    return next((name for test, name in _KINDS_OF_FILE if test(mode)), "not a regular file")


def _reason(exc: OSError) -> str:
    text = exc.strerror or str(exc)
    return text[:1].lower() + text[1:]


def open_regular(path: Path | str, *, follow: bool = True) -> int | None:
    """A read-only descriptor of the regular file at `path`, opened without blocking (O_NONBLOCK:
    a FIFO never waits for a writer) and checked with fstat on that descriptor; None when there
    is no such file. StateError (naming the path) for anything else. follow=False refuses a
    symbolic link as the last part."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    if not follow:
        flags |= os.O_NOFOLLOW
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow:
            raise StateError(f"{path}: is a symbolic link, expected a regular file") from None
        if exc.errno == errno.ENOTDIR:
            raise StateError(f"{path}: a part of the path is not a folder") from None
        kind = None
        with contextlib.suppress(OSError):  # a socket cannot be opened (ENXIO): say what it is
            kind = file_kind(os.stat(path).st_mode)
        if kind:
            raise StateError(f"{path}: is {kind}, expected a regular file") from None
        raise StateError(f"{path}: cannot open: {_reason(exc)}") from None
    try:
        kind = file_kind(os.fstat(fd).st_mode)
    except OSError as exc:
        os.close(fd)
        raise StateError(f"{path}: cannot read: {_reason(exc)}") from None
    if kind:
        os.close(fd)
        raise StateError(f"{path}: is {kind}, expected a regular file (move it away)")
    # Reads of a regular file never block; the flag only had to cover the open.
    os.set_blocking(fd, True)
    return fd


def read_state_bytes(path: Path | str, *, max_bytes: int = MAX_STATE_BYTES) -> bytes | None:
    """A regular file's bytes (at most `max_bytes`), or None when there is no such file."""
    fd = open_regular(path)
    if fd is None:
        return None
    try:
        size = os.fstat(fd).st_size
        if size > max_bytes:
            raise StateError(f"{path}: is {size} bytes, over the {_size(max_bytes)} limit")
        chunks: list[bytes] = []
        total = 0
        while total <= max_bytes:  # it may grow after fstat: read at most one byte more
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > max_bytes:
            raise StateError(f"{path}: grew over the {_size(max_bytes)} limit while read")
        return b"".join(chunks)
    except StateError:
        raise
    except OSError as exc:
        raise StateError(f"{path}: cannot read: {_reason(exc)}") from None
    finally:
        os.close(fd)


def decode_state_text(data: bytes, path: Path | str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise StateError(f"{path}:{line}: not UTF-8 text (byte 0x{data[exc.start]:02x})") from None


def read_state_text(path: Path | str, *, max_bytes: int = MAX_STATE_BYTES) -> str | None:
    data = read_state_bytes(path, max_bytes=max_bytes)
    return None if data is None else decode_state_text(data, path)


def parse_state_json(text: str, path: Path | str, line: int = 1) -> Any:
    """One JSON document; StateError naming path:line when it is not one."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise StateError(
            f"{path}:{line + exc.lineno - 1}: damaged: not JSON ({exc.msg}); "
            "fix or move the file away"
        ) from None
    except (ValueError, RecursionError) as exc:  # a huge integer, a nesting too deep
        raise StateError(f"{path}:{line}: damaged ({type(exc).__name__}); fix or move it") from None


def read_state_json(path: Path | str, *, max_bytes: int = MAX_STATE_BYTES) -> Any | None:
    """The JSON document of a state file; None when there is no such file."""
    text = read_state_text(path, max_bytes=max_bytes)
    return None if text is None else parse_state_json(text, path)


def read_state_jsonl(path: Path | str, *, max_bytes: int = MAX_STATE_BYTES) -> list[Any] | None:
    """Every line's JSON document (blank lines skipped); None when there is no such file."""
    text = read_state_text(path, max_bytes=max_bytes)
    if text is None:
        return None
    return [
        parse_state_json(line, path, n)
        for n, line in enumerate(text.splitlines(), 1)
        if line.strip()
    ]


def gunzip_bounded(data: bytes, max_out: int, path: Path | str) -> bytes:
    """Concatenated gzip members inflated, at most `max_out` bytes: StateError naming `path`
    when the data inflates to more (a small file that would fill the memory) or is damaged."""
    out: list[bytes] = []
    total = 0
    while data:
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        while True:
            try:
                chunk = d.decompress(data, max_out + 1 - total)
            except zlib.error:
                raise StateError(f"{path}: damaged (bad gzip data); fix or move it") from None
            out.append(chunk)
            total += len(chunk)
            if total > max_out:
                raise StateError(f"{path}: inflates to more than {_size(max_out)}; refused")
            data = d.unconsumed_tail
            if d.eof or not data:
                break
        if not d.eof:
            raise StateError(f"{path}: damaged (gzip data cut short); fix or move it")
        data = d.unused_data
    return b"".join(out)


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 and n % (1 << 20) == 0 else f"{n} bytes"


# -- writing ---------------------------------------------------------------------------------

_WRITE_REASONS = {
    errno.ENOSPC: "no space left on the device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EROFS: "the file system is read-only",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
}


def write_error(folder: Path | str, exc: OSError, path: Path | str | None = None) -> StateError:
    """An OSError met while writing in `folder` as one line naming the folder (a full disk, a
    quota, a read-only or forbidden folder), or `path` when the trouble is that file itself (a
    folder where the file belongs)."""
    if isinstance(exc, StateError):
        return exc
    if path is not None and exc.errno not in _WRITE_REASONS:
        return StateError(f"cannot write {path}: {_reason(exc)}")
    reason = _WRITE_REASONS.get(exc.errno or 0) or _reason(exc)
    hint = ""
    with contextlib.suppress(ValueError):
        Path(folder).resolve().relative_to(state_dir().resolve())
        hint = " (free space there, or point XDG_STATE_HOME at another folder)"
    return StateError(f"cannot write to {folder}: {reason}{hint}")


@contextlib.contextmanager
def writing(folder: Path | str) -> Iterator[None]:
    """Any OSError inside becomes write_error(folder): for appends and other writes that are
    not whole-file replacements."""
    try:
        yield
    except OSError as exc:
        raise write_error(folder, exc) from None


def make_dirs(folder: Path) -> None:
    with writing(folder):
        folder.mkdir(parents=True, exist_ok=True)


def fsync_dir(folder: Path) -> None:
    """Make a rename in `folder` durable (its entry reaches the disk)."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _refuse_special(path: Path) -> None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise StateError(f"{path}: cannot check it: {_reason(exc)}") from None
    if stat.S_ISLNK(st.st_mode):
        raise StateError(f"{path}: is a symbolic link; refusing to replace it (name a new file)")
    kind = file_kind(st.st_mode)
    if kind:
        raise StateError(f"{path}: is {kind}; refusing to replace it (name a regular file)")


def open_append(path: Path) -> int:
    """A descriptor for appending to the regular file at `path` (created 0600 if missing, its
    folder too), opened without blocking: a FIFO there (no reader: ENXIO), a folder or a device
    is a StateError naming it, never a wait. For logs that grow (the supervisor's, the
    archive's); whole files go through atomic_write_*."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    return _open_regular(path, flags, "a regular file", os.stat)


def open_lock_file(path: Path) -> int:
    """A read-write descriptor of the lock file at `path` (created 0600 if missing, its folder
    too): a regular file only, never a symbolic link, opened without blocking. StateError
    naming the path otherwise."""
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    return _open_regular(path, flags, "a lock file", os.lstat)


def _open_regular(path: Path, flags: int, expected: str, stat: Any) -> int:
    """`path` opened with `flags` (non-blocking, so a FIFO never waits), created 0600 with its
    folder; anything but a regular file there is a StateError naming it, and the descriptor
    is made blocking again before it is handed out. `stat` names what is there when the open
    itself fails (lstat where symbolic links are refused)."""
    make_dirs(path.parent)
    try:
        fd = os.open(path, flags, 0o600)
    except OSError as exc:
        if exc.errno == errno.ELOOP and flags & os.O_NOFOLLOW:
            raise StateError(f"{path}: is a symbolic link, expected {expected}") from None
        kind = None
        with contextlib.suppress(OSError):
            kind = file_kind(stat(path).st_mode)
        if kind:
            raise StateError(f"{path}: is {kind}, expected {expected} (move it away)") from None
        raise write_error(path.parent, exc) from None
    try:
        kind = file_kind(os.fstat(fd).st_mode)
    except OSError as exc:
        os.close(fd)
        raise write_error(path.parent, exc) from None
    if kind:
        os.close(fd)
        raise StateError(f"{path}: is {kind}, expected {expected} (move it away)")
    os.set_blocking(fd, True)
    return fd


def atomic_write_bytes(
    path: Path, data: bytes, *, regular_only: bool = False, exclusive: bool = False
) -> None:
    """Write `data` to `path` so that a crash leaves the old file or the new one: a temp file
    in the same folder, written and fsynced, renamed over `path`, the folder fsynced.
    regular_only: refuse to replace anything but a regular file (a user's output path: a
    symlink, a device, a FIFO or a folder there stays as it is). exclusive: only where nothing
    is yet (the temp file is linked, not renamed: atomic, never over a file that appeared
    meanwhile). StateError on any failure."""
    folder = path.parent
    if regular_only:
        _refuse_special(path)
    make_dirs(folder)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    except OSError as exc:
        raise write_error(folder, exc) from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if exclusive:
            try:
                os.link(tmp, path)
            except FileExistsError:
                raise StateError(f"{path}: exists already") from None
            os.unlink(tmp)
        else:
            if regular_only:
                _refuse_special(path)  # again, just before the rename: it may have appeared
            os.replace(tmp, path)
        fsync_dir(folder)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise write_error(folder, exc, path) from None
        raise


def atomic_write_text(
    path: Path, text: str, *, regular_only: bool = False, exclusive: bool = False
) -> None:
    atomic_write_bytes(path, text.encode("utf-8"), regular_only=regular_only, exclusive=exclusive)


def write_output_file(path: Path, text: str, mode: int = 0o666, *, replace: bool = True) -> None:
    """A file the user named on the command line (an exported profile, a CSV, an inventory),
    written atomically: a new path, or (with `replace`) in place of a regular file only; a
    symlink, a device, a FIFO or a folder there stays as it is (StateError naming it). Its
    mode is `mode` less the umask, as for any new file (the temp file behind it was 0600)."""
    atomic_write_text(path, text, regular_only=True, exclusive=not replace)
    umask = os.umask(0)
    os.umask(umask)
    with contextlib.suppress(OSError):
        os.chmod(path, mode & ~umask, follow_symlinks=False)


def atomic_write_json(path: Path, data: Any) -> None:
    atomic_write_text(path, json.dumps(data, indent=1, sort_keys=True) + "\n")
