"""verl's own trainer config, read without importing verl (which imports torch): one import
place for what three modules hold.

verl_select.py: which verl (the cluster's, read over SSH and cached, else this Python's) and the
Hydra check; verl_compose.py: composition as ``python -m verl.trainer.main_ppo`` does it, cached,
with one-line errors, the keys verl renamed and the did-you-mean message; verl_keys.py: the key
catalog (types, defaults, help, choices).
"""

from tui.jobs.verl_compose import (
    RENAMED,
    Composed,
    ComposeError,
    _hydra_compose,  # noqa: F401 (tests compose with it)
    builtin_configs,
    closest_key,
    compose,
    compose_cfg,
    compose_detailed,
    config_keys,
    custom_searchpath,
    flat_keys,
    renamed_to,
    resolve_config,
    unknown_key_message,
)
from tui.jobs.verl_compose import base_cfg as _base_cfg  # noqa: F401 (tests read cache_info)
from tui.jobs.verl_keys import DATACLASS_FILES as _DATACLASS_FILES  # noqa: F401 (verl_source)
from tui.jobs.verl_keys import MISSING, KeyInfo, key_catalog
from tui.jobs.verl_select import (
    CONFIG_NAME,
    SchemaError,
    VerlSource,
    current_source,
    local_source,
    require_hydra,
    use_source,
    verl_config_dir,
)

__all__ = [
    "CONFIG_NAME",
    "MISSING",
    "RENAMED",
    "ComposeError",
    "Composed",
    "KeyInfo",
    "SchemaError",
    "VerlSource",
    "builtin_configs",
    "closest_key",
    "compose",
    "compose_cfg",
    "compose_detailed",
    "config_keys",
    "current_source",
    "custom_searchpath",
    "flat_keys",
    "key_catalog",
    "local_source",
    "renamed_to",
    "require_hydra",
    "resolve_config",
    "unknown_key_message",
    "use_source",
    "verl_config_dir",
]
