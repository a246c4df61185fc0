"""The local files an SSH connection needs, checked before connecting: identity file,
known_hosts, ssh config. A problem is a ConnectFailure that names the file and the cause, the
way OpenSSH would put it, instead of whatever asyncssh raises half-way through a connect
("Is a directory", "KeyImportError", a FileNotFoundError blamed on the wrong file).

Each distinct file is checked once, not once per host: results are cached by the file's stat
signature (device, inode, size, mtime, ctime, mode, owner), so a fixed file (chmod 600, a key
added to known_hosts) is seen at the next connect, and 128 hosts sharing one key cost one read.
"""

from __future__ import annotations

import logging
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncssh

from tui.config.hosts import SshOptions
from tui.config.yamlfile import ConfigError, read_bytes
from tui.shellcmd import copy_line
from tui.transport.types import HostState

log = logging.getLogger(__name__)

MAX_KEY_BYTES = 1 << 20  # OpenSSH's MAX_KEY_FILE_SIZE
MAX_KNOWN_HOSTS_BYTES = 64 << 20
DEFAULT_SSH_CONFIG = "~/.ssh/config"

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a device"),
    (stat.S_ISBLK, "a device"),
    (stat.S_ISSOCK, "a socket"),
)


class FileProblem(Exception):
    """What is wrong with one file: the host state it leads to and a one-line reason."""

    def __init__(self, state: HostState, reason: str) -> None:
        self.state = state
        self.reason = reason
        super().__init__(reason)


@dataclass(frozen=True)
class Checked:
    """What a connect may use from the files: the parsed known_hosts (None: insecure mode),
    and whether an encrypted identity file is to be left to the ssh-agent."""

    known_hosts: asyncssh.SSHKnownHosts | None
    ignore_encrypted: bool = False


_cache: dict[tuple[str, str], tuple[tuple[int, ...], Any]] = {}
_warned: set[tuple[str, tuple[int, ...]]] = set()


def _signature(st: os.stat_result) -> tuple[int, ...]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode, st.st_uid)


def _stat(path: Path, what: str, state: HostState) -> os.stat_result:
    """stat() a file that must be a regular file; FileProblem naming it otherwise."""
    try:
        st = path.stat()
    except (FileNotFoundError, NotADirectoryError):
        raise FileProblem(state, f"{what} not found: {path}") from None
    except OSError as exc:
        raise FileProblem(state, f"{what} {path} is not readable: {exc.strerror or exc}") from None
    if not stat.S_ISREG(st.st_mode):
        kind = next((name for test, name in _KINDS if test(st.st_mode)), "not a regular file")
        raise FileProblem(state, f"{what} {path} is {kind}, not a file")
    return st


def _read(path: Path, what: str, state: HostState, limit: int) -> bytes:
    try:
        return read_bytes(path, max_bytes=limit)
    except ConfigError as exc:
        raise FileProblem(state, f"{what} {path}: {exc.message}") from None


def _cached(kind: str, path: Path, st: os.stat_result, compute: Any) -> Any:
    """compute() once per (file, signature); a FileProblem is cached like a result."""
    key = (kind, str(path))
    sig = _signature(st)
    hit = _cache.get(key)
    if hit is not None and hit[0] == sig:
        result = hit[1]
    else:
        try:
            result = compute()
        except FileProblem as exc:
            result = exc
        _cache[key] = (sig, result)
    if isinstance(result, FileProblem):
        raise result
    return result


def _agent_available() -> bool:
    sock = os.environ.get("SSH_AUTH_SOCK", "")
    try:
        return bool(sock) and stat.S_ISSOCK(os.stat(os.path.expanduser(sock)).st_mode)
    except OSError:
        return False


# -- identity file -----------------------------------------------------------------------------


def _key_kind(path: Path) -> str:
    """'plain' or 'encrypted'; FileProblem when it is not a private key at all."""
    data = _read(path, "identity file", HostState.AUTH_FAILED, MAX_KEY_BYTES)
    try:
        asyncssh.import_private_key(data)
        return "plain"
    except asyncssh.KeyImportError as exc:
        if str(exc).startswith("Passphrase"):
            return "encrypted"
        hint = ""
        if data.lstrip().startswith((b"ssh-", b"ecdsa-", b"sk-")):
            hint = " (it holds a public key: name the file without .pub)"
        raise FileProblem(
            HostState.AUTH_FAILED, f"identity file {path} is not a private key{hint}: {exc}"
        ) from None


