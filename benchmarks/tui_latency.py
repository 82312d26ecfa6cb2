"""TUI responsiveness at scale, and its idle CPU next to glances, measured in one run.

Setup: 8 simulated GPUs, a campaign with 1 000 queued jobs, and 1 000 000 stored
samples (500 000 GPU telemetry rows and 500 000 iteration rows of 100 earlier
runs).

1. Keypress-to-screen latency, end to end as a user sees it: ``tmux send-keys``,
   then ``capture-pane`` in a loop until the pane shows the effect (cursor
   moved, screen switched, or, for ``J``, the database edit made, read back and
   the queue redrawn). Goal: p95 <= 50 ms.
   A second database holds one campaign of 100 000 queued jobs (``--big``; 0 skips
   it): the same keys, plus PageDown, End and Home, each timed until the rows
   it brings are on screen (a row not read yet shows ``…``). Goal: p95 <= 50 ms.
2. Idle CPU: ``dltop tui --fake-gpus 8`` at its default refresh, at 4 Hz and at 1/1.5 s,
   ``glances -t 0.25`` (glances' curses UI at 4 Hz) and ``htop`` at its default refresh
   (1.5 s), each in its own tmux pane of 120x40, measured from their CPU times, in
   alternating rounds, with ``benchmarks/textual_floor.py`` (a bare Textual app repainting
   nine lines, the least such frames cost in Textual) at 4 Hz and 1/1.5 s. Goals: dltop
   at 4 Hz <= 0.5x glances, and dltop at its default refresh <= htop at its own.

    .venv/bin/pip install glances   # benchmark-only dependency; tmux, htop from Debian
    .venv/bin/python benchmarks/tui_latency.py [--seconds 20] [--presses 20] [--big 100000]
        [--rounds 3] [--idle-only] [--glances PATH] [--before OLD/src]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

import dltop
from dltop.jobs import campaign
from dltop.profiles.loader import parse
from dltop.store import Store, connect
from dltop.store.rows import job_row

TMUX = ["tmux", "-L", f"dltop-bench-{os.getpid()}"]
"""This run's own tmux server: a shared one (another benchmark, another user's tmux) would
give the panes its environment, and its sessions could have our sessions' names."""
SRC = Path(dltop.__file__).resolve().parents[1]
"""The dltop the benchmark imports: the viewers in the panes run this one (PYTHONPATH)."""


def build_db(path: Path, queued: int = 1000, samples: int = 1_000_000) -> None:
    store = Store(connect(path))
    db = store.db
    models = ["fcn-r", "alexnet-r", "resnet-56", "lstm"]
    # An old finished campaign holding the stored samples.
    old = parse('[[matrix]]\nframeworks=["torch"]\nmodels=["fcn-r"]\nbatch_sizes=[64]\n'
                'devices=["cpu:1"]\nrepeats=100\n', "old.toml", "old")
    cid, jobs = campaign.create(store, campaign.preflight([old], 0, False), ["bench"])
    rng = random.Random(0)
    per_run = samples // 2 // len(jobs)
    with db.conn:
        for q in jobs:
            rid = store.start_run(q.job_id, cid, 1, "", 64)
            db.conn.executemany(
                "insert into iterations (run_id, idx, seconds, samples, warmup, loss) "
                "values (?, ?, ?, 64, 0, 1.0)",
                [(rid, i, 0.01 + rng.random() * 1e-3) for i in range(per_run)])
            db.conn.executemany(
                "insert into gpu_samples (run_id, t_start_mono_s, gpu_index, n, util_mean_pct,"
                " power_mean_w, simulated) values (?, ?, ?, 5, ?, ?, 1)",
                [(rid, i * 0.5, i % 8, rng.random() * 100, 300.0) for i in range(per_run)])
            store.finish_run(rid, q.job_id, "ok", {"median_s": 0.01, "samples_per_s": 6400.0})
    store.set_campaign_status(cid, "finished")
    # The live campaign: 1000 queued jobs.
    big = parse("[[matrix]]\nframeworks=[\"torch\"]\nmodels=" + json.dumps(models) +
                "\nbatch_sizes=[16,32,64,128,256]\ndevices=[\"cpu:1\",\"cpu:2\"]\n"
                f"repeats={queued // 40}\n", "big.toml", "big")
    campaign.create(store, campaign.preflight([big], 0, False), ["bench"])


