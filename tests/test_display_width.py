"""Display width and invisible characters (issue 23, item 5): one width measure for every
table cell (tui.sanitize.width/fit/pad, Rich's cell_len), and every invisible character shown
escaped, so a name cannot hide text or shift a table's columns.

The Cluster screen runs as the cockpit runs it (Textual's Pilot, the real agent on the local
transport reading a fake libnvidia-ml.so.1 whose GPUs carry hostile names), and every row it
draws is measured."""

from __future__ import annotations

import os
import unicodedata

import pytest
from fakenvml.fakenvml import MIB, FakeGpu, write_state
from rich.cells import cell_len
from test_cluster_screen import wait_for

from tui.app import VerlTuiApp
from tui.config.hosts import parse_inventory
from tui.sanitize import cell, clean, escape_char, fit, one_line, pad, width
from tui.widgets.gpu_table import W_NAME, W_UTIL, GpuTable

# Names a GPU (or a host's agent) may report: tag characters after "H100" (drawn as "H100"),
# zero-width space/joiner/word joiner/BOM inside, bidi overrides and isolates, variation
# selectors, combining marks alone and stacked, private use, unassigned code points, a line
# separator, wide CJK and emoji.
HOSTILE = {
    "tags": "NVIDIA H100\U000e0041\U000e0042\U000e007f",
    "zero_width": "H\u200b1\u200c0\u200d0\u2060\ufeff",
    "bidi": "\u202eH100\u202c \u2066x\u2069",
    "variation": "H100\ufe0f\U000e0100",
    "marks_alone": "\u0301\u0302 A\u0301\u0302\u0303\u0304\u0305\u0306",
    "private_unassigned": "\ue000\U000f0000 \u0378\U0003ffff",
    "separators": "a\u2028b\u2029c\u00a0d\u3000e",
    "cjk": "日本語のGPU名前がとても長い名前です",
    "emoji": "GPU 👍🏽 🔥🔥🔥 ok",
    "soft_hyphen": "H\u00ad100\u180e\u3164",
}


def _hidden(text: str) -> list[str]:
    """Characters a terminal would draw as nothing (or reorder with): none may remain."""
    out = []
    prev_base = False
    for c in text:
        cat = unicodedata.category(c)
        if cat[0] == "M":
            if not prev_base:
                out.append(f"U+{ord(c):04X} ({cat}, no base)")
            continue
        if cat in ("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp") or (cat == "Zs" and c != " "):
            out.append(f"U+{ord(c):04X} ({cat})")
        prev_base = c != " "
    return out


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_every_invisible_character_is_shown_escaped(name: str) -> None:
    text = HOSTILE[name]
    shown = one_line(text)
    assert not _hidden(shown), (shown, _hidden(shown))
    for c in text:
        if _hidden(c) and unicodedata.category(c)[0] != "M":
            assert escape_char(c) in shown, (c, shown)  # \u200b, \U000e0041: visible
    # cells (DataTable) and labels take the same text
    assert cell(text).plain == shown
    # clean() (logs, CLI) escapes the known invisible set too
    for c in "\u200b\u200d\u2060\ufeff\U000e0041\ufe0f\u202e\ue000":
        assert c not in clean(f"x{c}y")


def test_tag_characters_no_longer_spoof_a_name() -> None:
    assert one_line("H100\U000e0041") != one_line("H100")
    assert one_line("H100\U000e0041") == "H100\\U000e0041"
    assert one_line("H\u200b100") == "H\\u200b100"


@pytest.mark.parametrize("cells", [1, 2, 3, 7, 12, 24])
@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_pad_and_fit_measure_display_cells(name: str, cells: int) -> None:
    shown = one_line(HOSTILE[name])
    padded = pad(HOSTILE[name], cells)
    assert cell_len(padded) == width(padded) == cells, (padded, cells)
    assert cell_len(pad(HOSTILE[name], cells, right=True)) == cells
    cut = fit(shown, cells)
    assert cell_len(cut) <= cells
    assert cut == shown or cut.endswith("…")
    assert cell_len(one_line(HOSTILE[name], cells)) <= cells


