"""Checks of reaching the hosts and of their software: SSH link and host keys, the configured
interpreter, Python/Ray/verl/debugpy versions against the head's."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from tui.cluster.doctor.findings import MIN_DEBUGPY, Finding, Status, _f, _pip, _version_tuple
from tui.cluster.probe import HostFacts
from tui.config.hosts import Host, Inventory
from tui.shellcmd import copy_line, known_hosts_name, ssh_target
from tui.transport.types import HostState, LinkStatus


def reach_findings(
    inventory: Inventory, statuses: Mapping[str, LinkStatus], waited_s: float
) -> list[Finding]:
    out = []
    for host in inventory.hosts:
        st = statuses[host.name]
        where = ssh_target(host.ssh.user, host.address)
        if host.transport == "local":
            out.append(_f("ssh-reach", "ok", host.name, "local transport (no SSH)"))
        elif st.state == HostState.UP:
            out.append(_f("ssh-reach", "ok", host.name, "connected"))
        elif st.state == HostState.CONNECTING:
            out.append(
                _f(
                    "ssh-reach",
                    "fail",
                    host.name,
                    f"no SSH connection to {where} within {waited_s:.0f} s",
                    f"check address/port in hosts.yaml: {_ssh_try(host)}",
                )
            )
        else:
            out.append(
                _f(
                    "ssh-reach",
                    "fail",
                    host.name,
                    f"{st.state.value}: {st.error or 'no detail'}",
                    _reach_fix(host, st),
                )
            )
    return out


def host_key_findings(inventory: Inventory) -> list[Finding]:
    """warn for every host whose SSH host key is not checked (insecure_skip_host_key_check);
    otherwise one ok row for the cluster (a config fact: it names no host that is fine)."""
    out = []
    for host in inventory.hosts:
        if host.transport != "local" and host.ssh.insecure_skip_host_key_check:
            out.append(
                _f(
                    "host-keys",
                    "warn",
                    host.name,
                    "host key NOT checked (insecure_skip_host_key_check: true): anyone on the path "
                    "can pose as this host",
                    f"{_keyscan(host)} (compare the fingerprint with the host's), then remove "
                    "insecure_skip_host_key_check from hosts.yaml",
                )
            )
    if not out:
        out.append(
            _f(
                "host-keys",
                "ok",
                None,
                "every SSH host's key is checked against known_hosts"
                if any(h.transport != "local" for h in inventory.hosts)
                else "local transport only (no SSH)",
            )
        )
    return out


def _ssh_try(host: Host, *, key: bool = False) -> str:
    """`ssh [-i KEY] -p PORT user@host true`, quoted to copy (tui/shellcmd.py)."""
    identity = ["-i", host.ssh.identity_file] if key and host.ssh.identity_file else []
    target = ssh_target(host.ssh.user, host.address)
    return copy_line(["ssh", *identity, "-p", str(host.ssh.port or 22), target, "true"])


def _known_hosts_file(host: Host) -> str:
    return host.ssh.known_hosts or "~/.ssh/known_hosts"


def _keyscan(host: Host) -> str:
    """`ssh-keyscan -p PORT ADDRESS >> KNOWN_HOSTS`, quoted to copy."""
    port = ["-p", str(host.ssh.port)] if host.ssh.port not in (None, 22) else []
    argv = ["ssh-keyscan", *port, host.address]
    return copy_line(argv, append_to=_known_hosts_file(host))


def _reach_fix(host: Host, st: LinkStatus) -> str:
    if st.state == HostState.AUTH_FAILED:
        return (
            f"check ssh.user and ssh.identity_file in hosts.yaml; try: {_ssh_try(host, key=True)}"
        )
    if st.state == HostState.HOST_KEY_UNKNOWN:
        return f"verify the host key, then: {_keyscan(host)}"
    if st.state == HostState.HOST_KEY_MISMATCH:
        name = known_hosts_name(host.address, host.ssh.port)
        forget = copy_line(["ssh-keygen", "-f", _known_hosts_file(host), "-R", name])
        return f"if {host.name} was reinstalled: {forget}"
    return f"check that sshd runs and address/port in hosts.yaml are right: {_ssh_try(host)}"


def _interpreter_findings(inventory: Inventory, facts: Mapping[str, HostFacts]) -> list[Finding]:
    out = []
    for host in inventory.hosts:
        f = facts.get(host.name)
        if f is None or not f.reached:
            continue  # the link check already says why
        if f.ok:
            where = f.python_executable or host.python
            real = f" → {f.python_realpath}" if f.python_realpath not in (None, where) else ""
            out.append(
                _f(
                    "python-interpreter",
                    "ok",
                    host.name,
                    f"Python {f.python_version} at {where}{real}",
                )
            )
        else:
            fix = (
                f"log in to {host.name} and see what hangs or drops (a stale NFS mount, an "
                "env_setup step that waits, a flaky link); a host that is only slow: raise "
                "ssh.command_timeout in hosts.yaml"
                if f.no_answer
                else f"set python: (or hosts[].python: for {host.name}) in hosts.yaml to "
                "the interpreter of the venv that has ray"
            )
            out.append(_f("python-interpreter", "fail", host.name, f.error or "probe failed", fix))
    return out


# --------------------------------------------------------------------------- versions


def _reference(inventory: Inventory, values: Mapping[str, str]) -> tuple[str, str]:
    """(value, whose): the head's value when known, else the most common one."""
    head = inventory.head.name
    if head in values:
        return values[head], f"head {head}"
    value, _count = Counter(values.values()).most_common(1)[0]
    return value, "most hosts"


