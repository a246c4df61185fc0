"""Second real interpreters for the tests that need one of another patch release."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path


def other_patch_release() -> tuple[str, str]:
    """(interpreter, its version): a Python of the test venv's minor version but another patch
    release (here Debian's 3.11.2 and pyenv's 3.11.7; run-tests makes the venv from the first
    it finds), from /usr/bin, PATH or pyenv's versions, as a venv base."""
    minor = f"python3.{sys.version_info.minor}"
    pyenv = Path.home() / ".pyenv" / "versions"
    found = [f"/usr/bin/{minor}", shutil.which(minor), *map(str, pyenv.glob(f"3.*/bin/{minor}"))]
    ours = ".".join(map(str, sys.version_info[:3]))
    for exe in filter(None, found):
        probe = subprocess.run(
            [exe, "-c", "import sys, venv; print('.'.join(map(str, sys.version_info[:3])))"],
            capture_output=True,
            text=True,
        )
        if probe.returncode == 0 and probe.stdout.strip() not in ("", ours):
            return exe, probe.stdout.strip()
    raise AssertionError(f"no {minor} of another patch release than {ours} among {found}")
