"""Which log lines are errors, warnings or traceback, and what a known failure means.

A job log is mostly metrics and progress lines, so classifying must cost next to nothing for
those. The store scans whole chunks for a few lowercase substrings (NEEDLES) and feeds only the
lines that contain one, plus every line while a traceback is open, to `LineClassifier.feed`.
Every rule below therefore fires only on lines that hold one of NEEDLES: a signature whose
message may lack all of the generic words (error, warn, exception, ...) brings its own needle.

Ray prefixes what remote processes print with their origin, e.g.
`(TaskRunner pid=1234, ip=10.0.0.2) ` or `(raylet) `, and folds repeats into
`... [repeated 7x across cluster]`; torchrun prefixes `[rank0]:`. Both are stripped before
matching, and tracebacks are followed per origin, since several workers can fail at once and
their lines interleave.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Per-line flag bits (one byte per line in the store).
ERROR, WARNING, TRACEBACK, HINT = 1, 2, 4, 8

# CSI (colours, cursor moves), OSC (titles, links; never across a newline) and 2-byte escapes.
ANSI_RE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b\n]*(?:\x07|\x1b\\)?|[@-Z\\-_])")
ANSI_RE_B = re.compile(ANSI_RE.pattern.encode())

# `(TaskRunner pid=1234, ip=10.0.0.2) `, `(pid=99) `, `(raylet, ip=…) `, `(autoscaler +1m2s) `,
# then torchrun's `[rank3]:` / `[default0]:`.
PREFIX_RE = re.compile(
    r"(?:\((?:[^()\s]+ )?(?:pid=\d+|raylet|gcs_server|autoscaler \+[^,()]*)(?:, ip=[^()\s]+)?\) ?)?"
    r"(?:\[(?:rank|default)\d+\]: ?)?")
REPEATED_RE = re.compile(r"\s*\[repeated \d+x across cluster\].*$")

# Severity. Each regex runs only after a cheap substring test passes (see classify): this is
# the per-line cost of every candidate line, so it must stay at a few microseconds.
LEVEL_ERROR_RE = re.compile(r"\b(?:ERROR|FATAL|CRITICAL)\b")
LEVEL_WARNING_RE = re.compile(r"\b(?:WARNING|WARN)\b")
EXCEPTION_RE = re.compile(r"(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception)\b(?:\([\w.]+\))?:")
WARNING_CLASS_RE = re.compile(r"\b[A-Z]\w*Warning\b:")
# glog / torch c10 ([E1118 03:18:39.86 …] or [E ProcessGroupNCCL.cpp:475]) and Ray's C++ logs
# ([2025-01-16 08:48:22,123 E 1234 1250] …): the level letter after the bracket or the date.
GLOG_RE = re.compile(r"\[?([EFW])(?:\d{4} \d\d:\d\d| \S+\.(?:cpp|cc|h|hpp):\d+\])"
                     r"|\[\d{4}-\d\d-\d\d [\d:,.]+ ([EFW]) \d+ \d+\]")
# ray.exceptions.RayTaskError(ValueError): ray::TaskRunner.run() (pid=…): frames follow, indented.
RAY_ERROR_HEADER_RE = re.compile(r"(?:ray\.exceptions\.)?Ray(?:Task|Actor)Error(?:\([\w.]+\))?: ")
RAY_ERROR_HEADS = ("RayTaskError", "RayActorError", "ray.exceptions.RayTaskError",
                   "ray.exceptions.RayActorError")
TRACEBACK_HEAD = "Traceback (most recent call last)"
CHAIN_HEADS = ("During handling of the above exception",
               "The above exception was the direct cause of the following exception")


@dataclass(frozen=True)
class Hint:
    key: str
    text: str


@dataclass(frozen=True)
class Signature:
    key: str
    needles: tuple[str, ...]  # lowercase; the regex runs only on a line holding one of them
    pattern: re.Pattern[str]
    hint: str  # may name the pattern's groups: {key}
    severity: int = ERROR


def _sig(key: str, needles: tuple[str, ...], pattern: str, hint: str,
         severity: int = ERROR) -> Signature:
    return Signature(key, needles, re.compile(pattern), hint, severity)


SIGNATURES: tuple[Signature, ...] = (
    _sig("nccl_timeout", ("timeout", "timed out", "communicator was aborted"),
         r"Watchdog caught collective operation timeout|NCCL operations have failed or timed out"
         r"|ProcessGroupNCCL.*\b(?:[Tt]imeout|timed out)|NCCL communicator was aborted"
         r"|(?:ncclUniqueId|NCCL communicator).*(?:Socket Timeout|timed out)",
         "an NCCL collective timed out: a rank hung or the nodes cannot reach each other; set "
         "NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME in hosts.yaml ray.env to the interface the nodes "
         "share, check IB ports (verl-tui check); NCCL_DEBUG=INFO says more"),
    _sig("gloo_full_mesh", ("connectfullmesh",), r"connectFullMesh failed",
         "the ranks could not connect to each other (Gloo): set GLOO_SOCKET_IFNAME and "
         "NCCL_SOCKET_IFNAME in hosts.yaml ray.env to the interface the nodes share (not lo or "
         "docker0); check IB ports and firewalls (verl-tui check)"),
    _sig("nccl_network", ("nccl",),
         r"NCCL WARN (?:NET/|[Ss]ocket|Call to (?:ibv_|connect))|unhandled system error"
         r"|ncclSystemError|ncclRemoteError",
         "NCCL could not set up its network: point NCCL_SOCKET_IFNAME (and GLOO_SOCKET_IFNAME) in "
         "hosts.yaml ray.env at the interface the nodes share; for InfiniBand check NCCL_IB_HCA "
         "and that the IB ports are up (verl-tui check)"),
    _sig("gpus_short", ("available gpus",),
         r"Total available GPUs (?P<have>[\d.]+) is less than total desired GPUs (?P<want>[\d.]+)",
         "the job wants {want} GPUs but Ray has {have} free: make trainer.nnodes × "
         "trainer.n_gpus_per_node fit the cluster (all nodes up? another job holding GPUs?)"),
    _sig("ray_infeasible", ("cannot be scheduled right now", "no available node types"),
         r"cannot be scheduled right now|No available node types can fulfill",
         "Ray cannot place these tasks/actors on the free resources: lower what the job asks "
         "for (trainer.nnodes, n_gpus_per_node) or free/add nodes; `ray status` shows the usage",
         WARNING),
    _sig("gcs_connect", ("gcs", "running ray instance"),
         r"Failed to connect to (?:the )?GCS|Unable to connect to GCS"
         r"|Failed to get cluster ID from GCS|GCS may have been killed"
         r"|Could not find any running Ray instance",
         "the job cannot reach Ray's GCS on the head (port 6379 unless hosts.yaml ray.port says "
         "otherwise): is Ray up (verl-tui status)? can every node reach the head's node_ip "
         "through the firewall, with the same Ray version?"),
    _sig("cuda_oom", ("out of memory", "outofmemoryerror"),
         r"CUDA out of memory|CUDA error: out of memory|torch\.(?:cuda\.)?OutOfMemoryError",
         "a GPU ran out of memory: lower actor_rollout_ref.rollout.gpu_memory_utilization "
         "(the KV cache share), the *micro_batch_size_per_gpu / ppo_max_token_len_per_gpu, or "
         "turn on param/optimizer offload and gradient checkpointing"),
    _sig("kv_cache", ("cache blocks", "kv cache is needed"),
         r"No available memory for the cache blocks"
         r"|KV cache is needed, which is larger than the available KV cache memory",
         "vLLM has no room for its KV cache: raise "
         "actor_rollout_ref.rollout.gpu_memory_utilization, or lower rollout.max_model_len / "
         "max_num_batched_tokens, or raise rollout.tensor_model_parallel_size"),
    _sig("host_oom", ("running low on memory", "memory pressure"),
         r"killed due to (?:the )?node running low on memory|killed due to memory pressure",
         "a node ran out of host RAM and Ray killed a worker: lower host memory use (rollout "
         "batch, dataloader workers, CPU offload) or add memory; `ray memory` shows the holders"),
    _sig("mkl_gomp", ("mkl_threading_layer",),
         r"MKL_THREADING_LAYER=INTEL is incompatible with libgomp",
         "numpy's MKL clashes with torch's libgomp: set MKL_SERVICE_FORCE_INTEL=1 (or "
         "MKL_THREADING_LAYER=GNU) in the job env or hosts.yaml ray.env, or import numpy first"),
    _sig("upload_too_large",
         ("too large", "entitytoolarge", "maximum request body size", "exceeds the maximum size",
          "status code 413"),
         r"Request Entity Too Large|RequestEntityTooLarge|Maximum request body size \d+ exceeded"
         r"|Package size \([^)]*\) exceeds the maximum size|status code 413\b",
         "the job's working_dir is too big to upload: exclude checkpoints, data, outputs, .venv "
         "and .git (runtime_env excludes or .rayignore) and keep data on shared storage"),
    _sig("hydra_override", ("could not override",), r"Could not override '(?P<key>[^']+)'",
         "verl's config has no key '{key}': check its spelling and path against the trainer "
         "config (verl-tui profile check), or write +{key}=… to add a new key"),
    _sig("ray_version", ("version mismatch",),
         r"\bVersion mismatch: The cluster was started with|Ray version mismatch",
         "the job's Ray (or Python) differs from the cluster's: install the same versions on "
         "every host and in the job's interpreter (hosts.yaml python:), then restart Ray"),
)

# Lowercase substrings that make a line worth classifying. The generic words cover nearly every
# failure; the rest are signatures whose lines can lack them (a C++ "Failed to connect to GCS",
# Hydra's bare "Could not override", the raylet's OOM-kill summary, torch's NCCL watchdog).
# Not "nccl": NCCL_DEBUG=INFO prints thousands of harmless lines, and its failures say WARN or
# error.
CLASS_NEEDLES = ("error", "exception", "warn", "fatal", "critical", "traceback (most")
EXTRA_NEEDLES = ("connect to gcs", "could not override", "memory pressure", "watchdog caught",
                 "failed or timed out")
NEEDLES: tuple[str, ...] = CLASS_NEEDLES + EXTRA_NEEDLES

_SIG_NEEDLES = tuple((n, i) for i, sig in enumerate(SIGNATURES) for n in sig.needles)
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
            source, msg = plain[:m.end()].rstrip(), plain[m.end():]
    if "across cluster]" in msg:
        msg = REPEATED_RE.sub("", msg)
    return source, msg


def classify(msg: str) -> int:
    """ERROR / WARNING bits of one message (origin prefix already stripped)."""
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
    """The first known failure signature in `msg`, with its hint filled in."""
    low = msg.lower()
    hits = [i for needle, i in _SIG_NEEDLES if needle in low]  # most lines hold none
    if not hits:
        return None
    for i in sorted(set(hits)):  # table order: the more specific signatures come first
        sig = SIGNATURES[i]
        m = sig.pattern.search(msg)
        if m is not None:
            groups = {k: v or "?" for k, v in m.groupdict().items()}
            return sig, Hint(sig.key, sig.hint.format(**groups))
    return None


class LineClassifier:
    """Flags and hints for lines fed in order; follows tracebacks per origin."""

    def __init__(self) -> None:
        # origin -> [first line, own lines seen, closing]; `closing`: the exception line came,
        # but Ray may continue with the remote frames (indented `File "…"` lines).
        self._open: dict[str, list[int]] = {}
        self._last_hint: dict[str, int] = {}

    @property
    def active(self) -> bool:
        """A traceback is open: every following line must be fed, not just candidates."""
        return bool(self._open)

    def reset(self) -> None:
        self._open.clear()
        self._last_hint.clear()

    def feed(self, line_no: int, raw: str) -> tuple[int, Hint | None]:
        source, msg = split_source(strip_ansi(raw))
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
        return flags, hint

    def _traceback(self, line_no: int, source: str, msg: str) -> int:
        opened = self._open
        if opened and not line_no & 255:
            for key in [k for k, st in opened.items() if line_no - st[0] > MAX_TRACEBACK_SPAN]:
                del opened[key]
        body = msg.lstrip()
        if body.startswith(TRACEBACK_HEAD) or (
                msg.startswith(RAY_ERROR_HEADS) and RAY_ERROR_HEADER_RE.match(msg)):
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
        return TRACEBACK | ERROR
