"""Two real OS users who each log in to the namespace hosts AS THEMSELVES (not root): `useradd`
with their own homes, their own SSH keys in their own ~/.ssh/authorized_keys (the harness's
sshd reads each account's file too), their own hosts.yaml (`ssh: user:` their name, `python:`
an interpreter they may run, their own `notify:`) and state folders; `verl-tui` runs as them
(setuid in the child). Built on tests/team_users.py (interpreter_for, TeamUser.cli)."""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

from team_users import TeamUser, interpreter_for

NAMES = ("verltui-c", "verltui-d")  # not team_users.py's verltui-b: its jobs are its own


def _login_account(name: str) -> pwd.struct_passwd:
    """`name`, made once per machine; its password field `*` (no password, not locked: sshd
    without PAM refuses a locked account's key login)."""
    try:
        pw = pwd.getpwnam(name)
    except KeyError:
        subprocess.run(["useradd", "-m", "-s", "/bin/sh", name], check=True, capture_output=True)
        pw = pwd.getpwnam(name)
    subprocess.run(["usermod", "-p", "*", name], check=True, capture_output=True)
    return pw


@contextlib.contextmanager
def login_user(cluster, root_hosts: Path, name: str, notify: str = "") -> Iterator[TeamUser]:
    """`name` logged in to `cluster`'s hosts as itself, with a hosts.yaml like `root_hosts`
    but its user, key, known_hosts, Python and `notify` (YAML text for a `notify:` section)."""
    pw = _login_account(name)
    home = Path(pw.pw_dir)
    work = home / "team-accounts"
    ssh = home / ".ssh"
    shutil.rmtree(work, ignore_errors=True)
    (work / "state").mkdir(parents=True)
    ssh.mkdir(mode=0o700, exist_ok=True)
    key = work / "id_ed25519"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)],
        check=True,
        capture_output=True,
    )
    (ssh / "authorized_keys").write_text(key.with_suffix(".pub").read_text())
    shutil.copyfile(cluster.known_hosts, work / "known_hosts")
    python = interpreter_for(pw.pw_uid, pw.pw_gid)
    text = root_hosts.read_text()
    text = re.sub(r"(?m)^  user: .*$", f"  user: {name}", text)
    text = re.sub(r"(?m)^  identity_file: .*$", f"  identity_file: {key}", text)
    text = re.sub(r"(?m)^  known_hosts: .*$", f"  known_hosts: {work / 'known_hosts'}", text)
    text = re.sub(r"(?m)^python: .*$", f"python: {python}", text)
    hosts = work / "hosts.yaml"
    hosts.write_text(text + notify)
    for path in [work, *work.rglob("*"), ssh, *ssh.rglob("*")]:
        os.chown(path, pw.pw_uid, pw.pw_gid)
    try:
        yield TeamUser(name, pw.pw_uid, pw.pw_gid, work, hosts, python)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        (ssh / "authorized_keys").unlink(missing_ok=True)
