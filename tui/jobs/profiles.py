"""Profiles: a named set of verl overrides plus the job's runtime_env, one YAML file each.

```yaml
name: grpo-gsm8k
description: GRPO on GSM8K
python: /opt/venv/bin/python      # optional: the entrypoint's interpreter on the hosts
entrypoint: verl.trainer.main_ppo # optional: the verl module the job runs (python -m MODULE)
config_name: ppo_trainer          # optional: --config-name (default: the entry point's own)
config_path: /abs/my_configs      # optional: --config-path (default: the entry point's own)
overrides:                        # verl's dotted Hydra keys → values (typed by YAML)
  data.train_batch_size: 256
  actor_rollout_ref.rollout.name: vllm
  trainer.logger: [console]
runtime_env:
  env_vars: {VLLM_USE_V1: "1"}
  working_dir: ~/project
  excludes: [.git, checkpoints]
```

`to_hydra_overrides` turns the mapping into Hydra override strings; strings are always quoted
and escaped, so a value stays one literal value whatever it holds.
"""

from __future__ import annotations

import difflib
import keyword
import os
import re
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_core import ErrorDetails

from tui.config.health import HealthOptions
from tui.config.stall import StallOverride
from tui.config.yamlfile import ConfigError, LocatedDoc, load_yaml, parse_yaml
from tui.jobs.hydra_values import format_value

# A Hydra override key: optional +, ++ or ~, dotted segments (verl has a few with dashes), and
# config-group forms like `model_engine` or `actor@actor_rollout_ref.actor`.
# verl's longest dotted key is ~90 characters; a longer one is refused before it becomes a path.
MAX_KEY_CHARS = 256
_KEY_RE = re.compile(r"^(\+\+|\+|~)?[A-Za-z_][A-Za-z0-9_-]*([./@][A-Za-z0-9_][A-Za-z0-9_-]*)*\Z")
_DICT_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*\Z")
_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,99}\Z")
_ENV_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
_CONFIG_NAME_RE = re.compile(r"^(?!.*\.\.)[A-Za-z0-9_][A-Za-z0-9_./-]{0,199}\Z")
# The job's entry point: a dotted module under verl (`python -m MODULE` on the hosts). Checked as
# a name only (the cluster's verl may have entries this machine's lacks); a word of an argv,
# never shell text, so no value can become code.
DEFAULT_ENTRYPOINT = "verl.trainer.main_ppo"
MAX_ENTRYPOINT_CHARS = 200
_ENTRYPOINT_RE = re.compile(r"^verl(\.[A-Za-z_][A-Za-z0-9_]*)+\Z")
# PyYAML reads YAML 1.1, where `1e-6` (no dot) is a string; verl's command-line habit means float.
_EXP_FLOAT_RE = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+\Z")


def check_entrypoint(value: object) -> str:
    """`value` as a verl entry point module name; ValueError (one line, the value cut short)
    when it is not a dotted Python module name under `verl.`."""
    example = "e.g. verl.experimental.one_step_off_policy.main_ppo"
    if not isinstance(value, str):
        got = "nothing" if value is None else f"a {type(value).__name__}"
        raise ValueError(f"a verl module name ({example}); got {got}")
    if len(value) > MAX_ENTRYPOINT_CHARS:
        raise ValueError(
            f"{value[:40]!r}… ({len(value)} characters) is not a verl module: "
            f"names are at most {MAX_ENTRYPOINT_CHARS} characters"
        )
    parts = value.split(".")
    if not _ENTRYPOINT_RE.match(value) or any(keyword.iskeyword(p) for p in parts):
        raise ValueError(
            f"{value[:60]!r} is not a verl module: a dotted Python module name under "
            f"verl. ({example})"
        )
    return value


def verl_command(python: str, entrypoint: str = DEFAULT_ENTRYPOINT) -> list[str]:
    """The job's command before its Hydra arguments: `PYTHON -m MODULE`. The one builder of
    it: submissions (form, CLI, queue, sweep, supervisor retries) and the exported scripts."""
    return [python, "-m", check_entrypoint(entrypoint)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _check_value(value: Any, where: str) -> Any:
    if value is None or isinstance(value, (bool, int, str)):
        if isinstance(value, str) and "\0" in value:
            raise ValueError(f"{where}: NUL characters are not allowed")
        return value
    if isinstance(value, float):
        return value
    if isinstance(value, list):
        return [_check_value(v, where) for v in value]
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str) or not _DICT_KEY_RE.match(k):
                raise ValueError(f"{where}: mapping key {k!r} must be a plain name")
            out[k] = _check_value(v, where)
        return out
    raise ValueError(f"{where}: {type(value).__name__} values are not supported (quote it)")


