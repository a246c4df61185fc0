"""Property-based hostile input (issue 10, item 11): hosts files, profiles and CLI arguments.

Agent lines, log lines, job ids and terminal text have their own property tests next to their
boundaries (test_agent_boundary, test_log_signatures, test_explain, test_job_ids, test_sanitize);
this file covers the files a user or a colleague hands the cockpit, and the command line.

Every example must end in a result or ONE clean error line (ConfigError / exit 2), never an
exception escaping, never a traceback, within a bound that only catches hangs.
"""

from __future__ import annotations

import os
import re
import subprocess
import time

import pytest
import yaml
from harness.cli import run_cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tui.config.hosts import Inventory, parse_inventory
from tui.config.yamlfile import ConfigError
from tui.jobs.profiles import Profile, parse_profile

HANG_S = 5.0  # per parse: only to catch a hang (each takes milliseconds)

# Values a hostile or careless file holds: escapes, markup, traversal, huge and odd numbers.
HOSTILE_SCALARS = (
    st.sampled_from(
        [
            "",
            " ",
            "~",
            "null",
            "NaN",
            ".inf",
            "-.inf",
            "1e309",
            "-1",
            "0",
            "99999999999999999999999",
            "\x1b]0;pwned\x07",
            "\x1b[2J",
            "\x1b]52;c;aGk=\x07",
            "[@click=app.quit]x[/]",
            "[b]bold",
            "../../etc/passwd",
            "/dev/zero",
            "/proc/self/mem",
            "a\nb",
            "a\rb",
            "\u202eevil",
            "x" * 3000,
            "$(reboot)",
            "`id`",
            "; rm -rf /",
            "' OR 1=1",
            "%s%n",
            "{0.__class__}",
            "${oc.env:HOME}",
            "::1",
            "[fe80::1%eth0]",
            "256.256.256.256",
            "host:99999",
            "-oProxyCommand=sh",
            "a b c",
            "\t",
            "\\",
            "'",
            '"',
            "&a",
            "*a",
            "!!python/object:os.system",
            "<<",
            "- -",
            "? x",
            "|",
            ">",
        ]
    )
    | st.text(max_size=40)
    | st.integers()
    | st.floats()
    | st.booleans()
    | st.none()
)

HOSTS_KEYS = [
    "cluster",
    "hosts",
    "ssh",
    "telemetry",
    "ray",
    "python",
    "secret_env",
    "name",
    "address",
    "role",
    "num_gpus",
    "user",
    "port",
    "identity_file",
    "known_hosts",
    "jump",
    "interval",
    "history",
    "env",
    "node_ip",
    "insecure_skip_host_key_check",
    "config",
    "connect_timeout",
    "extra",
]
PROFILE_KEYS = [
    "name",
    "description",
    "python",
    "config_name",
    "config_path",
    "overrides",
    "runtime_env",
    "env_vars",
    "working_dir",
    "excludes",
    "pip",
    "retries",
    "data.train_files",
    "trainer.n_gpus_per_node",
    "actor_rollout_ref.rollout.name",
    "extra",
]


def _docs(keys: list[str]) -> st.SearchStrategy:
    value = st.recursive(
        HOSTILE_SCALARS,
        lambda inner: (
            st.lists(inner, max_size=4)
            | st.dictionaries(st.sampled_from(keys) | st.text(max_size=8), inner, max_size=4)
        ),
        max_leaves=12,
    )
    return st.dictionaries(st.sampled_from(keys), value, max_size=6) | value


# Fragments that stress YAML's own syntax: anchors, aliases, tags, flow collections, documents.
FRAGMENTS = [
    "&a ",
    "*a",
    "*b",
    "&b [*a, *a, *a]",
    "!!binary ",
    "!!python/name:os.system ",
    "!!map ",
    "<<: *a",
    "---\n",
    "...\n",
    "[",
    "]",
    "{",
    "}",
    ", ",
    ": ",
    "- ",
    "? ",
    "\n",
    "\n  ",
    "#",
    "'",
    '"',
    "|\n  ",
    ">-\n  ",
    "%YAML 1.1\n",
    "%TAG ! x\n",
    "\x00",
    "\x1b",
    "\ufeff",
    "\u202e",
    "hosts:",
    "name: a",
    "9" * 400,
]


