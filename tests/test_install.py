"""Installing as a user would (issue 24): the README's login-node command from a clone, with
the runtime lock requirements/login-node.txt, and `pipx install` of a built wheel and of a
clone, each into a fresh venv with only the lock's packages on offer.

The lock's wheels are downloaded from the package index once (cached under ~/.cache by the
lock's hash) and every install then runs offline (`--no-index --find-links`, pip's own config
and PIP_* variables cleared): a dependency the lock lacks has nothing to install from and
fails here, and what ends up installed must be exactly the lock."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tui.commands import COMMANDS

# Three fresh installs (the wheelhouse, once fetched, is cached): a minute or more.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "requirements" / "login-node.txt"
PRESETS = sorted(p.stem for p in (ROOT / "profiles").glob("*.yaml"))
# What the cockpit never needs on the login node (the `ray` extra and the hosts' side).
NOT_ON_THE_LOGIN_NODE = {"ray", "verl", "torch", "vllm", "sglang", "pytest", "debugpy"}


def _name(requirement: str) -> str:
    return re.sub(r"[-_.]+", "-", requirement.split("==")[0].split("[")[0]).strip().lower()


def _pins(text: str) -> dict[str, str]:
    pins = {}
    for line in text.splitlines():
        line = line.split("#")[0].strip()
        if "==" in line:
            pins[_name(line)] = line.split("==")[1].strip()
    return pins


def _offline_env(tmp: Path, **extra: str) -> dict[str, str]:
    """No pip config file, no PIP_* variables, no index: only what the command line offers."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "PIPX_"))}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1", HOME=str(tmp))
    env.update(
        XDG_CONFIG_HOME=str(tmp / "config"),
        XDG_STATE_HOME=str(tmp / "state"),
        XDG_CACHE_HOME=str(tmp / "cache"),
    )
    env.update(extra)
    return env


def _run(argv: list[str | Path], *, env: dict[str, str], cwd: Path | None = None, timeout=600):
    done = subprocess.run(
        [str(a) for a in argv], capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout
    )
    assert done.returncode == 0, f"{argv}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def test_the_lock_is_the_cockpits_closure_at_the_tested_versions():
    """Every pin of the login-node lock is the version constraints.txt (the tested set) pins;
    every runtime dependency of pyproject.toml is in it; nothing of the hosts' side is."""
    from importlib.metadata import requires

    lock = _pins(LOCK.read_text())
    tested = _pins((ROOT / "constraints.txt").read_text())
    assert lock, "requirements/login-node.txt pins nothing"
    drift = {n: (v, tested.get(n)) for n, v in lock.items() if tested.get(n) != v}
    assert not drift, (
        f"lock differs from constraints.txt (lock, tested): {drift}; "
        "regenerate it with requirements/lock-login-node.sh"
    )
    deps = [r for r in requires("verl-tui") or [] if "extra ==" not in r]
    wanted = {_name(re.split(r"[<>=!~ ;]", d)[0]) for d in deps}
    assert wanted <= set(lock), (
        f"not in the lock: {wanted - set(lock)}; regenerate it with requirements/lock-login-node.sh"
    )
    assert not NOT_ON_THE_LOGIN_NODE & set(lock)


@pytest.fixture(scope="module")
def wheelhouse() -> Path:
    """The lock's wheels and the build backend (for installs from source), fetched once per
    lock content: later runs install from here without asking the index."""
    import setuptools

    backend = [f"setuptools=={setuptools.__version__}", "wheel"]
    key = hashlib.sha256((LOCK.read_text() + " ".join(backend)).encode()).hexdigest()[:16]
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    house = cache / "verl-tui-tests" / f"wheelhouse-{key}"
    if house.is_dir():
        return house
    partial = house.with_name(house.name + f".{os.getpid()}.part")
    shutil.rmtree(partial, ignore_errors=True)
    pins = [line for line in LOCK.read_text().splitlines() if "==" in line.split("#")[0]]
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",  # as wheels: antlr4-python3-runtime 4.9.3 (Hydra's) is an sdist only
            "-q",
            "--no-deps",
            "-w",
            str(partial),
            *pins,
            *backend,
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    partial.rename(house)
    return house


@pytest.fixture(scope="module")
def clone(tmp_path_factory) -> Path:
    """The repository as a clone has it: tracked files and new ones not ignored (no .venv,
    no build output)."""
    dest = tmp_path_factory.mktemp("clone") / "verl-tui"
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for rel in filter(None, listed.split("\0")):
        if rel.startswith(("tests/", "bench/", "screenshots/")):
            continue  # not part of an install; large
        src = ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    return dest


