"""verl's rollout dumps (issue 29, item 4), without Ray: the files are written by verl 0.9.1's own
RayPPOTrainer._dump_generations (tests/workloads/verl_dump.py) and read by the real remote
reader (tui/remote/rollout_dump.py) through the local transport, the path every host takes
minus SSH (tests/test_metrics_file.py reads a Ray job's dump over SSH).

Pure: the repetition detector on loops of any unit and not on prose; the length-limit and
empty flags; the histogram; the index rows the host sends.
Real files: steps listed (a FIFO and stray files skipped, never opened), the index with a
regex grep, sort by score and length, pages by byte range, a bad JSON line and an over-long
line named file:line, a FIFO step refused, the same prompt found in another step."""

from __future__ import annotations

import asyncio
import codecs
import json
import math
import os
import sys
from pathlib import Path

import pytest

from tui.rollouts import reader
from tui.rollouts.reader import DumpDir, RolloutError, view_step
from tui.rollouts.samples import (
    FLAG_EMPTY,
    FLAG_MAX,
    FLAG_REPEATS,
    Sample,
    entry_of,
    flags_of,
    histogram,
    repeats,
)
from tui.transport.local import LocalTransport

sys.path.insert(0, str(Path(__file__).parent / "workloads"))
from verl_dump import VerlDumper
from verl_tracking import rollout_samples

ROOT = Path(__file__).resolve().parents[1]


def test_repetition_is_any_loop_and_not_prose() -> None:
    loops = [
        "a" * 200,
        "ab" * 100,
        "The cat sat on the mat. " * 12,
        "x = x + 1\n" * 30,
        "Let me think step by step. " + "Wait, no. " * 40,
        "思考" * 80,
        "I think " + "the answer is 3, wait, " * 30,
    ]
    assert all(repeats(t) for t in loops)
    import this

    prose = [codecs.decode(this.s, "rot13")]
    prose += [(ROOT / f).read_text()[:4000] for f in ("README.md", "docs/architecture.md")]
    prose += ["short " * 10, "The answer is 42."]
    assert not any(repeats(t) for t in prose)


def test_flags_and_histogram() -> None:
    d = rollout_samples(3)
    longest = max(len(o) for o in d["outputs"])
    got = [flags_of(Sample(3, i + 1, "", o, None), longest) for i, o in enumerate(d["outputs"])]
    assert got == [[], [FLAG_EMPTY], [FLAG_REPEATS], [FLAG_MAX], [], []]
    h = histogram([0.0, 0.5, 1.0, 1.0, None, math.nan], bins=4)
    assert (h.low, h.high, h.counts, h.other) == (0.0, 1.0, (1, 0, 1, 2), 2)
    assert histogram([2.0, 2.0]).counts == (2,) and histogram([]).counts == ()
    assert "█" in h.lines()[3] and h.lines()[-1].strip().startswith("no score")
    # The host's rows: only well-formed ones; "nan" is the host's non-finite score.
    assert entry_of([1, 0, 10, "nan", 3, "k", None]).score != entry_of([1, 0, 10, 1, 3, "k", None])
    assert math.isnan(entry_of([1, 0, 10, "nan", 3, "k", None]).score)
    for bad in ([1, 0], [True, 0, 1, 1, 1, "k", None], [1, -1, 1, 1, 1, "k", None], "x"):
        assert entry_of(bad) is None


@pytest.fixture(scope="module")
def dump_dir(tmp_path_factory) -> Path:
    """Steps 1-3 dumped by verl's own code, then a hostile tail on step 3, a FIFO named like
    a step, and stray files."""
    folder = tmp_path_factory.mktemp("rollouts") / "dump"
    dumper = VerlDumper()
    for step in (1, 2, 3):
        d = rollout_samples(step)
        dumper.dump(
            step, d["inputs"], d["outputs"], d["gts"], d["scores"], d["extras"], str(folder)
        )
    dumper.close()
    with open(folder / "3.jsonl", "a") as f:
        f.write('{"input": "half a line\n')
        f.write(json.dumps({"input": "big", "output": "y" * (300 << 10), "score": 2.0}) + "\n")
        f.write("[1, 2]\n")
    os.mkfifo(folder / "7.jsonl")
    (folder / "notes.txt").write_text("x")
    (folder / "x.jsonl").write_text("x")
    return folder


def _dump(folder: Path) -> DumpDir:
    return DumpDir(LocalTransport(), sys.executable, "localhost", str(folder))


