"""Shared pytest setup. tests/ is not a package (verl installs one named ``tests``): helpers
are imported by path, e.g. ``from fakenvml.fakenvml import FakeGpu``.

Tiers (markers registered in pyproject.toml), given here by the fixtures a test uses:
``ray`` (a Ray cluster fixture, or marked so because the test brings Ray up itself), ``ssh``
(namespace hosts), ``unit`` (neither); ``slow`` by the fixtures in SLOW_FIXTURES. A
contributor's loop: ``pytest -m "not ray and not slow"``; CI runs every tier.
"""

from __future__ import annotations

import gc
import os
import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
# The cockpit runs a supervisor (retries, the queue, job-end notifications) unless told not to:
# tests of other screens get none; tests of the supervisor in the cockpit turn it on.
os.environ.setdefault("VERL_TUI_SUPERVISE", "0")
# Every test process (each parallel worker) has a state folder of its own: no test reads or
# writes the user's, and workers never share a cluster lock or a queue by accident.
os.environ["XDG_STATE_HOME"] = tempfile.mkdtemp(prefix="verl-tui-test-state-")

from harness.fixtures import *  # noqa: F403
from harness.fixtures import RAY_SHARED, current_pool


def _compile_tui() -> None:
    """The run starts hundreds of `python -m tui` subprocesses. Where bytecode is not written
    (PYTHONDONTWRITEBYTECODE, as in CI's image) each one compiled every tui module it imports
    from source again: ~0.2 s of CPU a `submit`. Compiled once here, they read the cache."""
    if sys.dont_write_bytecode:
        import compileall

        compileall.compile_dir(Path(__file__).parents[1] / "tui", quiet=1)


_compile_tui()

# A test process holds verl, Hydra, torch and Textual (~1M tracked objects) and makes garbage
# fast (hundreds of apps, composes, parses): at Python's default young threshold (700) the
# collector took a quarter of the unit tier's CPU (15.5 of 64 s in test_rules, test_verl_schema,
# test_snapshots and test_palette; 5.3 s at 50,000). The warm CLI's children inherit it.
gc.set_threshold(50_000, 20, 20)

# Fixtures that put a test in a tier (transitively: a module fixture built on one counts).
RAY_FIXTURES = {"ray_pool", "ray_own", "ray_bring_up", *RAY_SHARED}
SSH_FIXTURES = {"ns_cluster3", "ns_cluster_factory", "ns_hosts"}
# ~1 min or more of setup each: verl's checkpoint trained on two CPU ranks; a Slurm controller
# and node daemons (test_slurm); podman containers with Ray inside (test_container); a wheel
# built from this tree (test_presets).
SLOW_FIXTURES = {"fsdp_checkpoint", "slurm", "podhosts", "wheel_site"}


def _tier(item: pytest.Item) -> None:
    names = set(getattr(item, "fixturenames", ()))
    if names & RAY_FIXTURES:
        item.add_marker(pytest.mark.ray)
    if item.get_closest_marker("ray") or names & SSH_FIXTURES:
        item.add_marker(pytest.mark.ssh)
    if names & SLOW_FIXTURES:
        item.add_marker(pytest.mark.slow)
    if not (item.get_closest_marker("ray") or item.get_closest_marker("ssh")):
        item.add_marker(pytest.mark.unit)


def _shared(item: pytest.Item) -> set[str]:
    return set(getattr(item, "fixturenames", ())) & set(RAY_SHARED)


def _group_by_shared_cluster(items: list[pytest.Item]) -> None:
    """Modules leasing the same shared cluster run one after the other (where the first of them
    would), so each shared cluster is brought up once and stopped as soon as they are done."""
    modules: dict[Path, list[pytest.Item]] = {}
    for item in items:
        modules.setdefault(item.path, []).append(item)
    order: list[list[list[pytest.Item]]] = []
    groups: dict[str, list[list[pytest.Item]]] = {}
    for its in modules.values():
        key = min(set().union(*(_shared(it) for it in its)), default=None)
        if key is None:
            order.append([its])
        elif key in groups:
            groups[key].append(its)
        else:
            groups[key] = [its]
            order.append(groups[key])
    items[:] = [it for group in order for its in group for it in its]