def _mutated(base: str, cuts: list[tuple[int, str]]) -> str:
    s = base
    for pos, frag in cuts:
        i = pos % (len(s) + 1)
        s = s[:i] + frag + s[i:]
    return s


def _file_texts(keys: list[str]) -> st.SearchStrategy[str]:
    structured = _docs(keys).map(lambda d: yaml.safe_dump(d, allow_unicode=True))
    mutations = st.lists(st.tuples(st.integers(0, 10_000), st.sampled_from(FRAGMENTS)), max_size=5)
    return st.one_of(
        structured,
        st.tuples(structured, mutations).map(lambda t: _mutated(*t)),
        st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=6), max_size=30).map("".join),
    )


def _check_one_line(exc: ConfigError, label: str) -> None:
    text = str(exc)
    assert text and "\n" not in text and "\r" not in text, repr(text)
    assert "Traceback" not in text
    assert text.startswith(label), text  # names the file
    assert not any(c in text for c in "\x00\x1b\x07\x9b"), repr(text)


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(_file_texts(HOSTS_KEYS))
def test_hosts_files_end_in_an_inventory_or_one_line(text: str) -> None:
    t0 = time.monotonic()
    try:
        inv = parse_inventory(text, "fuzz-hosts.yaml")
    except ConfigError as exc:
        _check_one_line(exc, "fuzz-hosts.yaml")
    else:
        assert isinstance(inv, Inventory) and inv.hosts
        for h in inv.hosts:  # what the cockpit draws from the file is already clean
            assert not re.search(r"[\x00-\x1f\x7f-\x9f]", h.name), repr(h.name)
    assert time.monotonic() - t0 < HANG_S


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(_file_texts(PROFILE_KEYS))
def test_profiles_end_in_a_profile_or_one_line(text: str) -> None:
    t0 = time.monotonic()
    try:
        prof = parse_profile(text, "fuzz-profile.yaml")
    except ConfigError as exc:
        _check_one_line(exc, "fuzz-profile.yaml")
    else:
        assert isinstance(prof, Profile) and prof.name
    assert time.monotonic() - t0 < HANG_S


# ---- the command line, through the real entry point ------------------------------------------

SUBCOMMANDS = {
    # subcommand → options it knows (flags and options taking a value); positional slots are
    # filled from the hostile values. Non-ending modes are left out (gpus without --once, tunnel).
    "gpus": ["--once", "--json", "--interval", "--timeout"],
    "check": ["--json", "--timeout", "--profile"],
    "status": ["--json"],
    "jobs": ["--json"],
    "stop": [],
    "logs": ["--follow", "--node"],
    "debug": ["--json"],
    "submit": [
        "--dry-run",
        "--json",
        "--env",
        "--set",
        "--working-dir",
        "--submission-id",
        "--resubmit",
        "--",
    ],
    "profile": ["check", "import", "export", "list", "--set", "--format", "-o"],
    "ckpt": ["--dir", "--profile", "--json", "--collect", "--to", "--merge", "--on", "--target"],
    "explain": ["--json"],
    "up": ["--restart"],
    "down": [],
}
ARG_VALUES = st.sampled_from(
    [
        "",
        "-",
        "--",
        "x/stop?",
        "../../../etc/passwd",
        "\x1b]0;pwned\x07",
        "[@click=app.quit]",
        "a" * 5000,
        "-1",
        "0",
        "nan",
        "inf",
        "1e309",
        "/dev/zero",
        "/nonexistent-vt/x",
        "/",
        ".",
        "é",
        "\u202e",
        "a\nb",
        "KEY=",
        "=v",
        "WANDB_API_KEY=s3cr3t",
        "trainer.x=1",
        "+a.b=c",
        "PROFILE",
        "raysubmit_AAAAAAAAAAAAAAAA",
        "node1",
        "--help=x",
        "-x",
    ]
) | st.text(alphabet=st.characters(blacklist_characters="\x00", codec="utf-8"), max_size=20)


