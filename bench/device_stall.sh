#!/bin/bash
# The supervisor's own stall check, end to end, on the lent 2-GPU machine (nvidia-h200-x2):
# `verl-tui up` on this one host (local transport, 2 GPUs), `verl-tui watch --json --gpus 1`
# with a small stall: block, and tests/workloads/gloo_deadlock.py --nccl submitted with
# `verl-tui submit`: a rank actor per GPU, NCCL, a step a second, and at step 5 rank 1 sleeps
# while rank 0 waits in the all_reduce. The script waits for watch's job-stalled decision
# (GPU evidence from the agent's NVML samples), samples nvidia-smi meanwhile, takes
# `verl-tui stack --native --json`, stops the job and Ray, and leaves under $OUT:
# decisions.jsonl util.csv stack.json driver.log summary.json logs.tar.gz
# (bench/device_stall.py summary DIR prints the summary again here).
#   here:   bash bench/device_stall.sh pack    # .dev/stall.tar.xz: Ray 2.60 and the dependencies
#           from bench/device_bringup.sh pack's .dev/{ray,site}.tar.xz (network needed), trimmed,
#           and this venv's static py-spy
#   there:  bash bench/device_stall.sh          # carry: .dev/stall.tar.xz
# Dry run without a GPU (the pipeline on a gloo job of one rank that hangs):
#   DEV_PYTHON=.venv/bin/python WORKLOAD_ARGS="--world 1 --step-s 1 --hang-at 5" \
#       bash bench/device_stall.sh   (inside its own pid/net/mount namespace: `down` runs
#       `ray stop`, which ends every Ray process it can see)
set -u
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${OUT:-/tmp/vt-out}
D=${STALL_SITE:-/tmp/vt-stallsite}  # the carried packages, unpacked
W=${STALL_WORK:-/tmp/vt-stall}      # hosts.yaml, verl-tui's state, what the run wrote
WORKLOAD_ARGS=${WORKLOAD_ARGS:---nccl --step-s 1 --hang-at 5}
STARTUP_S=${STARTUP_S:-120}
FLAG_DEADLINE_S=${FLAG_DEADLINE_S:-240}  # from the submit
AFTER_HANG_S=20  # nvidia-smi samples of the hang before the stack is taken
mkdir -p "$OUT"

# What travels (the tree is ~20 MiB of the call's 64): one archive of Ray, the dependencies and
# py-spy, less what the CLI does not import and the device has (Textual and its plotting and
# markdown parts, Pygments).
TRIM="textual textual-* textual_* plotext plotext-* linkify_it* linkify-it* uc_micro* mdit_py_plugins*
pygments pygments-*"
pack() {
    if [ ! -s .dev/ray.tar.xz ] || [ ! -s .dev/site.tar.xz ]; then
        bash bench/device_bringup.sh pack || return 1
    fi
    local P=/tmp/vt-stallpack tree carried
    rm -rf $P && mkdir -p $P/site $P/bin || return 1
    tar -C $P/site -xJf .dev/site.tar.xz && tar -C $P/site -xJf .dev/ray.tar.xz &&
        cp .venv/bin/py-spy $P/bin/ || return 1
    (cd $P/site && for pat in $TRIM; do rm -rf $pat; done)
    tar -C $P -cf - site bin | xz -9 -T2 > .dev/stall.tar.xz || return 1
    rm -rf $P
    tree=$( { git ls-files -z; git ls-files -z -o --exclude-standard; } | xargs -0 du -cb 2>/dev/null |
        awk '$2 == "total" {s += $1} END {print s}')
    carried=$(du -b .dev/stall.tar.xz | awk '{print $1}')
    echo "travels: tree $((tree >> 20)) MiB + .dev/stall.tar.xz $((carried >> 20)) MiB" \
        "= $(((tree + carried) >> 20)) MiB of 64"
}
if [ "${1:-}" = pack ]; then pack; exit $?; fi