class RuntimeEnv(_Strict):
    env_vars: dict[str, str] = Field(default_factory=dict)
    working_dir: str | None = None
    excludes: list[str] = Field(default_factory=list)

    @field_validator("env_vars", mode="before")
    @classmethod
    def _env(cls, v: Any) -> Any:
        if not isinstance(v, dict):
            return v
        out = {}
        for key, value in v.items():
            if not isinstance(key, str) or not _ENV_RE.match(key):
                raise ValueError(f"{key!r} is not an environment variable name")
            if isinstance(value, (dict, list)) or value is None:
                raise ValueError(f"{key}: the value must be a string or number")
            text = ("true" if value else "false") if isinstance(value, bool) else str(value)
            if "\n" in text or "\0" in text:
                raise ValueError(f"{key}: the value must be one line")
            out[key] = text
        return out

    @field_validator("working_dir")
    @classmethod
    def _wd(cls, v: str | None) -> str | None:
        if v is not None and ("\n" in v or "\0" in v or not v):
            raise ValueError("must be one line naming a directory")
        return v


_RETRY_ON_RE = re.compile(r"^[a-z][a-z0-9_]{0,63}\Z")


class Profile(_Strict):
    name: str
    description: str = ""
    python: str | None = None
    # The verl module the job runs; an imported script's own entry point (absent: main_ppo).
    entrypoint: str = DEFAULT_ENTRYPOINT
    # --config-name / --config-path: which Hydra config the overrides apply to (None: the
    # entry point's own @hydra.main config, wherever the cluster's verl has it).
    config_name: str | None = None
    config_path: str | None = None
    overrides: dict[str, Any] = Field(default_factory=dict)
    runtime_env: RuntimeEnv = Field(default_factory=RuntimeEnv)
    # Runs that heal themselves (tui/supervisor): retry a failed run up to `retries` times when
    # its log shows one of `retry_on` (tui/logs/retriable.py; default: all of them).
    retries: int | None = Field(default=None, ge=0, le=100)
    retry_on: list[str] | None = None
    # When a running job of this profile counts as stalled (hosts.yaml's stall: for the rest).
    stall: StallOverride | None = None
    # Training-health rules and their bounds (tui/config/health.py; absent: the defaults).
    health: HealthOptions | None = None

    @field_validator("retry_on")
    @classmethod
    def _retry_on(cls, v: list[str] | None) -> list[str] | None:
        # The names themselves are checked where the policy is made (tui/supervisor/policy.py
        # knows the retriable signatures; jobs does not import logs).
        if v is not None and not all(_RETRY_ON_RE.match(x) for x in v):
            raise ValueError("signature names: letters, digits and '_' (see submit --help)")
        return v

    @field_validator("entrypoint", mode="before")
    @classmethod
    def _entrypoint(cls, v: Any) -> str:
        return check_entrypoint(v)

    @field_validator("config_name")
    @classmethod
    def _config_name(cls, v: str | None) -> str | None:
        if v is not None and not _CONFIG_NAME_RE.match(v):
            raise ValueError(
                "a config name: letters, digits, '_', '-', '.', '/' (e.g. ppo_trainer)"
            )
        return v

    @field_validator("config_path")
    @classmethod
    def _config_path(cls, v: str | None) -> str | None:
        if v is not None and (not v or any(c in v for c in "\n\0")):
            raise ValueError("must be one line naming a folder")
        return v

    def hydra_args(self) -> list[str]:
        """The entry point's `--config-path=… --config-name=…` for this profile (before the
        overrides on its command line); empty for the entry point's own config."""
        out = []
        if self.config_path:
            out.append(f"--config-path={self.config_path}")
        if self.config_name:
            out.append(f"--config-name={self.config_name}")
        return out

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _NAME_RE.match(v):
            raise ValueError("names use letters, digits, '.', '_' and '-' (max 100)")
        return v

    @field_validator("python")
    @classmethod
    def _python(cls, v: str | None) -> str | None:
        if v is not None and (not v or any(c in v for c in "\n\0")):
            raise ValueError("must be one line naming an interpreter")
        return v

    @field_validator("overrides", mode="before")
    @classmethod
    def _overrides(cls, v: Any) -> Any:
        if not isinstance(v, dict):
            return v
        out = {}
        for key, value in v.items():
            if isinstance(key, str) and len(key) > MAX_KEY_CHARS:
                raise ValueError(
                    f"{key[:40]}… ({len(key)} characters) is not a verl key: keys are at most "
                    f"{MAX_KEY_CHARS} characters"
                )
            if not isinstance(key, str) or not _KEY_RE.match(key):
                raise ValueError(f"{key!r} is not a dotted verl key")
            out[key] = _check_value(value, key)
        return out


