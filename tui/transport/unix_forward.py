"""A forward only its owner can use: a Unix socket in a fresh folder of mode 0700.

A TCP listener on 127.0.0.1 is open to every user of the machine (a shared login node), and the
head's dashboard runs code for whoever reaches it. A Unix socket inside a folder that only our
uid may enter cannot be reached by another user (connect fails with EACCES), whatever the
socket's own mode. The folder is made fresh (mkdtemp: 0700, refused if the name exists) under
$XDG_RUNTIME_DIR when that is ours, else the temp folder; close() removes both.

The local transport's version (`LocalPathForward`) splices each connection to a local TCP port
itself; the SSH one (tui/transport/ssh.py) lets asyncssh listen on the path.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import stat
import tempfile
import time

from tui.transport.types import TransportError

SOCKET_NAME = "dashboard.sock"
MAX_SUN_PATH = 100  # sockaddr_un's sun_path holds 108 bytes on Linux, 104 on macOS
SPLICE_CHUNK = 1 << 16
PREFIX = "verl-tui-fwd-"
STALE_AFTER_S = 60.0  # a folder this old whose socket refuses connections is a dead process's


def _own_private_dir(path: str) -> bool:
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o077


class PrivateDir:
    """A fresh 0700 folder of ours holding one socket path; remove() takes both away."""

    def __init__(self) -> None:
        bases = [os.environ.get("XDG_RUNTIME_DIR") or "", tempfile.gettempdir(), "/tmp"]
        for base in bases:
            if not base or not os.path.isdir(base):
                continue
            # mkdtemp's name adds 8 characters to the prefix.
            if (
                len(os.fsencode(os.path.join(base, PREFIX + "12345678", SOCKET_NAME)))
                > MAX_SUN_PATH
            ):
                continue
            if base == bases[0] and not _own_private_dir(base):
                continue  # an XDG_RUNTIME_DIR that is not ours: not trusted
            sweep_stale(base)
            try:
                self.folder = tempfile.mkdtemp(prefix=PREFIX, dir=base)
            except OSError:
                continue
            if not _own_private_dir(self.folder):  # mkdtemp makes it 0700; a umask cannot widen
                self.remove()
                continue
            self.path = os.path.join(self.folder, SOCKET_NAME)
            return
        raise TransportError("no folder for a private socket (XDG_RUNTIME_DIR, TMPDIR, /tmp)")

    def remove(self) -> None:
        _remove(self.folder)


def _remove(folder: str) -> bool:
    """A private folder and its socket; a folder holding anything else stays (False)."""
    with contextlib.suppress(OSError):
        sock = os.path.join(folder, SOCKET_NAME)
        if stat.S_ISSOCK(os.lstat(sock).st_mode):
            os.unlink(sock)
    try:
        os.rmdir(folder)
    except OSError:
        return False
    return True


def sweep_stale(base: str) -> list[str]:
    """Remove the folders of ours under `base` that a killed process left: older than
    STALE_AFTER_S, and nothing listens on their socket. Returns what was removed."""
    removed: list[str] = []
    try:
        entries = [e.path for e in os.scandir(base) if e.name.startswith(PREFIX)]
    except OSError:
        return removed
    for folder in entries:
        if not _own_private_dir(folder):
            continue  # another user's, or not a folder we made
        try:
            if time.time() - os.lstat(folder).st_mtime < STALE_AFTER_S:
                continue  # maybe being set up right now
            with socket.socket(socket.AF_UNIX) as s:
                s.settimeout(1.0)
                s.connect(os.path.join(folder, SOCKET_NAME))
            continue  # it answers: alive
        except (ConnectionRefusedError, FileNotFoundError):
            pass
        except OSError:
            continue
        if _remove(folder):
            removed.append(folder)
    return removed


async def splice(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    up_reader: asyncio.StreamReader,
    up_writer: asyncio.StreamWriter,
) -> None:
    """Copy both ways until either side ends; then close both."""

    async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while data := await src.read(SPLICE_CHUNK):
                if dst.is_closing():  # the other side has gone: drain() would not say so
                    break
                dst.write(data)
                await dst.drain()
        with contextlib.suppress(OSError, RuntimeError):
            if dst.can_write_eof():
                dst.write_eof()

    try:
        await asyncio.gather(pump(reader, up_writer), pump(up_reader, writer))
    finally:
        for w in (writer, up_writer):
            w.close()
            with contextlib.suppress(Exception):
                await w.wait_closed()


class LocalPathForward:
    """The local transport's private forward: the Unix socket, spliced to 127.0.0.1:port here
    (the dashboard of a `localhost` head is already on this machine's loopback)."""

    def __init__(self, folder: PrivateDir, remote_host: str, remote_port: int):
        self._folder = folder
        self._remote = (remote_host, remote_port)
        self._server: asyncio.AbstractServer | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.path = folder.path

    @classmethod
    async def open(cls, remote_host: str, remote_port: int) -> LocalPathForward:
        fwd = cls(PrivateDir(), remote_host, remote_port)
        try:
            # A plain callback that starts its own task: a connection still open when the loop
            # ends is cancelled quietly (Python 3.11's stream callback reports a cancelled
            # handler task as an error).
            fwd._server = await asyncio.start_unix_server(fwd._accept, fwd.path)
        except OSError as exc:
            fwd._folder.remove()
            raise TransportError(f"cannot listen on {fwd.path}: {exc.strerror}") from None
        return fwd

    def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.ensure_future(self._connection(reader, writer))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self._remote)
        except OSError:
            writer.close()
            return
        await splice(reader, writer, up_reader, up_writer)

    def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in self._tasks:
            task.cancel()
        self._folder.remove()
