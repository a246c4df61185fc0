"""The per-GPU numbers have one table (tui/cluster/models.py GPU_METRICS): the agent's record
and delta rows match it, GpuSample holds exactly its numbers and is built by keyword, the
boundary and the (generated) delta decoder accept and refuse the same values for every row,
`gpus --json` carries every row, and the GPU table's optional columns come from it.

The last test runs the real agent on the local transport against the fake libnvidia-ml.so.1
inside the real app (as tests/test_cluster_screen.py does)."""

from __future__ import annotations

import json
import math
import random
from dataclasses import fields

import pytest
from fakeamd.fakeamd import FakeAmdGpu, write_tree
from fakenvml.fakenvml import MIB, FakeGpu, write_state
from test_cluster_screen import make_app, visible_text, wait_for

from tui.cluster.agent_delta import BadDelta, _num, apply_delta
from tui.cluster.agent_schema import parse_message
from tui.cluster.models import DELTA_METRICS, GPU_METRICS, GpuSample
from tui.commands.gpus import snapshot
from tui.remote import gpu_common
from tui.remote.gpu_amd import AmdSysfsBackend
from tui.remote.gpu_common import DeltaEncoder
from tui.widgets.gpu_table import COLUMNS, SORT_KEYS, GpuTable, column_header, shown_columns

KEYS = [m.key for m in GPU_METRICS]
NOT_METRICS = {"index", "name", "uuid", "processes", "error", "vendor", "health"}


def test_the_agent_sends_what_the_table_says():
    # The agent (stdlib-only, shipped as source) cannot import the cockpit's table: its key
    # tuple is checked against it here, order included (delta rows are positional).
    assert list(gpu_common.GPU_METRICS) == KEYS
    assert list(gpu_common.DELTA_GPU_KEYS) == [m.key for m in DELTA_METRICS]
    assert set(gpu_common._empty_gpu(0)) == {"index", "name", "uuid", "processes", "error", *KEYS}
    # GpuSample holds exactly the table's numbers beside its own fields.
    assert {f.name for f in fields(GpuSample)} - NOT_METRICS - {"_"} == set(KEYS)
    assert all(m.lo < m.hi and (not m.title or m.width > len(m.title)) for m in GPU_METRICS)


def test_gpu_sample_is_built_by_keyword():
    with pytest.raises(TypeError):
        GpuSample(0, "NVIDIA H100", "GPU-1", 50.0)  # type: ignore[misc]
    assert GpuSample(3, util_percent=5.0).util_percent == 5.0


def _in_bounds(m, k: int):
    """A value m accepts, different for each k."""
    v = m.lo + (m.hi - m.lo) * (k + 1) / 10
    return int(v) if m.integral else round(v, 1)


def _gpu(**numbers) -> dict:
    return {"index": 0, "name": "NVIDIA H100", "processes": [{"pid": 7, "memory_bytes": 1}]} | {
        k: numbers.get(k) for k in KEYS
    }


def _sample(seq: int, gpu: dict) -> dict:
    host = {"cpu_percent": 1.0, "load1": 1.0, "mem_used_bytes": 1}
    return {"type": "sample", "seq": seq, "t": 1.0, "source": "nvml", "host": host, "gpus": [gpu]}


def test_every_metric_crosses_the_boundary_full_delta_and_json():
    first = {m.key: _in_bounds(m, 1) for m in GPU_METRICS}
    second = {m.key: _in_bounds(m, 2) for m in GPU_METRICS}
    enc = DeltaEncoder()
    full = enc.encode(_sample(1, _gpu(**first)))
    base = parse_message(full, 0.0).sample
    assert base is not None and not parse_message(full, 0.0).problems
    gpu = base.gpus[0]
    assert {k: getattr(gpu, k) for k in KEYS} == first
    assert {k: gpu.to_json()[k] for k in KEYS} == first  # gpus --json carries every number
    # The delta carries the delta rows' new values; the others stay the base's.
    delta = enc.encode(
        _sample(2, _gpu(**{**second, **{m.key: first[m.key] for m in GPU_METRICS if not m.delta}}))
    )
    assert delta["type"] == "delta"
    now = apply_delta(json.dumps(delta), base, 0.0).gpus[0]
    want = {m.key: (second if m.delta else first)[m.key] for m in GPU_METRICS}
    assert {k: getattr(now, k) for k in KEYS} == want
    assert now.name == "NVIDIA H100" and now.processes == gpu.processes


