#!/bin/bash
# NVML GPU health on the lent device machine (nvidia-h100-x1): the real agent (the text the
# cockpit ships, tui/remote BUNDLES) streams for ~20 s with a health sweep every 4 s, GPU 0 idle
# for the first 3 s then busy (torch matmuls), and nvidia-smi's own view for comparison.
# Needs only python3 + nvidia-ml-py (+ torch for the load) there: nothing carried.
#   run from the repository root there:  bash bench/device_gpu_health.sh
# Output: stdout, and $OUT/agent.jsonl (every line the agent sent) for the cockpit-side judge
# here:  .venv/bin/python bench/device_gpu_health.py judge FILE
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/vt-out}
mkdir -p "$OUT"
echo "== $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)," \
    "python3 $(python3 -V 2>&1 | cut -d' ' -f2)," \
    "nvidia-ml-py $(python3 -c 'import importlib.metadata as m; print(m.version("nvidia-ml-py"))')"
echo "== health sweep cost (the shipped agent's NvmlBackend)"
python3 bench/device_gpu_health.py cost
echo "== agent: 20 s, --interval 1, VERL_TUI_AGENT_HEALTH_S=4; GPU 0 busy from ~5 s to 20 s"
SRC=$(python3 -c 'import sys; sys.path.insert(0, "."); from tui.remote import source; print(source("gpu_agent"))')
(sleep 3; python3 bench/device_gpu_health.py load 15) &
LOAD=$!
sleep 20 | VERL_TUI_AGENT_HEALTH_S=4 python3 -u -c "$SRC" --interval 1 >"$OUT/agent.jsonl" \
    2>"$OUT/agent.stderr"
echo "agent exit $?, $(wc -l <"$OUT/agent.jsonl") lines, stderr: $(head -c 300 "$OUT/agent.stderr")"
wait $LOAD
python3 bench/device_gpu_health.py show "$OUT/agent.jsonl"
echo "== nvidia-smi -q -d ECC,PERFORMANCE,PCIE,PAGE_RETIREMENT,ROW_REMAPPER (idle again)"
# Not every nvidia-smi knows every display name (PCIE, ROW_REMAPPER): the whole list, else each.
nvidia-smi -q -d ECC,PERFORMANCE,PCIE,PAGE_RETIREMENT,ROW_REMAPPER 2>&1 || for d in ECC PERFORMANCE PAGE_RETIREMENT ROW_REMAPPER; do
    nvidia-smi -q -d $d 2>&1 | sed -n '/^GPU /,$p'
done
echo "== nvidia-smi -q: the PCIe and persistence lines"
nvidia-smi -q | grep -E -A3 'Persistence Mode|PCIe Generation|Link Width' 
echo "== persistence mode"
nvidia-smi --query-gpu=persistence_mode,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max --format=csv