@pytest.fixture(scope="module")
def wheel(clone, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    src = tmp_path_factory.mktemp("wheel-src") / "verl-tui"
    shutil.copytree(clone, src)  # the build writes build/ and egg-info beside its sources
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            out,
            src,
        ],
        env=dict(os.environ),
    )
    return next(out.glob("verl_tui-*.whl"))


def _check_installed(bin_dir: Path, env: dict[str, str]) -> None:
    """What a user does first with a fresh install, run from that install."""
    exe = bin_dir / "verl-tui"
    helped = _run([exe, "--help"], env=env).stdout
    assert all(name in helped for name in COMMANDS)
    listed = _run([exe, "profile", "list"], env=env).stdout
    assert all(p in listed for p in PRESETS), listed  # the presets ship in the package
    page = _run([exe, "man", "--path"], env=env).stdout.strip()
    assert Path(page).is_file() and ROOT not in Path(page).parents
    assert _run([exe, "man"], env=env).stdout == (ROOT / "tui" / "man" / "verl-tui.1").read_text()
    script = _run([exe, "completion", "bash"], env=env).stdout
    offered = _run(
        [
            "bash",
            "--norc",
            "-c",
            'eval "$1"; COMP_WORDS=(verl-tui pro); COMP_CWORD=1; '
            '_shtab_verl_tui; echo "${COMPREPLY[@]}"',
            "_",
            script,
        ],
        env=env,
    ).stdout.split()
    assert offered == ["profile"]


def test_readme_login_node_install_from_a_clone(clone, wheelhouse, tmp_path):
    """`python3 -m venv .venv && .venv/bin/pip install -c requirements/login-node.txt .` in
    the clone, offline: installs exactly the lock, and the cockpit's commands run."""
    env = _offline_env(tmp_path)
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", venv], env=env)
    _run(
        [
            venv / "bin" / "python",
            "-m",
            "pip",
            "install",
            "-q",
            "--no-compile",  # the bytecode is no part of what is tested; its CPU is
            "--no-index",
            "--find-links",
            wheelhouse,
            "-c",
            "requirements/login-node.txt",
            ".",
        ],
        env=env,
        cwd=clone,
    )
    frozen = _run(
        [venv / "bin" / "python", "-m", "pip", "freeze", "--exclude", "verl-tui"], env=env
    ).stdout
    assert _pins(frozen) == _pins(LOCK.read_text())
    _check_installed(venv / "bin", env)


def test_pipx_install_of_the_wheel_and_of_a_clone(clone, wheel, wheelhouse, tmp_path):
    """`pipx install` of a built wheel, then of the clone, with PIPX_HOME, PIPX_BIN_DIR and
    PIPX_MAN_DIR in a temporary folder; `man verl-tui` finds the page pipx linked."""
    pipx_env = _offline_env(
        tmp_path,
        PIPX_HOME=str(tmp_path / "pipx"),
        PIPX_BIN_DIR=str(tmp_path / "bin"),
        PIPX_MAN_DIR=str(tmp_path / "man"),
        PIPX_DISABLE_SHARED_LIBS_AUTO_UPGRADE="1",  # it would ask the index for a new pip
    )
    pip_args = f"--no-compile --no-index --find-links {wheelhouse} -c {LOCK}"
    pipx = [sys.executable, "-m", "pipx"]
    _run([*pipx, "install", "--pip-args", pip_args, wheel], env=pipx_env)
    _check_installed(tmp_path / "bin", pipx_env)
    frozen = _run([*pipx, "runpip", "verl-tui", "freeze", "--exclude", "verl-tui"], env=pipx_env)
    assert _pins(frozen.stdout) == _pins(LOCK.read_text())
    linked = tmp_path / "man" / "man1" / "verl-tui.1"
    assert linked.is_file()
    if shutil.which("man"):
        shown = _run(
            ["man", "verl-tui"],
            env={**pipx_env, "MANPATH": str(tmp_path / "man"), "MANPAGER": "cat"},
        )
        assert "verl-tui submit" in shown.stdout

    _run([*pipx, "install", "--force", "--pip-args", pip_args, clone], env=pipx_env)
    _check_installed(tmp_path / "bin", pipx_env)
    version = _run([tmp_path / "bin" / "verl-tui", "--version"], env=pipx_env).stdout
    assert version.startswith("verl-tui ")