def build_big_db(path: Path, queued: int) -> None:
    """One campaign of ``queued`` queued jobs (four configurations in turn)."""
    store = Store(connect(path))
    prof = parse('[[matrix]]\nframeworks=["torch"]\nmodels=["fcn-r","lstm"]\n'
                 'batch_sizes=[8,16]\ndevices=["cpu:1"]\n', "big.toml", "big")
    cid = store.create_campaign("big", ["big.toml"], ["bench"], "h", 0, None)
    rows = [job_row(cid, pos, "queued", prof.jobs[pos % 4]) for pos in range(queued)]
    cols = list(rows[0])
    with store.transaction():  # Store.add_jobs inserts row by row: minutes at 100 000
        store.db.conn.executemany(
            f"insert into jobs ({', '.join(cols)}) values ({', '.join('?' * len(cols))})",
            [tuple(r[c] for c in cols) for r in rows])
    # The viewer's counts and its window's removed-job correction read this index
    # (schema migration 11); made here only when the schema does not have it yet.
    have = {tuple(store.db.execute(f"pragma index_info('{name}')").fetchall()[k][2]
                  for k in range(3))
            for (name,) in store.db.execute("select name from pragma_index_list('jobs')")
            if len(store.db.execute(f"pragma index_info('{name}')").fetchall()) >= 3}
    if ("campaign_id", "status", "position") not in have:
        store.db.execute("create index bench_jobs_campaign_status_position "
                         "on jobs(campaign_id, status, position)")


def _pane(name: str, escapes: bool = False) -> list[str]:
    args = [*TMUX, "capture-pane", "-p", "-t", name] + (["-e"] if escapes else [])
    return subprocess.run(args, capture_output=True, text=True, check=True).stdout.splitlines()


def _queue_region(name: str) -> list[str]:
    """The queue table's lines, with colours (the cursor is a colour)."""
    plain, coloured = _pane(name), _pane(name, escapes=True)
    top = next(i for i, ln in enumerate(plain) if re.match(r"\s*#\s+status", ln))
    bottom = next(i for i in range(top + 1, len(plain)) if plain[i].startswith(("─", "━")))
    return coloured[top + 1:bottom]


def _until(cond: Any, timeout: float = 10.0) -> float:
    t0 = time.perf_counter()
    while not cond():
        if time.perf_counter() - t0 > timeout:
            raise RuntimeError("the screen never changed")
    return time.perf_counter() - t0


PRESSES: list[tuple[str, float, float]] = []
"""(what, monotonic time the key was sent, seconds to the screen) of every timed press."""


