"""Which pip requirement installs a Python module, from the hosts' own package metadata.

A module's import name is not its distribution's name (``yaml`` is PyYAML, ``transfer_queue``
is TransferQueue). The job preflight's hosts answer (tui/remote/job_preflight.py) with
``importlib.metadata.packages_distributions()`` for the modules they have, and with the
``Requires-Dist`` lines of their installed verl. A module missing on a host is named, in order:

1. by the distribution another host installed it from;
2. by verl's own requirement whose name matches the module's (case, ``-``, ``_`` and ``.``
   ignored; a requirement named ``<module>-<more>`` when only one does, as megatron-core), with
   its version bound and the extra that lists it (``TransferQueue>=0.1.10``, verl-core);
3. by the module's top-level name.

Everything here comes from hosts: names and bounds are checked against PEP 508's characters
before they reach a command line, which is built with shlex.join.
"""

from __future__ import annotations

import functools
import re
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]{0,98}[A-Za-z0-9])?\Z")
_SPEC = re.compile(r"^[A-Za-z0-9<>=!~.,*+ ]{0,80}\Z")
_REQ = re.compile(
    r"^\s*(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*"
    r"(?:\((?P<paren>[^)]*)\)|(?P<spec>[<>=!~][^;]*))?\s*(?:;(?P<marker>.*))?$"
)
_EXTRA = re.compile(r"""extra\s*==\s*["']([A-Za-z0-9._-]+)["']""")
MAX_REQUIRES = 400
# pip flags a package's build needs (flash-attn compiles against the torch already installed).
# Keys normalized (normalize()).
BUILD_FLAGS = {"flashattn": ("--no-build-isolation",)}


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "", name).lower()


@dataclass(frozen=True)
class Requirement:
    name: str  # the distribution's name
    spec: str = ""  # ">=0.1.10", "" when any version
    extra: str = ""  # the verl extra that lists it
    source: str = "name"  # "installed" | "verl" | "name"

    @property
    def text(self) -> str:
        return f"{self.name}{self.spec}"

    def install_argv(self, python: str) -> list[str]:
        flags = BUILD_FLAGS.get(normalize(self.name), ())
        return [python, "-m", "pip", "install", self.text, *flags]

    def command(self, python: str) -> str:
        return shlex.join(self.install_argv(python))


def parse_requires(lines: Iterable[Any]) -> list[Requirement]:
    """Requires-Dist lines (untrusted) as Requirements; a line that does not read is skipped."""
    out = []
    for line in list(lines)[:MAX_REQUIRES]:
        m = _REQ.match(str(line)[:300]) if isinstance(line, str) else None
        if m is None or not _NAME.match(m.group("name")):
            continue
        spec = (m.group("paren") or m.group("spec") or "").strip().replace(" ", "")
        if not _SPEC.match(spec):
            spec = ""
        extra = _EXTRA.search(m.group("marker") or "")
        out.append(Requirement(m.group("name"), spec, extra.group(1) if extra else "", "verl"))
    return out


def from_verl(module: str, requires: Iterable[Requirement]) -> Requirement | None:
    """verl's requirement for `module`: an exact name match (a base requirement before one
    an extra lists), else the only requirement named `<module>-…`."""
    want = normalize(module)
    reqs = list(requires)
    exact = [r for r in reqs if normalize(r.name) == want]
    if exact:
        return min(exact, key=lambda r: (bool(r.extra), r.extra))
    prefixed = {r.name.lower(): r for r in reqs if r.name.lower().startswith(module.lower() + "-")}
    return next(iter(prefixed.values())) if len(prefixed) == 1 else None


class PipNames:
    """The requirement for any module, from every host's answer (see the module docstring)."""

    def __init__(self, answers: Iterable[Mapping[str, Any]]):
        self.installed: dict[str, str] = {}
        self.requires: list[Requirement] = []
        for ans in answers:
            mods = ans.get("modules") if isinstance(ans, Mapping) else None
            for module, row in (mods or {}).items() if isinstance(mods, Mapping) else ():
                dists = row.get("dists") if isinstance(row, Mapping) else None
                names = [d for d in dists or [] if isinstance(d, str) and _NAME.match(d)]
                if names and isinstance(module, str):
                    self.installed.setdefault(module, names[0])
            if not self.requires and isinstance(ans, Mapping):
                reqs = ans.get("verl_requires")
                if isinstance(reqs, list):
                    self.requires = parse_requires(reqs)

    def requirement(self, module: str) -> Requirement:
        top = module.split(".")[0]
        if top in self.installed:
            name = self.installed[top]
            ver = from_verl(name, self.requires)  # verl's bound for it, when verl states one
            spec = ver.spec if ver and normalize(ver.name) == normalize(name) else ""
            return Requirement(name, spec, ver.extra if ver else "", "installed")
        found = from_verl(top, self.requires)
        if found is not None:
            return found
        return Requirement(top if _NAME.match(top) else "PACKAGE", source="name")

    def fix(self, python: str, module: str) -> str:
        """`python -m pip install NAME[SPEC]`, quoted, and where verl lists it."""
        req = self.requirement(module)
        extra = f" (verl's {req.extra} extra)" if req.extra else ""
        return req.command(python) + extra


@functools.cache
def this_python() -> PipNames:
    """PipNames from this interpreter's verl metadata alone (a log line's hint has no host to
    ask); a module it does not list keeps its own name."""
    try:
        import importlib.metadata as metadata

        requires = metadata.requires("verl") or []
    except Exception:  # no verl here (the cockpit reads it from the head)
        requires = []
    return PipNames([{"verl_requires": list(requires)}])
