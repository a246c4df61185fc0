"""Facts about verl's example launch scripts (tests/fixtures/verl_examples/facts.json), derived
from a verl checkout, and the oracle that classifies a launch script independently of verl-tui.

The repository holds no copy of verl's scripts: ``facts`` reads them from a checkout (a work
tree, or a bare git directory exported to a temporary folder) and records, per script, its
source URL, the argv bash passes to main_ppo, the config name/path and the verdict.

Independent of the code under test on purpose (no ``tui`` import):

- the script's verl command line comes from **bash itself**: the script runs under
  ``bash`` with ``python``/``python3``/``ray`` replaced by a recorder and every other command
  missing (a no-op), so arrays, ``${X:-d}``, ``$((…))``, functions and ``$(pwd)`` expand
  exactly as in bash;
- validity comes from **Hydra composing verl's own config** as ``main_ppo`` does: the argv
  parsed by Hydra's own argument parser, ``--config-path`` resolved as Hydra resolves it for
  ``verl/trainer/main_ppo.py`` (relative to that file's folder), a custom config's relative
  ``file://`` search path resolved from a verl repository root (the scripts say "run from the
  root of the project"), then ``OmegaConf.resolve`` (main_ppo resolves the config first) and
  the mandatory ``???`` values main_ppo reads.

Usage::

    python tests/derive_verl_examples.py facts VERL_CHECKOUT [COMMIT]   # re-derive facts.json

VERL_CHECKOUT is a verl work tree, or a bare git directory (then COMMIT, default HEAD, is
exported to a temporary folder first).
"""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).resolve().parent / "fixtures"
FACTS = FIXTURES / "verl_examples" / "facts.json"
LAUNCH_SCRIPTS = FIXTURES / "launch_scripts"
ENTRY = "verl.trainer.main_ppo"
REPO_MARK = "$REPO"  # a path under the project root a script ran from, written as a name
_RECORD_SEP = "\x1e"
# Slurm scripts (`set -u`) read the allocation from these: one node of 8 GPUs.
_SLURM = {
    "SLURM_JOB_NUM_NODES": "1",
    "SLURM_NNODES": "1",
    "SLURM_JOB_NODELIST": "node1",
    "SLURM_GPUS_PER_NODE": "8",
    "SLURM_CPUS_PER_TASK": "64",
    "SLURM_JOB_ID": "1",
}

# Commands the scripts may use to compute values; every other command is missing (a no-op).
_TOOLS = (
    "dirname",
    "basename",
    "realpath",
    "readlink",
    "expr",
    "seq",
    "head",
    "tail",
    "cut",
    "tr",
    "sed",
    "awk",
    "grep",
    "wc",
    "cat",
    "sort",
    "uniq",
    "printf",
    "hostname",
    "whoami",
    "id",
    "env",
    "true",
    "false",
    "test",
    "[",
    "bc",
)


def verl_dir() -> Path:
    spec = importlib.util.find_spec("verl")
    assert spec and spec.submodule_search_locations, "verl is not installed"
    return Path(next(iter(spec.submodule_search_locations)))


# -- bash: the command line the script really runs --------------------------------------------


def _shims(where: Path, record: Path) -> Path:
    bin_dir = where / "bin"
    bin_dir.mkdir()
    recorder = (
        "#!/bin/bash\n"
        f'{{ printf \'%s\\0\' "$(basename "$0")" "$@"; printf \'{_RECORD_SEP}\'; }}'
        f" >> {record}\nexit 0\n"
    )
    for name in ("python", "python3", "ray"):
        path = bin_dir / name
        path.write_text(recorder)
        path.chmod(0o755)
    # srun/mpirun-style launchers: run the command after their options.
    launcher = bin_dir / "srun"
    launcher.write_text(
        '#!/bin/bash\nwhile [ $# -gt 0 ]; do case "$1" in python*|ray) '
        'exec "$@";; esac; shift; done\nexit 0\n'
    )
    launcher.chmod(0o755)
    for name in ("sleep", "mkdir", "tee", "rm", "cp", "mv", "ln", "touch", "chmod"):
        # Side effects away from the copy: these do nothing (tee passes its input on).
        path = bin_dir / name
        path.write_text("#!/bin/bash\n" + ("exec /bin/cat\n" if name == "tee" else "exit 0\n"))
        path.chmod(0o755)
    # A fixed clock: names built from `date` stay the same from one derivation to the next.
    clock = bin_dir / "date"
    clock.write_text(f'#!/bin/bash\nexec {shutil.which("date")} -u -d @1767225600 "$@"\n')
    clock.chmod(0o755)
    for tool in _TOOLS:
        found = shutil.which(tool)
        if found and not (bin_dir / tool).exists():
            (bin_dir / tool).symlink_to(found)
    return bin_dir


