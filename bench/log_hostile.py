#!/usr/bin/env python3
"""Signature matching on hostile long lines: the time `verl-tui explain` takes per line.

A log line is outside text and may be huge (one line of 300 KB is easy to produce). A regex
that can backtrack turns such a line into minutes of CPU; this bench feeds `explain`'s own
path (tui.commands.explain.findings over the bytes) one hostile line at a time and prints
the worst seconds per line. The hostile lines are built from the signature table itself, so
a new signature is covered without editing this file:

  literal   every required literal of every signature (and every prefilter anchor, every
            classify needle), repeated with a space to --size bytes: each regex sees its own
            anchor word thousands of times with no ending
  pair      a signature's literals alternated (the first half of an alternation over and
            over, never the second)
  blank     runs of blanks and tabs before Ray's `[repeated Nx across cluster]` tail,
            nested brackets, dotted names (`a.a.a…Error`), ANSI CSI starts

    .venv/bin/python bench/log_hostile.py [--size 300000] [--json]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tui.commands.explain import findings  # noqa: E402
from tui.logs.signatures import CLASS_NEEDLES, PREFILTER, SIGNATURES  # noqa: E402


def hostile_lines(size: int) -> dict[str, bytes]:
    words: dict[str, str] = {}
    for sig in SIGNATURES:
        # A literal as the pattern writes it (its case; the prefilter's copy is lowercase).
        src = sig.pattern.pattern.replace("\\", "")
        lits = []
        for lit in sig.literals:
            at = src.lower().find(lit)
            lits.append(src[at : at + len(lit)] if at >= 0 else lit)
        for lit in lits:
            words[f"literal {sig.key}: {lit[:30]}"] = lit
        if len(lits) > 1:
            words[f"pair {sig.key}"] = " ".join(lits[:2])
        # The pattern's own text minus regex syntax: its words in order, with no ending.
        src = "".join(c if c.isalnum() or c in " _.:'" else " " for c in sig.pattern.pattern)
        words[f"pattern words {sig.key}"] = " ".join(src.split()[:6])
    for a in (*PREFILTER.anchors, *CLASS_NEEDLES):
        words[f"anchor {a}"] = a
    words["ERROR upper"] = "ERROR"
    words["Traceback"] = "Traceback (most recent call last):"
    out = {k: ((w + " ") * (size // (len(w) + 1) + 1))[:size].encode() for k, w in words.items()}
    out["blank then repeated tail"] = b" " * size + b"x [repeated 3x across cluster]"
    out["tabs then across cluster]"] = b"\t " * (size // 2) + b"across cluster]"
    out["dotted name"] = (b"a." * (size // 2)) + b"Errorx"
    out["capital words"] = b"AError" * (size // 6)
    out["open brackets"] = b"(" * size
    out["ray prefix start"] = b"(" + b"x" * size
    out["csi start"] = b"\x1b[" + b"0" * size
    out["glog start"] = b"[E " + b"a." * (size // 2)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--size", type=int, default=300_000, help="bytes per hostile line")
    p.add_argument("--json", action="store_true")
    p.add_argument("--show", type=int, default=5, help="slowest lines listed")
    p.add_argument("--only", default="", help="only the lines whose name holds this text")
    args = p.parse_args()
    times: dict[str, float] = {}
    for name, line in hostile_lines(args.size).items():
        if args.only not in name:
            continue
        t0 = time.process_time()
        for _ in findings(io.BytesIO(line + b"\n")):
            pass
        times[name] = time.process_time() - t0
    ranked = sorted(times.items(), key=lambda kv: -kv[1])
    total = sum(times.values())
    result = {
        "size": args.size,
        "lines": len(times),
        "cpus": os.cpu_count(),
        "max_s": ranked[0][1],
        "total_s": total,
        "slowest": dict(ranked[: args.show]),
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(f"explain on hostile lines: {len(times)} lines of {args.size:,} bytes")
        print(f"  worst {ranked[0][1]:.3f} s CPU ({ranked[0][0]}); all lines {total:.2f} s")
        for name, t in ranked[: args.show]:
            print(f"  {t:8.3f} s  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
