"""verl's own config, composed with Hydra from the installed verl 0.9.1 (no mocks)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tui.jobs import schema
from tui.jobs.catalog import CATALOG_KEYS, GROUPS, by_group, catalog
from tui.jobs.schema import ComposeError, compose, flat_keys, key_catalog

REPO = Path(__file__).resolve().parent.parent


def test_product_code_imports_neither_verl_nor_torch_and_composes_fast() -> None:
    code = (
        "import sys, time, json\n"
        "t0 = time.perf_counter()\n"
        "from tui.jobs import schema, catalog, rules, profiles, validate\n"
        "t1 = time.perf_counter()\n"
        "schema.compose([])\n"
        "t2 = time.perf_counter()\n"
        "schema.compose(['actor_rollout_ref.rollout.name=vllm'])\n"
        "t3 = time.perf_counter()\n"
        "schema.compose(['actor_rollout_ref.rollout.name=sglang', 'data.train_batch_size=8'])\n"
        "t4 = time.perf_counter()\n"
        "schema.key_catalog()\n"
        "t5 = time.perf_counter()\n"
        "schema.key_catalog()\n"
        "t6 = time.perf_counter()\n"
        "print(json.dumps({'mods': sorted(m for m in ('verl', 'torch') if m in sys.modules),\n"
        "  'import': t1 - t0, 'cold': t2 - t1, 'first': t3 - t2, 'warm': t4 - t3,\n"
        "  'catalog_cold': t5 - t4, 'catalog_warm': t6 - t5}))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    data = json.loads(out.stdout.strip().splitlines()[-1])
    assert data["mods"] == []
    print(
        f"\ncompose: import {data['import']:.3f}s, base (cold) {data['cold']:.3f}s, first "
        f"override {data['first']:.3f}s, warm {data['warm']:.3f}s; key_catalog cold "
        f"{data['catalog_cold']:.3f}s, warm {data['catalog_warm'] * 1e6:.1f}µs"
    )


def test_config_dir_is_verls() -> None:
    d = schema.verl_config_dir()
    assert (d / "ppo_trainer.yaml").is_file() and d.parts[-3:] == ("verl", "trainer", "config")


def test_base_matches_verls_generated_reference() -> None:
    """_generated_ppo_trainer.yaml is verl's flat dump of this very composition."""
    from omegaconf import OmegaConf

    base = flat_keys(OmegaConf.to_container(schema._base_cfg("ppo_trainer", "", ()), resolve=False))
    gen = flat_keys(
        yaml.safe_load((schema.verl_config_dir() / "_generated_ppo_trainer.yaml").read_text())
    )
    assert set(base) - set(gen) == {"model_engine"}  # the defaults-list choice, not dumped
    assert set(gen) <= set(base)
    assert all(base[k] == gen[k] for k in gen)


def test_compose_resolves_and_overrides() -> None:
    cfg = compose(
        [
            "actor_rollout_ref.rollout.name=vllm",
            "trainer.n_gpus_per_node=4",
            "trainer.project_name=p",
            "trainer.experiment_name=e",
        ]
    )
    assert cfg["actor_rollout_ref"]["rollout"]["name"] == "vllm"
    # interpolations follow the override: rollout's GPUs per node, the checkpoint folder
    assert cfg["actor_rollout_ref"]["rollout"]["n_gpus_per_node"] == 4
    assert cfg["trainer"]["default_local_dir"] == "checkpoints/p/e"
    assert compose([])["actor_rollout_ref"]["rollout"]["name"] == "???"  # required in verl


def test_fast_path_equals_a_full_hydra_compose() -> None:
    from omegaconf import OmegaConf

    ov = [
        "actor_rollout_ref.rollout.name=vllm",
        "data.train_batch_size=64",
        "trainer.logger=[console]",
        "~trainer.val_only",
        "trainer={nnodes:3}",
        "+actor_rollout_ref.rollout.engine_kwargs.vllm.swap_space=4",
        "critic={ppo_micro_batch_size_per_gpu:2}",
    ]
    full = OmegaConf.to_container(schema._hydra_compose(ov), resolve=True)
    assert compose(ov) == full


