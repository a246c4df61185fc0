"""verl's rollout samples as the cockpit reads them: the index of one step's file, a sample
parsed from its JSON line, the flags a sample earns, and a step's score histogram.

verl 0.9.1 (``RayPPOTrainer._write_generations``) writes ``{dump_dir}/{step}.jsonl``, one
``json.dumps(entry, ensure_ascii=False, default=str)`` line per sample with the keys ``input``,
``output``, ``gts``, ``score``, ``step`` and then every reward extra of the same length
(``acc``, ``pred``, ``request_id``, …). The dump carries no token counts, so "ends at the maximum
length" is read from the text (see :func:`flags_of`).

Plain Python: the text comes from whoever reads it (tui/rollouts/reader.py).
"""

from __future__ import annotations

import json
import math
import zlib
from dataclasses import dataclass, field
from typing import Any

# A field longer than this is cut (the host already sends long ones as head and end).
MAX_FIELD_CHARS = 256 << 10
FLAG_EMPTY = "empty"
FLAG_MAX = "max_length"
FLAG_REPEATS = "repeats"
FLAG_BAD = "bad_line"


@dataclass(frozen=True, slots=True)
class IndexEntry:
    """One line of a step's file, as the host's one pass saw it."""

    line: int
    offset: int
    length: int
    score: float | None
    output_chars: int
    input_key: str  # a hash of the prompt: the same prompt in another step has the same key
    bad: str | None = None  # why the line is not a sample


def entry_of(row: object) -> IndexEntry | None:
    """An index row as the host sent it (``[line, offset, length, score, chars, key, why]``),
    or None when it is not one."""
    if not isinstance(row, list) or len(row) != 7:
        return None
    line, off, length, score, chars, key, why = row
    ints = (line, off, length, chars)
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in ints):
        return None
    if isinstance(score, str):
        score = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}.get(score)
    elif isinstance(score, bool) or not isinstance(score, (int, float)):
        score = None
    if not isinstance(key, str) or not (why is None or isinstance(why, str)):
        return None
    return IndexEntry(
        line, off, length, None if score is None else float(score), chars, key[:32], why
    )


@dataclass
class Sample:
    """One generation of one step (every text field untrusted: sanitize before a terminal)."""

    step: int
    line: int
    input: str
    output: str
    score: float | None
    gts: str = ""
    extras: dict[str, Any] = field(default_factory=dict)
    flags: list[str] = field(default_factory=list)
    cut: dict[str, int] = field(default_factory=dict)  # fields sent as head + end: full length

    def to_json(self) -> dict[str, Any]:
        score = self.score if self.score is None or math.isfinite(self.score) else None
        return {
            "step": self.step,
            "line": self.line,
            "input": self.input,
            "output": self.output,
            "score": score,
            "gts": self.gts,
            "flags": list(self.flags),
            "extras": self.extras,
        }


def _field(value: object) -> str:
    text = value if isinstance(value, str) else ("" if value is None else json.dumps(value))
    return text[:MAX_FIELD_CHARS]


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def sample_from(doc: dict[str, Any], step: int, line: int) -> Sample:
    """The sample of one line's JSON object (as the host sent it: long fields already cut
    to their head and end)."""
    extras: dict[str, Any] = {}
    for key, value in list(doc.items())[:64]:
        if key not in ("input", "output", "gts", "score", "step") and isinstance(key, str):
            extras[key[:200]] = value if isinstance(value, (int, float, bool)) else _field(value)
    return Sample(
        step=step,
        line=line,
        input=_field(doc.get("input")),
        output=_field(doc.get("output")),
        score=_number(doc.get("score")),
        gts=_field(doc.get("gts")),
        extras=extras,
    )


# --- flags -------------------------------------------------------------------------------------

REPEAT_MIN_CHARS = 120
REPEAT_RATIO = 0.12  # deflated / raw: natural text is ~0.35-0.6, a loop falls far below
TAIL_CHARS = 4096
_ENDINGS = set(".!?)]}>\"'`*|\n。！？") | {"$"}


