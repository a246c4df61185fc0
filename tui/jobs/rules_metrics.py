"""What the cockpit needs from a job's config to chart its metrics: verl's `console` logger (its
step lines in the driver log) or its `file` logger (one JSON line per step, read over SSH:
tui/archive/metrics_file.py). With neither, the metrics view, `verl-tui metrics` and the
training-health alerts have nothing to read."""

from __future__ import annotations

from tui.jobs.rules_base import Problem, _Cfg

READABLE_LOGGERS = ("console", "file")


def metrics_logger_rules(c: _Cfg, out: list[Problem]) -> None:
    logger = c.get("trainer.logger")
    if logger is None:
        return  # not in this config (another entry point's): nothing to say
    loggers = [logger] if isinstance(logger, str) else [str(x) for x in logger or []]
    if not any(name in loggers for name in READABLE_LOGGERS):
        shown = ", ".join(loggers) or "nothing"
        out.append(
            Problem(
                "trainer.logger",
                f"logs to {shown} only: the cockpit's metrics and health alerts read console "
                "or file; add file (e.g. trainer.logger=[console,file])",
                "warn",
            )
        )