def entry_note(profile: Profile | None) -> str:
    """`   -m MODULE` for a profile that runs another verl entry point than main_ppo (the job
    form's title line, `profile check`); "" for main_ppo, so the default reads as before."""
    if profile is None or profile.entrypoint == DEFAULT_ENTRYPOINT:
        return ""
    return f"   -m {profile.entrypoint}"


# -- Hydra override syntax -----------------------------------------------------------------


# Values are written by tui/jobs/hydra_values.py (read there too); the name stays for callers.
hydra_value = format_value


def to_hydra_overrides(values: Mapping[str, Any]) -> list[str]:
    """`key=value` strings for Hydra (and verl's command line), in order. Keys are checked
    (ValueError); `~key` with a None value deletes the key."""
    out = []
    for key, value in values.items():
        if not isinstance(key, str) or not _KEY_RE.match(key):
            raise ValueError(f"{key!r} is not a dotted verl key")
        if key.startswith("~") and value is None:
            out.append(key)
        else:
            out.append(f"{key}={hydra_value(value)}")
    return out


def override_key(line: str) -> str:
    """The dotted key of a `key=value` override, without its +, ++ or ~ prefix."""
    return line.split("=", 1)[0].strip().lstrip("+~")


def override_text(lines: list[str], key: str) -> str | None:
    """The value text of the last `key=value` override for `key` (any +, ++ prefix), quotes
    removed; None when there is none."""
    value = None
    for line in lines:
        if "=" in line and not line.lstrip().startswith("~") and override_key(line) == key:
            value = line.split("=", 1)[1].strip().strip("'\"")
    return value


def check_set(line: str) -> str:
    """A --set value: `key=value` in Hydra's override syntax (the value as on verl's command
    line). Returns it unchanged; ConfigError (one line) when it is not one override."""
    from tui.jobs.schema import SchemaError, require_hydra

    key = line.split("=", 1)[0]
    if "=" not in line and not line.startswith("~"):
        raise ConfigError(f"--set {line!r}: expected key=value")
    if not _KEY_RE.match(key):
        raise ConfigError(f"--set {line!r}: {key!r} is not a dotted verl key")
    try:
        require_hydra()  # Hydra's parser; verl itself may be the cluster's
    except SchemaError as exc:
        raise ConfigError(str(exc)) from None
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    try:
        OverridesParser.create().parse_override(line)
    except HydraException as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else "bad syntax"
        raise ConfigError(f"--set {line!r}: {first}") from None
    return line


# -- files ---------------------------------------------------------------------------------


def _describe(err: ErrorDetails) -> str:
    kind = err.get("type", "")
    if kind == "extra_forbidden":
        known = (
            "name",
            "description",
            "python",
            "entrypoint",
            "config_name",
            "config_path",
            "overrides",
            "runtime_env",
            "env_vars",
            "working_dir",
            "excludes",
        )
        near = difflib.get_close_matches(str(err["loc"][-1]), known, n=1)
        return "unknown key" + (
            f" (did you mean {near[0]!r}?)"
            if near
            else " (a profile has name, description, python, overrides, runtime_env)"
        )
    if kind == "missing":
        return "required key is missing"
    return str(err.get("msg", "invalid value")).removeprefix("Value error, ")


