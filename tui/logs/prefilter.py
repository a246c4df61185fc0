"""The log signatures' prefilter: which short words a line must hold for any signature
(tui/logs/signatures.py) to be able to match it.

Each signature's regex is parsed once and the literal text every match must contain is derived
from it (`required_literals`); from those, a few anchor words are chosen (`Prefilter`) such that
every signature literal contains one. A block of log is scanned for the anchors with C-level
`bytes.find`; only lines holding one reach the regexes. No line a signature would match is
skipped: the literals come from the patterns themselves (compiled with re.ASCII, so
case-insensitive parts fold ASCII only, exactly as `bytes.lower` does).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # typeshed describes the regex parser under its old names only
    import sre_constants as _sre_c
    import sre_parse as _sre_parse
else:
    try:  # Python 3.11+: the regex parser's own home; sre_parse is its deprecated alias
        from re import _constants as _sre_c
        from re import _parser as _sre_parse
    except ImportError:  # pragma: no cover - Python < 3.11
        import sre_constants as _sre_c
        import sre_parse as _sre_parse


# -- deriving the literals a pattern needs -----------------------------------------------------

_LITERAL, _BRANCH, _SUBPATTERN = _sre_c.LITERAL, _sre_c.BRANCH, _sre_c.SUBPATTERN
_REPEATS = (_sre_c.MAX_REPEAT, _sre_c.MIN_REPEAT, getattr(_sre_c, "POSSESSIVE_REPEAT", None))
_ATOMIC = getattr(_sre_c, "ATOMIC_GROUP", None)
MIN_LITERAL = 3


def _cover(seq) -> list[str] | None:  # seq: sre_parse's SubPattern, or a list of items
    """Strings one of which every match of `seq` contains, or None when nothing is certain.
    Literal runs give a one-string cover; a branch gives the union of its alternatives'."""
    best: list[str] | None = None

    def better(cand: list[str] | None) -> None:
        nonlocal best
        if cand and (best is None or min(map(len, cand)) > min(map(len, best))):
            best = cand

    run: list[str] = []
    for op, av in [*seq, (None, None)]:
        if op is _LITERAL:
            run.append(chr(av))
            continue
        if run:
            better(["".join(run)])
            run = []
        if op is _BRANCH:
            alts = [_cover(alt) for alt in av[1]]
            covered = [a for a in alts if a]
            if len(covered) == len(alts):  # every alternative has a required literal
                better([s for alt in covered for s in alt])
        elif op is _SUBPATTERN:
            better(_cover(av[-1]))
        elif op is not None and op is _ATOMIC:
            better(_cover(av))
        elif op is not None and op in _REPEATS and av[0] >= 1:
            better(_cover(av[2]))
    return best


def required_literals(pattern: re.Pattern[str]) -> tuple[str, ...]:
    """The lowercase strings one of which every match of `pattern` contains, each at least
    MIN_LITERAL characters long; ValueError for a pattern that has no such set (the prefilter
    could never find its lines)."""
    cover = _cover(_sre_parse.parse(pattern.pattern, pattern.flags))
    if not cover or min(map(len, cover)) < MIN_LITERAL or not all(s.isascii() for s in cover):
        raise ValueError(
            f"signature pattern {pattern.pattern!r} needs a literal of "
            f"{MIN_LITERAL}+ ASCII characters in every alternative"
        )
    return tuple(sorted({s.lower() for s in cover}))


# -- the prefilter ---------------------------------------------------------------------------

