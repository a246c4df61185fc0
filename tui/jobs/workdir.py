"""A local working_dir, packaged the way Ray's job client does it: a zip named by its content
hash, uploaded once through the dashboard (`PUT /api/packages/gcs/_ray_pkg_<hash>.zip`)."""

from __future__ import annotations

import fnmatch
import hashlib
import io
import os
import stat
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from tui.errors import VerlTuiError

# Ray refuses larger uploads (its GCS package limit); say so before zipping gigabytes.
MAX_UPLOAD_BYTES = 100 * 1024 * 1024
DEFAULT_EXCLUDES = (".git", "__pycache__", "*.pyc", ".venv", "*.egg-info")


class WorkdirError(VerlTuiError, title="working_dir not sent"):
    pass


@dataclass(frozen=True)
class Package:
    uri: str  # gcs://_ray_pkg_<hash>.zip
    name: str  # _ray_pkg_<hash>.zip
    data: bytes
    files: int
    skipped: tuple[tuple[Path, str], ...] = ()  # (path, why) left out, see scan()


def _excluded(rel: str, patterns: tuple[str, ...]) -> bool:
    parts = rel.split("/")
    for pat in patterns:
        pat = pat.rstrip("/")
        if fnmatch.fnmatch(rel, pat) or any(fnmatch.fnmatch(p, pat) for p in parts):
            return True
    return False


@dataclass
class Scan:
    """The files a working_dir upload holds, and what was left out and why (by path)."""

    files: list[tuple[str, Path, int]] = field(default_factory=list)  # (name in zip, path, size)
    skipped: list[tuple[Path, str]] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(size for _, _, size in self.files)


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a device"),
        (stat.S_ISBLK, "a device"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def scan(root: Path, excludes: list[str] | tuple[str, ...] = ()) -> Scan:
    """Regular files under `root` (symlinks to files followed) minus the excludes. A dangling
    symlink, an unreadable entry, a FIFO/socket/device is skipped and listed in `skipped`:
    uploading it would fail (or block) half-way through."""
    patterns = (*DEFAULT_EXCLUDES, *excludes)
    out = Scan()

    def walk_error(exc: OSError) -> None:
        out.skipped.append((Path(exc.filename or root), exc.strerror or str(exc)))

    for dirpath, dirnames, filenames in os.walk(root, onerror=walk_error):
        rel_dir = os.path.relpath(dirpath, root)
        rel_dir = "" if rel_dir == "." else rel_dir + "/"
        dirnames[:] = sorted(d for d in dirnames if not _excluded(rel_dir + d, patterns))
        for name in sorted(filenames):
            rel = rel_dir + name
            if _excluded(rel, patterns):
                continue
            path = Path(dirpath) / name
            try:
                st = path.stat()
            except FileNotFoundError:
                out.skipped.append((path, "dangling symlink" if path.is_symlink() else "vanished"))
                continue
            except OSError as exc:
                out.skipped.append((path, exc.strerror or str(exc)))
                continue
            if not stat.S_ISREG(st.st_mode):
                out.skipped.append((path, _kind(st.st_mode)))
                continue
            out.files.append((rel, path, st.st_size))
    return out


def walk(root: Path, excludes: tuple[str, ...]) -> list[tuple[str, Path]]:
    return [(rel, path) for rel, path, _ in scan(root, excludes).files]


def measure(root: Path, excludes: list[str] | tuple[str, ...] = ()) -> int:
    """Bytes that would be uploaded (before compression)."""
    return scan(root, excludes).total


def package(root: Path, excludes: list[str] | tuple[str, ...] = ()) -> Package:
    root = Path(root).expanduser()
    if not root.is_dir():
        raise WorkdirError(f"working_dir {root} is not a directory")
    found = scan(root, excludes)
    total = found.total
    if total > MAX_UPLOAD_BYTES:
        biggest = sorted(found.files, key=lambda f: f[2], reverse=True)[:3]
        names = ", ".join(rel.split("/")[0] for rel, _, _ in biggest)
        raise WorkdirError(
            f"working_dir {root} is {total / 2**20:.0f} MiB, over Ray's "
            f"{MAX_UPLOAD_BYTES // 2**20} MiB upload limit: add excludes "
            f"(largest: {names})"
        )
    digest = hashlib.sha1()
    buf = io.BytesIO()
    files = 0
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for rel, path, _ in found.files:
            try:
                data = path.read_bytes()
                mode = path.stat().st_mode
            except OSError as exc:  # removed or changed since the scan
                found.skipped.append((path, exc.strerror or str(exc)))
                continue
            digest.update(rel.encode() + b"\0" + data)
            info = zipfile.ZipInfo(rel, date_time=(1980, 1, 1, 0, 0, 0))  # content-only hash
            info.external_attr = (mode & 0o777) << 16
            zf.writestr(info, data, zipfile.ZIP_DEFLATED)
            files += 1
    name = f"_ray_pkg_{digest.hexdigest()[:32]}.zip"
    return Package(f"gcs://{name}", name, buf.getvalue(), files, tuple(found.skipped))