def script_argv(script: Path, project: Path, *, timeout: float = 20.0) -> list[str] | None:
    """The arguments after ``-m verl.trainer.main_ppo`` of the first verl command `script`
    runs (through ``ray job submit -- …`` too), run by bash from a copy of `project` (the
    "root of the project" the scripts want as cwd); None when it runs none. Paths under that
    copy are written ``$REPO/…`` and the home folder ``$HOME``, so the argv is reproducible."""
    rel = script.resolve().relative_to(project.resolve())
    with tempfile.TemporaryDirectory(prefix="verl-ex-") as tmp:
        work = Path(tmp)
        repo = work / "repo"
        shutil.copytree(project, repo, ignore=shutil.ignore_patterns(".git"))
        record = work / "record"
        record.write_bytes(b"")
        bin_dir = _shims(work, record)
        home = work / "home"
        home.mkdir()
        bash_env = work / "bash_env"
        # Missing commands and unreadable `source`d files (cluster set-up scripts) are no-ops.
        bash_env.write_text(
            "command_not_found_handle() { return 0; }\n"
            'source() { [ -r "$1" ] && builtin source "$@"; return 0; }\n'
            '.() { [ -r "$1" ] && builtin source "$@"; return 0; }\n'
            "ulimit() { return 0; }\n"
            # Variables a script expects from its environment (HDFS_ROOT):
            # empty, not fatal under `set -u`.
            'set() { builtin set "$@"; builtin set +u; }\n'
        )
        env = {
            "PATH": str(bin_dir),
            "HOME": str(home),
            "BASH_ENV": str(bash_env),
            "LANG": "C.UTF-8",
            **_SLURM,
        }
        with contextlib.suppress(subprocess.TimeoutExpired):
            subprocess.run(
                ["/bin/bash", str(repo / rel)],
                cwd=repo,
                env=env,
                timeout=timeout,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                check=False,
            )
        data = record.read_bytes().decode("utf-8", "replace")
    for call in data.split(_RECORD_SEP):
        argv = call.split("\0")[:-1]
        if ENTRY in argv:
            i = argv.index(ENTRY)
            if i > 0 and argv[i - 1] == "-m":
                return [
                    a.replace(str(home), "$HOME").replace(str(repo), REPO_MARK)
                    for a in argv[i + 1 :]
                ]
    return None


# -- Hydra: what verl 0.9.1 makes of it -------------------------------------------------------

Failure = tuple[str | None, str]  # (the key Hydra names, its first line)


def hydra_args(argv: list[str], project: Path) -> tuple[Path, str, list[str]]:
    """(config folder, config name, overrides) main_ppo's Hydra reads from `argv`, with
    ``$REPO`` meaning `project`."""
    from hydra._internal.utils import get_args_parser

    args = get_args_parser().parse_args([a.replace(REPO_MARK, str(project)) for a in argv])
    # ($HOME stays a name: a plain string to Hydra, as the real home would be)
    trainer_dir = verl_dir() / "trainer"
    config_path = args.config_path or "config"
    # hydra/_internal/utils.py::compute_search_path_dir: absolute as is, else relative to the
    # folder of the file that declares @hydra.main (verl/trainer/main_ppo.py).
    config_dir = Path(
        os.path.normpath(config_path if os.path.isabs(config_path) else trainer_dir / config_path)
    )
    return config_dir, args.config_name or "ppo_trainer", list(args.overrides)