def test_memoized_interpolation_parse_resolves_as_omegaconf_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """verl_compose keeps the parse trees of short interpolations: the same config (and the
    same unresolved keys) as with OmegaConf's own parse, a tree reused across composes, and a
    string that does not parse still raises."""
    from omegaconf import base, grammar_parser
    from omegaconf.errors import GrammarParseError

    from tui.jobs import verl_compose

    overrides = [
        "trainer.n_gpus_per_node=4",
        "trainer.experiment_name='${trainer.project_name}-x'",
        "data.train_batch_size=${nope.missing}",
        "trainer.project_name='" + "p" * 300 + "'",  # a long value: parsed each time
    ]
    memo = schema.compose_detailed(overrides)
    assert base.parse is not grammar_parser.parse  # installed by the compose
    first = base.parse("${trainer.nnodes}")
    assert base.parse("${trainer.nnodes}") is first
    with pytest.raises(GrammarParseError):
        base.parse("${trainer.")
    monkeypatch.setattr(base, "parse", grammar_parser.parse)
    plain = verl_compose.Composed(*verl_compose._to_plain(schema.compose_cfg(overrides)))
    monkeypatch.undo()
    assert memo == plain and memo.unresolved == ["data.train_batch_size"]
    assert memo.config["trainer"]["experiment_name"] == "p" * 300 + "-x"


def test_config_group_override_takes_the_full_compose() -> None:
    cfg = compose(["model_engine=megatron", "actor_rollout_ref.rollout.name=vllm"])
    assert cfg["actor_rollout_ref"]["actor"]["strategy"] == "megatron"
    assert "megatron" in cfg["actor_rollout_ref"]["actor"]


def test_base_is_cached_and_never_mutated() -> None:
    compose([])
    before = schema._base_cfg.cache_info()
    a = compose(["data.train_batch_size=7"])
    a["data"]["train_batch_size"] = 99  # callers own what they get
    b = compose([])
    b["data"]["train_batch_size"] = 98
    after = schema._base_cfg.cache_info()
    assert after.misses == before.misses and after.hits > before.hits
    assert compose([])["data"]["train_batch_size"] == 1024
    assert compose(["data.train_batch_size=7"])["data"]["train_batch_size"] == 7
    # The DictConfig each compose starts from is a copy of the cached base (unpickled): in
    # struct mode like the base, and the caller's to change.
    from omegaconf.errors import ConfigAttributeError

    cfg = schema.compose_cfg(["data.train_batch_size=7"])
    cfg.data.train_batch_size = 5
    with pytest.raises(ConfigAttributeError):
        cfg.data.nope = 1
    assert schema.compose_cfg([]).data.train_batch_size == 1024


def test_parsed_overrides_are_shared_but_their_values_are_not() -> None:
    """Each override line is parsed once (kept by its text); what a compose makes of a list,
    a dict or a quoted value is still its own, and a line that does not parse fails each time."""
    from tui.jobs import verl_compose

    lines = [
        "data.train_files=[a.parquet,b.parquet]",
        "+trainer.extra={k: 1}",
        "trainer.experiment_name='x y'",
    ]
    first = compose(lines)
    hits = verl_compose._parse_one.cache_info().hits
    first["data"]["train_files"].append("mutated")
    first["trainer"]["extra"]["k"] = 2
    second = compose(lines)
    assert verl_compose._parse_one.cache_info().hits >= hits + len(lines)
    assert second["data"]["train_files"] == ["a.parquet", "b.parquet"]
    assert second["trainer"]["extra"] == {"k": 1}
    assert second["trainer"]["experiment_name"] == "x y"
    for _ in range(2):
        with pytest.raises(ComposeError) as err:
            compose(["data.train_files=[a,"])
        assert err.value.key == "data.train_files" and "bad override syntax" in str(err.value)


# Edits that reach the fast resolution's corners: a selected key set to None, to a missing
# value, to a list or to an interpolation of its own, a plain reference broken, an escaped
# and a quoted interpolation, an env lookup.
_RESOLVE_EDITS = [
    [],
    ["actor_rollout_ref.actor.entropy_checkpointing=null"],
    ["actor_rollout_ref.actor.entropy_checkpointing=???"],
    ["global_profiler.tool=nsys", "trainer.n_gpus_per_node=3"],
    ["actor_rollout_ref.actor.profiler.ranks=[0,1]"],
    ["actor_rollout_ref.rollout.n='${trainer.nnodes}'"],
    ["actor_rollout_ref.rollout.n='${oc.select:trainer.nnodes,5}'"],
    ["trainer.nnodes='${oc.select:trainer.nope,7}'", "data.max_prompt_length=99"],
    ["trainer.project_name='${trainer.nope}'"],
    ["trainer.project_name='a\\${trainer.nnodes}'"],
    ["trainer.experiment_name='${oc.env:HOME}'"],
    ["data.train_batch_size='${actor_rollout_ref.rollout.n}'"],
    ["trainer.nnodes='${trainer.n_gpus_per_node}'", "trainer.n_gpus_per_node='${trainer.nnodes}'"],
]


