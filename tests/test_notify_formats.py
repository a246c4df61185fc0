"""hosts.yaml notify: `format:` (tui/supervisor/webhook_formats.py) against loopback servers
that stand in for Slack, Discord and ntfy: each checks the fields its service requires and
answers as the service does when one is missing (Slack 400 `no_text`; Discord 400 with its JSON
error 50006; ntfy 200 with the event as JSON). The real notifier is driven from a real
hosts.yaml read by the real loader, and `verl-tui watch --once` sends a job's end through it."""

from __future__ import annotations

import email.header
import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from test_notify import Hook

from tui.config.hosts import load_inventory
from tui.config.notify import DEFAULT_EVENTS
from tui.config.notify import FORMATS as CONFIG_FORMATS
from tui.config.yamlfile import ConfigError
from tui.supervisor.events import Decision
from tui.supervisor.notify import Notifier
from tui.supervisor.webhook_formats import FORMATS

Answer = tuple[int, str, bytes]  # status, content type, body


class Service:
    """A loopback HTTP server standing in for a notification service: `answer(headers, body)`
    says what the service would answer; every request is kept (path, headers, body)."""

    def __init__(self, answer: Callable[[dict[str, str], bytes], Answer]):
        self.requests: list[tuple[str, dict[str, str], bytes]] = []
        service = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                headers = {k.lower(): v for k, v in self.headers.items()}
                service.requests.append((self.path, headers, body))
                status, ctype, out = answer(headers, body)
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *_args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _json_or_none(body: bytes) -> dict | None:
    try:
        value = json.loads(body)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def slack(headers: dict[str, str], body: bytes) -> Answer:
    """Slack's incoming webhook: JSON with a non-empty `text`, else 400 `no_text`."""
    doc = _json_or_none(body)
    if doc is None or not headers.get("content-type", "").startswith("application/json"):
        return 400, "text/plain", b"invalid_payload"
    if not isinstance(doc.get("text"), str) or not doc["text"].strip():
        return 400, "text/plain", b"no_text"
    return 200, "text/plain", b"ok"


def discord(headers: dict[str, str], body: bytes) -> Answer:
    """Discord's execute webhook: `content` of 1..2000 UTF-16 units, else its JSON errors;
    204 without `?wait=true`."""
    doc = _json_or_none(body)
    if doc is None:
        return (
            400,
            "application/json",
            b'{"message": "Cannot send an empty message", "code": 50006}',
        )
    content = doc.get("content")
    if not isinstance(content, str) or not content.strip():
        return (
            400,
            "application/json",
            b'{"message": "Cannot send an empty message", "code": 50006}',
        )
    if len(content.encode("utf-16-le")) // 2 > 2000:
        err = {"message": "Invalid Form Body", "code": 50035}
        return 400, "application/json", json.dumps(err).encode()
    return 204, "application/json", b""


def ntfy(headers: dict[str, str], body: bytes) -> Answer:
    """ntfy's publish: the body is the message (UTF-8), Title/Priority/Tags headers (RFC 2047
    words decoded); 200 with the event as JSON."""
    title = str(email.header.make_header(email.header.decode_header(headers.get("title", ""))))
    event = {
        "id": "x1",
        "event": "message",
        "topic": "rl-alerts",
        "title": title,
        "message": body.decode(),
        "priority": int(headers.get("priority", "3")),
        "tags": headers.get("tags", "").split(","),
        "attachment": len(body) > 4096,  # ntfy turns a longer body into an attachment
    }
    return 200, "application/json", json.dumps(event).encode()


@pytest.fixture
def services():
    made = {"slack": Service(slack), "discord": Service(discord), "ntfy": Service(ntfy)}
    raw = Hook()
    yield made, raw
    raw.close()
    for s in made.values():
        s.close()


def hosts_yaml(folder: Path, notify: str) -> Path:
    path = folder / "hosts.yaml"
    path.write_text(f"cluster: prod\n{notify}hosts:\n  - name: localhost\n    transport: local\n")
    return path


HOSTILE = "ended FAILED: <@everyone> & \x1b[31mred\x1b[0m\nsecond line\x07 λ"


