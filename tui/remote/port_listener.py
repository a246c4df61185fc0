"""verl-tui: listen on HOST:PORT until stdin closes: ``PYTHON -u -c SOURCE HOST PORT LIFETIME``.

Prints ``ready`` once listening (or ``error: why`` and exits 1), then accepts and closes every
connection, so another host can prove it reaches this address. Ends when stdin closes, and
after LIFETIME seconds in any case (SIGALRM), should stdin's EOF be lost. Stdlib only, Python
3.8+, no imports from ``tui``.
"""

import sys

if __name__ == "__main__":
    # `-c` puts the working directory first on sys.path: a stray socket.py must not win.
    sys.path[:] = [p for p in sys.path if p not in ("", ".")]

import os
import select
import signal
import socket


def main(host, port, lifetime):
    signal.alarm(lifetime)  # never outlive the check, even if stdin's EOF is lost
    try:
        s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((host, port))
        s.listen(128)
    except OSError as e:
        print("error:", e.strerror or e, flush=True)
        sys.exit(1)
    print("ready", flush=True)
    while True:
        r = select.select([sys.stdin, s], [], [])[0]
        if sys.stdin in r and not os.read(sys.stdin.fileno(), 4096):
            break
        if s in r:
            s.accept()[0].close()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
