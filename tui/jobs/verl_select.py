"""Which verl the trainer config is read from, without importing verl (which imports torch).

The cluster's, when a service selected it (`use_source`; jobs/verl_source.py reads the head's
verl over SSH into a cache folder laid out like verl's package), else this Python's, found with
``importlib.util.find_spec("verl")``. hydra-core/omegaconf are verl-tui's own dependencies,
imported inside functions: the cockpit's cold start must not pay for them.
"""

from __future__ import annotations

import functools
import importlib.util
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tui.errors import VerlTuiError

CONFIG_NAME = "ppo_trainer"

HYDRA_LOCK = threading.RLock()  # Hydra keeps global state; one composition at a time

# Caches of what was read from the selected verl (composed bases, the key catalog): emptied
# when another verl is selected. Modules register theirs with `on_source_change`.
_caches: list[Callable[[], None]] = []


def on_source_change(*clear: Callable[[], None]) -> None:
    """Call each of `clear` (a cache's cache_clear) whenever another verl is selected."""
    _caches.extend(clear)


class SchemaError(VerlTuiError, title="verl config", kind="bad_input"):
    """verl's config cannot be read (verl missing, or its files do not compose)."""


# -- locating verl -------------------------------------------------------------------------


@dataclass(frozen=True)
class VerlSource:
    """A verl package folder the config is read from (its trainer/config/*.yaml and the
    dataclass sources), and where it came from."""

    root: Path  # laid out like verl's package: root/trainer/config/ppo_trainer.yaml
    version: str | None
    origin: str  # the host it was read from, or "this Python"
    python: str  # the interpreter whose verl it is (on that host)
    host: str | None = None  # None: this Python's own verl
    cached: bool = False  # the files came from the local cache (nothing read over SSH)
    files_read: int = 0  # files read over SSH for this selection
    note: str | None = None  # why the cluster's verl is not the one used, when it is not

    @property
    def label(self) -> str:
        return f"verl {self.version or '(unknown version)'} from {self.origin}"

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "from": self.origin,
            "host": self.host,
            "python": self.python,
            "cached": self.cached,
            "files_read": self.files_read,
            "note": self.note,
        }


_active: VerlSource | None = None  # selected by a service (the cluster's verl)
_cluster_failure: str | None = None  # why the cluster was asked and had none (for messages)
_hydra_ok = False


def use_source(source: VerlSource | None, *, cluster_failure: str | None = None) -> None:
    """Compose from `source` from now on (None: this Python's verl). `cluster_failure` says
    which host was asked and why it gave no verl, for the error when there is none here."""
    global _active, _cluster_failure
    with HYDRA_LOCK:
        # The caches hold what was read from the files composition reads: kept while those
        # stay the same (this Python's verl selected again, or named as the cluster's
        # fallback), since a full Hydra compose costs ~1 s of CPU.
        before, after = _active or local_source(), source or local_source()
        same = (before is None and after is None) or (
            before is not None
            and after is not None
            and before.root == after.root
            and before.version == after.version
        )
        _active, _cluster_failure = source, cluster_failure
        if not same:
            _clear_caches()


def current_source() -> VerlSource:
    """The verl composition reads; SchemaError (one line) when there is none."""
    if _active is not None:
        return _active
    local = local_source()
    if local is not None:
        return local
    where = sys.executable or "this interpreter"
    if _cluster_failure:
        raise SchemaError(
            f"verl is not installed on the cluster ({_cluster_failure}) nor in "
            f"this Python ({where}): pip install verl on the hosts; profiles "
            "are checked against verl's own config"
        )
    raise SchemaError(
        f"verl is not installed in this Python ({where}) and no cluster was "
        "asked: give the hosts file (profile check --hosts HOSTS.yaml) to read "
        "the cluster's verl, or pip install verl here; profiles are checked "
        "against verl's own config"
    )


@functools.cache
def local_source() -> VerlSource | None:
    """This Python's verl, found without importing it; None when it has none."""
    try:
        spec = importlib.util.find_spec("verl")
    except (ImportError, ValueError):
        spec = None
    for loc in list(spec.submodule_search_locations or []) if spec else []:
        root = Path(loc)
        if (root / "trainer" / "config" / f"{CONFIG_NAME}.yaml").is_file():
            return VerlSource(
                root=root,
                version=_local_version(root),
                origin="this Python",
                python=sys.executable or "python",
            )
    return None


def _local_version(root: Path) -> str | None:
    try:  # verl's own __version__ is this file's text
        text = (root / "version" / "version").read_text(encoding="utf-8").strip()
        if text:
            return text
    except OSError:
        pass
    try:
        import importlib.metadata

        return importlib.metadata.version("verl")
    except Exception:  # no metadata: shown as unknown
        return None


def require_hydra() -> None:
    """SchemaError when Hydra or OmegaConf is missing here (a broken verl-tui install)."""
    global _hydra_ok
    if _hydra_ok:
        return
    lacking = [m for m in ("hydra", "omegaconf") if not _importable(m)]
    _hydra_ok = not lacking
    if lacking:
        raise SchemaError(
            f"{' and '.join(lacking)} missing in this Python "
            f"({sys.executable or 'this interpreter'}): they are verl-tui's own "
            "dependencies (pip install hydra-core omegaconf); profiles are "
            "composed with them"
        )


def verl_config_dir() -> Path:
    """verl's trainer config folder (the selected source's); SchemaError when there is no
    verl, or no Hydra to compose it with."""
    require_hydra()
    return current_source().root / "trainer" / "config"


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _clear_caches() -> None:
    for clear in _caches:
        clear()
