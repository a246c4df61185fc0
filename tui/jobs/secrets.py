"""Secret environment variables of a job: which names are secrets, masking them for anything
shown or written, and references (not values) for the history.

A name is a secret when one of its word parts (split at `_`, `-`, `.` and camelCase) is KEY,
TOKEN, SECRET, PASSWORD or CREDENTIAL (or a plural, or a known compound such as APIKEY), or
when hosts.yaml lists it under `secret_env:`. `TOKENIZERS_PARALLELISM` is not one: the part is
TOKENIZERS, not TOKEN.

The value still reaches Ray's runtime_env at submission (the job needs it); Ray's dashboard
shows a job's runtime_env to whoever can reach the dashboard.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

from tui.errors import VerlTuiError

MASK = "***"
_WORDS = {"KEY", "TOKEN", "SECRET", "PASSWORD", "CREDENTIAL", "PASSWD", "PASSPHRASE"}
_COMPOUNDS = {
    "APIKEY",
    "ACCESSKEY",
    "SECRETKEY",
    "PRIVATEKEY",
    "AUTHTOKEN",
    "ACCESSTOKEN",
    "APITOKEN",
    "AUTHKEY",
    "SESSIONTOKEN",
    "CLIENTSECRET",
}
_PARTS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")


def is_secret_name(name: str, extra: Iterable[str] = ()) -> bool:
    if name in set(extra):
        return True
    for part in _PARTS.findall(re.sub(r"[^A-Za-z0-9]", " ", name)):
        word = part.upper()
        if word in _WORDS or word in _COMPOUNDS or (word.endswith("S") and word[:-1] in _WORDS):
            return True
    return False


def secret_names(env: Mapping[str, Any], extra: Iterable[str] = ()) -> list[str]:
    extra = set(extra)
    return [k for k in env if is_secret_name(k, extra)]


def masked(env: Mapping[str, Any], extra: Iterable[str] = ()) -> dict[str, Any]:
    """`env` with every secret's value replaced by MASK (a reference dict shown as one)."""
    extra = set(extra)
    return {
        k: (MASK if is_secret_name(k, extra) or isinstance(v, dict) else v) for k, v in env.items()
    }


def ref(name: str, source: str) -> dict[str, str]:
    """What the history keeps of a secret: its name and where its value came from
    ("env": this process's environment / the command line, "profile", "hosts")."""
    return {"name": name, "from": source}


def is_ref(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and isinstance(value.get("name"), str)
        and isinstance(value.get("from"), str)
    )


def env_for_record(
    env: Mapping[str, str], sources: Mapping[str, str], extra: Iterable[str] = ()
) -> dict[str, Any]:
    """env_vars for the history file: plain values as they are, secrets as references."""
    extra = set(extra)
    return {
        k: (ref(k, sources.get(k, "env")) if is_secret_name(k, extra) else v)
        for k, v in env.items()
    }


def describe(name: str, value: Any) -> str:
    """One env entry for a screen: secrets never show their value."""
    if is_ref(value):
        return f"{name}=<secret from ${value['name']}>"
    return f"{name}={value}"


class MissingSecret(VerlTuiError, title="secret not set", kind="bad_input"):
    def __init__(self, names: list[str]):
        self.names = names
        super().__init__(", ".join(names))


def resolve(
    env: Mapping[str, Any],
    environ: Mapping[str, str] | None = None,
    fallback: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """A recorded env_vars back to values: references from the current environment (then
    `fallback`, e.g. hosts.yaml's ray.env); MissingSecret naming what is set nowhere."""
    environ = os.environ if environ is None else environ
    fallback = fallback or {}
    out: dict[str, str] = {}
    missing: list[str] = []
    for k, v in env.items():
        if is_ref(v):
            name = v["name"]
            if name in environ:
                out[k] = environ[name]
            elif name in fallback:
                out[k] = fallback[name]
            else:
                missing.append(name)
        else:
            out[k] = str(v)
    if missing:
        raise MissingSecret(missing)
    return out
