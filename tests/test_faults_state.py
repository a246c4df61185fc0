"""The state folder under faults (issue 23), with real parts: the real CLI in subprocesses
(bounded by a timeout; each failure one line, no traceback, no crash file), a real 1 MiB tmpfs
as XDG_STATE_HOME for a full disk, FIFOs and folders at every state path, a damaged queue.json,
bad `cluster:` names, a full / closed / broken stdout, and a real Ray cluster on namespace
hosts for the submission order (the record before the POST: a full disk sends nothing)."""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import json
import os
import stat
import subprocess
import threading
import time
from pathlib import Path

import pytest
from harness.cli import run_cli
from harness.raycluster import VENV_PY

from tui.archive.store import ArchiveStore
from tui.cluster.dashboard import DashboardClient, DashboardError
from tui.config.hosts import parse_inventory
from tui.config.yamlfile import ConfigError
from tui.jobs.history import NOT_SUBMITTED, JobHistory, JobRecord
from tui.jobs.queue import JobQueue, QueueEntry
from tui.jobs.service import SubmitOutcomeUnknown, record_then_post
from tui.jobs.submit import raw_submission
from tui.state import StateError, gunzip_bounded, read_state_json, state_path

HANG = 30.0  # a command that has not ended by then hangs
ROOT = Path(__file__).resolve().parents[1]
LOCAL_HOSTS = "cluster: faults\nhosts:\n  - name: localhost\n    transport: local\n"


def cli(env: dict, *args: str, timeout: float = HANG, **kw) -> subprocess.CompletedProcess:
    return run_cli(args, env=env, timeout=timeout, **kw)


def one_line_failure(out: subprocess.CompletedProcess, *needles: str, rc: int | None = None) -> str:
    """The command failed with exactly one stderr line holding every needle; no traceback."""
    err = out.stderr.strip()
    assert out.returncode != 0, (out.stdout, err)
    if rc is not None:
        assert out.returncode == rc, (out.returncode, err)
    assert len(err.splitlines()) == 1, err
    assert "Traceback" not in err and "internal error" not in err, err
    for needle in needles:
        assert needle in err, (needle, err)
    return err


@pytest.fixture
def local(tmp_path):
    """(hosts.yaml of this machine through the local transport, env with its own state dir)."""
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(LOCAL_HOSTS)
    state = tmp_path / "state"
    return hosts, {**os.environ, "XDG_STATE_HOME": str(state)}, state / "verl-tui"


def entry(sid: str, cluster: str = "faults") -> QueueEntry:
    return QueueEntry(sid, cluster, time.time(), ["sh", "-c", "true"])


def no_crash_files(state: Path) -> None:
    crash = state / "crash"
    assert not crash.exists() or not list(crash.iterdir()), list(crash.iterdir())


# -- cluster names ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        '".."',
        '"."',
        '""',
        '" "',
        '"a/b"',
        '"..\\\\x"',
        '"-rf"',
        '".hidden"',
        '"a\\u200bb"',
        '"a\\tb"',
        f'"{"x" * 101}"',
    ],
)
def test_bad_cluster_names_are_refused_naming_the_line(name):
    text = f"# a comment\ncluster: {name}\nhosts:\n  - name: localhost\n    transport: local\n"
    with pytest.raises(ConfigError) as info:
        parse_inventory(text, "/etc/hosts.yaml")
    msg = str(info.value)
    assert msg.startswith("/etc/hosts.yaml:2: cluster:") and "\n" not in msg, msg


def test_cluster_name_on_the_command_line_is_one_line(tmp_path, local):
    _, env, state = local
    bad = tmp_path / "bad.yaml"
    bad.write_text('cluster: ".."\nhosts:\n  - name: localhost\n    transport: local\n')
    for args in (("queue", str(bad)), ("jobs", str(bad)), ("compare", str(bad), "a", "b")):
        out = cli(env, *args)
        one_line_failure(out, f"{bad}:1: cluster:", "dot segment", rc=2)
    assert not state.exists()  # nothing was written anywhere


