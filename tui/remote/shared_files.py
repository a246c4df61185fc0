"""Part of the head's lease and shared-files programs (tui/remote BUNDLES): opening a file that
every user's verl-tui opens on the head. Stdlib only, Python 3.8+.
"""

import os


def open_shared(path):
    """Open (or make, 0666) a file every user's verl-tui opens: without O_CREAT when it is
    there, since a kernel with fs.protected_regular refuses O_CREAT on another user's file in
    a sticky folder (a /tmp/ray made 1777)."""
    while True:
        try:
            return os.open(path, os.O_RDWR | os.O_NOFOLLOW)
        except FileNotFoundError:
            pass
        try:
            return os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666)
        except FileExistsError:
            continue  # made by another between the two opens: open it
