"""Waiting on a running app under Pilot: a condition, never a fixed sleep."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


async def until(
    pilot, predicate: Callable[[], bool], timeout: float = 60.0, what: str = ""
) -> float:
    """Let the app run until `predicate()` holds; the seconds it took. AssertionError naming
    `what` past `timeout`."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    while not predicate():
        assert loop.time() - start < timeout, f"timed out waiting for {what or predicate}"
        await pilot.pause(0.05)
    return loop.time() - start
