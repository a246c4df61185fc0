"""bench/keys_under_load.py keeps working: its measuring function on 4 simulated hosts.

Real parts: bench/simhosts.py's asyncssh servers stream agent lines over SSH to the real
cockpit (VerlTuiApp, headless); keys go through Textual's pilot. Timings are not asserted
(issue 16's numbers live in bench/results), only that every key class was pressed, answered
and drawn, with the figures the README quotes present.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))

import keys_under_load  # noqa: E402
from telemetry_fanin import start_sim, stop_sim  # noqa: E402


@pytest.fixture(scope="module")
def sim_hosts(tmp_path_factory):
    sim, hosts_yaml = start_sim(4, str(tmp_path_factory.mktemp("keysim")), 0.5, None)
    yield hosts_yaml
    stop_sim(sim)


def _check(result: dict, presses: int) -> None:
    assert "error" not in result, result.get("error")
    assert result["presses"] == presses
    assert result["timeouts"] == 0, [r for r in result["presses_detail"] if r["drawn_ms"] is None]
    keys = result["keys"]
    for cls in (*keys_under_load.CLASSES, "overall"):
        entry = keys[cls]
        assert entry["n"] > 0, cls
        assert entry["timeouts"] == 0
        # drawn ≥ handled: a press is answered only once its effect is on the screen
        assert 0 < entry["p50"] <= entry["p95"] <= entry["max"], (cls, entry)
        assert entry["handled_p95_ms"] <= entry["max"]
    assert keys["overall"]["n"] == presses
    assert result["cpu_percent"] > 0


def test_keys_while_streaming(sim_hosts: str) -> None:
    result = asyncio.run(
        keys_under_load.measure(
            sim_hosts, 4, mode="stream", presses=24, gap=(0.03, 0.06), warmup=0.3, interval=0.5
        )
    )
    _check(result, 24)
    # the telemetry kept reaching the screen while the keys were pressed
    assert result["telemetry_latency_ms"]["n"] > 0
    # every filter character narrowed or widened the table through set_filter, and the
    # kept filter was cleared again with escape or is still there: the table is not empty
    assert result["rows_at_end"] > 0


def test_keys_static_baseline(sim_hosts: str) -> None:
    result = asyncio.run(
        keys_under_load.measure(sim_hosts, 4, mode="static", presses=24, gap=(0.03, 0.06))
    )
    _check(result, 24)
    assert result["telemetry_latency_ms"] is None