HOSTILE = (math.nan, math.inf, -math.inf, 1e300, -(10**40), 10**40, "7", True, [1], {"a": 1})


@pytest.mark.parametrize("m", GPU_METRICS, ids=KEYS)
def test_hostile_values_are_refused_for_every_metric(m):
    """NaN, out of bounds, huge, a string, a bool...: None and a problem line naming the
    field at the boundary; a delta carrying one is refused whole, naming its place."""
    pos = [d.key for d in DELTA_METRICS].index(m.key) if m.delta else None
    base = parse_message(_sample(1, _gpu(**{k: None for k in KEYS})), 0.0).sample
    assert base is not None
    for bad in (*HOSTILE, m.lo - 1e-3, m.hi * 2 + 1, *((0.5 + m.lo,) if m.integral else ())):
        line = parse_message(_sample(1, _gpu(**{m.key: bad})), 0.0)
        assert line.sample is not None and getattr(line.sample.gpus[0], m.key) is None, bad
        path = f"gpus[0].{m.key}"
        assert [p for p, _ in line.problems] == [path], (bad, line.problems)
        assert line.problems[0][1].startswith(f"bad data: field {path} (got ")
        if pos is not None:
            row = [None] * len(DELTA_METRICS) + [None]
            row[pos] = bad
            delta = {"type": "delta", "seq": 2, "base": 1, "host": [1, 1, 1], "gpus": [row]}
            with pytest.raises(BadDelta, match=rf"field delta\.gpus\[0\]\[{pos}\] \(got"):
                apply_delta(json.dumps(delta), base, 0.0)
    # A whole float where an int belongs is taken, as an int, on both paths.
    if m.integral:
        line = parse_message(_sample(1, _gpu(**{m.key: float(_in_bounds(m, 0))})), 0.0)
        assert type(getattr(line.sample.gpus[0], m.key)) is int and not line.problems


def test_generated_delta_check_agrees_with_the_general_one():
    """The unrolled decoder (built from the table at import) accepts a row exactly when the
    per-value check accepts each of its numbers, with the same values out."""
    rng = random.Random(27)
    pool = [None, 0, 1, -1, 0.5, 99.9, 100, 100.5, 4096, 2.0**40, 1e9, -100.0, 300.0, True]
    base = parse_message(_sample(1, _gpu()), 0.0).sample
    assert base is not None
    for _ in range(400):
        row = [rng.choice(pool) for _ in DELTA_METRICS]
        delta = {"type": "delta", "seq": 2, "base": 1, "host": [1, 1, 1], "gpus": [[*row, None]]}
        try:
            want = [
                _num(v, m.lo, m.hi, m.integral, "") for v, m in zip(row, DELTA_METRICS, strict=True)
            ]
        except BadDelta:
            want = None
        try:
            g = apply_delta(json.dumps(delta), base, 0.0).gpus[0]
            got = [getattr(g, m.key) for m in DELTA_METRICS]
        except BadDelta:
            got = None
        assert got == want, row


def test_optional_columns_come_from_the_table():
    titled = [m for m in GPU_METRICS if m.title]
    assert titled, "no optional column to show"
    optional = [c for c in COLUMNS if c.optional]
    assert [c.title for c in optional] == [m.title for m in titled]
    assert SORT_KEYS == ("name", "util", "mem", "temp", "power", "state")
    plain, more = column_header(200, 300, shown_columns(False)), column_header(200, 300, COLUMNS)
    assert plain.startswith("HOST / GPU") and "UTIL, LAST 5 MIN" in plain
    assert all(m.title not in plain and m.title in more for m in titled)
    assert len(more) - len(plain) == sum(c.width for c in optional)  # history at its widest
    assert len(column_header(100, 300, COLUMNS)) == 100
    g = GpuSample(0, **{m.key: _in_bounds(m, 3) for m in titled})
    for c, m in zip(optional, titled, strict=True):
        assert c.getter(g) == getattr(g, m.key) and c.sort is not None
        assert c.sort(g) == float(getattr(g, m.key)) and c.sort(GpuSample(0)) == -1.0


