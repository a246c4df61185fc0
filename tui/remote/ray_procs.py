"""verl-tui: which Ray processes run on this host: ``PYTHON -u -c SOURCE``.

Prints their names (``raylet``, ``gcs_server``, ``ray::...`` workers ...) on one line, sorted,
space-separated; an empty line when none. Reads /proc/*/comm only. Stdlib only, Python 3.8+,
no imports from ``tui``.
"""

import os

NAMES = {"raylet", "gcs_server", "plasma_store", "dashboard", "log_monitor"}


def zombie(pid):
    """Exited, not yet reaped: in a container whose PID 1 reaps nothing (`sleep infinity`),
    Ray's processes stay so after `ray stop` -- stopped, not running."""
    try:
        with open("/proc/" + pid + "/stat") as f:
            return f.read().rpartition(")")[2].split()[:1] == ["Z"]
    except OSError:
        return False


def main():
    found = set()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/" + pid + "/comm") as f:
                comm = f.read().strip()
        except OSError:
            continue  # gone meanwhile, or not ours to read
        if (comm in NAMES or comm.startswith("ray::")) and not zombie(pid):
            found.add(comm)
    print(" ".join(sorted(found)))


if __name__ == "__main__":
    main()