def test_a_wide_character_is_never_split() -> None:
    assert fit("日本語", 4) == "日…"  # 2 + 1 cells: the second 日 would straddle the edge
    assert pad("日本語", 4) == "日… "
    assert fit("ab", 2) == "ab" and fit("abc", 2) == "a…" and fit("abc", 0) == ""


# -- the real Cluster screen ------------------------------------------------------------------

LONG_HOST = "a-very-long-host-name-that-fills-the-whole-column-and-more-0123"  # 63: the limit


@pytest.fixture
def hostile_gpus(fake_nvml_lib, tmp_path, monkeypatch):
    state = tmp_path / "nvml.txt"
    write_state(
        state,
        [
            FakeGpu(name=HOSTILE[k], util=10 * i, memory_used=1000 * MIB, temperature=50)
            for i, k in enumerate(sorted(HOSTILE))
        ]
        + [
            FakeGpu(util=100, processes=[(os.getpid(), 1000 * MIB)])  # a plain H100 row
        ],
    )
    monkeypatch.setenv("LD_LIBRARY_PATH", str(fake_nvml_lib))
    monkeypatch.setenv("FAKE_NVML_STATE", str(state))
    return state


async def test_cluster_screen_rows_keep_their_columns(hostile_gpus) -> None:
    inv = parse_inventory(
        "cluster: widths\nhosts:\n"
        f"  - name: {LONG_HOST}\n    transport: local\n"
        "  - name: b\n    transport: local\n"
    )
    app = VerlTuiApp(inv, interval=0.2)
    gpus = len(HOSTILE) + 1
    async with app.run_test(size=(150, 2 * gpus + 10)) as pilot:
        table = app.screen.query_one(GpuTable)
        await wait_for(pilot, lambda: len(table.rows) == 2 * (gpus + 1), timeout=30)

        def named() -> bool:  # every GPU's sample (and name) arrived on both hosts
            return all(
                ht.latest is not None
                and len(ht.latest.gpus) == gpus
                and all(g.name and g.util_percent is not None for g in ht.latest.gpus)
                for ht in table.hosts.values()
            )

        await wait_for(pilot, named, timeout=30)
        await pilot.pause(0.3)
        strips = [table.render_line(y) for y in range(len(table.rows))]
        texts = [s.text for s in strips]
        full = table.scrollable_content_region.width
        for text in texts:
            # every row takes the table's width exactly: no name pushes or pulls a column
            assert cell_len(text) == full, (cell_len(text), full, text)
            assert not _hidden(text), (text, _hidden(text))
        gpu_rows = [t for t, row in zip(texts, table.rows, strict=True) if row.gpu is not None]
        assert len(gpu_rows) == 2 * gpus
        for text in gpu_rows:
            # the name column ends at W_NAME cells on every row: the utilization column (a bar
            # of W_UTIL - 6 cells, then the percentage) starts there
            head = _cells_prefix(text, W_NAME)
            assert cell_len(head) == W_NAME, (head, text)
            util = _cells_prefix(text[len(head) :], W_UTIL - 1)  # bar, then "NNN% "
            assert util.rstrip().endswith("%"), (util, text)
        joined = "\n".join(texts)
        # the escapes are what shows, where the invisible characters were
        assert "H100\\U000e0041" in joined
        assert "H\\u200b1\\u200c0" in joined
        assert "\\u202eH100" in joined
        assert "日本語の" in joined and "…" in joined
        host_rows = [t for t, row in zip(texts, table.rows, strict=True) if row.gpu is None]
        # a host name past its column is cut with an ellipsis, the state column stays put
        assert any(t.startswith("▾ a-very-long-host-nam… up ") for t in host_rows), host_rows
        # the details pane shows the first GPU's whole name (HOSTILE["bidi"]), escaped
        await pilot.press("j")
        details = str(app.screen.query_one("#details").render())
        assert "\\u202eH100\\u202c \\u2066x\\u2069" in details, details


def _cells_prefix(text: str, cells: int) -> str:
    """The characters of `text` that fill its first `cells` terminal cells."""
    out, used = [], 0
    for c in text:
        w = cell_len(c)
        if used + w > cells:
            break
        out.append(c)
        used += w
    return "".join(out)
