"""Profiles: YAML with file:line errors, Hydra override quoting, the presets, check_profile and
`verl-tui profile check`, all against the installed verl 0.9.1 (no mocks)."""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

import pytest

from tui.commands.profile import run_profile_check
from tui.config.hosts import parse_inventory
from tui.config.yamlfile import ConfigError
from tui.jobs import schema
from tui.jobs.profiles import (
    Profile,
    check_set,
    hydra_value,
    list_profiles,
    load_profile,
    parse_profile,
    save_profile,
    to_hydra_overrides,
)
from tui.jobs.rules import ClusterResources, NodeResources
from tui.jobs.validate import check_profile

REPO = Path(__file__).resolve().parent.parent
PRESETS = REPO / "profiles"
# name → (nodes, GPUs per node) of the cluster each preset is written for
SHAPES = {
    "grpo-gsm8k-qwen2.5-0.5b": (1, 8),
    "grpo-qwen3-32b-2x8": (2, 8),
    "ppo-7b-critic-2x8": (2, 8),
    "grpo-mi300": (1, 8),
}


def cluster(nodes: int, gpus: int, cpus: int = 128) -> ClusterResources:
    return ClusterResources([NodeResources(f"node{i}", gpus, cpus) for i in range(nodes)])


# -- presets -------------------------------------------------------------------------------


def test_every_preset_is_listed() -> None:
    entries = list_profiles([PRESETS])
    assert sorted(e.name for e in entries) == sorted(SHAPES)
    assert all(e.profile is not None and e.error is None for e in entries)


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_preset_composes_and_passes_its_own_rules(name: str) -> None:
    prof = load_profile(PRESETS / f"{name}.yaml")
    assert prof.name == name and prof.description
    nodes, gpus = SHAPES[name]
    report = check_profile(prof, cluster=cluster(nodes, gpus))
    assert report.problems == [] and report.ok
    cfg = report.config
    assert cfg["trainer"]["nnodes"] == nodes and cfg["trainer"]["n_gpus_per_node"] == gpus
    assert cfg["trainer"]["default_local_dir"].startswith("/")
    assert "/" in cfg["actor_rollout_ref"]["model"]["path"]  # a Hugging Face id
    # ${oc.env:HOME} (where verl's gsm8k.py writes), resolved here with this process's HOME
    assert cfg["data"]["train_files"] == os.environ["HOME"] + "/data/gsm8k/train.parquet"
    # too small a cluster is caught: too few CPUs for verl's {CPU: 3, GPU: 1} bundles
    small = check_profile(prof, cluster=cluster(nodes, gpus, cpus=2 * gpus))
    assert [p.key for p in small.errors] == ["trainer.n_gpus_per_node"]


def test_presets_say_what_they_promise() -> None:
    q = check_profile(load_profile(PRESETS / "grpo-qwen3-32b-2x8.yaml")).config
    ar = q["actor_rollout_ref"]
    assert ar["model"]["path"] == "Qwen/Qwen3-32B" and ar["actor"]["use_kl_loss"] is True
    assert ar["model"]["use_remove_padding"] is True and ar["rollout"]["name"] == "vllm"
    assert ar["rollout"]["tensor_model_parallel_size"] == 4 and ar["rollout"]["n"] == 8
    assert q["algorithm"]["adv_estimator"] == "grpo"
    p = check_profile(load_profile(PRESETS / "ppo-7b-critic-2x8.yaml")).config
    assert p["algorithm"]["adv_estimator"] == "gae" and p["critic"]["enable"] is True
    assert "7B" in p["actor_rollout_ref"]["model"]["path"]
    mi = load_profile(PRESETS / "grpo-mi300.yaml")
    assert mi.runtime_env.env_vars["RAY_EXPERIMENTAL_NOSET_HIP_VISIBLE_DEVICES"] == "1"
    assert "ROCR_VISIBLE_DEVICES" not in mi.runtime_env.env_vars


def test_one_node_preset_takes_gpus_per_node_from_the_cluster() -> None:
    prof = load_profile(PRESETS / "grpo-gsm8k-qwen2.5-0.5b.yaml")
    report = check_profile(prof, cluster=cluster(3, 4))
    assert report.from_cluster == {"trainer.n_gpus_per_node": 4}  # nnodes is pinned to 1
    assert report.config["trainer"]["nnodes"] == 1
    assert report.config["trainer"]["n_gpus_per_node"] == 4
    pinned = check_profile(prof, sets=["trainer.n_gpus_per_node=2"], cluster=cluster(3, 4))
    assert pinned.from_cluster == {} and pinned.config["trainer"]["n_gpus_per_node"] == 2


