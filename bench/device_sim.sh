#!/bin/bash
# bench/bringup_sim.py on the lent device machine (16 cores; no sshd, no Ray started: the hosts
# are bench/simhosts.py's), for this tree and for copies of tui/ at other commits, one after the
# other in one lease. The carried folder (default .devsim, ignored) holds Ray's and verl-tui's
# cp312 site packages (.dev/{site,ray}.tar.xz, made by bench/device_bringup.sh pack) and the
# other trees:
#   bench/device_sim.sh pack NAME=REV[+simfix] ...   # here: .devsim/NAME.tree.tar.xz each
#   bench/device_sim.sh run "NAME=CODE ... [.]" [ARGS] # there: ".", each NAME (and "." again),
#                                                     # ARGS to the bench; BENCH_CODE_VERSION: "."'s
# "+simfix" applies to that copy the one-line comment change of e58846c in tui/remote/probe.py
# (the words "ray stop" in it made bench/simhosts.py shlex-split every replayed 29 KB probe,
# 31 ms of a simulator's core each), so a before/after pair differs only in the product.
set -u
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${OUT:-/tmp/vt-out}
C=.devsim
D=/tmp/vt-devsite
mode=${1:-run}
[ $# -gt 0 ] && shift

pack() {
    mkdir -p $C && grep -qx "/$C/" .git/info/exclude || echo "/$C/" >> .git/info/exclude
    ln -f .dev/site.tar.xz .dev/ray.tar.xz $C/ || return 1
    local spec name rev w
    for spec in "$@"; do
        name=${spec%%=*} rev=${spec#*=}
        w=$(mktemp -d)
        git archive "${rev%+simfix}" tui | tar -x -C "$w" || return 1
        if [ "${rev%+simfix}" != "$rev" ]; then
            sed -i 's/after `ray stop`)/once Ray was stopped)/' "$w/tui/remote/probe.py"
            grep -q "once Ray was stopped" "$w/tui/remote/probe.py" || return 1
        fi
        tar -C "$w" -cf - tui | xz -6 > "$C/$name.tree.tar.xz" && rm -rf "$w"
    done
    ls -l $C
}

run() {
    if [ -e .venv/pyvenv.cfg ]; then echo "run: .venv is a real venv: not the device copy"; return 1; fi
    echo "== device: $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg), $(python3 -V)"
    mkdir -p $D/site .venv/bin "$OUT" &&
        tar -C $D/site -xJf $C/site.tar.xz && tar -C $D/site -xJf $C/ray.tar.xz || return 3
    printf '#!/bin/sh\nexport PYTHONPATH="%s/site:%s${PYTHONPATH:+:$PYTHONPATH}"\nexec %s "$@"\n' \
        $D "$ROOT" "$(command -v python3)" > .venv/bin/python && chmod +x .venv/bin/python
    echo "== bytecode: $(env | grep -E '^PYTHON(DONTWRITEBYTECODE|PYCACHEPREFIX)=' | tr '\n' ' ')" \
        "dont_write_bytecode=$(python3 -c 'import sys; print(sys.flags.dont_write_bytecode)')"
    # The site packages were installed with --no-compile, and where the environment forbids
    # writing bytecode every CLI run compiled asyncssh and pydantic again (~0.6 s of a 3 s
    # check, seen 2026-11-24): compile them once, as pip does on a real install. COMPILE=0: not.
    if [ "${COMPILE:-1}" = 1 ]; then python3 -m compileall -q -j 0 $D/site tui >/dev/null; fi
    local trees=$1 spec name code i=0
    shift
    for spec in .=${BENCH_CODE_VERSION:-unknown} $trees; do
        name=${spec%%=*} code=${spec#*=} i=$((i + 1))
        [ "$name" = . ] && code=${BENCH_CODE_VERSION:-unknown}  # "." again: this tree
        local tree=()
        if [ "$name" != . ]; then
            mkdir -p ".trees/$name" && tar -C ".trees/$name" -xJf "$C/$name.tree.tar.xz" || return 3
            [ "${COMPILE:-1}" = 1 ] && python3 -m compileall -q ".trees/$name" >/dev/null
            tree=(--tree ".trees/$name")
        fi
        echo "== tree $name ($code), load $(cut -d' ' -f1 /proc/loadavg)"
        BENCH_CODE_VERSION=$code PYTHONUNBUFFERED=1 .venv/bin/python bench/bringup_sim.py \
            "${tree[@]}" "$@" 2>&1 | tail -1 | tee -a "$OUT/sim.log"
        cp bench/results/bringup_sim.json "$OUT/bringup_sim-$i-${name/./after}.json"
    done
}
if [ "$mode" = pack ]; then pack "$@"; else run "$@"; fi
