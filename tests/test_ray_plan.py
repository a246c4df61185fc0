"""What `ray start` runs with (tui/cluster/ray_plan.py ray_env): Ray's own 30 s wait for the
head's dashboard module processes follows hosts.yaml `ray: start_timeout:` (the deadline `up`
names when the dashboard does not answer), and hosts.yaml `ray: env:` wins over it."""

from __future__ import annotations

import pytest

from tui.cluster.probe import HostFacts
from tui.cluster.ray_plan import DASHBOARD_MODULE_WAIT, ray_env
from tui.config.hosts import parse_inventory

HOSTS = "python: /opt/venv/bin/python\nhosts:\n  - name: a\n    address: 10.0.0.1\n"


@pytest.mark.parametrize(
    ("ray", "wait"),
    [
        ("", "120"),  # start_timeout's default
        ("ray:\n  start_timeout: 150\n", "150"),
        ("ray:\n  start_timeout: 12.5\n", "30"),  # never below Ray's own
        ("ray:\n  start_timeout: 150\n  env:\n    " + DASHBOARD_MODULE_WAIT + ": '45'\n", "45"),
    ],
)
def test_dashboard_modules_wait_as_long_as_the_bring_up(ray: str, wait: str) -> None:
    inv = parse_inventory(ray + HOSTS)
    env = ray_env(inv, inv.host("a"), HostFacts(host="a", ok=True, path_env="/usr/bin:/bin"))
    assert env[DASHBOARD_MODULE_WAIT] == wait
    assert env["PATH"] == "/opt/venv/bin:/usr/bin:/bin"