# Session fixtures made once per test process: with parallel workers, the modules using one of
# these run on one worker, so it is still made once (a shared Ray cluster goes by its fixture).
ONE_WORKER_FIXTURES = frozenset({"fsdp_checkpoint", "slurm", "podhosts", "wheel_site"})


def _worker_groups(items: list[pytest.Item], *, reorder: bool) -> None:
    """Parallel workers (pytest-xdist, `--dist loadgroup`, as run-tests runs the suite) get whole
    groups: a module's tests stay together (its module fixtures, a cluster of its own, are made
    once), and modules sharing a costly session resource (a shared Ray cluster, the trained
    checkpoint, Slurm, podman hosts, the built wheel) form one group, joined transitively."""
    modules: dict[Path, list[pytest.Item]] = {}
    for item in items:
        modules.setdefault(item.path, []).append(item)
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.setdefault(x, x) != x:
            x = parent[x]
        return x

    uses: dict[Path, set[str]] = {}
    for path, its in modules.items():
        names = set().union(*(set(getattr(it, "fixturenames", ())) for it in its))
        uses[path] = {f"fixture:{n}" for n in names & (set(RAY_SHARED) | ONE_WORKER_FIXTURES)}
        first = f"module:{path}"
        for resource in uses[path]:
            parent[find(resource)] = find(first)
    groups: dict[str, list[pytest.Item]] = {}
    for path, its in modules.items():
        group = find(f"module:{path}")
        for it in its:
            it.add_marker(pytest.mark.xdist_group(group))
        groups.setdefault(group, []).extend(its)
    if not reorder:  # one process: the order of the modules as they are
        return
    # Longest first (run-tests passes --no-loadscope-reorder, so workers take groups in this
    # order): the run ends with short groups filling the workers' last minutes.
    ordered = sorted(groups.values(), key=lambda its: -sum(_cost(it) for it in its))
    items[:] = [it for its in ordered for it in its]


def _cost(item: pytest.Item) -> float:
    """A test's expected seconds on the 2-core CI machine, by tier (a rough order, not a clock)."""
    cost = 1.0
    if item.get_closest_marker("ray"):
        cost = 25.0
    elif item.get_closest_marker("ssh"):
        cost = 6.0
    return cost + (40.0 if item.get_closest_marker("slow") else 0.0)


# tryfirst: pytest-xdist's worker reads the xdist_group marks in its own hook of this name (to
# put "@group" on each node id); run after it, the marks were ignored and a module's tests were
# spread over the workers, out of their order (test_archive_cluster's later tests ran before
# the one whose runs they read).
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        _tier(item)
    _group_by_shared_cluster(items)
    _worker_groups(items, reorder=getattr(config.option, "dist", "no") != "no")


# For each test: the shared clusters it or a later test leases (after -m/-k deselection).
_needed_from: dict[str, frozenset[str]] = {}


def pytest_collection_finish(session: pytest.Session) -> None:
    later: frozenset[str] = frozenset()
    for item in reversed(session.items):
        later = later | _shared(item)
        _needed_from[item.nodeid] = later


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None):
    """A shared cluster no later test leases is stopped now, not at the session's end: an idle
    Ray costs the tests after it CPU on a 2-core machine."""
    result = yield
    pool = current_pool()
    if pool is not None and nextitem is not None:
        needed = {RAY_SHARED[n] for n in _needed_from.get(nextitem.nodeid, ())}
        for shape in pool.live():
            if shape not in needed:
                pool.stop(shape)
    return result


# Where the run's time went, by module and by tier: CI prints only the tail of its output, and
# the suite's time is a budget (docs/tests.md).
_spent: dict[str, float] = {}
_tier_spent: dict[str, float] = {}


# VERL_TUI_TEST_CPU=FILE (as root): the run moves into a cpuacct cgroup of its own, so a test's
# CPU counts everything it started — namespace hosts, Ray's daemons, CLI subprocesses — and each
# test's CPU and wall seconds go to FILE as JSON lines. The suite is CPU-bound on 2 cores: this,
# not wall time, says which tests to make cheaper. One process (VERL_TUI_TEST_WORKERS=0): with
# parallel workers a test's figure would hold the other worker's CPU too. A cgroup a run: two
# measured runs at once each count their own.
_CPU_LOG = os.environ.get("VERL_TUI_TEST_CPU")
_CPUACCT = Path(f"/sys/fs/cgroup/cpuacct/verl-tui-tests-{os.getpid()}")


