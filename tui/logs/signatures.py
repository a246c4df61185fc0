"""Which log lines are errors, warnings or traceback, and what a known failure means.

Every line of a log goes to the matcher, yet a job log is mostly metrics and progress lines, so
a line that no rule can fire on must cost next to nothing. Each signature's regex is parsed once
and the literal text every match must contain is derived from it (`required_literals`); from
those, a few short anchor words are chosen (`Prefilter`; both live in tui/logs/prefilter.py)
such that every signature literal contains one. A log block is scanned for the anchors with
C-level `bytes.find` (one pass per anchor over the lowercased block, ~25); only lines holding
an anchor, plus every line while a traceback is open, reach `LineClassifier.feed`. No line a
signature would match is skipped: the literals come from the patterns themselves (compiled
with re.ASCII, so case-insensitive parts fold ASCII only, exactly as `bytes.lower` does).
`scan_block` is the one code path shared by the log store (the log pane) and `verl-tui
explain`.

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

# The prefilter and the literals it is built from: tui/logs/prefilter.py; names kept here.
from tui.logs.prefilter import CLASS_NEEDLES as CLASS_NEEDLES
from tui.logs.prefilter import MIN_LITERAL as MIN_LITERAL
from tui.logs.prefilter import Prefilter as Prefilter
from tui.logs.prefilter import required_literals as required_literals

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


PREFILTER = Prefilter.build(tuple(sig.literals for sig in SIGNATURES))
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
