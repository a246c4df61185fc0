"""Every local listener is private to its owner (issue 23, "The cluster opened to others").

Real namespace sshd hosts stand in for a worker node. On the host: a real debugpy listener
(what a paused post-mortem worker opens) and a recorder — a small DAP/pdb-ish server on the
host's loopback that writes down every connection and every byte it gets. In-process clients
(the DAP client, the pdb console, the checkpoint collector) reach them over the SSH connection
with no listener here; the loopback forward that VS Code needs lets only our uid through: a
second real OS user (nobody, via setpriv) is reset before one byte reaches the host."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from harness.raycluster import VENV_PY, hosts_yaml

from tui.ckpt.collect import copy_file
from tui.config.hosts import load_inventory
from tui.debug.dap import DapClient
from tui.debug.pdb_console import PdbConsole
from tui.transport.fleet import Fleet
from tui.transport.peer_forward import PeerCheckedForward

OTHER_USER = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
SYSTEM_PY = "/usr/bin/python3"  # nobody cannot run ours (under /root)
DAP_PORT, PDB_PORT, DEBUGPY_PORT = 47001, 47002, 47003

# On the host: argv LOG READY DAP_PORT PDB_PORT. Two ports: DAP framing (answers every request) and a pdb prompt.
# Each connection is logged when accepted and each chunk when it arrives, before any answer.
RECORDER = r"""
import json, socket, sys, threading
log_path, ready, dap_port, pdb_port = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
lock = threading.Lock()
def log(**kw):
    with lock, open(log_path, "a") as f:
        f.write(json.dumps(kw) + "\n")
def dap(conn, n):
    buf = b""
    while True:
        data = conn.recv(65536)
        if not data:
            return
        log(conn=n, got=len(data))
        buf += data
        while b"\r\n\r\n" in buf:
            head, rest = buf.split(b"\r\n\r\n", 1)
            size = int(head.split(b":")[1])
            if len(rest) < size:
                break
            req, buf = json.loads(rest[:size]), rest[size:]
            body = {"result": "recorder saw " + str(req.get("arguments", {}).get("expression"))}
            out = json.dumps({"seq": 1, "type": "response", "request_seq": req["seq"],
                              "success": True, "command": req["command"], "body": body}).encode()
            conn.sendall(b"Content-Length: %d\r\n\r\n" % len(out) + out)
def pdb(conn, n):
    conn.sendall(b"> /job/train.py(7)step()\r\n-> loss.backward()\r\n(Pdb) ")
    while True:
        data = conn.recv(65536)
        if not data:
            return
        log(conn=n, got=len(data))
        conn.sendall(b"you said " + data.strip() + b"\r\n(Pdb) ")
def serve(port, handler):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", port))
    s.listen()
    n = 0
    while True:
        conn, _ = s.accept()
        n += 1
        log(port=port, conn=n)
        threading.Thread(target=handler, args=(conn, n), daemon=True).start()
threading.Thread(target=serve, args=(dap_port, dap), daemon=True).start()
threading.Thread(target=serve, args=(pdb_port, pdb), daemon=True).start()
import time
time.sleep(0.2)
open(ready, "w").close()
time.sleep(3600)
"""

DEBUGPY = r"""
import sys, time, debugpy
debugpy.listen(("127.0.0.1", int(sys.argv[1])))
open(sys.argv[2], "w").close()
time.sleep(3600)
"""

# What the other user runs (stdlib only): connect, send a DAP evaluate, report what came back.
INTRUDER = r"""
import socket, sys
family, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
s = socket.socket(socket.AF_INET6 if family == "6" else socket.AF_INET)
s.settimeout(20)
try:
    s.connect((host, port))
    body = b'{"seq":1,"type":"request","command":"evaluate","arguments":{"expression":"1"}}'
    s.sendall(b"Content-Length: %d\r\n\r\n" % len(body) + body)
    got = s.recv(100)
    print("EOF" if not got else "ANSWER " + got.decode("latin-1"))
except ConnectionResetError:
    print("RESET")
