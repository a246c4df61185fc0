"""Shared pytest setup. tests/ is not a package (verl installs one named ``tests``): helpers
are imported by path, e.g. ``from fakenvml.fakenvml import FakeGpu``."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
# The cockpit runs a supervisor (retries, the queue, job-end notifications) unless told not to:
# tests of other screens get none; tests of the supervisor in the cockpit turn it on.
os.environ.setdefault("VERL_TUI_SUPERVISE", "0")

from harness.fixtures import *  # noqa: F403

# --- fake NVML (tests/fakenvml) -------------------------------------------------------------


@pytest.fixture(scope="session")
def fake_nvml_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Directory holding the fake libnvidia-ml.so.1: put it on LD_LIBRARY_PATH."""
    from fakenvml.fakenvml import build_fake_nvml

    return build_fake_nvml(tmp_path_factory.mktemp("fakenvml"))


@pytest.fixture(autouse=True)
def _this_pythons_verl():
    """Each test starts composing from this Python's verl: a test that ran a command in-process
    against a cluster leaves the cluster's (cached, partial) verl selected otherwise."""
    yield
    from tui.jobs.verl_select import use_source

    use_source(None)
