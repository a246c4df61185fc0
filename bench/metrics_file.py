"""verl's file logger lines vs its console lines: parse speed and exactness (issue 29).

Writes N steps of ~150 keys each through verl 0.9.1's own Tracking class (file + console
backends, stdout captured), then times tui/metrics/filelog.FileLines on the file and the console
tracker on the captured text, and counts the values where the two differ (the console prints
pformat, the file orjson: both should carry the same doubles; NaN/Inf are null in the file).

    .venv/bin/python bench/metrics_file.py [--steps 2000] [--keys 150]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.benchlib import code_version
from tui.metrics import MetricsTracker
from tui.metrics.filelog import FileLines


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--keys", type=int, default=150)
    a = p.parse_args()
    import numpy as np

    rng = random.Random(0)
    keys = [f"group{i % 9}/metric_{i}" for i in range(a.keys)]
    with tempfile.TemporaryDirectory() as root:
        os.environ["VERL_FILE_LOGGER_ROOT"] = root
        from verl.utils.tracking import Tracking

        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            t = Tracking("bench", "run", ["console", "file"])
            for step in range(1, a.steps + 1):
                data = {k: np.float64(rng.lognormvariate(0, 3)) for k in keys}
                if step % 97 == 0:
                    data[keys[0]] = np.float64(math.nan)
                t.log(data=data, step=step)
            t.finish()
        path = Path(root) / "bench" / "run.jsonl"
        raw = path.read_text()
        console_text = out.getvalue()

    t0 = time.perf_counter()
    rows = FileLines().feed(raw)
    file_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    console = MetricsTracker()
    console.feed_text(console_text)
    console_s = time.perf_counter() - t0
    differ = sum(
        1
        for step, row in rows
        for k, v in row.items()
        if math.isfinite(v) and console.row(step).get(k) != v
    )
    result = {
        "bench": "metrics_file",
        "code": code_version(),
        "steps": a.steps,
        "keys": a.keys,
        "file_bytes": len(raw.encode()),
        "file_parse_ms": round(file_s * 1000, 1),
        "console_bytes": len(console_text.encode()),
        "console_parse_ms": round(console_s * 1000, 1),
        "values_differing": differ,
        "non_finite_in_file": sum(1 for _s, r in rows for v in r.values() if not math.isfinite(v)),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
