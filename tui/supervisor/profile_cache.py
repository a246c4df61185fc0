"""A job's profile as the supervisor's duties read it each pass: loaded again only when the file
changed (its mtime and size), so a pass over many jobs does not parse their YAML every time."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tui.jobs.profiles import Profile


class ProfileCache:
    def __init__(self) -> None:
        self._profiles: dict[str, tuple[tuple[int, int], Profile]] = {}

    def load(self, path: str) -> Profile:
        """The profile at `path`; OSError or ConfigError (one line, file:line) as load_profile."""
        from tui.jobs.profiles import load_profile  # pydantic and the schema: on first use

        st = Path(path).stat()
        key = (st.st_mtime_ns, st.st_size)
        cached = self._profiles.get(path)
        if cached is None or cached[0] != key:
            cached = (key, load_profile(Path(path)))
            self._profiles[path] = cached
        return cached[1]
