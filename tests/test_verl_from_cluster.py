"""verl's config read from the cluster (issue 11): the login node needs neither verl nor torch.

Real parts: a namespace sshd host (tests/harness) whose `python:` is this venv's interpreter
(verl 0.9.1), and a cockpit-side Python WITHOUT verl or torch — this venv's interpreter run
isolated (`-I -S`) on a real site-packages folder holding every package of the venv except
verl and torch (hydra-core and omegaconf stay: they are verl-tui's own dependencies). The real
CLI runs in it: `profile check` and `submit --dry-run` compose from the host's verl over SSH,
a second run uses the cache (nothing read over SSH), and a version change on the host is read
again. No mocks: a "changed" verl is a real package folder on the host's PYTHONPATH.
"""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import time
from pathlib import Path

import pytest

PRESET = "grpo-gsm8k-qwen2.5-0.5b"  # by name: found among the shipped presets
REAL_VERL = Path(site.getsitepackages()[0]) / "verl"


def _site_without(dst: Path, names: tuple[str, ...]) -> Path:
    src = Path(site.getsitepackages()[0])
    dst.mkdir(parents=True)
    for entry in src.iterdir():
        stem = entry.name.split("-")[0].split(".")[0].lower()
        if stem not in names:
            (dst / entry.name).symlink_to(entry)
    return dst


@pytest.fixture(scope="module")
def env(ns_hosts, tmp_path_factory) -> dict:
    """One namespace host, the no-verl cockpit site, a private cache and config dir."""
    root = tmp_path_factory.mktemp("vfc")
    cluster = ns_hosts(1, root / "hosts")
    try:
        site_dir = _site_without(root / "site", ("verl", "torch"))
        run_env = {
            **os.environ,
            "XDG_CACHE_HOME": str(root / "cache"),
            "XDG_CONFIG_HOME": str(root / "config"),
            "XDG_STATE_HOME": str(root / "state"),
        }
        yield {
            "cluster": cluster,
            "root": root,
            "site": site_dir,
            "env": run_env,
            "cache": root / "cache" / "verl-tui" / "verl",
        }
    finally:
        cluster.stop()


def _hosts(env: dict, name: str, python: str) -> Path:
    return env["cluster"].write_hosts_yaml(env["root"] / f"{name}.yaml", python=python)


def _cli(env: dict, *args: str, isolated: bool = True) -> subprocess.CompletedProcess:
    if isolated:  # the login node without verl/torch
        code = (
            f"import site, sys; site.addsitedir({str(env['site'])!r}); "
            "from tui.cli import main; sys.exit(main())"
        )
        argv = [sys.executable, "-I", "-S", "-c", code, *args]
    else:  # a cockpit that has verl itself (the fallback)
        argv = [sys.executable, "-m", "tui", *args]
    return subprocess.run(
        argv, capture_output=True, text=True, timeout=180, env=env["env"], cwd=env["root"]
    )


def _check_json(
    env: dict, hosts: Path, *sets: str, isolated: bool = True
) -> tuple[subprocess.CompletedProcess, dict, float]:
    extra = [w for s in sets for w in ("--set", s)]
    t = time.perf_counter()
    proc = _cli(
        env, "profile", "check", PRESET, "--hosts", str(hosts), "--json", *extra, isolated=isolated
    )
    took = time.perf_counter() - t
    assert proc.stdout.strip(), proc.stderr
    return proc, json.loads(proc.stdout), took


def _snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(folder)): (p.stat().st_ino, p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
    }


def _errors(doc: dict) -> list[dict]:
    return [p for p in doc["problems"] if p["level"] == "error"]


