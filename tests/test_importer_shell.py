"""The shell the importer reads: arrays, ${X:-d} defaults, $((…)) arithmetic, Hydra's
--config-name / --config-path. Each expectation is what bash itself does with the script."""

from __future__ import annotations

import subprocess

import pytest

from tui.jobs.exporter import to_ray_job_submit
from tui.jobs.importer import import_script
from tui.jobs.profiles import parse_profile, profile_to_yaml
from tui.jobs.validate import check_profile

RUN = "python3 -m verl.trainer.main_ppo"


def _bash_args(script: str) -> list[str]:
    """The arguments bash passes to main_ppo (python3 replaced by a printer)."""
    prog = "python3() { shift 2; printf '%s\\0' \"$@\"; }\n" + script
    out = subprocess.run(
        ["bash", "-c", prog],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin"},
    )
    return out.stdout.split("\0")[:-1]


def test_arrays_spread_into_one_override_per_element() -> None:
    script = (
        "ACTOR=(\n"
        "    actor_rollout_ref.actor.optim.lr=1e-6\n"
        "    # a comment inside the array\n"
        "    actor_rollout_ref.actor.ppo_mini_batch_size=16\n"
        ")\n"
        "ACTOR+=(actor_rollout_ref.actor.use_kl_loss=True)\n"
        "DATA=(data.train_batch_size=32 'data.truncation=error')\n"
        f'{RUN} "${{ACTOR[@]}}" ${{DATA[@]}} trainer.nnodes=${{DATA[0]#*=}}x "$@"\n'
    )
    r = import_script(script)
    o = r.profile.overrides
    assert o["actor_rollout_ref.actor.optim.lr"] == 1e-6
    assert o["actor_rollout_ref.actor.ppo_mini_batch_size"] == 16
    assert o["actor_rollout_ref.actor.use_kl_loss"] is True
    assert o["data.train_batch_size"] == 32 and o["data.truncation"] == "error"
    assert len([k for k in o if k != "trainer.nnodes"]) == len(_bash_args(script)) - 1
    assert any("3 arguments from the array ACTOR" in m.target for m in r.mapped)


@pytest.mark.parametrize(
    ("expr", "env"),
    [
        ("$((1024*2))", ""),
        ("$(( A * 2 ))", "A=8"),
        ("$(($A*2+1))", "A=8"),
        ("$(( (A + B) * 3 ))", "A=1024 B=512"),
        ("$((-7 / 2))", ""),
        ("$((-7 % 3))", ""),
        ("$((2 - 3 - 4))", ""),
        ("$(( ${A} / 3 ))", "A=10"),
        ("$((- -A))", "A=5"),
    ],
)
def test_integer_arithmetic_matches_bash(expr: str, env: str) -> None:
    script = (f"{env}\n" if env else "") + f"{RUN} data.train_batch_size={expr}\n"
    (expected,) = _bash_args(script)
    r = import_script(script)
    assert r.profile.overrides["data.train_batch_size"] == int(expected.split("=", 1)[1])
    assert r.unresolved_vars == []


@pytest.mark.parametrize(
    "expr",
    [
        "$((A * 2))",
        "$((2 ** 3))",
        "$((1 / 0))",
        "$((--B))",
        "$((__import__('os')))",
        "$(( $(nproc) * 2 ))",
    ],
)
def test_arithmetic_it_cannot_know_stays_as_written(expr: str) -> None:
    r = import_script(f"{RUN} data.train_batch_size={expr}\n")
    assert r.profile.overrides["data.train_batch_size"] == expr
    assert r.unresolved_vars


def test_defaults_are_used_and_said() -> None:
    script = (
        "M=${MODEL:-Qwen/Qwen2.5-7B}\n"
        f"{RUN} actor_rollout_ref.model.path=$M data.train_batch_size=${{BS:=64}} "
        "data.max_prompt_length=${LEN-512} trainer.project_name=${BS} "
        "trainer.experiment_name=${1:-exp}\n"
    )
    r = import_script(script)
    o = r.profile.overrides
    assert o["actor_rollout_ref.model.path"] == "Qwen/Qwen2.5-7B"
    assert o["data.train_batch_size"] == 64 and o["data.max_prompt_length"] == 512
    assert o["trainer.project_name"] == 64  # ${BS:=64} assigned BS
    assert o["trainer.experiment_name"] == "exp"
    assert {a.text for a in r.assumed} == {
        "${MODEL:-Qwen/Qwen2.5-7B}",
        "${BS:=64}",
        "${LEN-512}",
        "${1:-exp}",
    }
    assert r.unresolved_vars == []


def test_default_depending_on_the_environment_stays_unresolved() -> None:
    r = import_script(f"D=${{D:-$HOME/ckpt}}\n{RUN} trainer.default_local_dir=$D\n")
    assert r.profile.overrides["trainer.default_local_dir"] == "$D"
    assert "HOME" in r.unresolved_vars or "D" in r.unresolved_vars


