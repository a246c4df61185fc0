"""A job, built as data: the entrypoint as an argv (the hosts' interpreter, quoted on the way
out), the merged environment, metadata; submitted through the Jobs API over the tunnel, or
printed as the exact equivalent `ray job submit` command."""

from __future__ import annotations

import hashlib
import json
import posixpath
import secrets
import shlex
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tui import __version__
from tui.cluster.dashboard import DashboardClient, api_path, check_job_id
from tui.config.hosts import Inventory
from tui.jobs.profiles import DEFAULT_ENTRYPOINT, verl_command
from tui.jobs.secrets import MASK, masked, secret_names
from tui.jobs.workdir import package
from tui.shellcmd import copy_line, quote_word

if TYPE_CHECKING:
    from tui.transport.fleet import Fleet

# A raw command's first word that means "the hosts' interpreter": rewritten to hosts.yaml's
# absolute `python:` (the hosts' start-up files may put another python first on PATH).
PYTHON_WORDS = ("python", "python3")


def with_interpreter_path(env: Mapping[str, str], python: str | None) -> dict[str, str]:
    """`env` with the interpreter's directory first on the job's PATH. Ray (2.60,
    ray._private.utils.update_envs) expands `${PATH}` in runtime_env env_vars against the
    worker's own environment, so the rest of the hosts' PATH is kept. A PATH the user set
    explicitly wins; a bare interpreter name has no directory to add."""
    out = dict(env)
    if python and "/" in python and "PATH" not in out:
        out["PATH"] = f"{posixpath.dirname(python)}:${{PATH}}"
    return out


def interpreter_argv(command: Sequence[str], python: str | None) -> list[str]:
    """`python ...`/`python3 ...` → the hosts' interpreter; any other command unchanged."""
    argv = list(command)
    if python and argv and argv[0] in PYTHON_WORDS:
        argv[0] = python
    return argv


@dataclass
class Submission:
    submission_id: str
    entrypoint_argv: list[str]
    env_vars: dict[str, str] = field(default_factory=dict)
    working_dir: str | None = None  # a local directory, uploaded at submit time
    excludes: list[str] = field(default_factory=list)
    metadata: dict[str, str] = field(default_factory=dict)
    profile: str | None = None
    overrides: list[str] = field(default_factory=list)
    config_hash: str | None = None
    # Secret handling: names hosts.yaml adds (secret_env), and where each env value came
    # from ("env": command line / environment, "profile", "hosts") for the history's refs.
    secret_extra: tuple[str, ...] = ()
    env_sources: dict[str, str] = field(default_factory=dict)
    # The interpreter the entrypoint names; a bare name (hosts.yaml `python: python` with an
    # env_setup) is resolved on the head at submit time (resolved_interpreter).
    python: str | None = None

    @property
    def entrypoint(self) -> str:
        # One shell-quoted line: Ray runs the entrypoint through a shell, so every word is
        # quoted here and no value can become code.
        return shlex.join(self.entrypoint_argv)

    @property
    def secrets(self) -> list[str]:
        return secret_names(self.env_vars, self.secret_extra)

    def runtime_env(
        self, working_dir_uri: str | None = None, *, mask: bool = False
    ) -> dict[str, Any]:
        """What Ray gets (values in clear: the job needs them), or with `mask` what may be
        shown or written anywhere else."""
        env: dict[str, Any] = {}
        if self.env_vars:
            env["env_vars"] = (
                masked(self.env_vars, self.secret_extra) if mask else dict(self.env_vars)
            )
        wd = working_dir_uri or self.working_dir
        if wd:
            env["working_dir"] = wd
            if self.excludes and not working_dir_uri:
                env["excludes"] = list(self.excludes)
        return env


def readable_id(stem: str) -> str:
    safe = "".join(c if c.isalnum() or c in "-_" else "-" for c in stem)[:40].strip("-")
    return f"{safe or 'job'}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"


