"""The verl a job will run, read from the cluster so the login node needs neither verl nor torch.

The head's interpreter (hosts.yaml `python`) runs tui/remote/verl_config.py over SSH: it finds
verl's package folder without importing verl and answers with a manifest (version, files, sizes);
only when that manifest is not in the local cache does a second exec send the files (a gzip tar,
base64 in one JSON line, capped). The cache lives under $XDG_CACHE_HOME/verl-tui/verl/, one folder
per verl version and file list, written atomically (a temp folder renamed into place), laid out
like verl's package so schema.py composes from it as from an installed verl. This Python's verl is
the fallback when the head has none; the error names the host asked and why it failed.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import hashlib
import io
import json
import os
import re
import shutil
import tarfile
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tui.config.hosts import Inventory
from tui.errors import VerlTuiError
from tui.jobs import schema
from tui.jobs.preflight.imports import SOURCE_FILES as IMPORT_MAP_FILES
from tui.jobs.schema import SchemaError, VerlSource
from tui.jobs.verl_imports import SOURCE_TREES
from tui.remote import python_argv
from tui.sanitize import one_line
from tui.transport.fleet import Fleet
from tui.transport.types import TransportError

DEFAULT_TIMEOUT = 60.0
MAX_BYTES = 24 << 20  # verl 0.9.1: its config files and .py sources are ~5 MiB
MAX_FILES = 4000
KEEP_CACHED = 6  # folders of other versions kept (a cluster switched back finds its own)
# What composition reads: the YAML tree, and the dataclass sources that type null defaults.
# And the files the job preflight's import map reads (tui/jobs/preflight/imports.py), and
# every .py of verl: the preflight follows a TaskRunner's imports through them (verl_imports).
SPEC = {
    "yaml": ["trainer/config"],
    "py": [*schema._DATACLASS_FILES, *IMPORT_MAP_FILES],
    "py_tree": list(SOURCE_TREES),
}
_VERSION_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.+_-]{0,63}\Z")
_REL_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_./-]{0,300}\.(yaml|py)\Z")


class VerlUnavailable(VerlTuiError, title="verl unavailable", kind="unavailable"):
    """The host asked has no readable verl; the message names the host and why (one line)."""


@dataclass(frozen=True)
class Manifest:
    version: str
    root: str  # verl's folder on the host (shown, never used here)
    python: str
    files: tuple[tuple[str, int, int], ...]  # (path relative to verl's folder, size, mtime)

    @property
    def key(self) -> str:
        """Cache folder name: the version, and a digest of the file list so an edited
        (editable) install with the same version is read again."""
        digest = hashlib.sha256(json.dumps(self.files).encode()).hexdigest()[:12]
        return f"{self.version}-{digest}"

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "root": self.root,
            "python": self.python,
            "files": [list(f) for f in self.files],
        }


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return Path(base) / "verl-tui" / "verl"


def remote_argv(python: str, op: str) -> list[str]:
    """``python -u -c SOURCE OP SPEC [MAX]``: tui/remote/verl_config.py, inline."""
    argv = python_argv(python, "verl_config", op, json.dumps(SPEC))
    return [*argv, str(MAX_BYTES)] if op == "files" else argv


# -- the host's answer (untrusted: checked here, at the boundary) ----------------------------


def _answer(stdout: str, stderr: str, status: int | None, where: str) -> dict[str, Any]:
    if status == 127:
        raise VerlUnavailable(f"{where}: interpreter not found")
    if status == 126:
        raise VerlUnavailable(f"{where}: interpreter not executable")
    data = None
    for line in reversed(stdout.splitlines()):
        if line.startswith("{"):
            try:
                data = json.loads(line)
            except ValueError:
                continue
            break
    if not isinstance(data, dict):
        lines = [ln.strip() for ln in stderr.strip().splitlines() if ln.strip()]
        why = (
            lines[-1]
            if lines and lines[0].startswith("Traceback")
            else lines[0]
            if lines
            else f"exit status {status}, no answer"
        )
        raise VerlUnavailable(f"{where}: {one_line(why)[:300]}")
    if "error" in data:
        raise VerlUnavailable(f"{where}: {one_line(str(data['error']))[:300]}")
    return data


def parse_manifest(data: dict[str, Any], where: str) -> Manifest:
    """The manifest part of an answer; VerlUnavailable naming what is wrong with it."""
    version, root, python = data.get("version"), data.get("root"), data.get("python")
    if not isinstance(version, str) or not _VERSION_RE.match(version):
        raise VerlUnavailable(
            f"{where}: verl reports no usable version ({one_line(repr(version))[:80]})"
        )
    files = data.get("files")
    if not isinstance(files, list) or not files or len(files) > MAX_FILES:
        raise VerlUnavailable(f"{where}: verl's file list is missing or too long")
    out: list[tuple[str, int, int]] = []
    for item in files:
        if not (
            isinstance(item, list)
            and len(item) == 3
            and isinstance(item[0], str)
            and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in item[1:])
        ):
            raise VerlUnavailable(f"{where}: bad entry in verl's file list")
        rel = item[0]
        if not _REL_RE.match(rel) or ".." in rel.split("/") or "//" in rel:
            raise VerlUnavailable(f"{where}: unsafe path in verl's file list: {one_line(rel)[:80]}")
        out.append((rel, item[1], item[2]))
    if sum(size for _, size, _ in out) > MAX_BYTES:
        raise VerlUnavailable(f"{where}: verl's config files exceed {MAX_BYTES >> 20} MiB")
    if "trainer/config/ppo_trainer.yaml" not in {rel for rel, _, _ in out}:
        raise VerlUnavailable(f"{where}: verl's trainer/config/ppo_trainer.yaml is missing")
    return Manifest(
        version, one_line(str(root))[:300], one_line(str(python))[:300], tuple(sorted(out))
    )


def _unpack(tar_b64: Any, manifest: Manifest, dest: Path, where: str) -> None:
    """Write exactly the manifest's files from the tar into dest; nothing else, no links."""
    if not isinstance(tar_b64, str) or len(tar_b64) > 2 * MAX_BYTES:
        raise VerlUnavailable(f"{where}: no file archive in the answer")
    try:
        blob = base64.b64decode(tar_b64, validate=True)
    except (binascii.Error, ValueError):
        raise VerlUnavailable(f"{where}: the file archive is not base64") from None
    sizes = {rel: size for rel, size, _ in manifest.files}
    written: set[str] = set()
    try:
        with tarfile.open(fileobj=io.BytesIO(blob), mode="r:gz") as tar:
            for member in tar:
                rel = member.name
                if not member.isfile() or rel not in sizes or rel in written:
                    raise VerlUnavailable(
                        f"{where}: unexpected entry in the file archive: {one_line(rel)[:80]}"
                    )
                if member.size != sizes[rel]:
                    raise VerlUnavailable(f"{where}: {rel} changed while it was read; try again")
                src = tar.extractfile(member)
                data = src.read(sizes[rel] + 1) if src else b""
                if len(data) != sizes[rel]:
                    raise VerlUnavailable(f"{where}: {rel} is truncated in the archive")
                target = dest.joinpath(*rel.split("/"))
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
                written.add(rel)
    except (tarfile.TarError, EOFError, OSError, ValueError) as exc:
        raise VerlUnavailable(
            f"{where}: the file archive cannot be read: {one_line(str(exc))[:120]}"
        ) from None
    missing = sorted(set(sizes) - written)
    if missing:
        raise VerlUnavailable(f"{where}: the file archive lacks {missing[0]}")