def test_state_paths_keep_ascii_folders_and_separate_others(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    base = tmp_path / "verl-tui"
    # Where every earlier version kept them (both old rules agreed on ASCII names).
    assert state_path("history", "my cluster") == base / "history" / "my_cluster"
    assert JobHistory("a+b").dir == base / "history" / "a_b"
    assert JobQueue("grpo-demo").path == base / "queue" / "grpo-demo" / "queue.json"
    assert ArchiveStore("c").job_dir("raysubmit_1") == base / "archive" / "c" / "raysubmit_1"
    # Two non-ASCII names no longer share one folder.
    assert state_path("queue", "東京") != state_path("queue", "大阪")
    assert state_path("queue", "東京").parent == base / "queue"
    for bad in ("..", ".", "", "a/b"):
        with pytest.raises(StateError):
            state_path("archive", bad)
    with pytest.raises(StateError):
        state_path("history", "c", "../../x.json")
    with pytest.raises(StateError):
        ArchiveStore("..")


def test_archive_cleanup_deletes_only_its_own_job_folders(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    base = tmp_path / "verl-tui"
    # Other clusters' state, and what is not the archive's in its own folder.
    other = [
        base / "history" / "c" / "keep.json",
        base / "drafts" / "c" / "p.json",
        base / "archive" / "other" / "old1" / "meta.json",
    ]
    for p in other:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("{}")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_bytes(b"x" * 50_000)
    store = ArchiveStore("c", max_bytes=1)
    store.dir.mkdir(parents=True)
    (store.dir / "raysubmit_link").symlink_to(outside)  # named like a job, not a folder
    (store.dir / ".hidden").mkdir()
    (store.dir / ".hidden" / "x").write_bytes(b"x" * 50_000)
    (store.dir / "notes.txt").write_text("mine")
    for sid in ("old1", "old2"):
        store.write_meta(sid, {"submission_id": sid, "log": {}})
    removed = store.cleanup()
    assert sorted(removed) == ["old1", "old2"]
    assert all(p.exists() for p in other)
    assert (outside / "precious").exists() and (store.dir / "raysubmit_link").is_symlink()
    assert (store.dir / ".hidden" / "x").exists() and (store.dir / "notes.txt").exists()


# -- the reader ---------------------------------------------------------------------------------


def test_reader_refuses_special_files_and_names_damage(tmp_path):
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    link = tmp_path / "link.json"
    link.symlink_to(fifo)
    folder = tmp_path / "dir.json"
    folder.mkdir()
    for path, kind in ((fifo, "FIFO"), (link, "FIFO"), (folder, "a folder")):
        start = time.monotonic()
        with pytest.raises(StateError, match=kind) as info:
            read_state_json(path)
        assert time.monotonic() - start < 5 and str(path) in str(info.value)
    assert read_state_json(tmp_path / "missing.json") is None
    bad = tmp_path / "bad.json"
    bad.write_text('{"a": 1,\n "b": }\n')
    with pytest.raises(StateError, match=r"bad\.json:2: damaged: not JSON"):
        read_state_json(bad)
    big = tmp_path / "big.json"
    big.write_bytes(b" " * 2000)
    with pytest.raises(StateError, match="over the 1000 bytes limit"):
        read_state_json(big, max_bytes=1000)


def test_gzip_inflation_is_bounded(tmp_path):
    import gzip

    bomb = gzip.compress(b"\0" * (64 << 20), 9)  # 64 MiB from ~64 KiB
    assert len(bomb) < 100_000
    with pytest.raises(StateError, match="inflates to more than 1 MiB"):
        gunzip_bounded(bomb, 1 << 20, "m.json.gz")
    assert gunzip_bounded(gzip.compress(b"ab") + gzip.compress(b"cd"), 10, "x") == b"abcd"
    # The archive's series file: a bomb is a warning naming it, not 64 MiB of memory.
    store = ArchiveStore("c", tmp_path)
    store.write_meta("j1", {"submission_id": "j1", "log": {}})
    (store.job_dir("j1") / "metrics.json.gz").write_bytes(
        gzip.compress(b'{"series": {"a": [' + b"[1, 1]," * (40 << 20) + b"[1, 1]]}}", 1)
    )
    assert store.series("j1") is None
    [warning] = store.take_warnings()
    assert "metrics.json.gz: inflates to more than" in warning


# -- FIFOs and folders at every state path ------------------------------------------------------


def _special(path: Path, kind: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_dir() and not path.is_symlink():
        path.rmdir()
    elif path.exists() or path.is_symlink():
        path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.mkdir()


@pytest.mark.parametrize("kind", ["fifo", "dir"])
def test_special_files_in_the_queue_end_in_one_line(local, kind):
    hosts, env, state = local
    queue = state / "queue" / "faults" / "queue.json"
    _special(queue, kind)
    what = "FIFO" if kind == "fifo" else "a folder"
    for args in (
        ("queue", str(hosts)),
        ("queue", str(hosts), "--cancel", "j1"),
        ("submit", str(hosts), "--queue", "--submission-id", "q1", "--", "true"),
    ):
        one_line_failure(cli(env, *args), str(queue), what, rc=1)
    lock = state / "queue" / "faults" / "queue.lock"
    queue.rmdir() if kind == "dir" else queue.unlink()
    _special(lock, kind)
    out = cli(env, "submit", str(hosts), "--queue", "--submission-id", "q1", "--", "true")
    one_line_failure(out, str(lock), what, rc=1)
    no_crash_files(state)


@pytest.mark.parametrize("kind", ["fifo", "dir"])
def test_special_files_in_the_archive_are_warnings_not_hangs(local, kind):
    hosts, env, state = local
    store = ArchiveStore("faults", state / "archive")
    for sid in ("a1", "a2"):
        store.write_meta(sid, {"submission_id": sid, "log": {"chars": 0}, "status": "FAILED"})
    _special(store.job_dir("a1") / "metrics.json.gz", kind)
    _special(store.job_dir("a2") / "meta.json", kind)
    out = cli(env, "compare", str(hosts), "a1", "a2", "--offline", "--json")
    assert "Traceback" not in out.stderr
    assert "metrics.json.gz: is " in out.stderr and "a2/meta.json: is " in out.stderr
    assert all(len(line) < 400 for line in out.stderr.splitlines())


def test_special_latest_checkpoint_file_is_reported_not_waited_on(local, tmp_path):
    hosts, env, _ = local
    root = tmp_path / "ckpts"
    (root / "global_step_5").mkdir(parents=True)
    (root / "global_step_5" / "data.pt").write_bytes(b"x")
    os.mkfifo(root / "latest_checkpointed_iteration.txt")
    out = cli(env, "ckpt", str(hosts), "--dir", str(root), "--json", timeout=60)
    assert out.returncode in (0, 1) and "Traceback" not in out.stderr, out.stderr
    assert "not a regular file" in out.stdout + out.stderr


def test_damaged_history_record_is_named_and_never_a_hang(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    history = JobHistory("c")
    history.save(JobRecord("good", "c", 1.0, "true"))
    os.mkfifo(history.dir / "fifo.json")
    (history.dir / "bad.json").write_text('{"submission_id": "bad"')
    shape = {"submission_id": "shape", "cluster": "c", "submitted_at": 1, "entrypoint": "x"}
    (history.dir / "shape.json").write_text(json.dumps({**shape, "tags": ["a list"]}))
    assert [r.submission_id for r in history.all()] == ["good"]
    assert len(history.problems) == 3 and all("\n" not in p for p in history.problems)
    with pytest.raises(StateError, match=r"shape\.json: not a job record"):
        history.get("shape")
    with pytest.raises(StateError, match="FIFO"):
        history.get("fifo")
    with pytest.raises(StateError, match=r"bad\.json:1: damaged"):
        history.get("bad")


# -- a damaged queue.json -----------------------------------------------------------------------


def test_damaged_queue_is_refused_and_kept(local):
    hosts, env, state = local
    queue = JobQueue("faults", state / "queue")
    queue.add_all([entry("keep-1"), entry("keep-2")])
    text = queue.path.read_text() + "{ one bad line appended\n"
    queue.path.write_text(text)
    for args in (
        ("submit", str(hosts), "--queue", "--submission-id", "new-1", "--", "true"),
        ("queue", str(hosts)),
        ("queue", str(hosts), "--cancel", "keep-1"),
        ("queue", str(hosts), "--move", "keep-2", "--to", "1"),
    ):
        one_line_failure(cli(env, *args), f"{queue.path}:", "damaged", "move", rc=1)
    assert queue.path.read_text() == text  # never rewritten with only the new job
    no_crash_files(state)


# -- a full disk (a real 1 MiB tmpfs as XDG_STATE_HOME) -----------------------------------------


@contextlib.contextmanager
def tiny_tmpfs(where: Path):
    where.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(where)], check=True)
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def fill(folder: Path) -> None:
    """Fill the tmpfs to its last byte."""
    fd = os.open(folder / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        with contextlib.suppress(OSError):
            while os.write(fd, b"\0" * 4096):
                pass
        with contextlib.suppress(OSError):
            while os.write(fd, b"\0"):
                pass
    finally:
        os.close(fd)


def test_full_disk_queue_commands_end_in_one_line(tmp_path):
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(LOCAL_HOSTS)
    with tiny_tmpfs(tmp_path / "xdg") as xdg:
        env = {**os.environ, "XDG_STATE_HOME": str(xdg)}
        queue = JobQueue("faults", xdg / "verl-tui" / "queue")
        queue.add_all([entry("old-1"), entry("old-2")])
        before = queue.path.read_text()
        fill(xdg)
        for args in (
            ("submit", str(hosts), "--queue", "--submission-id", "new-1", "--", "true"),
            ("queue", str(hosts), "--cancel", "old-1"),
            ("queue", str(hosts), "--move", "old-2", "--to", "1"),
        ):
            one_line_failure(cli(env, *args), f"cannot write to {queue.dir}", "no space left", rc=1)
        assert queue.path.read_text() == before  # nothing half-written, nothing lost
        listed = cli(env, "queue", str(hosts), "--json")  # reading needs no space
        assert listed.returncode == 0, listed.stderr
        assert [e["submission_id"] for e in json.loads(listed.stdout)["queue"]] == [
            "old-1",
            "old-2",
        ]
        no_crash_files(xdg / "verl-tui")


# -- stdout: full, closed, a reader that goes away ----------------------------------------------


def test_stdout_full_closed_and_broken(local):
    hosts, env, state = local
    JobQueue("faults", state / "queue").add_all([entry(f"job-{i}") for i in range(3000)])
    with open("/dev/full", "w") as full:
        out = run_cli(["queue", str(hosts)], stdout=full, env=env, timeout=HANG)
    assert out.returncode == 1, out.stderr
    assert out.stderr.strip() == "verl-tui: error: cannot write the output: no space left on device"
    closed = subprocess.run(
        ["sh", "-c", f"{VENV_PY} -m tui queue {hosts} >&-"],
        capture_output=True,
        text=True,
        env=env,
        timeout=HANG,
    )
    assert closed.returncode == 1 and len(closed.stderr.strip().splitlines()) == 1
    assert "standard output is closed" in closed.stderr
    piped = subprocess.run(
        ["bash", "-c", f"{VENV_PY} -m tui queue {hosts} | head -1; echo rc=${{PIPESTATUS[0]}}"],
        capture_output=True,
        text=True,
        env=env,
        timeout=HANG,
    )
    assert piped.stdout.splitlines()[0].startswith("POS"), piped.stdout
    assert piped.stdout.splitlines()[-1] == "rc=141" and piped.stderr == "", piped.stderr
    no_crash_files(state)


# -- profile files ------------------------------------------------------------------------------

SCRIPT = (
    "python3 -m verl.trainer.main_ppo trainer.nnodes=1 trainer.n_gpus_per_node=8 "
    "data.train_batch_size=64\n"
)


def test_profile_import_refuses_to_overwrite_without_force(local, tmp_path):
    _, env, _ = local
    script = tmp_path / "run.sh"
    script.write_text(SCRIPT)
    precious = tmp_path / "precious.yaml"
    precious.write_text("# hand-written\nname: mine\n")
    out = cli(env, "profile", "import", str(script), "-o", str(precious))
    one_line_failure(out, str(precious), "--force", rc=2)
    assert precious.read_text() == "# hand-written\nname: mine\n"
    forced = cli(env, "profile", "import", str(script), "-o", str(precious), "--force")
    assert forced.returncode == 0, forced.stderr
    assert "data.train_batch_size: 64" in precious.read_text()


def test_profile_export_never_replaces_what_is_not_a_regular_file(local, tmp_path):
    _, env, _ = local
    profile = ROOT / "profiles" / "grpo-gsm8k-qwen2.5-0.5b.yaml"
    target = tmp_path / "target"
    target.write_text("kept")
    link = tmp_path / "link.sh"
    link.symlink_to(target)
    fifo = tmp_path / "fifo.sh"
    os.mkfifo(fifo)
    folder = tmp_path / "folder.sh"
    folder.mkdir()
    device = tmp_path / "null.sh"
    os.mknod(device, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # /dev/null's numbers
    for path, what in (
        (link, "symbolic link"),
        (fifo, "FIFO"),
        (folder, "a folder"),
        (device, "character device"),
    ):
        out = cli(env, "profile", "export", str(profile), "-o", str(path))
        one_line_failure(out, str(path), what, rc=2)
    assert target.read_text() == "kept" and link.is_symlink()
    assert stat.S_ISFIFO(fifo.lstat().st_mode) and folder.is_dir()
    assert stat.S_ISCHR(device.lstat().st_mode)
    regular = tmp_path / "run.sh"
    regular.write_text("old")
    out = cli(env, "profile", "export", str(profile), "-o", str(regular))
    assert out.returncode == 0 and regular.read_text() != "old", out.stderr


# -- the record before the POST -----------------------------------------------------------------


class _Refusing(http.server.BaseHTTPRequestHandler):
    """A dashboard that refuses every job (HTTP 400) and knows none (404)."""

    def do_POST(self):
        self.send_response(400)
        self.end_headers()
        self.wfile.write(b"runtime_env: refused by this head\n")

    def do_GET(self):
        self.send_response(404)
        self.end_headers()

    def log_message(self, *a):
        pass


def test_a_refused_post_leaves_an_honest_record(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Refusing)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        client = DashboardClient(f"http://127.0.0.1:{server.server_address[1]}", timeout=5)
        sub = raw_submission(["true"], submission_id="refused-1")
        history = JobHistory("c")
        rec = JobRecord("refused-1", "c", time.time(), "true")

        async def dashboard():
            return client

        with pytest.raises(DashboardError, match="HTTP 400"):
            asyncio.run(record_then_post(dashboard, sub, history, rec))
        kept = history.get("refused-1")
        assert kept is not None and kept.status == NOT_SUBMITTED
        assert "refused by this head" in (kept.note or "")
    finally:
        server.shutdown()


class _LosesAnswers(http.server.BaseHTTPRequestHandler):
    """A dashboard that takes the POST and hangs up without answering; `knows` says whether
    it then reports the job (200) or cannot be asked either (hangs up again)."""

    knows = False

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.close_connection = True  # no status line: the answer is lost

    def do_GET(self):
        if not self.knows:
            self.close_connection = True
            return
        sid = self.path.rstrip("/").rsplit("/", 1)[-1]
        body = json.dumps(
            {
                "submission_id": sid,
                "job_id": None,
                "status": "PENDING",
                "entrypoint": "true",
                "type": "SUBMISSION",
                "message": "",
                "metadata": {},
            }
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


@pytest.mark.parametrize("knows", [True, False])
def test_a_lost_answer_is_settled_by_the_head_or_said(tmp_path, monkeypatch, knows):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    handler = type("H", (_LosesAnswers,), {"knows": knows})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        client = DashboardClient(f"http://127.0.0.1:{server.server_address[1]}", timeout=5)
        sub = raw_submission(["true"], submission_id="lost-1")
        history = JobHistory("c")

        async def dashboard():
            return client

        go = record_then_post(dashboard, sub, history, JobRecord("lost-1", "c", 1.0, "true"))
        if knows:  # the head has it: sent once, recorded as sent
            assert asyncio.run(go) == "lost-1"
            assert history.get("lost-1").status == "PENDING"
        else:  # nobody can tell: kept as SUBMITTING, and the message says to check
            with pytest.raises(SubmitOutcomeUnknown, match="may have been submitted") as info:
                asyncio.run(go)
            assert "verl-tui jobs" in str(info.value) and "\n" not in str(info.value)
            assert history.get("lost-1").status == "SUBMITTING"
    finally:
        server.shutdown()


# -- with a real Ray cluster --------------------------------------------------------------------


@pytest.fixture(scope="module")
def ray_faults(ray_shared1):
    return ray_shared1


def head_jobs(env: dict, path: Path) -> set[str]:
    out = cli(env, "jobs", str(path), "--json", timeout=120)
    assert out.returncode == 0, out.stderr
    return {j["submission_id"] for j in json.loads(out.stdout)["jobs"] if j["on_head"]}


def test_full_disk_submits_nothing(ray_faults, tmp_path):
    _, path, env = ray_faults
    before = head_jobs(env, path)
    with tiny_tmpfs(tmp_path / "xdg") as xdg:
        full_env = {**env, "XDG_STATE_HOME": str(xdg)}
        (xdg / "verl-tui" / "history").mkdir(parents=True)
        fill(xdg)
        out = cli(
            full_env,
            "submit",
            str(path),
            "--submission-id",
            "full-disk-1",
            "--",
            "true",
            timeout=120,
        )
        one_line_failure(out, "cannot write to", "history", "no space left", rc=1)
        # Reading the jobs still works on a full disk (the status cache is skipped).
        listed = cli(full_env, "jobs", str(path), "--json", timeout=120)
        assert listed.returncode == 0, listed.stderr
        no_crash_files(xdg / "verl-tui")
    assert "full-disk-1" not in head_jobs(env, path)
    assert head_jobs(env, path) == before


def test_fifo_history_record_ends_jobs_logs_stop_in_one_line(ray_faults):
    _, path, env = ray_faults
    inv_cluster = parse_inventory(path.read_text(), path).cluster
    state = Path(env["XDG_STATE_HOME"]) / "verl-tui"
    fifo = state / "history" / inv_cluster / "fifo-job.json"
    fifo.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(fifo)
    try:
        listed = cli(env, "jobs", str(path), "--json", timeout=120)
        assert listed.returncode == 0 and "Traceback" not in listed.stderr
        assert f"{fifo}: is a FIFO" in listed.stderr
        for args in (("logs", str(path), "fifo-job"), ("stop", str(path), "fifo-job")):
            out = cli(env, *args, timeout=120)
            assert "Traceback" not in out.stderr and out.returncode != 0, out.stderr
            assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    finally:
        fifo.unlink()


def test_submitted_job_is_recorded_first_then_pending(ray_faults):
    _, path, env = ray_faults
    out = cli(env, "submit", str(path), "--submission-id", "ordered-1", "--", "true", timeout=120)
    assert out.returncode == 0, out.stderr
    inv_cluster = parse_inventory(path.read_text(), path).cluster
    rec = json.loads(
        (
            Path(env["XDG_STATE_HOME"]) / "verl-tui" / "history" / inv_cluster / "ordered-1.json"
        ).read_text()
    )
    assert rec["status"] in ("PENDING", "RUNNING", "SUCCEEDED")
    again = cli(env, "submit", str(path), "--submission-id", "ordered-1", "--", "true")
    one_line_failure(again, "ordered-1", "already", rc=1)


def test_appended_logs_refuse_special_files_at_once(tmp_path):
    """The logs that grow by appends (the supervisor's decisions, the archive's log.gz) are
    opened without blocking too: a FIFO or a folder there is named, never waited on."""
    from tui.supervisor.core import DecisionLog
    from tui.supervisor.events import Decision

    store = ArchiveStore("c", tmp_path / "archive")
    store.write_meta("j1", {"submission_id": "j1", "log": {}})
    meta = store.meta("j1")
    for kind in ("fifo", "dir"):
        decisions = tmp_path / "sup" / "decisions.jsonl"
        _special(decisions, kind)
        _special(store.job_dir("j1") / "log.gz", kind)
        start = time.monotonic()
        with pytest.raises(StateError, match=r"decisions\.jsonl: is "):
            DecisionLog(decisions).append(Decision("error", None, "x"))
        with pytest.raises(StateError, match=r"log\.gz: is "):
            store.append_log("j1", meta, "line\n")
        assert time.monotonic() - start < 5


@pytest.mark.parametrize("kind", ["fifo", "dir"])
def test_special_cluster_lock_file_ends_up_and_down_in_one_line(local, kind):
    """`up`/`down` take the local cluster lock before anything else: a FIFO or a folder at
    locks/<cluster>.lock is named at once (it used to be an internal error or a wait)."""
    hosts, env, state = local
    lock = state / "locks" / "faults.lock"
    _special(lock, kind)
    for command in ("down", "up"):
        out = cli(env, command, str(hosts), timeout=60)
        one_line_failure(out, str(lock), "expected a lock file")
    no_crash_files(state)
