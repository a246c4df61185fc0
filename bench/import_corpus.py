"""How many launch scripts `profile import` + `profile check` judge right.

    python bench/import_corpus.py [FOLDER …]   (default: tests/fixtures/shell_constructs)

A script labelled `# expect: clean` must import and check with no error; one labelled
`# expect: refused KEY … line:N …` must have every KEY named by a check error and, for each
line:N, an argument the import lists as refused at line N. Unlabelled scripts are listed with
what import and check found. Prints one line a script, then the shares.
"""

from __future__ import annotations

import os
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tui.config.yamlfile import ConfigError, read_text
from tui.jobs.importer import ScriptLimitError, import_script
from tui.jobs.validate import check_profile
from tui.sanitize import one_line

DEFAULT = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "shell_constructs"
_LABEL = re.compile(r"^#\s*expect:\s*(clean|refused)\b(.*)$", re.M)


@dataclass
class Outcome:
    script: Path
    label: str | None  # "clean", "refused" or None (unlabelled)
    expected: list[str] = field(default_factory=list)  # keys and line:N
    imported: bool = False
    errors: list[str] = field(default_factory=list)  # check errors' keys
    refused_lines: list[int] = field(default_factory=list)
    warnings: int = 0
    failure: str | None = None  # the one line when the script could not be read
    seconds: float = 0.0

    @property
    def found(self) -> set[str]:
        return {*self.errors, *(f"line:{n}" for n in self.refused_lines)}

    @property
    def right(self) -> bool | None:
        if self.label == "clean":
            return self.imported and not self.errors and not self.refused_lines
        if self.label == "refused":
            return self.imported and set(self.expected) <= self.found
        return None


def judge(script: Path) -> Outcome:
    start = time.monotonic()
    try:
        text = read_text(script)
    except ConfigError as exc:
        return Outcome(script, None, failure=str(exc))
    m = _LABEL.search(text)
    out = Outcome(script, m.group(1) if m else None, m.group(2).split() if m else [])
    try:
        # As `verl-tui profile import SCRIPT` run here: $0 is the path as given, $(pwd) here.
        result = import_script(text, source=str(script), cwd=os.getcwd())
    except ScriptLimitError as exc:
        out.failure = str(exc)
        return out
    out.imported = result.command_line is not None
    out.refused_lines = [u.line for u in result.refused]
    if out.imported:
        report = check_profile(result.profile)
        out.errors = [p.key or "-" for p in report.errors]
        out.warnings = len(report.warnings)
    out.seconds = time.monotonic() - start
    return out


def scripts(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*.sh") if p.is_file())


def share(n: int, total: int) -> str:
    return f"{n} of {total} ({100 * n / total:.0f} %)" if total else "none"


def main(argv: list[str]) -> int:
    folders = [Path(a) for a in argv] or [DEFAULT]
    outcomes = [judge(s) for f in folders for s in scripts(f)]
    for o in outcomes:
        verdict = {True: "ok  ", False: "MISS", None: "    "}[o.right]
        what = o.failure or (
            f"errors: {', '.join(o.errors) or '-'}; refused at lines: "
            f"{', '.join(map(str, o.refused_lines)) or '-'}; warnings: {o.warnings}"
            if o.imported
            else "no verl command found"
        )
        label = f"[{o.label} {' '.join(o.expected)}]".replace(" ]", "]") if o.label else ""
        print(one_line(f"{verdict} {os.path.relpath(o.script)} {label} {what} ({o.seconds:.2f} s)"))
    clean = [o for o in outcomes if o.label == "clean"]
    refused = [o for o in outcomes if o.label == "refused"]
    n_clean = sum(bool(o.right) for o in clean)
    print(f"valid scripts that import and check clean: {share(n_clean, len(clean))}")
    print(
        "invalid scripts caught naming every refused key: "
        f"{share(sum(bool(o.right) for o in refused), len(refused))}"
    )
    unlabelled = len(outcomes) - len(clean) - len(refused)
    if unlabelled:
        print(f"unlabelled: {unlabelled} (listed above)")
    return 0 if all(o.right is not False for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
