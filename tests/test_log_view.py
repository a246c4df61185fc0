"""The job log pane driven by keys (Pilot): follow, search, filter, wrap, hints, save."""

from __future__ import annotations

import asyncio
from pathlib import Path

from textual.app import App, ComposeResult

from tui.logs import ERROR, TRACEBACK
from tui.screens.help import collect_bindings
from tui.widgets.logview import HINT, LINE, LogPane, LogView, ansi_text

SIZE = (100, 24)


class LogApp(App):
    def __init__(self, save_path: str | Path | None = None) -> None:
        super().__init__()
        self.save_path = save_path
        self.saved: list[Path] = []

    def compose(self) -> ComposeResult:
        yield LogPane("job raysubmit_42", save_path=self.save_path, id="pane")

    def on_mount(self) -> None:
        self.query_one(LogView).focus()

    def on_log_pane_saved(self, event: LogPane.Saved) -> None:
        self.saved.append(event.path)


def numbered(n: int, start: int = 0) -> str:
    return "".join(f"line {i:06d} step:{i} - actor/entropy:0.5\n" for i in range(start, start + n))


def screen_rows(view: LogView) -> list[str]:
    return [view.render_line(y).text.rstrip() for y in range(view.scrollable_content_region.height)]


async def settle(pilot, view: LogView) -> None:
    view._tick(force=True)  # what the 16 Hz timer does; forced so tests need not wait for it
    await pilot.pause()


async def test_follow_shows_the_end_and_scrolling_up_pauses(tmp_path):
    app = LogApp()
    async with app.run_test(size=SIZE) as pilot:
        pane = app.query_one(LogPane)
        view = pane.log_view
        pane.append(numbered(500))
        await settle(pilot, view)
        assert view.follow
        rows = screen_rows(view)
        assert rows[-1].startswith("line 000499")
        assert "500 lines" in pane.status_text and "FOLLOW" in pane.status_text

        await pilot.press("up")
        await pilot.pause()
        assert not view.follow
        assert "PAUSED" in pane.status_text
        top = view.top_line()
        pane.append(numbered(100, 500))
        await settle(pilot, view)
        assert view.top_line() == top  # paused: new lines do not move the view
        assert "600 lines" in pane.status_text

        await pilot.press("F")
        await settle(pilot, view)
        assert view.follow and screen_rows(view)[-1].startswith("line 000599")
        await pilot.press("g")
        assert not view.follow and screen_rows(view)[0].startswith("line 000000")
        await pilot.press("end")
        await settle(pilot, view)
        assert view.follow and screen_rows(view)[-1].startswith("line 000599")
        # searching while following finds the latest match, N the ones before it
        await pilot.press("slash", *"line 0004", "enter")
        assert view.current == 499 and not view.follow and "latest match" in pane.status_text
        await pilot.press("N")
        assert view.current == 498


async def test_top_bottom_keys():
    app = LogApp()
    async with app.run_test(size=SIZE) as pilot:
        view = app.query_one(LogView)
        view.append(numbered(300))
        await settle(pilot, view)
        await pilot.press("g")
        assert view.top_line() == 0 and not view.follow
        await pilot.press("G")
        await pilot.pause()
        assert screen_rows(view)[-1].startswith("line 000299")
        assert not view.follow  # G is a jump, F / end follow


async def test_ingest_is_coalesced_into_ticks():
    app = LogApp()
    async with app.run_test(size=SIZE) as pilot:
        view = app.query_one(LogView)
        refreshes = 0
        real_refresh = view.refresh

        def counting_refresh(*args, **kwargs):
            nonlocal refreshes
            refreshes += 1
            return real_refresh(*args, **kwargs)

        view.refresh = counting_refresh
        for i in range(200):
            view.append(numbered(10, i * 10))
        assert refreshes == 0  # appending only stores
        for _ in range(100):  # the timer, not the test, brings the lines on screen
            await pilot.pause(0.02)
            if screen_rows(view)[-1].startswith("line 001999"):
                break
        assert screen_rows(view)[-1].startswith("line 001999")
        assert refreshes < 50


