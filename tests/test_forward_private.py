"""The dashboard forward is private to its owner (issue 23, "The cluster opened to others").

A real namespace sshd host runs a real Ray head (the session's shared one-host cluster);
`verl-tui tunnel` runs as root, the owner. A second real OS user (nobody, through setpriv, with
the system's python3: no access to ours) then tries every way in: the private Unix socket that
commands use must refuse it (EACCES), and the browser's loopback listener must answer 403 to
anything without the token or its cookie and never pass a request on (a POST /api/jobs/ with a
job included). With the token the dashboard answers, websockets included. The head's job list
is the same after the other user's attempts."""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import re
import stat
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from harness.cli import run_cli
from harness.raycluster import VENV_PY

from tui.cluster.dashboard import DashboardClient
from tui.transport.http import Endpoint

OTHER_USER = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
SYSTEM_PY = "/usr/bin/python3"  # nobody cannot run ours (under /root)

# What the other user runs: stdlib only. argv: unix PATH | http PORT METHOD TARGET HEADERS BODY
INTRUDER = r"""
import errno, http.client, json, socket, sys
mode = sys.argv[1]
if mode == "unix":
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(sys.argv[2])
        s.sendall(b"POST /api/jobs/ HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
        print("CONNECTED", s.recv(100))
    except OSError as e:
        print(errno.errorcode.get(e.errno, str(e.errno)))
elif mode == "raw":
    s = socket.create_connection(("127.0.0.1", int(sys.argv[2])), timeout=20)
    s.sendall(sys.argv[3].encode("latin-1"))
    print(s.recv(200).split(b"\r\n")[0].decode())
else:
    port, method, target, headers, body = sys.argv[2:7]
    c = http.client.HTTPConnection("127.0.0.1", int(port), timeout=20)
    c.request(method, target, body=body.encode() or None, headers=json.loads(headers))
    r = c.getresponse()
    print(r.status, json.dumps(r.getheaders()), r.read(300).decode("utf-8", "replace"))
"""