@pytest.mark.parametrize(
    "flags",
    [
        "--config-path=config --config-name='ppo_megatron_trainer.yaml'",
        "--config-name ppo_megatron_trainer",
        "-cn ppo_megatron_trainer",
    ],
)
def test_ppo_megatron_trainer_becomes_model_engine_megatron(flags: str) -> None:
    r = import_script(f"{RUN} {flags} actor_rollout_ref.actor.megatron.param_offload=True\n")
    p = r.profile
    assert p.config_name is None and p.config_path is None
    assert next(iter(p.overrides)) == "model_engine" and p.overrides["model_engine"] == "megatron"
    report = check_profile(p)
    assert report.config is not None
    assert report.config["actor_rollout_ref"]["actor"]["strategy"] == "megatron"
    assert not [e for e in report.errors if "megatron" in (e.key or "")]


def test_custom_config_is_kept_and_round_trips(tmp_path) -> None:
    cfg = tmp_path / "config"
    cfg.mkdir()
    (cfg / "mine.yaml").write_text(
        "hydra:\n  searchpath:\n    - file://verl/trainer/config\n"
        "defaults:\n  - ppo_trainer\n  - _self_\n"
        "actor_rollout_ref:\n  rollout:\n    name: sglang\n"
        "    multi_turn:\n      enable: True\n"
    )
    r = import_script(
        f'P="$(pwd)/config"\n{RUN} --config-path="$P" --config-name=mine '
        "data.train_batch_size=64\n",
        cwd=str(tmp_path),
    )
    p = r.profile
    assert (p.config_name, p.config_path) == ("mine", str(cfg))
    assert any(a.text == "$(pwd)" for a in r.assumed)
    again = parse_profile(profile_to_yaml(p))
    assert (again.config_name, again.config_path) == ("mine", str(cfg))
    report = check_profile(again)
    assert report.config["actor_rollout_ref"]["rollout"]["multi_turn"]["enable"] is True
    assert report.overrides[:2] == [f"--config-path={cfg}", "--config-name=mine"]
    exported = to_ray_job_submit(again)
    assert f"--config-path={cfg}" in exported and "--config-name=mine" in exported
    back = import_script(exported).profile
    assert (back.config_name, back.config_path) == ("mine", str(cfg))


def test_missing_custom_config_is_one_problem_naming_the_field() -> None:
    p = import_script(f"{RUN} --config-path=/nowhere/config --config-name=x a.b=1\n").profile
    report = check_profile(p)
    assert report.config is None
    assert [e.key for e in report.errors] == ["config_path"]


@pytest.mark.parametrize(
    ("cond", "args"),
    [
        ("[[ $# -gt 0 ]]", ""),
        ("[ $# -gt 0 ]", "a"),
        ('[ "$#" -ne 0 ]', ""),
        ('[[ -n "$1" ]]', ""),
        ("[[ -z $1 ]]", "x"),
        ('[ "$1" != "" ]', ""),
        ("[[ $1 == -* ]]", "--lr"),
        ('[[ $1 == "-*" ]]', "-x"),  # quoted: text, not a pattern
        ("[[ $# -gt 0 && -n $1 ]]", "y"),
        ("[[ -z $1 || $# -gt 5 ]]", ""),
        ("[[ $# -gt 5 || -n $1 && $1 != -h ]]", "-h"),
        ("[[ ! -n $1 ]]", ""),
        ("test $# -ge 1", ""),
    ],
)
def test_a_loops_test_is_judged_as_bash_judges_it(cond: str, args: str) -> None:
    """bash's verdict on the test, with arguments and without, against shell_test.judge on the
    words the importer reads (run without arguments: only that case is judged)."""
    from tui.jobs.shell_lexer import Lexer
    from tui.jobs.shell_parse import parse
    from tui.jobs.shell_test import judge, test_operands

    for given in ("", args):
        out = subprocess.run(
            ["bash", "-c", f"if {cond}; then echo yes; else echo no; fi", "x", *given.split()],
            capture_output=True,
            text=True,
            check=True,
        )
        bash = out.stdout.strip() == "yes"
        if given:
            continue  # the import reads the script as run without arguments only
        lexer = Lexer(f"while {cond}; do :; done\n", 1)
        head = parse(lexer.run(), lexer.notes)[0]
        words = []
        for w in head.words[1:]:
            text = "" if w.raw in ('"$1"', "$1") else "0" if w.raw in ("$#", '"$#"') else w.literal
            kind = "op" if w.raw in ("&&", "||") else "quoted" if w.raw.startswith('"') else "plain"
            words.append((text, kind))
        parsed = test_operands(words)
        assert parsed is not None, cond
        assert judge(*parsed) is bash, cond