def classify(argv: list[str], project: Path, oracle: HydraOracle | None = None) -> dict[str, Any]:
    """{"valid", "keys", "reason", "config_name", "config_path"} for ``main_ppo ARGV`` run from
    `project`: composed by Hydra's full compose, or by `oracle` (the same, cheaper)."""
    from omegaconf import OmegaConf

    config_dir, config_name, overrides = hydra_args(argv, project)
    trainer_dir = verl_dir() / "trainer"
    out: dict[str, Any] = {
        "config_name": config_name,
        "config_path": None
        if config_dir == trainer_dir / "config"
        else str(config_dir).replace(str(project), REPO_MARK),
    }
    compose = oracle.compose_dropping if oracle else compose_dropping
    cfg, failures = compose(config_dir, config_name, overrides)
    if failures:
        keys = [key for key, _ in failures]
        return {**out, "valid": False, "keys": keys, "reason": failures[0][1]}
    assert cfg is not None
    missing = OmegaConf.missing_keys(cfg)
    needed = ["actor_rollout_ref.rollout.name"]
    if OmegaConf.select(cfg, "reward.reward_model.enable"):
        needed.append("reward.reward_model.rollout.name")
    for key in needed:
        if key in missing:
            reason = f"mandatory value {key} is not set (???)"
            return {**out, "valid": False, "keys": [key], "reason": reason}
    return {**out, "valid": True, "keys": [], "reason": "composes"}


def compose_dropping(
    config_dir: Path, config_name: str, overrides: list[str]
) -> tuple[Any, list[Failure]]:
    """(config, failures): Hydra's full compose, each override it fails on dropped in turn (it
    stops at the first) so that every bad one is named; the config is None when one failed."""
    failures: list[Failure] = []
    for _ in range(12):
        try:
            cfg = full_compose(config_dir, config_name, overrides)
        except Exception as exc:  # Hydra's and OmegaConf's errors alike: the argv is invalid
            key, reason = _failing_key(exc)
            failures.append((key, reason))
            left = [o for o in overrides if key is None or _key(o) != key]
            if key is None or len(left) == len(overrides):
                break
            overrides = left
        else:
            return (None if failures else cfg), failures
    return None, failures


def _key(override: str) -> str:
    return override.split("=", 1)[0].strip().lstrip("+~")


@contextlib.contextmanager
def _at_verl_root() -> Iterator[None]:
    # A custom config's `file://verl/trainer/config` search path is relative to the working
    # directory: a verl repository root is where the scripts run from.
    cwd = os.getcwd()
    os.chdir(verl_dir().parent)
    try:
        yield
    finally:
        os.chdir(cwd)