except BrokenPipeError:
    print("RESET")
"""


IN_HOST = ["nsenter", "--net", "--uts", "--pid", "--mount"]


def start_in_host(cluster, name: str, code: str, *args: str, ready: Path) -> subprocess.Popen:
    host = cluster.host(name)
    proc = subprocess.Popen(
        [*IN_HOST, f"--target={host.sshd_pid}", "--", VENV_PY, "-c", code, *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 60
    while not ready.exists():
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        assert time.monotonic() < deadline, f"{code[:40]!r} did not start in {name}"
        time.sleep(0.1)
    return proc


class Recorder:
    def __init__(self, log: Path):
        self.log = log

    def entries(self) -> list[dict]:
        if not self.log.exists():
            return []
        return [json.loads(ln) for ln in self.log.read_text().splitlines()]

    def connections(self, port: int) -> int:
        return sum(1 for e in self.entries() if e.get("port") == port)


@pytest.fixture(scope="module")
def hosts(ns_hosts, tmp_path_factory):
    work = tmp_path_factory.mktemp("owner_only")
    cluster = ns_hosts(2, work / "hosts")
    procs = []
    try:
        procs.append(
            start_in_host(
                cluster,
                "node1",
                RECORDER,
                str(work / "rec.log"),
                str(work / "rec.ready"),
                str(DAP_PORT),
                str(PDB_PORT),
                ready=work / "rec.ready",
            )
        )
        procs.append(
            start_in_host(
                cluster,
                "node1",
                DEBUGPY,
                str(DEBUGPY_PORT),
                str(work / "dbg.ready"),
                ready=work / "dbg.ready",
            )
        )
        yield cluster, hosts_yaml(cluster, work / "hosts.yaml"), Recorder(work / "rec.log"), work
    finally:
        for p in procs:
            p.kill()
            p.wait(10)
        cluster.stop()


def our_listeners() -> list[str]:
    """What this test process listens on over TCP (ss: the listening socket's owner pid)."""
    ss = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True).stdout
    return [ln.split()[3] for ln in ss.splitlines() if f"pid={os.getpid()}," in ln]