# ---- there
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
setup() {
    # The hosts' interpreter: the device's python3 (torch with CUDA) with Ray 2.60 and
    # verl-tui's dependencies first on its path; py-spy on PATH for `stack`.
    if [ -f $D/.ok ]; then return 0; fi
    rm -rf $D && mkdir -p $D || return 1
    tar -C $D -xJf .dev/stall.tar.xz || { echo "setup: unpacking .dev/stall.tar.xz failed"; return 1; }
    cat > $D/bin/python <<EOF
#!/bin/sh
export PYTHONPATH="$D/site:$ROOT\${PYTHONPATH:+:\$PYTHONPATH}"
exec ${DEV_PYTHON3:-$(command -v python3)} "\$@"
EOF
    chmod +x $D/bin/python && touch $D/.ok
}
if [ -n "${DEV_PYTHON:-}" ]; then
    PY=$(realpath "$DEV_PYTHON")  # a dry run: an interpreter that has it all already
    PATH="$(dirname "$PY"):$PATH"
else
    setup || exit 3
    PY=$D/bin/python
    PATH="$D/bin:$PATH"
fi
export PATH PYTHONUNBUFFERED=1 XDG_STATE_HOME=$W/state XDG_CONFIG_HOME=$W/config
rm -rf "$W" && mkdir -p "$W/state" "$W/config" || exit 3
vt() { "$PY" -m tui "$@"; }
echo "== $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null |
    sort | uniq -c | tr -s ' ' | tr '\n' ' ')$("$PY" -c 'import sys, ray
try:
    import torch
    gpus = f"torch {torch.__version__}, {torch.cuda.device_count()} GPUs"
except ImportError:
    gpus = "no torch"
print(f"Python {sys.version.split()[0]}, ray {ray.__version__}, {gpus}")')" || exit 3
echo "== py-spy: $(command -v py-spy) $(py-spy --version 2>&1)"

GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
HOSTS=$W/hosts.yaml
cat > "$HOSTS" <<EOF
cluster: devstall
python: $PY
stall:
  factor: 2
  min_s: 10
  startup_s: $STARTUP_S
ray:
  start_timeout: 30
hosts:
  - name: gpu-host
    transport: local
    node_ip: 127.0.0.1
    num_gpus: $GPUS
EOF
timeout 60 "$PY" -m tui check "$HOSTS" > "$W/check.log" 2>&1
echo "== check: exit $? ($(tail -1 "$W/check.log"))"

SAMPLER= WATCH=
cleanup() {  # the watch ends its pass and lets its lease go on SIGTERM: 15 s for that
    local i
    if [ -n "$WATCH" ] && kill -TERM "$WATCH" 2>/dev/null; then
        for i in $(seq 30); do kill -0 "$WATCH" 2>/dev/null || break; sleep 0.5; done
        kill -KILL "$WATCH" 2>/dev/null
    fi
    [ -n "$SAMPLER" ] && kill "$SAMPLER" 2>/dev/null
    WATCH= SAMPLER=
}
collect() {  # whatever the run wrote, also when it ended early
    local f
    [ -f "$W/driver.log" ] || cp "${DRIVER_LOG:-/nonexistent}" "$W/driver.log" 2>/dev/null
    for f in decisions.jsonl util.csv stack.json summary.json driver.log; do
        [ -f "$W/$f" ] && cp "$W/$f" "$OUT/"
    done
    tar -C "$W" -czf "$OUT/logs.tar.gz" --exclude=./util.csv --exclude=./decisions.jsonl \
        --exclude=./stack.json --exclude=./summary.json --exclude=./driver.log .
}
trap 'cleanup; collect' EXIT
trap 'exit 143' TERM INT  # a timeout around the script: still stop and collect

t0=$(date +%s.%N)
timeout 120 "$PY" -m tui up "$HOSTS" > "$W/up.log" 2>&1
rc=$?
echo "== verl-tui up: exit $rc in $(python3 -c "import time; print(round(time.time() - $t0, 1))") s"
if [ $rc -ne 0 ]; then  # what kept the node from being seen ALIVE
    tail -20 "$W/up.log"
    env | grep -i -E '^(https?|no|all)_proxy=' | sed 's/=.*@/=…@/'
    "$PY" -m ray.scripts.scripts start --head --node-ip-address=127.0.0.1 --num-gpus 2 \
        --disable-usage-stats > "$W/raystart.log" 2>&1
    sleep 8
    "$PY" - <<'PY' 2>&1 | tail -8
import json, urllib.request
for path in ("/api/version", "/api/v0/nodes?limit=10000&detail=true"):
    try:
        with urllib.request.urlopen("http://127.0.0.1:8265" + path, timeout=5) as r:
            print(path, r.status, r.read(4000).decode())
    except Exception as exc:
        print(path, "->", repr(exc)[:300])
PY
    "$PY" -m ray.scripts.scripts stop --force > /dev/null 2>&1
    for f in dashboard.err gcs_server.err raylet.err monitor.err; do
        echo "--- $f"; tail -8 "/tmp/ray/session_latest/logs/$f" 2>&1 | cut -c1-300
    done
    exit 4
fi

if command -v nvidia-smi >/dev/null; then
    python3 bench/device_stack.py sample "$W" 480 &
    SAMPLER=$!
fi
vt watch "$HOSTS" --json --interval 2 --gpus 1 > "$W/decisions.jsonl" 2> "$W/watch.err" &
WATCH=$!

SID=vt-nccl-stall-$(date +%H%M%S)
DRIVER_LOG=/tmp/ray/session_latest/logs/job-driver-$SID.log
# shellcheck disable=SC2086  # WORKLOAD_ARGS: words
vt submit "$HOSTS" --json --submission-id "$SID" -- \
    "$PY" "$ROOT/tests/workloads/gloo_deadlock.py" $WORKLOAD_ARGS > "$W/submit.json" 2>&1
rc=$?
submitted=$(date +%s.%N)
echo "== submitted $SID: exit $rc"
[ $rc -eq 0 ] || { cat "$W/submit.json"; exit 5; }

# Wait for the hang (the driver's line) and for watch's job-stalled decision.
hang= flagged= status=RUNNING next_status=0
while :; do
    now=$(date +%s.%N)
    if [ -z "$hang" ] && grep -qs "skips the all_reduce" "$DRIVER_LOG"; then
        hang=$now
        echo "== the hang is in the driver log: $(grep -m1 'group:' "$DRIVER_LOG" | cut -c1-300)"
    fi
    if [ -z "$flagged" ] && grep -s job-stalled "$W/decisions.jsonl" | grep -q "\"$SID\""; then
        flagged=$now
        echo "== job-stalled seen $(python3 -c "print(round($now - ${hang:-$submitted}, 1))") s after" \
            "the $([ -n "$hang" ] && echo hang || echo submit)"
    fi
    # Enough samples of the hang (or of the stall, where no hang line came: --hang-at 0).
    if [ -n "$flagged" ] &&
        python3 -c "import sys; sys.exit($now - ${hang:-$flagged} < $AFTER_HANG_S)"; then break; fi
    if python3 -c "import sys; sys.exit($now - $submitted < $FLAG_DEADLINE_S)"; then
        echo "== no job-stalled decision within $FLAG_DEADLINE_S s of the submit"; break
    fi
    if python3 -c "import sys; sys.exit($now < $next_status)"; then
        status=$(vt jobs "$HOSTS" --json 2>/dev/null | python3 -c "import json, sys
print(next((j['status'] for j in json.load(sys.stdin)['jobs'] if j['submission_id'] == '$SID'), '?'))")
        next_status=$(python3 -c "print($now + 10)")
        case $status in
            RUNNING|PENDING|'?') ;;
            *) echo "== the job ended: $status"; tail -30 "$DRIVER_LOG" | cut -c1-300; break ;;
        esac
    fi
    sleep 0.5
