"""The one submission pipeline: a profile (+ the form's or the command line's changes) checked
against the cluster and turned into the Submission that is sent. The submission flow
(tui/jobs/flow.py: the form, `verl-tui submit`, `sweep`, the queue, the supervisor), the form's
check as you type and `verl-tui profile check` all call `prepare_submission`, so what is
validated is exactly what is submitted, whichever way it was asked for.

`prepare_submission` composes verl's config (blocking: call it in a thread from the UI loop).
The cluster's resources come from `live_resources` (Ray's alive nodes), or, while Ray is not
running, from `planned_resources` (hosts.yaml's GPUs).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tui.cluster.ray_cluster import ClusterStatus, RayCluster
from tui.config.hosts import Inventory
from tui.jobs.profiles import Profile
from tui.jobs.rules import ClusterResources, NodeResources, is_truthy
from tui.jobs.submit import Submission, env_sources, merged_env, verl_submission
from tui.jobs.validate import Report, check_profile

# A host whose CPUs Ray has not counted yet (Ray not running): large enough that the
# CPUs-per-GPU rule does not fire on a guess; Ray's own count replaces it once it is up.
CPUS_NOT_COUNTED = 1_000_000.0


@dataclass
class JobSpec:
    """What the user asked for: a profile and the changes made on top of it."""

    profile: Profile
    sets: Sequence[str] = ()  # Hydra `key=value` overrides (the command line's --set)
    env: Mapping[str, str] = field(default_factory=dict)  # --env / the form's secrets
    working_dir: str | None = None  # replaces the profile's runtime_env.working_dir
    excludes: Sequence[str] = ()  # added to the profile's
    post_mortem: bool | None = None  # None: the profile's RAY_DEBUG_POST_MORTEM
    legacy_debug: bool | None = None  # None: the profile's RAY_DEBUG=legacy
    print_config: bool = False
    submission_id: str | None = None

    @property
    def wants_post_mortem(self) -> bool:
        if self.post_mortem is not None:
            return self.post_mortem
        return is_truthy(self.profile.runtime_env.env_vars.get("RAY_DEBUG_POST_MORTEM"))

    @property
    def wants_legacy_debug(self) -> bool:
        if self.legacy_debug is not None:
            return self.legacy_debug
        return self.profile.runtime_env.env_vars.get("RAY_DEBUG") == "legacy"

    @property
    def job_working_dir(self) -> str | None:
        wd = self.working_dir or self.profile.runtime_env.working_dir
        return str(Path(wd).expanduser()) if wd else None

    @property
    def job_excludes(self) -> list[str]:
        return [*self.profile.runtime_env.excludes, *self.excludes]


def debug_toggles(profile: Profile) -> tuple[bool, bool]:
    """(post_mortem, legacy_debug) as the profile's env sets them: the form's initial switches."""
    spec = JobSpec(profile)
    return spec.wants_post_mortem, spec.wants_legacy_debug


def resources_from_status(status: ClusterStatus) -> ClusterResources:
    """GPUs and CPUs as Ray counts them, alive nodes only."""
    return ClusterResources(
        nodes=[NodeResources(n.host or n.node_ip, n.gpus, n.cpus) for n in status.nodes if n.alive]
    )


async def live_resources(
    cluster: RayCluster, *, want_debugpy: bool = False, status: ClusterStatus | None = None
) -> ClusterResources:
    """Ray's alive nodes and, for post-mortem debugging, the hosts without debugpy (a probe of
    every host). `status`: one just read (no second round trip). DashboardError /
    TransportError when Ray cannot be reached."""
    from tui.cluster.probe import probe_all

    if want_debugpy:
        st, facts = await asyncio.gather(
            cluster.status() if status is None else _given(status),
            probe_all(cluster.fleet, cluster.inv),
        )
    else:
        st, facts = (status or await cluster.status()), {}
    resources = resources_from_status(st)
    resources.hosts_without_debugpy = [
        h for h, f in facts.items() if f.ok and not f.debugpy_version
    ]
    return resources


async def _given(status: ClusterStatus) -> ClusterStatus:
    return status


def planned_resources(
    inv: Inventory, counted: Mapping[str, tuple[int, int | None]] | None = None
) -> ClusterResources | None:
    """The cluster as hosts.yaml plans it, for checking while Ray is not running: each host's
    num_gpus, else the GPUs its telemetry agent counted (`counted`: host → (GPUs, CPUs));
    None when a host's GPUs are unknown (the shape would be a guess)."""
    nodes = []
    for h in inv.hosts:
        gpus, ncpu = (counted or {}).get(h.name, (None, None))
        if h.num_gpus is not None:
            gpus = h.num_gpus
        if gpus is None:
            return None
        cpus = inv.ray.num_cpus or ncpu
        nodes.append(NodeResources(h.name, float(gpus), float(cpus) if cpus else CPUS_NOT_COUNTED))
    return ClusterResources(nodes=nodes) if nodes else None


def working_dir_size(spec: JobSpec) -> tuple[int | None, list[tuple[Path, str]]]:
    """(bytes uploaded, entries left out with why) of the job's working_dir."""
    from tui.jobs.workdir import scan

    wd = spec.job_working_dir
    if not wd:
        return None, []
    found = scan(Path(wd), spec.job_excludes)
    return found.total, list(found.skipped)


def prepare_submission(
    inv: Inventory | None,
    spec: JobSpec,
    cluster: ClusterResources | None,
    *,
    working_dir_bytes: int | None = None,
) -> tuple[Submission | None, Report]:
    """Check `spec` (verl's config and rules, and the runtime rules against `cluster` when
    given) and build its Submission; (None, report) when the report has errors, or without a
    hosts file (`inv` None: `profile check PROFILE` alone). Blocking.
    ConfigError for a malformed --set; SchemaError when verl's config cannot be read."""
    report = check_profile(
        spec.profile,
        sets=spec.sets,
        cluster=cluster,
        working_dir_bytes=working_dir_bytes,
        post_mortem=spec.wants_post_mortem,
    )
    if not report.ok or inv is None:
        return None, report
    profile, rt = spec.profile, spec.profile.runtime_env
    env = merged_env(
        inv,
        rt.env_vars,
        post_mortem=spec.wants_post_mortem,
        legacy_debug=spec.wants_legacy_debug,
        extra=spec.env,
    )
    sub = verl_submission(
        inv,
        name=profile.name,
        overrides=report.overrides,
        python=profile.python,
        entrypoint=profile.entrypoint,
        env=env,
        working_dir=spec.job_working_dir,
        excludes=spec.job_excludes,
        composed=report.config,
        submission_id=spec.submission_id,
        print_config=spec.print_config,
        env_sources=env_sources(inv, rt.env_vars, spec.env),
    )
    return sub, report


def submission_json(sub: Submission) -> dict[str, object]:
    """What may be shown of a submission (secret values masked): the CLI's --json, the
    check's --json; one shape so they compare."""
    return {
        "submission_id": sub.submission_id,
        "entrypoint": sub.entrypoint,
        "runtime_env": sub.runtime_env(mask=True),
        "metadata": sub.metadata,
        "overrides": list(sub.overrides),
        "secrets": sub.secrets,
    }
