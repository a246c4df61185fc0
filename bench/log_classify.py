#!/usr/bin/env python3
"""Log classification micro bench: the store's ingest path and the classifier, per line.

The same seeded log as bench/log_ingest.py (verl metric lines, Ray-prefixed worker lines with
ANSI colours, vLLM INFO, NCCL INFO, warnings, tqdm bars, now and then a traceback ending in a
known failure), without the UI:

  store     LogStore.append() of the whole log in 16 KiB chunks: spool files, offsets, and the
            signature prefilter + classifier on every line: lines/s (wall and CPU time)
  feed      LineClassifier.feed() called on every line (what feeding every line to Python would
            cost, the path the prefilter avoids): µs per line
  match     match_signature() on every line's message: µs per line

Best of --repeat runs (the machine may be shared).

    .venv/bin/python bench/log_classify.py [--lines 1000000] [--repeat 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from log_ingest import chunked, make_log

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tui.logs import LogStore  # noqa: E402
from tui.logs.signatures import (  # noqa: E402
    LineClassifier,
    match_signature,
    split_source,
    strip_ansi,
)


def bench_store(chunks: list[str], n: int) -> tuple[float, float, int]:
    store = LogStore()
    try:
        w0, c0 = time.perf_counter(), time.process_time()
        for c in chunks:
            store.append(c)
        store.flush_pending()
        w, c = time.perf_counter() - w0, time.process_time() - c0
        assert len(store) == n, (len(store), n)
        return n / w, n / c, len(store.hint_lines())
    finally:
        store.close()


def bench_feed(plain: list[str]) -> float:
    clf = LineClassifier()
    feed = clf.feed
    c0 = time.process_time()
    for i, line in enumerate(plain):
        feed(i, line)
    return (time.process_time() - c0) / len(plain) * 1e6


def bench_match(msgs: list[str]) -> float:
    c0 = time.process_time()
    for m in msgs:
        match_signature(m)
    return (time.process_time() - c0) / len(msgs) * 1e6


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--lines", type=int, default=1_000_000)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    lines = make_log(args.lines)
    chunks = chunked(lines, 16 << 10)
    plain = [strip_ansi(x) for x in "\n".join(lines).replace("\r", "\n").split("\n")][: len(lines)]
    msgs = [split_source(x)[1] for x in plain]
    best = {
        "store_lines_s_wall": 0.0,
        "store_lines_s_cpu": 0.0,
        "feed_us_per_line": 1e9,
        "match_us_per_line": 1e9,
    }
    hints = 0
    for _ in range(args.repeat):
        wall, cpu, hints = bench_store(chunks, args.lines)
        best["store_lines_s_wall"] = max(best["store_lines_s_wall"], wall)
        best["store_lines_s_cpu"] = max(best["store_lines_s_cpu"], cpu)
        best["feed_us_per_line"] = min(best["feed_us_per_line"], bench_feed(plain))
        best["match_us_per_line"] = min(best["match_us_per_line"], bench_match(msgs))
    result = {"lines": args.lines, "cpus": os.cpu_count(), "hints": hints, **best}
    if args.json:
        print(json.dumps(result))
    else:
        print(f"log classify: {args.lines:,} lines, best of {args.repeat}; {os.cpu_count()} CPUs")
        print(
            f"  store ingest: {best['store_lines_s_wall']:,.0f} lines/s wall, "
            f"{best['store_lines_s_cpu']:,.0f} lines/s CPU ({hints} hints)"
        )
        print(f"  LineClassifier.feed on every line: {best['feed_us_per_line']:.2f} µs/line")
        print(f"  match_signature on every line:     {best['match_us_per_line']:.2f} µs/line")
    return 0


if __name__ == "__main__":
    sys.exit(main())
