"""The CLI in a Python without verl (the login node now needs none) and without Hydra (a broken
core install): one line saying what is missing where, exit 2, no traceback (issue 10, item 5;
issue 11: verl is read from the cluster, so "verl is not installed" names both the host asked
and this Python).

Not a mock: the test builds a real site-packages for an isolated interpreter (`python -I -S`,
so neither the venv's site-packages nor PYTHONPATH is seen) holding every package of this venv
except the ones taken away, then runs the real CLI entry point in it. The hosts file's
interpreter is this venv's Python run isolated (`-I -S`): a real interpreter without verl.
"""

from __future__ import annotations

import site
import subprocess
import sys
from pathlib import Path

import pytest

PROFILE = Path(__file__).resolve().parents[1] / "profiles" / "grpo-gsm8k-qwen2.5-0.5b.yaml"
HYDRA = ("hydra", "hydra_core", "omegaconf", "antlr4")
VERL = ("verl", "torch")


def _site_without(tmp: Path, names: tuple[str, ...]) -> Path:
    src = Path(site.getsitepackages()[0])
    dst = tmp / "site-packages"
    dst.mkdir()
    for entry in src.iterdir():
        stem = entry.name.split("-")[0].split(".")[0].lower()
        if stem in names:
            continue
        (dst / entry.name).symlink_to(entry)
    return dst


def _cli(site_dir: Path, *args: str) -> subprocess.CompletedProcess:
    code = (
        f"import site, sys; site.addsitedir({str(site_dir)!r}); "
        "from tui.cli import main; sys.exit(main())"
    )
    return subprocess.run(
        [sys.executable, "-I", "-S", "-c", code, *args], capture_output=True, text=True, timeout=120
    )


def _probe(site_dir: Path, module: str) -> bool:
    code = (
        f"import site, importlib.util; site.addsitedir({str(site_dir)!r}); "
        f"print(importlib.util.find_spec({module!r}) is not None)"
    )
    out = subprocess.run(
        [sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, timeout=60
    )
    return out.stdout.strip() == "True"


@pytest.fixture(scope="module")
def hosts(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("nv")
    bare = folder / "python-without-verl"  # this venv's Python without its site-packages
    bare.write_text(f'#!/bin/sh\nexec {sys.executable} -I -S "$@"\n')
    bare.chmod(0o755)
    path = folder / "hosts.yaml"
    path.write_text(f"hosts:\n  - name: localhost\n    transport: local\n    python: {bare}\n")
    return path


@pytest.mark.parametrize(
    "missing",
    [VERL, VERL + HYDRA, HYDRA],
    ids=["no-verl", "no-verl-no-hydra", "verl-without-hydra"],
)
def test_submit_dry_run_and_profile_check_say_verl_is_missing(missing, tmp_path, hosts):
    site_dir = _site_without(tmp_path, missing)
    assert _probe(site_dir, "tui") and _probe(site_dir, "yaml")
    assert _probe(site_dir, "hydra") == ("hydra" not in missing)
    assert _probe(site_dir, "verl") == ("verl" not in missing)
    runs = {
        "submit": _cli(site_dir, "submit", str(hosts), str(PROFILE), "--dry-run"),
        "check": _cli(site_dir, "profile", "check", str(PROFILE)),
        "check --set": _cli(site_dir, "profile", "check", str(PROFILE), "--set", "a.b=1"),
        "check --hosts": _cli(site_dir, "profile", "check", str(PROFILE), "--hosts", str(hosts)),
    }
    for name, proc in runs.items():
        assert proc.returncode == 2, (name, proc.stdout, proc.stderr)
        assert "Traceback" not in proc.stderr, (name, proc.stderr)
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1, (name, proc.stderr)
        assert sys.executable in lines[0]
        if "hydra" in missing:  # nothing composes without them, whoever has verl
            assert "hydra and omegaconf missing in this Python (" in lines[0], (name, lines[0])
            assert "verl is not installed" not in lines[0]
        elif "hosts" in name or name == "submit":  # the cluster was asked, then this Python
            assert "verl is not installed on the cluster (asked localhost (" in lines[0], lines[0]
            assert "verl is not installed there) nor in this Python (" in lines[0], lines[0]
        else:  # no hosts file given: no cluster to ask
            assert "verl is not installed in this Python (" in lines[0], (name, lines[0])
            assert "no cluster was asked" in lines[0]
    # What needs no verl still works there: the hosts file and a profile export.
    export = _cli(site_dir, "profile", "export", str(PROFILE))
    assert export.returncode == 0 and "ray job submit" in export.stdout, export.stderr