@pytest.mark.parametrize("edits", _RESOLVE_EDITS, ids=lambda e: "+".join(e)[:40] or "base")
def test_fast_resolution_equals_omegaconfs(edits: list[str]) -> None:
    """verl's `${oc.select:KEY,DEFAULT}` interpolations resolved from the unresolved tree give
    what OmegaConf.to_container(resolve=True) gives; where OmegaConf raises, the fast path
    declines (None) and the compose resolves OmegaConf's way."""
    from omegaconf import OmegaConf

    from tui.jobs import verl_compose

    cfg = verl_compose.compose_cfg(edits)
    raw = OmegaConf.to_container(cfg, resolve=False)
    fast = verl_compose._resolve_selects(cfg, raw)
    try:
        expected = OmegaConf.to_container(cfg, resolve=True)
    except Exception:
        assert fast is None
    else:
        assert fast is None or fast == expected
    if not edits:
        assert fast is not None  # verl's own config takes the fast path


def test_every_preset_resolves_on_the_fast_path() -> None:
    from omegaconf import OmegaConf

    from tui.jobs import verl_compose
    from tui.jobs.profiles import load_profile, to_hydra_overrides

    for path in sorted((Path(__file__).resolve().parents[1] / "profiles").glob("*.yaml")):
        profile = load_profile(path)
        cfg = verl_compose.compose_cfg(
            to_hydra_overrides(profile.overrides), profile.config_name, profile.config_path
        )
        raw = OmegaConf.to_container(cfg, resolve=False)
        fast = verl_compose._resolve_selects(cfg, raw)
        assert fast is not None and fast == OmegaConf.to_container(cfg, resolve=True), path.name


def test_selecting_the_same_verl_keeps_the_composed_base(tmp_path: Path) -> None:
    """use_source drops the caches only when the files composition reads change: this
    Python's verl selected again (each test's teardown does), or named as the cluster's
    fallback with a note, keeps the composed base; another verl's folder drops it."""
    from dataclasses import replace

    compose([])
    before = schema._base_cfg.cache_info()
    local = schema.local_source()
    assert local is not None
    schema.use_source(None)
    schema.use_source(replace(local, note="the cluster's verl was not read"))
    schema.use_source(None, cluster_failure="asked node1: no verl")
    compose([])
    after = schema._base_cfg.cache_info()
    assert after.misses == before.misses and after.currsize == before.currsize > 0
    other = schema.VerlSource(root=tmp_path, version="0.0.1", origin="node1", python="python")
    try:
        schema.use_source(other)
        assert schema._base_cfg.cache_info().currsize == 0
    finally:
        schema.use_source(None)
    assert schema._base_cfg.cache_info().currsize == 0  # back from another verl: re-read


def test_unresolvable_interpolation_is_kept_as_text() -> None:
    r = schema.compose_detailed(["data.train_batch_size=${nope.missing}"])
    assert r.config["data"]["train_batch_size"] == "${nope.missing}"
    assert r.unresolved == ["data.train_batch_size"]


@pytest.mark.parametrize(
    ("override", "key", "closest"),
    [
        ("data.train_batch_sise=3", "data.train_batch_sise", "data.train_batch_size"),
        (
            "actor_rollout_ref.actor.ppo_mini_batchsize=3",
            "actor_rollout_ref.actor.ppo_mini_batchsize",
            "actor_rollout_ref.actor.ppo_mini_batch_size",
        ),
        ("trainer.n_gpu_per_node=8", "trainer.n_gpu_per_node", "trainer.n_gpus_per_node"),
        (
            "actor_rollout_ref.rollout.tensor_parallel_size=2",
            "actor_rollout_ref.rollout.tensor_parallel_size",
            "actor_rollout_ref.rollout.tensor_model_parallel_size",
        ),
        ("data={train_batch_sise:3}", "data.train_batch_sise", "data.train_batch_size"),
    ],
)
def test_unknown_key_names_the_closest(override: str, key: str, closest: str) -> None:
    with pytest.raises(ComposeError) as err:
        compose([override])
    assert err.value.key == key
    assert f"did you mean {closest}?" in err.value.message


def test_the_closest_key_is_never_the_configs_plumbing() -> None:
    """`_target_` sits beside most of verl's blocks: as close to `n_agent` as a real key, it
    was offered as the fix; a key the user spelt with a leading underscore can still get one."""
    from tui.jobs.verl_compose import base_keys, closest_key

    for key in ("actor_rollout_ref.rollout.n_agent", "critic.model.tager", "data.target"):
        near = closest_key(key)
        assert near is None or not near.rpartition(".")[2].startswith("_"), (key, near)
    if "actor_rollout_ref.rollout._target_" in base_keys():
        assert closest_key("actor_rollout_ref.rollout._targt_") == (
            "actor_rollout_ref.rollout._target_"
        )


