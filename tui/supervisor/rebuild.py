"""A recorded job as something to submit again: a profile job as a JobSpec (its profile file
and the exact overrides it ran with, resume keys replaced) so it is validated again against the
live cluster; a raw command job as the same Submission. Secrets come back from this process's
environment (or the profile / hosts.yaml they came from), as `submit --resubmit` does."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

from tui import __version__
from tui.config.hosts import Inventory
from tui.config.yamlfile import ConfigError
from tui.errors import VerlTuiError
from tui.jobs.history import JobRecord
from tui.jobs.pipeline import JobSpec
from tui.jobs.profiles import load_profile, override_key
from tui.jobs.secrets import MissingSecret, resolve
from tui.jobs.submit import Submission

RESUME_KEYS = ("trainer.resume_mode", "trainer.resume_from_path")
_RETRY_SUFFIX = re.compile(r"-retry\d+$")


class NotRebuildable(VerlTuiError, title="cannot retry"):
    """The record cannot be submitted again (one line: why)."""


def retry_id(rec: JobRecord, attempt: int) -> str:
    """The retry's submission id, fixed by the chain and the attempt (`<first>-retry<n>`): a
    supervisor that crashed and decides again picks the same id, which Ray accepts once."""
    base = _RETRY_SUFFIX.sub("", rec.submission_id)[:180]
    return f"{base}-retry{attempt - 1}"


def _env(inv: Inventory, rec: JobRecord, profile_env: dict[str, Any]) -> dict[str, str]:
    rt = rec.runtime_env if isinstance(rec.runtime_env, dict) else {}
    recorded = rt.get("env_vars") if isinstance(rt.get("env_vars"), dict) else {}
    fallback = {**inv.ray.env, **{k: str(v) for k, v in profile_env.items()}}
    try:
        return resolve(recorded or {}, None, fallback)
    except MissingSecret as exc:
        names = ", ".join(f"${n}" for n in exc.names)
        raise NotRebuildable(f"secret {names} is not set in the supervisor's environment") from None


def _workdir(rec: JobRecord) -> tuple[str | None, list[str]]:
    rt = rec.runtime_env if isinstance(rec.runtime_env, dict) else {}
    wd = rt.get("working_dir")
    if wd is not None and not (isinstance(wd, str) and Path(wd).is_dir()):
        raise NotRebuildable(f"its working_dir {wd!r} is not a directory here")
    return wd, [str(x) for x in rt.get("excludes") or []]


def profile_spec(
    inv: Inventory, rec: JobRecord, new_id: str, resume: list[str]
) -> tuple[JobSpec, str]:
    """(JobSpec, profile_path) of a profile job, resuming with `resume` overrides."""
    if not rec.profile_path:
        raise NotRebuildable("no profile file recorded")
    try:
        profile = load_profile(Path(rec.profile_path))
    except (ConfigError, OSError) as exc:
        raise NotRebuildable(f"its profile no longer loads: {exc}") from None
    sets = [o for o in rec.overrides if override_key(o) not in RESUME_KEYS]
    # The profile's own resume keys go too: the retry resumes from the checkpoint found now.
    profile = profile.model_copy(
        update={
            "overrides": {
                k: v for k, v in profile.overrides.items() if k.lstrip("+") not in RESUME_KEYS
            }
        }
    )
    env = _env(inv, rec, dict(profile.runtime_env.env_vars))
    wd, excludes = _workdir(rec)
    rt = rec.runtime_env if isinstance(rec.runtime_env, dict) else {}
    spec = JobSpec(
        profile,
        sets=[*sets, *resume],
        env=env,
        working_dir=wd,
        # The recorded excludes already hold the profile's: keep only what it adds.
        excludes=[e for e in excludes if e not in profile.runtime_env.excludes],
        submission_id=new_id,
    )
    if rt.get("env_vars", {}).get("RAY_DEBUG_POST_MORTEM") == "1":
        spec.post_mortem = True
    return spec, rec.profile_path


def raw_submission_of(inv: Inventory, rec: JobRecord, new_id: str) -> Submission:
    """A raw command job as it ran (no resume: the command knows its own checkpoints)."""
    try:
        argv = shlex.split(rec.entrypoint)
    except ValueError:
        raise NotRebuildable("its recorded entrypoint cannot be read") from None
    env = _env(inv, rec, {})
    wd, excludes = _workdir(rec)
    rt = rec.runtime_env if isinstance(rec.runtime_env, dict) else {}
    recorded = rt.get("env_vars") if isinstance(rt.get("env_vars"), dict) else {}
    sources = {
        r["name"]: r["from"]
        for r in (recorded or {}).values()
        if isinstance(r, dict) and isinstance(r.get("name"), str)
    }
    return Submission(
        submission_id=new_id,
        entrypoint_argv=argv,
        env_vars=env,
        working_dir=wd,
        excludes=excludes,
        metadata={"verl_tui": __version__, "retry_of": rec.submission_id},
        profile=rec.profile,
        overrides=list(rec.overrides),
        config_hash=rec.config_hash,
        secret_extra=tuple(inv.secret_env),
        env_sources={k: sources.get(k, "env") for k in env},
    )