@pytest.fixture
def fields_env(fake_nvml_lib, tmp_path, monkeypatch):
    state = tmp_path / "nvml.txt"
    write_state(
        state,
        [
            FakeGpu(util=40, mem_util=3, sm_clock_mhz=1755),
            FakeGpu(mem_util=37, memory_used=1000 * MIB, sm_clock_mhz=0),  # NOT_SUPPORTED
        ],
    )
    monkeypatch.setenv("LD_LIBRARY_PATH", str(fake_nvml_lib))
    monkeypatch.setenv("FAKE_NVML_STATE", str(state))
    return state


async def test_real_agent_metrics_reach_the_table_and_gpus_json(fields_env):
    """The real agent (fake NVML), the boundary, the table's optional columns ("c" shows
    them, with their sort keys) and what `gpus --json` prints (the function it calls)."""
    app = make_app()
    async with app.run_test(size=(200, 30)) as pilot:
        table = app.screen.query_one(GpuTable)
        await wait_for(pilot, lambda: len(table.rows) == 6)  # 2 hosts + 4 GPUs
        text = visible_text(app)
        assert "MEM BUSY" not in str(app.screen.query_one("#columns").render())
        assert "37%" not in text
        await pilot.press("c")
        header = str(app.screen.query_one("#columns").render())
        assert "MEM BUSY" in header and "SM CLOCK" in header and "UTIL, LAST" in header
        await pilot.pause()
        lines = [table.render_line(y).text for y in range(table.size.height)]
        gpu1 = next(line for line in lines if line.startswith("   1 H100"))
        assert " 37% " in gpu1 and " - " in gpu1, lines
        gpu0 = next(line for line in lines if line.startswith("   0 H100"))
        assert " 1755MHz " in gpu0, lines
        assert "mem busy" in table.sort_keys
        for _ in range(table.sort_keys.index("mem busy")):
            await pilot.press("s")
        assert table.sort_key == "mem busy"
        alpha = [r.gpu for r in table.rows if r.host == "alpha" and r.gpu is not None]
        assert alpha == [1, 0]  # busiest memory first
        await pilot.press("c")  # hidden again: its sort goes back to the name order
        assert table.sort_key == "name" and "MEM BUSY" not in str(
            app.screen.query_one("#columns").render()
        )
        doc = json.loads(json.dumps(snapshot(app.monitor)))
        gpus = doc["hosts"][0]["gpus"]
        assert set(KEYS) <= set(gpus[1]) and gpus[1]["mem_util_percent"] == 37
        assert gpus[0]["sm_clock_mhz"] == 1755 and gpus[1]["sm_clock_mhz"] is None
        await pilot.press("q")


def test_amd_sysfs_shader_clock(tmp_path):
    """pp_dpm_sclk's level marked "*" is the SM clock; no file, no mark or an odd file: None."""
    gpus = [
        FakeAmdGpu(pci="0000:0c:00.0", sclk_current=2),
        FakeAmdGpu(pci="0000:0d:00.0", sclk_levels=None),
        FakeAmdGpu(pci="0000:0e:00.0", sclk_current=9),  # no level marked
        FakeAmdGpu(pci="0000:0f:00.0", raw={"pp_dpm_sclk": "0: lots *\n1: 99999999Mhz *\n"}),
        FakeAmdGpu(pci="0000:10:00.0", raw={"pp_dpm_sclk": "0: 500Mhz\nS: 19Mhz *\n"}),
    ]
    backend = AmdSysfsBackend(root=str(write_tree(tmp_path, gpus)))
    clocks = [g["sm_clock_mhz"] for g in backend.sweep()]
    assert clocks == [2100, None, None, None, 19]
