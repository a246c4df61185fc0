"""Issue 31 (thousands of hosts): the cockpit's per-host work every second.

A delta line is checked whole at the boundary, but its GpuSample objects are built only when
read (models.DeltaSample): what every host needs every second (the totals, the history values)
comes from the check itself. These tests hold the lazy sample to the eager decoder's answer for
the same lines (GPUs, totals, histories, health carried over), and to its refusals; and they
check the limits sized for 4,096 hosts (hosts.yaml's value cap) and that the GPU table rebuilds
its rows only where a host's change moves them. Pure Python: no hosts, no Ray.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import fields

import pytest

from tui.cluster.agent_delta import BadDelta, apply_delta
from tui.cluster.agent_schema import parse_line
from tui.cluster.models import (
    DELTA_METRICS,
    DeltaSample,
    GpuSample,
    GpuTotals,
    HostSample,
    HostTelemetry,
)
from tui.cluster.relay_plan import relay_groups
from tui.config.hosts import load_inventory
from tui.config.yamlfile import MAX_VALUES, ConfigError
from tui.remote.gpu_common import DeltaEncoder
from tui.transport.types import HostState, LinkStatus
from tui.widgets.gpu_table import GpuTable, RankedGpus, Row, RowIndex

GIB = 1 << 30


def _agent_sample(seq: int, rng: random.Random, *, gpus: int = 4, health: bool = False) -> dict:
    """An agent record as gpu_common builds it: some values missing, a GPU with an error."""
    rows = []
    for i in range(gpus):
        used = rng.choice([None, rng.randrange(0, 80 * GIB)])
        rows.append(
            {
                "index": i,
                "name": "NVIDIA H200",
                "uuid": f"GPU-{i}",
                "util_percent": rng.choice([None, float(rng.randrange(0, 101))]),
                "mem_util_percent": float(rng.randrange(0, 101)),
                "memory_used_bytes": used,
                "memory_total_bytes": {1: None, 3: 0}.get(i, 80 * GIB),
                "temperature_c": float(rng.randrange(20, 90)),
                "power_w": rng.choice([None, round(rng.uniform(50, 700), 2)]),
                "power_limit_w": 700.0,
                "util_window_s": 1.0,
                "sm_clock_mhz": rng.choice([None, rng.randrange(200, 2000)]),
                "processes": [
                    {"pid": 100 + i, "name": "python", "memory_bytes": rng.randrange(0, GIB)}
                ]
                if i % 2 == 0
                else None,
                "error": "GPU is lost" if i == 2 else None,
            }
        )
        if health:
            rows[-1]["health"] = {"ecc_mode": True, "xid_count": i}
    host = {"cpu_percent": 12.5, "load1": 1.0, "mem_used_bytes": GIB, "mem_total_bytes": 8 * GIB}
    return {"type": "sample", "seq": seq, "t": 1000.0 + seq, "host": host, "gpus": rows}


def _eager(sample: HostSample) -> HostSample:
    """The same sample as a plain HostSample holding the decoder's GPUs."""
    gpus = sample._build(sample._rows, sample._base_gpus) if type(sample) is DeltaSample else ()
    return HostSample(
        sample.seq,
        sample.t,
        sample.received,
        sample.source,
        sample.error,
        sample.cpu_percent,
        sample.load1,
        sample.mem_used_bytes,
        sample.mem_total_bytes,
        sample.ncpu,
        gpus or sample.gpus,
    )


def _totals(gpus: tuple[GpuSample, ...]) -> GpuTotals:
    return HostSample(0, 0.0, 0.0, "nvml", None, None, None, None, None, None, gpus).totals()


def _host(name: str = "h") -> HostTelemetry:
    return HostTelemetry(name, LinkStatus(name, HostState.UP), history_len=50)


