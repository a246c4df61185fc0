"""hosts.yaml `notify:`: where the supervisor's job events go besides the cockpit's line and the
terminal bell (tui/supervisor/notify.py sends them).

    notify:
      command: [/usr/local/bin/page-me, --channel, rl]   # argv, no shell; JSON on stdin
      webhook: https://hooks.example.com/T000/B000       # POST application/json
      timeout: 10                                        # seconds, each
      events: [job-end, job-failed, retry, queue-start]  # the default
"""

from __future__ import annotations

import re
from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

Event = Literal["job-end", "job-failed", "retry", "no-retry", "queue-start", "error"]
DEFAULT_EVENTS: tuple[Event, ...] = ("job-end", "job-failed", "retry", "queue-start")
_WORD_BAD_RE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


class NotifyOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=True)

    command: tuple[str, ...] | None = Field(default=None, min_length=1, max_length=64)
    webhook: str | None = None
    timeout: float = Field(default=10.0, gt=0, le=120, description="seconds per notifier")
    events: tuple[Event, ...] = DEFAULT_EVENTS

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
