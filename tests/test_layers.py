"""The layer rule of DESIGN.md, checked on every module's imports (read with ast, nothing is
imported): one direction of dependency, top to bottom.

    UI      tui/app.py, tui/screens, tui/widgets, tui/palette.py      may import services
    CLI     tui/cli.py, tui/__main__.py, tui/commands, tui/interrupts  may import services
    services tui/cluster, tui/jobs, tui/ckpt, tui/debug, tui/logs, tui/metrics, tui/archive,
             tui/supervisor, tui/stack
            never UI, CLI or Textual; sideways only along SIDEWAYS below
    transport tui/transport: never services, UI or CLI; the only importer of asyncssh
    remote  tui/remote: programs shipped as source to a host's Python: stdlib only (+ pynvml
            for the GPU agent, Ray for the head's breakpoint lister), Python 3.8 syntax, no
            tui imports once shipped; everyone else imports only the loader (the package),
            never a program. A bundle (tui.remote.BUNDLES) ships one program joined with its
            parts: its modules import sibling parts, top-level lines the loader drops
    config  tui/config: config, the shared leaves, stdlib and third-party only
    leaves  tui (the package: __version__), tui/sanitize.py, tui/fmt.py, tui/state.py,
            tui/shellcmd.py, tui/errors.py (the one error base): shared
            by every layer, importing no other tui module

Imports inside functions and under TYPE_CHECKING count: a lazy import is still an arrow.

Within the UI, one direction too: tui/app.py over tui/palette.py over tui/screens over
tui/widgets (a screen gets what it needs through its constructor, never from the app module).

Between modules: no import circle of any kind: a function-level import counts, and so does one
under TYPE_CHECKING (it is still a dependency a reader has to follow both ways). A circle is one
module cut in two and tied back: join the halves, pass what one needs through its constructor,
or move what both need below them.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tui.remote import BUNDLES

ROOT = Path(__file__).resolve().parents[1]
TUI = ROOT / "tui"

SERVICES = (
    "tui.cluster",
    "tui.jobs",
    "tui.ckpt",
    "tui.debug",
    "tui.logs",
    "tui.metrics",
    "tui.archive",
    "tui.supervisor",
    "tui.stack",
    "tui.rollouts",
    "tui.export",
)
UI = ("tui.app", "tui.screens", "tui.widgets", "tui.palette")
CLI = ("tui.cli", "tui.__main__", "tui.commands", "tui.interrupts")
LEAVES = ("tui", "tui.sanitize", "tui.fmt", "tui.state", "tui.shellcmd", "tui.errors")

# Sideways service → service arrows, derived from the code (2026-11). Everything else between
# services is refused, so an arrow back up (cluster → jobs, which used to exist through the
# debug modules) fails here. Order, bottom to top: cluster < jobs < {debug, ckpt, logs}; metrics
# stands alone.
SIDEWAYS = {
    ("tui.jobs", "tui.cluster"): "the Jobs API client (dashboard), the Ray cluster, live "
    "resources from the probe",
    ("tui.debug", "tui.cluster"): "paused workers and breakpoints are found through the "
    "dashboard and the cluster's hosts",
    ("tui.debug", "tui.jobs"): "attach maps a worker's files back to the folder the job was "
    "submitted from (job history)",
    ("tui.ckpt", "tui.jobs"): "resume writes a profile that continues from a checkpoint",
    ("tui.logs", "tui.jobs"): "log hints name config keys checked against verl's schema",
    ("tui.archive", "tui.cluster"): "the archive reads job logs and worker pids from the head",
    ("tui.archive", "tui.jobs"): "archived runs carry their history record; the config diff "
    "takes verl's defaults from the composed base config",
    ("tui.archive", "tui.metrics"): "archived runs keep the metric series parsed from the log",
    ("tui.supervisor", "tui.cluster"): "the supervisor's lease on the head, job logs, Ray's nodes",
    ("tui.supervisor", "tui.jobs"): "retries and queued jobs go through the one validated "
    "submission path and the job history",
    ("tui.supervisor", "tui.ckpt"): "a retry resumes from the latest complete checkpoint "
    "(scan, collect, resume keys)",
    ("tui.supervisor", "tui.logs"): "a failure is retried when its log shows a retriable signature",
    ("tui.stack", "tui.cluster"): "a job's processes and Ray's view come through the dashboard",
    ("tui.stack", "tui.jobs"): "a waiting placement group is weighed against the free resources",
    ("tui.stack", "tui.archive"): "a stack dump is saved into the job's run archive",
    ("tui.supervisor", "tui.stack"): "a stalled job's stacks are dumped into its archive",
    ("tui.supervisor", "tui.metrics"): "a stall is no new step line (verl's step lines parsed)",
    ("tui.rollouts", "tui.cluster"): "a job's dump folder is found from its driver log and "
    "its Jobs API record",
    ("tui.rollouts", "tui.metrics"): "the dump's announcing line is read like the file "
    "logger's (one finder)",
    ("tui.export", "tui.cluster"): "the endpoint serves the telemetry and the head's jobs",
    ("tui.export", "tui.jobs"): "job states come from the one job list (history joined)",
    ("tui.export", "tui.metrics"): "the training metrics and their health rules",
    ("tui.export", "tui.archive"): "a job's metrics are read where the cockpit reads them "
    "(file logger, else console lines)",
    ("tui.supervisor", "tui.archive"): "a stall's evidence is the job's GPUs (the per-job GPU "
    "use join); its stack dump is saved into the run archive",
}
REFUSED_SIDEWAYS = [
    ("tui.cluster", "tui.jobs"),
    ("tui.cluster", "tui.debug"),
    ("tui.jobs", "tui.debug"),
    ("tui.jobs", "tui.ckpt"),
]

# Third-party modules a remote program may import, by program (all others: stdlib only); each
# is optional on the host except Ray where ray_pdb_keys runs (the head).
REMOTE_EXTRA = {
    "gpu_agent": {"pynvml", "amdsmi"},
    "probe": {"pynvml"},
    "ray_pdb_keys": {"ray"},
    "gpu_nvml": {"pynvml"},
    "gpu_amd": {"amdsmi"},
}

# Size is a hint, cohesion the rule (a cohesive screen class may be 900 lines): this bound only
# catches a module that grew into several responsibilities, to be split into a sub-package.
MAX_LINES = 1200


@dataclass(frozen=True)
class Edge:
    src: str  # importing module, dotted
    dst: str  # imported module, dotted (absolute)
    line: int

    def __str__(self) -> str:
        return f"{self.src}:{self.line} imports {self.dst}"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def tui_modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(TUI.rglob("*.py"))}


def imports_of(name: str, path: Path) -> list[Edge]:
    """Every module `name` imports: import/from statements anywhere in the file (relative
    ones resolved), and importlib.import_module / __import__ calls with a literal name."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [Edge(name, a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            # `from tui.jobs import schema` imports the module tui.jobs.schema.
            out.append(Edge(name, mod, node.lineno))
            out += [
                Edge(name, f"{mod}.{a.name}", node.lineno)
                for a in node.names
                if f"{mod}.{a.name}" in MODULES
            ]
        elif (
            isinstance(node, ast.Call)
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
            and (
                (isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")
                or (
                    isinstance(node.func, ast.Name)
                    and node.func.id in ("import_module", "__import__")
                )
            )
        ):
            out.append(Edge(name, node.args[0].value, node.lineno))
    return out


MODULES = tui_modules()
EDGES = [e for name, path in MODULES.items() for e in imports_of(name, path)]


def within(mod: str, groups: tuple[str, ...] | str) -> bool:
    groups = (groups,) if isinstance(groups, str) else groups
    return any(mod == g or mod.startswith(g + ".") for g in groups)


def service_of(mod: str) -> str | None:
    return next((s for s in SERVICES if within(mod, s)), None)


def edges_from(groups: tuple[str, ...] | str) -> list[Edge]:
    return [e for e in EDGES if within(e.src, groups)]


def top(mod: str) -> str:
    return mod.split(".")[0]


# --- the walk itself ---------------------------------------------------------------------------


def test_walk_sees_the_tree() -> None:
    """Guards the checks below: the modules and arrows they judge are really found."""
    assert len(MODULES) > 100 and "tui.remote.gpu_agent" in MODULES
    found = {(e.src, e.dst) for e in EDGES}
    assert ("tui.jobs.service", "tui.cluster.dashboard") in found  # from-import
    assert ("tui.transport.fleet", "asyncssh") in found  # import_module("asyncssh") call
    assert ("tui.jobs.verl_source", "tui.jobs.schema") in found  # `from tui.jobs import schema`


def test_relative_imports_are_resolved(tmp_path: Path) -> None:
    src = tmp_path / "x.py"
    src.write_text("from .schema import KeyInfo\nfrom ..cluster import dashboard\n")
    edges = imports_of("tui.jobs.x", src)
    assert {e.dst for e in edges} >= {"tui.jobs.schema", "tui.cluster", "tui.cluster.dashboard"}


# --- the rules ---------------------------------------------------------------------------------


def test_services_import_no_ui_cli_or_textual() -> None:
    bad = [e for e in edges_from(SERVICES) if within(e.dst, UI + CLI) or top(e.dst) == "textual"]
    assert not bad, "\n".join(map(str, bad))


def test_service_to_service_only_along_the_allowed_arrows() -> None:
    bad = []
    for e in edges_from(SERVICES):
        a, b = service_of(e.src), service_of(e.dst)
        if b is not None and a != b and (a, b) not in SIDEWAYS:
            bad.append(f"{e}  ({a} -> {b} is not an allowed arrow)")
    assert not bad, "\n".join(bad)


def test_allowed_arrows_are_used_and_acyclic() -> None:
    """Every allowed arrow exists in the code (the list is derived, not wished), and none
    closes a cycle — so the refused ones (an arrow back up) stay refused."""
    used = {(service_of(e.src), service_of(e.dst)) for e in edges_from(SERVICES)}
    assert set(SIDEWAYS) <= used, set(SIDEWAYS) - used
    for arrow in REFUSED_SIDEWAYS:
        assert arrow not in SIDEWAYS
    graph: dict[str, set[str]] = {}
    for a, b in SIDEWAYS:
        graph.setdefault(a, set()).add(b)

    def reaches(a: str, b: str, seen: frozenset[str] = frozenset()) -> bool:
        return any(
            n == b or (n not in seen and reaches(n, b, seen | {n})) for n in graph.get(a, ())
        )

    assert not [s for s in SERVICES if reaches(s, s)]


def test_transport_imports_no_service_ui_cli_or_remote_program() -> None:
    bad = [
        e
        for e in edges_from("tui.transport")
        if within(e.dst, SERVICES + UI + CLI + ("tui.remote",)) or top(e.dst) == "textual"
    ]
    assert not bad, "\n".join(map(str, bad))


def test_asyncssh_only_in_transport() -> None:
    bad = [e for e in EDGES if top(e.dst) == "asyncssh" and not within(e.src, "tui.transport")]
    assert not bad, "\n".join(map(str, bad))


def test_config_imports_only_config_and_leaves() -> None:
    bad = [
        e
        for e in edges_from("tui.config")
        if top(e.dst) == "tui" and not within(e.dst, "tui.config") and e.dst not in LEAVES
    ]
    assert not bad, "\n".join(map(str, bad))


def test_leaves_import_no_other_tui_module() -> None:
    bad = [
        e
        for name in LEAVES
        for e in EDGES
        if e.src == name and top(e.dst) == "tui" and e.dst not in LEAVES
    ]
    assert not bad, "\n".join(map(str, bad))


def test_ui_is_imported_only_by_ui_and_cli() -> None:
    bad = [e for e in EDGES if within(e.dst, UI) and not within(e.src, UI + CLI)]
    assert not bad, "\n".join(map(str, bad))


# --- remote programs -----------------------------------------------------------------------------

# Programs (what python_argv ships) and bundle parts (modules joined into a program's source).
PARTS = sorted({p for names in BUNDLES.values() for p in names})
REMOTE = sorted(
    n.rpartition(".")[2]
    for n in MODULES
    if n.startswith("tui.remote.")
    and not n.rpartition(".")[2].startswith("_")
    and n.rpartition(".")[2] not in PARTS
)


def top_imports(text: str) -> set[str]:
    """Top-level package of every import in a source text."""
    out = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level:
            out.add((node.module or "").split(".")[0])
    return out


def same_bundle(src: str, dst: str) -> bool:
    """Whether module src imports dst as a sibling part: both in one bundle, dst a part."""
    a, b = src.removeprefix("tui.remote."), dst.removeprefix("tui.remote.")
    return any(b in names and (a == p or a in names) for p, names in BUNDLES.items())


def test_remote_programs_exist() -> None:
    assert set(REMOTE) >= {
        "gpu_agent",
        "probe",
        "ckpt_helper",
        "head_lock",
        "verl_config",
        "ray_pdb_keys",
        "ray_procs",
        "tcp_connect",
        "port_listener",
    }


@pytest.mark.parametrize("program", REMOTE)
def test_remote_program_is_self_contained(program: str) -> None:
    """What ships: stdlib only (plus the program's allowed packages), no tui import, parses as
    Python 3.8; the loader ships exactly the file's text, or for a bundle the file first and
    then each of its parts."""
    from tui.remote import python_argv, source

    text = (TUI / "remote" / f"{program}.py").read_text(encoding="utf-8")
    shipped = source(program)
    if program in BUNDLES:
        assert shipped.startswith(text[: text.index("\nfrom tui.remote.")])
        marks = [line for line in shipped.splitlines() if line.startswith("# ---- ")]
        assert [m.split()[2].rstrip(",") for m in marks] == [f"{p}.py" for p in BUNDLES[program]]
    else:
        assert shipped == text
    assert python_argv("/usr/bin/python3", program, "a") == [
        "/usr/bin/python3",
        "-u",
        "-c",
        shipped,
        "a",
    ]
    ast.parse(shipped, feature_version=(3, 8))
    extra = top_imports(shipped) - set(sys.stdlib_module_names) - {"__future__"}
    assert extra <= REMOTE_EXTRA.get(program, set()), extra


def top_level_names(tree: ast.Module) -> tuple[set[str], set[str]]:
    """(names a module defines at top level, names its top level reads while it runs: not
    function bodies, which run later, but defaults, decorators and class bodies)."""
    defined, read = set(), set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            defined |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if isinstance(node, ast.If) and node is tree.body[-1]:
            read |= loads(node.test)  # the __main__ block runs last, after every part
        else:
            read |= loads(node)
    return defined, read


def loads(node: ast.AST) -> set[str]:
    """Names read when the statement runs: a def's defaults and decorators, a class's bases
    and body, not the functions' bodies."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        runs = [*node.decorator_list, *node.args.defaults, *node.args.kw_defaults]
        return {n for r in runs if r is not None for n in loads(r)}
    if isinstance(node, ast.ClassDef):
        runs = [*node.decorator_list, *node.bases, *node.keywords, *node.body]
        return {n for r in runs for n in loads(r)}
    names = {node.id} if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) else set()
    return names.union(*(loads(c) for c in ast.iter_child_nodes(node)))


@pytest.mark.parametrize("program", sorted(BUNDLES))
def test_bundle_parts_join_into_one_namespace(program: str) -> None:
    """A bundle's modules: each Python 3.8 and stdlib-only (plus its allowed package); they
    import each other only at top level with `from tui.remote.<part> import` (the statements
    the loader drops), never the program; their top-level names never collide (one namespace
    once joined); and no top level reads a name that a later module defines (it would run
    before that name exists: the program's top level comes first)."""
    order = [program, *BUNDLES[program]]
    defined_by: dict[str, str] = {}
    reads = {}
    for name in order:
        path = TUI / "remote" / f"{name}.py"
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text, feature_version=(3, 8))
        tui = [e for e in imports_of(f"tui.remote.{name}", path) if top(e.dst) == "tui"]
        top_lines = {n.lineno for n in tree.body if isinstance(n, ast.ImportFrom)}
        bad = [
            e
            for e in tui
            if e.dst.removeprefix("tui.remote.") not in BUNDLES[program] or e.line not in top_lines
        ]
        assert not bad, "\n".join(map(str, bad))
        extra = top_imports(text) - set(sys.stdlib_module_names) - {"__future__", "tui"}
        assert extra <= REMOTE_EXTRA.get(name, set()) | REMOTE_EXTRA.get(program, set()), extra
        defined, reads[name] = top_level_names(tree)
        clash = {n: defined_by[n] for n in defined if n in defined_by}
        assert not clash, f"{name}.py redefines {clash}"
        defined_by.update(dict.fromkeys(defined, name))
    for i, name in enumerate(order):
        later = {n for n, where in defined_by.items() if where in order[i + 1 :]}
        assert not reads[name] & later, f"{name}.py's top level reads {reads[name] & later}"


def test_remote_programs_are_imported_by_no_one() -> None:
    """Services send a program with python_argv; importing one would run host code here.
    Within a bundle, its modules import their sibling parts (lines the loader drops)."""
    bad = [e for e in EDGES if e.dst.startswith("tui.remote.") and not same_bundle(e.src, e.dst)]
    assert not bad, "\n".join(map(str, bad))


def test_remote_programs_share_one_error_line_helper() -> None:
    """Each program must carry its own helpers (it ships alone), so `_one_line` exists in
    several; they stay one behaviour: the same code everywhere."""
    bodies = {}
    for program in REMOTE + PARTS:
        tree = ast.parse((TUI / "remote" / f"{program}.py").read_text(encoding="utf-8"))
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name == "_one_line":
                bodies[program] = ast.dump(node)
    assert len(bodies) >= 2
    assert len(set(bodies.values())) == 1, sorted(bodies)


def test_remote_programs_are_ascii() -> None:
    """A shipped program is a command string that the SSH channel keeps while the command
    runs: one character beyond Latin-1 (an arrow in a docstring) makes Python store all of it
    at 2 bytes a character, +62 MiB at 1,024 agent streams (bench/telemetry_fanin.py)."""
    from tui.remote import source

    for program in REMOTE:
        text = source(program)
        odd = sorted({ch for ch in text if not ch.isascii()})
        assert not odd, f"{program}: {odd}"


def test_loader_refuses_what_is_not_a_program() -> None:
    from tui.remote import source

    for name in ("../cli", "_private", "no such", *PARTS):  # a part is no program
        with pytest.raises(ValueError):
            source(name)


# --- circles between modules -----------------------------------------------------------------


def type_only_lines(path: Path) -> set[int]:
    """Lines inside `if TYPE_CHECKING:` blocks: imports there never run."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for inner in node.body:
                lines.update(range(inner.lineno, (inner.end_lineno or inner.lineno) + 1))
    return lines


def import_graph() -> dict[str, set[str]]:
    """Module → the tui modules it imports: at import, in a function or under TYPE_CHECKING."""
    graph: dict[str, set[str]] = {name: set() for name in MODULES}
    for e in EDGES:
        if e.dst in MODULES and e.dst != e.src:
            graph[e.src].add(e.dst)
    return graph


def run_time_graph() -> dict[str, set[str]]:
    """Module → the tui modules it imports when it runs (at import or in a function)."""
    type_only = {name: type_only_lines(path) for name, path in MODULES.items()}
    graph: dict[str, set[str]] = {name: set() for name in MODULES}
    for e in EDGES:
        if e.dst in MODULES and e.dst != e.src and e.line not in type_only[e.src]:
            graph[e.src].add(e.dst)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected parts of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                part = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    part.append(member)
                    if member == node:
                        break
                if len(part) > 1:
                    found.append(sorted(part))
    return found


def test_circle_finder_finds_a_function_level_tie_back() -> None:
    """Guards the check below on a graph with one circle tied back through a lazy import."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(graph) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


# None: a circle found is a failure. (Were one ever listed here, the check below fails once it
# is gone, so the entry goes with it.)
KNOWN_CIRCLES: list[list[str]] = []


def test_no_import_circles_between_modules() -> None:
    found = circles(import_graph())
    new = [c for c in found if c not in KNOWN_CIRCLES]
    assert not new, "import circles (join the halves or move what both need below): " + str(new)
    gone = [c for c in KNOWN_CIRCLES if c not in found]
    assert not gone, f"no longer a circle: take it out of KNOWN_CIRCLES: {gone}"


def test_the_whole_graph_has_more_arrows_than_the_run_time_one() -> None:
    """Guards the check above: the TYPE_CHECKING imports are in the graph it judges."""
    whole, run = import_graph(), run_time_graph()
    assert all(run[m] <= whole[m] for m in MODULES)
    assert any(whole[m] - run[m] for m in MODULES)


UI_ORDER = ("tui.widgets", "tui.screens", "tui.palette", "tui.app")  # bottom to top


def test_ui_arrows_point_down() -> None:
    """No screen or widget imports the app (or the palette); no widget imports a screen."""

    def rank(mod: str) -> int | None:
        return next((i for i, g in enumerate(UI_ORDER) if within(mod, g)), None)

    bad = [
        e
        for e in EDGES
        if (a := rank(e.src)) is not None and (b := rank(e.dst)) is not None and b > a
    ]
    assert not bad, "\n".join(map(str, bad))


# --- size ----------------------------------------------------------------------------------------


def test_no_module_grows_past_the_limit() -> None:
    lengths = {
        str(p.relative_to(ROOT)): len(p.read_text(encoding="utf-8").splitlines())
        for p in MODULES.values()
    }
    over = {p: n for p, n in lengths.items() if n > MAX_LINES}
    assert not over, f"split these by responsibility (past {MAX_LINES} lines): {over}"
