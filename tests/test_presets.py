"""Presets as package data and by name (issue 11): a real wheel built from this tree carries
profiles/*.yaml as tui/presets/, and the CLI run from that wheel (not the repository) lists
and checks them; `profile list`; a preset's name wherever a profile path is taken, a file of
that name winning (and said)."""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from harness.cli import run_cli

from tui.config.yamlfile import ConfigError
from tui.jobs.profiles import find_preset, preset_dir, resolve_profile

REPO = Path(__file__).resolve().parents[1]
PRESETS = sorted(p.stem for p in (REPO / "profiles").glob("*.yaml"))


def _env(tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
        "XDG_STATE_HOME": str(tmp_path / "state"),
    }


def _cli(tmp_path: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return run_cli([*args], env=_env(tmp_path), cwd=cwd or tmp_path, timeout=120)


# -- the wheel -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def wheel_site(tmp_path_factory) -> tuple[Path, Path]:
    """(the unpacked wheel, a site-packages of this venv without verl-tui itself)."""
    root = tmp_path_factory.mktemp("wheel")
    src = root / "src"  # a copy: the build writes build/ and egg-info next to its sources
    shutil.copytree(REPO / "tui", src / "tui", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "profiles", src / "profiles")
    for name in ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md"):
        shutil.copy(REPO / name, src / name)
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            str(src),
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(root / "dist"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    wheel = next((root / "dist").glob("verl_tui-*.whl"))
    unpacked = root / "unpacked"
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        zf.extractall(unpacked)
    assert sorted(n for n in names if n.startswith("tui/presets/")) == [
        f"tui/presets/{p}.yaml" for p in PRESETS
    ]
    assert "tui/remote/verl_config.py" in names  # the helper shipped to hosts as source
    # This venv's packages, but not verl-tui's editable install: the wheel's copy is the one.
    deps = root / "site"
    deps.mkdir()
    for entry in Path(site.getsitepackages()[0]).iterdir():
        if not entry.name.startswith(("__editable__", "verl_tui")):
            (deps / entry.name).symlink_to(entry)
    return unpacked, deps


def _wheel_cli(
    wheel_site: tuple[Path, Path], tmp_path: Path, *args: str
) -> subprocess.CompletedProcess:
    unpacked, deps = wheel_site
    code = (
        f"import site, sys; sys.path.insert(0, {str(unpacked)!r}); "
        f"site.addsitedir({str(deps)!r}); import tui; "
        f"assert tui.__file__.startswith({str(unpacked)!r}), tui.__file__; "
        "from tui.cli import main; sys.exit(main())"
    )
    return subprocess.run(
        [sys.executable, "-I", "-S", "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=_env(tmp_path),
        cwd=tmp_path,
    )


def test_an_installed_wheel_lists_and_checks_its_presets(wheel_site, tmp_path) -> None:
    listed = _wheel_cli(wheel_site, tmp_path, "profile", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)["profiles"]
    assert sorted(r["name"] for r in rows) == PRESETS
    unpacked = wheel_site[0]
    assert all(
        r["kind"] == "preset" and r["path"].startswith(str(unpacked / "tui" / "presets"))
        for r in rows
    ), rows
    check = _wheel_cli(wheel_site, tmp_path, "profile", "check", "grpo-mi300")
    assert check.returncode == 0, check.stdout + check.stderr
    assert "grpo-mi300: 0 errors" in check.stdout


# -- profile list ------------------------------------------------------------------------------


def test_profile_list_text_and_json(tmp_path) -> None:
    mine = tmp_path / "config" / "verl-tui" / "profiles"
    mine.mkdir(parents=True)
    (mine / "my-run.yaml").write_text(
        "description: my own run, a long description that goes on and on about what this "
        "profile does and why it exists at all\noverrides:\n  trainer.nnodes: 4\n"
    )
    (mine / "broken.yaml").write_text("name: broken\noverrides: [1]\n")
    proc = _cli(tmp_path, "profile", "list")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split() == ["NAME", "ALGORITHM", "NODES×GPUS", "DESCRIPTION"]
    by_name = {ln.split()[0]: ln for ln in lines[1:]}
    assert set(by_name) == {*PRESETS, "my-run", "broken"}
    assert by_name["grpo-qwen3-32b-2x8"].split()[1:3] == ["grpo", "2×8"]
    assert by_name["ppo-7b-critic-2x8"].split()[1:3] == ["gae", "2×8"]
    assert by_name["grpo-gsm8k-qwen2.5-0.5b"].split()[2] == "1×cluster"
    row = by_name["my-run"]
    assert row.split()[1:3] == ["gae", "4×cluster"] and "(yours) my own run" in row
    text = row.split("(yours) ", 1)[1]
    full = (
        "my own run, a long description that goes on and on about what this profile does "
        "and why it exists at all"
    )
    # One line, cut at a word boundary, never mid-word.
    assert text.endswith("…") and full.startswith(text[:-1]) and full[len(text) - 1] == " "
    assert "error:" in by_name["broken"]
    doc = json.loads(_cli(tmp_path, "profile", "list", "--json").stdout)
    mine_row = next(r for r in doc["profiles"] if r["name"] == "my-run")
    assert (
        mine_row["kind"],
        mine_row["algorithm"],
        mine_row["nodes"],
        mine_row["gpus_per_node"],
    ) == ("user", "gae", 4, None)


# -- names wherever a path is taken -------------------------------------------------------------


def test_resolve_profile_names_files_and_neither(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.chdir(tmp_path)
    assert preset_dir() == REPO / "profiles"
    assert find_preset("grpo-mi300").path == REPO / "profiles" / "grpo-mi300.yaml"
    assert resolve_profile("grpo-mi300") == (REPO / "profiles" / "grpo-mi300.yaml", None)
    assert resolve_profile("grpo-mi300.yaml")[0] == REPO / "profiles" / "grpo-mi300.yaml"
    (tmp_path / "grpo-mi300.yaml").write_text("name: local-one\n")
    for arg in ("grpo-mi300", "grpo-mi300.yaml"):
        path, note = resolve_profile(arg)
        assert path.resolve() == (tmp_path / "grpo-mi300.yaml").resolve()
        assert note and "not the preset 'grpo-mi300'" in note
    with pytest.raises(
        ConfigError,
        match=r"no-such-preset: no such file, and no preset of "
        r"that name \(presets: grpo-gsm8k",
    ):
        resolve_profile("no-such-preset")
    assert resolve_profile("some/dir/x.yaml") == (Path("some/dir/x.yaml"), None)


def test_check_and_dry_run_take_a_preset_name(tmp_path) -> None:
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text("hosts:\n  - name: localhost\n    transport: local\n")
    check = _cli(tmp_path, "profile", "check", "grpo-mi300")
    assert check.returncode == 0 and "grpo-mi300: 0 errors" in check.stdout, check.stderr
    # (the job preflight, which a dry run also runs, is tested in test_preflight.py)
    dry = _cli(tmp_path, "submit", str(hosts), "grpo-mi300", "--dry-run", "--skip-preflight")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert "verl.trainer.main_ppo" in dry.stdout and "qwen2.5-0.5b-grpo-mi300" in dry.stdout
    # A file of that name here wins, and the command says so.
    (tmp_path / "grpo-mi300.yaml").write_text(
        (REPO / "profiles" / "grpo-mi300.yaml")
        .read_text()
        .replace("qwen2.5-0.5b-grpo-mi300", "the-local-file")
    )
    local = _cli(tmp_path, "submit", str(hosts), "grpo-mi300", "--dry-run", "--skip-preflight")
    assert local.returncode == 0 and "the-local-file" in local.stdout, local.stderr
    assert "grpo-mi300: using the file grpo-mi300.yaml, not the preset 'grpo-mi300'" in local.stderr
    missing = _cli(tmp_path, "profile", "check", "nope")
    assert missing.returncode == 2 and "nope: no such file, and no preset" in missing.stderr