def config_hash(config: Mapping[str, Any] | Sequence[str]) -> str:
    blob = json.dumps(config, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def env_sources(
    inv: Inventory,
    profile_env: Mapping[str, Any] | None = None,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Where each variable of merged_env's result came from (the last one that set it)."""
    out = {k: "hosts" for k in inv.ray.env}
    out.update({k: "profile" for k in profile_env or {}})
    out.update({k: "env" for k in extra or {}})
    return out


def merged_env(
    inv: Inventory,
    profile_env: Mapping[str, str] | None = None,
    *,
    post_mortem: bool = False,
    legacy_debug: bool = False,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """hosts.yaml ray.env < profile env < command line < debugger toggles."""
    env = dict(inv.ray.env)
    env.update({k: str(v) for k, v in (profile_env or {}).items()})
    env.update(extra or {})
    if post_mortem:
        env["RAY_DEBUG_POST_MORTEM"] = "1"
    if legacy_debug:
        env["RAY_DEBUG"] = "legacy"
    return env


def verl_submission(
    inv: Inventory,
    *,
    name: str,
    overrides: list[str],
    python: str | None = None,
    entrypoint: str = DEFAULT_ENTRYPOINT,
    env: Mapping[str, str] | None = None,
    working_dir: str | None = None,
    excludes: Sequence[str] = (),
    composed: Mapping[str, Any] | None = None,
    submission_id: str | None = None,
    print_config: bool = False,
    env_sources: Mapping[str, str] | None = None,
) -> Submission:
    py = python or inv.head.python  # absolute: `python` on PATH may not be the hosts' one
    digest = config_hash(composed if composed is not None else overrides)
    sid = check_job_id(submission_id, "--submission-id") if submission_id else readable_id(name)
    # --cfg job: the cluster's own verl composes and prints the config, then exits (no GPU).
    flags = ["--cfg", "job"] if print_config else []
    # `entrypoint` (the profile's verl module) is checked again here: ValueError, never a word
    # that is not a module name.
    return Submission(
        submission_id=sid,
        entrypoint_argv=[*verl_command(py, entrypoint), *flags, *overrides],
        env_vars=with_interpreter_path(env or {}, py),
        working_dir=working_dir,
        excludes=list(excludes),
        metadata={"verl_tui": __version__, "profile": name, "config_hash": digest},
        profile=name,
        overrides=list(overrides),
        config_hash=digest,
        secret_extra=tuple(inv.secret_env),
        env_sources=dict(env_sources or {}),
        python=py,
    )


def raw_submission(
    command: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    working_dir: str | None = None,
    excludes: Sequence[str] = (),
    submission_id: str | None = None,
    secret_extra: Sequence[str] = (),
    env_sources: Mapping[str, str] | None = None,
    python: str | None = None,
) -> Submission:
    """A command as given, except that a leading `python`/`python3` is `python` (the hosts'
    interpreter) and the interpreter's directory comes first on the job's PATH."""
    if not command:
        raise ValueError("no command after --")
    sid = (
        check_job_id(submission_id, "--submission-id")
        if submission_id
        else readable_id(Path(command[0]).name)
    )
    return Submission(
        submission_id=sid,
        entrypoint_argv=interpreter_argv(command, python),
        env_vars=with_interpreter_path(env or {}, python),
        working_dir=working_dir,
        excludes=list(excludes),
        metadata={"verl_tui": __version__},
        secret_extra=tuple(secret_extra),
        env_sources=dict(env_sources or {}),
        python=python,
    )


async def resolved_interpreter(fleet: Fleet, sub: Submission) -> Submission:
    """`sub` with a bare interpreter name replaced by its absolute path on the head (after the
    head's env_setup, inside its container), in the entrypoint and first on the job's PATH, as
    an absolute `python:` is at build time. TransportError when it cannot be resolved."""
    bare = sub.python
    if not bare or "/" in bare:
        return sub
    from tui.cluster.probe import resolve_python

    path = await resolve_python(fleet, fleet.inventory.head)
    argv = list(sub.entrypoint_argv)
    if argv and argv[0] == bare:
        argv[0] = path
    return replace(
        sub,
        entrypoint_argv=argv,
        env_vars=with_interpreter_path(sub.env_vars, path),
        python=path,
    )


def shell_command(sub: Submission, address: str) -> str:
    """The `ray job submit` equivalent, every word quoted; secret values masked (a comment
    line names them: put their values in before running it)."""
    options = [f"--address={address}", f"--submission-id={sub.submission_id}"]
    env = sub.runtime_env(mask=True)
    if env:
        options.append(f"--runtime-env-json={json.dumps(env, sort_keys=True)}")
    if sub.metadata:
        options.append(f"--metadata-json={json.dumps(sub.metadata, sort_keys=True)}")
    note = f"# secret values shown as {MASK}: {', '.join(sub.secrets)}\n" if sub.secrets else ""
    return (
        note
        + "ray job submit \\\n    "
        + " \\\n    ".join(quote_word(o) for o in options)
        + " \\\n    -- "
        + copy_line(sub.entrypoint_argv)  # one level of quoting: key='value' stays readable
    )


async def submit(client: DashboardClient, sub: Submission) -> str:
    """Upload the working_dir if any (once per content hash), then POST the job."""
    uri = None
    if sub.working_dir:
        pkg = package(Path(sub.working_dir), sub.excludes)
        path = api_path("api", "packages", "gcs", pkg.name)
        if not await client.exists(path):
            await client.put_bytes(path, pkg.data)
        uri = pkg.uri
    body: dict[str, Any] = {
        "entrypoint": sub.entrypoint,
        "submission_id": sub.submission_id,
        "metadata": sub.metadata,
    }
    env = sub.runtime_env(uri)
    if env:
        body["runtime_env"] = env
    check_job_id(sub.submission_id, "submission id")
    return await client.submit_job(body)
