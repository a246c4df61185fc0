"""Where the Hugging Face hub caches models on this host (a part of the probe and the job
preflight bundles: one rule for both). Standard library only."""

from __future__ import annotations

import os


def hub_cache(env):
    """(folder, which setting named it) as huggingface_hub resolves it from `env`."""
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if env.get(name):
            return os.path.expanduser(env[name]), name
    if env.get("HF_HOME"):
        return os.path.join(os.path.expanduser(env["HF_HOME"]), "hub"), "HF_HOME"
    base = env.get("XDG_CACHE_HOME") or os.path.join(env.get("HOME") or "~", ".cache")
    return os.path.join(os.path.expanduser(base), "huggingface", "hub"), "default"
