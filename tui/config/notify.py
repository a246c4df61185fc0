"""hosts.yaml `notify:`: where the supervisor's job events go besides the cockpit's line and the
terminal bell (tui/supervisor/notify.py sends them). One target, or a list of them, each with
its own events:

    notify:
      command: [/usr/local/bin/page-me, --channel, rl]   # argv, no shell; JSON on stdin
      webhook: https://hooks.example.com/T000/B000       # POST
      format: raw                                        # the webhook's body: raw (the JSON
                                                         # payload) | slack | discord | ntfy
      timeout: 10                                        # seconds, each
      events: [job-end, job-failed, job-stalled, job-unhealthy, retry, queue-start]  # the default

    notify:
      - {webhook: https://hooks.slack.com/services/T0/B0/X, format: slack}
      - {webhook: https://ntfy.sh/rl-alerts, format: ntfy, events: [job-failed]}
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, get_args
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    WrapValidator,
    field_validator,
)

Event = Literal[
    "job-end",
    "job-failed",
    "job-stalled",
    "job-unhealthy",
    "retry",
    "no-retry",
    "queue-start",
    "error",
]
DEFAULT_EVENTS: tuple[Event, ...] = (
    "job-end",
    "job-failed",
    "job-stalled",
    "job-unhealthy",
    "retry",
    "queue-start",
)
# What a webhook's body is shaped for (tui/supervisor/webhook_formats.py builds each).
WebhookFormat = Literal["raw", "slack", "discord", "ntfy"]
FORMATS: tuple[str, ...] = get_args(WebhookFormat)
MAX_TARGETS = 32
_WORD_BAD_RE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


class NotifyOptions(BaseModel):
    """One notify target: a command and/or a webhook, the events it gets."""

    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=True)

    command: tuple[str, ...] | None = Field(default=None, min_length=1, max_length=64)
    webhook: str | None = None
    format: WebhookFormat = "raw"
    timeout: float = Field(default=10.0, gt=0, le=120, description="seconds per notifier")
    events: tuple[Event, ...] = DEFAULT_EVENTS
    # Whose jobs (tui/supervisor/notify.py owner_wanted): unset, this account's jobs and what
    # has no owner (the lease, the cluster, jobs not sent by verl-tui); `mine`, this account's
    # jobs only; `all`, every account's jobs and what has no owner; USER@HOST, that owner's.
    owner: str | None = Field(default=None, max_length=128)

    @field_validator("owner")
    @classmethod
    def _check_owner(cls, v: str | None) -> str | None:
        from tui.config.owner import check_owner

        if v is None or v in ("all", "mine"):
            return v
        return check_owner(v, "owner: mine, all or USER@HOST;")

    @field_validator("command")
    @classmethod
    def _check_command(cls, v: tuple[str, ...] | None) -> tuple[str, ...] | None:
        for word in v or ():
            if not word or len(word) > 4096 or _WORD_BAD_RE.search(word):
                raise ValueError("command words are non-empty one-line strings (an argv list)")
        return v

    @field_validator("webhook")
    @classmethod
    def _check_webhook(cls, v: str | None) -> str | None:
        if v is None:
            return None
        parts = urlsplit(v)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("webhook must be an http:// or https:// URL with a host")
        if _WORD_BAD_RE.search(v) or " " in v:
            raise ValueError("webhook must be one URL without spaces")
        try:
            parts.port  # noqa: B018 - raises on a port that is not a number in 0..65535
        except ValueError:
            raise ValueError("webhook has an invalid port") from None
        return v

    @field_validator("format", mode="before")
    @classmethod
    def _check_format(cls, v: object) -> object:
        # Pydantic's own message lists the values quoted and joined with "or"; this one reads
        # as the fix.
        if v not in FORMATS:
            shown = repr(v) if isinstance(v, str | int | float | bool) else type(v).__name__
            raise ValueError(f"unknown format {shown[:60]}: one of {', '.join(FORMATS)}")
        return v

    @field_validator("format")
    @classmethod
    def _format_needs_webhook(cls, v: str, info: ValidationInfo) -> str:
        # Checked here, not on the whole entry, so the error's line is the format: key's.
        if v != "raw" and info.data.get("webhook") is None:
            raise ValueError(
                f"{v} shapes a webhook's body, and no webhook: is set (a command "
                "always gets the raw JSON payload)"
            )
        return v


def _one_or_list(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    """`notify:` as one mapping (its errors keep the key path notify.KEY, so file:line points
    at the key) or as a list of them (notify[i].KEY)."""
    if isinstance(value, dict):
        return (NotifyOptions.model_validate(value),)
    if not isinstance(value, list | tuple):
        raise ValueError("must be a mapping (command:, webhook:, …) or a list of them")
    return handler(value)


# hosts.yaml's `notify:` as loaded: every target, in the file's order.
NotifyTargets = Annotated[
    tuple[NotifyOptions, ...], Field(max_length=MAX_TARGETS), WrapValidator(_one_or_list)
]