@pytest.fixture(scope="module")
def cli_env(tmp_path_factory: pytest.TempPathFactory) -> dict:
    home = tmp_path_factory.mktemp("fuzzhome")
    (home / ".ssh").mkdir()
    (home / ".ssh" / "known_hosts").write_text("")
    hosts = home / "hosts.yaml"
    # Nothing listens on 127.0.0.2:1: every action that needs a host fails at once (refused),
    # so no fuzzed command can start Ray or a job anywhere.
    hosts.write_text(
        "cluster: fuzz\nhosts:\n  - name: n1\n    address: 127.0.0.2\n"
        "    ssh: {port: 1, connect_timeout: 2}\n"
    )
    profile = home / "p.yaml"
    profile.write_text("name: p\noverrides:\n  trainer.total_epochs: 1\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "HYPOTHESIS"))}
    env.update(
        HOME=str(home),
        XDG_STATE_HOME=str(home / "state"),
        XDG_CACHE_HOME=str(home / "cache"),
        XDG_CONFIG_HOME=str(home / "config"),
    )
    env.pop("WANDB_API_KEY", None)
    return {"env": env, "cwd": home, "hosts": str(hosts), "profile": str(profile)}


@st.composite
def _argvs(draw: st.DrawFn) -> list[str]:
    sub = draw(st.sampled_from(sorted(SUBCOMMANDS)))
    opts = SUBCOMMANDS[sub]
    # Host-taking commands always get the unreachable inventory first: without one they would
    # act on this machine through the local transport (`up` would start Ray here).
    argv = [sub] if sub in ("profile", "explain") else [sub, "HOSTS"]
    for _ in range(draw(st.integers(0, 4))):
        if opts and draw(st.booleans()):
            argv.append(draw(st.sampled_from(opts)))
        argv.append(draw(ARG_VALUES))
    if sub == "gpus" and "--once" not in argv:
        argv.append("--once")
    return argv


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(_argvs())
def test_cli_arguments_never_trace_back(cli_env: dict, argv: list[str]) -> None:
    argv = [
        cli_env["hosts"] if a == "HOSTS" else cli_env["profile"] if a == "PROFILE" else a
        for a in argv
    ]
    t0 = time.monotonic()
    # A process of its own forked from the warm interpreter (harness/cli.py): the CLI's
    # handling of the arguments is under test, not the interpreter's start-up.
    proc = run_cli(
        argv,
        cwd=cli_env["cwd"],
        env=cli_env["env"],
        stdin=subprocess.DEVNULL,
        text=False,
        timeout=90,
    )
    took = time.monotonic() - t0
    stdout, stderr = (b.decode(errors="replace") for b in (proc.stdout, proc.stderr))
    print(f"{took:.2f} s {argv}")
    out = stdout + stderr
    assert "Traceback" not in out, (argv, out[-2000:])
    assert proc.returncode >= 0, (argv, proc.returncode)  # never killed by a signal
    assert proc.returncode in (0, 1, 2, 3), (argv, proc.returncode, out[-1000:])
    if proc.returncode == 2:  # bad input: a message, each line clean
        assert stderr.strip(), argv
    assert not any(c in out for c in "\x1b\x07\x9b"), (argv, repr(out[-500:]))
    assert took < 60, (argv, took)


# ---- a host's checkpoint scan answer (the helper runs on a host that may be hostile) ---------

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | HOSTILE_SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=16,
)
_STEP_BODY = st.fixed_dictionaries(
    {},
    optional={
        "files": st.lists(
            st.tuples(
                st.sampled_from(
                    [
                        "actor/model_world_size_2_rank_0.pt",
                        "actor/model_world_size_2_rank_1.pt",
                        "actor/optim_world_size_2_rank_9.pt",
                        "actor/fsdp_config.json",
                        "../../etc/passwd",
                        "actor/huggingface/config.json",
                        "/abs",
                        "",
                        "actor/__0_0.distcp",
                        "actor/.metadata",
                        "\x1b]0;x\x07",
                    ]
                )
                | st.text(max_size=10),
                st.integers() | st.floats() | st.text(max_size=3),
                st.integers() | st.floats() | st.none(),
            ).map(list)
            | _JSON,
            max_size=6,
        )
        | _JSON,
        "meta": st.dictionaries(
            st.sampled_from(["actor/fsdp_config.json", "actor/ckpt_contents.json"])
            | st.text(max_size=5),
            st.dictionaries(st.sampled_from(["world_size", "x"]), _JSON, max_size=2) | _JSON,
            max_size=3,
        )
        | _JSON,
        "truncated": _JSON,
    },
)
_SCAN = (
    st.fixed_dictionaries(
        {},
        optional={
            "exists": _JSON,
            "latest": _JSON,
            "errors": _JSON,
            "steps": st.dictionaries(
                st.sampled_from(
                    [
                        "global_step_1",
                        "global_step_20",
                        "global_step_",
                        "global_step_-1",
                        "global_step_99999999999999999999",
                        "other",
                    ]
                )
                | st.text(max_size=8),
                _STEP_BODY | _JSON,
                max_size=3,
            )
            | _JSON,
        },
    )
    | _JSON
)


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(_SCAN, _SCAN)
def test_checkpoint_scan_answers_never_raise(a: object, b: object) -> None:
    import json

    from tui.ckpt.scan import build_index, host_scan_from_json

    scans = [host_scan_from_json("node1", a), host_scan_from_json("node2", b)]  # type: ignore[arg-type]
    index = build_index("/ckpt", scans)
    json.dumps(index.to_json())  # what `ckpt --json` prints: always serializable