done

nvidia-smi --query-compute-apps=pid,gpu_bus_id,used_memory --format=csv > "$W/compute_apps.csv" 2>&1
stack_at=$(date +%s.%N)
timeout 90 "$PY" -m tui stack "$HOSTS" "$SID" --native --json > "$W/stack.json" 2> "$W/stack.err"
echo "== verl-tui stack --native: exit $? in $(python3 -c "import time; print(round(time.time() - $stack_at, 1))") s"
vt jobs "$HOSTS" --json > "$W/jobs.json" 2>&1
cat > "$W/times.json" <<EOF
{"submission_id": "$SID", "submitted_at": $submitted, "hang_seen_at": ${hang:-null},
 "flag_seen_at": ${flagged:-null}, "stack_at": $stack_at}
EOF
cp "$DRIVER_LOG" "$W/driver.log" 2>/dev/null

timeout 60 "$PY" -m tui stop "$HOSTS" "$SID" > "$W/stop.log" 2>&1
echo "== verl-tui stop: exit $?"
cleanup
timeout 60 "$PY" -m tui down "$HOSTS" > "$W/down.log" 2>&1
echo "== verl-tui down: exit $?"

echo "== summary"
python3 bench/device_stall.py summary "$W"
exit $?  # 0: flagged; the EXIT trap copies the files to $OUT
