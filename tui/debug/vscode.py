"""VS Code's ``.vscode/launch.json``: an attach configuration for a worker's debugpy port, for
those who would rather debug in their editor than in the cockpit.

launch.json is JSON with comments (VS Code accepts ``//``, ``/* */`` and trailing commas). We
read that, replace or add our one configuration and keep the user's others. The comments do
not survive the rewrite; a file we cannot read is never overwritten.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

from tui.errors import VerlTuiError

# Where Ray unpacks a job's working_dir on a node: .../runtime_resources/working_dir_files/
# _ray_pkg_<hash>/ (the package URI's name without .zip).
_WORKING_DIR_ROOT = re.compile(r"^(.*?/runtime_resources/working_dir_files/[^/]+)(?:/|$)")


class LaunchJsonError(VerlTuiError, ValueError, title="launch.json not written", kind="bad_input"):
    """launch.json exists but is not something we can safely rewrite."""


def ray_working_dir_root(path: str) -> str | None:
    """The root of the Ray working_dir a frame's file lies in (the ``remoteRoot`` of a path
    mapping), or None if the file is not in one."""
    match = _WORKING_DIR_ROOT.match(path)
    return match.group(1) if match else None


def _string_end(text: str, start: int) -> int:
    """The index just past the JSON string that opens at text[start] (a quote)."""
    end, n = start + 1, len(text)
    while end < n and text[end] != '"':
        end += 2 if text[end] == "\\" else 1
    return end + 1


def _strip_jsonc(text: str) -> str:
    """JSON from JSONC: comments become spaces (newlines kept, so a json error's line number is
    the file's) and trailing commas go. Strings are left exactly as they are."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        char = text[i]
        if char == '"':
            end = _string_end(text, i)
            out.append(text[i:end])
            i = end
        elif text.startswith("//", i):
            end = text.find("\n", i)
            end = n if end < 0 else end
            out.append(" " * (end - i))
            i = end
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end < 0:
                raise json.JSONDecodeError("unterminated /* comment", text, i)
            out.append(re.sub(r"[^\n]", " ", text[i : end + 2]))
            i = end + 2
        else:
            out.append(char)
            i += 1
    return _drop_trailing_commas("".join(out))


def _drop_trailing_commas(text: str) -> str:
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        char = text[i]
        if char == '"':
            end = _string_end(text, i)
            out.append(text[i:end])
            i = end
            continue
        if char == ",":
            after = i + 1
            while after < n and text[after] in " \t\r\n":
                after += 1
            if after < n and text[after] in "]}":
                out.append(" ")
                i += 1
                continue
        out.append(char)
        i += 1
    return "".join(out)


def _read_launch_json(path: Path) -> dict[str, Any]:
    text = path.read_text(encoding="utf-8-sig")  # -sig: tolerate a BOM
    try:
        stripped = _strip_jsonc(text)
        data = json.loads(stripped) if stripped.strip() else {}
    except json.JSONDecodeError as exc:
        raise LaunchJsonError(
            f"{path}: not readable as JSON with comments (line {exc.lineno}: {exc.msg}); "
            "left it unchanged"
        ) from None
    if not isinstance(data, dict):
        raise LaunchJsonError(f"{path}: the top level is not an object; left it unchanged")
    if not isinstance(data.get("configurations", []), list):
        raise LaunchJsonError(f'{path}: "configurations" is not a list; left it unchanged')
    return data


def _attach_configuration(
    name: str, host: str, port: int, path_mappings: list[tuple[str, str]]
) -> dict[str, Any]:
    return {
        "name": name,
        "type": "debugpy",
        "request": "attach",
        "connect": {"host": host, "port": port},
        "pathMappings": [
            {"localRoot": local, "remoteRoot": remote} for local, remote in path_mappings
        ],
        "justMyCode": False,
    }


def _write_atomically(path: Path, text: str) -> None:
    try:
        mode = path.stat().st_mode & 0o777
    except FileNotFoundError:
        mode = 0o644
    fd, temp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temp_name, mode)  # mkstemp makes it 0600
        os.replace(temp_name, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp_name)
        raise


def write_launch_json(
    workspace: Path,
    *,
    name: str,
    port: int,
    host: str = "127.0.0.1",
    path_mappings: list[tuple[str, str]],
) -> Path:
    """Add (or replace, by ``name``) a debugpy attach configuration in
    ``<workspace>/.vscode/launch.json``; ``path_mappings`` are (localRoot, remoteRoot) pairs.
    Returns the file's path. LaunchJsonError if the file exists and cannot be understood."""
    path = Path(workspace) / ".vscode" / "launch.json"
    if path.is_symlink():
        path = path.resolve()  # rewrite the file it points to, keep the link
    data = _read_launch_json(path) if path.exists() else {}
    data.setdefault("version", "0.2.0")
    configurations: list[Any] = data.setdefault("configurations", [])
    ours = _attach_configuration(name, host, port, path_mappings)
    same_name = [
        index
        for index, existing in enumerate(configurations)
        if isinstance(existing, dict) and existing.get("name") == name
    ]
    if same_name:
        # VS Code lists configurations by name: keep ours at the first one's place, no twins.
        configurations[same_name[0]] = ours
        for index in reversed(same_name[1:]):
            del configurations[index]
    else:
        configurations.append(ours)
    path.parent.mkdir(parents=True, exist_ok=True)
    _write_atomically(path, json.dumps(data, indent=4) + "\n")
    return path
