#!/usr/bin/env python3
"""Failure snippets through `verl-tui explain`: the hit rate and the slowest line.

Each snippet goes through explain's own path (tui.commands.explain.findings over its bytes). A
failure snippet is explained when one of its findings carries a hint with the expected cause
id ("first" when it is the first hint); a benign snippet must get no finding at all (no error
line, no hint). Every line is also run alone, timed, for the worst per-line time.

Input: files or folders (read recursively: *.txt, *.log) in any of these shapes:
  snippets   blocks that start `@@ <cause id or benign> <source url>` (tests/fixtures/
             failure_logs/snippets.txt)
  lines      `[cause]` sections of one-line snippets, `# <url>` naming the source of the lines
             below it, `[benign]` for harmless lines (tests/fixtures/failure_logs/lines.txt)
  one file   any other file is one snippet; its cause is a first line `# expect: <id>` or the
             file name's prefix before `--` (`nccl_timeout--run3.log`, `benign--ok.log`); a
             file with neither is listed with its hints but not scored

    .venv/bin/python bench/explain_corpus.py [PATH ...] [--json] [--show 20]
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tui.commands.explain import Finding, findings  # noqa: E402

DEFAULT = (
    ROOT / "tests" / "fixtures" / "failure_logs" / "snippets.txt",
    ROOT / "tests" / "fixtures" / "failure_logs" / "lines.txt",
)
BENIGN = "benign"


@dataclass
class Snippet:
    expect: str | None  # a cause id, BENIGN, or None (not scored)
    source: str
    lines: list[str] = field(default_factory=list)


@dataclass
class Result:
    snippet: Snippet
    hints: list[str]  # hint keys, in line order
    flagged: int  # findings of any kind
    worst_line_s: float


def _snippet_blocks(text: str, source: str) -> list[Snippet]:
    out: list[Snippet] = []
    for raw in text.splitlines():
        if raw.startswith("@@ "):
            parts = raw[3:].split(None, 1)
            out.append(Snippet(parts[0] if parts else None, parts[1] if len(parts) > 1 else source))
        elif out:
            out[-1].lines.append(raw)
    for s in out:
        while s.lines and not s.lines[-1].strip():
            s.lines.pop()
    return out


def _line_sections(text: str) -> list[Snippet]:
    out: list[Snippet] = []
    section, url = None, ""
    for raw in text.splitlines():
        if not raw.strip():
            continue
        if raw.startswith("# "):
            url = raw[2:]
        elif raw.startswith("[") and raw.endswith("]") and " " not in raw:
            section = raw[1:-1]
        elif section is not None:
            out.append(Snippet(section, url, [raw]))
    return out


def read_path(path: Path) -> list[Snippet]:
    if path.is_dir():
        return [
            s for p in sorted(path.rglob("*")) if p.suffix in (".txt", ".log") for s in read_path(p)
        ]
    text = path.read_text(encoding="utf-8", errors="replace")
    if any(line.startswith("@@ ") for line in text.splitlines()):
        return _snippet_blocks(text, str(path))
    lines = text.splitlines()
    if any(ln.startswith("[") and ln.endswith("]") and " " not in ln for ln in lines[:5]):
        return _line_sections(text)
    expect = None
    if lines and lines[0].startswith("# expect:"):
        expect, lines = lines[0].split(":", 1)[1].strip(), lines[1:]
    elif "--" in path.name:
        expect = path.name.split("--", 1)[0]
    return [Snippet(expect, str(path), lines)]


def _run(data: bytes) -> list[Finding]:
    return [f for f in findings(io.BytesIO(data)) if isinstance(f, Finding)]


def evaluate(snippets: list[Snippet]) -> list[Result]:
    # One-off costs first (a hint's lazy imports), so the per-line times are the matcher's.
    _run(b"ModuleNotFoundError: No module named 'x'\nCould not override 'a.b'\n")
    results = []
    for s in snippets:
        found = _run(("\n".join(s.lines) + "\n").encode())
        worst = 0.0
        for line in s.lines:
            t0 = time.perf_counter()
            _run(line.encode() + b"\n")
            worst = max(worst, time.perf_counter() - t0)
        hints = [f.hint.key for f in found if f.hint is not None]
        results.append(Result(s, hints, len(found), worst))
    return results


def summary(results: list[Result]) -> dict[str, object]:
    failures = [r for r in results if r.snippet.expect not in (None, BENIGN)]
    benign = [r for r in results if r.snippet.expect == BENIGN]
    hit = [r for r in failures if r.snippet.expect in r.hints]
    first = [r for r in failures if r.hints[:1] == [r.snippet.expect]]
    return {
        "failures": len(failures),
        "explained": len(hit),
        "rate": len(hit) / len(failures) if failures else 1.0,
        "first_hint_rate": len(first) / len(failures) if failures else 1.0,
        "benign": len(benign),
        "benign_flagged": [r.snippet.source for r in benign if r.flagged],
        "misses": [
            {"expect": r.snippet.expect, "got": r.hints, "source": r.snippet.source}
            for r in failures
            if r not in hit
        ],
        "unscored": [
            {"source": r.snippet.source, "got": r.hints}
            for r in results
            if r.snippet.expect is None
        ],
        "worst_line_ms": 1000 * max((r.worst_line_s for r in results), default=0.0),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("paths", nargs="*", type=Path, help="files or folders (default: the fixtures)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--show", type=int, default=20, help="misses listed")
    args = p.parse_args()
    snippets = [s for path in (args.paths or DEFAULT) for s in read_path(path)]
    out = summary(evaluate(snippets))
    if args.json:
        print(json.dumps(out))
        return 0
    rate, first = 100 * float(out["rate"]), 100 * float(out["first_hint_rate"])  # type: ignore[arg-type]
    flagged, misses, unscored = out["benign_flagged"], out["misses"], out["unscored"]
    assert isinstance(flagged, list) and isinstance(misses, list) and isinstance(unscored, list)
    print(
        f"explained {out['explained']}/{out['failures']} failure snippets ({rate:.1f} %, "
        f"first hint {first:.1f} %); benign flagged {len(flagged)}/{out['benign']}; "
        f"worst line {out['worst_line_ms']:.2f} ms"
    )
    for miss in misses[: args.show]:
        print(f"  miss: want {miss['expect']}, got {miss['got'] or 'no hint'}  {miss['source']}")
    for src in flagged:
        print(f"  benign flagged: {src}")
    for u in unscored[: args.show]:
        print(f"  unscored: {u['source']}: {u['got'] or 'no hint'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