def test_lazy_delta_samples_equal_the_decoders_answer():
    """Over many seconds of the real agent's delta lines (values missing, zero memory totals,
    a GPU with an error, processes on some GPUs): the lazy sample's GPUs, once read, are the
    decoder's; its totals are HostSample.totals() of those GPUs; the histories recorded
    without building them equal those recorded from built ones; health rides on as before."""
    rng = random.Random(31)
    enc = DeltaEncoder(full_every=1000)
    lazy_host, eager_host = _host(), _host()
    base = None
    lazy_seen = 0
    for seq in range(1, 120):
        msg = enc.encode(_agent_sample(seq, rng, health=seq in (1, 60)))
        line = json.dumps(msg)
        if msg["type"] == "sample":  # the first, and one with new health readings
            base = parse_line(line, 0.0).sample
            assert base is not None and base.gpus[0].health is not None
            lazy_host.record(base)
            eager_host.record(base)
            continue
        sample = apply_delta(line, base, 5.0)
        eager = _eager(sample)
        if type(sample) is DeltaSample:
            lazy_seen += 1
            assert sample.gpu_count == len(base.gpus)
            assert sample.totals() == _totals(eager.gpus)
        lazy_host.record(sample)
        eager_host.record(eager)
        if seq % 7 == 0:  # read now and then, as the screen does for rows it shows
            assert sample.gpus == eager.gpus
            assert [g.health for g in sample.gpus] == [
                None if g.error else base.gpus[g.index].health for g in sample.gpus
            ]
        for index in eager_host.util_history:
            assert list(lazy_host.util_history[index]) == list(eager_host.util_history[index])
            assert list(lazy_host.mem_history[index]) == list(eager_host.mem_history[index])
    assert lazy_seen > 100  # the agent's own lines take the lazy path


def test_values_not_taken_outright_go_the_decoders_way():
    """A value the decoder converts (a float holding an integer) gives an eager sample with the
    int; a bad value or shape is refused with the decoder's own path and words."""
    base = parse_line(json.dumps(_agent_sample(1, random.Random(2))), 0.0).sample
    assert base is not None
    n = len(DELTA_METRICS)
    used = [m.key for m in DELTA_METRICS].index("memory_used_bytes")

    def delta(rows: list) -> str:
        return json.dumps({"type": "delta", "seq": 2, "base": 1, "host": [1, 1, 1], "gpus": rows})

    rows = [[None] * n + [None] for _ in base.gpus]
    rows[1][used] = 1024.0
    got = apply_delta(delta(rows), base, 0.0)
    assert type(got) is HostSample and type(got.gpus[1].memory_used_bytes) is int
    assert got.totals() == _totals(got.gpus)
    rows[1][used] = -5
    with pytest.raises(BadDelta, match=rf"delta\.gpus\[1\]\[{used}\] \(got -5\)"):
        apply_delta(delta(rows), base, 0.0)
    rows[1][used] = None
    rows[0][n] = [True]  # a process's memory: a bool is not a number
    with pytest.raises(BadDelta, match=rf"delta\.gpus\[0\]\[{n}\]"):
        apply_delta(delta(rows), base, 0.0)
    rows[0][n] = [1, 2]  # not the base's processes
    with pytest.raises(BadDelta, match="not the base's processes"):
        apply_delta(delta(rows), base, 0.0)
    with pytest.raises(BadDelta, match=rf"not a list of {n + 1}"):
        apply_delta(delta([[1.0], *rows[1:]]), base, 0.0)


def test_delta_sample_fields_are_the_host_samples():
    """DeltaSample adds no public field: what reads a HostSample reads it the same way."""
    assert {f.name for f in fields(DeltaSample)} == {f.name for f in fields(HostSample)}
    assert not hasattr(DeltaSample, "__post_init__")


def _hosts_yaml(path, n: int) -> None:
    lines = ["cluster: big", "ssh:", "  user: train", "hosts:"]
    for i in range(n):
        lines += [
            f"  - name: node{i:04d}",
            f"    address: 10.{i >> 8}.{i & 255}.1",
            "    python: /opt/venv/bin/python",
            "    ssh: {port: 22, user: train}",
        ]
    path.write_text("\n".join(lines) + "\n")


