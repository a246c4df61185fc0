"""LogStore: lines on disk, offsets and flags in memory, block search."""

from __future__ import annotations

import random
import time

import pytest

import tui.logs.store as store_mod
from tui.logs import ERROR, HINT, TRACEBACK, WARNING, LogStore, Query


@pytest.fixture
def store():
    s = LogStore()
    yield s
    s.close()


@pytest.fixture
def small_blocks(monkeypatch):
    """Blocks and index entries of a few hundred bytes, so small logs cross many of both."""
    monkeypatch.setattr(store_mod, "BLOCK", 700)
    monkeypatch.setattr(store_mod, "INDEX_EVERY", 300)


# -- lines -------------------------------------------------------------------------------------


def test_complete_lines_and_pending(store):
    assert store.append("one\ntwo\nthr") == 2
    assert len(store) == 2
    assert store.pending == "thr"
    assert store.append("ee\nfour") == 1
    assert [store.line(i) for i in range(len(store))] == ["one", "two", "three"]
    assert store.pending == "four"
    assert store.flush_pending() == 1
    assert store.line(3) == "four"
    assert store.pending == ""
    assert store.flush_pending() == 0
    with pytest.raises(IndexError):
        store.line(4)


def test_crlf_and_progress_bars(store):
    store.append("a\r\nb\r\n")
    store.append("  0%|     | 0/9\r 50%|##   | 4/9\r100%|#####| 9/9\n")
    assert [store.line(i) for i in range(3)] == ["a", "b", "100%|#####| 9/9"]
    # A \r at the end of a chunk: either half of \r\n, or the next chunk overwrites the line.
    store.append("x\r")
    assert store.pending == "x"
    store.append("\ny\r")
    assert store.line(3) == "x"
    store.append("z\n")
    assert store.line(4) == "z"
    # tqdm without any newline keeps only its latest state pending
    for i in range(1000):
        store.append(f"\r{i:4d}/1000")
    assert store.pending == " 999/1000"


def test_runaway_line_without_newline_is_cut(store, monkeypatch):
    monkeypatch.setattr(store_mod, "MAX_PENDING", 100)
    store.append("x" * 150)
    assert len(store) == 1 and store.pending == ""
    assert store.line(0) == "x" * 150


def test_ansi_kept_in_line_stripped_in_plain(store):
    store.append("\x1b[36m(TaskRunner pid=1, ip=10.0.0.2)\x1b[0m step:1 - loss:0.5\n")
    assert store.line(0).startswith("\x1b[36m")
    assert store.plain(0) == "(TaskRunner pid=1, ip=10.0.0.2) step:1 - loss:0.5"


def test_unicode_and_bad_surrogates(store):
    store.append("héllo wörld ✓\n日本語のログ\nbad \udcff byte\n")
    assert store.line(0) == "héllo wörld ✓"
    assert store.line(1) == "日本語のログ"
    assert store.line(2) == "bad ? byte"
    assert store.find("WÖRLD") == 0  # non-ASCII, ignore case: the text path
    assert store.find("ログ") == 1


def test_huge_append_is_sliced(store, monkeypatch):
    monkeypatch.setattr(store_mod, "SLICE", 1000)
    text = "".join(f"line {i} ERROR\n" if i % 100 == 0 else f"line {i}\n" for i in range(5000))
    assert store.append(text) == 5000
    assert store.line(4999) == "line 4999"
    assert list(store.error_lines()) == list(range(0, 5000, 100))


def test_long_line_read_is_capped(store, monkeypatch):
    monkeypatch.setattr(store_mod, "MAX_LINE_READ", 50)
    store.append("a" * 200 + "\nshort\n")
    assert store.line(0) == "a" * 50 + "…"
    assert store.line(1) == "short"
    assert store.max_line_length == 200


# -- flags and hints ---------------------------------------------------------------------------


def test_flags_errors_warnings(store):
    store.append(
        "plain info line\n"
        "2025-01-16 08:48:22,123 WARNING something odd\n"
        "ERROR:root:boom\n"
        "ERROR again\n"
        "fine\n"
        "UserWarning: deprecated\n"
    )
    assert [store.flags(i) & (ERROR | WARNING) for i in range(6)] == [
        0,
        WARNING,
        ERROR,
        ERROR,
        0,
        WARNING,
    ]
    assert list(store.error_lines()) == [2]  # one run of error lines, one entry


def test_ray_traceback_flagged_per_origin(store):
    a = "(TaskRunner pid=11, ip=10.0.0.2) "
    b = "(WorkerDict pid=22, ip=10.0.0.3) "
    store.append(
        a
        + "Traceback (most recent call last):\n"
        + a
        + '  File "/opt/verl/verl/trainer/main_ppo.py", line 42, in run\n'
        + b
        + "step:3 - actor/entropy:0.5\n"  # another origin, interleaved
        + a
        + "    trainer.fit()\n"
        + a
        + "ValueError: Total available GPUs 8 is less than total desired GPUs 16\n"
        + a
        + "after the traceback\n"
    )
    flags = [store.flags(i) for i in range(6)]
    assert flags[0] & TRACEBACK and flags[0] & ERROR
    assert flags[1] == TRACEBACK
    assert flags[2] == 0
    assert flags[3] == TRACEBACK
    assert flags[4] & (TRACEBACK | ERROR | HINT) == TRACEBACK | ERROR | HINT
    assert flags[5] == 0
    assert store.hint(4).key == "gpus_short"
    assert "16 GPUs" in store.hint(4).text
    assert store.hint_lines() == [4]


