"""pytest fixtures for real SSH hosts in network namespaces (see harness.nshosts) and Ray on them
(see harness.raycluster).

tests/conftest.py imports them with ``from harness.fixtures import *``; it marks a test's tier by
the fixtures it uses (ns_* → ssh, ray_* → ray) and stops a shared cluster once no later test
needs it (`RAY_SHARED`).
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from harness.nshosts import HarnessError, NsCluster
from harness.raycluster import Lease, RayPool, Shape, head_ray_logs, ray_up, running_ray

__all__ = [
    "RAY_SHARED",
    "current_pool",
    "ns_cluster3",
    "ns_cluster_factory",
    "ns_hosts",
    "ray_bring_up",
    "ray_own",
    "ray_pool",
    "ray_shared1",
    "ray_shared2",
]

MakeCluster = Callable[..., NsCluster]

# The shared shapes, by the fixture that leases each for a module. Ray is told 12 CPUs and 4
# GPUs per host, so verl's sizing rules and the queue's GPU waits can pass on this machine.
RAY_SHARED = {
    "ray_shared1": Shape(1, "num_cpus: 12", num_gpus=4),
    "ray_shared2": Shape(2, "num_cpus: 12", num_gpus=4),
}

_pool: RayPool | None = None


def current_pool() -> RayPool | None:
    """The session's RayPool once a test asked for it (conftest stops its idle clusters and
    reports its bring-ups)."""
    return _pool


def _stop_all(clusters: list[NsCluster]) -> None:
    errors = []
    for cluster in reversed(clusters):
        try:
            cluster.stop()
        except HarnessError as exc:
            errors.append(exc)
    if errors:
        raise errors[0]


@pytest.fixture
def ns_cluster_factory(tmp_path: Path) -> Iterator[MakeCluster]:
    """`make(count, host_env=None, **kw) -> NsCluster`, already started; all stopped at teardown.

    Extra keyword arguments go to NsCluster (e.g. ``prefix=``, ``start_timeout=``).
    """
    made: list[NsCluster] = []

    def make(count: int, host_env: dict[str, dict[str, str]] | None = None, **kw) -> NsCluster:
        cluster = NsCluster(count, tmp_path / f"nscluster{len(made)}", host_env=host_env, **kw)
        made.append(cluster)
        cluster.start()
        return cluster

    yield make
    _stop_all(made)


@pytest.fixture(scope="session")
def ns_hosts() -> Iterator[Callable[..., NsCluster]]:
    """`make(count, workdir, host_env=None, **kw) -> NsCluster`, started, for a module fixture
    that keeps its own hosts (it stops them; any left running are stopped at the session's end)."""
    made: list[NsCluster] = []

    def make(
        count: int, workdir: Path, host_env: dict[str, dict[str, str]] | None = None, **kw
    ) -> NsCluster:
        cluster = NsCluster(count, workdir, host_env=host_env, **kw)
        made.append(cluster)
        cluster.start()
        return cluster

    yield make
    _stop_all(made)


@pytest.fixture(scope="session")
def ns_cluster3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NsCluster]:
    """Three started hosts (node1..node3) shared by the whole session: leave them as found
    (use ns_cluster_factory for tests that kill hosts or cut links)."""
    cluster = NsCluster(3, tmp_path_factory.mktemp("ns_cluster3"))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def ray_pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayPool]:
    """The session's shared Ray clusters, by shape (harness.raycluster.RayPool)."""
    global _pool
    _pool = RayPool(tmp_path_factory.mktemp("raypool"))
    try:
        yield _pool
    finally:
        _pool.stop_all()


def _lease(
    pool: RayPool, name: str, request: pytest.FixtureRequest, factory: pytest.TempPathFactory
) -> Iterator[Lease]:
    work = factory.mktemp(f"{request.module.__name__.rsplit('.', 1)[-1]}-{name}")
    with pool.lease(RAY_SHARED[name], work) as lease:
        yield lease


@pytest.fixture(scope="module")
def ray_shared1(ray_pool, request, tmp_path_factory) -> Iterator[Lease]:
    """One host with Ray up, shared with other modules: leave it as found (jobs left running
    are stopped after the module; a killed host or a Ray node gone makes the pool rebuild)."""
    yield from _lease(ray_pool, "ray_shared1", request, tmp_path_factory)


@pytest.fixture(scope="module")
def ray_shared2(ray_pool, request, tmp_path_factory) -> Iterator[Lease]:
    """Two hosts with Ray up, shared with other modules, as ray_shared1."""
    yield from _lease(ray_pool, "ray_shared2", request, tmp_path_factory)


@pytest.fixture(scope="session")
def ray_own() -> Callable[..., contextlib.AbstractContextManager]:
    """`with ray_own(work, count, ray_extra=..., num_gpus=...) as (cluster, path, env)`: a
    module's own hosts with Ray up, for tests that kill hosts, cut links or restart Ray."""
    return running_ray


@pytest.fixture(scope="session")
def ray_bring_up() -> Callable[..., subprocess.CompletedProcess]:
    """`ray_bring_up(env, hosts_yaml, timeout=240, cluster=None)`: `verl-tui up` for a module
    fixture that brings Ray up on hosts of its own making (their env, a container); fails with
    up's output (and the head's Ray logs when `cluster` is given), returns the finished
    process."""

    def up(
        env: dict[str, str], path: Path, timeout: float = 240, cluster: NsCluster | None = None
    ) -> subprocess.CompletedProcess:
        done = ray_up(env, path, timeout)
        if done.returncode != 0:
            logs = head_ray_logs(cluster) if cluster is not None else ""
            raise AssertionError(f"verl-tui up failed:\n{done.stdout}{done.stderr}{logs}")
        return done

    return up