def test_hosts_yaml_of_4096_hosts_loads(tmp_path):
    """4,096 hosts of 12 values each load (the value cap was ~3,400 such hosts), in relay
    groups; one file past the cap is refused in one line naming it."""
    path = tmp_path / "hosts.yaml"
    _hosts_yaml(path, 4096)
    t0 = time.process_time()
    inventory = load_inventory(path)
    assert len(inventory.hosts) == 4096
    assert len(relay_groups(inventory)) == 4096 // inventory.telemetry.relay_group
    print(f"4,096-host hosts.yaml loaded in {time.process_time() - t0:.2f} s of CPU")
    path.write_text("hosts: [" + "1," * MAX_VALUES + "1]\n")
    with pytest.raises(ConfigError, match=rf"hosts\.yaml:1: more than {MAX_VALUES} values"):
        load_inventory(path)


def test_table_rows_follow_a_state_change_only_where_they_depend_on_it():
    """Sorted by name with no filter, a host going stale repaints its row: the rows (and so
    their order) depend only on its GPU count. Sorted by state or filtered, they move."""
    table = GpuTable()
    ht = _host("a")
    ht.record(HostSample(1, 0.0, 0.0, "nvml", None, None, None, None, None, None, ()))
    for sort_key, filter_text, moves in (
        ("name", "", False),
        ("state", "", True),
        ("name", "a", True),
    ):
        table.sort_key, table.filter_text = sort_key, filter_text
        ht.link = LinkStatus("a", HostState.UP)
        before = table._host_shape(ht)
        ht.link = LinkStatus("a", HostState.LOST)
        assert (table._host_shape(ht) != before) is moves, (sort_key, filter_text)


def test_full_samples_of_4096_hosts_keep_their_sanitized_texts():
    """Every GPU uuid of 4,096 8-GPU hosts stays sanitized in the text cache (at 8,192 entries a
    1,024-host fleet emptied it again and again); a long raw string is sanitized, not kept."""
    from tui.cluster import agent_schema

    cache = agent_schema._TEXT_CACHE
    cache.clear()
    rng = random.Random(4)
    for host in range(4096):
        sample = _agent_sample(1, rng, gpus=8)
        for gpu in sample["gpus"]:
            gpu["uuid"] = f"GPU-{host:05d}-{gpu['index']}"
        assert agent_schema.parse_message(sample, 0.0).sample is not None
    assert sum(1 for k in cache if k.startswith("GPU-")) == 4096 * 8
    long_name = "x" * (agent_schema._TEXT_CACHE_KEY_MAX + 1)
    gpu = {"index": 0, "name": long_name}
    got = agent_schema.parse_message({"type": "sample", "gpus": [gpu]}, 0.0).sample
    assert got is not None and got.gpus[0].name == long_name[: agent_schema.NAME_LEN - 1] + "…"
    assert long_name not in cache
    cache.clear()


def _built(sample: HostSample) -> bool:
    """Whether a delta sample's GpuSample objects exist yet (read without building them)."""
    from tui.cluster.models import _GPUS_SLOT

    try:
        _GPUS_SLOT.__get__(sample, DeltaSample)
    except AttributeError:
        return False
    return True


def test_row_index_reads_as_the_list_of_rows():
    """The table's rows (a RowIndex: hosts and their shown GPU indices) read, slice, search
    and compare as the list of Row objects they stand for; a folded or filtered-out GPU is
    not among them."""
    hosts, gpus = ["b", "a", "c"], [(3, 0), (), (7,)]
    rows = RowIndex(hosts, gpus)
    want = [Row("b"), Row("b", 3), Row("b", 0), Row("a"), Row("c"), Row("c", 7)]
    assert list(rows) == want and rows == want and len(rows) == 6
    assert [rows[i] for i in range(6)] == want and rows[-1] == Row("c", 7)
    assert rows[1:4] == want[1:4] and rows[4:] == want[4:]
    assert [rows.index(r) for r in want] == list(range(6))
    for missing in (Row("b", 1), Row("d"), Row("a", 0), "b"):
        assert missing not in rows
        with pytest.raises(ValueError):
            rows.index(missing)
    with pytest.raises(IndexError):
        rows[6]
    assert rows != want[:-1] and RowIndex([], []) == [] and len(RowIndex([], [])) == 0
    # Under a metric sort a host's GPUs are ranked when first read: by value, filtered.
    ranked = RowIndex(["h"], [RankedGpus((0, 1, 2, 5), [3.0, -1.0, 9.0, 3.0], [0, 1, 3], True)])
    assert len(ranked) == 4 and ranked.index(Row("h", 1)) == 3
    assert ranked == [Row("h"), Row("h", 0), Row("h", 5), Row("h", 1)]


