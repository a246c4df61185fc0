"""tui.sanitize: escape sequences dropped whole, other controls shown escaped, SGR kept only for
log lines, markup that cannot form tags, the CLI's SafeWriter; property tests over any text."""

from __future__ import annotations

import io
import json
import re

from hypothesis import given, settings
from hypothesis import strategies as st
from rich.text import Text
from textual.content import Content

from tui.sanitize import (
    SafeWriter,
    cell,
    clean,
    log_line,
    markup,
    one_line,
    raw,
    safe_output,
    styled,
)

ESC, BEL = "\x1b", "\x07"
HOSTILE = [
    f"{ESC}]0;pwned{BEL}",  # window title (OSC 0)
    f"{ESC}]2;pwned{ESC}\\",  # title, ST-terminated
    f"{ESC}]52;c;cm0gLXJmIH4K{BEL}",  # clipboard write (OSC 52)
    f"{ESC}]8;;http://evil.example/{ESC}\\click{ESC}]8;;{ESC}\\",  # hyperlink (OSC 8)
    f"{ESC}[2J{ESC}[H",  # clear screen, cursor home
    f"{ESC}[10A{ESC}[5;5H{ESC}[K",  # cursor movement, erase line
    f"{ESC}P1$tx{ESC}\\",  # DCS
    f"{ESC}_apc{ESC}\\{ESC}^pm{ESC}\\{ESC}Xsos{ESC}\\",  # APC, PM, SOS
    "\x9b2J\x9d0;c1-title\x9c\x90dcs\x9c",  # 8-bit C1 CSI/OSC/DCS
    f"{ESC}c",  # RIS: full reset
    f"{ESC}(0",  # line-drawing charset
    f"{ESC}[?1049h{ESC}[?25l",  # alt screen, hide cursor
    "a\rb",  # carriage return overwrite
    "abc\x08\x08\x08xyz",  # backspaces
    "\u202eevil\u202c",  # bidi override
    "\u2066isolate\u2069\u200f",  # bidi isolate, RLM
    f"{ESC}]0;unterminated title to the end",
    f"{ESC}[",  # an unfinished CSI at the end
]
# Nothing a terminal acts on: C0 except TAB/LF, DEL, C1, bidi controls.
ACTIVE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]"
)


def test_each_hostile_sample_is_inert() -> None:
    for sample in HOSTILE:
        for out in (clean(sample), one_line(sample), markup(sample)):
            assert not ACTIVE.search(out), (sample, out)
        assert not ACTIVE.search(log_line(sample).replace(ESC, "")), sample
        # log lines keep SGR and nothing else: every ESC left starts an SGR sequence
        assert all(re.match(r"\[[0-9;:]*m", part) for part in log_line(sample).split(ESC)[1:])


def test_sequences_dropped_whole_other_controls_shown() -> None:
    assert clean(f"gpu{ESC}]0;pwned{BEL}0") == "gpu0"
    assert clean(f"x{ESC}[2Jy") == "xy"
    assert clean("a\rb\x08") == "a\\x0db\\x08"
    assert clean("\u202eabc") == "\\u202eabc"
    assert clean("line1\n\tline2") == "line1\n\tline2"
    assert one_line("a\nb\r\nc\td") == "a b c d"
    assert one_line("x" * 50, 10) == "x" * 9 + "…"


def test_log_line_keeps_colours_only() -> None:
    assert log_line(f"{ESC}[31mred{ESC}[0m {ESC}]0;t{BEL}ok") == f"{ESC}[31mred{ESC}[0m ok"
    assert log_line(f"{ESC}[1;38;5;196mx{ESC}[m") == f"{ESC}[1;38;5;196mx{ESC}[m"
    assert log_line(f"{ESC}[2J{ESC}[31m") == f"{ESC}[31m"


def test_markup_cannot_form_tags_and_round_trips() -> None:
    for s in [
        "[@click=app.quit]x[/]",
        "[link='http://e']x[/link]",
        "[$accent]x",
        "a\\[b]c",
        "x\\",
        "[[b]]",
        "[b]bold[/b]",
    ]:
        content = Content.from_markup(markup(s))
        assert content.plain == s and not content.spans, s


def test_cell_and_styled_keep_styles_and_drop_controls() -> None:
    c = cell(f"[@click=app.quit]{ESC}[2Jid", style="bold")
    assert isinstance(c, Text) and c.plain == "[@click=app.quit]id" and str(c.style) == "bold"
    t = Text("host ")
    t.append(f"gpu{ESC}]0;x{ESC}\\name", "bold red")
    t.append(" tail", "dim")
    out = styled(t)
    assert out.plain == "host gpuname tail"
    assert [(s.start, s.end, str(s.style)) for s in out.spans] == [
        (5, 12, "bold red"),
        (12, 17, "dim"),
    ]
    plain = Text("nothing to do")
    assert styled(plain) is plain  # the fast path hands back the same object


def test_safe_writer_cleans_and_raw_passes() -> None:
    buf = io.StringIO()
    w = SafeWriter(buf)
    print(f"host {ESC}]0;pwned{BEL}x", file=w)
    print("ok\ttab", file=w)
    raw(w).write(f"{ESC}[32m✓{ESC}[0m\n")
    assert buf.getvalue() == f"host x\nok\ttab\n{ESC}[32m✓{ESC}[0m\n"
    assert raw(buf) is buf
    assert not hasattr(w, "buffer")  # bytes would bypass the cleaning


def test_safe_output_wraps_and_restores(capsys) -> None:
    import sys

    before = sys.stdout
    with safe_output():
        assert isinstance(sys.stdout, SafeWriter)
        print(f"a{ESC}[2Jb")
    assert sys.stdout is before
    assert capsys.readouterr().out == "ab\n"


@settings(max_examples=300, deadline=None)
@given(
    st.text(
        alphabet=st.characters(codec=None, max_codepoint=0x2100)
        | st.sampled_from(
            [ESC, BEL, "\x9b", "\x9d", "\x9c", "[", "]", ";", "\\", "\u202e", "\r", "\n"]
        ),
        max_size=80,
    )
)
def test_any_text_comes_out_inert(s: str) -> None:
    for out in (clean(s), one_line(s), markup(s)):
        assert not ACTIVE.search(out)
    assert "\n" not in one_line(s)
    assert all(re.match(r"\[[0-9;:]*m", part) for part in log_line(s).split(ESC)[1:])
    assert Content.from_markup(markup(s)).plain == one_line(s)


@settings(max_examples=200, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(),
        lambda inner: (
            st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
        ),
        max_leaves=12,
    )
)
def test_json_passes_the_writer_unchanged(doc: object) -> None:
    # ensure_ascii JSON is printable ASCII: the SafeWriter never changes a --json document.
    text = json.dumps(doc)
    assert clean(text) == text
    assert json.loads(clean(text)) == doc