async def test_read_a_verl_dump_a_page_at_a_time(dump_dir: Path) -> None:
    dump = _dump(dump_dir)
    assert [s for s, _ in await dump.steps()] == [1, 2, 3]  # FIFO and stray names skipped

    view = await view_step(dump, 2, sort="score")
    want = rollout_samples(2)
    assert [s.score for s in view.samples[:2]] == [1.0, 1.0]
    assert math.isnan(view.order[-1].score)  # NaN sorts last
    by_line = {s.line: s for s in view.samples}
    for i in range(6):
        s = by_line[i + 1]
        assert (s.input, s.output, s.gts) == (want["inputs"][i], want["outputs"][i], want["gts"][i])
        assert s.extras["acc"] == want["extras"]["acc"][i] and s.step == 2
    assert by_line[2].flags == [FLAG_EMPTY] and by_line[3].flags == [FLAG_REPEATS]
    assert by_line[4].flags == [FLAG_MAX]
    assert view.histogram.other == 1 and sum(view.histogram.counts) == 5

    # Sorted by length, a page of two from the second, and the grep running on the host.
    view = await view_step(dump, 2, sort="length", start=1, count=2)
    lengths = [e.output_chars for e in view.order]
    assert lengths == sorted(lengths, reverse=True) and view.order[0].line == 4
    assert [s.line for s in view.samples] == [e.line for e in view.order[1:3]] == [3, 6]
    view = await view_step(dump, 2, pattern=r"what is [35] \+")
    assert [s.line for s in view.samples] == [4, 6]

    # The hostile step: verl's six samples, then lines that are not samples, each named
    # file:line; a 300 KiB answer comes as its head and its end, and says so.
    view = await view_step(dump, 3)
    path = f"{dump_dir}/3.jsonl"
    assert len(view.samples) == 7
    assert view.index.bad[0].startswith(f"{path}:7: bad JSON")
    assert f"{path}:9: not a JSON object" in view.index.bad
    (big,) = await dump.read(view.index, [e for e in view.index.entries if e.line == 8])
    assert big.cut == {"output": 300 << 10} and len(big.output) < 70 << 10
    assert big.output.startswith("y" * 1000) and big.output.endswith("y" * 1000)
    assert "characters ...]" in big.output and FLAG_REPEATS in big.flags

    # The same prompt in another step (the compare screen's lookup).
    key = view.order[2].input_key
    other = await dump.index(1)
    (found,) = await dump.read(other, [other.by_key(key)])
    assert (found.step, found.input, found.output) == (
        1,
        view.samples[2].input,
        "I think " + "the answer is 3, wait, " * 30,
    )
    assert other.by_key("0" * 16) is None

    # A FIFO where a step file belongs is refused at once, never waited on.
    with pytest.raises(RolloutError, match="not a regular file"):
        await asyncio.wait_for(dump.index(7), 10)
    with pytest.raises(RolloutError, match="No such file"):
        await _dump(dump_dir / "nope").steps()
    with pytest.raises(RolloutError, match="bad pattern"):
        await dump.index(1, "(")


async def test_a_line_past_the_bound_is_skipped_not_held(tmp_path: Path, monkeypatch) -> None:
    """The host's pass holds at most max_line bytes of one line: a 3 MiB line with a 1 MiB
    bound is reported, and the samples after it still come."""
    path = tmp_path / "5.jsonl"
    good = json.dumps({"input": "q", "output": "a", "score": 1.0, "step": 5})
    path.write_text(good + "\n" + "z" * (3 << 20) + "\n" + good + "\n")
    dump = _dump(tmp_path)
    real_ask = DumpDir._ask

    async def ask(self, req, timeout, what):
        if req.get("op") == "index":
            req = {**req, "max_line": 1 << 20}
        return await real_ask(self, req, timeout, what)

    monkeypatch.setattr(DumpDir, "_ask", ask)
    index = await dump.index(5)
    assert [e.line for e in index.samples] == [1, 3]
    assert index.bad == [f"{path}:2: longer than 1048576 bytes"]
    assert reader.MAX_INDEX >= 100_000


async def test_rollouts_screen_keys(dump_dir: Path) -> None:
    """The screen over the same verl dump: sort, a regex search run on the host, a sample
    whole (its terminal escape dropped, a bidi override shown escaped), one prompt in two steps, esc
    clearing the search before leaving."""
    from textual.app import App

    from tui.screens.rollouts.sample import CompareStepsScreen, SampleScreen
    from tui.screens.rollouts.screen import RolloutsScreen

    async def open_dump() -> DumpDir:
        return _dump(dump_dir)

    class Host(App[None]):
        def on_mount(self) -> None:
            self.push_screen(RolloutsScreen(open_dump, "raysubmit_x"))

    async def until(pilot, predicate) -> None:
        for _ in range(400):
            if predicate():
                return
            await pilot.pause(0.05)
        raise AssertionError("the screen did not get there")

    app = Host()
    async with app.run_test(size=(160, 46)) as pilot:
        screen = app.screen
        assert isinstance(screen, RolloutsScreen)
        await until(pilot, lambda: screen.loaded)
        assert screen.steps == [1, 2, 3] and screen.view.index.step == 3
        assert [s.line for s in screen.view.samples] == [1, 2, 3, 4, 5, 6, 8]
        await pilot.press("s")  # by score
        await until(pilot, lambda: screen.loaded and screen.sort == "score")
        scores = [s.score for s in screen.view.samples]
        assert scores[:2] == [2.0, 1.5] and len(screen.view.index.bad) == 2
        await pilot.press("slash", *"red", "enter")
        await until(pilot, lambda: screen.loaded and screen.pattern == "red")
        assert [s.line for s in screen.view.samples] == [5]
        await pilot.press("o")
        await until(pilot, lambda: isinstance(app.screen, SampleScreen))
        body = str(app.screen.query_one("#sample-body").render())
        assert "red 数学 \\u202eevil" in body and "\x1b" not in body  # escape dropped, bidi shown
        await pilot.press("escape", "c")
        await until(pilot, lambda: isinstance(app.screen, CompareStepsScreen))
        compare = app.screen
        await until(pilot, lambda: compare.found is not None)
        assert compare.other == 2 and compare.found.step == 2
        assert compare.found.input == screen.view.samples[0].input
        await pilot.press("left_square_bracket")
        await until(pilot, lambda: compare.other == 1 and compare.found is not None)
        await pilot.press("escape", "escape")  # out of compare; then the search is cleared
        await until(pilot, lambda: screen.loaded and screen.pattern is None)
        assert app.screen is screen and len(screen.view.samples) == 7
