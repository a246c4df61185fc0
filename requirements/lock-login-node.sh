#!/usr/bin/env bash
# Regenerate requirements/login-node.txt: the cockpit's runtime closure for the login node, and
# nothing else (no verl, torch or Ray: the cockpit reads verl's config from the cluster and talks
# to Ray over HTTP). It is what `pip install -c constraints.txt .` resolves in a clean venv, so
# every pin is also a pin of constraints.txt, the set the tests run with
# (tests/test_install.py checks both, and installs the wheel with this file alone).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$PY" -m venv "$tmp/venv"
"$tmp/venv/bin/python" -m pip install -q --disable-pip-version-check -c constraints.txt .
{
  echo "# The cockpit's runtime closure on the login node, from a clean venv (Python"
  echo "# $("$tmp/venv/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')): made by requirements/lock-login-node.sh, not by hand."
  echo "# Use it as constraints: pip install -c requirements/login-node.txt ."
  echo "# (A Python other than this one may add a backport or two, left unpinned.)"
  "$tmp/venv/bin/python" -m pip freeze --disable-pip-version-check --exclude verl-tui
} > requirements/login-node.txt
echo "wrote requirements/login-node.txt ($(grep -c '==' requirements/login-node.txt) pins)"