def full_compose(
    config_dir: Path, config_name: str, overrides: list[str], *, resolve: bool = True
) -> Any:
    """Hydra's compose, start to end, as main_ppo runs it, then OmegaConf.resolve."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    with _at_verl_root(), initialize_config_dir(config_dir=str(config_dir), version_base=None):
        cfg = compose(config_name, overrides=overrides)
    if resolve:
        OmegaConf.resolve(cfg)  # main_ppo resolves the config before anything else
    return cfg


class HydraOracle:
    """Many argv composed as `full_compose` would, cheaply. Hydra builds a config in two
    steps: the defaults list (the config name and the overrides that choose config groups)
    gives the base, then the value overrides are applied to it one by one. The first step,
    nearly all of a compose's cost, is done by Hydra's own compose once per (folder, name,
    group choices); the second by Hydra's own function for it, on a copy of that base, with
    the overrides split into the two kinds by Hydra's own ``Overrides``. A test checks it
    against `full_compose` on a sample."""

    def __init__(self) -> None:
        self._bases: dict[tuple[str, str, tuple[str, ...]], Any] = {}
        self._repos: dict[tuple[str, str], Any] = {}
        self._overrides: dict[str, Any] = {}
        self._trees: dict[tuple[Any, ...], Any] = {}

    def _repo(self, config_dir: Path, config_name: str) -> Any:
        """Hydra's config repository for one primary config, with its search path."""
        key = (str(config_dir), config_name)
        if key not in self._repos:
            from hydra._internal.config_loader_impl import ConfigLoaderImpl
            from hydra._internal.config_repository import CachingConfigRepository
            from hydra.core.global_hydra import GlobalHydra
            from hydra.initialize import initialize_config_dir

            with _at_verl_root(), initialize_config_dir(str(config_dir), version_base=None):
                loader = GlobalHydra.instance().config_loader()
                assert isinstance(loader, ConfigLoaderImpl)
                repo = CachingConfigRepository(loader.repository)
                loader._process_config_searchpath(config_name, [], repo)
            self._repos[key] = repo
        return self._repos[key]

    def compose_dropping(
        self, config_dir: Path, config_name: str, overrides: list[str]
    ) -> tuple[Any, list[Failure]]:
        """What the module's `compose_dropping` gives. The value overrides are applied one at
        a time, as Hydra does, so a failing one is skipped rather than composed again without
        it; anything else that fails (a parse error, a group choice, an interpolation, a key
        inside a value) is left to the full compose."""
        from hydra._internal.config_loader_impl import ConfigLoaderImpl
        from hydra._internal.defaults_list import Overrides
        from omegaconf import OmegaConf

        def full() -> tuple[Any, list[Failure]]:
            return compose_dropping(config_dir, config_name, overrides)

        try:
            parsed = [self._parsed(line) for line in overrides]
            if any(o.get_key_element() == "hydra.searchpath" for o in parsed):
                return full()
            values = Overrides(self._repo(config_dir, config_name), parsed).config_overrides
            values = [o for o in values if not o.is_hydra_override()]
            chosen = tuple(o.input_line for o in parsed if all(o is not v for v in values))
            base = self._base(config_dir, config_name, chosen)
        except Exception:
            return full()
        cfg = copy.deepcopy(base)
        failures: list[Failure] = []
        for o in values:
            try:
                ConfigLoaderImpl._apply_overrides_to_config([o], cfg)
            except Exception as exc:  # as Hydra's own loop would raise on it
                key, reason = _failing_key(exc)
                if key is None or key != _key(o.input_line):
                    return full()
                if key not in (k for k, _ in failures):
                    failures.append((key, reason))
        try:
            with self._parse_trees_kept():
                OmegaConf.resolve(cfg)  # main_ppo resolves the config before anything else
        except Exception:
            return full()
        return (None if failures else cfg), failures

    def _parsed(self, line: str) -> Any:
        """Hydra's parse of one override (read-only afterwards), kept by its text."""
        if line not in self._overrides:
            from hydra.core.override_parser.overrides_parser import OverridesParser

            (self._overrides[line],) = OverridesParser.create().parse_overrides([line])
        return self._overrides[line]

    @contextlib.contextmanager
    def _parse_trees_kept(self) -> Iterator[None]:
        """OmegaConf parses each ${…} again on every resolve (most of a resolve's cost); the
        trees are only read, so one parse per text serves every copy of the config."""
        import omegaconf.base as base

        parse = base.parse
        trees = self._trees

        def kept(value: str, *args: Any) -> Any:
            if (value, *args) not in trees:
                trees[(value, *args)] = parse(value, *args)
            return trees[(value, *args)]

        base.parse = kept  # type: ignore[assignment]
        try:
            yield
        finally:
            base.parse = parse

    def _base(self, config_dir: Path, config_name: str, chosen: tuple[str, ...]) -> Any:
        key = (str(config_dir), config_name.removesuffix(".yaml"), chosen)
        if key not in self._bases:
            # unresolved: the value overrides still change what its ${…} give
            self._bases[key] = full_compose(config_dir, config_name, list(chosen), resolve=False)
        return self._bases[key]

    def __call__(self, config_dir: Path, config_name: str, overrides: list[str]) -> Any:
        """The config composed from a valid argv."""
        cfg, failures = self.compose_dropping(config_dir, config_name, overrides)
        assert not failures, failures
        return cfg


