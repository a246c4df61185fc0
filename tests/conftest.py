"""Shared pytest setup. tests/ is not a package (verl installs one named ``tests``): helpers
are imported by path, e.g. ``from fakenvml.fakenvml import FakeGpu``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from harness.fixtures import *  # noqa: F403

# --- fake NVML (tests/fakenvml) -------------------------------------------------------------


@pytest.fixture(scope="session")
def fake_nvml_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Directory holding the fake libnvidia-ml.so.1: put it on LD_LIBRARY_PATH."""
    from fakenvml.fakenvml import build_fake_nvml

    return build_fake_nvml(tmp_path_factory.mktemp("fakenvml"))