# ---- the running cockpit under Pilot, fed mutated agent lines while keys are pressed ---------

_GPU = {
    "index": 0,
    "name": "H100",
    "uuid": "GPU-1",
    "util_percent": 50.0,
    "mem_util_percent": 10.0,
    "memory_used_bytes": 1 << 30,
    "memory_total_bytes": 80 << 30,
    "temperature_c": 40.0,
    "power_w": 100.0,
    "power_limit_w": 700.0,
    "processes": [{"pid": 1, "name": "python", "memory_bytes": 1 << 20}],
}
_SAMPLE = {
    "type": "sample",
    "seq": 1,
    "t": 0.0,
    "source": "nvml",
    "hostname": "h",
    "driver": "580",
    "host": {
        "cpu_percent": 5.0,
        "ncpu": 8,
        "load1": 1.0,
        "mem_used_bytes": 1,
        "mem_total_bytes": 2,
    },
    "gpus": [_GPU],
}


def _mutate(doc: object, rnd) -> object:
    """One random hostile change somewhere in a JSON document."""
    swaps = [
        "high",
        None,
        [],
        {},
        -1,
        10**30,
        float("inf"),
        "\x1b]0;PWNED\x07",
        True,
        "[@click=app.quit]q[/]",
        "\x1b[2J" * 50,
        "x" * 10_000,
        [1] * 100,
        {"a": [1]},
    ]
    if isinstance(doc, dict) and doc and rnd.random() < 0.8:
        key = rnd.choice(sorted(doc))
        out = dict(doc)
        out[key] = _mutate(doc[key], rnd)
        return out
    if isinstance(doc, list) and doc and rnd.random() < 0.8:
        out = list(doc)
        if rnd.random() < 0.3:
            out = out * rnd.choice([2, 70])  # duplicated indexes, too many GPUs
        i = rnd.randrange(len(out))
        out[i] = _mutate(out[i], rnd)
        return out
    return rnd.choice(swaps)