def _cpu_ns() -> int:
    return int((_CPUACCT / "cpuacct.usage").read_text())


def pytest_sessionstart(session: pytest.Session) -> None:
    if _CPU_LOG and not hasattr(session.config, "workerinput"):
        _CPUACCT.mkdir(exist_ok=True)
        (_CPUACCT / "cgroup.procs").write_text(str(os.getpid()))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    if not _CPU_LOG:
        return (yield)
    import json
    import time

    cpu0, wall0 = _cpu_ns(), time.monotonic()
    result = yield
    record = {
        "test": item.nodeid,
        "cpu_s": round((_cpu_ns() - cpu0) / 1e9, 3),
        "wall_s": round(time.monotonic() - wall0, 3),
        "tier": next((t for t in ("ray", "ssh", "unit") if item.get_closest_marker(t)), "unit"),
    }
    with open(_CPU_LOG, "a", encoding="utf-8") as out:
        out.write(json.dumps(record) + "\n")
    return result


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    module = report.nodeid.split("::")[0]
    _spent[module] = _spent.get(module, 0.0) + report.duration
    tier = next((t for t in ("ray", "ssh", "unit") if t in report.keywords), "unit")
    tier += "+slow" if "slow" in report.keywords else ""
    _tier_spent[tier] = _tier_spent.get(tier, 0.0) + report.duration


def _time_summary(write) -> None:
    if not _spent:
        return
    write(
        "time by tier: "
        + ", ".join(f"{t} {s:.0f} s" for t, s in sorted(_tier_spent.items(), key=lambda x: -x[1]))
    )
    top = sorted(_spent.items(), key=lambda x: -x[1])[:30]
    write("slowest modules: " + ", ".join(f"{m.removeprefix('tests/')} {s:.0f}" for m, s in top))


def pytest_unconfigure(config: pytest.Config) -> None:
    # After pytest's last line ("N passed in …"), so that the tail CI keeps holds it.
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        _time_summary(reporter.write_line)


def pytest_terminal_summary(terminalreporter) -> None:
    pool = current_pool()
    if pool is not None and (pool.bring_ups or pool.rebuilds):
        ups = ", ".join(f"{s.name} ×{n}" for s, n in pool.bring_ups.items())
        terminalreporter.write_line(f"shared Ray clusters brought up: {ups}")
        for why in pool.rebuilds:
            terminalreporter.write_line(f"shared Ray cluster rebuilt after a module: {why}")


# --- fake NVML (tests/fakenvml) -------------------------------------------------------------


@pytest.fixture(scope="session")
def fake_nvml_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Directory holding the fake libnvidia-ml.so.1: put it on LD_LIBRARY_PATH."""
    from fakenvml.fakenvml import build_fake_nvml

    return build_fake_nvml(tmp_path_factory.mktemp("fakenvml"))


# --- verl's FSDP checkpoint (tests/ckpt) ----------------------------------------------------

CKPT_STEP = 3


@pytest.fixture(scope="session")
def fsdp_checkpoint(tmp_path_factory: pytest.TempPathFactory):
    """A world-size-2 verl FSDP checkpoint at step CKPT_STEP (two CPU ranks train it: ~1 min),
    written once per run; tests read it or copy from it, never write into it (checked at the
    end of the run)."""
    from ckpt.make_fsdp_checkpoint import make_fsdp_checkpoint

    made = make_fsdp_checkpoint(tmp_path_factory.mktemp("fsdp_ckpt") / "run", CKPT_STEP)
    before = _tree_state(made["out_dir"].parent)
    yield made
    assert _tree_state(made["out_dir"].parent) == before, "a test wrote into fsdp_checkpoint"


def _tree_state(root: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(autouse=True)
def _this_pythons_verl():
    """Each test starts composing from this Python's verl: a test that ran a command in-process
    against a cluster leaves the cluster's (cached, partial) verl selected otherwise."""
    yield
    from tui.jobs.verl_select import use_source

    use_source(None)
