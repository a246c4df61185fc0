"""Structural check: every string a screen, widget or CLI formatter draws from a variable goes
through tui.sanitize.

What it enforces, by reading the source (ast), in tui/screens, tui/widgets, tui/app.py,
tui/palette.py and the CLI's text formatters (tui/commands): every argument given to a display
sink (Static/Label/notify/update/DataTable.add_row/Text/Text.append/Text.assemble/Segment/
RichLog.write/Log.write_line/ErrorScreen/ConfirmScreen/…, and title assignments) must be safe:

- a literal, or an f-string whose every interpolation is safe or formatted as a number (`:.1f`);
- a call of a tui.sanitize function (clean, one_line, markup, log_line, styled, cell, pad,
  fit, escape_markup) or of a formatter of numbers (age, duration, human_size, gib, bar, …);
- a local variable whose every assignment in the function is safe (parameters, loop variables
  and attributes are outside values until cleaned);
- a Text built in the function may take anything if the function draws it through
  `styled(t)` (which cleans its characters, keeping its styles).

A new path that puts `host.name`, `str(exc)` or a parameter on screen without a sanitize call
makes this test fail with file:line. A second check: text laid out in columns by characters
(`.ljust(n)`, `f"{x:<n}"`, a slice of an f-string) instead of display cells (`pad`, `fit`).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "tui"
# terminal_guard.py is the cockpit's last-resort filter itself (it rebuilds segments).
UI_FILES = sorted(
    p
    for p in [
        *ROOT.glob("screens/*.py"),
        *ROOT.glob("widgets/*.py"),
        *ROOT.glob("widgets/jobform/*.py"),
        ROOT / "app.py",
        ROOT / "palette.py",
    ]
    if p.name != "terminal_guard.py"
)

SANITIZERS = {
    "clean",
    "one_line",
    "markup",
    "log_line",
    "styled",
    "cell",
    "pad",
    "fit",
    "escape_markup",
    "insecure_text",
    # the job form's text blocks (widgets/jobform/summary.py, itself checked here)
    "summary_text",
    "loose_text",
    # the job form's submit bar after a preflight refusal (screens/job_form/submit.py: one_line)
    "refusal_bar",
}
# Functions that return text made only of numbers, fixed words or bar glyphs.
SAFE_FUNCS = {
    "age",
    "duration",
    "human_size",
    "gib",
    "bar",
    "sparkline",
    "len",
    "int",
    "float",
    "round",
    "abs",
    "min",
    "max",
    "sum",
    "history_label",
    "column_header",
    "strftime",
    "fmt_bytes",
    "human_bytes",
    "ctime",
    "time_label",
    "plural",
}
NUMERIC_SPEC = set("dfgeEFGn%xXob")
# Functions whose result is as safe as their first argument.
TRANSFORMS = {
    "set_cell_size",
    "ljust",
    "rjust",
    "center",
    "strip",
    "rstrip",
    "lstrip",
    "upper",
    "lower",
    "removeprefix",
    "removesuffix",
    "expandtabs",
    "clip_words",
}
# Display sinks: the call's name (function or method) → which positional args are shown.
# (ErrorScreen, ConfirmScreen, RayProgressScreen clean their arguments where they draw them.)
SINKS = {
    "notify",
    "Static",
    "Label",
    "update",
    "add_row",
    "Text",
    "Segment",
    "write",
    "append",
    "write_line",
    "Button",
    "Option",
    "assemble",
    "from_markup",
    "Content",
    "Syntax",
    "add_leaf",
}
TITLE_ATTRS = {"title", "sub_title", "border_title", "border_subtitle", "label"}


def _name(func: ast.expr) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


class _Checker:
    def __init__(self, path: Path, tree: ast.Module) -> None:
        self.path = path
        self.problems: list[str] = []
        self.module_consts = {
            t.id
            for n in tree.body
            if isinstance(n, ast.Assign)
            for t in n.targets
            if isinstance(t, ast.Name)
        } | {  # constants of our own code imported by name (UPPER_CASE from tui.*)
            a.asname or a.name
            for n in tree.body
            if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("tui.")
            for a in n.names
            if (a.asname or a.name).isupper()
        }
        # A module's own helper whose every return is a sanitize call counts as one.
        self.sanitizers = set(SANITIZERS)
        for n in ast.walk(tree):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                returns = [r.value for r in ast.walk(n) if isinstance(r, ast.Return)]
                if returns and all(
                    isinstance(v, ast.Call) and _name(v.func) in SANITIZERS for v in returns
                ):
                    self.sanitizers.add(n.name)

    def check_function(self, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        params = {a.arg for a in [*fn.args.args, *fn.args.kwonlyargs, *fn.args.posonlyargs]}
        if fn.args.vararg:
            params.add(fn.args.vararg.arg)
        assigns: dict[str, list[ast.expr | None]] = {}
        for node in ast.walk(fn):
            if isinstance(node, ast.Assign):
                for t in node.targets:
                    if (
                        isinstance(t, ast.Tuple)
                        and isinstance(node.value, ast.Tuple)
                        and len(t.elts) == len(node.value.elts)
                    ):
                        for te, ve in zip(t.elts, node.value.elts, strict=True):
                            if isinstance(te, ast.Name):
                                assigns.setdefault(te.id, []).append(ve)
                        continue
                    for n in ast.walk(t):
                        if isinstance(n, ast.Name):
                            # Unpacking: each part is as safe as the whole value.
                            value = node.value if isinstance(t, (ast.Name, ast.Tuple)) else None
                            assigns.setdefault(n.id, []).append(value)
            elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and isinstance(
                node.target, ast.Name
            ):
                assigns.setdefault(node.target.id, []).append(node.value)
            elif isinstance(
                node, (ast.For, ast.AsyncFor, ast.comprehension, ast.withitem, ast.NamedExpr)
            ):
                target = getattr(node, "target", None) or getattr(node, "optional_vars", None)
                for n in ast.walk(target) if target is not None else ():
                    if isinstance(n, ast.Name):
                        assigns.setdefault(n.id, []).append(None)
        self.params, self.assigns = params, assigns
        # Texts this function hands to a sanitizer: what is appended to them is cleaned there.
        self.cleaned_texts = {
            a.id
            for n in ast.walk(fn)
            if isinstance(n, ast.Call) and _name(n.func) in self.sanitizers
            for a in n.args
            if isinstance(a, ast.Name)
        }
        for node in ast.walk(fn):
            if isinstance(node, ast.Call):
                self.check_call(node)
            elif isinstance(node, ast.Assign):
                for t in node.targets:
                    if (
                        isinstance(t, ast.Attribute)
                        and t.attr in TITLE_ATTRS
                        and not (t.attr == "label" and _name(t.value) == "self")
                    ):  # a field
                        self.need(node.value, f"{t.attr} =")

    def check_call(self, call: ast.Call) -> None:
        name = _name(call.func)
        if name not in SINKS:
            return
        owner = call.func.value if isinstance(call.func, ast.Attribute) else None
        if name == "append" and isinstance(owner, ast.Name) and owner.id in self.cleaned_texts:
            return
        # Text.append on a Text built in this function (t = Text()); list.append,
        # LogPane.append (cleaned where it renders) and the like are not drawing.
        if name == "append" and not (
            isinstance(owner, ast.Name)
            and any(
                isinstance(v, ast.Call) and _name(v.func) in ("Text", "assemble")
                for v in self.assigns.get(owner.id, [])
                if v is not None
            )
        ):
            return
        if (
            name in ("update", "write")
            and isinstance(owner, ast.Name)
            and any(
                isinstance(v, (ast.List, ast.Dict, ast.Set, ast.ListComp, ast.DictComp))
                or (isinstance(v, ast.Call) and _name(v.func) in ("list", "dict", "set", "open"))
                for v in self.assigns.get(owner.id, [])
                if v is not None
            )
        ):
            return  # dict.update, file.write
        args = call.args[:1] if name == "append" else list(call.args)  # append: (text, style)
        if name == "assemble":  # Text.assemble(("text", style), …)
            args = [a.elts[0] if isinstance(a, ast.Tuple) and a.elts else a for a in args]
        if name in ("Segment",):
            args = args[:1]
        if name == "notify" or name in ("ErrorScreen", "ConfirmScreen"):
            args = args[:2]
        for kw in call.keywords:
            if kw.arg in ("title", "message", "placeholder", "label"):
                args.append(kw.value)
        for arg in args:
            self.need(arg, name)

    def need(self, expr: ast.expr, where: str) -> None:
        if not self.safe(expr, set()):
            src = ast.unparse(expr)
            self.problems.append(
                f"{self.path.relative_to(ROOT.parent)}:{expr.lineno}: "
                f"{where}({src[:70]}) shows a value not passed through "
                "tui.sanitize"
            )

    def safe(self, e: ast.expr, seen: set[str]) -> bool:
        if isinstance(e, ast.Constant):
            return True
        if isinstance(e, ast.JoinedStr):
            return all(self.safe(v, seen) for v in e.values)
        if isinstance(e, ast.FormattedValue):
            spec = e.format_spec
            if (
                isinstance(spec, ast.JoinedStr)
                and spec.values
                and isinstance(spec.values[-1], ast.Constant)
                and str(spec.values[-1].value)[-1:] in NUMERIC_SPEC
            ):
                return True
            return self.safe(e.value, seen)
        if isinstance(e, ast.Call):
            name = _name(e.func)
            if name in self.sanitizers or name in SAFE_FUNCS:
                return True
            if (
                name == "get"
                and isinstance(e.func, ast.Attribute)
                and isinstance(e.func.value, ast.Name)
                and e.func.value.id in self.module_consts
                and e.func.value.id.isupper()
            ):
                return all(self.safe(a, seen) for a in e.args[1:])  # a module table's entry
            if name in ("Text", "Content", "cell", "Syntax"):  # its text is checked as a sink
                return not e.args or self.safe(e.args[0], seen)
            if name == "join" and isinstance(e.func, ast.Attribute):
                return self.safe(e.func.value, seen) and all(self.safe(a, seen) for a in e.args)
            if name in TRANSFORMS:
                if isinstance(e.func, ast.Attribute) and _name(e.func.value) not in ("Text",):
                    return self.safe(e.func.value, seen)
                return bool(e.args) and self.safe(e.args[0], seen)
            return False
        if isinstance(e, ast.Name):
            if e.id in seen:
                return True
            if e.id in self.params:
                return False
            if e.id in self.assigns:
                values = self.assigns[e.id]
                return all(v is not None and self.safe(v, seen | {e.id}) for v in values)
            return e.id.isupper() and e.id in self.module_consts
        if isinstance(e, ast.BinOp):
            if isinstance(e.op, ast.Mult) and (
                isinstance(e.left, ast.Constant) or isinstance(e.right, ast.Constant)
            ):
                return True  # " " * width: a repeated literal
            return self.safe(e.left, seen) and self.safe(e.right, seen)
        if isinstance(e, ast.BoolOp):
            return all(self.safe(v, seen) for v in e.values)
        if isinstance(e, ast.IfExp):
            return self.safe(e.body, seen) and self.safe(e.orelse, seen)
        if isinstance(e, (ast.List, ast.Tuple)):
            return all(self.safe(v, seen) for v in e.elts)
        if isinstance(e, ast.Subscript):  # a slice of a safe string, or a module table's entry
            if (
                isinstance(e.value, ast.Name)
                and e.value.id.isupper()
                and e.value.id in self.module_consts
            ):
                return True
            return isinstance(e.slice, ast.Slice) and self.safe(e.value, seen)
        if isinstance(e, ast.Starred):
            return self.safe(e.value, seen)
        if isinstance(e, (ast.GeneratorExp, ast.ListComp)):
            # The loop variables are outside values: the element must be cleaned itself.
            return self.safe(e.elt, seen)
        return False


def problems_in(paths: list[Path]) -> list[str]:
    out: list[str] = []
    for path in paths:
        tree = ast.parse(path.read_text(), str(path))
        checker = _Checker(path, tree)
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                checker.check_function(node)
        out += checker.problems
    return out


def test_ui_modules_draw_only_sanitized_text() -> None:
    problems = problems_in(UI_FILES)
    assert not problems, "\n".join(problems)


def test_the_check_catches_an_unsanitized_path(tmp_path: Path) -> None:
    bad = tmp_path / "screens" / "bad.py"
    bad.parent.mkdir()
    bad.write_text(
        "from tui.sanitize import markup, one_line\n"
        "class S:\n"
        "    def show(self, row, exc):\n"
        "        self.notify(f'stopped {row.submission_id}')\n"  # attribute in an f-string
        "        self.query_one('#t').update(str(exc))\n"  # an exception's text
        "        t = Text()\n"
        "        t.append(row.message)\n"  # Text.append of an outside value
        "        table.add_row(row.host, key='x')\n"  # a str cell is Rich markup
        "    def fine(self, row):\n"
        "        self.notify(f'stopped {markup(row.submission_id)} in {row.took:.1f} s')\n"
        "        t = Text()\n"
        "        t.append(one_line(row.message))\n"
    )
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        problems = problems_in([bad])
    finally:
        ROOT = saved
    assert [p.split(":")[1] for p in problems] == ["4", "5", "7", "8"], problems


CLI_FILES = sorted([*ROOT.glob("commands/*.py"), ROOT / "cli.py"])


def test_cli_output_only_through_the_cleaning_writer() -> None:
    """Headless commands print to sys.stdout/sys.stderr, which the entry point wraps in a
    SafeWriter; nothing may write around it (bytes buffers, raw fds, the original streams),
    and the raw stream (our own colours/progress) only where the outside text is cleaned."""
    # (Reading stdin's bytes is not output; fileno() of the original stream only redirects it.)
    bypass = re.compile(
        r"sys\.__std(out|err)__(?!\.fileno\(\)| is (not )?None)|std(out|err)\.buffer\b|"
        r"os\.write\(\s*[12]\b|open\(\s*['\"]/dev/tty"
    )
    problems = [
        f"{p.relative_to(ROOT.parent)}:{i}: {line.strip()}"
        for p in CLI_FILES
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if bypass.search(line)
    ]
    assert not problems, "\n".join(problems)
    raw_users = {p.name for p in CLI_FILES if re.search(r"\braw\(", p.read_text())}
    assert raw_users <= {"check.py", "ckpt.py"}, raw_users  # each cleans what it writes there
    cli = (ROOT / "cli.py").read_text()
    assert "safe_output()" in cli and re.search(
        r"with [\w(), ]*headless_signals\(\), safe_output\(\):", cli
    )
    # JSON documents come from one writer (ensure_ascii, insecure_host_keys).
    dumps = [
        f"{p.name}:{i}"
        for p in CLI_FILES
        if p.name != "output.py"
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if "json.dumps(" in line
    ]
    assert not dumps, dumps


# Character-count layout: `.ljust(n)`, `f"{x:<n}"`, `x[:n]` measure characters, so a CJK or
# emoji name takes twice its share and shifts every column after it. Text laid out in columns
# goes through tui.sanitize.pad/fit (display cells); numbers and our own literals may use
# character widths (they are ASCII or single-cell glyphs).
WIDTH_FUNCS = {"pad", "fit", "width", "cell"}
NUMBER_FUNCS = SAFE_FUNCS - {"len"} | {"str", "fmt_value", "repr"}
_ALIGN = re.compile(r"^(?:.?[<>^=])?\d+$")


def _cell_width_problems(paths: list[Path]) -> list[str]:
    out: list[str] = []
    for path in paths:
        tree = ast.parse(path.read_text(), str(path))

        def textual(e: ast.expr) -> bool:
            """Text that may hold outside characters (not a literal, number or own label)."""
            if isinstance(e, ast.Constant):
                return False
            if isinstance(e, ast.JoinedStr):
                return any(
                    textual(v.value)
                    for v in e.values
                    if isinstance(v, ast.FormattedValue) and not _numeric_spec(v)
                )
            if isinstance(e, ast.Call):
                name = _name(e.func)
                if name in WIDTH_FUNCS or name in NUMBER_FUNCS:
                    return False
                if name in TRANSFORMS and isinstance(e.func, ast.Attribute):
                    return textual(e.func.value)
                return True
            if isinstance(e, ast.BoolOp):
                return any(textual(v) for v in e.values)
            if isinstance(e, ast.IfExp):
                return textual(e.body) or textual(e.orelse)
            if isinstance(e, ast.BinOp):
                return textual(e.left) or textual(e.right)
            if isinstance(e, ast.Subscript) and isinstance(e.slice, ast.Slice):
                return textual(e.value)
            if isinstance(e, (ast.Name, ast.Attribute)):
                # a number or our own label by name: gpu.index, nproc, … are checked by type at
                # their f-string; bare names of text are what this test is after
                return not (isinstance(e, ast.Name) and e.id.isupper())
            return False

        for node in ast.walk(tree):
            where = None
            if (
                isinstance(node, ast.FormattedValue)
                and isinstance(node.format_spec, ast.JoinedStr)
                and not _numeric_spec(node)
                and _aligned(node.format_spec)
                and textual(node.value)
            ):
                where = ast.unparse(node.value)
            elif (
                isinstance(node, ast.Call)
                and _name(node.func) in ("ljust", "rjust", "center")
                and isinstance(node.func, ast.Attribute)
                and textual(node.func.value)
            ):
                where = ast.unparse(node.func.value)
            elif (
                isinstance(node, ast.Subscript)
                and isinstance(node.slice, ast.Slice)
                and isinstance(node.value, ast.JoinedStr)
                and textual(node.value)
            ):
                where = ast.unparse(node.value)
            if where is not None:
                out.append(
                    f"{path.relative_to(ROOT.parent)}:{node.lineno}: {where[:60]} is laid out "
                    "by characters: use tui.sanitize.pad/fit (display cells)"
                )
    return out


def _numeric_spec(v: ast.FormattedValue) -> bool:
    spec = v.format_spec
    return (
        isinstance(spec, ast.JoinedStr)
        and bool(spec.values)
        and isinstance(spec.values[-1], ast.Constant)
        and str(spec.values[-1].value)[-1:] in NUMERIC_SPEC
    )


def _aligned(spec: ast.JoinedStr) -> bool:
    text = "".join(str(v.value) if isinstance(v, ast.Constant) else "9" for v in spec.values)
    return bool(_ALIGN.match(text))


def test_table_cells_are_laid_out_by_display_width() -> None:
    # gauges.py lays out its own bar and sparkline glyphs (one cell each), help.py the app's own
    # key names (never cut: a key hidden behind an ellipsis would be lost); nothing from outside
    own = ("gauges.py", "help.py")
    problems = _cell_width_problems([p for p in UI_FILES if p.name not in own])
    assert not problems, "\n".join(problems)


def test_the_width_check_catches_character_layout(tmp_path: Path) -> None:
    bad = tmp_path / "widgets" / "bad.py"
    bad.parent.mkdir()
    bad.write_text(
        "from tui.sanitize import one_line, pad\n"
        "def row(gpu, host):\n"
        "    a = f'{one_line(gpu.name):<24}'\n"  # characters, not cells
        "    b = one_line(host.name).ljust(20)\n"
        "    c = f'  {gpu.index:>2d} {one_line(gpu.name)}'[:23]\n"
        "    d = pad(gpu.name, 24) + f'{gpu.util:>5.1f}'\n"  # fine: cells, and a number
        "    e = 'HOST'.ljust(20)\n"
    )
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        problems = _cell_width_problems([bad])
    finally:
        ROOT = saved
    assert sorted(p.split(":")[1] for p in problems) == ["3", "4", "5"], problems