async def test_search_across_200k_lines():
    app = LogApp()
    async with app.run_test(size=SIZE) as pilot:
        pane = app.query_one(LogPane)
        view = pane.log_view
        marks = {1_000, 120_000, 199_990}
        text = "".join(
            f"{i} needle found here\n" if i in marks else f"{i} hay hay hay\n"
            for i in range(200_000)
        )
        for start in range(0, len(text), 1 << 20):
            pane.append(text[start : start + (1 << 20)])
        await settle(pilot, view)
        assert len(view.store) == 200_000
        await pilot.press("g", "slash", *"needle", "enter")
        await pilot.pause()
        assert view.search_query is not None and view.search_query.pattern == "needle"
        assert view.current == 1_000
        assert screen_rows(view)[view._row_of(1_000) - view.scroll_offset.y].startswith(
            "1000 needle"
        )
        for _ in range(10):  # the match count is completed over the next ticks
            view._tick()
        await pilot.pause()
        assert "1/3" in pane.status_text
        await pilot.press("n")
        assert view.current == 120_000 and "2/3" in pane.status_text
        await pilot.press("n")
        assert view.current == 199_990
        await pilot.press("n")
        assert view.current == 1_000 and "wrapped" in pane.status_text
        await pilot.press("N")
        assert view.current == 199_990 and "3/3" in pane.status_text
        # the match is highlighted (reverse) in the drawn row
        row = view._row_of(199_990) - view.scroll_offset.y
        strip = view.render_line(row)
        hit = [seg for seg in strip if seg.text == "needle"]
        assert hit and hit[0].style.reverse


async def test_search_prompt_keeps_text_and_escape_closes():
    app = LogApp()
    async with app.run_test(size=SIZE) as pilot:
        pane = app.query_one(LogPane)
        view = pane.log_view
        pane.append(numbered(50))
        await settle(pilot, view)
        await pilot.press("slash", *"step:7 ")
        assert pane._prompt.has_focus and pane._prompt.value == "step:7 "
        await pilot.press("escape")
        assert view.has_focus and not pane._prompt_row.has_class("-open")
        assert view.search_query is None  # escape does not search
        await pilot.press("slash")
        assert pane._prompt.value == "step:7 "  # the text is kept
        await pilot.press("enter")
        assert view.current == 7
        await pilot.press("slash", "ctrl+u", *"re:step:(1|2)\\d ", "enter")
        assert view.search_query.regex and view.current is not None
        assert view.store.plain(view.current).split()[2][5] in "12"
        await pilot.press("slash", "ctrl+u", *"re:(bad", "enter")
        assert "bad regex" in pane.status_text


async def test_filter_shows_only_matching_lines():
    app = LogApp()
    async with app.run_test(size=SIZE) as pilot:
        pane = app.query_one(LogPane)
        view = pane.log_view
        pane.append(
            "".join(f"{i} {'WARNING disk slow' if i % 10 == 3 else 'ok'}\n" for i in range(1000))
        )
        await settle(pilot, view)
        await pilot.press("f")  # no search yet: the prompt opens in filter mode
        assert pane._prompt.has_focus and pane._mode == "filter"
        await pilot.press(*"disk slow", "enter")
        await settle(pilot, view)
        assert view.filter_on and "FILTER" in pane.status_text
        rows = [r for r in screen_rows(view) if r]
        assert rows and all("disk slow" in r for r in rows)
        assert rows[-1].startswith("993 ")  # following: the last match at the bottom
        await pilot.press("g")
        assert screen_rows(view)[0].startswith("3 WARNING")
        # new lines extend the filter as they arrive
        pane.append("1000 WARNING disk slow again\n1001 fine\n")
        await settle(pilot, view)
        await pilot.press("F")
        await settle(pilot, view)
        assert [r for r in screen_rows(view) if r][-1].startswith("1000 WARNING")
        await pilot.press("f")
        await settle(pilot, view)
        assert not view.filter_on and screen_rows(view)[-1].startswith("1001 fine")


