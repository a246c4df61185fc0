"""Hostile dashboards and webhooks on loopback (issue 23): every answer the dashboard client
reads is bounded in time and size and checked against its schema; nothing is followed or sent
through a proxy. Real servers (socketserver threads writing raw bytes), the real client, and
the real CLI over the local transport (its private Unix forward spliced to the fake's port).

What each case asserts: one line naming the request (and the field, the limit, the Location),
a bounded time, bounded memory, nothing sent twice or elsewhere."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import resource
import socket
import socketserver
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from harness.cli import run_cli

from tui.cluster.dashboard import DashboardClient, DashboardError, SubmitUncertain
from tui.supervisor.notify import post_webhook, run_command
from tui.transport.http import Endpoint, HttpError, HttpTimeout, request

CLI = [sys.executable, "-m", "tui"]
GB15 = 1_500_000_000

Act = Callable[[socket.socket], None]


class Fake:
    """A loopback HTTP server on raw sockets: `answer(method, path, body)` gives the bytes to
    send or a function that writes them itself (trickles, floods). Records every request."""

    def __init__(self, answer: Callable[[str, str, bytes], bytes | Act]):
        self.answer = answer
        self.requests: list[tuple[str, str, bytes]] = []
        self.connections = 0
        fake = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                fake.connections += 1
                sock: socket.socket = self.request
                sock.settimeout(60)
                f = sock.makefile("rb")
                try:
                    line = f.readline(65536).decode("latin-1")
                    headers = {}
                    while (h := f.readline(65536)) not in (b"\r\n", b"\n", b""):
                        k, _, v = h.decode("latin-1").partition(":")
                        headers[k.strip().lower()] = v.strip()
                    body = f.read(int(headers.get("content-length") or 0))
                except OSError:
                    return
                if not line:
                    return
                method, path = line.split(" ")[:2]
                fake.requests.append((method, path, body))
                act = fake.answer(method, path, body)
                with contextlib.suppress(OSError):
                    act(sock) if callable(act) else sock.sendall(act)

        socketserver.ThreadingTCPServer.daemon_threads = True
        socketserver.ThreadingTCPServer.allow_reuse_address = True
        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> Fake:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def raw(status: str, body: bytes, ctype: str = "application/json", extra: str = "") -> bytes:
    head = f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
    return (head + extra + "Connection: close\r\n\r\n").encode() + body


def js(value: object, status: str = "200 OK") -> bytes:
    return raw(status, json.dumps(value).encode())


def trickle(prefix: bytes, every: float = 0.2) -> Act:
    """Send `prefix` one byte at a time, then keep sending spaces the same way, forever."""

    def act(sock: socket.socket) -> None:
        for i in range(100000):
            sock.sendall(prefix[i : i + 1] if i < len(prefix) else b" ")
            time.sleep(every)

    return act


def flood(declared: bool, total: int = GB15) -> Act:
    """A 1.5 GB answer: declared in Content-Length, or streamed until close."""

    def act(sock: socket.socket) -> None:
        length = f"Content-Length: {total}\r\n" if declared else "Connection: close\r\n"
        sock.sendall(f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n{length}\r\n".encode())
        chunk = b"[" + b"0," * (1 << 19)
        sent = 0
        while sent < total:
            sock.sendall(chunk)
            sent += len(chunk)

    return act


def client(fake: Fake, timeout: float = 2.0) -> DashboardClient:
    return DashboardClient(fake.url, timeout=timeout)


def fails(coro: object) -> tuple[str, float]:
    """The one-line DashboardError a call ends in, and how long it took."""
    t0 = time.monotonic()
    with pytest.raises(DashboardError) as err:
        asyncio.run(coro)  # type: ignore[arg-type]
    msg = str(err.value)
    assert "\n" not in msg and "Traceback" not in msg
    return msg, time.monotonic() - t0


# ---- time ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "prefix",
    [
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n",  # the head never ends
        b"HTTP/1.1 200 OK\r\nContent-Length: 900\r\n\r\n[",  # the body never ends
        b"",  # nothing but spaces: not even a status line
    ],
    ids=["headers", "body", "status-line"],
)
def test_trickling_dashboard_fails_at_the_deadline(prefix):
    with Fake(lambda m, p, b: trickle(prefix)) as fake:
        msg, took = fails(client(fake, timeout=2).list_jobs())
    assert "GET /api/jobs/" in msg and "timed out after 2 s" in msg, msg
    assert 1.9 < took < 3.5, took  # the whole request, not each receive


def test_webhook_trickle_is_bounded_and_says_why():
    with Fake(lambda m, p, b: trickle(b"HTTP/1.1 200 OK\r\nX: ")) as fake:
        t0 = time.monotonic()
        with pytest.raises(Exception) as err:
            asyncio.run(post_webhook(fake.url + "/hook", b"{}", 2))
        took = time.monotonic() - t0
    assert "timed out after 2 s" in str(err.value) and "webhook http://127.0.0.1:" in str(err.value)
    assert took < 3.5, took


def test_notify_command_grandchild_is_killed_with_its_group(tmp_path):
    """The command leaves a child holding its stderr and sleeping: the call ends at the
    timeout, and the child (in the command's group) is gone."""
    pidfile = tmp_path / "child.pid"
    script = f"sleep 300 & echo $! > {pidfile}; wait"
    t0 = time.monotonic()
    with pytest.raises(Exception, match=r"no exit within 1 s \(killed\)"):
        asyncio.run(run_command(("sh", "-c", script), b"{}", 1.0))
    took = time.monotonic() - t0
    assert took < 3.0, took
    child = int(pidfile.read_text())
    assert not _alive(child), f"grandchild {child} outlived the notify command"


def test_notify_command_that_exits_but_leaves_a_child(tmp_path):
    """sh exits at once (status 0) while its background child keeps stderr open: the call
    returns without waiting for the child, and the child is ended with the group."""
    pidfile = tmp_path / "child.pid"
    script = f"sleep 300 & echo $! > {pidfile}; exit 0"
    t0 = time.monotonic()
    asyncio.run(run_command(("sh", "-c", script), b"{}", 10.0))
    took = time.monotonic() - t0
    assert took < 3.0, took
    assert not _alive(int(pidfile.read_text()))


def test_notify_command_output_is_bounded(tmp_path):
    """50 MB on stderr, then a failure: the line carries the tail, memory stays small."""
    script = "head -c 50000000 /dev/zero | tr '\\0' x >&2; echo ' the-end' >&2; exit 4"
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(Exception) as err:
        asyncio.run(run_command(("sh", "-c", script), b"{}", 30.0))
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    msg = str(err.value)
    assert "exit status 4" in msg and msg.endswith("the-end") and len(msg) < 500, msg
    assert grown_mb < 30, grown_mb


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False


# ---- size ------------------------------------------------------------------------------------


def test_declared_huge_answer_fails_before_reading():
    with Fake(lambda m, p, b: flood(declared=True)) as fake:
        msg, took = fails(client(fake, timeout=30).list_jobs())
    assert "GET /api/jobs/" in msg and "1.4G is over the 32.0M limit" in msg, msg
    assert took < 2, took


def test_streamed_huge_answer_stops_at_the_cap():
    with Fake(lambda m, p, b: flood(declared=False)) as fake:
        msg, took = fails(client(fake, timeout=30).job_info("raysubmit_x"))
    assert "passed the 8.0M limit" in msg, msg
    assert took < 5, took


def test_huge_answer_through_the_cli_keeps_memory_bounded(tmp_path):
    """`verl-tui jobs` against a dashboard streaming 1.5 GB: one line, exit 1, and the process's
    peak RSS stays near a normal run's (the issue measured 6.3 GB)."""
    with Fake(lambda m, p, b: js([]) if p.startswith("/api/jobs") else js(NODES)) as ok:
        base = _peak_rss(local_hosts(tmp_path / "a", ok.port), "jobs")
    with Fake(lambda m, p, b: flood(declared=False)) as fake:
        hosts = local_hosts(tmp_path / "b", fake.port)
        t0 = time.monotonic()
        proc, peak = _cli_rss(hosts, "jobs")
        took = time.monotonic() - t0
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "passed the 32.0M limit" in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    print(f"peak RSS: normal {base / 1024:.0f} MB, flooded {peak / 1024:.0f} MB, {took:.1f} s")
    assert peak - base < 150 * 1024, (base, peak)  # two answers in flight, each capped
    assert took < 30


# ---- shape -----------------------------------------------------------------------------------

NODES = {
    "result": True,
    "msg": "",
    "data": {
        "result": {
            "total": 1,
            "result": [
                {
                    "node_id": "n1",
                    "node_ip": "127.0.0.1",
                    "state": "ALIVE",
                    "is_head_node": True,
                    "resources_total": {"CPU": 4.0, "GPU": 0},
                }
            ],
        }
    },
}


@pytest.mark.parametrize(
    ("answer", "fragment"),
    [
        (
            raw("200 OK", b"<html><body>proxy login</body></html>", "text/html"),
            "text/html, not JSON",
        ),
        (raw("200 OK", b"Service Unavailable", "text/plain"), "text/plain, not JSON"),
        (raw("200 OK", b"[" * 100_000 + b"]" * 100_000), "not JSON"),
        (js({"jobs": []}), "the answer is an object of 1 keys, not a list"),
        (raw("200 OK", b"[" + b"{}," * 3_000_000 + b"{}]"), "over 2,000,000 JSON values"),
        (js([{"status": 7, "entrypoint": "x"}]), "[0].status is 7, not a string"),
        (js([{"status": "RUNNING", "start_time": "yesterday"}]), "[0].start_time is 'yesterday'"),
        (js([{"status": "RUNNING", "driver_info": []}]), "[0].driver_info is a list of 0"),
        (js([{"entrypoint": "x"}]), "[0].status is missing"),
        (js([5]), "[0] is 5, not an object"),
    ],
    ids=[
        "html",
        "text",
        "nested",
        "dict-for-list",
        "json-bomb",
        "int-status",
        "text-time",
        "list-info",
        "no-status",
        "int-row",
    ],
)
def test_job_list_answers_that_are_not_rays(answer, fragment):
    with Fake(lambda m, p, b: answer) as fake:
        msg, _ = fails(client(fake).list_jobs())
    assert msg.startswith("GET /api/jobs/: the dashboard at http://127.0.0.1:"), msg
    assert fragment in msg, msg


@pytest.mark.parametrize(
    ("call", "answer", "fragment"),
    [
        ("job_info", js([]), "the answer is a list of 0, not an object"),
        ("job_logs", js({"logs": 5}), "logs is 5, not a string"),
        ("job_logs", js(["a"]), "a list of 1, not an object"),
        ("alive_nodes", js([]), "the answer is a list of 0, not an object"),
        ("alive_nodes", js({"result": False, "msg": "GCS down"}), "Ray says it failed: GCS down"),
        (
            "alive_nodes",
            js({"result": True, "data": {"result": {"result": [{"node_id": 5}]}}}),
            "data.result.result[0].node_id is 5, not a string",
        ),
        (
            "alive_nodes",
            js(
                {
                    "data": {
                        "result": [
                            {
                                "node_id": "a",
                                "node_ip": "b",
                                "state": "ALIVE",
                                "resources_total": {"GPU": "8"},
                            }
                        ]
                    }
                }
            ),
            "data.result[0].resources_total.GPU is '8', not a number",
        ),
        ("cluster_metadata", js({"data": {"rayVersion": 2}}), "data.rayVersion is 2"),
        ("cluster_metadata", js("ok"), "the answer is 'ok', not an object"),
        ("cluster_status", js({"data": []}), "data is a list of 0, not an object"),
    ],
)
def test_other_answers_that_are_not_rays(call, answer, fragment):
    with Fake(lambda m, p, b: answer) as fake:
        c = client(fake)
        coro = getattr(c, call)("raysubmit_x") if call.startswith("job_") else getattr(c, call)()
        msg, _ = fails(coro)
    assert "the dashboard at http://127.0.0.1:" in msg and fragment in msg, msg


def test_checked_answers_pass_through():
    """The schema keeps what Ray sends: a real-shaped answer reads as before."""
    job = {
        "type": "SUBMISSION",
        "job_id": "02000000",
        "submission_id": "raysubmit_a",
        "status": "RUNNING",
        "entrypoint": "python x.py",
        "message": None,
        "start_time": 1700000000000,
        "end_time": None,
        "driver_info": {"id": "02000000", "node_ip_address": "10.0.0.1", "pid": "4242"},
        "metadata": {"profile": "p"},
        "runtime_env": {"working_dir": "gcs://_ray_pkg_x.zip", "env_vars": {"A": "1"}},
        "extra_field_from_a_newer_ray": [1, 2],
    }
    with Fake(lambda m, p, b: js([job]) if p == "/api/jobs/" else js(NODES)) as fake:
        c = client(fake)
        jobs = asyncio.run(c.list_jobs())
        nodes = asyncio.run(c.alive_nodes())
    assert jobs[0]["status"] == "RUNNING" and jobs[0]["driver_info"]["pid"] == 4242
    assert jobs[0]["runtime_env"]["working_dir"] == "gcs://_ray_pkg_x.zip"
    assert "extra_field_from_a_newer_ray" not in jobs[0]  # nothing unchecked gets past
    assert nodes[0]["resources_total"] == {"CPU": 4.0, "GPU": 0}


# ---- submit ----------------------------------------------------------------------------------

SID = "vt-faults-1"


def submit(fake: Fake, timeout: float = 2.0) -> None:
    asyncio.run(client(fake, timeout).submit_job({"submission_id": SID, "entrypoint": "true"}))


@pytest.mark.parametrize(
    ("answer", "fragment"),
    [
        (js({"submission_id": 12345}), "submission_id is 12345, not a submission id"),
        (js({"submission_id": "../../x"}), "submission_id is '../../x'"),
        (js({"submission_id": "raysubmit_other"}), "answered submission id raysubmit_other"),
        (raw("200 OK", b"<html>ok</html>", "text/html"), "not JSON"),
        (trickle(b"HTTP/1.1 200 OK\r\n"), "timed out after 2 s"),
        (raw("500 Internal Server Error", b"Traceback...\nRuntimeError: boom"), "HTTP 500"),
    ],
    ids=["int-id", "path-id", "other-id", "html", "trickle", "500"],
)
def test_submit_failing_after_the_post_names_the_id_to_check(answer, fragment):
    with Fake(lambda m, p, b: answer) as fake:
        with pytest.raises(SubmitUncertain) as err:
            submit(fake)
        posts = [r for r in fake.requests if r[0] == "POST"]
    msg = str(err.value)
    assert fragment in msg and f"may exist on the head: look for {SID}" in msg, msg
    assert "\n" not in msg and "12345" not in msg.split(";")[-1]
    assert err.value.submission_id == SID
    assert len(posts) == 1 and json.loads(posts[0][2])["submission_id"] == SID  # sent once


def test_submit_refused_or_unsent_is_not_uncertain():
    refusing = Fake(lambda m, p, b: raw("400 Bad Request", b"Job with submission_id exists"))
    with refusing, pytest.raises(DashboardError) as err:
        submit(refusing)
    assert not isinstance(err.value, SubmitUncertain)
    assert "HTTP 400 from the dashboard at" in str(err.value)
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    with pytest.raises(DashboardError) as err:
        asyncio.run(
            DashboardClient(f"http://127.0.0.1:{port}", 2).submit_job({"submission_id": SID})
        )
    assert not isinstance(err.value, SubmitUncertain)
    assert "cannot connect: Connection refused" in str(err.value) and "HTTP" not in str(err.value)


# ---- redirects and proxies -------------------------------------------------------------------


def test_redirect_is_named_and_never_followed():
    with Fake(lambda m, p, b: js({"submission_id": SID})) as elsewhere:
        to = f"{elsewhere.url}/api/jobs/"
        moved = raw("302 Found", b"", extra=f"Location: {to}\r\n")
        with Fake(lambda m, p, b: moved) as fake:
            with pytest.raises(SubmitUncertain) as err:
                submit(fake)
            msg, _ = fails(client(fake).list_jobs())
        assert elsewhere.requests == [] and elsewhere.connections == 0
    assert f"answered 302 Found, a redirect to {to} (not followed" in str(err.value)
    assert f"GET /api/jobs/: the dashboard at {fake.url} answered 302" in msg


def test_404_is_said_only_when_the_dashboard_said_it():
    with Fake(lambda m, p, b: raw("404 Not Found", b"Job raysubmit_x does not exist")) as fake:
        msg, _ = fails(client(fake).job_info("raysubmit_x"))
        assert asyncio.run(client(fake).exists("/api/jobs/raysubmit_x")) is False
    assert msg == (
        f"GET /api/jobs/raysubmit_x: HTTP 404 from the dashboard at {fake.url}: "
        "Job raysubmit_x does not exist"
    )


def test_proxy_variables_are_never_used(monkeypatch, tmp_path):
    """http_proxy & co. point at a listener that records connections: the client and the CLI
    talk to the dashboard directly (a job's env vars never go to a proxy)."""

    def dashboard(method: str, path: str, body: bytes) -> bytes:
        if method == "POST":
            return js({"submission_id": SID})
        return js([]) if path == "/api/jobs/" else js(NODES)

    proxy = Fake(lambda m, p, b: raw("404 Not Found", b"proxy"))
    with proxy, Fake(dashboard) as fake:
        env = {
            name: proxy.url
            for name in (
                "http_proxy",
                "HTTP_PROXY",
                "https_proxy",
                "HTTPS_PROXY",
                "all_proxy",
                "ALL_PROXY",
            )
        }
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        monkeypatch.delenv("no_proxy", raising=False)
        monkeypatch.delenv("NO_PROXY", raising=False)
        assert asyncio.run(client(fake).list_jobs()) == []
        asyncio.run(client(fake).submit_job({"submission_id": SID, "entrypoint": "true"}))
        proc = _cli(local_hosts(tmp_path, fake.port), "jobs", "--json")
        assert proc.returncode == 0, proc.stderr
        assert proxy.connections == 0 and proxy.requests == []
        assert ("GET", "/api/jobs/", b"") in fake.requests


def test_malformed_http_is_one_line():
    headers = b"HTTP/1.1 200 OK\r\n" + b"".join(b"X-%d: y\r\n" % i for i in range(500)) + b"\r\n"
    for answer, fragment in (
        (b"SSH-2.0-OpenSSH_9.6\r\n", "not a well-formed HTTP answer"),
        (headers, "not a well-formed HTTP answer"),
        (b"HTTP/1.1 200 OK\r\nX: " + b"a" * 200_000 + b"\r\n\r\n", "not a well-formed"),
    ):
        with Fake(lambda m, p, b, a=answer: a) as fake:
            msg, _ = fails(client(fake).list_jobs())
        assert fragment in msg, msg


def test_bounded_request_over_a_unix_socket(tmp_path):
    """The transport's Unix socket endpoint (what the private forward uses) with the same
    deadline."""
    path = str(tmp_path / "s")
    srv = socket.socket(socket.AF_UNIX)
    srv.bind(path)
    srv.listen()

    def serve() -> None:
        conn, _ = srv.accept()
        conn.recv(65536)
        with conn, contextlib.suppress(OSError):  # the client hangs up at its deadline
            trickle(b"HTTP/1.1 200 OK\r\n", 0.1)(conn)

    threading.Thread(target=serve, daemon=True).start()
    t0 = time.monotonic()
    with pytest.raises(HttpTimeout):
        request(Endpoint(unix_path=path), "GET", "/", deadline_s=1, max_body=100)
    assert time.monotonic() - t0 < 2
    with pytest.raises(HttpError, match="cannot connect"):
        request(Endpoint(unix_path=str(tmp_path / "none")), "GET", "/", deadline_s=1, max_body=1)
    srv.close()


# ---- the CLI ---------------------------------------------------------------------------------


def local_hosts(folder: Path, port: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "hosts.yaml"
    path.write_text(
        "cluster: faults\nray:\n"
        f"  dashboard_port: {port}\nhosts:\n  - name: localhost\n    transport: local\n"
    )
    return path


def _env(hosts: Path) -> dict[str, str]:
    return {**os.environ, "XDG_STATE_HOME": str(hosts.parent / "state")}


def _cli(hosts: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return run_cli(
        [args[0], str(hosts), *args[1:]], timeout=timeout, env=_env(hosts), stdin=subprocess.DEVNULL
    )


def _cli_rss(hosts: Path, *args: str) -> tuple[subprocess.CompletedProcess, int]:
    """Run the CLI and read its own peak RSS (KiB) from wait4."""
    proc = subprocess.Popen(
        [*CLI, args[0], str(hosts), *args[1:]],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        env=_env(hosts),
    )
    out: dict[str, bytes] = {}
    readers = [
        threading.Thread(target=lambda n=n, s=s: out.__setitem__(n, s.read()), daemon=True)
        for n, s in (("stdout", proc.stdout), ("stderr", proc.stderr))
    ]
    for r in readers:
        r.start()
    _pid, status, usage = os.wait4(proc.pid, 0)
    for r in readers:
        r.join(10)
    done = subprocess.CompletedProcess(
        proc.args,
        os.waitstatus_to_exitcode(status),
        out.get("stdout", b"").decode("utf-8", "replace"),
        out.get("stderr", b"").decode("utf-8", "replace"),
    )
    return done, usage.ru_maxrss


def _peak_rss(hosts: Path, *args: str) -> int:
    proc, peak = _cli_rss(hosts, *args)
    assert proc.returncode == 0, proc.stderr
    return peak


WRONG_TYPES = {
    "/api/jobs/": [{"status": ["RUNNING"], "submission_id": "a"}],
    "/api/v0/nodes": {"result": True, "data": {"result": {"result": [{"node_id": 1}]}}},
    "/api/v0/cluster_metadata": {"data": ["2.60"]},
    "/api/jobs/vt-faults-1": {"status": 1},
    "/api/jobs/vt-faults-1/stop": {"stopped": "yes"},
}


def _wrong_typed(method: str, path: str, body: bytes) -> bytes:
    for prefix, value in WRONG_TYPES.items():
        if path.split("?")[0].rstrip("/") == prefix.rstrip("/"):
            return js(value)
    return js({"unexpected": True})


@pytest.mark.parametrize("variant", ["html", "list", "wrong-types"])
def test_commands_against_a_hostile_dashboard(variant, tmp_path):
    """status, jobs, stop, submit and watch --once: one line and a clean exit status, never an
    internal error (the issue saw crashes in each)."""
    answers: dict[str, Callable[[str, str, bytes], bytes]] = {
        "html": lambda m, p, b: raw("200 OK", b"<!doctype html><title>Login</title>", "text/html"),
        "list": lambda m, p, b: js([{"a": 1}] if not p.startswith("/api/jobs/") else {"a": 1}),
        "wrong-types": _wrong_typed,
    }
    with Fake(answers[variant]) as fake:
        hosts = local_hosts(tmp_path, fake.port)
        runs = {
            "status": _cli(hosts, "status"),
            "jobs": _cli(hosts, "jobs"),
            "stop": _cli(hosts, "stop", SID),
            "submit": _cli(hosts, "submit", "--submission-id", SID, "--", "true"),
            "watch": _cli(hosts, "watch", "--once"),
        }
        posts = [r for r in fake.requests if r[0] == "POST" and r[1] == "/api/jobs/"]
    for name, proc in runs.items():
        text = proc.stdout + proc.stderr
        assert "Traceback" not in text and "internal error" not in text, (name, text)
        assert proc.returncode != 0 or name == "watch", (name, proc.returncode, text)
        assert "the dashboard at" in text, (name, text)
    assert len(posts) <= 1  # a submit is never sent twice


# ---- the webhook's proxy (the one place a proxy is used) -------------------------------------


def _self_signed(folder: Path) -> tuple[Path, Path]:
    """A certificate for `localhost` (its own CA) and its key, as PEM files."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


class ConnectProxy:
    """An HTTP proxy on loopback: CONNECT host:port is spliced to the target (recorded); any
    other request is recorded and answered 200."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        proxy = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                sock: socket.socket = self.request
                f = sock.makefile("rb")
                line = f.readline(65536).decode("latin-1").strip()
                while f.readline(65536) not in (b"\r\n", b""):
                    pass
                proxy.lines.append(line)
                method, target = line.split(" ")[:2]
                if method != "CONNECT":
                    sock.sendall(raw("200 OK", b"{}"))
                    return
                host, _, port = target.rpartition(":")
                up = socket.create_connection((host, int(port)))
                sock.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                pumps = [
                    threading.Thread(target=_pump, args=(a, b), daemon=True)
                    for a, b in ((sock, up), (up, sock))
                ]
                for p in pumps:
                    p.start()
                for p in pumps:
                    p.join(30)

        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _pump(src: socket.socket, dst: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := src.recv(65536):
            dst.sendall(data)
        dst.shutdown(socket.SHUT_WR)


def test_webhook_uses_the_environments_http_proxy(monkeypatch, tmp_path):
    """http:// through http_proxy in absolute form; https:// through CONNECT, the TLS inside
    checked against the server's certificate (a self-signed one, trusted via SSL_CERT_FILE)."""
    import ssl

    cert, key = _self_signed(tmp_path)
    bodies: list[bytes] = []

    class TlsServer(socketserver.ThreadingTCPServer):
        daemon_threads = True

        def get_request(self):  # type: ignore[no-untyped-def]
            sock, addr = super().get_request()
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(cert, key)
            return ctx.wrap_socket(sock, server_side=True), addr

    class Hook(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            f = self.request.makefile("rb")
            f.readline()
            length = 0
            while (h := f.readline()) not in (b"\r\n", b""):
                if h.lower().startswith(b"content-length:"):
                    length = int(h.split(b":")[1])
            bodies.append(f.read(length))
            self.request.sendall(raw("200 OK", b"ok", "text/plain"))

    tls = TlsServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=tls.serve_forever, daemon=True).start()
    proxy = ConnectProxy()
    try:
        for name in ("http_proxy", "https_proxy"):
            monkeypatch.setenv(name, proxy.url)
        for name in ("no_proxy", "NO_PROXY", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "all_proxy"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))
        asyncio.run(post_webhook("http://hooks.invalid:8080/T0/x?y=1", b'{"a": 1}', 5))
        port = tls.server_address[1]
        asyncio.run(post_webhook(f"https://localhost:{port}/T0/secret", b'{"b": 2}', 5))
        monkeypatch.delenv("SSL_CERT_FILE")
        monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "none.pem"))
        with pytest.raises(Exception, match=r"webhook https://localhost:\d+/…: TLS"):
            asyncio.run(post_webhook(f"https://localhost:{port}/T0/secret", b"{}", 5))
    finally:
        proxy.close()
        tls.shutdown()
        tls.server_close()
    assert proxy.lines[0] == "POST http://hooks.invalid:8080/T0/x?y=1 HTTP/1.1"
    assert proxy.lines[1] == f"CONNECT localhost:{port} HTTP/1.1"
    assert bodies[0] == b'{"b": 2}'  # through the tunnel, inside TLS


def test_websocket_goes_to_the_socket_not_a_proxy(monkeypatch, tmp_path):
    """The log tail's websocket: over the client's endpoint (the private socket), never through
    the proxy the environment names, a message over its size limit refused."""
    import websockets

    proxy = Fake(lambda m, p, b: raw("403 Forbidden", b""))
    monkeypatch.setenv("http_proxy", proxy.url)
    monkeypatch.setenv("all_proxy", proxy.url)
    path = str(tmp_path / "dash.sock")

    async def run() -> list[str]:
        async def handler(ws: websockets.ServerConnection) -> None:
            await ws.send("first " + (ws.request.path if ws.request else ""))
            await ws.send("x" * 5000)

        got: list[str] = []
        async with websockets.unix_serve(handler, path):
            c = DashboardClient(Endpoint(unix_path=path))
            with pytest.raises(websockets.exceptions.ConnectionClosedError, match="1009"):
                async with c.websocket("/api/jobs/a/logs/tail", max_size=4096) as ws:
                    async for message in ws:
                        got.append(str(message))
        return got

    with proxy:
        assert asyncio.run(run()) == ["first /api/jobs/a/logs/tail"]
        assert proxy.connections == 0


def test_tunnel_on_the_local_transport(tmp_path):
    """`verl-tui tunnel` with the head on this machine (transport: local): the same gate in front
    of the same private socket, and a note that Ray's own port is open here anyway."""
    import http.client
    import re

    seen: list[str] = []

    def dashboard(method: str, path: str, body: bytes) -> bytes:
        seen.append(f"{method} {path}")
        return js(NODES) if path.startswith("/api/v0/nodes") else js([])

    with Fake(dashboard) as fake:
        hosts = local_hosts(tmp_path, fake.port)
        proc = subprocess.Popen(
            [*CLI, "tunnel", str(hosts)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_env(hosts),
        )
        try:
            assert proc.stdout is not None
            out = ""
            while "note:" not in out:
                line = proc.stdout.readline()
                assert line, out + (proc.stderr.read() if proc.stderr else "")
                out += line
            m = re.search(r"http://127\.0\.0\.1:(\d+)/\?token=(\S+)", out)
            assert m, out
            port, token = int(m.group(1)), m.group(2)
            assert "is reachable by every user of it" in out
            before = len(seen)
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            c.request("POST", "/api/jobs/", body=b"{}")
            assert c.getresponse().status == 403
            assert len(seen) == before  # not passed on
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            c.request("GET", "/api/jobs/", headers={"Cookie": f"verl_tui_{port}={token}"})
            r = c.getresponse()
            assert r.status == 200 and r.read() == b"[]"
            assert seen[-1] == "GET /api/jobs/"
        finally:
            proc.terminate()
            proc.wait(20)