def _hostile_agent_lines(seed: int, n: int) -> list[str]:
    import json
    import random

    rnd = random.Random(seed)
    lines = []
    for i in range(n):
        kind = rnd.random()
        if kind < 0.7:
            doc = _mutate(_SAMPLE, rnd)
            for _ in range(rnd.randrange(3)):
                doc = _mutate(doc, rnd)
            lines.append(json.dumps(doc, allow_nan=True))
        elif kind < 0.8:
            lines.append(
                json.dumps(
                    {
                        "type": rnd.choice(["hello", "error", "x", None]),
                        "hostname": _mutate("h", rnd),
                        "message": _mutate("m", rnd),
                        "driver": _mutate("d", rnd),
                    }
                )
            )
        elif kind < 0.9:
            lines.append(
                bytes(rnd.randrange(256) for _ in range(rnd.randrange(60))).decode(
                    "utf-8", "replace"
                )
            )
        else:
            lines.append(json.dumps(_SAMPLE)[: rnd.randrange(1, 200)])
        if i % 10 == 9:  # a valid sample now and then: the host must recover each time
            lines.append(json.dumps(_SAMPLE))
    return lines


async def test_cockpit_survives_hostile_agent_lines_under_pilot() -> None:
    from tui.app import VerlTuiApp
    from tui.cluster.models import TelemetryState

    inv = parse_inventory(
        "cluster: fuzz\nhosts:\n  - name: h\n    transport: local\n    python: /bin/false\n"
        "  - name: g\n    transport: local\n    python: /bin/false\n"
    )
    app = VerlTuiApp(inv, interval=60)
    lines = _hostile_agent_lines(seed=1234, n=400)
    keys = [
        "j",
        "k",
        "g",
        "G",
        "s",
        "s",
        "f",
        "enter",
        "escape",
        "space",
        "question_mark",
        "escape",
        "1",
    ]
    async with app.run_test(size=(120, 36)) as pilot:
        for i, line in enumerate(lines):
            app.monitor.ingest_line("h" if i % 2 else "g", line)
            if i % 25 == 0:
                await pilot.press(keys[(i // 25) % len(keys)])
                await pilot.pause(0.05)
        await pilot.pause(0.3)
        assert app.is_running
        shot = app.export_screenshot()
        assert "PWNED" not in shot and "\x1b]0;" not in shot
        for name in ("h", "g"):
            ht = app.monitor.hosts[name]
            assert ht.state in (TelemetryState.OK, TelemetryState.NO_NVML), (ht.state, ht.error)
            assert (
                ht.latest is not None and ht.latest.gpus and ht.latest.gpus[0].util_percent == 50.0
            )
        problems = [p for ht in app.monitor.hosts.values() for p in ht.problems]
        assert problems  # the bad lines were noticed and reported, not swallowed
    assert app.return_code in (0, None)


# ---- a hostile debuggee: DAP framing from a port we attach to ---------------------------------


@pytest.mark.parametrize(
    "wire",
    [
        b"Content-Length: 99999999999999\r\n\r\n",  # would be 100 TB of memory
        b"Content-Length: -5\r\n\r\n",
        b"Content-Length: banana\r\n\r\n",
        b"Content-Length: 3\r\n\r\n[1]",
        b"Content-Length: 4\r\n\r\nnull",
        b"Content-Length: 2\r\n\r\n\xff\xfe",
        b"X-Other: 1\r\n\r\n{}",
        b'Content-Length: 61\r\n\r\n{"type":"response","request_seq":"x","success":true,"body":1}',
    ],
)
async def test_hostile_debuggee_ends_the_session_with_one_error(wire: bytes) -> None:
    import asyncio

    from tui.debug.dap import DapClient, DapError

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(1)  # the client's first request
        writer.write(wire)
        await writer.drain()
        await asyncio.sleep(5)
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        client = await DapClient.connect("127.0.0.1", port, timeout=5)
        t0 = time.monotonic()
        with pytest.raises(DapError) as err:
            await client.threads(timeout=3)
        assert time.monotonic() - t0 < 4.5
        assert "\n" not in str(err.value)
        await client.close()
