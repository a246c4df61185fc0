"""The rules and the import map over verl releases, without training and without installing
them: each release's wheel is downloaded once (`pip download --no-deps`, cached under
$VERL_TUI_TEST_CACHE or ~/.cache/verl-tui-tests/wheels), its verl/ folder unzipped once per
session, and selected the way the tool selects the head's verl (schema.use_source with a
VerlSource naming the host). The presets and this project's own launch scripts must compose
and pass the rules on each, and every refusal must be true for that release."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tui.jobs import schema
from tui.jobs.importer import import_script
from tui.jobs.preflight.imports import required_modules
from tui.jobs.profiles import load_profile
from tui.jobs.rules import check_rules
from tui.jobs.validate import check_profile
from tui.jobs.verl_facts import VerlFacts, current_facts, facts_for
from tui.jobs.verl_select import VerlSource

REPO = Path(__file__).resolve().parent.parent
VERSIONS = ("0.4.1", "0.5.0", "0.6.1", "0.7.1", "0.8.0", "0.9.1")
PRESETS = sorted((REPO / "profiles").glob("*.yaml"))
SCRIPTS = REPO / "tests/fixtures/launch_scripts"
PIP_DOWNLOAD = ("-m", "pip", "download", "-q", "--no-deps", "--disable-pip-version-check")
R = "actor_rollout_ref.rollout"
A = "actor_rollout_ref.actor"


def _cache() -> Path:
    base = os.environ.get("VERL_TUI_TEST_CACHE") or os.path.expanduser("~/.cache/verl-tui-tests")
    return Path(base) / "wheels"


def _wheel(version: str) -> Path:
    cache = _cache()
    found = sorted(cache.glob(f"verl-{version}-*.whl"))
    if found:
        return found[0]
    cache.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [sys.executable, *PIP_DOWNLOAD, f"verl=={version}", "-d", str(cache)],
        check=True,
        timeout=300,
    )
    return sorted(cache.glob(f"verl-{version}-*.whl"))[0]


@pytest.fixture(scope="session")
def verl_releases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """version → the unzipped verl/ package folder of that release."""
    out = {}
    top = tmp_path_factory.mktemp("verl-releases")
    for version in VERSIONS:
        with zipfile.ZipFile(_wheel(version)) as whl:
            members = [m for m in whl.namelist() if m.startswith("verl/")]
            whl.extractall(top / version, members)
        out[version] = top / version / "verl"
    return out


@pytest.fixture
def on_release(verl_releases: dict[str, Path]) -> Iterator:
    """select(version): that release is the head's verl (node1), as verl_source selects it."""

    def select(version: str | None, *, label: str | None = None) -> Path:
        root = verl_releases[version or "0.5.0"]
        schema.use_source(
            VerlSource(root=root, version=version, origin="node1", python="python", host="node1")
        )
        return root

    yield select
    schema.use_source(None)


def _base_keys(cfg: dict, prefix: str = "") -> set[str]:
    out = set()
    for k, v in cfg.items():
        key = f"{prefix}{k}"
        out.add(key)
        if isinstance(v, dict):
            out |= _base_keys(v, key + ".")
    return out


def _is_key(keys: set[str], dotted: str) -> bool:
    return dotted.lstrip("+~") in keys


def test_presets_and_scripts_pass_on_every_release(on_release) -> None:
    """Every preset and valid launch script on each release: no rule error at all, and a
    compose refusal only for a key that release's own config really lacks (checked against
    the release's composed defaults). No message points at another release or a reward.*
    section the release lacks."""
    scripts = [p for p in sorted(SCRIPTS.glob("*.sh")) if not p.name.startswith("invalid_")]
    profiles = [load_profile(p) for p in PRESETS]
    profiles += [
        import_script(p.read_text(), source=str(p), cwd=str(SCRIPTS)).profile for p in scripts
    ]
    clean: dict[str, list[str]] = {}
    # 0.9.1 is this venv's verl: test_profiles and test_verl_examples check these on it.
    for version in VERSIONS[:-1]:
        root = on_release(version)
        keys: set[str] = set()  # the release's own keys, composed when a refusal needs them
        for prof in profiles:
            report = check_profile(prof)
            for p in report.problems:
                where = f"{version} {prof.name}: {p}"
                assert f"verl {version} on node1" in p.message or "0.9" not in p.message, where
                if p.key and ".reward." not in f".{p.key}" and "reward." in p.message:
                    assert (root / "trainer/config/reward").is_dir(), where
                if p.level != "error":
                    continue
                keys = keys or _base_keys(schema.compose([]))
                # the only refusals: keys or config groups this release does not have
                group = re.match(r"no config '([\w/]+)' in verl's config groups", p.message)
                if group:
                    assert not (root / "trainer/config" / f"{group[1]}.yaml").exists(), where
                    continue
                assert "not a key in verl" in p.message or "renamed" in p.message, where
                assert p.key and not _is_key(keys, p.key), where
            if report.ok:
                clean.setdefault(version, []).append(prof.name)
    # every preset that uses only keys a release has is clean there: the GRPO presets on all
    assert all(len(clean.get(v, [])) >= 3 for v in VERSIONS[:-1]), clean