# -- Hydra override syntax -----------------------------------------------------------------


def test_values_become_typed_overrides() -> None:
    values = {
        "a.none": None,
        "a.t": True,
        "a.f": False,
        "a.i": -3,
        "a.x": 1e-6,
        "a.s": "vllm",
        "a.l": ["console", 2, None],
        "a.d": {"k": "v", "n": 1},
        "~a.gone": None,
    }
    assert to_hydra_overrides(values) == [
        "a.none=null",
        "a.t=true",
        "a.f=false",
        "a.i=-3",
        "a.x=1e-06",
        "a.s='vllm'",
        "a.l=['console',2,null]",
        "a.d={k:'v',n:1}",
        "~a.gone",
    ]


@pytest.mark.parametrize("bad", ["a b", "a=b", "a;b", "$(x)", "", "a..b", ".a", "a'b"])
def test_keys_cannot_smuggle_anything(bad: str) -> None:
    with pytest.raises(ValueError):
        to_hydra_overrides({bad: 1})


def _hostile(marker: Path) -> list[str]:
    return [
        f"$(touch {marker})",
        f"`touch {marker}`",
        f"a; touch {marker}",
        f"x && touch {marker}",
        "it's",
        'say "hi"',
        "'quoted'",
        "line1\nline2",
        "k=v",
        "a=b=c",
        "a,b",
        "[x, y]",
        "{a: 1}",
        "\\",
        "trailing\\",
        "\\'",
        "\\\\'",
        "${oc.decode:x}",
        "x${oc.env:HOME",
        "${oc.env:HOME,'}",
        "\\${x}",
        "$${x}",
        "${",
        "}",
        "",
        " spaced ",
        "#hash",
        "%",
        "@pkg",
        "tab\tx",
        "unicode ✓",
        "null",
        "true",
        "1e-6",
        "~",
        "-",
        "a\\b",
        "\r\n",
    ]


def test_hostile_values_compose_as_literal_strings(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    for value in _hostile(marker):
        ov = to_hydra_overrides(
            {"trainer.experiment_name": value, "trainer.logger": [value, "console"]}
        )
        cfg = schema.compose(ov)
        assert cfg["trainer"]["experiment_name"] == value, ov
        assert cfg["trainer"]["logger"] == [value, "console"], ov
        # an interpolation of it stays literal as well
        assert cfg["trainer"]["default_local_dir"] == f"checkpoints/verl_examples/{value}"
    assert not marker.exists()


def test_hostile_values_round_trip_through_a_profile_file(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    values = _hostile(marker)
    prof = Profile(name="hostile", overrides={f"+trainer.h{i}": v for i, v in enumerate(values)})
    path = save_profile(prof, tmp_path / "hostile.yaml")
    again = load_profile(path)
    assert again == prof
    cfg = schema.compose(to_hydra_overrides(again.overrides))
    assert [cfg["trainer"][f"h{i}"] for i in range(len(values))] == values
    assert not marker.exists()


def test_hydra_value_rejects_what_it_cannot_write() -> None:
    with pytest.raises(ValueError):
        hydra_value({"bad key": 1})
    with pytest.raises(ValueError):
        hydra_value(object())


# -- files ---------------------------------------------------------------------------------

GOOD = """\
name: demo
description: a demo
overrides:
  data.train_batch_size: 64
  actor_rollout_ref.actor.optim.lr: 1e-6
  actor_rollout_ref.rollout.name: vllm
runtime_env:
  env_vars:
    NCCL_DEBUG: WARN
    RETRIES: 3
  working_dir: ~/proj
  excludes: [.git]
"""


def test_parse_profile_types() -> None:
    prof = parse_profile(GOOD)
    assert prof.overrides["actor_rollout_ref.actor.optim.lr"] == 1e-6  # YAML 1.1 reads a str
    assert prof.runtime_env.env_vars == {"NCCL_DEBUG": "WARN", "RETRIES": "3"}
    assert prof.runtime_env.excludes == [".git"] and prof.python is None


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        (
            GOOD.replace("  data.train_batch_size: 64", "  data train: 64"),
            4,
            "not a dotted verl key",
        ),
        (GOOD.replace("description: a demo", "descripton: a demo"), 2, "unknown key"),
        (GOOD.replace("    RETRIES: 3", "    BAD-NAME: 3"), 10, "environment variable name"),
        (
            GOOD.replace("  data.train_batch_size: 64", "  data.train_batch_size: @x"),
            4,
            "invalid YAML",
        ),
        (
            GOOD.replace("  data.train_batch_size: 64", "  data.train_batch_size: 2024-01-01"),
            4,
            "date values are not supported",
        ),
        ("- just\n- a list\n", 1, "expected a mapping"),
        (GOOD.replace("name: demo", "name: 'bad name'"), 1, "names use letters"),
    ],
)
def test_bad_profiles_name_file_and_line(tmp_path: Path, text: str, line: int, words: str) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_profile(path)
    msg = str(err.value)
    assert msg.startswith(f"{path}:{line}: ") and words in msg and "\n" not in msg


