"""A second real OS user for the team tests: `useradd` with its own home, its own SSH key in the
namespace hosts' authorized_keys (removed again after), its own hosts.yaml and state folder,
and `verl-tui` run as that user (setuid in the child: a real other uid, login name and home,
so another owner `user@host`). On the hosts it logs in to the same account as the first user."""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import shutil
import socket
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NAME = "verltui-b"
SITE = sysconfig.get_paths()["purelib"]  # this venv's packages, readable by every user


def interpreter_for(uid: int, gid: int) -> str:
    """A Python of this venv's version that `uid` may run: the venv's own, else the system's
    (a pyenv under root's 0700 home is out of another user's reach), with the venv's packages
    on PYTHONPATH. Fails when there is none: the test needs a real second user."""
    want = f"{sys.version_info.major}.{sys.version_info.minor}"
    for candidate in (sys.executable, f"/usr/bin/python{want}", "/usr/bin/python3"):
        try:
            res = subprocess.run(
                [candidate, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                user=uid,
                group=gid,
                extra_groups=[],
                capture_output=True,
                text=True,
                check=False,
            )
        except OSError:  # not there, or not this user's to run
            continue
        if res.returncode == 0 and res.stdout.strip() == want:
            return candidate
    raise AssertionError(f"no Python {want} that uid {uid} can run (venv: {sys.executable})")


@dataclass
class TeamUser:
    name: str
    uid: int
    gid: int
    home: Path
    hosts: Path  # this user's hosts.yaml for the shared cluster

    @property
    def owner(self) -> str:
        return f"{self.name}@{socket.gethostname()}"

    python: str = sys.executable  # an interpreter this user may run (see interpreter_for)

    def cli(self, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
        env = {
            "PYTHONPATH": os.pathsep.join((str(ROOT), SITE)),
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.home),
            "USER": self.name,
            "LOGNAME": self.name,
            "XDG_STATE_HOME": str(self.home / "state"),
            "PYTHONDONTWRITEBYTECODE": "1",
            "VERL_TUI_SUPERVISE": "0",
        }
        return subprocess.run(
            [self.python, "-m", "tui.cli", *args],
            env=env,
            cwd=ROOT,
            user=self.uid,
            group=self.gid,
            extra_groups=[],
            capture_output=True,
            text=True,
            timeout=timeout,
        )


def _account(name: str) -> pwd.struct_passwd:
    with contextlib.suppress(KeyError):
        return pwd.getpwnam(name)
    subprocess.run(["useradd", "-m", "-s", "/bin/sh", name], check=True, capture_output=True)
    return pwd.getpwnam(name)


@contextlib.contextmanager
def second_user(cluster, root_hosts: Path, name: str = NAME) -> Iterator[TeamUser]:
    """`name` (made once per machine), logged in to `cluster`'s hosts as itself with its own
    key, with a hosts.yaml like `root_hosts` but its user, key and known_hosts."""
    pw = _account(name)
    home = Path(pw.pw_dir)
    work = home / "team-test"
    shutil.rmtree(work, ignore_errors=True)
    (work / "state").mkdir(parents=True)
    key = work / "id_ed25519"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)],
        check=True,
        capture_output=True,
    )
    shutil.copyfile(cluster.known_hosts, work / "known_hosts")
    text = root_hosts.read_text()
    python = interpreter_for(pw.pw_uid, pw.pw_gid)
    # It logs in to the hosts as their one account (root): sshd reads the harness's shared
    # authorized_keys file as the login user, and only root may read it there.
    text = re.sub(r"(?m)^  identity_file: .*$", f"  identity_file: {key}", text)
    text = re.sub(r"(?m)^  known_hosts: .*$", f"  known_hosts: {work / 'known_hosts'}", text)
    hosts = work / "hosts.yaml"
    hosts.write_text(text)
    for path in [work, *work.rglob("*")]:
        os.chown(path, pw.pw_uid, pw.pw_gid)
    pub = key.with_suffix(".pub").read_text()
    before = cluster.authorized_keys.read_text()
    cluster.authorized_keys.write_text(before + pub)
    user = TeamUser(name, pw.pw_uid, pw.pw_gid, work, hosts, python)
    try:
        yield user
    finally:
        cluster.authorized_keys.write_text(before)
        shutil.rmtree(work, ignore_errors=True)