async def as_other_user(family: str, host: str, port: int) -> str:
    """The intruder as uid nobody; asynchronous, so this loop keeps serving the forward."""
    proc = await asyncio.create_subprocess_exec(
        *OTHER_USER,
        SYSTEM_PY,
        "-c",
        INTRUDER,
        family,
        host,
        str(port),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd="/",
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    return out.decode().strip()


async def evaluate(dap: DapClient, expr: str) -> str:
    body = await dap.request("evaluate", {"expression": expr}, timeout=20)
    return str(body["result"])


async def test_in_process_clients_need_no_listener(hosts):
    _, path, rec, _ = hosts
    async with Fleet(load_inventory(path)) as fleet:
        transport = await fleet.ready("node1", 30)
        # A real debugpy: its adapter answers initialize with its capabilities.
        async with DapClient(*await transport.open_connection("127.0.0.1", DEBUGPY_PORT)) as dap:
            caps = await dap.request("initialize", {"adapterID": "verl-tui"}, timeout=30)
            assert caps.get("supportsConfigurationDoneRequest") is True, caps
            assert our_listeners() == []
        before = rec.connections(DAP_PORT)
        async with DapClient(*await transport.open_connection("127.0.0.1", DAP_PORT)) as dap:
            assert await evaluate(dap, "6*7") == "recorder saw 6*7"
            console = await PdbConsole.start(
                *await transport.open_connection("127.0.0.1", PDB_PORT), where="node1 pdb"
            )
            assert "-> loss.backward()" in console.banner
            assert (await console.send("p x")).strip() == "you said p x"
            assert our_listeners() == []
            await console.close()
        assert rec.connections(DAP_PORT) == before + 1
        # A port where nothing listens on the host: one line naming the host and the address.
        with pytest.raises(Exception) as err:
            await transport.open_connection("127.0.0.1", 1)
        assert str(err.value).startswith("node1: cannot connect to 127.0.0.1:1")
        assert "\n" not in str(err.value)


async def test_forward_lets_only_the_owner_through(hosts):
    _, path, rec, _ = hosts
    async with Fleet(load_inventory(path)) as fleet:
        transport = await fleet.ready("node1", 30)
        fwd = await transport.forward_local_port("127.0.0.1", DAP_PORT)
        try:
            assert isinstance(fwd, PeerCheckedForward)
            assert our_listeners() == [f"127.0.0.1:{fwd.local_port}"]
            start = rec.connections(DAP_PORT)
            dap = await DapClient.connect("127.0.0.1", fwd.local_port)
            async with dap:
                assert await evaluate(dap, "owner") == "recorder saw owner"
            assert rec.connections(DAP_PORT) == start + 1
            got_before = sum(e.get("got", 0) for e in rec.entries())

            # Another uid, over IPv4 and over an IPv6 socket to the v4-mapped address.
            assert await as_other_user("4", "127.0.0.1", fwd.local_port) in ("RESET", "EOF")
            assert await as_other_user("6", "::ffff:127.0.0.1", fwd.local_port) in (
                "RESET",
                "EOF",
            )
            assert fwd.refused == 2

            # The owner again, the IPv6 way too: each is recorded, and nothing of the intruder's.
            dap = await DapClient.connect("::ffff:127.0.0.1", fwd.local_port)
            async with dap:
                assert await evaluate(dap, "again") == "recorder saw again"
            assert rec.connections(DAP_PORT) == start + 2
            sent = [e for e in rec.entries() if "got" in e]
            assert sum(e["got"] for e in sent) > got_before  # the owner's second request only
            assert fwd.refused == 2
        finally:
            fwd.close()
        assert our_listeners() == []


def test_forward_refused_where_peers_cannot_be_checked(tmp_path):
    """With /proc/net/tcp unreadable (an empty folder mounted over /proc/self/net in a private
    mount namespace), no loopback forward is opened: one line says why."""
    code = (
        "import asyncio\n"
        "from tui.transport.peer_forward import PeerCheckedForward\n"
        "async def up():\n"
        "    raise AssertionError('never opened')\n"
        "try:\n"
        "    asyncio.run(PeerCheckedForward.open(up, what='the debugger forward'))\n"
        "except Exception as exc:\n"
        "    print(type(exc).__name__, exc)\n"
    )
    empty = tmp_path / "empty"
    empty.mkdir()
    # /proc/net is /proc/self/net; exec keeps the pid, so python sees the empty folder.
    script = 'mount --bind "$1" /proc/$$/net && exec "$2" -c "$3"'
    out = subprocess.run(
        [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            script,
            "sh",
            str(empty),
            VENV_PY,
            code,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).parents[1],
    )
    assert out.returncode == 0, out.stderr
    line = out.stdout.strip()
    assert line.startswith("TransportError the debugger forward is not opened:"), line
    assert line.endswith("(/proc/net/tcp: No such file or directory)"), line


async def test_ckpt_copy_relays_with_no_listener(hosts):
    _, path, _, work = hosts
    src = work / "disk1" / "global_step_3" / "actor" / "model_world_size_2_rank_1.pt"
    dst = work / "disk2" / "global_step_3" / "actor" / "model_world_size_2_rank_1.pt"
    src.parent.mkdir(parents=True)
    dst.parent.mkdir(parents=True)
    data = os.urandom(3 << 20)
    src.write_bytes(data)
    seen: list[list[str]] = []

    def progress(done: int, total: int) -> None:
        if not seen:  # mid-copy: both helpers are up and bytes are flowing
            seen.append(our_listeners())

    async with Fleet(load_inventory(path)) as fleet:
        size, sha, result = await copy_file(
            fleet, "node1", str(src), "node2", str(dst), on_bytes=progress
        )
    assert (size, result) == (len(data), "ok")
    assert sha == hashlib.sha256(data).hexdigest() == hashlib.sha256(dst.read_bytes()).hexdigest()
    assert seen == [[]]