def test_the_cockpit_python_has_hydra_but_no_verl_or_torch(env) -> None:
    code = (
        f"import site, importlib.util as u; site.addsitedir({str(env['site'])!r}); "
        "print([u.find_spec(m) is not None for m in ('verl', 'torch', 'hydra', "
        "'omegaconf', 'tui')])"
    )
    out = subprocess.run(
        [sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, timeout=60
    )
    assert out.stdout.strip() == "[False, False, True, True, True]", out.stderr


def test_check_and_dry_run_compose_from_the_hosts_verl_then_from_the_cache(env) -> None:
    hosts = _hosts(env, "hosts", sys.executable)
    first, doc, t_first = _check_json(env, hosts, "data.train_batch_sise=3")
    # Composed for real: verl's own key names answer the typo.
    assert first.returncode == 1, first.stderr
    assert _errors(doc) == [
        {
            "key": "data.train_batch_sise",
            "level": "error",
            "message": "not a key in verl's config (did you mean data.train_batch_size?)",
        }
    ]
    assert doc["verl"]["version"] == "0.9.1" and doc["verl"]["from"] == "node1"
    assert doc["verl"]["python"] == sys.executable and doc["verl"]["note"] is None
    assert doc["verl"]["cached"] is False and doc["verl"]["files_read"] > 40
    folders = [p for p in env["cache"].iterdir() if not p.name.startswith(".")]
    assert [p.name.split("-")[0] for p in folders] == ["0.9.1"]
    before = _snapshot(folders[0])
    assert "verl/trainer/config/ppo_trainer.yaml" in before

    again, doc2, t_again = _check_json(env, hosts)
    assert again.returncode == 0, again.stdout + again.stderr
    assert doc2["ok"] is True and not _errors(doc2)
    assert doc2["verl"]["cached"] is True and doc2["verl"]["files_read"] == 0
    assert _snapshot(folders[0]) == before  # nothing rewritten, nothing read into it
    print(f"\nprofile check over SSH: first (files read) {t_first:.2f} s, cached {t_again:.2f} s")

    text = _cli(env, "profile", "check", PRESET, "--hosts", str(hosts))
    assert text.returncode == 0, text.stdout + text.stderr
    assert text.stdout.rstrip().endswith("— verl 0.9.1 from node1"), text.stdout

    dry = _cli(
        env,
        "submit",
        str(hosts),
        PRESET,
        "--dry-run",
        "--skip-preflight",  # the host lacks TransferQueue: test_preflight.py's subject
        "--set",
        "trainer.experiment_name=from-cluster-verl",
    )
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert "verl.trainer.main_ppo" in dry.stdout and "from-cluster-verl" in dry.stdout
    assert "Traceback" not in dry.stderr
    bad = _cli(env, "submit", str(hosts), PRESET, "--dry-run", "--set", "trainer.nnodez=2")
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "trainer.nnodez" in bad.stderr and "not a key in verl's config" in bad.stderr
    assert _snapshot(folders[0]) == before


def _fake_verl(root: Path, version: str, marker: str) -> None:
    """A real verl package folder as a host would have it, another version: verl's config
    files (copied) with one extra top-level key, `marker`, so the test can tell whose config
    composed."""
    pkg = root / "verl"
    shutil.rmtree(root, ignore_errors=True)
    shutil.copytree(
        REAL_VERL / "trainer" / "config",
        pkg / "trainer" / "config",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    for rel in ("workers/config", "utils/qat"):
        shutil.copytree(REAL_VERL / rel, pkg / rel, ignore=shutil.ignore_patterns("__pycache__"))
    (pkg / "utils" / "profiler").mkdir()
    shutil.copy(
        REAL_VERL / "utils" / "profiler" / "config.py", pkg / "utils" / "profiler" / "config.py"
    )
    (pkg / "__init__.py").write_text("")  # a regular package: it shadows the venv's verl
    (pkg / "version").mkdir()
    (pkg / "version" / "version").write_text(version + "\n")
    yaml = pkg / "trainer" / "config" / "ppo_trainer.yaml"
    yaml.write_text(yaml.read_text() + f"\n{marker}: 1\n")


def test_a_version_change_on_the_host_is_read_again(env) -> None:
    hostsite = env["root"] / "hostsite"
    wrapper = env["root"] / "host-python"
    wrapper.write_text(f'#!/bin/sh\nPYTHONPATH={hostsite} exec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    hosts = _hosts(env, "hosts-changing", str(wrapper))

    _fake_verl(hostsite, "0.9.1.post7", "vt_marker_a")
    one, doc, _ = _check_json(env, hosts, "vt_marker_a=5")  # a key only the host's verl has
    assert doc["verl"]["version"] == "0.9.1.post7" and doc["verl"]["files_read"] > 40, doc
    assert one.returncode == 0 and doc["ok"], one.stdout
    two, doc, _ = _check_json(env, hosts, "vt_marker_a=6")
    assert two.returncode == 0 and doc["verl"]["cached"] is True, doc

    _fake_verl(hostsite, "0.9.2", "vt_marker_b")  # the host upgraded verl
    three, doc, _ = _check_json(env, hosts, "vt_marker_a=6")
    assert doc["verl"]["version"] == "0.9.2" and doc["verl"]["cached"] is False
    assert doc["verl"]["files_read"] > 40
    assert three.returncode == 1
    assert _errors(doc) == [
        {
            "key": "vt_marker_a",
            "level": "error",
            "message": "not a key in verl's config (did you mean vt_marker_b?)",
        }
    ]
    versions = sorted(
        p.name.split("-")[0] for p in env["cache"].iterdir() if not p.name.startswith(".")
    )
    assert "0.9.1.post7" in versions and "0.9.2" in versions


def _bare_python(env: dict) -> Path:
    """The venv's interpreter without its site-packages: a real Python that has no verl."""
    bare = env["root"] / "bare-python"
    bare.write_text(f'#!/bin/sh\nexec {sys.executable} -I -S "$@"\n')
    bare.chmod(0o755)
    return bare


def test_no_verl_anywhere_names_the_host_asked_and_this_python(env) -> None:
    bare = _bare_python(env)
    hosts = _hosts(env, "hosts-bare", str(bare))
    for args in (
        ["profile", "check", PRESET, "--hosts", str(hosts)],
        ["submit", str(hosts), PRESET, "--dry-run"],
    ):
        proc = _cli(env, *args)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
        assert (
            f"verl is not installed on the cluster (asked node1 ({bare}): verl is not "
            f"installed there) nor in this Python ({sys.executable})"
        ) in lines[0], lines[0]


def test_a_local_verl_is_the_fallback_with_a_warning(env) -> None:
    hosts = _hosts(env, "hosts-bare", str(_bare_python(env)))
    proc, doc, _ = _check_json(env, hosts, isolated=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert doc["verl"]["from"] == "this Python" and doc["verl"]["version"] == "0.9.1"
    warn = [
        p
        for p in doc["problems"]
        if p["level"] == "warn"
        and p["key"] is None
        and "the cluster's verl was not read (node1 (" in p["message"]
    ]
    assert warn and "verl is not installed there" in warn[0]["message"], doc["problems"]


def test_config_name_and_path_compose_from_the_hosts_verl(env) -> None:
    """A profile's config_name (one of verl's own configs) and config_path (a local folder of
    custom configs whose defaults pull verl's ppo_trainer) compose from the cached copy of the
    host's verl; `pkg://verl.trainer.config` in the custom search path is that copy too (this
    Python has no verl to import)."""
    hosts = _hosts(env, "hosts", sys.executable)
    custom = env["root"] / "my_configs"
    custom.mkdir(exist_ok=True)
    (custom / "my_trainer.yaml").write_text(
        "hydra:\n  searchpath:\n    - pkg://verl.trainer.config\n"
        "defaults:\n  - ppo_trainer\n  - _self_\n"
        "my_block:\n  knob: 3\n"
    )
    preset = (Path(__file__).resolve().parents[1] / "profiles" / f"{PRESET}.yaml").read_text()
    own = env["root"] / "own.yaml"  # verl's megatron config: the preset's FSDP keys differ
    own.write_text(
        preset.replace(f"name: {PRESET}\n", "name: own\nconfig_name: ppo_megatron_trainer\n", 1)
    )
    proc = _cli(env, "profile", "check", str(own), "--hosts", str(hosts), "--json")
    doc = json.loads(proc.stdout)
    assert doc["verl"]["from"] == "node1" and proc.returncode == 1, doc
    assert {p["key"]: p["message"] for p in _errors(doc)}[
        "actor_rollout_ref.actor.fsdp_config.param_offload"
    ] == (
        "not a key in verl's config (did you mean actor_rollout_ref.actor.megatron.param_offload?)"
    ), doc["problems"]

    path = env["root"] / "custom.yaml"
    path.write_text(
        preset.replace(
            f"name: {PRESET}\n",
            f"name: custom\nconfig_name: my_trainer\nconfig_path: {custom}\n",
            1,
        )
    )
    proc = _cli(
        env,
        "profile",
        "check",
        str(path),
        "--hosts",
        str(hosts),
        "--json",
        "--set",
        "my_block.knob=4",
    )
    doc = json.loads(proc.stdout)
    assert proc.returncode == 0 and doc["ok"] and doc["verl"]["from"] == "node1", proc.stdout
    # The custom config's own key and verl's keys through it: a typo is answered from both.
    bad = _cli(
        env,
        "profile",
        "check",
        str(path),
        "--hosts",
        str(hosts),
        "--json",
        "--set",
        "data.train_batch_siz=3",
        "--set",
        "my_block.knop=4",
    )
    assert bad.returncode == 1
    assert _errors(json.loads(bad.stdout)) == [
        {
            "key": "data.train_batch_siz",
            "level": "error",
            "message": "not a key in verl's config (did you mean data.train_batch_size?)",
        },
        {
            "key": "my_block.knop",
            "level": "error",
            "message": "not a key in verl's config (did you mean my_block.knob?)",
        },
    ], bad.stdout


# -- a hostile head: its answer is checked at the boundary ---------------------------------------


def _tar_b64(members: list[tuple[str, bytes, str]]) -> str:
    import base64
    import io
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data, kind in members:
            info = tarfile.TarInfo(name)
            if kind == "symlink":
                info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
            else:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if kind == "file" else None)
    return base64.b64encode(buf.getvalue()).decode()


_YAML = b"trainer:\n  nnodes: 1\n"
_OK_FILES = [["trainer/config/ppo_trainer.yaml", len(_YAML), 1]]
FORGED = {
    "dotdot-path": (
        {
            "version": "9.9",
            "root": "/x",
            "python": "p",
            "files": [*_OK_FILES, ["trainer/../../escape.yaml", 3, 1]],
        },
        None,
        "unsafe path in verl's file list",
    ),
    "absolute-path": (
        {
            "version": "9.9",
            "root": "/x",
            "python": "p",
            "files": [*_OK_FILES, ["/etc/escape.yaml", 3, 1]],
        },
        None,
        "unsafe path in verl's file list",
    ),
    "bad-version": (
        {"version": "../../x", "root": "/x", "python": "p", "files": _OK_FILES},
        None,
        "verl reports no usable version",
    ),
    "symlink-in-tar": (
        {"version": "9.9", "root": "/x", "python": "p", "files": _OK_FILES},
        [("trainer/config/ppo_trainer.yaml", b"", "symlink")],
        "unexpected entry in the file archive",
    ),
    "extra-member": (
        {"version": "9.9", "root": "/x", "python": "p", "files": _OK_FILES},
        [("trainer/config/ppo_trainer.yaml", _YAML, "file"), ("../escape.yaml", b"x", "file")],
        "unexpected entry in the file archive",
    ),
    "size-mismatch": (
        {"version": "9.9", "root": "/x", "python": "p", "files": _OK_FILES},
        [("trainer/config/ppo_trainer.yaml", _YAML + b"more", "file")],
        "changed while it was read",
    ),
    "not-json": ("\x1b]0;pwned\x07 garbage", None, "exit status 0, no answer"),
}


# The forged cases' `profile check` runs, all in ONE cockpit interpreter without verl (each a
# main() call of its own, its own hosts file, forged interpreter and cache folder): a fresh
# isolated interpreter per case costs ~1 s of CPU before the CLI does anything.
_FORGED_RUNS = """
import contextlib, io, json, os, site, sys
site.addsitedir(sys.argv[1])
from tui.cli import main
out = {}
for case, cache, argv in json.loads(sys.argv[2]):
    os.environ["XDG_CACHE_HOME"] = cache
    err, std = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(std):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code
    out[case] = {"code": code, "stderr": err.getvalue(), "stdout": std.getvalue()}
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def forged(env) -> dict[str, dict]:
    """Each FORGED case: its forged interpreter, cache folder and the CLI's answer."""
    cases, runs = {}, []
    for case, (manifest, members, _fragment) in sorted(FORGED.items()):
        folder = env["root"] / f"forged-{case}"
        folder.mkdir()
        answers = {"manifest": manifest if isinstance(manifest, str) else json.dumps(manifest)}
        if members is not None:
            answers["files"] = json.dumps({**manifest, "tar_b64": _tar_b64(members)})
        else:
            answers["files"] = answers["manifest"]
        (folder / "answers.json").write_text(json.dumps(answers))
        python = folder / "python"  # answers like verl_config.py would, with forged content
        python.write_text(
            f"#!{sys.executable}\nimport json, sys\n"
            f"a = json.load(open({str(folder / 'answers.json')!r}))\n"
            "print(a['files'] if 'files' in sys.argv else a['manifest'])\n"
        )
        python.chmod(0o755)
        hosts = _hosts(env, f"hosts-{case}", str(python))
        cache = env["root"] / f"cache-{case}"
        cases[case] = {"python": python, "cache": cache}
        runs.append([case, str(cache), ["profile", "check", PRESET, "--hosts", str(hosts)]])
    proc = subprocess.run(
        [sys.executable, "-I", "-S", "-c", _FORGED_RUNS, str(env["site"]), json.dumps(runs)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env["env"],
        cwd=env["root"],
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    answers = json.loads(proc.stdout.strip().splitlines()[-1])
    for case in cases:
        cases[case].update(answers[case])
    return cases


@pytest.mark.parametrize("case", sorted(FORGED))
def test_a_forged_answer_is_refused_in_one_line(env, forged, case) -> None:
    _manifest, _members, fragment = FORGED[case]
    run = forged[case]
    forged_python, cache = run["python"], run["cache"]
    assert run["code"] == 2, run["stdout"] + run["stderr"]
    lines = run["stderr"].strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in run["stderr"], run["stderr"]
    assert f"verl is not installed on the cluster (asked node1 ({forged_python}): " in lines[0]
    assert fragment in lines[0], lines[0]
    assert "\x1b" not in run["stderr"]
    assert not (env["root"] / "escape.yaml").exists()
    stored = cache / "verl-tui" / "verl"
    assert not stored.exists() or not [p for p in stored.iterdir()], list(stored.iterdir())
