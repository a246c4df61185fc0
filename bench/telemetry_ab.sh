#!/bin/bash
# Same-run A/B of bench/telemetry_fanin.py: tui/ at BASE against this tree, interleaved rounds,
# the one bench (this tree's bench/) for both. Machines are noisy (and lent machines differ
# from one lease to the next): compare the pairs of one run, not runs of different days.
#
#   bench/telemetry_ab.sh BASE ROUNDS [telemetry_fanin.py args]
#   bench/telemetry_ab.sh f94dde3 2 --hosts 512,1024 --modes stream --seconds 20
#
# BASE: a commit (its tui/ is taken with git archive) or a .tar.xz of a tui/ tree (where this
# checkout's .git is not at hand, e.g. a copy on the device machine). PYTHON (default
# .venv/bin/python) runs the bench; PYTHONPATH is kept (carried packages). Results:
# bench/results/ab-<round>-<base|new>.json and the printed tables.
set -euo pipefail
BASE="$1"; ROUNDS="$2"; shift 2
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
WORK="$(mktemp -d)"; trap 'rm -rf "$WORK"' EXIT
if [ -f "$BASE" ]; then
    tar -C "$WORK" -xJf "$BASE"; BASE_NAME="$(basename "$BASE" .tar.xz)"
else
    git -C "$ROOT" archive "$BASE" tui | tar -C "$WORK" -x; BASE_NAME="$BASE"
fi
cp -r "$ROOT/bench" "$WORK/bench"
NEW_NAME="${BENCH_CODE_VERSION:-$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo new)}"
mkdir -p "$ROOT/bench/results"
for round in $(seq 1 "$ROUNDS"); do
    for side in base new; do
        if [ "$side" = base ]; then dir="$WORK"; code="$BASE_NAME"; else dir="$ROOT"; code="$NEW_NAME"; fi
        echo "== round $round $side ($code)"
        (cd "$dir" && PYTHONPATH="$dir${PYTHONPATH:+:$PYTHONPATH}" BENCH_CODE_VERSION="$code" \
            "$PY" bench/telemetry_fanin.py "$@" | sed -n '/^hosts/,/^goal/p')
        cp "$dir/bench/results/telemetry_fanin.json" "$ROOT/bench/results/ab-$round-$side.json"
    done
done
