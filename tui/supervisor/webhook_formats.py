"""What a notify webhook's request looks like for each hosts.yaml `format:`: one table, name →
body builder, content type, the statuses that mean delivered. tui/supervisor/notify.py sends
every format the same way (tui/transport/http.py); only the body and headers differ here.

What each service documents (and answers when it is not given):
- raw: the JSON payload (notify.payload), as before formats existed; any 2xx.
- slack (incoming webhook): JSON with `text` (required: without it Slack answers 400
  `no_text`); `&`, `<`, `>` escaped as Slack asks; 200.
- discord (execute webhook): JSON with `content`, at most 2000 characters (without it 400, code
  50006 "Cannot send an empty message"); `username` optional; mentions turned off so a job
  named `@everyone` pings no one; 204 (200 with `?wait=true`).
- ntfy: the message as the plain-text body of a POST to the topic URL (up to 4096 bytes stays a
  message), `Title`, `Priority` (1-5) and `Tags` headers; 200 with the event as JSON. Header
  values are ASCII: a non-ASCII title goes as an RFC 2047 encoded word, which ntfy decodes.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from tui.sanitize import one_line

Payload = Mapping[str, Any]  # notify.payload(): event, submission_id, cluster, message, …

SLACK_TEXT_MAX = 4000  # characters, escapes counted; Slack truncates text past that
DISCORD_CONTENT_MAX = 2000  # characters (UTF-16 code units, as Discord counts them)
NTFY_BODY_MAX = 4096  # bytes: a longer body becomes an attachment instead of a message
TITLE_MAX = 200  # characters of an ntfy title
USERNAME = "verl-tui"
# ntfy priorities (1 min … 5 max) and tags (emoji short codes) per event.
NTFY_PRIORITY = {
    "job-failed": 4,
    "job-stalled": 4,
    "job-unhealthy": 4,
    "no-retry": 4,
    "error": 4,
    "retry": 3,
    "job-end": 3,
}
NTFY_TAGS = {
    "job-end": "white_check_mark",
    "job-failed": "x",
    "job-stalled": "hourglass",
    "job-unhealthy": "chart_with_downwards_trend",
    "retry": "repeat",
    "no-retry": "warning",
    "queue-start": "arrow_forward",
    "error": "warning",
}


_CUT_ESCAPE_RE = re.compile(r"&[a-z]{0,3}…$")


def _chars(s: str) -> int:
    return len(s)


def _utf16_units(s: str) -> int:
    return len(s.encode("utf-16-le")) // 2


def _utf8_bytes(s: str) -> int:
    return len(s.encode())


def bounded(text: str, limit: int, size: Callable[[str], int] = _chars) -> str:
    """`text` cut so that size(result) <= limit, an ellipsis marking a cut."""
    if size(text) <= limit:
        return text
    room = limit - size("…")
    used = 0
    for i, ch in enumerate(text):
        used += size(ch)
        if used > room:
            return text[:i] + "…"
    return text  # not reached: the whole text was over the limit


def summary(p: Payload) -> str:
    """The one line a person reads: event, job, cluster, message; no control characters."""
    job = f" {p['submission_id']}" if p.get("submission_id") else ""
    return one_line(f"{p['event']}{job} on {p['cluster']}: {p['message']}")


def _json(value: object) -> bytes:
    return json.dumps(value, ensure_ascii=False).encode()


def raw_body(p: Payload) -> tuple[bytes, dict[str, str]]:
    return json.dumps(dict(p)).encode(), {}


def slack_body(p: Payload) -> tuple[bytes, dict[str, str]]:
    text = summary(p).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    # Bounded after escaping; an escape the cut went through goes whole.
    text = _CUT_ESCAPE_RE.sub("…", bounded(text, SLACK_TEXT_MAX))
    return _json({"text": text}), {}


def discord_body(p: Payload) -> tuple[bytes, dict[str, str]]:
    content = bounded(summary(p), DISCORD_CONTENT_MAX, _utf16_units)
    body = {"content": content, "username": USERNAME, "allowed_mentions": {"parse": []}}
    return _json(body), {}


def header_value(text: str) -> str:
    """`text` as an HTTP header value: one line, ASCII as is, otherwise an RFC 2047 encoded
    word (http.client sends latin-1 only, and ntfy reads UTF-8 titles this way)."""
    line = one_line(text)
    if line.isascii():
        return line
    return "=?utf-8?b?" + base64.b64encode(line.encode()).decode("ascii") + "?="


def ntfy_body(p: Payload) -> tuple[bytes, dict[str, str]]:
    event = str(p["event"])
    job = f" {p['submission_id']}" if p.get("submission_id") else ""
    title = bounded(one_line(f"verl-tui {p['cluster']}: {event}{job}"), TITLE_MAX)
    headers = {
        "Title": header_value(title),
        "Priority": str(NTFY_PRIORITY.get(event, 3)),
        "Tags": NTFY_TAGS.get(event, "bell"),
    }
    return bounded(summary(p), NTFY_BODY_MAX, _utf8_bytes).encode(), headers


@dataclass(frozen=True)
class BodyFormat:
    name: str
    build: Callable[[Payload], tuple[bytes, dict[str, str]]]  # body, headers besides these
    content_type: str
    delivered: Collection[int]  # the statuses that mean the service took it


FORMATS: dict[str, BodyFormat] = {
    f.name: f
    for f in (
        BodyFormat("raw", raw_body, "application/json", range(200, 300)),
        BodyFormat("slack", slack_body, "application/json", (200,)),
        BodyFormat("discord", discord_body, "application/json", (200, 204)),
        BodyFormat("ntfy", ntfy_body, "text/plain; charset=utf-8", (200,)),
    )
}
