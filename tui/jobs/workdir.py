"""A local working_dir, packaged the way Ray's job client does it: a zip named by its content
hash, uploaded once through the dashboard (`PUT /api/packages/gcs/_ray_pkg_<hash>.zip`)."""

from __future__ import annotations

import fnmatch
import hashlib
import io
import os
import zipfile
from dataclasses import dataclass
from pathlib import Path

# Ray refuses larger uploads (its GCS package limit); say so before zipping gigabytes.
MAX_UPLOAD_BYTES = 100 * 1024 * 1024
DEFAULT_EXCLUDES = (".git", "__pycache__", "*.pyc", ".venv", "*.egg-info")


class WorkdirError(Exception):
    pass


@dataclass(frozen=True)
class Package:
    uri: str  # gcs://_ray_pkg_<hash>.zip
    name: str  # _ray_pkg_<hash>.zip
    data: bytes
    files: int


def _excluded(rel: str, patterns: tuple[str, ...]) -> bool:
    parts = rel.split("/")
    for pat in patterns:
        pat = pat.rstrip("/")
        if fnmatch.fnmatch(rel, pat) or any(fnmatch.fnmatch(p, pat) for p in parts):
            return True
    return False


def walk(root: Path, excludes: tuple[str, ...]) -> list[tuple[str, Path]]:
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        rel_dir = "" if rel_dir == "." else rel_dir + "/"
        dirnames[:] = sorted(d for d in dirnames if not _excluded(rel_dir + d, excludes))
        for name in sorted(filenames):
            rel = rel_dir + name
            if not _excluded(rel, excludes):
                files.append((rel, Path(dirpath) / name))
    return files


def measure(root: Path, excludes: list[str] | tuple[str, ...] = ()) -> int:
    """Bytes that would be uploaded (before compression)."""
    patterns = (*DEFAULT_EXCLUDES, *excludes)
    return sum(p.stat().st_size for _, p in walk(root, patterns))


def package(root: Path, excludes: list[str] | tuple[str, ...] = ()) -> Package:
    root = Path(root).expanduser()
    if not root.is_dir():
        raise WorkdirError(f"working_dir {root} is not a directory")
    patterns = (*DEFAULT_EXCLUDES, *excludes)
    files = walk(root, patterns)
    total = sum(p.stat().st_size for _, p in files)
    if total > MAX_UPLOAD_BYTES:
        biggest = sorted(files, key=lambda f: f[1].stat().st_size, reverse=True)[:3]
        names = ", ".join(rel.split("/")[0] for rel, _ in biggest)
        raise WorkdirError(f"working_dir {root} is {total / 2**20:.0f} MiB, over Ray's "
                           f"{MAX_UPLOAD_BYTES // 2**20} MiB upload limit: add excludes "
                           f"(largest: {names})")
    digest = hashlib.sha1()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for rel, path in files:
            data = path.read_bytes()
            digest.update(rel.encode() + b"\0" + data)
            info = zipfile.ZipInfo(rel, date_time=(1980, 1, 1, 0, 0, 0))  # content-only hash
            info.external_attr = (path.stat().st_mode & 0o777) << 16
            zf.writestr(info, data, zipfile.ZIP_DEFLATED)
    name = f"_ray_pkg_{digest.hexdigest()[:32]}.zip"
    return Package(f"gcs://{name}", name, buf.getvalue(), len(files))
