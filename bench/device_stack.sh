#!/bin/bash
# One rank absent from an NCCL all_reduce on the lent 2-GPU machine (nvidia-h100-x2): NVML's
# utilization of both GPUs while it hangs, and the stacks of both ranks taken by the host
# program the cockpit ships (tui/remote/stack_dump.py, py-spy --native and Python-only).
#   there:  PYSPY_DIR=.devcarry bash bench/device_stack.sh   (.devcarry/py-spy: the static
#           py-spy binary of this venv, carried: the machine cannot fetch it)
#   here:   .venv/bin/python bench/device_stack.py group DIR  (DIR: the files that came back)
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/vt-out}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PATH="$PWD/${PYSPY_DIR:-.devcarry}:$PATH"
echo "== $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1), $(python3 -V), py-spy $(py-spy --version)"
python3 bench/device_stack.py workload "$OUT" >"$OUT/workload.log" 2>&1 &
for _ in $(seq 240); do
    [ -f "$OUT/rank0.pid" ] && [ -f "$OUT/rank1.pid" ] && break
    sleep 0.5
done
P0=$(cat "$OUT/rank0.pid") P1=$(cat "$OUT/rank1.pid")
echo "== hung: rank 0 pid $P0 waits in the all_reduce, rank 1 pid $P1 sleeps; sampling 20 s"
sleep 2
python3 bench/device_stack.py sample "$OUT" 20
cat "$OUT/util.csv" | tail -4
SRC=$(python3 -c 'import sys; sys.path.insert(0, "."); from tui.remote import source; print(source("stack_dump"))')
for mode in true false; do
    start=$(date +%s.%N)
    echo "{\"pids\": [$P0, $P1], \"native\": $mode, \"timeout\": 60}" |
        python3 -u -S -c "$SRC" >"$OUT/stack-native-$mode.jsonl" 2>"$OUT/stack.err"
    end=$(date +%s.%N)
    echo "== stack dump (native: $mode): $(python3 -c "print(round($end - $start, 2))") s, $(wc -c <"$OUT/stack-native-$mode.jsonl") bytes"
done
cp "$OUT/stack-native-true.jsonl" "$OUT/stack.jsonl"
python3 - "$OUT/stack.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    doc = json.loads(line)
    if "proc" in doc:
        p = doc["proc"]
        frames = json.loads(p["out"])[0]["frames"] if p.get("rc") == 0 else []
        print("pid", p["pid"], "rc", p.get("rc"), p.get("err", "")[:200])
        for f in frames[:14]:
            print("   ", f["name"], f.get("short_filename"), f.get("line"))
PY
kill -9 "$P0" "$P1" 2>/dev/null
rm -f "$OUT/rank0.pid" "$OUT/rank1.pid" "$OUT/stack-native-true.jsonl"
