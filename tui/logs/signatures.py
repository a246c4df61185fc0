"""Which log lines are errors, warnings or traceback, and what a known failure means.

Every line of a log goes to the matcher, yet a job log is mostly metrics and progress lines, so
a line that no rule can fire on must cost next to nothing. Each signature's regex is parsed once
and the literal text every match must contain is derived from it (`required_literals`); from
those, a few short anchor words are chosen (`Prefilter`) such that every signature literal
contains one. A log block is scanned for the anchors with C-level `bytes.find` (one pass per
anchor over the lowercased block, ~25); only lines holding an anchor, plus every line while a
traceback is open, reach `LineClassifier.feed`. No line a signature would match is skipped:
the literals come from the patterns themselves (compiled with re.ASCII, so case-insensitive
parts fold ASCII only, exactly as `bytes.lower` does). `scan_block` is the one code path
shared by the log store (the log pane) and `verl-tui explain`.

Matching is linear in a line's length: a line is classified by its first MATCH_CHARS (4,096)
characters (a log line can be a megabyte; a failure's words come first), and no signature
pattern has an unbounded wildcard (`.*`, `[^x]+`, `\\S*`): each is written `.{0,N}?`, so a line
repeating an anchor word thousands of times costs N steps per repeat, not the rest of the line
(tests/test_faults_bounds.py checks the table; bench/log_hostile.py measures it).

Ray prefixes what remote processes print with their origin, e.g.
`(TaskRunner pid=1234, ip=10.0.0.2) ` or `(raylet) `, and folds repeats into
`... [repeated 7x across cluster]`; torchrun prefixes `[rank0]:`. Both are stripped before
matching, and tracebacks are followed per origin, since several workers can fail at once and
their lines interleave.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
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

# Per-line flag bits (one byte per line in the store).
ERROR, WARNING, TRACEBACK, HINT = 1, 2, 4, 8

# CSI (colours, cursor moves), OSC (titles, links; never across a newline) and 2-byte escapes.
ANSI_RE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b\n]*(?:\x07|\x1b\\)?|[@-Z\\-_])")
ANSI_RE_B = re.compile(ANSI_RE.pattern.encode())

# `(TaskRunner pid=1234, ip=10.0.0.2) `, `(pid=99) `, `(raylet, ip=…) `, `(autoscaler +1m2s) `,
# then torchrun's `[rank3]:` / `[default0]:`.
PREFIX_RE = re.compile(
    r"(?:\((?:[^()\s]+ )?(?:pid=\d+|raylet|gcs_server|autoscaler \+[^,()]*)(?:, ip=[^()\s]+)?\) ?)?"
    r"(?:\[(?:rank|default)\d+\]: ?)?"
)
REPEATED_RE = re.compile(r"\[repeated \d+x across cluster\]")
# Characters of a line the classifier and the signatures look at (the rest is kept and shown).
MATCH_CHARS = 4096

# Severity. Each regex runs only after a cheap substring test passes (see classify): this is
# the per-line cost of every candidate line, so it must stay at a few microseconds.
LEVEL_ERROR_RE = re.compile(r"\b(?:ERROR|FATAL|CRITICAL)\b")
LEVEL_WARNING_RE = re.compile(r"\b(?:WARNING|WARN)\b")
EXCEPTION_RE = re.compile(r"(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception)\b(?:\([\w.]+\))?:")
WARNING_CLASS_RE = re.compile(r"\b[A-Z]\w*Warning\b:")
# glog / torch c10 ([E1118 03:18:39.86 …] or [E ProcessGroupNCCL.cpp:475]) and Ray's C++ logs
# ([2025-01-16 08:48:22,123 E 1234 1250] …): the level letter after the bracket or the date.
GLOG_RE = re.compile(
    r"\[?([EFW])(?:\d{4} \d\d:\d\d| \S+\.(?:cpp|cc|h|hpp):\d+\])"
    r"|\[\d{4}-\d\d-\d\d [\d:,.]+ ([EFW]) \d+ \d+\]"
)
# ray.exceptions.RayTaskError(ValueError): ray::TaskRunner.run() (pid=…): frames follow, indented.
RAY_ERROR_HEADER_RE = re.compile(r"(?:ray\.exceptions\.)?Ray(?:Task|Actor)Error(?:\([\w.]+\))?: ")
RAY_ERROR_HEADS = (
    "RayTaskError",
    "RayActorError",
    "ray.exceptions.RayTaskError",
    "ray.exceptions.RayActorError",
)
TRACEBACK_HEAD = "Traceback (most recent call last)"
CHAIN_HEADS = (
    "During handling of the above exception",
    "The above exception was the direct cause of the following exception",
)


@dataclass(frozen=True)
class Hint:
    key: str
    text: str


# Hydra writes its summary line, then the traceback of what verl raised (hydra/core/utils.py,
# then run_and_report's print_exception): the exception line that ends that traceback gets a
# hint of its own, quoting it (LineClassifier._hydra).
HYDRA_FAILED, HYDRA_CAUSE = "hydra_failed", "hydra_cause"
MAX_CAUSE_CHARS = 300


def hydra_cause(summary_line: int, exception: str) -> Hint:
    text = " ".join(exception.split())
    if len(text) > MAX_CAUSE_CHARS:
        text = text[: MAX_CAUSE_CHARS - 1] + "…"
    return Hint(
        HYDRA_CAUSE,
        f"why verl failed (Hydra's summary is line {summary_line + 1}, above): {text}",
    )


HintFn = Callable[[re.Match[str]], str]


@dataclass(frozen=True)
class Signature:
    key: str
    pattern: re.Pattern[str]
    hint: str | HintFn  # a template naming the pattern's groups ({key}), or a function of the match
    severity: int = ERROR
    # Lowercase text one of which every match contains (derived from `pattern`).
    literals: tuple[str, ...] = field(default=())

    def explain(self, m: re.Match[str]) -> Hint:
        if callable(self.hint):
            return Hint(self.key, self.hint(m))
        groups = {k: v or "?" for k, v in m.groupdict().items()}
        return Hint(self.key, self.hint.format(**groups))


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


def _sig(
    key: str, pattern: str, hint: str | HintFn, severity: int = ERROR, *, ignore_case: bool = False
) -> Signature:
    # re.ASCII: case-insensitive parts fold ASCII letters only, as bytes.lower() does, so the
    # derived literals are found in the lowercased block whenever the pattern matches.
    rx = re.compile(pattern, re.ASCII | (re.IGNORECASE if ignore_case else 0))
    return Signature(key, rx, hint, severity, required_literals(rx))


# -- hints that depend on the match --------------------------------------------------------------


# pip names of the packages verl's workers import by another name
def _import_hint(m: re.Match[str]) -> str:
    pkg = (m.group("pkg") or m.group("pkg2") or "?").split(".")[0]
    # Its pip name from verl's own requirements (this Python's verl), else the module's name.
    from tui.jobs.pip_names import this_python

    pip = this_python().requirement(pkg).text
    return (
        f"Python package '{pkg}' is missing or broken in the interpreter that ran this worker:"
        f" install {pip} (built for this torch) into that Python on every node (hosts.yaml "
        "python:), the same version everywhere, then restart Ray (verl-tui up --restart)"
    )


def _override_hint(m: re.Match[str]) -> str:
    key = m.group("key")
    # The profile check's own table of keys verl renamed (stdlib-only module: no cycle, no cost).
    from tui.jobs.schema import renamed_to

    moved = renamed_to(key)
    if moved is not None:
        new, why = moved
        return (
            f"verl renamed '{key}': write {new}=… instead ({why}); verl-tui profile check "
            "lists every such key"
        )
    return (
        f"verl's config has no key '{key}' (removed from verl or misspelt): drop or rename "
        f"it (verl-tui profile check names the nearest real key); write +{key}=… only to add "
        "a key of your own"
    )


# -- the table: the more specific signatures first ---------------------------------------------

SIGNATURES: tuple[Signature, ...] = (
    _sig(
        "nccl_timeout",
        r"Watchdog caught collective operation timeout|NCCL operations have failed or timed out"
        r"|ProcessGroupNCCL.{0,300}?\b(?:[Tt]imeout|timed out)|Timeout at NCCL work"
        r"|NCCL communicator was aborted"
        r"|(?:ncclUniqueId|NCCL communicator).{0,300}?(?:Socket Timeout|timed out)",
        "an NCCL collective timed out: a rank died or hung first (look for its error above) or "
        "the nodes cannot reach each other; set NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME in "
        "hosts.yaml ray.env to the interface the nodes share, check IB ports (verl-tui check); "
        "NCCL_DEBUG=INFO says more",
    ),
    _sig(
        "gloo_full_mesh",
        r"connectFullMesh failed",
        "the ranks could not connect to each other (Gloo): set GLOO_SOCKET_IFNAME and "
        "NCCL_SOCKET_IFNAME in hosts.yaml ray.env to the interface the nodes share (not lo or "
        "docker0); check IB ports and firewalls (verl-tui check)",
    ),
    _sig(
        "nccl_network",
        r"NCCL WARN (?:NET/|[Ss]ocket|Call to (?:ibv_|connect))|unhandled system error"
        r"|ncclSystemError|ncclRemoteError",
        "NCCL could not set up its network: point NCCL_SOCKET_IFNAME (and GLOO_SOCKET_IFNAME) in "
        "hosts.yaml ray.env at the interface the nodes share; for InfiniBand check NCCL_IB_HCA "
        "and that the IB ports are up (verl-tui check)",
    ),
    _sig(
        "vllm_pg_gpus",
        r"number of required GPUs exceeds the total number of available GPUs in the placement "
        r"group|Tensor parallel size \(\d+\) exceeds available GPUs",
        "vLLM's tensor parallel group does not fit the GPUs of its placement group: make "
        "actor_rollout_ref.rollout.tensor_model_parallel_size ≤ trainer.n_gpus_per_node (and "
        "the GPUs Ray sees on each node, `ray status`)",
    ),
    _sig(
        "gpus_short",
        r"Total available GPUs (?P<have>[\d.]+) is less than total desired GPUs (?P<want>[\d.]+)",
        "the job wants {want} GPUs but Ray has {have} free: make trainer.nnodes × "
        "trainer.n_gpus_per_node fit the cluster (all nodes up? another job holding GPUs?)",
    ),
    _sig(
        "placement_pending",
        r"cannot be scheduled right now|No available node types can fulfill"
        r"|pending placement groups?\b|Waiting for (?:creating a )?placement group",
        "Ray cannot place the job's placement group, so the job waits forever: every node needs "
        "trainer.n_gpus_per_node free GPUs and 3 × n_gpus_per_node free CPUs (verl reserves 3 "
        "CPUs per GPU); `ray status` (verl-tui status) shows the node short of GPUs/CPUs or a job "
        "still holding them; else lower trainer.nnodes / n_gpus_per_node",
        WARNING,
    ),  # Ray's own level: it may pass while a runtime_env installs
    _sig(
        "gcs_connect",
        r"Failed to connect to (?:the )?GCS|Unable to connect to GCS"
        r"|Failed to get cluster ID from GCS|Timed out while waiting for GCS"
        r"|GCS may have been killed|Could not find any running Ray instance",
        "the job cannot reach Ray's GCS on the head (port 6379 unless hosts.yaml ray.port says "
        "otherwise): is Ray up (verl-tui status)? can every node reach the head's node_ip "
        "through the firewall, with the same Ray version?",
    ),
    _sig(
        "vllm_cumem_oom",
        r"CUDA Error: out of memory at \S{0,300}?cumem",
        "vLLM could not take its GPU memory back on wake-up (sleep mode): the actor's weights, "
        "grads or optimizer still fill the GPU; lower actor_rollout_ref.rollout."
        "gpu_memory_utilization (e.g. 0.5) or turn on the actor's param/optimizer offload",
        ignore_case=True,
    ),
    _sig(
        "cuda_oom",
        r"CUDA out of memory|CUDA error: out of memory|torch\.(?:cuda\.)?OutOfMemoryError",
        "a GPU ran out of memory: lower actor_rollout_ref.rollout.gpu_memory_utilization "
        "(the KV cache share), the *micro_batch_size_per_gpu / ppo_max_token_len_per_gpu, or "
        "turn on param/optimizer offload and gradient checkpointing",
        ignore_case=True,
    ),
    _sig(
        "kv_cache",
        r"No available memory for the cache blocks"
        r"|KV cache is needed, which is larger than the available KV cache memory"
        r"|is larger than the maximum number of tokens that can be stored in KV cache",
        "vLLM has no room for its KV cache: raise "
        "actor_rollout_ref.rollout.gpu_memory_utilization, or lower rollout.max_model_len / "
        "max_num_batched_tokens, or raise rollout.tensor_model_parallel_size",
    ),
    _sig(
        "host_oom",
        r"killed due to (?:the )?node running low on memory|killed due to memory pressure"
        r"|Out of memory: Kill(?:ed)? process|invoked oom-killer|\boom-kill:",
        "a node ran out of host RAM and a worker was killed (Ray's memory monitor or the "
        "kernel's OOM killer): lower host memory use (rollout batch, dataloader workers, CPU "
        "offload, reward workers) or add RAM; `ray memory` and `dmesg` show the holders",
        ignore_case=True,
    ),
    _sig(
        "actor_died",
        r"actor died unexpectedly before finishing this task|ActorDiedError"
        r"|actor is dead because its worker process has died"
        r"|worker died or was killed while executing a task",
        "a Ray worker process died without a Python error: most often the host's OOM killer "
        "(`dmesg` or raylet.out on that node; a 'running low on memory' line above), else a "
        "segfault or `ray stop`; the first error above or the worker's .err log names it",
    ),
    _sig(
        "hf_cache_perm",
        r"\[Errno 13\] Permission denied: '(?:[^'\n]{0,300}?/)?\.cache\b",
        "the Hugging Face cache is not writable (a user without a home directory gets "
        "'/.cache'): set HF_HOME (and XDG_CACHE_HOME) to a writable folder on every node, in the "
        "job env or hosts.yaml ray.env",
    ),
    _sig(
        "import_missing",
        r"(?:ModuleNotFoundError: |^)No module named '(?P<pkg>[A-Za-z_][A-Za-z0-9_.]{0,100})'"
        r"|ImportError: .{0,300}?\b(?P<pkg2>transfer_queue|vllm|sglang|flash_attn)(?:[\W_]|$)",
        _import_hint,
    ),
    _sig(
        "mkl_gomp",
        r"MKL_THREADING_LAYER=INTEL is incompatible with libgomp",
        "numpy's MKL clashes with torch's libgomp: set MKL_SERVICE_FORCE_INTEL=1 (or "
        "MKL_THREADING_LAYER=GNU) in the job env or hosts.yaml ray.env, or import numpy first",
    ),
    _sig(
        "upload_too_large",
        r"Request Entity Too Large|RequestEntityTooLarge|Maximum request body size \d+ exceeded"
        r"|Package size \([^)]{0,300}\) exceeds the maximum size|status code 413\b",
        "the job's working_dir is too big to upload: exclude checkpoints, data, outputs, .venv "
        "and .git (runtime_env excludes or .rayignore) and keep data on shared storage",
    ),
    _sig("hydra_override", r"Could not override '(?P<key>[^']{1,300})'", _override_hint),
    _sig(
        HYDRA_FAILED,
        r"^Error executing job with overrides:",
        "Hydra's summary after verl failed: the cause is the exception at the end of the "
        "traceback that follows this line (the next hint shows it); HYDRA_FULL_ERROR=1 adds "
        "Hydra's own frames",
    ),
    _sig(
        "ray_version",
        r"\bVersion mismatch: The cluster was started with|Ray version mismatch",
        "the job's Ray (or Python) differs from the cluster's: install the same versions on "
        "every host and in the job's interpreter (hosts.yaml python:), then restart Ray",
    ),
)


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
    chosen: list[str] = []
    while left:
        words = {
            w
            for lit in left
            for w in _WORD_RE.findall(lit)
            if len(w) >= MIN_LITERAL
            and w not in _STOP_WORDS
            and not w.isdigit()
            and w not in healthy
        }
        # a word covers every literal that contains it, even inside a longer word
        counts = {w: sum(w in lit for lit in left) for w in words}
        word = max(counts, key=lambda w: (counts[w], len(w), w)) if counts else ""
        if not word or counts[word] == 1:  # shared by none: the whole literal is rarer
            word = max(left, key=len)
        chosen.append(word)
        left = [lit for lit in left if word not in lit]
    return tuple(given) + tuple(sorted(chosen))


@dataclass(frozen=True)
class Prefilter:
    anchors: tuple[str, ...]  # lowercase; a line holding none of them cannot match any rule
    by_anchor: dict[str, tuple[int, ...]]  # anchor -> signatures with a literal that holds it

    @classmethod
    def build(cls, signatures: tuple[Signature, ...]) -> Prefilter:
        literals = sorted({lit for sig in signatures for lit in sig.literals})
        anchors = _choose_anchors(literals, CLASS_NEEDLES)
        by_anchor = {
            a: tuple(i for i, sig in enumerate(signatures) if any(a in lit for lit in sig.literals))
            for a in anchors
        }
        return cls(anchors, by_anchor)

    def candidates(self, low: str) -> list[int]:
        """Signatures (table order) that may match a lowercased line."""
        hits: set[int] = set()
        for a, sigs in self.by_anchor.items():
            if sigs and a in low:
                hits.update(sigs)
        return sorted(hits)


PREFILTER = Prefilter.build(SIGNATURES)
_ANCHORS_B = tuple(a.encode() for a in PREFILTER.anchors)
HINT_REPEAT_GAP = 1000  # lines before the same hint is attached again (ranks repeat failures)
MAX_TRACEBACK_LINES = 400  # of its own origin: a traceback that never ends closes here
MAX_TRACEBACK_SPAN = 5000  # of the whole log: an origin that went quiet mid-traceback


def strip_ansi(text: str) -> str:
    return ANSI_RE.sub("", text) if "\x1b" in text else text


def split_source(plain: str) -> tuple[str, str]:
    """(origin prefix, message): Ray's `(Actor pid=…, ip=…)` and torchrun's `[rankN]:`."""
    msg = plain
    source = ""
    if plain[:1] in ("(", "["):
        m = PREFIX_RE.match(plain)
        if m is not None and m.end():
            source, msg = plain[: m.end()].rstrip(), plain[m.end() :]
    if "across cluster]" in msg:
        # Found by position, not `\s*…` tried at every blank of the line (quadratic).
        cut = msg.rfind("[repeated ")
        if cut >= 0 and REPEATED_RE.match(msg, cut):
            msg = msg[:cut].rstrip()
    return source, msg


def classify(msg: str) -> int:
    """ERROR / WARNING bits of one message (origin prefix already stripped), from its first
    MATCH_CHARS characters."""
    msg = msg[:MATCH_CHARS]
    head = msg[:1]
    if head in ("[", "E", "F", "W"):
        m = GLOG_RE.match(msg)
        if m is not None:
            return WARNING if (m.group(1) or m.group(2)) == "W" else ERROR
    if ("ERROR" in msg or "FATAL" in msg or "CRITICAL" in msg) and LEVEL_ERROR_RE.search(msg):
        return ERROR
    if ("Error" in msg or "Exception" in msg) and head.isalpha() and EXCEPTION_RE.match(msg):
        return ERROR
    if msg.startswith(("Error: ", "error: ")):
        return ERROR
    if "WARN" in msg and LEVEL_WARNING_RE.search(msg):
        return WARNING
    if "Warning" in msg and (msg.startswith("Warning: ") or WARNING_CLASS_RE.search(msg)):
        return WARNING
    return 0


def match_signature(msg: str) -> tuple[Signature, Hint] | None:
    """The first known failure signature in `msg` (table order), with its hint filled in; the
    first MATCH_CHARS characters are read."""
    msg = msg[:MATCH_CHARS]
    low = msg.lower()
    for i in PREFILTER.candidates(low):
        sig = SIGNATURES[i]
        if not any(lit in low for lit in sig.literals):
            continue
        m = sig.pattern.search(msg)
        if m is not None:
            return sig, sig.explain(m)
    return None


def candidate_starts(data: bytes) -> list[int]:
    """Start offsets of the lines of `data` (whole lines, plain text) that hold an anchor,
    ascending: one C-level scan per anchor over the whole lowercased block."""
    low = data.lower()
    find, rfind = low.find, low.rfind
    starts: set[int] = set()
    for needle in _ANCHORS_B:
        p = find(needle)
        while p >= 0:
            starts.add(rfind(b"\n", 0, p) + 1)
            eol = find(b"\n", p)
            if eol < 0:
                break
            p = find(needle, eol + 1)
    return sorted(starts)


def scan_block(
    clf: LineClassifier, data: bytes, first: int
) -> Iterator[tuple[int, int, Hint | None, str]]:
    """(line number, flags, hint, text) of every line of `data` (plain text, whole lines, the
    first numbered `first`) that gets a flag. Lines without an anchor are skipped unread unless
    a traceback is open, when every line is fed. The log store and `explain` both use this."""
    cands = candidate_starts(data)
    if not cands and not clf.active:
        return
    ci, nc = 0, len(cands)
    pos, line_no, end = 0, first, len(data)
    while pos < end:
        if not clf.active:
            while ci < nc and cands[ci] < pos:
                ci += 1
            if ci == nc:
                return
            line_no += data.count(b"\n", pos, cands[ci])
            pos = cands[ci]
        eol = data.find(b"\n", pos)
        if eol < 0:
            eol = end
        text = data[pos:eol].decode("utf-8", "replace")
        flags, hint = clf.feed(line_no, text)
        if flags:
            yield line_no, flags, hint, text
        pos, line_no = eol + 1, line_no + 1


class LineClassifier:
    """Flags and hints for lines fed in order; follows tracebacks per origin."""

    def __init__(self) -> None:
        # origin -> [first line, own lines seen, closing]; `closing`: the exception line came,
        # but Ray may continue with the remote frames (indented `File "…"` lines).
        self._open: dict[str, list[int]] = {}
        self._last_hint: dict[str, int] = {}
        # origin -> the line of Hydra's summary whose traceback is being followed
        self._hydra: dict[str, int] = {}
        self._exception_line = False  # the line just fed ended a traceback (_traceback)

    @property
    def active(self) -> bool:
        """A traceback is open (or awaited after Hydra's summary): every following line must
        be fed, not just candidates."""
        return bool(self._open or self._hydra)

    def reset(self) -> None:
        self._open.clear()
        self._last_hint.clear()
        self._hydra.clear()

    def feed(self, line_no: int, raw: str) -> tuple[int, Hint | None]:
        source, msg = split_source(strip_ansi(raw[:MATCH_CHARS]))
        self._exception_line = False
        flags = self._traceback(line_no, source, msg) | classify(msg)
        hint = None
        found = match_signature(msg)
        if found is not None:
            sig, hint = found
            flags |= sig.severity
            last = self._last_hint.get(sig.key)
            if last is not None and line_no - last < HINT_REPEAT_GAP:
                hint = None
            else:
                self._last_hint[sig.key] = line_no
                flags |= HINT
        if self._hydra and not line_no & 255:  # an origin that went quiet: stop waiting
            for key in [k for k, n in self._hydra.items() if line_no - n > MAX_TRACEBACK_LINES]:
                del self._hydra[key]
        if source in self._hydra:
            hint, flags = self._hydra_cause(line_no, source, msg, flags, hint)
        if found is not None and found[0].key == HYDRA_FAILED:
            self._hydra[source] = line_no
        return flags, hint

    def _hydra_cause(
        self, line_no: int, source: str, msg: str, flags: int, hint: Hint | None
    ) -> tuple[Hint | None, int]:
        """After Hydra's summary: the exception line(s) of the traceback that follows get the
        cause hint; the first line of that origin outside a traceback ends the watch."""
        if self._exception_line:
            return hint or hydra_cause(self._hydra[source], msg), flags | HINT
        if not flags & TRACEBACK or line_no - self._hydra[source] > MAX_TRACEBACK_LINES:
            del self._hydra[source]
        return hint, flags

    def _traceback(self, line_no: int, source: str, msg: str) -> int:
        opened = self._open
        if opened and not line_no & 255:
            for key in [k for k, st in opened.items() if line_no - st[0] > MAX_TRACEBACK_SPAN]:
                del opened[key]
        body = msg.lstrip()
        if body.startswith(TRACEBACK_HEAD) or (
            msg.startswith(RAY_ERROR_HEADS) and RAY_ERROR_HEADER_RE.match(msg)
        ):
            opened[source] = [line_no, 0, 0]
            return TRACEBACK | ERROR
        st = opened.get(source)
        if st is None:
            return TRACEBACK if msg.startswith(CHAIN_HEADS) else 0
        if st[2]:  # after the exception line: only remote frames keep it going
            if body.startswith('File "') and msg[:1] in (" ", "\t"):
                st[2] = 0
                return TRACEBACK
            del opened[source]
            return 0
        st[1] += 1
        if st[1] > MAX_TRACEBACK_LINES:
            del opened[source]
            return 0
        if not msg or msg[0] in " \t" or msg.startswith(CHAIN_HEADS) or body.startswith("[Prev"):
            return TRACEBACK
        st[2] = 1  # the first unindented line is the exception itself
        self._exception_line = True
        return TRACEBACK | ERROR
