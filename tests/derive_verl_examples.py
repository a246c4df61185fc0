"""The verl example corpus (tests/fixtures/verl_examples): copy it from a verl checkout and
classify every script as valid or not for the installed verl, independently of verl-tui.

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

    python tests/derive_verl_examples.py copy VERL_CHECKOUT COMMIT   # refresh the scripts
    python tests/derive_verl_examples.py manifest                    # re-derive MANIFEST.json
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent / "fixtures" / "verl_examples"
MANIFEST = ROOT / "MANIFEST.json"
ENTRY = "verl.trainer.main_ppo"
_RECORD_SEP = "\x1e"
# Slurm scripts (`set -u`) read the allocation from these: one node of 8 GPUs.
_SLURM = {
    "SLURM_JOB_NUM_NODES": "1",
    "SLURM_NNODES": "1",
    "SLURM_JOB_NODELIST": "node1",
    "SLURM_GPUS_PER_NODE": "8",
    "SLURM_CPUS_PER_TASK": "64",
    "SLURM_JOB_ID": "1",
}  # between recorded invocations

# Commands the scripts may use to compute values; every other command is missing (a no-op).
_TOOLS = (
    "date",
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


def script_argv(script: Path, root: Path = ROOT, *, timeout: float = 20.0) -> list[str] | None:
    """The arguments after ``-m verl.trainer.main_ppo`` of the first verl command the script
    runs (through ``ray job submit -- …`` too); None when it runs none."""
    rel = script.resolve().relative_to(root.resolve())
    with tempfile.TemporaryDirectory(prefix="verl-ex-") as tmp:
        work = Path(tmp)
        repo = work / "repo"  # the "root of the project" the scripts want as cwd
        shutil.copytree(root / "examples", repo / "examples")
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
                # Temporary paths written as names, so the manifest is reproducible.
                return [
                    a.replace(str(home), "$HOME").replace(str(repo), "$REPO") for a in argv[i + 1 :]
                ]
    return None


# -- Hydra: what verl 0.9.1 makes of it -------------------------------------------------------


def classify(argv: list[str]) -> dict[str, Any]:
    """{"valid": bool, "key": str|None, "reason": str, "config_name", "config_path"} for
    ``main_ppo ARGV``; argv paths under the repository copy are written ``$REPO/…`` and mean
    this corpus folder."""
    from hydra._internal.utils import get_args_parser
    from omegaconf import OmegaConf

    args = get_args_parser().parse_args([a.replace("$REPO", str(ROOT)) for a in argv])
    # ($HOME stays a name: a plain string to Hydra, as the real home would be)
    trainer_dir = verl_dir() / "trainer"
    config_path = args.config_path or "config"
    # hydra/_internal/utils.py::compute_search_path_dir: absolute as is, else relative to the
    # folder of the file that declares @hydra.main (verl/trainer/main_ppo.py).
    config_dir = Path(
        os.path.normpath(config_path if os.path.isabs(config_path) else trainer_dir / config_path)
    )
    config_name = args.config_name or "ppo_trainer"
    out: dict[str, Any] = {
        "config_name": config_name,
        "config_path": None
        if config_dir == trainer_dir / "config"
        else str(config_dir).replace(str(ROOT), "$REPO"),
    }
    overrides = list(args.overrides)
    keys: list[str | None] = []
    reasons: list[str] = []
    cfg = None
    for _ in range(12):  # every bad override, each dropped in turn (the first fails Hydra)
        try:
            cfg = _compose(config_dir, config_name, overrides)
            break
        except Exception as exc:  # Hydra's and OmegaConf's errors alike: the script is invalid
            key, reason = _failing_key(exc)
            keys.append(key)
            reasons.append(reason)
            left = [o for o in overrides if key is None or _key(o) != key]
            if key is None or len(left) == len(overrides):
                break
            overrides = left
    if keys:
        return {**out, "valid": False, "key": keys[0], "keys": keys, "reason": reasons[0]}
    assert cfg is not None
    missing = OmegaConf.missing_keys(cfg)
    needed = ["actor_rollout_ref.rollout.name"]
    if OmegaConf.select(cfg, "reward.reward_model.enable"):
        needed.append("reward.reward_model.rollout.name")
    for key in needed:
        if key in missing:
            return {
                **out,
                "valid": False,
                "key": key,
                "keys": [key],
                "reason": f"mandatory value {key} is not set (???)",
            }
    return {**out, "valid": True, "key": None, "keys": [], "reason": "composes"}


def _key(override: str) -> str:
    return override.split("=", 1)[0].strip().lstrip("+~")


def _compose(config_dir: Path, config_name: str, overrides: list[str]) -> Any:
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    cwd = os.getcwd()
    try:
        # A custom config's `file://verl/trainer/config` search path is relative to the
        # working directory: a verl repository root is where the scripts run from.
        os.chdir(verl_dir().parent)
        with initialize_config_dir(config_dir=str(config_dir), version_base=None):
            cfg = compose(config_name, overrides=overrides)
        OmegaConf.resolve(cfg)  # main_ppo resolves the config before anything else
        return cfg
    finally:
        os.chdir(cwd)


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


# -- the corpus -------------------------------------------------------------------------------


def corpus_scripts(root: Path = ROOT) -> list[Path]:
    return sorted((root / "examples").rglob("*.sh"))


def derive(script: Path, root: Path = ROOT) -> dict[str, Any]:
    argv = script_argv(script, root)
    entry = {"script": str(script.relative_to(root))}
    if argv is None:
        return {
            **entry,
            "valid": False,
            "key": None,
            "reason": "runs no main_ppo command",
            "argv": None,
        }
    return {**entry, **classify(argv), "argv": argv}


def copy_corpus(checkout: Path, commit: str) -> None:
    """Copy every examples/**/*.sh that runs main_ppo, and the custom config folders they
    name, from a verl checkout at `commit`."""
    if (ROOT / "examples").exists():
        shutil.rmtree(ROOT / "examples")
    n = 0
    for src in sorted((checkout / "examples").rglob("*.sh")):
        text = src.read_text(encoding="utf-8", errors="replace")
        if ENTRY not in text:
            continue
        dst = ROOT / src.relative_to(checkout)
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst)
        n += 1
    for cfg in sorted((checkout / "examples").rglob("config")):
        if cfg.is_dir() and any(cfg.glob("*.yaml")):
            dst = ROOT / cfg.relative_to(checkout)
            if (dst.parent).exists():
                shutil.copytree(
                    cfg,
                    dst,
                    dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("*.py", "*.jsonl", "*.json"),
                )
    (ROOT / "SOURCE").write_text(f"volcengine/verl {commit}\n")
    print(f"copied {n} scripts")


def main(argv: list[str]) -> int:
    if argv[:1] == ["copy"] and len(argv) == 3:
        copy_corpus(Path(argv[1]), argv[2])
        return 0
    if argv[:1] == ["manifest"]:
        from importlib.metadata import version

        source = (ROOT / "SOURCE").read_text().split()
        entries = [derive(s) for s in corpus_scripts()]
        data = {
            "source_repo": source[0],
            "source_commit": source[1],
            "verl_version": version("verl"),
            "entry_point": ENTRY,
            "derived_by": "tests/derive_verl_examples.py manifest",
            "scripts": entries,
        }
        MANIFEST.write_text(json.dumps(data, indent=1) + "\n")
        valid = sum(e["valid"] for e in entries)
        print(f"{len(entries)} scripts: {valid} valid, {len(entries) - valid} invalid")
        return 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