def latencies(db_path: Path, presses: int, big: int = 0,
              trace: Path | None = None) -> dict[str, list[float]]:
    """Key to screen, end to end: tmux send-keys, then capture-pane until the change shows.

    ``big``: the database holds one campaign of that many queued jobs (no results to
    wait for; PageDown, End and Home measured too). ``trace``: run the viewer under
    ``benchmarks/tui_trace.py``, writing its trace there.
    """
    name = "bench-latency"
    launcher = "-m dltop" if trace is None else \
        f"{Path(__file__).with_name('tui_trace.py')} {trace} --"
    # --no-resume: the campaign has no engine, and must stay a queue to look at.
    _tmux_session(name, f"PYTHONPATH={SRC} DLTOP_DB={db_path} {sys.executable} {launcher} "
                        "tui --fake-gpus 8 "
                        "--no-resume")
    jobs = f"{big} jobs" if big else "1000 jobs"
    out: dict[str, list[float]] = {"down (cursor)": [], "2 then 1 (switch screen)": []}
    if big:
        out |= {"pagedown": [], f"end (last rows of {jobs})": [], "home (first rows)": []}
    else:
        out[f"results table filled ({jobs})"] = []
    out["J (move job: DB edit + redraw)"] = []
    try:
        _until(lambda: any("SIMULATED" in ln for ln in _pane(name)), 60)
        _until(lambda: any("queued" in ln for ln in _pane(name)), 60)
        time.sleep(1.0)

        def send(key: str) -> None:
            subprocess.run([*TMUX, "send-keys", "-t", name, key], check=True)

        if big:
            # The results screen's first visit computes the campaign's table in a worker
            # (cached afterwards); its Python work slows every key meanwhile. Timed once
            # here, then the keys are measured in the steady state.
            send("2")
            t0 = time.perf_counter()
            _until(lambda: any("median seconds per" in ln for ln in _pane(name)), 600)
            out[f"results table, first visit ({jobs})"] = [time.perf_counter() - t0]
            send("1")
            _until(lambda: any("SIMULATED" in ln for ln in _pane(name)))
            time.sleep(1.0)

        def changed(before: list[str]) -> bool:
            now = _queue_region(name)  # every row read (none drawn as "…")
            return now != before and not any("…" in ln for ln in now)

        def timed(key: str, what: str) -> None:
            before = _queue_region(name)
            t_sent = time.monotonic()
            send(key)
            out[what].append(_until(lambda b=before: changed(b)))
            PRESSES.append((what, t_sent, out[what][-1]))

        for _ in range(presses):
            timed("Down", "down (cursor)")
            t_sent = time.monotonic()
            send("2")
            t0 = time.perf_counter()
            t = _until(lambda: any("Pick metric" in ln for ln in _pane(name)))
            PRESSES.append(("2 (to results)", t_sent, t))
            if not big:
                _until(lambda: any("median seconds per" in ln for ln in _pane(name)))
                out[f"results table filled ({jobs})"].append(time.perf_counter() - t0)
                PRESSES.append(("results table filled", t_sent, time.perf_counter() - t0))
            t_sent = time.monotonic()
            send("1")
            t1 = _until(lambda: any("SIMULATED" in ln for ln in _pane(name)))
            PRESSES.append(("1 (to main)", t_sent, t1))
            t += t1
            out["2 then 1 (switch screen)"].append(t / 2)
            time.sleep(0.3)
            if big:
                timed("PageDown", "pagedown")
                time.sleep(0.1)
                timed("End", f"end (last rows of {jobs})")
                time.sleep(0.2)
                timed("Home", "home (first rows)")
                time.sleep(0.2)
                send("Down")
                time.sleep(0.2)
            timed("J", "J (move job: DB edit + redraw)")
            time.sleep(0.2)
    finally:
        subprocess.run([*TMUX, "kill-session", "-t", name], check=False)
    return out


def _tmux_session(name: str, cmd: str) -> None:
    # The server of a just-killed last session may still be exiting: retry.
    for _ in range(5):
        r = subprocess.run([*TMUX, "new-session", "-d", "-s", name, "-x", "120", "-y", "40",
                            cmd], capture_output=True)
        if r.returncode == 0:
            return
        time.sleep(0.5)
    raise RuntimeError(f"tmux new-session failed: {r.stderr.decode().strip()}")


def tmux_cpu(name: str, cmd: str, seconds: float) -> float:
    _tmux_session(name, cmd)
    try:
        time.sleep(5.0)  # start-up is not the idle cost
        pane = subprocess.run([*TMUX, "list-panes", "-t", name, "-F", "#{pane_pid}"],
                              capture_output=True, text=True, check=True).stdout.split()[0]
        procs = [psutil.Process(int(pane)), *psutil.Process(int(pane)).children(recursive=True)]

        def cpu() -> float:
            total = 0.0
            for p in procs:
                try:
                    t = p.cpu_times()
                    total += t.user + t.system
                except psutil.NoSuchProcess:
                    pass
            return total

        c0, t0 = cpu(), time.monotonic()
        time.sleep(seconds)
        return (cpu() - c0) / (time.monotonic() - t0)
    finally:
        subprocess.run([*TMUX, "kill-session", "-t", name], check=False)