def decision(kind: str = "job-failed", sid: str = "grpo-1", message: str = HOSTILE) -> Decision:
    return Decision(kind, sid, message, details={"status": "FAILED"})


def test_the_format_table_matches_the_config():
    assert set(FORMATS) == set(CONFIG_FORMATS)


async def test_each_format_is_what_its_service_takes(tmp_path, services):
    made, raw = services
    path = hosts_yaml(
        tmp_path,
        "notify:\n"
        f"  - {{webhook: '{made['slack'].url}/services/T0/B0/X', format: slack}}\n"
        f"  - {{webhook: '{made['discord'].url}/api/webhooks/1/tok', format: discord}}\n"
        f"  - {{webhook: '{made['ntfy'].url}/rl-alerts', format: ntfy}}\n"
        f"  - webhook: {raw.url}\n",  # no format: raw, as before formats existed
    )
    inv = load_inventory(path)
    assert inv.notify is not None and [t.format for t in inv.notify] == [
        "slack", "discord", "ntfy", "raw"
    ]  # fmt: skip
    reported: list[Decision] = []
    n = Notifier(inv.notify, inv.cluster, report=reported.append)
    sent = decision()
    await n(sent)
    assert not reported, [d.message for d in reported]
    assert n.sent == 4

    path_, headers, body = made["slack"].requests[0]
    text = json.loads(body)["text"]
    assert path_ == "/services/T0/B0/X"
    assert text.startswith("job-failed grpo-1 on prod: ended FAILED: ")
    assert "&lt;@everyone&gt; &amp; " in text  # Slack's control characters escaped
    assert "\x1b" not in text and "\n" not in text and "\x07" not in text and "λ" in text

    _p, headers, body = made["discord"].requests[0]
    doc = json.loads(body)
    assert doc["content"].startswith("job-failed grpo-1 on prod: ended FAILED: <@everyone>")
    assert doc["allowed_mentions"] == {"parse": []}  # the name pings no one
    assert doc["username"] == "verl-tui" and "\x1b" not in doc["content"]

    path_, headers, body = made["ntfy"].requests[0]
    assert path_ == "/rl-alerts" and headers["content-type"].startswith("text/plain")
    assert headers["title"] == "verl-tui prod: job-failed grpo-1"
    assert headers["priority"] == "4" and headers["tags"] == "x"
    message = body.decode()
    assert message.startswith("job-failed grpo-1 on prod: ended FAILED: <@everyone> & ")
    assert "\n" not in message and "\x1b" not in message

    assert raw.bodies[0]["event"] == "job-failed" and raw.bodies[0]["message"] == sent.message
    assert raw.bodies[0]["cluster"] == "prod" and raw.bodies[0]["source"] == "verl-tui"


async def test_the_raw_payload_is_refused_as_the_services_refuse_it(tmp_path, services):
    """Why format: exists: the JSON payload has no `text` or `content`. The refusal is one line
    with the service's own answer."""
    made, _raw = services
    reported: list[Decision] = []
    path = hosts_yaml(
        tmp_path,
        f"notify:\n  - webhook: {made['slack'].url}/s\n  - webhook: {made['discord'].url}/d\n",
    )
    inv = load_inventory(path)
    await Notifier(inv.notify, inv.cluster, report=reported.append)(decision())
    msgs = sorted(d.message for d in reported)
    assert len(msgs) == 2 and n_lines(msgs) == 2
    ends = (
        '(raw): HTTP 400 Bad Request: {"message": "Cannot send an empty message", "code": 50006}',
        "(raw): HTTP 400 Bad Request: no_text",
    )
    assert sorted(e for e in ends for m in msgs if m.endswith(e)) == sorted(ends)
    slack_line = next(m for m in msgs if m.endswith("no_text"))
    assert slack_line.startswith(
        "notifier failed for job-failed: notify[0] webhook http://127.0.0.1:"
    )
    assert all(d.details.get("notifier_failure") for d in reported)


def n_lines(msgs: list[str]) -> int:
    return sum(1 + m.count("\n") for m in msgs)