def test_traceback_across_chunks(store):
    store.append('Traceback (most recent call last):\n  File "x.py", line 1')
    store.append(", in <module>\n    main()\n")
    store.append("RuntimeError: CUDA error: out of memory\nnext\n")
    assert [store.flags(i) & TRACEBACK for i in range(5)] == [TRACEBACK] * 4 + [0]
    assert store.hint(3).key == "cuda_oom"


def test_same_hint_not_repeated_nearby(store):
    line = "(WorkerDict pid={}, ip=10.0.0.3) torch.OutOfMemoryError: CUDA out of memory.\n"
    store.append("".join(line.format(p) for p in range(8)))
    assert store.hint_lines() == [0]  # 8 ranks failing at once: one hint
    assert all(store.flags(i) & ERROR for i in range(8))
    store.append("filler\n" * 1500 + line.format(99))
    assert store.hint_lines() == [0, 1508]


# -- search ------------------------------------------------------------------------------------


def _random_log(n: int, seed: int = 3) -> list[str]:
    rnd = random.Random(seed)
    words = ["alpha", "Beta", "gamma", "needle", "NEEDLE", "delta", "\x1b[31mred\x1b[0m", "ü"]
    return [" ".join(rnd.choice(words) for _ in range(rnd.randrange(0, 12))) for _ in range(n)]


def test_find_and_matching_agree_with_brute_force(store, small_blocks):
    lines = _random_log(3000)
    for i in range(0, len(lines), 137):  # appends of varied size: index entries between them
        store.append("\n".join(lines[i : i + 137]) + "\n")
    plain = [store.plain(i) for i in range(len(lines))]
    cases = [
        ("needle", False, True),
        ("NEEDLE", False, False),
        ("red delta", False, True),
        (r"^gamma\b", True, True),
        (r"needle\s+ü", True, False),
        ("nothing", False, True),
    ]
    for pattern, regex, ic in cases:
        q = Query(pattern, regex, ic)
        expect = [i for i, text in enumerate(plain) if q.text_re.search(text)]
        assert list(store.matching(q)) == expect, pattern
        assert list(store.matching(q, 500, 2100)) == [i for i in expect if 500 <= i < 2100]
        rnd = random.Random(pattern)
        for start in [0, 1, len(lines) - 1, len(lines) + 5, *rnd.sample(range(len(lines)), 40)]:
            fwd = next((i for i in expect if i >= start), None)
            back = next((i for i in reversed(expect) if i <= start), None)
            assert store.find(q, start) == fwd, (pattern, start)
            assert store.find(q, start, backwards=True) == back, (pattern, start)


def test_find_options(store):
    store.append("Alpha\nbeta \x1b[1mBOLD\x1b[0m tail\nalpha again\n")
    assert store.find("alpha") == 0
    assert store.find("alpha", 1) == 2
    assert store.find("Alpha", 1, ignore_case=False) is None
    assert store.find("bold tail") == 1  # the match spans a colour change
    assert store.find("[1m") is None  # escape codes are not text
    assert store.find(r"^al\w+ again$", regex=True) == 2
    assert store.find("alpha", 1, backwards=True) == 0
    assert store.find("alpha", -1, backwards=True) is None
    assert store.find("") is None
    with pytest.raises(Exception):  # noqa: B017 -- re.error
        store.find("(unclosed", regex=True)


def test_matching_extends_incrementally(store, small_blocks):
    got = []
    done = 0
    for chunk in range(20):
        store.append("".join(f"{chunk}-{i} {'hit' if i % 7 == 0 else 'miss'}\n" for i in range(50)))
        got.extend(store.matching("hit", done))
        done = len(store)
    assert got == list(store.matching("hit"))
    assert len(got) == 20 * 8


def test_line_longer_than_a_block(store, small_blocks):
    store.append("short\n" + "x" * 5000 + " needle\n" + "after\n")
    assert store.find("needle") == 1
    assert store.find("needle", 2, backwards=True) == 1
    assert store.find("after", 0) == 2
    assert list(store.matching("x")) == [1]


def test_search_a_million_lines_fast(store):
    text = "".join(
        f"step:{i} - actor/entropy:0.{i % 97} - critic/score:0.{i % 13}\n" for i in range(1_000_000)
    )
    store.append(text)
    assert len(store) == 1_000_000
    t = time.perf_counter()
    assert store.find("no such text") is None
    assert store.find("STEP:999999 ") == 999_999
    elapsed = time.perf_counter() - t
    assert elapsed < 1.0, elapsed
    # Memory: 8 bytes of offset + 1 flag byte per line.
    per_line = (
        store._offsets.buffer_info()[1] * store._offsets.itemsize + store._flags.buffer_info()[1]
    ) / len(store)
    assert per_line < 12


# -- save, clear, close ------------------------------------------------------------------------


def test_save_raw_and_plain(store, tmp_path):
    text = "\x1b[32mgreen\x1b[0m line\nsecond\nunfinished"
    store.append(text)
    raw = store.save(tmp_path / "sub" / "job.log")
    assert raw.read_text() == text
    plain = store.save(tmp_path / "plain.log", plain=True)
    assert plain.read_text() == "green line\nsecond\nunfinished"


def test_clear_and_close(store):
    store.append("ERROR one\ntwo\n")
    store.clear()
    assert len(store) == 0 and len(store.error_lines()) == 0 and store.find("one") is None
    store.append("three\n")
    assert store.line(0) == "three"
    store.close()
    assert store.closed
    with pytest.raises(ValueError):
        store.append("more\n")