def test_name_defaults_to_the_file_stem(tmp_path: Path) -> None:
    path = tmp_path / "my-run.yaml"
    path.write_text("overrides: {trainer.nnodes: 2}\n")
    assert load_profile(path).name == "my-run"


def test_save_is_atomic_and_round_trips(tmp_path: Path) -> None:
    prof = parse_profile(GOOD)
    target = tmp_path / "sub" / "demo.yaml"
    save_profile(prof, target)
    save_profile(prof.model_copy(update={"description": "second"}), target)  # replace
    assert load_profile(target).description == "second"
    assert load_profile(target).overrides == prof.overrides
    assert sorted(p.name for p in target.parent.iterdir()) == ["demo.yaml"]  # no temp left


def test_list_profiles_shows_broken_files(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(GOOD)
    (tmp_path / "b.yml").write_text("overrides: [1\n")
    (tmp_path / "notes.md").write_text("# not a profile")
    entries = list_profiles([tmp_path, tmp_path / "missing"])
    assert [(e.name, e.profile is not None) for e in entries] == [("b", False), ("demo", True)]
    assert entries[0].error and "b.yml:1" in entries[0].error


@pytest.mark.parametrize(
    ("line", "ok"),
    [
        ("trainer.nnodes=2", True),
        ("trainer.logger=[console,wandb]", True),
        ("+actor_rollout_ref.rollout.engine_kwargs.vllm.x='a b'", True),
        ("~trainer.val_only", True),
        ("trainer.nnodes", False),
        ("trainer.logger=[console", False),
        ("bad key=1", False),
        ("=1", False),
    ],
)
def test_check_set(line: str, ok: bool) -> None:
    if ok:
        assert check_set(line) == line
    else:
        with pytest.raises(ConfigError) as err:
            check_set(line)
        assert str(err.value).startswith("--set ") and "\n" not in str(err.value)


# -- check_profile -------------------------------------------------------------------------


def test_check_reports_every_bad_key_and_the_rename() -> None:
    prof = parse_profile(
        GOOD.replace(
            "  data.train_batch_size: 64",
            "  data.train_batch_sise: 64\n  critic.model.fsdp_config.param_offload: true",
        )
    )
    report = check_profile(prof)
    assert not report.ok
    by_key = {p.key: p.message for p in report.problems}
    assert "did you mean data.train_batch_size?" in by_key["data.train_batch_sise"]
    assert "use critic.fsdp.param_offload" in by_key["critic.model.fsdp_config.param_offload"]
    assert report.config is not None  # composed without them, so the rules still ran
    assert report.to_json()["ok"] is False


def test_revalidation_is_cached_and_fast() -> None:
    prof = load_profile(PRESETS / "grpo-qwen3-32b-2x8.yaml")
    cl = cluster(2, 8)
    check_profile(prof, cluster=cl)
    hits = schema._base_cfg.cache_info()
    times = []
    for i in range(5):
        t = time.perf_counter()
        r = check_profile(prof, sets=[f"data.train_batch_size={256 + 16 * (i + 1)}"], cluster=cl)
        times.append(time.perf_counter() - t)
        assert r.config["data"]["train_batch_size"] == 256 + 16 * (i + 1)
    after = schema._base_cfg.cache_info()
    assert after.misses == hits.misses and after.hits >= hits.hits + 5  # base composed once
    print(
        f"\nre-validate (compose + rules): best {min(times) * 1000:.0f} ms, "
        f"mean {sum(times) / len(times) * 1000:.0f} ms"
    )


# -- verl-tui profile check ----------------------------------------------------------------


def test_cli_check_ok_and_problems(capsys: pytest.CaptureFixture[str]) -> None:
    preset = PRESETS / "grpo-mi300.yaml"
    assert run_profile_check(preset, hosts=None, sets=[], as_json=False) == 0
    assert "0 errors, 0 warnings" in capsys.readouterr().out
    code = run_profile_check(
        preset,
        hosts=None,
        sets=["actor_rollout_ref.rollout.name=hf", "data.val_batch_size=8"],
        as_json=False,
    )
    out = capsys.readouterr().out.splitlines()
    assert code == 1
    assert (
        "actor_rollout_ref.rollout.name: 'hf' is not a rollout of verl 0.9.1 in this Python "
        "(verl/workers/rollout/base.py _ROLLOUT_REGISTRY): use vllm or sglang or trtllm" in out
    )
    assert (
        "data.val_batch_size: warning: deprecated and ignored: validation goes to the "
        "engine as one batch" in out
    )


def test_cli_check_json(capsys: pytest.CaptureFixture[str]) -> None:
    code = run_profile_check(
        PRESETS / "grpo-mi300.yaml", hosts=None, sets=["data.train_batch_sise=3"], as_json=True
    )
    data = json.loads(capsys.readouterr().out)
    assert code == 1 and data["ok"] is False
    assert data["problems"] == [
        {
            "key": "data.train_batch_sise",
            "level": "error",
            "message": "not a key in verl's config (did you mean data.train_batch_size?)",
        }
    ]


def test_cli_bad_input_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("overrides:\n  trainer.nnodes: 1\n  trainer.nnodes: 2\n")
    assert run_profile_check(bad, hosts=None, sets=[], as_json=False) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"verl-tui profile check: {bad}:3: duplicate key 'trainer.nnodes'"
    assert (
        run_profile_check(
            PRESETS / "grpo-mi300.yaml", hosts=None, sets=["trainer.nnodes=[1"], as_json=False
        )
        == 2
    )
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_cli_without_ray_checks_without_cluster_rules(capsys: pytest.CaptureFixture[str]) -> None:
    inv = parse_inventory(
        f"cluster: t\nray: {{dashboard_port: {_free_port()}}}\n"
        "hosts:\n  - name: here\n    transport: local\n"
    )
    code = run_profile_check(PRESETS / "grpo-mi300.yaml", hosts=inv, sets=[], as_json=True)
    data = json.loads(capsys.readouterr().out)
    assert code == 0 and data["ok"] is True
    assert [p["level"] for p in data["problems"]] == ["warn"]
    assert "Ray is not reachable on the head (here)" in data["problems"][0]["message"]
    assert run_profile_check(PRESETS / "grpo-mi300.yaml", hosts=inv, sets=[], as_json=False) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "checked without the cluster rules" in err[0]


def test_backslash_before_a_final_newline_round_trips():
    """`$` would also match before the final newline and double that backslash."""
    from tui.jobs.profiles import to_hydra_overrides
    from tui.jobs.schema import compose

    value = "ends with a backslash\\\n"
    (line,) = to_hydra_overrides({"trainer.experiment_name": value})
    assert compose([line])["trainer"]["experiment_name"] == value


def test_env_interpolation_is_the_one_a_profile_keeps() -> None:
    """${oc.env:NAME} reaches verl unescaped (each node resolves it, as verl's TaskRunner does);
    every other ${…} stays literal text."""
    ov = to_hydra_overrides(
        {"data.train_files": "${oc.env:HOME}/d.parquet", "trainer.experiment_name": "${x}"}
    )
    assert "data.train_files='${oc.env:HOME}/d.parquet'" in ov
    cfg = schema.compose(ov)
    assert cfg["data"]["train_files"] == os.environ["HOME"] + "/d.parquet"
    assert cfg["trainer"]["experiment_name"] == "${x}"
