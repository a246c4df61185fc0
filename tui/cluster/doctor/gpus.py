"""GPU checks: equal GPU counts per node (NVIDIA and AMD), the visible-devices rules, enough
CPUs for verl's bundles, and GPU health from NVML (the GPU agent run once per host)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence

from tui.cluster.agent_schema import parse_line
from tui.cluster.doctor.findings import (
    CPUS_PER_GPU,
    MAX_PARALLEL,
    Finding,
    Status,
    _f,
    _names,
    _pip,
)
from tui.cluster.gpu_health import judge_host
from tui.cluster.models import HostSample
from tui.cluster.probe import HostFacts
from tui.cluster.telemetry import agent_argv
from tui.config.hosts import Host, Inventory
from tui.sanitize import one_line
from tui.transport.fleet import Fleet
from tui.transport.types import TransportError

MAX_HEALTH_SHOWN = 3  # findings named in one host's row; `verl-tui gpus` lists them all

# --------------------------------------------------------------------------- resources


def effective_gpus(host: Host, facts: HostFacts) -> tuple[int | None, str]:
    """(GPUs Ray will see, where that number comes from)."""
    if host.num_gpus is not None:
        return host.num_gpus, "num_gpus in hosts.yaml"
    count = facts.gpu_count
    # Ray's AMD accelerator manager reads HIP_VISIBLE_DEVICES; CUDA_VISIBLE_DEVICES otherwise.
    var = (
        "HIP_VISIBLE_DEVICES"
        if facts.amd_gpu_count and facts.env.get("HIP_VISIBLE_DEVICES") is not None
        else "CUDA_VISIBLE_DEVICES"
    )
    visible = facts.env.get(var)
    if visible is not None:
        ids = [v for v in visible.split(",") if v.strip() and v.strip() != "NoDevFiles"]
        limited = len(ids) if count is None else min(count, len(ids))
        return limited, f"{var}={visible}"
    return count, facts.gpu_source or "NVML"


def _visible_findings(name: str, f: HostFacts) -> list[Finding]:
    """The HIP/ROCR/CUDA_VISIBLE_DEVICES rule (as tui.jobs.rules.check_runtime_env applies it
    to a job's env_vars) on what ``ray start`` and its workers inherit on this host."""
    env, out = f.env, []
    rocr, hip, cuda = (
        env.get(k) for k in ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")
    )
    if rocr and (hip or cuda):
        out.append(
            _f(
                "gpu-count",
                "fail",
                name,
                "ROCR_VISIBLE_DEVICES is set together with HIP/CUDA_VISIBLE_DEVICES: "
                "verl's workers refuse that",
                "keep only HIP_VISIBLE_DEVICES (ray.env or the host's environment)",
            )
        )
    elif rocr is not None and f.amd_gpu_count:
        out.append(
            _f(
                "gpu-count",
                "fail",
                name,
                f"ROCR_VISIBLE_DEVICES={rocr} without HIP_VISIBLE_DEVICES: Ray refuses "
                "to start on AMD GPUs",
                f"use HIP_VISIBLE_DEVICES={rocr} instead",
            )
        )
    if hip and cuda and hip != cuda:
        out.append(
            _f(
                "gpu-count",
                "fail",
                name,
                f"HIP_VISIBLE_DEVICES={hip} differs from CUDA_VISIBLE_DEVICES={cuda}: "
                "verl requires the same value",
                "set both to the same list, or only one",
            )
        )
    if f.amd_gpu_count and f.gpu_count and f.amd_gpu_count < f.gpu_count:
        out.append(
            _f(
                "gpu-count",
                "warn",
                name,
                f"NVIDIA and AMD GPUs on one host ({f.gpu_count - f.amd_gpu_count} + "
                f"{f.amd_gpu_count}): Ray has one GPU resource for both",
                "give Ray one vendor: num_gpus in hosts.yaml and CUDA_VISIBLE_DEVICES or "
                "HIP_VISIBLE_DEVICES in ray.env",
            )
        )
    return out


def _gpu_findings(inventory: Inventory, facts: Mapping[str, HostFacts]) -> list[Finding]:
    out = []
    counts: dict[str, int] = {}
    for name, f in facts.items():
        if not f.ok:
            continue
        out += _visible_findings(name, f)
        host = inventory.host(name)
        count, source = effective_gpus(host, f)
        if count is None:
            # pynvml there but no libnvidia-ml: a driver problem, not a missing package.
            no_driver = "not found" in (f.gpu_error or "").lower() and f.nvml_py_version
            fix = (
                "no NVIDIA driver library on this host: install the driver, or set the "
                "host's num_gpus: in hosts.yaml"
                if no_driver
                else f"{_pip(host.python, 'nvidia-ml-py')}, or set the host's num_gpus: "
                "in hosts.yaml"
            )
            out.append(_f("gpu-count", "warn", name, f"GPU count unknown: {f.gpu_error}", fix))
        elif count == 0 and host.num_gpus is None:
            out.append(
                _f(
                    "gpu-count",
                    "warn",
                    name,
                    f"no GPUs visible ({source})",
                    "check nvidia-smi (or amd-smi) there; CPU-only on purpose: set the "
                    "host's num_gpus: 0",
                )
            )
        elif count > 0:
            counts[name] = count
    if len(set(counts.values())) > 1:
        by_count: dict[int, list[str]] = {}
        for name, c in counts.items():
            by_count.setdefault(c, []).append(name)
        desc = "; ".join(f"{c} on {_names(ns)}" for c, ns in sorted(by_count.items()))
        low = min(by_count)
        out.append(
            _f(
                "gpu-count",
                "fail",
                None,
                f"GPU counts differ: {desc} (verl needs n_gpus_per_node on every node)",
                f"bring the missing GPUs back, or set num_gpus: {low} on the hosts with more",
            )
        )
    elif counts:
        n = next(iter(counts.values()))
        out.append(_f("gpu-count", "ok", None, f"{n} GPU(s) on each of {len(counts)} node(s)"))
    return out


def _cpu_findings(inventory: Inventory, facts: Mapping[str, HostFacts]) -> list[Finding]:
    out = []
    for name, f in facts.items():
        if not f.ok:
            continue
        gpus, _ = effective_gpus(inventory.host(name), f)
        if not gpus:
            continue
        cpus: int | None
        if inventory.ray.num_cpus is not None:
            cpus, source = inventory.ray.num_cpus, "ray.num_cpus"
        else:
            cpus, source = f.ray_cpu_count or f.cpu_count, "detected"
        if cpus is None:
            out.append(_f("cpus-per-gpu", "warn", name, "CPU count unknown"))
            continue
        need = CPUS_PER_GPU * gpus
        if cpus < need:
            out.append(
                _f(
                    "cpus-per-gpu",
                    "fail",
                    name,
                    f"{cpus} CPUs ({source}) for {gpus} GPUs: verl's placement group needs "
                    f"{CPUS_PER_GPU} per GPU ({need})",
                    f"use nodes with ≥ {need} CPUs, fewer GPUs per node (num_gpus: "
                    f"{cpus // CPUS_PER_GPU}), or ray.num_cpus: {need} if the CPUs are "
                    "really there",
                )
            )
        else:
            out.append(_f("cpus-per-gpu", "ok", name, f"{cpus} CPUs ({source}) for {gpus} GPUs"))
    return out


# --------------------------------------------------------------------------- GPU health


def nvidia_hosts(facts: Mapping[str, HostFacts]) -> list[str]:
    """Hosts whose probe saw NVIDIA GPUs (the ones NVML health applies to)."""
    return [
        name
        for name, f in facts.items()
        if f.ok and (f.gpu_count or 0) - (f.amd_gpu_count or 0) > 0
    ]


def health_row(host: Host, sample: HostSample | None, why: str | None) -> Finding:
    """One host's "gpu-health" row from its agent sample (None: the agent gave none, `why`)."""
    name = host.name
    if sample is None:
        return _f("gpu-health", "warn", name, f"GPU health not read: {why or 'no sample'}")
    found = judge_host(sample.gpus)
    if not found:
        why = sample.error or f"telemetry source {sample.source} has no health readings"
        return _f(
            "gpu-health",
            "warn",
            name,
            f"GPU health not read: {why}",
            f"{_pip(host.python, 'nvidia-ml-py')} (NVML health needs pynvml)",
        )
    bad = [f for f in found if f.level in ("error", "warn")]
    if not bad:
        return _f("gpu-health", "ok", name, found[0].message)
    status: Status = "fail" if any(f.level == "error" for f in bad) else "warn"
    text = "; ".join(f.message for f in bad[:MAX_HEALTH_SHOWN])
    if len(bad) > MAX_HEALTH_SHOWN:
        text += f" (+{len(bad) - MAX_HEALTH_SHOWN} more: verl-tui gpus)"
    return _f("gpu-health", status, name, one_line(text, 400), one_line(bad[0].fix, 200))


async def read_health(
    fleet: Fleet, host: Host, timeout: float
) -> tuple[HostSample | None, str | None]:
    """The GPU agent run once on `host` (``--once``: its one sample carries health)."""
    try:
        transport = await fleet.ready(host.name, timeout)
        argv = agent_argv(host.python, 1.0, once=True)
        res = await transport.run(argv, timeout=timeout, what="GPU health read")
    except (TransportError, asyncio.TimeoutError) as exc:  # HostUnavailable too
        return None, one_line(str(exc) or type(exc).__name__, 200)
    for line in res.stdout.splitlines():
        msg = parse_line(line, 0.0)
        if msg.kind == "sample" and msg.sample is not None:
            return msg.sample, None
        if msg.kind == "error":
            return None, msg.message
    return None, one_line(
        res.stderr.strip().splitlines()[-1]
        if res.stderr.strip()
        else f"agent exit status {res.exit_status}, no sample",
        200,
    )


async def gpu_health_findings(
    fleet: Fleet, inventory: Inventory, names: Sequence[str], timeout: float
) -> list[Finding]:
    """A "gpu-health" row per host in `names`, read in parallel (bounded)."""
    slots = asyncio.Semaphore(MAX_PARALLEL)

    async def one(name: str) -> Finding:
        host = inventory.host(name)
        async with slots:
            sample, why = await read_health(fleet, host, timeout)
        return health_row(host, sample, why)

    return list(await asyncio.gather(*(one(n) for n in names)))