def _plain_exponent_floats(doc: LocatedDoc) -> set[tuple[Any, ...]]:
    """Where the file has an unquoted `1e-6`: YAML 1.2 and verl's command line read a float,
    PyYAML (YAML 1.1) a string. A quoted '1e-6' stays a string."""
    out: set[tuple[Any, ...]] = set()
    for loc in doc.plain_strings:
        if loc[:1] != ("overrides",):
            continue
        node: Any = doc.data
        try:
            for part in loc:
                node = node[part]
        except (KeyError, IndexError, TypeError):
            continue
        if isinstance(node, str) and _EXP_FLOAT_RE.match(node):
            out.add(loc)
    return out


def _set_floats(data: Any, locs: set[tuple[Any, ...]]) -> Any:
    for loc in locs:
        node = data
        try:
            for part in loc[:-1]:
                node = node[part]
            if isinstance(node[loc[-1]], str):
                node[loc[-1]] = float(node[loc[-1]])
        except (KeyError, IndexError, TypeError, ValueError):
            continue
    return data


def _precheck(doc: LocatedDoc, data: dict) -> None:
    """Override keys/values and env var names checked here, so the error names the exact line
    (the model's validators see the whole mapping and cannot say which entry)."""
    blocks = [("overrides",), ("runtime_env", "env_vars")]
    for loc in blocks:
        node: Any = data
        for part in loc:
            node = node.get(part) if isinstance(node, dict) else None
        if not isinstance(node, dict):
            continue
        for key, value in node.items():
            try:
                if loc == ("overrides",):
                    Profile._overrides({key: value})
                else:
                    RuntimeEnv._env({key: value})
            except ValueError as exc:
                raise ConfigError(
                    f"{'.'.join(loc)}: {exc}", doc.path, doc.line_of((*loc, key))
                ) from None


def profile_from_doc(doc: LocatedDoc, *, default_name: str | None = None) -> Profile:
    data = doc.data
    if not isinstance(data, dict):
        raise ConfigError(
            "expected a mapping with an 'overrides:' block", doc.path, doc.line_of(())
        )
    _precheck(doc, data)
    if "name" not in data and default_name is not None:
        data = {"name": default_name, **data}
    try:
        return Profile.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = tuple(err["loc"])
        where = ".".join(str(p) for p in loc)
        msg = _describe(err)
        raise ConfigError(f"{where}: {msg}" if where else msg, doc.path, doc.line_of(loc)) from None


def load_profile(path: Path | str) -> Profile:
    """Read and check a profile; every problem is a ConfigError naming file:line."""
    path = Path(path).expanduser()
    # One safe read (regular file, size cap, no control characters) and one parse.
    doc = load_yaml(path)
    return _profile_from_yaml(doc, path)


def parse_profile(
    text: str, path: Path | str = "<profile.yaml>", *, doc: LocatedDoc | None = None
) -> Profile:
    return _profile_from_yaml(doc or parse_yaml(text, Path(path)), Path(path))


def _profile_from_yaml(doc: LocatedDoc, path: Path) -> Profile:
    _set_floats(doc.data, _plain_exponent_floats(doc))
    return profile_from_doc(doc, default_name=_stem_name(path))


def _stem_name(path: Path) -> str | None:
    return path.stem if _NAME_RE.match(path.stem) else None


def profile_to_yaml(profile: Profile) -> str:
    data: dict[str, Any] = {"name": profile.name}
    if profile.description:
        data["description"] = profile.description
    if profile.python:
        data["python"] = profile.python
    if profile.entrypoint != DEFAULT_ENTRYPOINT:  # old profiles are written as they were
        data["entrypoint"] = profile.entrypoint
    if profile.config_name:
        data["config_name"] = profile.config_name
    if profile.config_path:
        data["config_path"] = profile.config_path
    data["overrides"] = dict(profile.overrides)
    rt = profile.runtime_env.model_dump(exclude_defaults=True)
    if rt:
        data["runtime_env"] = rt
    if profile.retries is not None:
        data["retries"] = profile.retries
    if profile.retry_on is not None:
        data["retry_on"] = list(profile.retry_on)
    if profile.stall is not None:
        data["stall"] = profile.stall.model_dump(exclude_none=True)
    if profile.health is not None:
        data["health"] = profile.health.model_dump(exclude_defaults=True)
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=100)