def explain(trace: Path, slow_ms: float = 50.0) -> None:
    """Print what the viewer did during each press slower than ``slow_ms``."""
    rows = [json.loads(line) for line in trace.read_text().splitlines() if line.strip()]
    slow = [(w, t, d) for w, t, d in PRESSES if d * 1000 > slow_ms]
    print(f"\ntrace {trace}: {len(rows)} events; {len(slow)} of {len(PRESSES)} presses "
          f"over {slow_ms:.0f} ms")
    for what, t_sent, dt in slow:
        print(f"- {what}: {dt * 1000:.1f} ms")
        for r in rows:
            if t_sent - 0.05 <= r["t"] + r["ms"] / 1000 and r["t"] <= t_sent + dt:
                extra = {k: v for k, v in r.items() if k not in ("kind", "t", "ms")}
                print(f"    {(r['t'] - t_sent) * 1000:+8.1f} ms  {r['kind']:<7} "
                      f"{r['ms']:7.1f} ms  {extra}")
    gcs = [r for r in rows if r["kind"] == "gc"]
    for gen in (0, 1, 2):
        ms = [r["ms"] for r in gcs if r["gen"] == gen]
        if ms:
            print(f"gc gen{gen}: {len(ms)} collections, median {statistics.median(ms):.1f} ms,"
                  f" max {max(ms):.1f} ms")


def _print_latencies(results: dict[str, list[float]]) -> None:
    print(f"{'key':<34} {'median':>8} {'p95':>8} {'max':>8}")
    for key, vals in results.items():
        ms = sorted(v * 1000 for v in vals)
        p95 = ms[min(len(ms) - 1, round(0.95 * (len(ms) - 1)))]
        print(f"{key:<34} {statistics.median(ms):8.1f} {p95:8.1f} {ms[-1]:8.1f}")