def _failing_key(exc: BaseException) -> tuple[str | None, str]:
    text = str(exc)
    m = (
        re.search(r"Could not override '([^']+)'", text)
        or re.search(r"Key '([^']+)' is not in struct", text)
        or re.search(r"full_key: (\S+)", text)
        or re.search(r"Could not delete from config\. '([^']+)'", text)
        or re.search(r"An item is already at '([^']+)'", text)
        or re.search(r"Error parsing override '([A-Za-z_+~][\w.]*)=", text)
        or re.search(r"LexerNoViableAltException: ([A-Za-z_+~][\w.]*)=", text)
    )
    return (m.group(1).lstrip("+~") if m else None), text.strip().splitlines()[0][:300]


# -- the facts --------------------------------------------------------------------------------


def launch_scripts(project: Path) -> list[Path]:
    """Every examples/**/*.sh of a verl checkout that names main_ppo."""
    return [
        p
        for p in sorted((project / "examples").rglob("*.sh"))
        if ENTRY in p.read_text(encoding="utf-8", errors="replace")
    ]


def config_extends(config_dir: Path, config_name: str) -> list[str]:
    """The entries of a custom config's defaults list other than _self_ (the verl configs it
    builds on)."""
    import yaml

    path = config_dir / (config_name if config_name.endswith(".yaml") else f"{config_name}.yaml")
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    defaults = data.get("defaults", []) if isinstance(data, dict) else []
    return [str(d) for d in defaults if isinstance(d, str) and d != "_self_"]


def derive(
    script: Path, project: Path, repo: str, commit: str, oracle: HydraOracle | None = None
) -> dict[str, Any]:
    rel = script.relative_to(project).as_posix()
    entry: dict[str, Any] = {
        "script": rel,
        "url": f"https://github.com/{repo}/blob/{commit}/{rel}",
    }
    argv = script_argv(script, project)
    if argv is None:
        return {**entry, "valid": False, "keys": [], "reason": "runs no main_ppo command"}
    verdict = classify(argv, project, oracle)
    if verdict["config_path"]:
        config_dir, name, _ = hydra_args(argv, project)
        verdict["config_extends"] = config_extends(config_dir, name)
    return {**entry, **verdict, "argv": argv}


@contextlib.contextmanager
def checkout_tree(source: Path, commit: str | None) -> Iterator[tuple[Path, str]]:
    """(work tree, commit) of a verl work tree, or of `commit` exported from a bare git dir."""
    git = ["git", "--git-dir", str(source / ".git" if (source / ".git").exists() else source)]
    rev = subprocess.run(
        [*git, "rev-parse", commit or "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    if (source / ".git").exists() and commit is None:
        yield source, rev
        return
    with tempfile.TemporaryDirectory(prefix="verl-checkout-") as tmp:
        archive = subprocess.run(
            [*git, "archive", rev, "examples"], capture_output=True, check=True
        )
        subprocess.run(["tar", "-x", "-C", tmp], input=archive.stdout, check=True)
        yield Path(tmp), rev


def main(argv: list[str]) -> int:
    if argv[:1] == ["facts"] and len(argv) in (2, 3):
        from importlib.metadata import version

        with checkout_tree(Path(argv[1]), argv[2] if len(argv) == 3 else None) as (tree, rev):
            entries = [derive(s, tree, "volcengine/verl", rev) for s in launch_scripts(tree)]
        data = {
            "source_repo": "volcengine/verl",
            "source_commit": rev,
            "verl_version": version("verl"),
            "entry_point": ENTRY,
            "derived_by": "tests/derive_verl_examples.py facts",
            "scripts": entries,
        }
        FACTS.write_text(json.dumps(data, indent=1) + "\n")
        valid = sum(e["valid"] for e in entries)
        print(f"{len(entries)} scripts: {valid} valid, {len(entries) - valid} invalid")
        return 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