# -- the cache -------------------------------------------------------------------------------


def cached_folder(manifest: Manifest) -> Path | None:
    """The cached package folder for exactly this manifest, else None."""
    folder = cache_root() / manifest.key
    try:
        saved = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if (
        not isinstance(saved, dict)
        or saved.get("version") != manifest.version
        or [tuple(f) for f in saved.get("files") or []] != list(manifest.files)
    ):
        return None
    pkg = folder / "verl"  # laid out like the installed package
    return pkg if (pkg / "trainer" / "config" / "ppo_trainer.yaml").is_file() else None


def _store(manifest: Manifest, tar_b64: Any, where: str) -> Path:
    """Unpack into a temp folder next to the cache, then rename it into place: a crash or a
    concurrent reader never sees half a folder."""
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    final = root / manifest.key
    tmp = Path(tempfile.mkdtemp(prefix=f".{manifest.key}.", dir=root))
    try:
        _unpack(tar_b64, manifest, tmp / "verl", where)
        (tmp / "manifest.json").write_text(json.dumps(manifest.to_json()), encoding="utf-8")
        done = cached_folder(manifest)
        if done is not None:  # another process stored it meanwhile (and may be reading it)
            return done
        if final.exists():  # an unusable leftover (same key, other content): replace it
            stale = Path(tempfile.mkdtemp(prefix=f".{manifest.key}.old.", dir=root))
            with contextlib.suppress(OSError):
                os.replace(final, stale / "x")
            shutil.rmtree(stale, ignore_errors=True)
        try:
            os.replace(tmp, final)
        except OSError:  # another process put the same folder there first: use that one
            if cached_folder(manifest) is None:
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    _prune(root, keep=final)
    return final / "verl"


