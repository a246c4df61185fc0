"""write_launch_json: merge into VS Code's launch.json (JSONC) without clobbering it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tui.debug.vscode import LaunchJsonError, ray_working_dir_root, write_launch_json

REMOTE_ROOT = (
    "/tmp/ray/session_2026-01-02_03-04-05_123456_789/runtime_resources/"
    "working_dir_files/_ray_pkg_abc123"
)


def _launch(workspace: Path) -> Path:
    return workspace / ".vscode" / "launch.json"


def _write(workspace: Path, text: str) -> Path:
    path = _launch(workspace)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _configs(path: Path) -> list[dict]:
    return json.loads(path.read_text())["configurations"]


def test_creates_the_file_with_an_attach_configuration(tmp_path: Path) -> None:
    path = write_launch_json(
        tmp_path, name="Ray worker", port=5678, path_mappings=[(str(tmp_path), REMOTE_ROOT)]
    )
    assert path == _launch(tmp_path)
    data = json.loads(path.read_text())
    assert data["version"] == "0.2.0"
    assert data["configurations"] == [
        {
            "name": "Ray worker",
            "type": "debugpy",
            "request": "attach",
            "connect": {"host": "127.0.0.1", "port": 5678},
            "pathMappings": [{"localRoot": str(tmp_path), "remoteRoot": REMOTE_ROOT}],
            "justMyCode": False,
        }
    ]
    assert path.stat().st_mode & 0o777 == 0o644
    assert [p.name for p in path.parent.iterdir()] == ["launch.json"]  # no temp file left


def test_merge_keeps_other_configurations_and_keys(tmp_path: Path) -> None:
    _write(
        tmp_path,
        json.dumps(
            {
                "version": "0.2.0",
                "configurations": [{"name": "Unit tests", "type": "debugpy", "request": "launch"}],
                "compounds": [{"name": "all", "configurations": ["Unit tests"]}],
            }
        ),
    )
    path = write_launch_json(tmp_path, name="Ray worker", port=1234, path_mappings=[])
    data = json.loads(path.read_text())
    assert [c["name"] for c in data["configurations"]] == ["Unit tests", "Ray worker"]
    assert data["configurations"][0] == {
        "name": "Unit tests",
        "type": "debugpy",
        "request": "launch",
    }
    assert data["compounds"] == [{"name": "all", "configurations": ["Unit tests"]}]


def test_reads_jsonc_comments_and_trailing_commas(tmp_path: Path) -> None:
    _write(
        tmp_path,
        """\ufeff{
    // Use IntelliSense to learn about possible attributes.
    "version": "0.2.0",
    /* a block
       comment */
    "configurations": [
        {
            "name": "Keeps // and /* */ inside strings", // a trailing comment
            "type": "debugpy",
            "request": "launch",
            "program": "http://example.com/a,]",
            "args": ["--x", "a \\" quote", ],
        },
    ],
}
""",
    )
    path = write_launch_json(
        tmp_path, name="Ray worker", port=1234, host="10.0.0.5", path_mappings=[("a", "b")]
    )
    configs = _configs(path)
    assert configs[0]["name"] == "Keeps // and /* */ inside strings"
    assert configs[0]["program"] == "http://example.com/a,]"
    assert configs[0]["args"] == ["--x", 'a " quote']
    assert configs[1]["connect"] == {"host": "10.0.0.5", "port": 1234}
    assert configs[1]["pathMappings"] == [{"localRoot": "a", "remoteRoot": "b"}]


def test_replaces_the_configuration_of_the_same_name_in_place(tmp_path: Path) -> None:
    write_launch_json(tmp_path, name="A", port=1, path_mappings=[])
    write_launch_json(tmp_path, name="Ray worker", port=2, path_mappings=[])
    write_launch_json(tmp_path, name="C", port=3, path_mappings=[])
    path = write_launch_json(tmp_path, name="Ray worker", port=9, path_mappings=[("x", "y")])
    configs = _configs(path)
    assert [c["name"] for c in configs] == ["A", "Ray worker", "C"]
    assert configs[1]["connect"]["port"] == 9
    assert configs[1]["pathMappings"] == [{"localRoot": "x", "remoteRoot": "y"}]


@pytest.mark.parametrize(
    "text",
    [
        '{"configurations": [ {"name": "x",, } ]}',  # broken JSON
        '{"configurations": [] /* never closed',
        "[1, 2]",  # not an object
        '{"configurations": {"name": "x"}}',  # not a list
    ],
)
def test_unreadable_file_is_left_untouched(tmp_path: Path, text: str) -> None:
    path = _write(tmp_path, text)
    before = path.read_bytes()
    with pytest.raises(LaunchJsonError) as caught:
        write_launch_json(tmp_path, name="Ray worker", port=1, path_mappings=[])
    message = str(caught.value)
    assert "\n" not in message
    assert str(path) in message and "unchanged" in message
    assert path.read_bytes() == before
    assert [p.name for p in path.parent.iterdir()] == ["launch.json"]


def test_empty_file_counts_as_new(tmp_path: Path) -> None:
    path = _write(tmp_path, "  // nothing yet\n")
    write_launch_json(tmp_path, name="Ray worker", port=1, path_mappings=[])
    assert [c["name"] for c in _configs(path)] == ["Ray worker"]


def test_existing_mode_is_kept(tmp_path: Path) -> None:
    path = _write(tmp_path, "{}")
    path.chmod(0o600)
    write_launch_json(tmp_path, name="Ray worker", port=1, path_mappings=[])
    assert path.stat().st_mode & 0o777 == 0o600


def test_ray_working_dir_root() -> None:
    assert ray_working_dir_root(f"{REMOTE_ROOT}/train.py") == REMOTE_ROOT
    assert ray_working_dir_root(f"{REMOTE_ROOT}/pkg/sub/mod.py") == REMOTE_ROOT
    assert ray_working_dir_root(REMOTE_ROOT) == REMOTE_ROOT
    assert ray_working_dir_root("/home/me/project/train.py") is None
    assert ray_working_dir_root("/usr/lib/python3.11/site-packages/verl/trainer.py") is None
    assert (
        ray_working_dir_root(
            "/tmp/ray/session_x/runtime_resources/py_modules_files/_ray_pkg_1/m.py"
        )
        is None
    )
