"""An install that cannot start a job, caught by the job preflight on a real sshd host: a
venv whose numpy is 1.26.4 (the real wheel, cached like the verl wheels) ahead of this
project's packages, where pyarrow 26 and pandas 3 need numpy 2 — what pip resolves for
verl ≤ 0.8 today. Importing verl's trainer and its dataset module dies there, so every job
would die at start; the preflight must fail naming the error and the versions."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import time
import zipfile
from pathlib import Path

import pytest

from tui.config.hosts import load_inventory
from tui.jobs.preflight import needs_for_profile, run_preflight
from tui.jobs.profiles import load_profile
from tui.remote.startup_imports import startup_fingerprint
from tui.transport.fleet import Fleet

REPO = Path(__file__).resolve().parent.parent
NUMPY = "numpy==1.26.4"
PIP_DOWNLOAD = ("-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "-d")


def _numpy_wheel() -> Path:
    base = os.environ.get("VERL_TUI_TEST_CACHE") or os.path.expanduser("~/.cache/verl-tui-tests")
    cache = Path(base) / "wheels"
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    found = sorted(cache.glob(f"numpy-1.26.4-{tag}-*manylinux*x86_64*.whl"))
    if not found:
        cache.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [sys.executable, *PIP_DOWNLOAD, str(cache), "--disable-pip-version-check", NUMPY],
            check=True,
            timeout=300,
        )
        found = sorted(cache.glob(f"numpy-1.26.4-{tag}-*.whl"))
    return found[0]


@pytest.fixture(scope="module")
def broken_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real venv: numpy 1.26.4 installed (the wheel unpacked) in its own site-packages, and
    this project's site-packages after it (a .pth line) for everything else."""
    root = tmp_path_factory.mktemp("broken-venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    python = root / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    site = Path(purelib)
    (site / "verl_tui_project.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    with zipfile.ZipFile(_numpy_wheel()) as whl:
        whl.extractall(site)
    return python


async def test_a_broken_data_stack_fails_the_preflight(ns_cluster3, broken_python, tmp_path):
    hosts = ns_cluster3.write_hosts_yaml(
        tmp_path / "hosts.yaml", python=str(broken_python), names=["node1"]
    )
    inv = load_inventory(hosts)
    profile = load_profile(REPO / "profiles/grpo-gsm8k-qwen2.5-0.5b.yaml")
    _, needs = needs_for_profile(inv, profile)
    assert needs is not None
    assert needs.startup == ["verl.trainer.main_ppo", "verl.utils.dataset.rl_dataset"]
    async with Fleet(inv) as fleet:
        found = await run_preflight(fleet, inv, needs, timeout=300)
        (row,) = [f for f in found if f.check == "import:startup"]
        assert row.status == "fail" and row.host == "node1", row
        assert f"importing verl.trainer.main_ppo fails in {broken_python}" in row.finding, row
        assert "every job dies at start" in row.finding and "ImportError" in row.finding, row
        assert "numpy 1.26.4" in row.fix and "pyarrow 26." in row.fix, row.fix
        # Asked again: the host's cached answer for this install, not a second import.
        t0 = time.monotonic()
        again = await run_preflight(fleet, inv, needs, timeout=300)
        took = time.monotonic() - t0
    (row2,) = [f for f in again if f.check == "import:startup"]
    assert (row2.status, row2.finding) == (row.status, row.finding)
    assert took < 30, took
    print(f"start-up imports cached: second preflight {took:.1f} s")


def test_the_fingerprint_follows_an_install(tmp_path, monkeypatch) -> None:
    """pip adds or removes a folder in site-packages on every install: the cached answer is
    then not used. The job's PYTHONPATH counts by name."""
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    mods = ["verl.trainer.main_ppo"]
    before = startup_fingerprint(mods, {})
    assert startup_fingerprint(mods, {}) == before
    os.utime(site, ns=(0, 1))  # the folder as a pip install leaves it: a new mtime
    assert startup_fingerprint(mods, {}) != before
    assert startup_fingerprint(mods, {"PYTHONPATH": "/opt/x"}) != startup_fingerprint(mods, {})


def test_each_start_up_answer_is_one_bounded_row() -> None:
    """A host's answer is untrusted: each shape gives one row (or none when not asked or no
    verl there), its texts bounded."""
    from tui.jobs.preflight import JobNeeds
    from tui.jobs.preflight.evaluate import _startup

    needs = JobNeeds(startup=["verl.trainer.main_ppo"])
    py = {"python": "/opt/p/bin/python"}

    def row(startup):
        return _startup(None, "h1", needs, {**py, "startup": startup})

    assert row(None) == [] and row({"skipped": "verl not found"}) == []
    assert _startup(None, "h1", JobNeeds(), {**py, "startup": {"ok": False}}) == []
    (pending,) = row({"pending": 20.0})
    assert pending.status == "warn" and "next check" in pending.finding
    (ok,) = row({"ok": True, "versions": {"numpy": "2.4.6"}})
    assert ok.status == "ok" and "numpy 2.4.6" in ok.finding
    (bad,) = row(
        {"ok": False, "module": "m" * 5000, "error": "E" * 5000, "versions": {"x" * 999: "1"}}
    )
    assert bad.status == "fail" and len(bad.finding) < 1000 and len(bad.fix) < 600
    (once,) = row({"ok": False, "module": "m", "error": "OSError: gone", "transient": True})
    assert once.status == "warn" and "this time" in once.finding
    (broken,) = row({"error": "cannot run /opt/p/bin/python: Permission denied"})
    assert broken.status == "warn" and "Permission denied" in broken.finding


def test_checks_asking_at_once_share_one_import(tmp_path, monkeypatch) -> None:
    """Preflights asking one host at once (the form's and `verl-tui check`'s, a sweep's runs)
    start one child for an install, not one each: the others wait for its answer. The module
    imported here counts its imports in a file."""
    import threading

    from tui.remote.startup_imports import check_startup

    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the cache folder: this test's own
    site = tmp_path / "site"
    site.mkdir()
    count = tmp_path / "imports"
    (site / "vt_counted.py").write_text(
        "import os, time\n"
        f"with open({str(count)!r}, 'a') as fh:\n"
        "    fh.write(str(os.getpid()) + '\\n')\n"
        "time.sleep(0.5)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(site)}
    start = threading.Barrier(4)
    answers: list[dict] = []

    def ask() -> None:
        start.wait()
        answers.append(check_startup(["vt_counted"], env, 60))

    threads = [threading.Thread(target=ask) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
    assert len(answers) == 4 and all(a.get("ok") is True for a in answers), answers
    assert len(count.read_text().splitlines()) == 1, count.read_text()
    again = check_startup(["vt_counted"], env, 60)
    assert again["ok"] is True and again["cached"] is True
    assert len(count.read_text().splitlines()) == 1