# Lowercase words that make a line worth classifying for its severity alone (rules in classify).
CLASS_NEEDLES = ("error", "exception", "warn", "fatal", "critical", "traceback (most")
# Lines of a healthy verl run (Ray, vLLM, NCCL, verl, tqdm): no anchor may occur in them, so
# the prefilter passes as few healthy lines as it can.
_HEALTHY = """
(TaskRunner pid=31337, ip=10.0.0.11) step:12 - actor/entropy:0.61 - actor/pg_loss:-0.02 -
 perf/max_memory_allocated_gb:61.2 - perf/cpu_memory_used_gb:120.5 - timing_s/gen:41.2 -
 response_length/mean:512.0 - critic/score/mean:0.43 - training/global_step:12 - timing_s/step:90
(WorkerDict pid=40211, ip=10.0.0.12) INFO 01-16 08:48:22 [model_runner.py:1544] Graph capturing
 finished in 12 secs, took 0.53 GiB; Loading model weights took 14.99 GB; # GPU blocks: 1952
(WorkerDict pid=40212, ip=10.0.0.12) node2:40212:40230 [1] NCCL INFO Channel 00/0 : 0[0] ->
 1[1] via P2P/IPC/read; NCCL INFO Connected all rings; NCCL INFO comm 0x55 rank 1 nranks 8
 cudaDev 1 busId 1b000 commId 0x1 - Init COMPLETE; NCCL INFO Using network IB
(vLLMHttpServer pid=884, ip=10.0.0.12) INFO: 127.0.0.1:53042 - "POST /v1/completions HTTP/1.1"
 200 OK; Added request cmpl-1; Finished request cmpl-1; Avg prompt throughput: 10.1 tokens/s
(raylet) [2025-01-16 08:48:22,123 I 4521 4521] node_manager.cc:1012: Worker process started;
 2025-01-16 08:48:22,123 INFO worker.py:1841 -- Connecting to existing Ray cluster at address:
 10.0.0.11:6379... Connected to Ray cluster. View the dashboard at 127.0.0.1:8265 [repeated 7x
 across cluster] job submission; runtime_env setup; Started a local Ray instance.
Training Progress: 12%|█▏ | 12/100 [18:02<2:12:15, 90.2s/it] Processed prompts: 100%
 256/256 [00:12<00:00, 20.1it/s, est. speed input: 1024 toks/s, output: 4096 toks/s]
 validation generation end; saving checkpoint to checkpoints/global_step_12/actor
Job 'raysubmit_x' submitted successfully; Status for job 'raysubmit_x': RUNNING; Job is running
 Tailing logs until the job exits (disable with --no-wait)
INFO: NumExpr defaulting to 8 threads. datasets - INFO - PyTorch version 2.2.1 available.
WARNING: val_batch_size is deprecated. 'default_local_dir': 'checkpoints/x', 'max_actor_ckpt':
Memory profiling results: total_gpu_memory=79.1GiB initial_memory_usage=15.3GiB; file size
Maximum concurrency for 20000 tokens per request: 1.56x; NCCL INFO threadThresholds 8/8/64
ProcessGroupNCCL.cpp:1476] Warning: destroy_process_group() was not called; process group
Unable to resolve hostname to a (local) address. Using the loopback address as fallback.
Found 8 GPUs; model config; loading weights; device cuda:0; store; support; must; could;
old value; group; code; size; disk usage; found; timed step; large batch; kill switch off
"""
_STOP_WORDS = frozenset(
    (
        "the",
        "to",
        "for",
        "of",
        "on",
        "in",
        "at",
        "is",
        "was",
        "be",
        "been",
        "are",
        "and",
        "or",
        "not",
        "no",
        "with",
        "from",
        "by",
        "as",
        "it",
        "this",
        "that",
        "may",
        "can",
        "has",
        "have",
        "had",
        "any",
        "all",
        "now",
        "than",
        "its",
        "into",
        "out",
        "per",
        "set",
        "use",
    )
)
_WORD_RE = re.compile(r"[a-z0-9_]+(?:-[a-z0-9_]+)*")


def _choose_anchors(literals: list[str], given: tuple[str, ...]) -> tuple[str, ...]:
    """A few words such that every literal contains one: the `given` needles first, then, over
    and over, the word (not a stop word, not found in _HEALTHY) that occurs in most literals still
    uncovered, the longer on a tie (being the rarer). Once no word is shared, each literal left
    is its own anchor."""
    left = [lit for lit in literals if not any(g in lit for g in given)]
    healthy = _HEALTHY.lower()
    # each candidate word with the literals that contain it (even inside a longer word), worked
    # out once: a round only drops the literals just covered (~100 rounds on the table)
    words = {
        w
        for lit in left
        for w in _WORD_RE.findall(lit)
        if len(w) >= MIN_LITERAL and w not in _STOP_WORDS and not w.isdigit() and w not in healthy
    }
    holders = {w: {i for i, lit in enumerate(left) if w in lit} for w in words}
    own = {i: {w for w in _WORD_RE.findall(lit) if w in holders} for i, lit in enumerate(left)}
    uncovered = set(range(len(left)))
    chosen: list[str] = []
    while uncovered:
        # only words of a literal still uncovered compete, as when they were collected anew
        live = set().union(*(own[i] for i in uncovered))
        counts = {w: len(holders[w] & uncovered) for w in live}
        word = max(counts, key=lambda w: (counts[w], len(w), w)) if counts else ""
        if not word or counts[word] == 1:  # shared by none: the whole literal is rarer
            word = max((left[i] for i in sorted(uncovered)), key=len)
        chosen.append(word)
        uncovered = {i for i in uncovered if word not in left[i]}
    return tuple(given) + tuple(sorted(chosen))


# Bytes of a "token" for the gate below: ASCII letters and `_` (after lowercasing); every other
# byte (digits too, so numbers do not make each metric line's tokens new) separates tokens.
_TOKEN_BYTES = bytes(c if (97 <= c <= 122 or c == 95) else 32 for c in range(256))
_GATE_RE = re.compile(r"[a-z_]+")
MAX_CLEAN_TOKENS = 200_000  # tokens remembered as holding no gate (then forgotten, all at once)
MAX_TOKEN_KEPT = 64  # longer tokens are not remembered: the caches stay under ~20 MB


