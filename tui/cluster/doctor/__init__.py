"""The preflight doctor: what will make Ray or verl fail on this cluster, each with a fix.

`run_doctor` connects (the fleet), probes every host once (tui.cluster.probe), decides most
checks from those facts with pure functions (`evaluate`, testable without hosts), and runs one
active check: the GCS port, tried from every worker. Everything goes through fleet transports,
in parallel across hosts with bounded concurrency.

Check ids (stable; `Finding.check`) in report order:

ssh-reach          the fleet's link state per host (auth, host key, unreachable → fail)
python-interpreter the configured interpreter runs the probe (fail with its error)
python-version     every host's Python equals the head's to the patch (Ray refuses a worker
                   otherwise); RAY_DEFAULT_PYTHON_VERSION_MATCH_LEVEL=minor → warn on a patch gap
ray-version        every host's ray equals the head's (fail)
ray-installed      ray installed for the host's interpreter (fail)
verl-installed     verl installed there (warn: jobs import it)
debugpy            debugpy ≥ 1.8 for post-mortem debugging (warn)
head-ports         ray.port and ray.dashboard_port on the head: free, or held by Ray (ok);
                   held by anything else (fail, naming the process)
gcs-reach          a TCP connect from each worker to head node_ip:ray.port (a temporary
                   listener on the head when nothing listens); fail with the error
socket-ifname      NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME (host env overlaid with ray.env):
                   unset with several candidate interfaces → warn; set but matching no
                   interface with an address here → fail
infiniband         IB ports Active/LinkUp where ibstat (or /sys/class/infiniband) exists
gpu-count          equal GPU counts per node, NVIDIA and AMD alike (hosts.yaml num_gpus wins
                   over the probe's count) → else fail; no GPUs / no NVML → warn; the visible-
                   devices rule: ROCR_VISIBLE_DEVICES with HIP/CUDA_VISIBLE_DEVICES (verl
                   refuses it), ROCR without HIP on an AMD host (Ray refuses it), HIP ≠ CUDA
                   → fail; NVIDIA and AMD GPUs on one host → warn (one Ray GPU resource)
gpu-health         NVML health per NVIDIA host, read by the GPU agent run once (tui/cluster/
                   gpu_health judges it): uncorrectable ECC, row remap failure/pending, page
                   retirement pending → fail; HW/thermal slowdown, PCIe link below max,
                   persistence off on a multi-GPU node, XID errors → warn
cpus-per-gpu       Ray's CPUs (ray.num_cpus, else detected) ≥ 3 × GPUs (verl's bundles) → fail
hf-cache           the Hugging Face hub cache readable and writable → fail
memory             available memory < 10 % of total or < 8 GiB → warn
clock-skew         host clock vs the head's (median without a head), rtt-corrected:
                   > 2 s warn, > 30 s fail
numexpr-threads    numexpr installed, NUMEXPR_MAX_THREADS unset and > 64 CPUs → warn
mkl-threading      MKL present and neither MKL_SERVICE_FORCE_INTEL nor MKL_THREADING_LAYER=GNU
                   (or it is INTEL) → warn: "MKL_THREADING_LAYER=INTEL is incompatible with
                   libgomp" once torch is imported

Rows of one check that say the same thing on several hosts are folded into one row with
``host=None`` whose finding ends with the hosts it covers: "(all 3 hosts)" or "(2 hosts: a, b)"
(see `arrange`); with 128 hosts the table shows what differs, not 128 copies of "ok".

Modules: findings.py (Finding, CHECKS, thresholds), versions.py (ssh, interpreter, versions),
network.py (head ports, gcs-reach, socket-ifname, infiniband), gpus.py (gpu-count,
cpus-per-gpu), host_limits.py (hf-cache, memory, clock-skew, numexpr, mkl), runner.py
(evaluate, arrange, run_doctor).
"""

from tui.cluster.doctor.findings import (
    CHECKS,
    CONNECT_TIMEOUT_S,
    CPUS_PER_GPU,
    LISTENER_LIFETIME_S,
    MAX_PARALLEL,
    MEM_WARN_BYTES,
    MEM_WARN_FRACTION,
    MIN_DEBUGPY,
    NUMEXPR_CPU_LIMIT,
    SKEW_FAIL_S,
    SKEW_WARN_S,
    STATUSES,
    Finding,
    Status,
    summarize,
)
from tui.cluster.doctor.gpus import (
    _gpu_findings,  # noqa: F401 (tests decide one check)
    effective_gpus,
)
from tui.cluster.doctor.host_limits import classify_clock_offsets
from tui.cluster.doctor.network import IfSpec, classify_port
from tui.cluster.doctor.runner import ORDER, arrange, evaluate, run_doctor
from tui.cluster.doctor.versions import host_key_findings, reach_findings

__all__ = [
    "CHECKS",
    "CONNECT_TIMEOUT_S",
    "CPUS_PER_GPU",
    "LISTENER_LIFETIME_S",
    "MAX_PARALLEL",
    "MEM_WARN_BYTES",
    "MEM_WARN_FRACTION",
    "MIN_DEBUGPY",
    "NUMEXPR_CPU_LIMIT",
    "ORDER",
    "SKEW_FAIL_S",
    "SKEW_WARN_S",
    "STATUSES",
    "Finding",
    "IfSpec",
    "Status",
    "arrange",
    "classify_clock_offsets",
    "classify_port",
    "effective_gpus",
    "evaluate",
    "host_key_findings",
    "reach_findings",
    "run_doctor",
    "summarize",
]