def _prune(root: Path, keep: Path) -> None:
    entries = [p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")]
    entries.sort(key=lambda p: p.stat().st_mtime, reverse=True)
    for old in [p for p in entries if p != keep][KEEP_CACHED:]:
        shutil.rmtree(old, ignore_errors=True)


# -- reading a host's verl -------------------------------------------------------------------


async def read_from_host(
    fleet: Fleet, host: str, *, timeout: float = DEFAULT_TIMEOUT
) -> VerlSource:
    """The host's verl config as a local folder: from the cache when its manifest is there,
    else read over SSH and cached. VerlUnavailable (one line naming the host) otherwise."""
    spec = fleet.inventory.host(host)
    where = f"{spec.name} ({spec.python})"
    try:
        transport = await fleet.ready(spec.name, timeout)
        res = await transport.run(
            remote_argv(spec.python, "manifest"), timeout=timeout, what="read verl (manifest)"
        )
    except TransportError as exc:
        raise VerlUnavailable(f"{spec.name}: {one_line(str(exc))[:300]}") from None
    manifest = parse_manifest(_answer(res.stdout, res.stderr, res.exit_status, where), where)
    found = cached_folder(manifest)
    if found is not None:
        return VerlSource(
            root=found,
            version=manifest.version,
            origin=spec.name,
            python=spec.python,
            host=spec.name,
            cached=True,
        )
    try:
        res = await transport.run(
            remote_argv(spec.python, "files"), timeout=timeout, what="read verl (files)"
        )
    except TransportError as exc:
        raise VerlUnavailable(f"{spec.name}: {one_line(str(exc))[:300]}") from None
    data = _answer(res.stdout, res.stderr, res.exit_status, where)
    manifest = parse_manifest(data, where)  # the files as sent (they may have just changed)
    pkg = await asyncio.to_thread(_store, manifest, data.get("tar_b64"), where)
    return VerlSource(
        root=pkg,
        version=manifest.version,
        origin=spec.name,
        python=spec.python,
        host=spec.name,
        files_read=len(manifest.files),
    )


async def select_verl(
    fleet: Fleet, inventory: Inventory, *, timeout: float = DEFAULT_TIMEOUT
) -> VerlSource:
    """Make the head's verl the one profiles compose with (schema.use_source) and return it.
    The head runs the job's driver, so its verl is what the job composes with. When the head
    has none, this Python's verl with a `note` saying why; SchemaError when neither has one."""
    head = inventory.head.name
    try:
        source = await read_from_host(fleet, head, timeout=timeout)
    except VerlUnavailable as exc:
        local = schema.local_source()
        if local is None:
            schema.use_source(None, cluster_failure=f"asked {exc}")
            return schema.current_source()  # no verl here either: SchemaError naming both
        source = replace(
            local,
            note=f"the cluster's verl was not read ({exc}): composed with "
            f"this Python's verl {local.version or ''}".rstrip(),
        )
    schema.use_source(source)
    return source


def select_verl_sync(inventory: Inventory, *, timeout: float = DEFAULT_TIMEOUT) -> VerlSource:
    """select_verl with its own connections (for headless commands)."""
    schema.require_hydra()  # nothing to compose with: say so before any SSH

    # Only the head is asked: connect to it alone, not to every host of a large cluster.
    head_only = inventory.model_copy(update={"hosts": (inventory.head,)})

    async def body() -> VerlSource:
        async with Fleet(head_only) as fleet:
            return await select_verl(fleet, head_only, timeout=timeout)

    return asyncio.run(body())


__all__ = [
    "Manifest",
    "SchemaError",
    "VerlSource",
    "VerlUnavailable",
    "cache_root",
    "read_from_host",
    "select_verl",
    "select_verl_sync",
]