def repeats(text: str) -> bool:
    """Whether the text repeats itself: its end is one unit said three or more times over at
    least a quarter of it, or the whole of it deflates far below what language does. Any
    loop counts (words, a sentence, a code line, one character), not a list of phrases."""
    if len(text) < REPEAT_MIN_CHARS:
        return False
    tail = text[-TAIL_CHARS:]
    if _tail_period(tail) * 4 >= len(tail) or _tail_period(tail.rstrip()) * 4 >= len(tail):
        return True
    raw = text.encode("utf-8", "replace")[: 1 << 20]
    return len(zlib.compress(raw, 6)) / len(raw) < REPEAT_RATIO


def _tail_period(tail: str, max_unit: int = 512) -> int:
    """How many characters at the end of `tail` are copies of one unit (three copies at
    least; 0 when none)."""
    n = len(tail)
    best = 0
    for unit in range(1, min(max_unit, n // 3) + 1):
        if tail[n - unit :] != tail[n - 2 * unit : n - unit] or (
            tail[n - unit :] != tail[n - 3 * unit : n - 2 * unit]
        ):
            continue
        i = n - 3 * unit
        while i - 1 >= 0 and tail[i - 1] == tail[i - 1 + unit]:
            i -= 1
        best = max(best, n - i)
    return best


def cut_off(output: str, longest: int, chars: int | None = None) -> bool:
    """Whether the output looks stopped by the length limit rather than by the model: among
    the step's longest (within 10 %) and not ending where text ends (punctuation, a closing
    bracket, a newline). The dump has no token counts, so the text is all there is."""
    if longest < 64 or (len(output) if chars is None else chars) < 0.9 * longest:
        return False
    end = output.rstrip(" \t")
    return not end or end[-1] not in _ENDINGS


def flags_of(sample: Sample, longest: int, chars: int | None = None) -> list[str]:
    """The flags of one sample; `longest`: the step's longest output in characters, `chars`:
    this one's (its text may be only its head and end)."""
    out = []
    if not sample.output.strip():
        out.append(FLAG_EMPTY)
    elif cut_off(sample.output, longest, chars):
        out.append(FLAG_MAX)
    if repeats(sample.output):
        out.append(FLAG_REPEATS)
    return out


# --- a step's scores -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Histogram:
    """Counts of a step's finite scores in equal bins from `low` to `high`; `other`: samples
    with no score or a non-finite one."""

    low: float
    high: float
    counts: tuple[int, ...]
    other: int

    def to_json(self) -> dict[str, Any]:
        return {
            "low": self.low,
            "high": self.high,
            "counts": list(self.counts),
            "other": self.other,
        }

    def lines(self, width: int = 30) -> list[str]:
        """Text bars, one per bin: 'lo..hi  ███  n'."""
        top = max(self.counts, default=0) or 1
        step = (self.high - self.low) / len(self.counts) if self.counts else 0.0
        out = []
        for i, n in enumerate(self.counts):
            lo = self.low + i * step
            bar = "█" * round(width * n / top)
            out.append(f"{lo:>8.3g}..{lo + step:<8.3g} {bar:<{width}} {n}")
        if self.other:
            out.append(f"{'no score':>18} {'':<{width}} {self.other}")
        return out


def histogram(scores: list[float | None], bins: int = 10) -> Histogram:
    finite = [s for s in scores if s is not None and math.isfinite(s)]
    other = len(scores) - len(finite)
    if not finite:
        return Histogram(0.0, 0.0, (), other)
    low, high = min(finite), max(finite)
    if high == low:
        return Histogram(low, high, (len(finite),), other)
    counts = [0] * bins
    width = (high - low) / bins
    for s in finite:
        counts[min(bins - 1, int((s - low) / width))] += 1
    return Histogram(low, high, tuple(counts), other)


SORTS = ("file", "score", "length")


def sort_entries(entries: list[IndexEntry], by: str, reverse: bool = False) -> list[IndexEntry]:
    """Samples in file order, by score (highest first; no score last) or by output length
    (longest first); bad lines keep their place at the end."""
    good = [e for e in entries if e.bad is None]
    bad = [e for e in entries if e.bad is not None]
    if by == "score":
        good.sort(key=lambda e: (e.score is None or math.isnan(e.score), -(e.score or 0.0)))
    elif by == "length":
        good.sort(key=lambda e: -e.output_chars)
    if reverse:
        good.reverse()
    return good + bad
