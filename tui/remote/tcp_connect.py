"""verl-tui: can this host open a TCP connection to ADDRESS:PORT? ``PYTHON -u -c SOURCE ADDRESS
PORT TIMEOUT``.

Exit 0 when the connection opens (it is closed at once); else exit 1 with the reason on one
line of stdout. Stdlib only, Python 3.8+, no imports from ``tui``.
"""

import sys

if __name__ == "__main__":
    # `-c` puts the working directory first on sys.path: a stray socket.py must not win.
    sys.path[:] = [p for p in sys.path if p not in ("", ".")]

import socket


def main(address, port, timeout):
    try:
        socket.create_connection((address, port), timeout).close()
    except OSError as e:
        print(getattr(e, "strerror", None) or str(e) or type(e).__name__)
        sys.exit(1)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), float(sys.argv[3]))