async def test_the_table_builds_gpu_objects_only_for_what_it_shows():
    """200 hosts on delta samples (JSON and packed lines) in the real GpuTable (headless app):
    sorting by name, state or any metric, filtering and folding build no host's GPU objects;
    the rows drawn build theirs (and only theirs). A metric sort read from the delta's checked
    values puts the rows in the order the built GPU objects give (a second table holding the
    same samples with their GPUs built: values missing, an errored GPU, zero memory totals)."""
    from textual.app import App

    from tui.cluster.agent_delta import apply_compact, delta_plan
    from tui.remote.gpu_common import compact_delta

    enc = [DeltaEncoder() for _ in range(200)]
    rng = random.Random(8)
    hosts: dict[str, HostTelemetry] = {}
    eager: dict[str, HostTelemetry] = {}
    packed = 0
    for i, e in enumerate(enc):
        name = f"n{i:03d}"
        ht = hosts[name] = _host(name)
        base = parse_line(json.dumps(e.encode(_agent_sample(1, rng, gpus=8))), 0.0).sample
        assert base is not None
        ht.record(base)
        delta = e.encode(_agent_sample(2, rng, gpus=8))
        line = compact_delta(delta) if i % 2 else None
        if line is not None:
            ht.record(apply_compact(line, base, 1.0, delta_plan(base)))
            packed += 1
        else:
            ht.record(apply_delta(json.dumps(delta), base, 1.0))
        assert type(ht.latest) is DeltaSample
        eager[name] = _host(name)
        eager[name].record(_eager(ht.latest))
    assert packed > 50

    class TableApp(App):
        def compose(self):
            yield GpuTable(id="t")
            yield GpuTable(id="e")

    app = TableApp()
    async with app.run_test(size=(160, 30)) as pilot:
        table, built_table = app.query_one("#t", GpuTable), app.query_one("#e", GpuTable)
        table.set_hosts(hosts)
        built_table.set_hosts(eager)
        await pilot.pause()
        assert len(table.rows) == 200 * 9
        built = [name for name, ht in hosts.items() if _built(ht.latest)]
        assert built and len(built) <= 4  # the rows on screen: the first hosts' GPUs
        for sort_key, filter_text, rows in (("state", "", 1800), ("name", "gpu3", 400)):
            table.sort_key, table.filter_text = sort_key, filter_text
            table.rebuild()
            assert len(table.rows) == rows, (sort_key, filter_text)
        table.filter_text = ""
        table.collapsed.update(hosts)
        table.rebuild()
        assert len(table.rows) == 200
        table.collapsed.clear()
        table.extra_columns = built_table.extra_columns = True
        metric_keys = [k for k in table.sort_keys if k not in ("name", "state")]
        assert {"util", "mem", "temp", "power"} <= set(metric_keys) and len(metric_keys) > 4
        for key in metric_keys:
            for reverse in (False, True):
                for filter_text in ("", "gpu3"):
                    for t in (table, built_table):
                        t.sort_key, t.sort_reverse, t.filter_text = key, reverse, filter_text
                        t.rebuild()
                    assert list(table.rows) == list(built_table.rows), (key, reverse)
        await pilot.pause()
        assert len([n for n, ht in hosts.items() if _built(ht.latest)]) <= 30  # on screen