def test_critic_fsdp_config_rename_is_named() -> None:
    with pytest.raises(ComposeError) as err:
        compose(["critic.model.fsdp_config.param_offload=true"])
    assert err.value.key == "critic.model.fsdp_config.param_offload"
    assert "verl renamed this key: use critic.fsdp.param_offload" in err.value.message
    assert compose(["critic.fsdp.param_offload=true"])["critic"]["fsdp"]["param_offload"] is True


@pytest.mark.parametrize(
    ("override", "key", "text"),
    [
        ("+data.train_batch_size=3", "data.train_batch_size", "drop the leading '+'"),
        ("data.train_batch_size=[3", "data.train_batch_size", "bad override syntax"),
        ("trainer.experiment_name=a,b", "trainer.experiment_name", "quote the value"),
        ("model_engine=nope", "model_engine", "model_engine/nope"),
        (
            "actor_rollout_ref.rollout.engine_kwargs.vllm.swap_space=4",
            "actor_rollout_ref.rollout.engine_kwargs.vllm.swap_space",
            "+actor_rollout_ref",
        ),
        ("~data.nope", "data.nope", "not a key"),
        (
            "custom_reward_function.nope=1",
            "custom_reward_function.nope",
            "reward.custom_reward_function",
        ),
    ],
)
def test_other_compose_errors_name_their_key(override: str, key: str, text: str) -> None:
    with pytest.raises(ComposeError) as err:
        compose([override])
    assert err.value.key == key and text in err.value.message
    assert "\n" not in err.value.message


def test_catalog_covers_every_composed_key_with_types_and_help() -> None:
    cat = key_catalog()
    assert list(cat) == list(flat_keys(compose([])))
    assert len(cat) > 800
    info = cat["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"]
    assert info.type == "int | None" and info.default is None  # from the dataclass annotation
    assert cat["critic.enable"].type == "bool | None"
    assert cat["actor_rollout_ref.rollout.name"].choices == ("vllm", "sglang", "trtllm")
    assert cat["actor_rollout_ref.rollout.name"].required
    assert (
        cat["actor_rollout_ref.rollout.n_gpus_per_node"].follows
        == "${oc.select:trainer.n_gpus_per_node,8}"
    )
    assert sum(1 for i in cat.values() if i.help) > 0.7 * len(cat)


@pytest.mark.parametrize(
    ("key", "comment"),
    [
        ("data.train_batch_size", "Batch size sampled for one training iteration"),
        (
            "actor_rollout_ref.actor.ppo_mini_batch_size",
            "Split each sample into sub-batches of this size for PPO",
        ),
        (
            "actor_rollout_ref.rollout.gpu_memory_utilization",
            "Fraction of GPU memory used by vLLM/SGLang/TRTLLM for KV cache.",
        ),
        ("trainer.resume_mode", '"auto": resume from last checkpoint if available'),
        ("critic.enable", "by default it is only enabled if advantage estimator is gae"),
        # engine/fsdp.yaml, mounted at critic.fsdp by critic/dp_critic.yaml
        ("critic.fsdp.param_offload", "Whether to offload model parameters to CPU"),
        # a trailing comment: `dtype: bfloat16 # ["bfloat16", "float16"]`
        ("actor_rollout_ref.actor.fsdp_config.dtype", '["bfloat16", "float16"]'),
        ("algorithm.adv_estimator", 'Advantage estimator type: "gae", "grpo"'),
    ],
)
def test_help_comes_from_verls_yaml_comments(key: str, comment: str) -> None:
    assert comment in key_catalog()[key].help


def test_every_catalog_key_exists_in_verls_composed_config() -> None:
    flat = flat_keys(compose([]))
    missing = [k for k in CATALOG_KEYS if k not in flat]
    assert missing == []
    items = catalog()
    assert len(items) >= 40 and all(i.info is not None for i in items)
    assert all(i.label for i in items)
    assert set(by_group()) == set(GROUPS) and all(by_group()[g] for g in GROUPS)
    helped = [i.key for i in items if i.info and i.info.help]
    assert len(helped) >= len(items) - 2


def test_rewarmed_compose_stays_fast_enough() -> None:
    compose(["actor_rollout_ref.rollout.name=vllm"])
    t = time.perf_counter()
    for i in range(5):
        compose(["actor_rollout_ref.rollout.name=vllm", f"data.train_batch_size={i + 1}"])
    print(f"\nwarm compose: {(time.perf_counter() - t) / 5 * 1000:.0f} ms each")