class _Dumper(yaml.SafeDumper):
    """Quotes strings that would read back as floats (`1e-6`): a string stays a string."""


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "'" if _EXP_FLOAT_RE.match(value) else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _represent_str)


def save_profile(profile: Profile, path: Path | str) -> Path:
    """Write atomically (temp file in the same folder, fsync, rename): a crash leaves the old
    file or the new one, never half of either."""
    path = Path(path).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    text = profile_to_yaml(profile)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


@dataclass(frozen=True)
class ProfileEntry:
    path: Path
    name: str
    profile: Profile | None  # None: the file has a problem, see `error`
    error: str | None = None


def list_profiles(dirs: Iterable[Path | str]) -> list[ProfileEntry]:
    """Every *.yaml / *.yml profile in `dirs` (not recursive), sorted by name; a broken file
    is listed with its one-line error rather than hidden."""
    out: list[ProfileEntry] = []
    seen: set[Path] = set()
    for d in dirs:
        folder = Path(d).expanduser()
        if not folder.is_dir():
            continue
        for path in sorted([*folder.glob("*.yaml"), *folder.glob("*.yml")]):
            real = path.resolve()
            if real in seen or path.name.startswith("."):
                continue
            seen.add(real)
            try:
                prof = load_profile(path)
                out.append(ProfileEntry(path, prof.name, prof))
            except ConfigError as exc:
                out.append(ProfileEntry(path, path.stem, None, str(exc)))
    return sorted(out, key=lambda e: (e.name, str(e.path)))


def preset_dir() -> Path | None:
    """The presets shipped with verl-tui: tui/presets/ in a wheel (copied from profiles/ at
    build time, see setup.py), the repository's profiles/ in a checkout or editable install."""
    here = Path(__file__).resolve()
    packaged = here.parents[1] / "presets"
    if packaged.is_dir():
        return packaged
    repo = here.parents[2]
    if (repo / "pyproject.toml").is_file() and (repo / "profiles").is_dir():
        return repo / "profiles"
    return None


def user_profile_dir() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.expanduser("~/.config")
    return Path(base) / "verl-tui" / "profiles"


def profile_dirs() -> list[Path]:
    """Where profiles are looked up: the shipped presets, then the user's own."""
    presets = preset_dir()
    return [*([presets] if presets else []), user_profile_dir()]


def find_preset(name: str) -> ProfileEntry | None:
    """The profile named `name` (its `name:` or its file name without .yaml) among the presets
    and the user's profiles; the first by profile_dirs order."""
    for entry in _entries_in_order():
        if entry.profile is not None and name in (entry.name, entry.path.stem):
            return entry
    return None


def _entries_in_order() -> list[ProfileEntry]:
    out: list[ProfileEntry] = []
    for d in profile_dirs():
        out += list_profiles([d])
    return out


def resolve_profile(arg: str | Path) -> tuple[Path, str | None]:
    """A PROFILE argument as a path: a file when one is there, else a preset of that name.
    Returns (path, note); the note says when a file shadows a preset of the same name.
    ConfigError (one line) when it is neither."""
    text = str(arg)
    path = Path(text).expanduser()
    as_name = text.removesuffix(".yaml").removesuffix(".yml")
    named = "/" not in text and bool(_NAME_RE.match(as_name))
    if named and as_name == text and not path.exists():
        path = next(
            (Path(text + ext) for ext in (".yaml", ".yml") if Path(text + ext).exists()), path
        )  # `NAME` when NAME.yaml is here
    if path.exists() or path.is_symlink():  # whatever it is, the loader says what is wrong
        preset = find_preset(as_name) if named else None
        note = None
        if preset is not None and preset.path.resolve() != path.resolve():
            note = f"{text}: using the file {path}, not the preset {preset.name!r} ({preset.path})"
        return path, note
    preset = find_preset(as_name) if named else None
    if preset is not None:
        return preset.path, None
    if not named:
        return path, None  # a path: the loader's "file not found" names it
    names = sorted({e.name for e in _entries_in_order() if e.profile is not None})
    listed = ", ".join(names[:8]) + (", …" if len(names) > 8 else "")
    raise ConfigError(
        f"{text}: no such file, and no preset of that name"
        + (f" (presets: {listed}; verl-tui profile list)" if names else "")
    )