async def test_wrap_long_lines_and_horizontal_scroll():
    app = LogApp()
    async with app.run_test(size=SIZE) as pilot:
        view = app.query_one(LogView)
        long = "".join(chr(ord("a") + i % 26) for i in range(250))
        view.append("short one\n" + long + "\nshort two\n")
        await settle(pilot, view)
        width = view.scrollable_content_region.width
        await pilot.press("g")
        rows = screen_rows(view)
        assert rows[1] == long[:width]  # not wrapped: cut at the edge
        await pilot.press("right", "right", "right")
        await pilot.pause()
        assert view.scroll_offset.x > 0
        assert screen_rows(view)[1] == long[view.scroll_offset.x : view.scroll_offset.x + width]
        await pilot.press("w")
        await pilot.pause()
        assert view.wrap and "WRAP" in app.query_one(LogPane).status_text
        rows = screen_rows(view)
        pieces = -(-len(long) // width)
        assert rows[0] == "short one"
        assert "".join(rows[1 : 1 + pieces]) == long
        assert rows[1 + pieces] == "short two"
        await pilot.press("w")
        await pilot.pause()
        assert not view.wrap and screen_rows(view)[1] == long[:width]


async def test_wrap_pages_by_screen_rows():
    app = LogApp()
    async with app.run_test(size=SIZE) as pilot:
        view = app.query_one(LogView)
        view.append("".join(f"{i:04d} " + "y" * 230 + "\n" for i in range(200)))
        await settle(pilot, view)
        await pilot.press("w", "g")
        await pilot.pause()
        rows = screen_rows(view)
        assert rows[0].startswith("0000 ")
        last_shown = max(int(r[:4]) for r in rows if r[:4].isdigit())
        await pilot.press("pagedown")
        await pilot.pause()
        first = screen_rows(view)[0]
        assert first.startswith(f"{last_shown:04d} ") or first.startswith(f"{last_shown + 1:04d} ")
        await pilot.press("pageup")
        await pilot.pause()
        assert screen_rows(view)[0].startswith("0000 ")
        await pilot.press("F")
        await settle(pilot, view)
        assert screen_rows(view)[-1].endswith("y") and view.store.plain(199).endswith(
            screen_rows(view)[-1]
        )


async def test_wrap_reads_only_what_is_on_screen():
    app = LogApp()
    async with app.run_test(size=SIZE) as pilot:
        view = app.query_one(LogView)
        view.append("".join(f"{i} " + "x" * (150 + i % 90) + "\n" for i in range(300_000)))
        await settle(pilot, view)
        reads = set()
        real_line = view.store.line

        def counting_line(i: int) -> str:
            reads.add(i)
            return real_line(i)

        view.store.line = counting_line
        await pilot.press("w")
        await settle(pilot, view)
        height = view.scrollable_content_region.height
        assert len(reads) <= 3 * height  # the last screenful, not 300k lines
        rows = screen_rows(view)
        assert rows[-1].endswith("x") and view.store.plain(299_999).endswith(rows[-1])
        assert rows[0] != ""
        reads.clear()
        await pilot.press("g")
        await pilot.press("pagedown")
        await pilot.pause()
        screen_rows(view)
        assert len(reads) <= 3 * height


async def test_hints_and_tracebacks():
    app = LogApp()
    async with app.run_test(size=SIZE) as pilot:
        pane = app.query_one(LogPane)
        view = pane.log_view
        pre = "(WorkerDict pid=7, ip=10.0.0.3) "
        pane.append(
            numbered(30)
            + pre
            + "Traceback (most recent call last):\n"
            + pre
            + '  File "/opt/verl/verl/workers/fsdp_workers.py", line 1, in f\n'
            + pre
            + "    loss.backward()\n"
            + pre
            + "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB\n"
            + numbered(30, 100)
        )
        await settle(pilot, view)
        store = view.store
        assert [store.flags(i) & (TRACEBACK | ERROR) for i in range(30, 34)] == [
            TRACEBACK | ERROR,
            TRACEBACK,
            TRACEBACK,
            TRACEBACK | ERROR,
        ]
        assert store.hint_lines() == [33]
        await pilot.press("g", "h")
        assert view.current == 33
        row = view._row_of(33) - view.scroll_offset.y
        rows = screen_rows(view)
        assert rows[row].startswith(pre + "torch.OutOfMemoryError")
        assert rows[row + 1].startswith("  ↳ hint: a GPU ran out of memory")
        assert view._item(view._row_of(33) + 1) == (HINT, 33)
        assert view._item(view._row_of(33) + 2) == (LINE, 100 - 100 + 34)
        # error lines are drawn in the error colour, traceback lines in theirs
        styles = view._styles()
        colour = {seg.style.color for seg in view.render_line(row) if seg.text.strip()}
        assert styles["error"].color in colour
        tb = view._row_of(31) - view.scroll_offset.y
        assert styles["traceback"].color in {
            seg.style.color for seg in view.render_line(tb) if seg.text.strip()
        }
        # e / E walk error runs: the traceback is one, it starts at its header
        await pilot.press("g", "e")
        assert view.current == 30
        await pilot.press("e")
        assert view.current == 30 and "no error below" in pane.status_text
        await pilot.press("G", "E")
        assert view.current == 30
        # in filter mode a hinted match keeps its hint row under it
        await pilot.press("slash", *"OutOfMemory", "enter")
        await pilot.press("f")
        await settle(pilot, view)
        rows = [r for r in screen_rows(view) if r]
        assert len(rows) == 2 and rows[1].startswith("  ↳ hint:")


async def test_ansi_colours_are_drawn_not_printed():
    app = LogApp()
    async with app.run_test(size=SIZE) as pilot:
        view = app.query_one(LogView)
        view.append("\x1b[36m(TaskRunner pid=1, ip=10.0.0.2)\x1b[0m plain \x1b[2K\x1b[1;31mred\n")
        await settle(pilot, view)
        strip = view.render_line(0)
        assert strip.text.rstrip() == "(TaskRunner pid=1, ip=10.0.0.2) plain red"
        assert "\x1b" not in strip.text
        red = [seg for seg in strip if seg.text == "red"]
        assert red and red[0].style.bold and red[0].style.color.name in ("red", "color(1)")


def test_ansi_text_matches_rich():
    from rich.style import Style
    from rich.text import Text

    raw = "\x1b[36mcyan\x1b[0m \x1b[1mbold \x1b[32mgreen\x1b[0m end"
    ours = ansi_text(raw, Style())
    theirs = Text.from_ansi(raw)
    assert ours.plain == theirs.plain
    assert [(s.start, s.end, s.style) for s in ours.spans] == [
        (s.start, s.end, s.style) for s in theirs.spans
    ]


async def test_save_writes_the_exact_text(tmp_path):
    target = tmp_path / "logs" / "job.log"
    app = LogApp(save_path=target)
    async with app.run_test(size=SIZE) as pilot:
        pane = app.query_one(LogPane)
        text = "\x1b[32mok\x1b[0m first\nsecond line\n" + numbered(100) + "partial tail"
        pane.append(text)
        await settle(pilot, pane.log_view)
        await pilot.press("s")
        assert pane._prompt.value == str(target)
        await pilot.press("enter")
        await pilot.pause()
        assert target.read_text() == text
        assert app.saved == [target]
        assert f"saved 102 lines to {target}" in pane.status_text
        # an unwritable path: one line in the status bar, no traceback, no crash
        await pilot.press("s", "ctrl+u", *"/proc/version/nope.log", "enter")
        await pilot.pause()
        assert "save failed" in pane.status_text and "\n" not in pane.status_text
        assert app.saved == [target]


async def test_finish_clear_and_load():
    app = LogApp()
    async with app.run_test(size=SIZE) as pilot:
        pane = app.query_one(LogPane)
        view = pane.log_view
        pane.append("one\ntwo\nprogress 50%")
        await settle(pilot, view)
        assert screen_rows(view)[2] == "progress 50%"  # the partial line is shown
        assert len(view.store) == 2
        pane.finish("SUCCEEDED")
        await pilot.pause()
        assert len(view.store) == 3 and "SUCCEEDED" in pane.status_text
        pane.clear()
        pane.title = "node1:raylet.out"
        await pilot.pause()
        assert len(view.store) == 0 and "SUCCEEDED" not in pane.status_text
        assert pane._title_bar.display and "node1:raylet.out" in str(pane._title_bar.render())
        pane.title = ""
        await pilot.pause()
        assert not pane._title_bar.display
        assert screen_rows(view)[0] == ""
        await pane.load(numbered(20_000), "FAILED")
        await pilot.pause()
        assert len(view.store) == 20_000 and "FAILED" in pane.status_text
        assert screen_rows(view)[-1].startswith("line 019999")


async def test_keys_listed_in_help():
    app = LogApp()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        rows = collect_bindings(app.screen)
        described = {keys: desc for _where, keys, desc in rows}
        for key in ("/", "n", "N", "f", "F, end", "w", "s", "g, home", "G", "e", "E", "h"):
            assert key in described, key


async def test_removed_pane_ignores_late_lines():
    app = LogApp()
    async with app.run_test(size=SIZE) as pilot:
        pane = app.query_one(LogPane)
        store = pane.store
        await pane.remove()
        await pilot.pause()
        assert store.closed
        pane.append("late line\n")  # a log stream still delivering: dropped, no error
        pane.finish("STOPPED")
        await asyncio.sleep(0)
