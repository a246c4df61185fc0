"""Sweep grids without a cluster (tui/jobs/sweep.py): values split like Hydra reads them,
readable ids always valid Ray submission ids and unique, the grid's limits as one-line errors;
`verl-tui sweep` bad input exits 2 before anything connects."""

from __future__ import annotations

import os

import pytest
from harness.cli import run_cli
from hypothesis import given
from hypothesis import strategies as st

from tui.cluster.dashboard import is_job_id
from tui.config.yamlfile import ConfigError
from tui.jobs.sweep import Grid, clean_id, parse_grid, runs_of, short_key, split_values


def test_values_split_at_top_level_commas_only():
    assert split_values("1e-6,2e-6") == ["1e-6", "2e-6"]
    assert split_values("[1,2],[3,4]") == ["[1,2]", "[3,4]"]
    assert split_values("'a,b',\"c,d\",e") == ["'a,b'", '"c,d"', "e"]
    assert split_values("{x: 1, y: 2}, 3") == ["{x: 1, y: 2}", "3"]


def test_grid_errors_are_one_line():
    g = parse_grid("trainer.logger=['console'],['console','wandb']")
    assert g.values == ("['console']", "['console','wandb']")
    for bad, words in {
        "lr": "expected KEY=V1,V2",
        "=1,2": "expected KEY=V1,V2",
        "a.b=1,,2": "an empty value",
        "a.b=1,1": "given twice",
        "a b=1": "is not a dotted verl key",
        "a.b=[1,2": "--grid",
    }.items():
        with pytest.raises(ConfigError) as err:
            parse_grid(bad)
        assert words in str(err.value) and "\n" not in str(err.value), bad
    grids = [Grid(f"k{i}", ("1", "2")) for i in range(4)]
    with pytest.raises(ConfigError, match="at most 3 keys"):
        runs_of("s", grids, lambda _s: False)
    with pytest.raises(ConfigError, match="given twice"):
        runs_of("s", [Grid("a.b", ("1",)), Grid("+a.b", ("2",))], lambda _s: False)
    with pytest.raises(ConfigError, match="more than 64"):
        runs_of("s", [Grid("a", tuple(map(str, range(9))))] * 1 + [Grid("b", tuple(map(str, range(8))))], lambda _s: False)  # fmt: skip


def test_runs_are_every_combination_with_readable_unique_ids():
    grids = [
        Grid("actor_rollout_ref.actor.optim.lr", ("1e-6", "2e-6")),
        Grid("data.train_batch_size", ("64", "128")),
    ]
    taken = {"lrbs-lr2e-6-tbs64"}
    runs = runs_of("lr/bs sweep!", grids, lambda sid: sid in taken)
    assert [r.submission_id for r in runs] == [
        "lr-bs-sweep-lr1e-6-tbs64",
        "lr-bs-sweep-lr1e-6-tbs128",
        "lr-bs-sweep-lr2e-6-tbs64",
        "lr-bs-sweep-lr2e-6-tbs128",
    ]
    assert runs[2].sets == ["actor_rollout_ref.actor.optim.lr=2e-6", "data.train_batch_size=64"]
    taken = {"x-lr1"}
    again = runs_of("x", [Grid("lr", ("1", "1.0"))], lambda sid: sid in taken)
    assert [r.submission_id for r in again] == ["x-lr1-2", "x-lr1.0"]
    assert short_key("data.train_batch_size") == "tbs" and short_key("+trainer.seed") == "seed"


@given(st.text(max_size=300), st.lists(st.text(min_size=1, max_size=40), min_size=1, max_size=3))
def test_ids_are_always_valid_submission_ids(name, values):
    assert is_job_id(clean_id(name))
    grid = [Grid("a.b_c", tuple(dict.fromkeys(values)))]
    for run in runs_of(name, grid, lambda _s: False):
        assert is_job_id(run.submission_id), run.submission_id


def test_sweep_cli_bad_input_exits_2_before_connecting(tmp_path):
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text("cluster: c1\nhosts:\n  - name: h1\n    address: 10.255.255.1\n")
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}
    for args, words in {
        ("grpo-gsm8k-qwen2.5-0.5b",): "--grid",
        ("grpo-gsm8k-qwen2.5-0.5b", "--grid", "lr"): "expected KEY=V1,V2",
        ("no-such-profile", "--grid", "a.b=1,2"): "no-such-profile",
        ("grpo-gsm8k-qwen2.5-0.5b", "--grid", "a.b=1", "--set", "bad"): "--set 'bad'",
    }.items():
        p = run_cli(["sweep", str(hosts), *args], env=env, timeout=60)
        assert p.returncode == 2, (args, p.stdout, p.stderr)
        assert words in p.stderr and "Traceback" not in p.stderr, (args, p.stderr)