_COMPOSED: dict[str, dict] = {}  # version → the gsm8k preset composed (once per session)


def _composed(version: str, on_release) -> tuple[dict, VerlFacts]:
    on_release(version)
    if version not in _COMPOSED:
        prof = load_profile(REPO / "profiles/grpo-gsm8k-qwen2.5-0.5b.yaml")
        report = check_profile(prof, sets=["trainer.n_gpus_per_node=8", "trainer.nnodes=1"])
        assert report.config is not None and report.ok, report.problems
        _COMPOSED[version] = report.config
    return _COMPOSED[version], current_facts()


def _with(cfg: dict, key: str, value: object) -> dict:
    out = dict(cfg)
    head, _, rest = key.partition(".")
    out[head] = _with(out.get(head) or {}, rest, value) if rest else value
    return out


def _about(cfg: dict, key: str, facts: VerlFacts) -> list:
    return [p for p in check_rules(cfg, verl=facts) if p.key == key]


def test_version_bound_rules_follow_each_release(on_release) -> None:
    """sync rollout: refused only where that release's RolloutConfig raises (0.7+), with its
    own words and its name; the hf rollout only where the release has no hf branch (0.6+);
    warmup_style's advice only where the release has optim.lr_scheduler_type (0.6+)."""
    for version in VERSIONS:
        cfg, facts = _composed(version, on_release)
        label = f"verl {version} on node1"
        assert facts.where == label
        default_mode = cfg["actor_rollout_ref"]["rollout"].get("mode")
        sync = _about(_with(cfg, f"{R}.mode", "sync"), f"{R}.mode", facts)
        if version >= "0.7":
            assert [p.level for p in sync] == ["error"], (version, sync)
            assert label in sync[0].message and "'sync' has been removed" in sync[0].message
            assert default_mode == "async"
        else:
            assert sync == [], (version, sync)  # 0.4–0.6: sync is the release's own default
            assert default_mode == "sync"
        hf = _about(_with(cfg, f"{R}.name", "hf"), f"{R}.name", facts)
        if version >= "0.6":
            assert [p.level for p in hf] == ["error"] and label in hf[0].message, (version, hf)
        else:
            assert hf == [], (version, hf)
        warm = _about(
            _with(cfg, f"{A}.optim.warmup_style", "cosine"), f"{A}.optim.warmup_style", facts
        )
        has_sched = "lr_scheduler_type" in cfg["actor_rollout_ref"]["actor"]["optim"]
        assert has_sched == (version >= "0.6"), version
        if has_sched:
            assert [p.level for p in warm] == ["warn"] and label in warm[0].message
        else:
            assert warm == [], (version, warm)


def test_legacy_reward_advice_names_what_the_release_does(on_release) -> None:
    """A top-level custom_reward_function: on 0.7–0.8 main_ppo migrates it, 0.9 ignores it,
    0.4–0.6 have no reward section (it is the key itself: nothing to say)."""
    said = {}
    for version in VERSIONS:
        cfg, facts = _composed(version, on_release)
        cfg = _with(cfg, "custom_reward_function", {"path": "/r.py", "name": "score"})
        found = _about(cfg, "custom_reward_function", facts)
        said[version] = found[0].message if found else None
    assert said["0.4.1"] is None and said["0.5.0"] is None and said["0.6.1"] is None
    assert "verl 0.7.1 on node1 moves it to reward.custom_reward_function" in said["0.7.1"]
    assert "verl 0.8.0 on node1 moves it" in said["0.8.0"]
    assert "main_ppo in verl 0.9.1 on node1 ignores it" in said["0.9.1"]


def test_a_release_of_unknown_version_only_warns(on_release, verl_releases) -> None:
    cfg, _ = _composed("0.9.1", on_release)
    facts = facts_for(verl_releases["0.9.1"], None, "verl (unknown version) on node1")
    sync = _about(_with(cfg, f"{R}.mode", "sync"), f"{R}.mode", facts)
    assert [p.level for p in sync] == ["warn"], sync


def test_import_map_on_every_release(on_release) -> None:
    """The engine, the attention kernel and the TaskRunner's path are read on every release,
    with no 'not checked' note; 0.4–0.5 load the actor with flash_attention_2 written in the
    worker, so asking for sdpa does not free them from flash-attn (0.6+ it does)."""
    for version in VERSIONS:
        cfg, _ = _composed(version, on_release)
        root = schema.current_source().root
        mods, notes = required_modules(cfg, root)
        names = {m.module for m in mods}
        assert notes == [], (version, notes)
        assert {"vllm", "flash_attn", "datasets", "torch"} <= names, (version, names)
        sdpa = _with(cfg, "actor_rollout_ref.model.override_config.attn_implementation", "sdpa")
        still = "flash_attn" in {m.module for m in required_modules(sdpa, root)[0]}
        assert still == (version < "0.6"), version
        sglang = {m.module for m in required_modules(_with(cfg, f"{R}.name", "sglang"), root)[0]}
        assert "sglang" in sglang and "vllm" not in sglang, (version, sglang)
