"""The job preflight's hosts' answers (tui/remote/job_preflight.py) turned into Findings: pure
functions, so every rule is testable from a hand-made answer as well as from real hosts.

Check ids: ``path:<key>``, ``hf:<key>``, ``import:<module>``, ``import-map``, ``dev-shm``,
``nofile``, ``disk:ray-tmp``, ``disk:checkpoint``, ``resolve``, ``preflight`` (a host that did
not answer). Thresholds and why: needs.py.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Mapping
from typing import Any

from tui.cluster.doctor.findings import Finding, Status
from tui.cluster.tracing import tracing_findings
from tui.config.hosts import Inventory
from tui.fmt import GIB
from tui.jobs.pip_names import PipNames
from tui.jobs.preflight.needs import (
    CKPT_FACTOR,
    CKPT_MIN,
    FALLBACKS,
    NOFILE_MIN,
    OBJECT_STORE_FRACTION,
    RAY_TMP_MIN,
    SHM_MIN,
    JobNeeds,
    _f,
)
from tui.shellcmd import copy_line

OBJECT_STORE_CAP = 200 * 10**9  # Ray caps its default object store at 200 GB


def _gib(n: float) -> str:
    if n >= GIB / 10:
        return f"{n / GIB:.1f} GiB"
    return f"{n / (1 << 20):.0f} MiB" if n >= 1 << 20 else f"{n / 1024:.0f} KiB"


def _dict(m: Mapping[str, Any] | Any, key: str) -> dict[str, Any]:
    """m[key] when it is a dict (an answer from a host is untrusted), else {}."""
    v = m.get(key) if isinstance(m, Mapping) else None
    return v if isinstance(v, dict) else {}


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _paths(host: str, needs: JobNeeds, ans: Mapping[str, Any]) -> list[Finding]:
    out = []
    got = ans.get("paths") or []
    for need, a in zip(needs.paths, got, strict=False):
        if not isinstance(a, dict):
            continue
        check, key = f"path:{need.key}", need.key
        shown = str(a.get("path") or need.value)
        via = f" (from {need.value})" if shown != need.value else ""
        if str(a.get("error", "")).startswith("unset on this host"):
            out.append(
                _f(
                    check,
                    key,
                    "fail",
                    host,
                    f"{need.value}: {a['error']}",
                    "set it in hosts.yaml ray.env (or the profile's env), or give a default: "
                    "${oc.env:NAME,/default/path}",
                )
            )
        elif a.get("error") and not a.get("exists"):
            out.append(
                _f(
                    check,
                    key,
                    "fail",
                    host,
                    f"{shown}{via}: {a['error']}",
                    "copy it to this host (verl's TaskRunner may run on any node), or put it on "
                    "a filesystem every host mounts",
                )
            )
        elif not a.get("readable"):
            out.append(
                _f(
                    check,
                    key,
                    "fail",
                    host,
                    f"{shown}: not readable by the job's user",
                    copy_line(["chmod", "-R", "a+rX", shown]),
                )
            )
        elif need.model and a.get("config_json") is False:
            out.append(
                _f(
                    check,
                    key,
                    "fail",
                    host,
                    f"{shown}: not a Hugging Face model folder (no config.json)",
                    "point it at the folder holding config.json and the weights",
                )
            )
        else:
            out.append(_f(check, key, "ok", host, f"{need.value} readable"))
    return out


def _hf(host: str, needs: JobNeeds, ans: Mapping[str, Any]) -> list[Finding]:
    out = []
    hf = _dict(ans, "hf")
    models = _dict(hf, "models")
    offline = [str(x) for x in hf.get("offline") or []]
    for key, repo in needs.hf_ids:
        check = f"hf:{key}"
        m = _dict(models, repo)
        if m.get("cached"):
            out.append(_f(check, key, "ok", host, f"{repo} in the HF cache"))
        elif offline:
            out.append(
                _f(
                    check,
                    key,
                    "fail",
                    host,
                    f"{repo} is not in the HF cache {hf.get('cache')} and "
                    f"{offline[0]}=1 forbids the download",
                    f"huggingface-cli download {repo} on this host (same HF_HOME), or unset "
                    f"{offline[0]}",
                )
            )
        else:
            out.append(
                _f(
                    check,
                    key,
                    "warn",
                    host,
                    f"{repo} is not in the HF cache: the job would download it here",
                    f"huggingface-cli download {repo} on these hosts first (same HF_HOME)",
                )
            )
    return out


def _imports(
    inv: Inventory, host: str, needs: JobNeeds, ans: Mapping[str, Any], names: PipNames
) -> list[Finding]:
    """A row per module the config names (verl's import map) and per module missing on the
    TaskRunner's path; the path's found modules as one row. A failure's fix installs it (its
    pip name from the hosts' metadata) or switches the config to an alternative whose own
    imports were checked on this host too."""
    mods = _dict(ans, "modules")
    python = str(ans.get("python") or inv.host(host).python)

    def found(module: str) -> str | None:
        return next(
            (m for m in (module, *FALLBACKS.get(module, ())) if _dict(mods, m).get("found")), None
        )

    out, path_found = [], []
    for r in needs.modules:
        check, title = f"import:{r.module}", f"import {r.module}"
        have = found(r.module)
        if have and not r.listed:
            path_found.append(have)
        elif have:
            out.append(_f(check, title, "ok", host, f"{have} found ({r.key})"))
        else:
            fix = names.fix(python, r.module) + _ways_around(python, r.module, needs, found, names)
            why = f"{r.module} not importable by {python}: {r.why} — {r.key} ({r.cite})"
            out.append(_f(check, title, "fail", host, why, fix))
    if path_found:
        text = f"{len(path_found)} modules verl's TaskRunner imports are found"
        out.append(_f("import:path", "imports on verl's path", "ok", host, text))
    return out


def _ways_around(
    python: str,
    module: str,
    needs: JobNeeds,
    found: Callable[[str], str | None],
    names: PipNames,
) -> str:
    """', or KEY=VALUE (what)' for each switch that does without `module`; one that would
    need more on this host says what (the only switch), or is left out (one of several)."""
    alts = needs.alternatives.get(module, [])
    shown = []
    for alt in alts:
        missing = sorted({m.module for m in alt.modules if not found(m.module)})
        say = f"or {alt.switch.override} ({alt.switch.what})"
        if not missing:
            shown.append(say)
        elif len(alts) == 1:
            more = "; ".join(names.fix(python, m) for m in missing)
            shown.append(f"{say}, which needs {', '.join(missing)} too: {more}")
    return "".join(f", {s}" for s in shown)


def _startup(inv: Inventory, host: str, needs: JobNeeds, ans: Mapping[str, Any]) -> list[Finding]:
    """The job's start-up imports in this host's interpreter (tui/remote/startup_imports.py):
    an import that fails there kills every job at start, so it fails the preflight with the
    error and the versions of the data stack."""
    got = ans.get("startup")
    if not needs.startup or not isinstance(got, dict) or got.get("skipped"):
        return []  # not asked, an older answer, or no verl there (the doctor's finding)
    python = str(ans.get("python") or inv.host(host).python)
    mods = " and ".join(needs.startup)
    check, title = "import:startup", "job start-up imports"
    raw = got.get("versions")
    versions = raw if isinstance(raw, dict) else {}
    shown = ", ".join(
        f"{str(k)[:40]} {v[:40]}" for k, v in list(versions.items())[:10] if isinstance(v, str)
    )
    if got.get("pending") is not None:
        text = (
            f"importing {mods} in {python} took longer than the preflight waits "
            f"({got['pending']} s): not checked now; the host keeps importing and the next "
            "check reads its answer"
        )
        return [_f(check, title, "warn", host, text, "check again in a minute")]
    if got.get("error") and "ok" not in got:
        return [_f(check, title, "warn", host, f"not checked: {str(got['error'])[:300]}")]
    if got.get("ok") is True:
        return [_f(check, title, "ok", host, f"{mods} import ({shown})")]
    module = str(got.get("module") or mods)[:200]
    error = str(got.get("error") or "failed")[:400]
    package = str(got.get("package") or "")[:100]
    where = f" (raised in {package})" if package else ""
    if got.get("transient"):  # not the install's fault (a folder gone, memory): said once
        text = f"importing {module} failed in {python} this time: {error}{where}"
        return [_f(check, title, "warn", host, text, "check again")]
    text = f"importing {module} fails in {python}, so every job dies at start: {error}{where}"
    fix = (
        f"make these agree in {python}: {shown or 'numpy, pyarrow, torch, transformers'}"
        f" — e.g. {python} -m pip install the versions verl pins, then check again"
    )
    return [_f(check, title, "fail", host, text, fix)]


def _limits(host: str, needs: JobNeeds, ans: Mapping[str, Any]) -> list[Finding]:
    out = []
    lim = _dict(ans, "limits")
    shm = _dict(lim, "shm")
    avail = lim.get("mem_available")
    store = needs.object_store
    if store is None and isinstance(avail, int):
        store = min(int(avail * OBJECT_STORE_FRACTION), OBJECT_STORE_CAP)
    need = max(SHM_MIN, store or 0)
    total = shm.get("total")
    if not isinstance(total, int):
        out.append(
            _f("dev-shm", "/dev/shm", "warn", host, f"/dev/shm: {shm.get('error', 'unknown')}")
        )
    elif total < need:
        out.append(
            _f(
                "dev-shm",
                "/dev/shm",
                "warn",
                host,
                f"/dev/shm is {_gib(total)}, below {_gib(need)} (Ray's object store"
                f"{' (ray.object_store_memory)' if needs.object_store else ', 30 % of free memory'}"
                ", NCCL, vLLM): Ray falls back to /tmp, NCCL can fail with 'Bus error'",
                "mount -o remount,size=64g /dev/shm (containers: --shm-size=64g or --ipc=host)",
            )
        )
    else:
        out.append(_f("dev-shm", "/dev/shm", "ok", host, f"/dev/shm {_gib(total)}"))
    nofile = lim.get("nofile")
    if isinstance(nofile, list) and len(nofile) == 2:
        hard = nofile[1]
        if 0 <= hard < NOFILE_MIN:
            out.append(
                _f(
                    "nofile",
                    "open files",
                    "warn",
                    host,
                    f"ulimit -n hard limit {hard} < {NOFILE_MIN}: Ray and NCCL open many sockets "
                    "and files ('Too many open files')",
                    "raise nofile in /etc/security/limits.conf (or the container's --ulimit)",
                )
            )
        else:
            shown = "unlimited" if hard < 0 else str(hard)
            out.append(_f("nofile", "open files", "ok", host, f"ulimit -n hard {shown}"))
    return out


def _model_bytes(needs: JobNeeds, ans: Mapping[str, Any]) -> int | None:
    """Weight bytes of the models a checkpoint holds (actor, critic), as this host sees them."""
    total, known = 0, False
    hf = _dict(ans, "hf")
    models = _dict(hf, "models")
    for key in needs.trained_models:
        for need, a in zip(needs.paths, ans.get("paths") or [], strict=False):
            if need.key == key and isinstance(a, dict) and isinstance(a.get("bytes"), int):
                total, known = total + a["bytes"], known or a["bytes"] > 0
        for k, repo in needs.hf_ids:
            m = models.get(repo)
            if k == key and isinstance(m, dict) and isinstance(m.get("bytes"), int):
                total, known = total + m["bytes"], known or m["bytes"] > 0
    return total if known else None


def _disks(host: str, needs: JobNeeds, ans: Mapping[str, Any]) -> list[Finding]:
    out = []
    disks = _dict(ans, "disks")
    weights = _model_bytes(needs, ans)
    ckpt_need = CKPT_FACTOR * weights if weights else CKPT_MIN
    why_ckpt = (
        f"one checkpoint ≈ {CKPT_FACTOR} × {_gib(weights)} of weights" if weights else "no size"
    )
    for label, check, title, need, why in (
        ("ray_tmp", "disk:ray-tmp", "Ray temp dir", RAY_TMP_MIN, "logs, spilled objects"),
        ("ckpt", "disk:checkpoint", "checkpoint dir", ckpt_need, why_ckpt),
    ):
        d = disks.get(label)
        if not isinstance(d, dict):
            continue
        free = d.get("free")
        path = str(d.get("path"))
        if not isinstance(free, int):
            out.append(_f(check, title, "warn", host, f"{path}: {d.get('error', 'unknown')}"))
        elif free < need:
            out.append(
                _f(
                    check,
                    title,
                    "warn",
                    host,
                    f"{path}: {_gib(free)} free, below {_gib(need)} ({why})",
                    "free space there, or point it elsewhere"
                    + (" (trainer.default_local_dir=…)" if label == "ckpt" else " (RAY_TMPDIR)"),
                )
            )
        elif d.get("writable") is False:
            out.append(
                _f(
                    check,
                    title,
                    "fail" if label == "ckpt" else "warn",
                    host,
                    f"{path}: {d.get('checked')} is not writable by the job's user",
                    f"{copy_line(['mkdir', '-p', path])} and give it to the job's user",
                )
            )
        else:
            out.append(_f(check, title, "ok", host, f"{path}: {_gib(free)} free"))
    return out


def _resolve(inv: Inventory, host: str, ans: Mapping[str, Any]) -> list[Finding]:
    out = []
    res = _dict(ans, "resolve")
    names = sorted({h.node_ip for h in inv.hosts if not _is_ip(h.node_ip)})
    bad = [n for n in names if not _dict(res, n).get("ok")]
    if bad:
        out.append(
            _f(
                "resolve",
                "node names",
                "fail",
                host,
                f"cannot resolve {', '.join(bad)} (Ray's node address): its raylet "
                "cannot reach the head or peers",
                "use IP addresses in hosts.yaml node_ip, or add them to /etc/hosts / DNS",
            )
        )
    me = str(ans.get("hostname") or "")
    mine = res.get(me) if me else None
    gloo = ans.get("gloo_ifname")
    if me and not (isinstance(mine, dict) and mine.get("ok")) and isinstance(gloo, str) and gloo:
        # Gloo then binds that interface: the hostname is not how it finds its address.
        text = f"its own hostname does not resolve; Gloo uses GLOO_SOCKET_IFNAME={gloo}"
        out.append(_f("hostname", "own hostname", "ok", host, text[:300]))
    elif me and not (isinstance(mine, dict) and mine.get("ok")):
        out.append(
            _f(
                "hostname",
                "own hostname",
                "warn",
                host,
                "its own hostname does not resolve: torch's Gloo groups pick the "
                "loopback device and cross-node groups can hang",
                "add it to /etc/hosts, or set GLOO_SOCKET_IFNAME in ray.env",
            )
        )
    elif me:
        out.append(_f("hostname", "own hostname", "ok", host, "its hostname resolves"))
    if not bad:
        shown = f"resolves {', '.join(names)}" if names else "node_ip values are IP addresses"
        out.append(_f("resolve", "node names", "ok", host, shown))
    return out


def evaluate_answers(
    inv: Inventory,
    needs: JobNeeds,
    answers: Mapping[str, Mapping[str, Any]],
    *,
    unasked: Status = "fail",
) -> list[Finding]:
    """Every finding: decided-here ones first (~, $VAR), then each host's answer. `unasked`:
    the status of a host that did not answer (a dry run without Ray says so, as a warning)."""
    out = list(needs.local)
    # A missing module is named by what another host installed it from, or verl's metadata.
    names = PipNames(answers[h.name] for h in inv.hosts if isinstance(answers.get(h.name), dict))
    for note in needs.notes:
        out.append(
            _f(
                "import-map",
                "verl import map",
                "warn",
                None,
                note,
                "verl-tui's import map needs an update for this verl",
            )
        )
    for host in (h.name for h in inv.hosts):
        ans = answers.get(host) or {"error": "not asked"}
        if ans.get("error"):
            out.append(
                _f(
                    "preflight",
                    "job preflight",
                    unasked,
                    host,
                    f"not checked: {ans['error']}",
                    "verl-tui check HOSTS (reach, interpreter)",
                )
            )
            continue
        out += _paths(host, needs, ans)
        out += _hf(host, needs, ans)
        out += _imports(inv, host, needs, ans, names)
        out += _startup(inv, host, needs, ans)
        out += _limits(host, needs, ans)
        out += _disks(host, needs, ans)
        out += _resolve(inv, host, ans)
        out += tracing_findings(host, inv.host(host).python, ans.get("tracing"))
    return out