def as_other_user(*args: str) -> str:
    proc = subprocess.run(
        [*OTHER_USER, SYSTEM_PY, "-c", INTRUDER, *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd="/",
    )
    assert proc.returncode == 0, proc.stderr
    assert os.getuid() == 0  # the tunnel's owner; the intruder ran as nobody
    return proc.stdout.strip()


@dataclass
class Running:
    proc: subprocess.Popen[str]
    url: str
    port: int
    token: str
    socket_path: str
    output: str
    env: dict[str, str]
    hosts: Path


@pytest.fixture(scope="module")
def tunnel(ray_shared1):
    _cluster, path, env = ray_shared1
    proc = subprocess.Popen(
        [VENV_PY, "-m", "tui", "tunnel", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    lines: list[str] = []
    ready = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if "private socket" in line:
                ready.set()

    threading.Thread(target=read, daemon=True).start()
    try:
        assert ready.wait(60), "".join(lines) + (proc.stderr.read() if proc.poll() else "")
        text = "".join(lines)
        url = re.search(r"dashboard and jobs API: (\S+)", text).group(1)  # type: ignore[union-attr]
        m = re.fullmatch(r"http://127\.0\.0\.1:(\d+)/\?token=([A-Za-z0-9_-]+)", url)
        assert m, url
        sock = re.search(r"private socket (\S+)", text).group(1)  # type: ignore[union-attr]
        yield Running(proc, url, int(m.group(1)), m.group(2), sock, text, env, path)
    finally:
        proc.terminate()
        proc.wait(30)
    assert not Path(sock).parent.exists(), "the private folder outlived the tunnel"


def owner_client(t: Running) -> DashboardClient:
    return DashboardClient(Endpoint(unix_path=t.socket_path), timeout=20, label="test")


def job_ids(t: Running) -> list[str]:
    jobs = asyncio.run(owner_client(t).list_jobs())
    return sorted(j["submission_id"] or j["job_id"] or "?" for j in jobs)


def test_tunnel_says_how_it_is_protected(tunnel):
    out = tunnel.output
    assert "protected: only a browser that opened this URL gets in" in out
    assert "gets 403 and never reaches Ray" in out
    assert f"private socket {tunnel.socket_path} (a folder only you can enter)" in out


def test_private_socket_refuses_another_user(tunnel):
    folder = Path(tunnel.socket_path).parent
    st = folder.stat()
    assert stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() == 0
    assert stat.S_IMODE(st.st_mode) == 0o700, oct(st.st_mode)
    before = job_ids(tunnel)  # the owner's client reaches the head through it
    assert as_other_user("unix", tunnel.socket_path) == "EACCES"
    assert job_ids(tunnel) == before
    # The tunnel process listens on TCP only where the gate is (no plain loopback forward).
    ss = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True).stdout
    mine = [ln.split()[3] for ln in ss.splitlines() if f"pid={tunnel.proc.pid}," in ln]
    assert mine == [f"127.0.0.1:{tunnel.port}"], mine


def test_listener_refuses_everything_without_the_token(tunnel):
    before = job_ids(tunnel)
    sid = f"pwned-{uuid.uuid4().hex[:8]}"
    marker = Path(f"/tmp/{sid}")
    job = json.dumps({"submission_id": sid, "entrypoint": f"touch {marker}"})
    cookie = f"verl_tui_{tunnel.port}"
    attempts = [
        ("GET", "/", "{}", ""),
        ("GET", "/api/jobs/", "{}", ""),
        ("POST", "/api/jobs/", '{"Content-Type": "application/json"}', job),
        ("POST", "/api/jobs/?token=", '{"Content-Type": "application/json"}', job),
        ("POST", "/api/jobs/?token=guess", '{"Content-Type": "application/json"}', job),
        ("POST", "/api/jobs/", json.dumps({"Cookie": f"{cookie}=guess"}), job),
        ("POST", "/api/jobs/", json.dumps({"Cookie": f"verl_tui_1={tunnel.token[:-1]}x"}), job),
        ("GET", "/api/jobs/", json.dumps({"Cookie": f"other={tunnel.token}"}), ""),
    ]
    for method, target, headers, body in attempts:
        out = as_other_user("http", str(tunnel.port), method, target, headers, body)
        assert out.startswith("403 "), (method, target, headers, out)
        assert "set-cookie" not in out.lower()
    # Not HTTP, or a proxy-style absolute target: refused too, nothing passed on.
    for raw in (
        "SSH-2.0-x\r\n\r\n",
        f"POST http://127.0.0.1:{tunnel.port}/api/jobs/?token={tunnel.token[:4]} HTTP/1.1\r\n\r\n",
    ):
        assert as_other_user("raw", str(tunnel.port), raw).startswith("HTTP/1.1 400"), raw
    after = job_ids(tunnel)
    assert after == before and sid not in after
    assert not marker.exists()


def test_token_url_gives_a_cookie_and_the_dashboard_answers(tunnel):
    c = http.client.HTTPConnection("127.0.0.1", tunnel.port, timeout=20)
    c.request("GET", f"/api/jobs/?token={tunnel.token}&x=1")
    r = c.getresponse()
    r.read()
    assert r.status == 303 and r.getheader("Location") == "/api/jobs/?x=1"
    cookie = r.getheader("Set-Cookie") or ""
    assert cookie.startswith(f"verl_tui_{tunnel.port}={tunnel.token};")
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    jar = cookie.split(";")[0]
    c = http.client.HTTPConnection("127.0.0.1", tunnel.port, timeout=20)
    c.request("GET", "/api/jobs/", headers={"Cookie": f"a=b; {jar}"})
    r = c.getresponse()
    assert r.status == 200, r.read()
    assert isinstance(json.loads(r.read()), list)
    # The token is the key, whoever holds it: the other user with the URL gets the redirect.
    out = as_other_user("http", str(tunnel.port), "GET", f"/?token={tunnel.token}", "{}", "")
    assert out.startswith("303 ")


def test_websocket_through_the_listener(tunnel):
    """The dashboard's websockets pass the gate (the connection is spliced after the check):
    a real job's log tail over ws:// with the cookie."""
    import websockets

    sub = run_cli(
        [
            "submit",
            str(tunnel.hosts),
            "--json",
            "--",
            VENV_PY,
            "-c",
            "import time; print('tail-through-gate', flush=True); time.sleep(3)",
        ],
        env=tunnel.env,
        timeout=120,
    )
    assert sub.returncode == 0, sub.stderr
    sid = json.loads(sub.stdout)["submission_id"]
    cookie = f"verl_tui_{tunnel.port}={tunnel.token}"

    async def tail() -> str:
        got = ""
        uri = f"ws://127.0.0.1:{tunnel.port}/api/jobs/{sid}/logs/tail"
        async with websockets.connect(
            uri, additional_headers={"Cookie": cookie}, proxy=None, compression=None
        ) as ws:
            async for message in ws:
                got += message if isinstance(message, str) else message.decode()
                if "tail-through-gate" in got:
                    break
        return got

    assert "tail-through-gate" in asyncio.run(asyncio.wait_for(tail(), 90))

    async def refused() -> None:
        uri = f"ws://127.0.0.1:{tunnel.port}/api/jobs/{sid}/logs/tail"
        async with websockets.connect(uri, proxy=None):
            pass

    with pytest.raises(websockets.exceptions.InvalidStatus, match="403"):
        asyncio.run(refused())


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A folder directly under /tmp: a socket's path must fit AF_UNIX's 108 bytes, which
    pytest's tmp_path under a parallel worker (…/popen-gwN/<test name>0/) outgrows."""
    import shutil
    import tempfile

    d = Path(tempfile.mkdtemp(prefix="fwd", dir="/tmp"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_gate_bounds_the_request_head_and_forwards_nothing_refused(short_tmp):
    """The gate alone, in front of a recording Unix socket: a head over the cap or one never
    finished is dropped; a refused POST's body (sent with its head) never reaches upstream;
    an allowed request reaches it byte for byte."""
    from tui.cluster.dashboard_gate import HEAD_CAP, BrowserGate

    received: list[bytes] = []
    path = str(short_tmp / "up.sock")

    async def run() -> list[bytes]:
        async def upstream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            received.append(await reader.read(65536))
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
            await writer.drain()
            writer.close()

        server = await asyncio.start_unix_server(upstream, path)
        gate = BrowserGate(path, token="t0k3n")
        await gate.start()

        async def exchange(data: bytes) -> bytes:
            r, w = await asyncio.open_connection("127.0.0.1", gate.port)
            w.write(data)
            await w.drain()
            out = await asyncio.wait_for(r.read(), 15)
            w.close()
            return out

        answers = [
            await exchange(b"GET / HTTP/1.1\r\nX: " + b"a" * HEAD_CAP + b"\r\n\r\n"),
            await exchange(b'POST /api/jobs/ HTTP/1.1\r\nContent-Length: 9\r\n\r\n{"x": 1}\n'),
            await exchange(
                b"POST /api/jobs/?a=1 HTTP/1.1\r\nCookie: verl_tui_%d=t0k3n\r\n"
                b"Content-Length: 2\r\n\r\n{}" % gate.port
            ),
        ]
        gate.close()
        server.close()
        return [*answers, b"%d" % gate.port]

    too_big, refused, allowed, port = asyncio.run(run())
    assert too_big == b""  # dropped: no answer, nothing forwarded
    assert refused.startswith(b"HTTP/1.1 403 Forbidden")
    assert allowed.endswith(b"ok")
    assert received == [
        b"POST /api/jobs/?a=1 HTTP/1.1\r\nCookie: verl_tui_" + port + b"=t0k3n\r\n"
        b"Content-Length: 2\r\n\r\n{}"
    ]


def test_folders_left_by_killed_processes_are_swept(short_tmp):
    """A private folder whose process was killed (old, its socket refusing) is removed when the
    next forward is made; a live one, a young one, another user's and a folder holding anything
    but the socket are left."""
    import socket

    tmp_path = short_tmp

    from tui.transport.unix_forward import PREFIX, SOCKET_NAME, sweep_stale

    old = time.time() - 3600

    def folder(name: str, *, listening: bool = False, age: float = old) -> tuple[Path, object]:
        d = tmp_path / f"{PREFIX}{name}"
        d.mkdir(mode=0o700)
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(d / SOCKET_NAME))
        if listening:
            s.listen()
        else:
            s.close()
        os.utime(d, (age, age))
        return d, s

    stale, _ = folder("stale")
    live, server = folder("live", listening=True)
    young, _ = folder("young", age=time.time())
    foreign, _ = folder("foreign")
    os.chown(foreign, 65534, 65534)
    cluttered, _ = folder("cluttered")
    (cluttered / "notes.txt").write_text("not ours to delete")
    os.utime(cluttered, (old, old))
    try:
        assert sweep_stale(str(tmp_path)) == [str(stale)]
    finally:
        server.close()  # type: ignore[attr-defined]
    assert not stale.exists()
    assert live.exists() and young.exists() and foreign.exists()
    assert (cluttered / "notes.txt").exists() and not (cluttered / SOCKET_NAME).exists()
