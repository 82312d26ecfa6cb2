"""The run detail screen and its log viewer on big data: what the event loop pays.

1. Log viewer on a generated 100 MB runner.log (1.3 M lines): time to the first
   lines, time to the whole index, the longest stall of the event loop while the
   worker indexes (a 10 ms timer's worst lateness), and ``G`` to the last line.
2. Run detail screen on a run of 200 000 iterations with 8 GPUs × 20 000 windows and
   20 000 host windows: from the push until its data and every chart are shown, and
   the longest event-loop stall over that time (the read and the chart figures are
   built in workers), beside the stall of pushing an empty Screen.

Goal: no stall over 50 ms (the TUI's key latency goal).

    .venv/bin/python benchmarks/rundetail.py [--log-mb 100]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "src")]

from textual.app import App  # noqa: E402
from textual.screen import Screen  # noqa: E402

from dltop.tui.charts import RunChart  # noqa: E402
from dltop.tui.logview import LogLines, LogViewer  # noqa: E402
from dltop.tui.rundetail import RunDetailScreen  # noqa: E402


class Stalls:
    """The worst lateness of a 10 ms timer on the event loop."""

    def __init__(self, app: App[Any]) -> None:
        self.worst = 0.0
        self._last = time.perf_counter()
        app.set_interval(0.01, self._tick)

    def _tick(self) -> None:
        now = time.perf_counter()
        self.worst = max(self.worst, now - self._last - 0.01)
        self._last = now

    def reset(self) -> None:
        self.worst, self._last = 0.0, time.perf_counter()


async def wait(cond: Any, timeout_s: float = 120.0) -> float:
    t0 = time.perf_counter()
    while not cond():
        if time.perf_counter() - t0 > timeout_s:
            raise TimeoutError
        await asyncio.sleep(0.005)
    return time.perf_counter() - t0


async def bench_log(path: Path, lines: int) -> dict[str, float]:
    app: App[Any] = App()
    async with app.run_test(size=(120, 40)) as pilot:
        stalls = Stalls(app)
        await pilot.pause()
        stalls.reset()
        t0 = time.perf_counter()
        await app.push_screen(LogViewer(str(path), "bench"))
        view = app.screen.query_one(LogLines)
        first = await wait(lambda: view.index.line_count > 0) + 0
        done = await wait(lambda: view.index.complete and view.index.line_count == lines)
        total = time.perf_counter() - t0
        stall = stalls.worst
        t1 = time.perf_counter()
        await pilot.press("G")
        await wait(lambda: int(view.scroll_offset.y) + view.size.height == lines)
        view.render_line(view.size.height - 1)
        end = time.perf_counter() - t1
        del done
    return {"first lines s": first, "whole index s": total, "worst loop stall ms":
            stall * 1000, "G to last line ms": end * 1000}


def seed_run(db_path: Path, n_iter: int, n_win: int, gpus: int) -> tuple[int, int]:
    from dltop.jobs import campaign
    from dltop.profiles.loader import parse
    from dltop.store import Store, connect
    from dltop.telemetry.sampler import Batch, GpuWindow, HostWindow

    store = Store(connect(db_path))
    prof = parse('name = "b"\n[[matrix]]\nframeworks = ["torch"]\nmodels = ["fcn-r"]\n'
                 'batch_sizes = [64]\ndevices = ["cpu:1"]\n', "b.toml", "b")
    cid, queued = campaign.create(store, campaign.preflight([prof], 0, False), ["dltop"])
    job = queued[0].job_id
    run = store.start_run(job, cid, 1, "", 64)
    t0 = 1000.0
    for start in range(0, n_iter, 50_000):
        store.add_iterations(run, [{"idx": i, "seconds": 0.01 + (i % 7) * 1e-4, "samples": 64,
                                    "warmup": int(i < 100), "loss": 2.0 / (1 + i),
                                    "t_mono_ns": int((t0 + 0.01 * (i + 1)) * 1e9)}
                                   for i in range(start, min(n_iter, start + 50_000))])
    step = 0.01 * n_iter / n_win
    store.telemetry.write_batch(Batch(
        tuple(GpuWindow(run, t0 + step * t, g, 5, 50.0 + t % 50, 0.0, 100.0, 2**33, 200.0,
                        150.0, 250.0, 10.0, 60.0, 1500.0, True)
              for t in range(n_win) for g in range(gpus)),
        tuple(HostWindow(run, t0 + step * t, 5, 20.0, 80.0, 2**32, 0, 100.0, 2**30)
              for t in range(n_win))))
    store.finish_run(run, job, "ok", {"median_s": 0.0103, "n_iterations": n_iter - 100})  # type: ignore[arg-type]
    return job, run


async def bench_detail(db_path: Path, job: int) -> dict[str, float]:
    app: App[Any] = App()
    async with app.run_test(size=(200, 60)) as pilot:
        stalls = Stalls(app)
        await pilot.pause()
        stalls.reset()
        t0 = time.perf_counter()
        await app.push_screen(Screen())  # Textual's own cost of pushing a screen
        await pilot.pause()
        bare = stalls.worst
        app.pop_screen()
        await pilot.pause()
        stalls.reset()
        t0 = time.perf_counter()
        screen = RunDetailScreen(db_path, job)
        await app.push_screen(screen)
        shown = await wait(lambda: screen.loads >= 1)
        await wait(lambda: all(c.built for c in screen.query(RunChart)
                               if not c.has_class("-hidden")))
        await pilot.pause()
        drawn = time.perf_counter() - t0
        return {"bare screen push ms": bare * 1000, "data shown s": shown,
                "charts drawn s": drawn, "worst loop stall ms": stalls.worst * 1000}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--log-mb", type=int, default=100)
    ap.add_argument("--iterations", type=int, default=200_000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "runner.log"
        lines = args.log_mb * (1 << 20) // 80
        pad = "x" * 66
        with log.open("w") as fh:
            for start in range(0, lines, 20_000):
                fh.write("".join(f"line {i:08d} {pad}\n"
                                 for i in range(start, min(lines, start + 20_000))))
        res = asyncio.run(bench_log(log, lines))
        print(f"log viewer, {log.stat().st_size >> 20} MiB, {lines} lines")
        for k, v in res.items():
            print(f"  {k:<22} {v:10.3f}")
        db = Path(tmp) / "b.db"
        job, _ = seed_run(db, args.iterations, 20_000, 8)
        res = asyncio.run(bench_detail(db, job))
        print(f"run detail, {args.iterations} iterations, 8 GPUs x 20000 windows")
        for k, v in res.items():
            print(f"  {k:<22} {v:10.3f}")
        print("goal: worst loop stall <= 50 ms in both")


if __name__ == "__main__":
    main()