async def test_long_and_wide_messages_stay_within_each_limit(tmp_path, services):
    made, _raw = services
    path = hosts_yaml(
        tmp_path,
        "notify:\n"
        f"  - {{webhook: '{made['slack'].url}/s', format: slack}}\n"
        f"  - {{webhook: '{made['discord'].url}/d', format: discord}}\n"
        f"  - {{webhook: '{made['ntfy'].url}/t', format: ntfy}}\n",
    )
    inv = load_inventory(path)
    reported: list[Decision] = []
    n = Notifier(inv.notify, inv.cluster, report=reported.append)
    # Emoji: two UTF-16 units (Discord's count) and four UTF-8 bytes (ntfy's) each.
    # The message is one line of 400 cells already (Decision); a job id from the head is not.
    await n(decision(message="x", sid="&" * 1001 + "🔥" * 5000))
    assert not reported, [d.message for d in reported]
    slack_text = json.loads(made["slack"].requests[0][2])["text"]
    assert 3990 <= len(slack_text) <= 4000 and slack_text.endswith("&amp;…")  # no half escape
    content = json.loads(made["discord"].requests[0][2])["content"]
    assert 1990 <= len(content.encode("utf-16-le")) // 2 <= 2000 and content.endswith("…")
    _p, headers, body = made["ntfy"].requests[0]
    assert 4090 <= len(body) <= 4096 and body.decode().endswith("…")  # cut on a character
    title = str(email.header.make_header(email.header.decode_header(headers["title"])))
    assert len(title) == 200 and title.endswith("&…") and len(headers["title"]) < 1024


async def test_ntfy_headers_stay_ascii_and_the_title_survives(tmp_path, services):
    made, _raw = services
    path = hosts_yaml(tmp_path, f"notify:\n  webhook: {made['ntfy'].url}/t\n  format: ntfy\n")
    inv = load_inventory(path)
    reported: list[Decision] = []
    n = Notifier(inv.notify, inv.cluster, report=reported.append)
    await n(decision("job-end", sid="grpo-λ-🔥\r\nX-Injected: 1", message="SUCCEEDED"))
    assert not reported, [d.message for d in reported]
    _p, headers, _body = made["ntfy"].requests[0]
    assert all(v.isascii() for v in headers.values())
    assert "x-injected" not in headers  # a line break in the id does not start a header
    title = str(email.header.make_header(email.header.decode_header(headers["title"])))
    assert title == "verl-tui prod: job-end grpo-λ-🔥 X-Injected: 1"
    assert headers["priority"] == "3" and headers["tags"] == "white_check_mark"


async def test_each_target_gets_its_own_events(tmp_path, services):
    made, raw = services
    path = hosts_yaml(
        tmp_path,
        "notify:\n"
        f"  - webhook: {made['slack'].url}/s\n    format: slack\n    events: [job-failed]\n"
        f"  - webhook: {raw.url}\n    events: [job-end, queue-start]\n",
    )
    inv = load_inventory(path)
    shown: list[str] = []
    n = Notifier(inv.notify, inv.cluster, show=lambda line, _sev: shown.append(line))
    for kind in ("job-failed", "job-end", "queue-start", "retry"):
        await n(decision(kind, message=f"{kind} happened"))
    slack_texts = [json.loads(b)["text"] for _p, _h, b in made["slack"].requests]
    assert slack_texts == ["job-failed grpo-1 on prod: job-failed happened"]
    assert [b["event"] for b in raw.bodies] == ["job-end", "queue-start"]
    assert len(shown) == 3  # the cockpit shows every target's events; retry is nobody's


def test_a_wrong_format_is_one_line_naming_the_key(tmp_path):
    cases = {  # line numbers count the file's first line, cluster: prod
        "notify:\n  webhook: https://hooks.slack.com/x\n  format: teams\n": (
            4,
            "notify.format: unknown format 'teams': one of raw, slack, discord, ntfy",
        ),
        "notify:\n  - {webhook: 'https://a/x', format: slack}\n  - webhook: https://b/y\n"
        "    format: [slack]\n": (5, "notify[1].format: unknown format list: one of raw, "),
        "notify:\n  command: [/bin/true]\n  format: ntfy\n": (
            4,
            "notify.format: ntfy shapes a webhook's body, and no webhook: is set",
        ),
        "notify: slack\n": (2, "notify: must be a mapping (command:, webhook:, …) or a list"),
        "notify:\n  - webhook: https://a/x\n    formt: slack\n": (
            4,
            "notify[0].formt: unknown key (did you mean 'format'?)",
        ),
    }
    for text, (line, words) in cases.items():
        path = hosts_yaml(tmp_path, text)
        with pytest.raises(ConfigError) as err:
            load_inventory(path)
        got = str(err.value)
        assert got.startswith(f"{path}:{line}: ") and words in got and "\n" not in got, got