def idle(db_path: Path, seconds: float, rounds: int, glances: str | None,
         before: Path | None = None) -> None:
    """Idle CPU of the viewer, glances at the same 4 Hz and htop at its default refresh
    (1.5 s), each in its own 120x40 tmux pane, in alternating rounds (the machine's load
    moves; each tool sees the same moments)."""
    if rounds <= 0:
        return
    env = f"PYTHONPATH={SRC} DLTOP_DB={db_path} TERM=xterm-256color"
    exe = glances or shutil.which("glances") or str(Path(sys.executable).with_name("glances"))
    dltop = f"{env} {sys.executable} -m dltop tui --fake-gpus 8 --no-resume"
    # dltop at its default refresh (against htop at its own), at glances' 4 Hz (against
    # glances), and at htop's 1.5 s (like for like).
    cmds = {"dltop tui --fake-gpus 8": dltop, "dltop at 4 Hz": f"{dltop} --refresh-hz 4",
            "dltop at 1/1.5 s": f"{dltop} --refresh-hz 0.667"}
    if before is not None:  # another checkout's viewer (its src/), in the same rounds
        cmds["dltop before (--before)"] = dltop.replace(f"PYTHONPATH={SRC}",
                                                        f"PYTHONPATH={before.resolve()}")
    # Textual's own price for such frames: a bare app repainting 9 precomputed lines
    floor = f"{env} {sys.executable} {Path(__file__).with_name('textual_floor.py')}"
    cmds["Textual floor, 4 Hz"] = f"{floor} 4 9"
    cmds["Textual floor, 1/1.5 s"] = f"{floor} 0.667 9"
    if os.path.exists(exe):
        cmds["glances -t 0.25"] = f"TERM=xterm-256color {exe} -t 0.25"
    if shutil.which("htop"):
        cmds["htop (default 1.5 s)"] = "TERM=xterm-256color htop"
    cpu: dict[str, list[float]] = {name: [] for name in cmds}
    for _ in range(rounds):
        for name, cmd in cmds.items():
            cpu[name].append(tmux_cpu(f"bench-{name.split()[0]}", cmd, seconds))
    print(f"\nidle CPU (CPU s per wall s, median of {rounds} alternating rounds of "
          f"{seconds:.0f} s, 120x40 tmux)")
    med = {name: statistics.median(v) for name, v in cpu.items()}
    for name, v in cpu.items():
        print(f"{name:<26} {med[name]:.4f}   ({', '.join(f'{x:.4f}' for x in v)})")
    ours = med["dltop tui --fake-gpus 8"]
    for name, goal, mine, what in (
            ("glances -t 0.25", 0.5, med["dltop at 4 Hz"], "both at 4 Hz"),
            ("htop (default 1.5 s)", 1.0, ours, "each at its default")):
        if name in med:
            print(f"ratio dltop/{name.split()[0]:<8} {mine / med[name]:.2f}   (goal <= {goal}; "
                  f"{what})")
        else:
            print(f"{name.split()[0]}: not installed (pip install glances; apt-get install htop)")
    if before is not None:
        print(f"ratio dltop/dltop before: {ours / med['dltop before (--before)']:.2f}")
    if "htop (default 1.5 s)" in med:
        htop = med["htop (default 1.5 s)"]
        print(f"ratio dltop/htop, both at 1/1.5 s: {med['dltop at 1/1.5 s'] / htop:.2f}")
        print(f"ratio Textual floor/htop: {med['Textual floor, 4 Hz'] / htop:.2f} at 4 Hz, "
              f"{med['Textual floor, 1/1.5 s'] / htop:.2f} at 1/1.5 s")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--presses", type=int, default=20)
    ap.add_argument("--big", type=int, default=100_000,
                    help="jobs of the large-queue case (100000; 0 skips it)")
    ap.add_argument("--rounds", type=int, default=3,
                    help="alternating rounds of the idle CPU measurement (0 skips it)")
    ap.add_argument("--glances", default=None, help="the glances executable (default: PATH, "
                    "then beside this Python)")
    ap.add_argument("--idle-only", action="store_true", help="measure only the idle CPU")
    ap.add_argument("--before", type=Path, default=None,
                    help="src/ of another dltop checkout whose idle viewer is measured in "
                         "the same rounds (e.g. `git worktree add /tmp/old COMMIT`)")
    ap.add_argument("--trace", type=Path, default=None,
                    help="trace the viewer (benchmarks/tui_trace.py) into this file and "
                         "explain every press over 50 ms")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="dltop-tui-bench-"))
    db_path = tmp / "bench.db"
    t0 = time.monotonic()
    build_db(db_path)
    print(f"database: 1000 queued jobs, 1 000 000 stored samples, "
          f"{db_path.stat().st_size / 2**20:.0f} MiB, built in {time.monotonic() - t0:.0f} s")
    if shutil.which("tmux") is None:
        print("tmux is needed (apt-get install tmux)")
        return 2
    if args.idle_only:
        idle(db_path, args.seconds, args.rounds, args.glances, args.before)
        shutil.rmtree(tmp, ignore_errors=True)
        return 0
    print("\nkeypress -> screen (ms), 8 simulated GPUs at 4 Hz, 120x40 tmux pane; each "
          "figure includes one capture-pane poll (a few ms)")
    _print_latencies(latencies(db_path, args.presses, trace=args.trace))
    if args.trace is not None:
        explain(args.trace)
    if args.big:
        big_path = tmp / "big.db"
        t0 = time.monotonic()
        build_big_db(big_path, args.big)
        print(f"\nlarge queue: {args.big} queued jobs in one campaign, "
              f"{big_path.stat().st_size / 2**20:.0f} MiB, built in {time.monotonic() - t0:.0f} s")
        _print_latencies(latencies(big_path, args.presses, big=args.big))
    idle(db_path, args.seconds, args.rounds, args.glances, args.before)
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