def _gate(anchor: str) -> bytes | None:
    """The longest run of token bytes in `anchor`: wherever the anchor occurs, this run lies
    inside one token of the text. None when the anchor has none (it is always scanned)."""
    runs = _GATE_RE.findall(anchor)
    return max(runs, key=len).encode() if runs else None


@dataclass(frozen=True)
class Prefilter:
    anchors: tuple[str, ...]  # lowercase; a line holding none of them cannot match any rule
    by_anchor: dict[str, tuple[int, ...]]  # anchor -> signatures with a literal that holds it
    gates: tuple[bytes | None, ...] = ()  # per anchor: _gate(anchor)
    literals: tuple[str, ...] = ()  # every signature literal, lowercase
    owners: tuple[tuple[int, ...], ...] = ()  # per literal: the signatures that need it
    literal_gates: tuple[str | None, ...] = ()  # per literal: its gate
    # Tokens seen in earlier blocks that hold no anchor's gate: a healthy log repeats its words,
    # so a block's gate check mostly reads the few tokens it has not seen before.
    clean: set[bytes] = field(default_factory=set, compare=False, repr=False)
    # token of a line -> the literals whose gate it holds (computed once per distinct token)
    token_literals: dict[str, tuple[int, ...]] = field(
        default_factory=dict, compare=False, repr=False
    )

    @classmethod
    def build(cls, literal_sets: Sequence[tuple[str, ...]]) -> Prefilter:
        """From each signature's required literals, in table order."""
        literals = sorted({lit for lits in literal_sets for lit in lits})
        anchors = _choose_anchors(literals, CLASS_NEEDLES)
        by_anchor = {
            a: tuple(i for i, lits in enumerate(literal_sets) if any(a in lit for lit in lits))
            for a in anchors
        }
        owners = tuple(
            tuple(i for i, lits in enumerate(literal_sets) if lit in lits) for lit in literals
        )
        lit_gates = tuple((g.decode() if (g := _gate(lit)) else None) for lit in literals)
        return cls(
            anchors,
            by_anchor,
            tuple(_gate(a) for a in anchors),
            tuple(literals),
            owners,
            lit_gates,
        )

    def present(self, low: bytes) -> list[int]:
        """Indexes of the anchors that may occur in the lowercased block `low`.

        One `bytes.find` pass per anchor over the block would cost as many passes as there are
        anchors (~100 for the long tail of causes). Instead the block's distinct tokens are
        collected in C (translate, split, set) and each anchor's gate is looked for in them
        alone; only an anchor whose gate is there is scanned for in the block. An anchor can
        only occur where its gate is inside a token, so nothing is missed."""
        tokens = set(low.translate(_TOKEN_BYTES).split())
        clean = self.clean
        new = tokens - clean if clean else tokens
        text = b" ".join(new)
        hit_gates: list[bytes] = []
        out: list[int] = []
        for i, gate in enumerate(self.gates):
            if gate is None:
                out.append(i)
            elif gate in text:
                out.append(i)
                hit_gates.append(gate)
        if len(clean) > MAX_CLEAN_TOKENS:
            clean.clear()
        # remembered only when short: a megabyte-long "word" is read again rather than kept
        if hit_gates:
            clean.update(
                t for t in new if len(t) <= MAX_TOKEN_KEPT and not any(g in t for g in hit_gates)
            )
        else:
            clean.update(t for t in new if len(t) <= MAX_TOKEN_KEPT)
        return out

    def candidates(self, low: str) -> list[int]:
        """Signatures (table order) with a required literal in the lowercased line: only the
        literals whose gate lies in one of the line's tokens are looked for (the token's
        literals are worked out once per distinct token and remembered)."""
        cache = self.token_literals
        if len(cache) > MAX_CLEAN_TOKENS:
            cache.clear()
        gates = self.literal_gates
        maybe: set[int] = set()
        for tok in set(_GATE_RE.findall(low)):
            ids = cache.get(tok)
            if ids is None:
                ids = tuple(i for i, g in enumerate(gates) if g and g in tok)
                if len(tok) <= MAX_TOKEN_KEPT:
                    cache[tok] = ids
            if ids:
                maybe.update(ids)
        literals, owners = self.literals, self.owners
        sigs: set[int] = set()
        for i in maybe:
            if literals[i] in low:
                sigs.update(owners[i])
        for i in self.ungated:  # a literal with no letters (none today) is always read
            if literals[i] in low:
                sigs.update(owners[i])
        return sorted(sigs)

    @cached_property
    def ungated(self) -> tuple[int, ...]:
        return tuple(i for i, g in enumerate(self.literal_gates) if g is None)
