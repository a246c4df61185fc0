"""Notifications (tui/supervisor/notify.py): a real command gets the JSON payload on stdin, a
real local webhook (http.server in a thread) gets it POSTed; a failing, hanging or missing
notifier and a webhook answering 500, redirecting or not listening are shown as error
decisions, never raised; hosts.yaml's notify: is checked with file:line errors."""

from __future__ import annotations

import json
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from tui.config.hosts import parse_inventory
from tui.config.notify import NotifyOptions
from tui.config.yamlfile import ConfigError
from tui.supervisor.events import Decision
from tui.supervisor.notify import Notifier


class Hook:
    """A real HTTP server on 127.0.0.1: records POST bodies; `status`/`location` shape replies."""

    def __init__(self, status: int = 200, location: str | None = None):
        self.bodies: list[dict] = []
        self.paths: list[str] = []
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                hook.bodies.append(json.loads(self.rfile.read(n)))
                hook.paths.append(self.path)
                self.send_response(status)
                if location:
                    self.send_header("Location", location)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_GET(self) -> None:
                hook.paths.append("GET " + self.path)
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_args) -> None:
                pass

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook/secret-path"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def hook():
    h = Hook()
    yield h
    h.close()


def recorder(tmp_path: Path) -> tuple[tuple[str, ...], Path]:
    """A notify command: a real program that appends its stdin (one payload) to a file."""
    out = tmp_path / "payloads.jsonl"
    script = tmp_path / "record.py"
    script.write_text(
        "import sys\n"
        f"with open({str(out)!r}, 'a') as f:\n"
        "    f.write(sys.stdin.read().strip() + '\\n')\n"
    )
    return (sys.executable, str(script)), out


def decision(kind: str = "job-failed", sid: str | None = "job-1") -> Decision:
    return Decision(kind, sid, "ended FAILED: NCCL watchdog timeout", details={"status": "FAILED"})


async def test_command_and_webhook_get_the_payload(tmp_path, hook):
    argv, out = recorder(tmp_path)
    shown: list[tuple[str, str]] = []
    bells: list[int] = []
    reported: list[Decision] = []
    n = Notifier(
        NotifyOptions(command=argv, webhook=hook.url, timeout=10),
        "prod",
        show=lambda line, sev: shown.append((line, sev)),
        bell=lambda: bells.append(1),
        report=reported.append,
    )
    for d in (decision("job-failed"), decision("queue-start", "sweep-lr1e-6"), decision("job-end")):
        await n(d)
    await n(decision("queue-wait"))  # not an event to notify: nothing anywhere
    got = [json.loads(line) for line in out.read_text().splitlines()]
    assert [p["event"] for p in got] == ["job-failed", "queue-start", "job-end"]
    assert got[1]["submission_id"] == "sweep-lr1e-6" and got[0]["cluster"] == "prod"
    assert got[0]["message"] == "ended FAILED: NCCL watchdog timeout"
    assert got[0]["details"] == {"status": "FAILED"} and got[0]["source"] == "verl-tui"
    assert hook.bodies == got  # the same payloads, POSTed as JSON
    assert hook.paths == ["/hook/secret-path"] * 3
    assert [sev for _l, sev in shown] == ["error", "information", "information"]
    assert "queue-start sweep-lr1e-6" in shown[1][0]
    assert len(bells) == 3 and not reported and not n.failures and n.sent == 6


async def test_failing_notifiers_are_reported_not_raised(tmp_path):
    shown: list[tuple[str, str]] = []
    reported: list[Decision] = []
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # nothing listens there now
    n = Notifier(
        NotifyOptions(
            command=(
                sys.executable,
                "-c",
                "import sys; sys.stderr.write('no route\\n'); sys.exit(3)",
            ),
            webhook=f"http://127.0.0.1:{port}/x",
            timeout=5,
        ),
        "prod",
        show=lambda line, sev: shown.append((line, sev)),
        report=reported.append,
    )
    await n(decision())  # returns: nothing raised
    msgs = sorted(d.message for d in reported)
    assert len(reported) == 2 and all(d.kind == "error" for d in reported)
    assert "exit status 3: no route" in msgs[0]
    assert "webhook http://127.0.0.1:" in msgs[1] and "/x" not in msgs[1]  # path kept private
    assert all(d.submission_id == "job-1" for d in reported)
    assert [sev for _l, sev in shown].count("warning") == 2
    # A notifier's own failure is never sent on again (no loop), but it is shown.
    await n(reported[0])
    assert len(reported) == 2


async def test_hanging_missing_and_http_errors(tmp_path):
    reported: list[Decision] = []
    hanging = Notifier(
        NotifyOptions(command=(sys.executable, "-c", "import time; time.sleep(30)"), timeout=0.5),
        "c",
        report=reported.append,
    )
    await hanging(decision())
    missing = Notifier(
        NotifyOptions(command=(str(tmp_path / "no-such-program"),)), "c", report=reported.append
    )
    await missing(decision())
    five = Hook(status=500)
    moved = Hook(status=302, location="http://127.0.0.1:9/elsewhere")
    try:
        for h in (five, moved):
            await Notifier(NotifyOptions(webhook=h.url), "c", report=reported.append)(decision())
    finally:
        five.close()
        moved.close()
    msgs = [d.message for d in reported]
    assert "no exit within 0.5 s (killed)" in msgs[0]
    assert "no-such-program" in msgs[1] and "No such file" in msgs[1]
    assert "HTTP 500" in msgs[2]
    assert "HTTP 302" in msgs[3] and "not followed" in msgs[3]
    creds = Notifier(
        NotifyOptions(webhook="http://bot:hunter2@127.0.0.1:9/T0/secret"),
        "c",
        report=reported.append,
    )
    await creds(decision())
    assert "webhook http://127.0.0.1:9/…" in reported[-1].message
    assert "hunter2" not in reported[-1].message and "secret" not in reported[-1].message
    assert moved.paths == ["/hook/secret-path"]  # the redirect target was never asked


def test_hosts_yaml_notify_key():
    inv = parse_inventory(
        "notify:\n  command: [/usr/bin/logger, -t, verl]\n  webhook: https://hooks.example/x\n"
        "  timeout: 3\nhosts:\n  - name: a\n"
    )
    assert inv.notify is not None and len(inv.notify) == 1  # one mapping: one target
    target = inv.notify[0]
    assert target.command == ("/usr/bin/logger", "-t", "verl") and target.format == "raw"
    assert target.webhook == "https://hooks.example/x" and target.timeout == 3
    assert "queue-start" in target.events
    assert parse_inventory("hosts:\n  - name: a\n").notify is None
    bad = {
        "notify:\n  webhook: file:///etc/passwd\nhosts:\n  - name: a\n": (
            2,
            "notify.webhook: webhook must be an http:// or https:// URL",
        ),
        "notify:\n  command: 'rm -rf /'\nhosts:\n  - name: a\n": (2, "notify.command"),
        "notify:\n  command: []\nhosts:\n  - name: a\n": (2, "notify.command"),
        "notify:\n  timeout: 0\nhosts:\n  - name: a\n": (2, "notify.timeout"),
        "notify:\n  events: [everything]\nhosts:\n  - name: a\n": (2, "notify.events"),
        "notify:\n  webhok: http://x\nhosts:\n  - name: a\n": (2, "did you mean 'webhook'"),
    }
    for text, (line, words) in bad.items():
        with pytest.raises(ConfigError) as err:
            parse_inventory(text)
        assert f"<hosts.yaml>:{line}:" in str(err.value) and words in str(err.value), text
