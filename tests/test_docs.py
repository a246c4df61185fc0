"""The documentation (issue 24): a front page a newcomer can read (small, the two commands as
they are, every link leading somewhere), every page of docs/ reachable from the site's nav, and
the real mkdocs build in strict mode: it passes on the docs as they are and fails, naming the
file and the link, when a link breaks (run-tests runs the same build)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MKDOCS = Path(sys.executable).with_name("mkdocs")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def _nav_pages(nav: list) -> list[str]:
    pages: list[str] = []
    for item in nav:
        value = next(iter(item.values())) if isinstance(item, dict) else item
        pages += _nav_pages(value) if isinstance(value, list) else [value]
    return pages


def test_the_front_page_is_short_and_keeps_the_two_commands():
    text = README.read_text(encoding="utf-8")
    assert len(text.encode()) <= 20 * 1024, f"README.md is {len(text.encode())} bytes"
    blocks = re.findall(r"```sh\n(.*?)```", text, re.S)
    assert (
        "python3 -m venv .venv && .venv/bin/pip install -q -e . && .venv/bin/verl-tui\n" in blocks
    )
    assert "./run-tests\n" in blocks
    # the login node installs the tested closure, not whatever pip resolves that day
    assert "-c requirements/login-node.txt" in text


def test_every_link_of_the_front_page_resolves():
    text = README.read_text(encoding="utf-8")
    local = [t for t in LINK.findall(text) if not re.match(r"[a-z]+:", t)]
    assert len(local) >= 10  # the screenshot and the docs pages
    missing = [t for t in local if not (ROOT / t.split("#")[0]).exists()]
    assert not missing, missing


def test_every_docs_page_is_in_the_nav():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    nav = _nav_pages(config["nav"])
    pages = sorted(str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*.md"))
    assert sorted(nav) == pages
    assert {"architecture.md", "design.md"} <= set(nav)


def _build(site_root: Path, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(MKDOCS), "build", "--strict", "-d", str(out)],
        cwd=site_root,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )


def test_the_strict_build_passes_and_a_broken_link_fails_it(tmp_path):
    root = tmp_path / "repo"
    root.mkdir()
    shutil.copytree(ROOT / "docs", root / "docs", symlinks=True)
    for name in ("mkdocs.yml", "hosts.example.yaml"):  # the hosts.yaml page embeds the example
        shutil.copy(ROOT / name, root / name)
    (root / "screenshots").symlink_to(ROOT / "screenshots")

    built = _build(root, tmp_path / "site")
    assert built.returncode == 0, built.stderr[-3000:]
    assert (tmp_path / "site" / "performance" / "index.html").is_file()
    assert (tmp_path / "site" / "screenshots" / "cluster.png").is_file()

    keys = root / "docs" / "keys.md"
    keys.write_text(keys.read_text() + "\nSee [the jobs screen](jobs-screen.md).\n")
    broken = _build(root, tmp_path / "site2")
    assert broken.returncode != 0
    assert "keys.md" in broken.stderr and "jobs-screen.md" in broken.stderr