def check_identity(path: Path) -> bool:
    """Check an identity file like OpenSSH's ssh would; True when it is encrypted and an
    ssh-agent is there to hold it. FileProblem (auth failed) naming the file otherwise."""
    st = _stat(path, "identity file", HostState.AUTH_FAILED)
    # OpenSSH (sshkey_perm_ok in authfile.c): a key file owned by the user that group or others
    # may access is refused ("UNPROTECTED PRIVATE KEY FILE ... This private key will be
    # ignored"); a key owned by someone else is not checked. The same rule here.
    mode = stat.S_IMODE(st.st_mode)
    if st.st_uid == os.getuid() and mode & 0o077:
        raise FileProblem(
            HostState.AUTH_FAILED,
            f"unprotected private key file {path}: permissions {mode:04o} are too "
            f"open; OpenSSH ignores such a key ({copy_line(['chmod', '600', str(path)])})",
        )
    if mode & 0o077:
        key = (str(path), _signature(st))
        if key not in _warned:
            _warned.add(key)
            log.warning(
                "private key file %s: permissions %04o are open to others (it is "
                "owned by uid %d, so OpenSSH would use it too)",
                path,
                mode,
                st.st_uid,
            )
    kind = _cached("identity", path, st, lambda: _key_kind(path))
    if kind == "encrypted":
        if not _agent_available():
            raise FileProblem(
                HostState.AUTH_FAILED,
                f"identity file {path} is encrypted (passphrase-protected) and no "
                "ssh-agent is running (SSH_AUTH_SOCK): add it with ssh-add, or "
                "use a key without a passphrase",
            )
        return True
    return False


# -- known_hosts -------------------------------------------------------------------------------


def _parse_known_hosts(path: Path) -> asyncssh.SSHKnownHosts:
    data = _read(path, "known_hosts", HostState.HOST_KEY_UNKNOWN, MAX_KNOWN_HOSTS_BYTES)
    text = data.decode("utf-8", errors="replace")
    try:
        return asyncssh.import_known_hosts(text)
    except (ValueError, asyncssh.Error) as exc:
        line = next((i for i, ln in enumerate(text.splitlines(), 1) if _bad_entry(ln)), None)
        where = f"{path}:{line}" if line else str(path)
        raise FileProblem(
            HostState.HOST_KEY_UNKNOWN,
            f"known_hosts {where}: invalid entry ({str(exc).split(':')[0]})",
        ) from None


def _bad_entry(line: str) -> bool:
    try:
        asyncssh.import_known_hosts(line + "\n")
    except (ValueError, asyncssh.Error):
        return True
    return False


def known_hosts(path: Path) -> asyncssh.SSHKnownHosts:
    """The parsed known_hosts file; FileProblem (host key unknown) naming it when it is
    missing, not a file, unreadable or holds an invalid entry. Strict: a missing file is
    never read as "accept every key"."""
    try:
        st = _stat(path, "known_hosts file", HostState.HOST_KEY_UNKNOWN)
    except FileProblem as exc:
        if "not found" in exc.reason:
            raise FileProblem(
                exc.state,
                f"{exc.reason} (verify each host's key, then add it: "
                f"{copy_line(['ssh-keyscan', 'HOST'], append_to=str(path))})",
            ) from None
        raise
    return _cached("known_hosts", path, st, lambda: _parse_known_hosts(path))


# -- ssh config --------------------------------------------------------------------------------


def check_config(path: Path, *, required: bool) -> None:
    """An ssh config file named in hosts.yaml must exist; any one read must be a file (a FIFO
    would block asyncssh's read)."""
    if not required and not path.exists():
        return
    _stat(path, "ssh config file", HostState.UNREACHABLE)


# -- all of them -------------------------------------------------------------------------------


def expand(path: str) -> Path:
    return Path(os.path.expanduser(path))


def known_hosts_path(ssh: SshOptions) -> Path:
    return expand(ssh.known_hosts or "~/.ssh/known_hosts")


def check_files(ssh: SshOptions) -> Checked:
    """Every local file this connection reads, checked; FileProblem for the first problem."""
    if ssh.config:
        check_config(expand(ssh.config), required=True)
    elif ssh.config is None:
        check_config(expand(DEFAULT_SSH_CONFIG), required=False)
    agent_key = False
    if ssh.identity_file:
        agent_key = check_identity(expand(ssh.identity_file))
    kh = None if ssh.insecure_skip_host_key_check else known_hosts(known_hosts_path(ssh))
    return Checked(known_hosts=kh, ignore_encrypted=agent_key)


def clear_cache() -> None:
    _cache.clear()
    _warned.clear()
