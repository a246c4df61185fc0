"""The Prometheus endpoint (issue 29, item 5), without Ray: a snapshot served by prometheus_client's
own HTTP server on a loopback port, scraped over HTTP and read back with prometheus_client's
own parser (text_string_to_metric_families); hostile label values (a metric key with quotes,
a newline and an escape) stay one label; NaN/Inf values are served as such. The listen address:
loopback only, refused with one line otherwise (the CLI without --public, hosts.yaml always,
with file:line). tests/test_metrics_file.py scrapes a real Ray job's metrics."""

from __future__ import annotations

import math
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tui.config.listen import ListenError, parse_listen
from tui.export.prometheus import Exporter, GpuRow, JobMetrics, Snapshot


def scrape(host: str, port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of http://host:port/metrics, parsed by prometheus_client's own parser."""
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_served_snapshot_parses_back() -> None:
    exporter = Exporter(None, None)  # type: ignore[arg-type] - refresh() is not called here
    evil = 'actor/"kl"\n\x1b[31m'
    exporter.snapshot = Snapshot(
        taken=1700000000.0,
        hosts={"node1": True, "node2": False},
        gpus=[GpuRow("node1", 0, "H200", 93.0, 5 << 30, 141 << 30, 61.0, 512.5)],
        jobs=[("raysubmit_a", "RUNNING"), ("raysubmit_b", "FAILED")],
        metrics={
            "raysubmit_a": JobMetrics(
                7,
                "file:/w/p/e.jsonl",
                {"critic/score/mean": 0.625, "actor/entropy": math.nan, evil: math.inf},
                {"kl": 2},
            )
        },
    )
    host, port = exporter.serve("127.0.0.1", 0)
    try:
        got = scrape(host, port)
    finally:
        exporter.close()
    gpu = (("gpu", "0"), ("host", "node1"), ("name", "H200"))
    assert got[("verl_tui_gpu_utilization_percent", gpu)] == 93.0
    assert got[("verl_tui_gpu_memory_used_bytes", gpu)] == 5 << 30
    assert got[("verl_tui_gpu_power_watts", gpu)] == 512.5
    assert got[("verl_tui_host_up", (("host", "node2"),))] == 0.0
    assert got[("verl_tui_job_state", (("job", "raysubmit_b"), ("state", "FAILED")))] == 1.0
    assert got[("verl_tui_jobs", (("state", "RUNNING"),))] == 1.0
    assert (
        got[("verl_tui_training_step", (("job", "raysubmit_a"), ("source", "file:/w/p/e.jsonl")))]
        == 7
    )
    job = ("job", "raysubmit_a")
    assert got[("verl_tui_training_metric", (job, ("key", "critic/score/mean")))] == 0.625
    assert math.isnan(got[("verl_tui_training_metric", (job, ("key", "actor/entropy")))])
    # The hostile key is one label value, cleaned (no newline or escape reaches a dashboard).
    (odd,) = [k for (n, k) in got if n == "verl_tui_training_metric" and "kl" in str(k)]
    assert got[("verl_tui_training_metric", odd)] == math.inf
    assert "\n" not in dict(odd)["key"] and "\x1b" not in dict(odd)["key"]
    assert got[("verl_tui_health_alerts", (job, ("rule", "kl")))] == 2.0


def test_listen_address_is_loopback_unless_asked(tmp_path: Path) -> None:
    assert parse_listen("127.0.0.1:9400") == ("127.0.0.1", 9400)
    assert parse_listen("[::1]:9") == ("::1", 9) and parse_listen("localhost:1")[0] == "127.0.0.1"
    assert parse_listen("0.0.0.0:9400", public=True) == ("0.0.0.0", 9400)
    for bad, why in (
        ("0.0.0.0:9400", "not a loopback address"),
        ("10.1.2.3:80", "not a loopback address"),
        ("127.0.0.1", "expected HOST:PORT"),
        ("127.0.0.1:0", "out of range"),
        ("127.0.0.1:x", "not a number"),
        ("example.com:80", "IP address or localhost"),
    ):
        with pytest.raises(ListenError, match=why):
            parse_listen(bad)
    # The CLI: one line, exit 2, before anything connects.
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text("hosts:\n  - name: a\n    address: 127.0.0.1\n    transport: local\n")
    res = subprocess.run(
        [sys.executable, "-m", "tui", "export", str(hosts), "--prometheus", "0.0.0.0:9400"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "not a loopback address" in res.stderr and "--public" in res.stderr
    # hosts.yaml: checked where the file is loaded, named file:line.
    from tui.config.hosts import load_inventory
    from tui.config.yamlfile import ConfigError

    hosts.write_text(hosts.read_text() + "prometheus: 192.0.2.1:9400\n")
    with pytest.raises(ConfigError, match=rf"{hosts}:5: prometheus: .*not a loopback"):
        load_inventory(hosts)
    hosts.write_text(hosts.read_text().replace("192.0.2.1", "127.0.0.1"))
    assert load_inventory(hosts).prometheus == "127.0.0.1:9400"


async def test_the_cockpit_serves_what_hosts_yaml_asks(tmp_path: Path, monkeypatch) -> None:
    """hosts.yaml `prometheus:`: the cockpit itself serves /metrics while it runs (its own
    telemetry: a local host's real GPU agent), and stops serving when it quits."""
    import asyncio
    import socket

    from tui.app import VerlTuiApp
    from tui.config.hosts import load_inventory

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(
        f"cluster: prom\nprometheus: 127.0.0.1:{port}\n"
        "hosts:\n  - name: a\n    address: 127.0.0.1\n    transport: local\n"
    )
    monkeypatch.setenv("VERL_TUI_SUPERVISE", "0")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    app = VerlTuiApp(load_inventory(hosts), interval=0.5)
    async with app.run_test(size=(120, 40)) as pilot:
        got: dict = {}
        for _ in range(200):
            try:
                got = await asyncio.to_thread(scrape, "127.0.0.1", port)
            except OSError:
                got = {}
            if got.get(("verl_tui_host_up", (("host", "a"),))) == 1.0:
                break
            await pilot.pause(0.1)
        assert got.get(("verl_tui_host_up", (("host", "a"),))) == 1.0, got
        assert ("verl_tui_refresh_errors", ()) in got  # Ray is not up here: the head not read
    with pytest.raises(OSError):
        await asyncio.to_thread(scrape, "127.0.0.1", port)