def test_the_documented_examples_load(tmp_path):
    """hosts.example.yaml's commented notify: block and the docs page's example, as a user
    would paste them, load through the real loader."""
    root = Path(__file__).parents[1]
    example = root.joinpath("hosts.example.yaml").read_text()
    start = example.index("# notify:\n")
    block = example[start : example.index("\nhosts:\n", start)]
    uncommented = "\n".join(line.removeprefix("# ") for line in block.splitlines()) + "\n"
    inv = load_inventory(hosts_yaml(tmp_path, uncommented))
    assert inv.notify is not None
    assert [(t.format, t.events) for t in inv.notify][:2] == [
        ("slack", DEFAULT_EVENTS),  # the example's list is the default, as it says
        ("ntfy", ("job-failed",)),
    ]
    assert inv.notify[2].command == ("/usr/local/bin/page-me", "--channel", "rl")

    page = root.joinpath("docs", "runs-that-heal.md").read_text()
    section = page[page.index("## Notifications") :]
    snippet = section[section.index("```yaml\n") + 8 : section.index("```\n", 10)]
    inv = load_inventory(hosts_yaml(tmp_path, snippet))
    assert [t.format for t in inv.notify or ()] == ["slack", "discord", "ntfy", "raw"]


def test_watch_once_sends_a_job_end_to_slack(tmp_path, monkeypatch, services):
    """`verl-tui watch --once` (the real CLI, the local transport, a loopback dashboard that
    lists the job FAILED): the supervisor's job-failed decision reaches the Slack stand-in as
    `text`, and a Discord target given the raw payload is printed as one refused line."""
    from test_faults_http import NODES, Fake, _cli, js, local_hosts

    from tui.jobs.history import JobHistory, JobRecord

    made, _raw = services
    sid = "vt-fmt-1"
    now = time.time()
    job = {
        "type": "SUBMISSION",
        "submission_id": sid,
        "status": "FAILED",
        "entrypoint": "python train.py",
        "message": "Job entrypoint command failed with exit code 1",
        "start_time": int(now * 1000) - 5000,
        "end_time": int(now * 1000),
    }
    answers = {"/api/jobs/": [job], "/api/v0/nodes": NODES}
    with Fake(lambda m, p, b: js(answers.get(p.split("?")[0], {}))) as fake:
        hosts = local_hosts(tmp_path, fake.port)
        text = hosts.read_text().replace("cluster: faults", "cluster: fmt")
        hosts.write_text(
            text + "notify:\n"
            f"  - {{webhook: '{made['slack'].url}/services/T/B/X', format: slack}}\n"
            f"  - {{webhook: '{made['discord'].url}/api/webhooks/1/t'}}\n"
        )
        monkeypatch.setenv("XDG_STATE_HOME", str(hosts.parent / "state"))  # _cli's
        JobHistory("fmt").save(JobRecord(sid, "fmt", now - 10, "python train.py", kind="raw"))
        out = _cli(hosts, "watch", "--once")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Traceback" not in out.stdout + out.stderr
    texts = [json.loads(b)["text"] for _p, _h, b in made["slack"].requests]
    assert texts == [
        f"job-failed {sid} on fmt: FAILED: Job entrypoint command failed with exit code 1"
    ]
    refused = [line for line in out.stdout.splitlines() if "notifier failed" in line]
    assert len(refused) == 1 and refused[0].endswith(
        '(raw): HTTP 400 Bad Request: {"message": "Cannot send an empty message", "code": 50006}'
    ), out.stdout
