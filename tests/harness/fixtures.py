"""pytest fixtures for real SSH hosts in network namespaces (see harness.nshosts).

tests/conftest.py imports them with ``from harness.fixtures import *``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from harness.nshosts import HarnessError, NsCluster

__all__ = ["ns_cluster3", "ns_cluster_factory"]

MakeCluster = Callable[..., NsCluster]


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
def ns_cluster3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NsCluster]:
    """Three started hosts (node1..node3) shared by the whole session: leave them as found
    (use ns_cluster_factory for tests that kill hosts or cut links)."""
    cluster = NsCluster(3, tmp_path_factory.mktemp("ns_cluster3"))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
