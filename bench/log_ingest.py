#!/usr/bin/env python3
"""Log ingest: a million realistic log lines into the job log pane while keys are pressed.

A small App holding one LogPane runs headless (`run_test`, 160x50). Before the clock starts the
log is generated (seeded): verl `step:N - key:value …` metric lines, Ray-prefixed worker lines
with ANSI colours, vLLM INFO lines, NCCL INFO lines, WARNINGs, tqdm progress lines rewritten
with carriage returns, and now and then a traceback ending in a known failure (CUDA OOM, NCCL
timeout) — ~100–150 bytes a line. A search is active (as if the user had typed `/`), so the
match list is kept current during ingest too.

Two asyncio tasks then run at once:
  feeder  pane.append(chunk) for every chunk (--chunk-kb, default 16), yielding to the loop
          after each one, as fast as the loop allows.
  keys    every 50 ms a key event (n, g, G, w, w, e, N, F, …) is posted to the app, as a
          terminal would deliver it; the time from posting to the end of its action is the
          key latency ("handled"), and to the next screen refresh after it ("drawn").
After the last chunk the bench presses F (follow) and stops the clock when the view has drawn
the store's last line: lines/s = lines / (that time − start).

Memory: VmRSS (from /proc/self/status, after gc) before the first chunk and after the last,
as MB per million lines.

    .venv/bin/python bench/log_ingest.py [--lines 1000000] [--chunk-kb 16] [--profile]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import random
import sys
import time
from pathlib import Path

from benchlib import code_version, pct

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

RESULTS = ROOT / "bench" / "results"
GOAL_LINES_S, GOAL_KEY_MS, GOAL_MB_PER_M = 100_000, 100.0, 50.0
KEYS = ("n", "g", "G", "w", "w", "e", "N", "F", "h", "f", "f", "F")
KEY_ACTIONS = (
    "action_next_match",
    "action_top",
    "action_bottom",
    "action_toggle_wrap",
    "action_next_error",
    "action_follow",
    "action_next_hint",
    "action_toggle_filter",
)
CYAN, MAGENTA, GREEN, RESET = "\x1b[36m", "\x1b[35m", "\x1b[32m", "\x1b[0m"


# ------------------------------------------------------------------------------------------
# the log


def make_log(n_lines: int, seed: int = 7) -> list[str]:
    """About n_lines lines of a verl PPO job's driver log (what `ray job logs` shows)."""
    rnd = random.Random(seed)
    out: list[str] = []
    step = 0
    runner = f"{CYAN}(TaskRunner pid=31337, ip=10.0.0.11){RESET} "
    while len(out) < n_lines:
        r = rnd.random()
        pid = rnd.choice((40211, 40212, 40213, 40214))
        ip = rnd.choice(("10.0.0.11", "10.0.0.12"))
        worker = f"{MAGENTA}(WorkerDict pid={pid}, ip={ip}){RESET} "
        if r < 0.30:
            step += 1
            out.append(
                f"{runner}step:{step} - actor/entropy:{rnd.random():.4f} - actor/pg_loss:"
                f"{rnd.uniform(-0.1, 0.1):.4f} - critic/score/mean:{rnd.random():.3f} - "
                f"response_length/mean:{rnd.uniform(200, 900):.1f}"
            )
        elif r < 0.55:
            out.append(
                f"{worker}INFO 01-16 08:{rnd.randrange(60):02d}:{rnd.randrange(60):02d} "
                f"[model_runner.py:{rnd.randrange(2000)}] Graph capturing finished in "
                f"{rnd.randrange(40)} secs, took {rnd.random():.2f} GiB"
            )
        elif r < 0.70:
            out.append(
                f"{worker}[rollout] generated {rnd.randrange(4096)} sequences, mean "
                f"prompt {rnd.randrange(1024)} tokens, mean response "
                f"{rnd.randrange(2048)} tokens"
            )
        elif r < 0.80:
            done = rnd.randrange(256)
            bar = "█" * (done * 10 // 256)
            # tqdm redraws the line with \r before its newline
            out.append(
                f"Processed prompts:   0%|          | 0/256 [00:00<?, ?it/s]\r"
                f"Processed prompts: {done * 100 // 256:3d}%|{bar:<10}| {done}/256 "
                f"[00:{rnd.randrange(60):02d}<00:{rnd.randrange(60):02d}, "
                f"{rnd.uniform(1, 90):.2f}it/s]"
            )
        elif r < 0.88:
            out.append(
                f"{worker}node{ip[-1]}:{pid}:{pid + 17} [{rnd.randrange(8)}] NCCL INFO "
                f"Channel {rnd.randrange(32):02d}/0 : {rnd.randrange(8)}[0] -> "
                f"{rnd.randrange(8)}[1] via P2P/IPC/read"
            )
        elif r < 0.91:
            out.append(
                f"{worker}WARNING 01-16 08:48:22 [fsdp_workers.py:{rnd.randrange(900)}] "
                f"sequence length {rnd.randrange(9000)} exceeds the limit; truncated"
            )
        elif r < 0.9995:
            out.append(
                f"{GREEN}(main_task pid=31300){RESET} [validate] sample "
                f"{rnd.randrange(10**6)}: reward={rnd.random():.3f} "
                f"acc={rnd.random():.3f} len={rnd.randrange(4096)}"
            )
        else:
            pre = f"(WorkerDict pid={pid}, ip={ip}) "
            out += [
                pre + "Traceback (most recent call last):",
                pre + '  File "/opt/verl/verl/workers/fsdp_workers.py", line 612, in update_actor',
                pre + "    metrics = self.actor.update_policy(data=data)",
                pre + '  File "/opt/verl/verl/workers/actor/dp_actor.py", line 401, in '
                "update_policy",
                pre + "    loss.backward()",
                pre
                + rnd.choice(
                    (
                        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."
                        " GPU 3 has a total capacity of 79.10 GiB of which 1.02 GiB is free.",
                        "torch.distributed.DistBackendError: [Rank 3] Watchdog caught collective"
                        " operation timeout: WorkNCCL(SeqNum=88, OpType=ALLREDUCE, "
                        "Timeout(ms)=600000) ran for 600047 milliseconds before timing out.",
                    )
                ),
            ]
    return out[:n_lines]


def chunked(lines: list[str], chunk_bytes: int) -> list[str]:
    text = "\n".join(lines) + "\n"
    return [text[i : i + chunk_bytes] for i in range(0, len(text), chunk_bytes)]


# ------------------------------------------------------------------------------------------
# measuring


def rss_mb() -> float:
    gc.collect()
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


async def run(chunks: list[str], n_lines: int, key_interval: float) -> dict:
    # Textual only here: make_log/chunked also serve bench/log_classify.py, which needs no UI.
    from textual import events
    from textual.app import App, ComposeResult

    from tui.widgets.logview import LINE, LogPane, LogView

    class BenchApp(App):
        def compose(self) -> ComposeResult:
            yield LogPane("bench job", save_path="/dev/null")

        def on_mount(self) -> None:
            self.query_one(LogView).focus()

    app = BenchApp()
    result: dict = {}
    async with app.run_test(size=(160, 50)) as pilot:
        pane = app.query_one(LogPane)
        view = pane.log_view
        view.search("CUDA out of memory")  # a search the user typed: matches kept current
        await pilot.pause(0.2)

        # Instrument: when each key's action ends, when the screen is drawn after it, and
        # when the view first draws the store's last line.
        pending_keys: list[tuple[str, float]] = []
        handled: list[float] = []
        drawn: list[float] = []
        state = {"last_drawn": None, "target": n_lines - 1, "armed": False}

        def wrap_action(name: str) -> None:
            inner = getattr(view, name)

            def wrapped(*args, **kwargs):
                out = inner(*args, **kwargs)
                if pending_keys:
                    _key, t0 = pending_keys.pop(0)
                    t1 = time.perf_counter()
                    handled.append((t1 - t0) * 1000)
                    view.call_after_refresh(lambda: drawn.append((time.perf_counter() - t0) * 1000))
                return out

            setattr(view, name, wrapped)

        for name in KEY_ACTIONS:
            wrap_action(name)

        render_line = view.render_line

        def watched_render_line(y: int):
            strip = render_line(y)
            if state["armed"] and state["last_drawn"] is None:
                if view.wrap:
                    layout = view._wrap_layout()
                    item = layout[y][:2] if y < len(layout) else None
                else:
                    item = view._item(view.scroll_offset.y + y)
                if item == (LINE, state["target"]):
                    state["last_drawn"] = time.perf_counter()
            return strip

        view.render_line = watched_render_line

        rss0 = rss_mb()
        feeding = {"done": False}

        async def feeder() -> None:
            for chunk in chunks:
                pane.append(chunk)
                await asyncio.sleep(0)
            feeding["done"] = True

        async def keys() -> None:
            i = 0
            while not feeding["done"]:
                await asyncio.sleep(key_interval)
                key = KEYS[i % len(KEYS)]
                i += 1
                pending_keys.append((key, time.perf_counter()))
                app.post_message(events.Key(key, key))

        t0 = time.perf_counter()
        key_task = asyncio.create_task(keys())
        await feeder()
        t_fed = time.perf_counter()
        await key_task
        # Let the keys still queued be handled; then the whole log, following: filter off if
        # the last key left it on, and F.
        settle = time.perf_counter() + 5
        while pending_keys and time.perf_counter() < settle:
            await asyncio.sleep(0.001)
        state["armed"] = True
        for key in (("f",) if view.filter_on else ()) + ("F",):
            pending_keys.append((key, time.perf_counter()))
            app.post_message(events.Key(key, key))
        deadline = time.perf_counter() + 30
        while state["last_drawn"] is None and time.perf_counter() < deadline:
            await asyncio.sleep(0.005)
        t_end = state["last_drawn"]
        await pilot.pause(0.2)
        rss1 = rss_mb()
        store = view.store
        result = {
            "lines": len(store),
            "bytes": store.nbytes,
            "chunks": len(chunks),
            "feed_s": t_fed - t0,
            "to_last_line_drawn_s": None if t_end is None else t_end - t0,
            "lines_per_s": None if t_end is None else len(store) / (t_end - t0),
            "keys": len(handled),
            "key_handled_ms": {
                "p50": pct(handled, 0.5),
                "p95": pct(handled, 0.95),
                "max": max(handled, default=None),
            },
            "key_drawn_ms": {
                "p50": pct(drawn, 0.5),
                "p95": pct(drawn, 0.95),
                "max": max(drawn, default=None),
            },
            "rss_before_mb": rss0,
            "rss_after_mb": rss1,
            "rss_growth_mb_per_m_lines": (rss1 - rss0) * 1e6 / max(1, len(store)),
            "errors_marked": len(store.error_lines()),
            "hints": len(store.hint_lines()),
            "matches": view.match_info(),
        }
        assert result["lines"] == n_lines, (result["lines"], n_lines)
    return result


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--lines", type=int, default=1_000_000)
    p.add_argument("--chunk-kb", type=int, default=16)
    p.add_argument("--key-interval-ms", type=float, default=50.0)
    p.add_argument(
        "--profile",
        action="store_true",
        help="cProfile the run; writes bench/results/log_ingest-profile.txt",
    )
    args = p.parse_args()

    print(
        f"log ingest: {args.lines:,} lines in {args.chunk_kb} KiB chunks into a LogPane "
        f"(headless 160x50), a key every {args.key_interval_ms:.0f} ms; {os.cpu_count()} "
        f"CPUs; code {code_version()}",
        flush=True,
    )
    t = time.perf_counter()
    lines = make_log(args.lines)
    chunks = chunked(lines, args.chunk_kb << 10)
    avg = sum(len(c.encode()) for c in chunks) / len(lines)
    del lines
    print(
        f"  generated in {time.perf_counter() - t:.1f} s: {avg:.0f} bytes/line on average",
        flush=True,
    )

    profiler = None
    if args.profile:
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    r = asyncio.run(run(chunks, args.lines, args.key_interval_ms / 1000))
    if profiler is not None:
        import io
        import pstats

        profiler.disable()
        buf = io.StringIO()
        stats = pstats.Stats(profiler, stream=buf)
        stats.sort_stats("tottime").print_stats(30)
        stats.sort_stats("cumulative").print_stats(30)
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / "log_ingest-profile.txt").write_text(buf.getvalue())

    kh, kd = r["key_handled_ms"], r["key_drawn_ms"]
    drawn_s = r["to_last_line_drawn_s"]
    print(
        f"\n  fed {r['lines']:,} lines ({r['bytes'] / 1e6:.0f} MB, {r['chunks']:,} chunks) in "
        f"{r['feed_s']:.2f} s; last line drawn at "
        + ("NEVER (30 s)" if drawn_s is None else f"{drawn_s:.2f} s")
    )
    if r["lines_per_s"] is not None:
        print(f"  ingest: {r['lines_per_s']:,.0f} lines/s into the pane (store + drawn)")
    print(
        f"  keys: {r['keys']} pressed; handled p50 {kh['p50']:.1f} ms, p95 {kh['p95']:.1f} ms,"
        f" max {kh['max']:.1f} ms; drawn p50 {kd['p50']:.1f} ms, p95 {kd['p95']:.1f} ms, "
        f"max {kd['max']:.1f} ms"
    )
    print(
        f"  memory: VmRSS {r['rss_before_mb']:.0f} → {r['rss_after_mb']:.0f} MB: "
        f"{r['rss_growth_mb_per_m_lines']:.1f} MB per million lines"
    )
    print(f"  marked: {r['errors_marked']} error runs, {r['hints']} hints; matches {r['matches']}")
    goals = {
        "lines_per_s": r["lines_per_s"] is not None and r["lines_per_s"] >= GOAL_LINES_S,
        "key_ms": kh["max"] is not None and kh["max"] <= GOAL_KEY_MS,
        "mb_per_m_lines": r["rss_growth_mb_per_m_lines"] <= GOAL_MB_PER_M,
    }
    print(
        f"\ngoals: ≥{GOAL_LINES_S:,} lines/s: {'PASS' if goals['lines_per_s'] else 'FAIL'}; "
        f"keys ≤{GOAL_KEY_MS:.0f} ms (max handled): {'PASS' if goals['key_ms'] else 'FAIL'}; "
        f"≤{GOAL_MB_PER_M:.0f} MB per million lines: "
        f"{'PASS' if goals['mb_per_m_lines'] else 'FAIL'}"
    )
    if args.profile:
        print("  (profiled: times are inflated)")

    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / ("log_ingest-profile.json" if args.profile else "log_ingest.json")
    out.write_text(
        json.dumps(
            {
                "machine": {
                    "cpu_count": os.cpu_count(),
                    "python": platform.python_version(),
                    "platform": platform.platform(),
                    "code": code_version(),
                },
                "params": {
                    "lines": args.lines,
                    "chunk_kb": args.chunk_kb,
                    "key_interval_ms": args.key_interval_ms,
                    "size": [160, 50],
                    "bytes_per_line": avg,
                    "keys": KEYS,
                },
                "result": r,
                "goals": {
                    "lines_per_s": GOAL_LINES_S,
                    "key_ms": GOAL_KEY_MS,
                    "mb_per_m_lines": GOAL_MB_PER_M,
                },
                "pass": goals,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"\nwrote {out.relative_to(ROOT)}")
    return 0 if all(goals.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
