#!/bin/bash
# Telemetry benches on the lent device machine (16 cores), several at once, each on its own CPUs
# and in its own copy of the tree (their results files have fixed names). Carried: .whl (ignored)
# with the cp312 wheels of verl-tui's cockpit dependencies (textual, asyncssh, pydantic, ...;
# bench/README.md says how they were fetched), py-spy, and the trees measured: TREE.tar.xz, tui/
# of a commit each (`git archive REV tui | xz > .whl/TREE.tar.xz`), so the working tree's
# uncommitted files (other work in progress) are not measured.
#
#   bench/device_fanin.sh 'CPUS TREE NAME BENCH ARGS...' ...
#
# TREE: a .whl/TREE.tar.xz, or "." (this working tree); its name is the code version printed.
# BENCH: a script under bench/ (this tree's, for every TREE). Jobs run at once, each pinned to
# CPUS (taskset); `wait` between jobs starts a new wave. Every job's output and results JSON
# come back in $OUT/fanin.tar.gz; their last lines in $OUT/summary.log.
set -u
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${OUT:-/tmp/vt-out}
mkdir -p "$OUT"
echo "== device: $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg), $(python3 -V)"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 3
export PYTHONPATH=/tmp/site
python3 -m compileall -q -j 0 /tmp/site >/dev/null
W=/tmp/vt-jobs
rm -rf $W && mkdir -p $W/logs
pids=()
for spec in "$@"; do
    if [ "$spec" = wait ]; then wait "${pids[@]}"; pids=(); continue; fi
    read -r cpus tree name bench args <<<"$spec"
    args=${args//@PYSPY/$ROOT/.whl/py-spy}
    dir=$W/$name
    mkdir -p "$dir"
    if [ "$tree" = . ]; then
        cp -r tui "$dir/tui"; code=${BENCH_CODE_VERSION:-working-tree}
    else
        tar -C "$dir" -xJf ".whl/$tree.tar.xz" || exit 3; code=$tree
    fi
    cp -r bench "$dir/bench"
    python3 -m compileall -q "$dir/tui" >/dev/null
    echo "== $name: CPUs $cpus, tree $code: $bench $args"
    (
        cd "$dir" && BENCH_CODE_VERSION=$code PYTHONUNBUFFERED=1 PYTHONPATH="$dir:/tmp/site" \
            timeout "${JOB_TIMEOUT:-520}" taskset -c "$cpus" python3 bench/$bench $args \
            >$W/logs/$name.log 2>&1
        echo "rc $?" >>$W/logs/$name.log
        mkdir -p $W/logs/$name-results && cp -r bench/results/. $W/logs/$name-results/ 2>/dev/null
    ) &
    pids+=($!)
done
wait "${pids[@]}"
for spec in "$@"; do
    [ "$spec" = wait ] && continue
    read -r cpus tree name bench args <<<"$spec"
    echo "===== $name ($tree, CPUs $cpus): $bench"
    grep -v '^\s*$' $W/logs/$name.log | grep -v "Traceback\|File \"\|^    \|CancelledError\|Exception in callback\|handle: <Handle" | tail -14
done | tee "$OUT/summary.log"
tar -C $W/logs -czf "$OUT/fanin.tar.gz" .