def test_what_it_does_not_judge_is_unknown() -> None:
    from tui.jobs.shell_test import judge

    assert judge([("(", "op"), ("x", "plain"), (")", "op")], True) is None  # a group
    assert judge([("-d", "plain"), ("/tmp", "plain")], False) is None  # a file test
    assert judge([(None, "plain"), ("-gt", "plain"), ("0", "plain")], True) is None
    assert judge([("a", "plain"), ("-o", "plain"), ("b", "plain")], False) is None
    assert judge([("x", "plain"), ("-gt", "plain"), ("0", "plain")], False) is None  # not int


def test_case_patterns_are_not_commands() -> None:
    """`case` clauses' patterns (`-b|--bs)`, `(fast)`, `*)`, one on the header's line) are
    not read as commands; the clauses' commands are, inside the case statement."""
    from tui.jobs.shell_lexer import Lexer
    from tui.jobs.shell_parse import parse

    text = (
        'case "$1" in\n  -b|--bs) BS="$2"; shift 2 ;;\n  (fast) T=1 ;;&\n'
        "  --x)\n    X=1\n    ;;\n  *) exit 1 ;;\nesac\ncase $T in 1) Y=2;; esac\necho done\n"
    )
    lexer = Lexer(text, 1)
    cmds = parse(lexer.run(), lexer.notes)
    got = [(c.words[0].raw, [e[0] for e in c.enclosing]) for c in cmds if c.words]
    assert got == [
        ("case", []),
        ('BS="$2"', ["case"]),
        ("shift", ["case"]),
        ("T=1", ["case"]),
        ("X=1", ["case"]),
        ("exit", ["case"]),
        ("esac", ["case"]),
        ("case", []),
        ("Y=2", ["case"]),
        ("esac", ["case"]),
        ("echo", []),
    ]


@pytest.mark.parametrize(
    ("lines", "known"),
    [
        ("case b in [^a]) V=yes;; esac", True),
        ("case 5 in [[:digit:]]) V=yes;; esac", True),
        ('case abc in "a"*) V=yes;; esac', True),
        ("case abc in \\*) V=yes;; esac", True),
        ("case '*' in \\*) V=yes;; esac", True),
        ("S=ab\ncase $S in a[b-c]|x) V=yes;; *) V=other;; esac", True),
        ("set -- x\ncase $1 in x) V=yes;; esac", False),
        ('set -eo pipefail\ncase "$1" in x) V=yes;; esac', True),
        ("shopt -s extglob\ncase a in\n  !(a)) V=yes;;\nesac", False),
        ("while [ -n $1 ]; do V=yes; break; done", False),
        ("until [[ 010 -eq 10 ]]; do V=yes; break; done", False),
        ("until [ 1_0 -eq 10 ]; do V=yes; break; done", False),
        ('while [ -n "" ] || true; do V=yes; break; done', False),
        ('while [[ abc == "a"* ]]; do V=yes; break; done', False),
        ("while [[ abc == a* && -z $1 ]]; do V=yes; break; done", False),
        ("f() { V=${1:-default}; }\nf given", True),
        ('f() { V=${1-default}; }\nf ""', True),
        ("f() { V=${2:-d}; }\nf a", True),
        ("X=abc\nV=${X: -5}", True),
        ("X=abc\nV=${X: -2}", True),
    ],
)
def test_what_the_import_knows_is_what_bash_passes(lines: str, known: bool) -> None:
    """Found by a differential fuzz against bash (case patterns with [^…], classes, partial
    quoting and escapes; loop tests bash word-splits, reads as octal or joins with ||; `set
    --`; negative substring offsets; `${1:-d}` in a function): a value the import says it
    knows is bash's; where `known` is False the import must say it does not know it."""
    script = f"V=no\n{lines}\n{RUN} a.k1=$V\n"
    r = import_script(script, source="s.sh")
    bash = dict(a.split("=", 1) for a in _bash_args(script))
    if r.unresolved_vars:
        assert not known, (lines, r.unresolved_vars)
        return
    assert known, lines
    assert str(r.profile.overrides["a.k1"]) == bash["a.k1"], lines


def test_a_costly_pattern_edit_ends_unknown_instead_of_running_for_a_minute() -> None:
    """`${X//*a*a*a/b}` on a 4,096-character value: every start and end is 8 million pattern
    matches (51 s); past the budget the value is not known here, and the import goes on."""
    script = (
        "X=xxxxxxxxxxxxxxxx\nX=$X$X$X$X$X$X$X$X$X$X$X$X$X$X$X$X\n"
        "X=$X$X$X$X$X$X$X$X$X$X$X$X$X$X$X$X\nV=${X//*a*a*a/b}\nW=${X:0:4}\n"
        f"{RUN} a.k1=$V a.k2=$W\n"
    )
    r = import_script(script, source="s.sh")
    assert r.unresolved_vars == ["V"] and r.profile.overrides["a.k2"] == "xxxx"