def _python_version_findings(inventory: Inventory, facts: Mapping[str, HostFacts]) -> list[Finding]:
    versions = {n: f.python_version for n, f in facts.items() if f.ok and f.python_version}
    if not versions:
        return []
    ref, whose = _reference(inventory, versions)
    out = []
    for name, version in versions.items():
        if version == ref:
            continue
        level = facts[name].env.get("RAY_DEFAULT_PYTHON_VERSION_MATCH_LEVEL", "patch")
        same_minor = _version_tuple(version)[:2] == _version_tuple(ref)[:2]
        status: Status = "warn" if level == "minor" and same_minor else "fail"
        why = (
            "allowed by RAY_DEFAULT_PYTHON_VERSION_MATCH_LEVEL=minor"
            if status == "warn"
            else "Ray refuses a worker whose Python differs from the head's"
        )
        out.append(
            _f(
                "python-version",
                status,
                name,
                f"Python {version} here, {ref} on {whose} ({why})",
                f"make every host's python: a venv built from Python {ref} (e.g. uv venv -p {ref})",
            )
        )
    if not out:
        out.append(
            _f("python-version", "ok", None, f"Python {ref} on all {len(versions)} probed hosts")
        )
    return out


def _ray_findings(inventory: Inventory, facts: Mapping[str, HostFacts]) -> list[Finding]:
    probed = {n: f for n, f in facts.items() if f.ok}
    versions = {n: f.ray_version for n, f in probed.items() if f.ray_version}
    ref, whose = _reference(inventory, versions) if versions else (None, "")
    req = f"ray[default]=={ref}" if ref else "ray[default]"
    out = []
    for name, f in probed.items():
        python = inventory.host(name).python
        if f.ray_version is None:
            out.append(
                _f(
                    "ray-installed",
                    "fail",
                    name,
                    f"ray is not installed for {python}",
                    _pip(python, req),
                )
            )
        else:
            out.append(_f("ray-installed", "ok", name, f"ray {f.ray_version}"))
    mismatched = [n for n, v in versions.items() if v != ref]
    for name in mismatched:
        out.append(
            _f(
                "ray-version",
                "fail",
                name,
                f"ray {versions[name]} here, {ref} on {whose} (Ray refuses a worker whose "
                "version differs)",
                _pip(inventory.host(name).python, req),
            )
        )
    if versions and not mismatched:
        out.append(
            _f("ray-version", "ok", None, f"ray {ref} on all {len(versions)} hosts that have it")
        )
    for name, f in probed.items():
        python = inventory.host(name).python
        if f.verl_version is None:
            out.append(
                _f(
                    "verl-installed",
                    "warn",
                    name,
                    f"verl is not installed for {python} (jobs import it)",
                    _pip(python, "verl"),
                )
            )
        else:
            out.append(_f("verl-installed", "ok", name, f"verl {f.verl_version}"))
        if f.debugpy_version is None:
            out.append(
                _f(
                    "debugpy",
                    "warn",
                    name,
                    "debugpy is missing: post-mortem debugging (RAY_DEBUG_POST_MORTEM) "
                    "needs debugpy ≥ 1.8 on every worker",
                    _pip(python, "debugpy>=1.8"),
                )
            )
        elif _version_tuple(f.debugpy_version)[:2] < MIN_DEBUGPY:
            out.append(
                _f(
                    "debugpy",
                    "warn",
                    name,
                    f"debugpy {f.debugpy_version} is older than 1.8 (Ray's post-mortem "
                    "debugger needs ≥ 1.8)",
                    _pip(python, "debugpy>=1.8"),
                )
            )
        else:
            out.append(_f("debugpy", "ok", name, f"debugpy {f.debugpy_version}"))
    return out
