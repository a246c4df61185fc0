#!/bin/bash
# bench/bringup.py on the lent device machine (16 cores, root, no network): see
# bench/bringup_device.md. Run from the repository root there, with the ignored folder .dev
# carried (made here by the steps in that note):
#   .dev/ray.tar.xz   Ray 2.60.0's cp312 wheel, unpacked and trimmed (no jars, rllib, tune, train,
#                     data, serve, llm, tests, source maps), binaries stripped
#   .dev/site.tar.xz  Ray[default]'s and verl-tui's dependencies, cp312 wheels installed with
#                     pip --target (the same versions as this repo's .venv)
#   .dev/ssh.tar.xz   Debian bookworm's sshd, ssh, ssh-keygen (OpenSSH 9.2p1), ip, ps and the
#                     shared libraries they link (used only where the device lacks one)
#   bench/device_bringup.sh pack                 # here (needs network): makes .dev
#   bench/device_bringup.sh [setup|bench ARGS...]  # there
# "bench" passes ARGS to bench/bringup.py and copies the log and the JSON to $OUT.
# BENCH_CODE_VERSION (the commit measured, from bench/benchlib.py code_version() here) is passed
# on: the copy there has no .git.
set -u
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${OUT:-/tmp/vt-out}
D=/tmp/vt-devsite
mkdir -p "$OUT"
mode=${1:-bench}
[ $# -gt 0 ] && shift

info() {
    echo "== device: $(nproc) CPUs, $(free -g | awk '/Mem:/{print $2}') GiB, kernel $(uname -r)"
    grep PRETTY_NAME /etc/os-release
    echo "python3: $(command -v python3) $(python3 -V 2>&1)"
    for t in ip unshare nsenter ss ps ssh ssh-keygen sshd mount hostname git; do
        printf '%s=%s ' "$t" "$(command -v $t || echo MISSING)"
    done
    echo
}

setup() {
    if [ -f $D/.ok ]; then echo "== setup: already done"; return 0; fi
    if [ -e .venv/pyvenv.cfg ]; then echo "setup: .venv is a real venv: not the device copy"; return 1; fi
    rm -rf $D && mkdir -p $D/site $D/ssh $D/bin $D/needlib || return 1
    tar -C $D/site -xJf .dev/site.tar.xz && tar -C $D/site -xJf .dev/ray.tar.xz &&
        tar -C $D/ssh -xJf .dev/ssh.tar.xz || { echo "setup: unpacking failed"; return 1; }
    local py
    py=$(command -v python3)
    # The hosts' interpreter (hosts.yaml's python, as .venv/bin/python here): the device's
    # python3 with the carried packages first on its path. ssh sessions start with a clean
    # environment, so the wrapper sets it; Ray's own processes inherit it.
    mkdir -p .venv/bin
    cat > .venv/bin/python <<EOF
#!/bin/sh
export PYTHONPATH="$D/site:$ROOT\${PYTHONPATH:+:\$PYTHONPATH}"
exec $py "\$@"
EOF
    chmod +x .venv/bin/python
    # Tools: the device's own where it has them; else the carried one. The carried sshd always.
    local tools="sshd" t
    for t in ssh ssh-keygen ip ps; do command -v $t >/dev/null || tools="$tools $t"; done
    echo "== carried tools used: $tools"
    # Libraries: only those the device lacks (ldd says "not found"), until none is missing.
    local i miss lib
    for i in 1 2 3 4 5 6; do
        miss=$( { for t in $tools; do LD_LIBRARY_PATH=$D/needlib ldd $D/ssh/bin/$t; done
                  for lib in $D/needlib/*; do
                      [ -e "$lib" ] && LD_LIBRARY_PATH=$D/needlib ldd "$lib"; done; } 2>&1)
        if echo "$miss" | grep -q "version .* not found"; then
            echo "== a device library is too old: all carried libraries used"
            cp -a $D/ssh/lib/. $D/needlib/
            break
        fi
        miss=$(echo "$miss" | awk '/not found/{print $1}' | sort -u)
        [ -z "$miss" ] && break
        for lib in $miss; do
            [ -e $D/ssh/lib/$lib ] || { echo "setup: $lib is missing and not carried"; return 1; }
            cp -a $D/ssh/lib/$lib* $D/needlib/
        done
    done
    echo "== carried libraries used: $(ls $D/needlib | tr '\n' ' ')"
    [ -f $D/ssh/etc/netconfig ] && [ ! -f /etc/netconfig ] && cp $D/ssh/etc/netconfig /etc/
    for t in $tools; do
        printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' $D/needlib $D/ssh/bin/$t > $D/bin/$t
        chmod +x $D/bin/$t
    done
    LD_LIBRARY_PATH=$D/needlib ldd $D/ssh/bin/sshd | grep -q "not found" &&
        { echo "setup: sshd cannot run here"; LD_LIBRARY_PATH=$D/needlib ldd $D/ssh/bin/sshd; return 1; }
    $D/bin/sshd -V 2>&1 | head -1
    # sshd's privilege-separation user, and a root account sshd accepts (not locked with '!').
    id sshd >/dev/null 2>&1 || useradd -r -M -d /run/sshd -s /usr/sbin/nologin sshd ||
        echo 'sshd:x:199:65534::/run/sshd:/usr/sbin/nologin' >> /etc/passwd
    if grep -q '^root:!' /etc/shadow 2>/dev/null; then usermod -p '*' root; fi
    .venv/bin/python -c "import ray, tui, textual, asyncssh, pydantic, sys; \
print('== python', sys.version.split()[0], 'ray', ray.__version__, 'textual', textual.__version__)" ||
        return 1
    touch $D/.ok
}

# ---- here: build .dev (about 51 MB; the tree that travels with it must stay under 64 MiB)
# ray[default]'s and verl-tui's dependencies at this repo's .venv versions, less virtualenv,
# distlib, python-discovery and py-spy (imported only for pip/uv runtime envs and profiling).
DEPS="aiohappyeyeballs aiohttp aiohttp-cors aiosignal annotated-types asyncssh attrs certifi cffi
charset-normalizer click colorful cryptography filelock frozenlist google-api-core google-auth
googleapis-common-protos grpcio idna jsonschema jsonschema-specifications linkify-it-py
markdown-it-py mdit-py-plugins mdurl msgpack multidict nvidia-ml-py opencensus opencensus-context
opentelemetry-api opentelemetry-exporter-prometheus opentelemetry-proto opentelemetry-sdk
opentelemetry-semantic-conventions packaging platformdirs prometheus-client propcache proto-plus
protobuf pyasn1 pyasn1-modules pycparser pydantic pydantic-core pygments pyyaml referencing
requests rich rpds-py six smart-open textual typing-extensions typing-inspection urllib3 wrapt
yarl websockets textual-plotext plotext uc-micro-py"
DEBS="openssh-server openssh-client iproute2 procps libbpf1 libbsd0 libelf1 libgcrypt20
libgssapi-krb5-2 libk5crypto3 libkrb5-3 libkrb5support0 liblz4-1 libmd0 libmnl0 libnsl2
libpcre2-8-0 libssl3 libsystemd0 libwrap0 libzstd1 libaudit1 libcap-ng0 libcap2 libcom-err2
libcrypt1 libgpg-error0 libkeyutils1 liblzma5 libpam0g libproc2-0 libselinux1 libtirpc3
libtirpc-common zlib1g libxtables12 libdb5.3"
pack() {
    local W=/tmp/vt-pack VPY=$ROOT/.venv/bin/python plat
    plat="--only-binary=:all: --python-version 3.12 --implementation cp"
    for n in 5 17 24 27 28 31 34; do plat="$plat --platform manylinux_2_${n}_x86_64"; done
    plat="$plat --platform manylinux2014_x86_64 --platform manylinux1_x86_64"
    rm -rf $W && mkdir -p $W/whl $W/deb $W/ray $W/site $W/debroot $W/ssh/bin $W/ssh/lib $W/ssh/etc \
        .dev || return 1
    local pins
    pins=$($VPY -c 'import sys, importlib.metadata as m
def pin(n):
    try:
        return f"{n}=={m.version(n)}"
    except m.PackageNotFoundError:  # not in .venv (uc-micro-py: linkify-it-py needs it)
        return n
print(" ".join(map(pin, sys.argv[1:])))' $DEPS) || return 1
    $VPY -m pip download -q --no-deps $plat -d $W/whl $pins || return 1
    $VPY -m pip install -q --no-deps --no-compile --no-index $plat --target $W/site $W/whl/*.whl ||
        return 1
    $VPY -m pip download -q --no-deps $plat -d $W ray==2.60.0 && (cd $W/ray && unzip -q ../ray-*.whl) ||
        return 1
    (cd $W/ray && rm -rf ray/jars ray/rllib ray/tune ray/train ray/data ray/serve ray/llm &&
        find ray -type d \( -name tests -o -name test \) -prune -exec rm -rf {} + &&
        find ray -name '*.map' -delete &&
        strip --strip-unneeded ray/_raylet.so ray/core/src/ray/gcs/gcs_server \
            ray/core/src/ray/raylet/raylet) || return 1
    (cd $W/deb && apt-get download $DEBS) || return 1
    local f
    for f in $W/deb/*.deb; do dpkg -x $f $W/debroot; done
    cp $W/debroot/usr/sbin/sshd $W/debroot/usr/bin/ssh $W/debroot/usr/bin/ssh-keygen \
        $W/debroot/bin/ps $W/debroot/bin/ip $W/ssh/bin/ &&
        cp -a $W/debroot/lib/x86_64-linux-gnu/*.so* $W/debroot/usr/lib/x86_64-linux-gnu/*.so* \
            $W/ssh/lib/ && cp $W/debroot/etc/netconfig $W/ssh/etc/ || return 1
    tar -C $W/ray -cf - . | xz -6 -T2 > .dev/ray.tar.xz &&
        tar -C $W/site -cf - . | xz -6 -T2 > .dev/site.tar.xz &&
        tar -C $W/ssh -cf - . | xz -6 -T2 > .dev/ssh.tar.xz || return 1
    grep -qx "/.dev/" .git/info/exclude || echo "/.dev/" >> .git/info/exclude
    ls -l .dev
}
if [ "$mode" = pack ]; then pack; exit $?; fi

# ---- there
export PATH=$D/bin:$PATH
info
setup || exit 3
[ "$mode" = setup ] && exit 0
set -o pipefail
PYTHONUNBUFFERED=1 .venv/bin/python bench/bringup.py --sshd $D/bin/sshd "$@" 2>&1 |
    tee -a "$OUT/bringup.log"
rc=$?
cp bench/results/bringup.json "$OUT/" 2>/dev/null
exit $rc
