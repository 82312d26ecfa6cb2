"""Where a command's CPU goes, by kind of process: ``python benchmarks/suite_cpu.py -- CMD``.

Runs ``CMD`` (e.g. the suite: ``-- .venv/bin/pytest -q -n 2 --dist loadgroup``) and
samples every process of the host twice a second (``/proc/PID/stat``: user + system
ticks), naming each by its command line (a PyTorch runner, a TensorFlow runner, a
``dltop run`` engine, an xdist worker, Chromium, ...). At the end it prints the CPU
seconds of each kind, how many processes of it ran, and the host's busy and idle
shares over the command's wall time (``/proc/stat``). Used to choose what to cut in
the suite (docs/development.md): it is a census, not a profile.

Limits: a process that lives less than the sampling interval is missed (its CPU shows
only in the host's busy total); a process already running when sampling starts is
counted from its start, so the kind ``other`` includes long-lived daemons.
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import threading
import time

KINDS = (
    ("exec(eval(", "pytest-xdist worker"), ("torch_runner.py", "PyTorch runner"),
    ("tf_runner.py", "TensorFlow runner"), ("jax_runner.py", "JAX runner"),
    ("cntk_runner.py", "CNTK runner"), ("command_runner.py", "command runner"),
    ("-m dltop run", "dltop run (engine)"), ("-m dltop report", "dltop report"),
    ("-m dltop serve", "dltop serve"), ("-m dltop tui", "dltop tui"),
    ("-m dltop", "dltop, other commands"), ("bin/dltop", "dltop, other commands"),
    ("chromium", "Chromium"), ("chromedriver", "Chromium"), ("slurm", "Slurm"),
    ("munge", "Slurm"), ("tmux", "tmux"), ("pytest", "pytest"),
    ("python", "other Python"),
)
TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")


def kind_of(cmdline: str) -> str:
    """The kind of a process with NUL-separated ``cmdline`` (``other`` if none fits)."""
    text = cmdline.replace("\0", " ")
    for needle, kind in KINDS:
        if needle in text:
            return kind
    return "other"


def _cpu_ticks(pid: str) -> tuple[str, int] | None:
    """``(start time, user + system ticks)`` of ``pid``, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[19], int(fields[11]) + int(fields[12])


class Census:
    """Every process seen, keyed by (pid, start time): its kind and its latest ticks."""

    def __init__(self) -> None:
        self.kind: dict[tuple[str, str], str] = {}
        self.ticks: dict[tuple[str, str], int] = {}
        self.stop = threading.Event()

    def sample(self) -> None:
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            got = _cpu_ticks(pid)
            if got is None:
                continue
            key = (pid, got[0])
            if key not in self.kind:
                try:
                    with open(f"/proc/{pid}/cmdline") as fh:
                        self.kind[key] = kind_of(fh.read())
                except OSError:
                    continue
            self.ticks[key] = got[1]

    def loop(self, interval_s: float) -> None:
        while not self.stop.wait(interval_s):
            self.sample()

    def totals(self) -> list[tuple[str, float, int]]:
        """``(kind, CPU seconds, processes)``, most CPU first."""
        cpu: dict[str, float] = collections.defaultdict(float)
        count: collections.Counter[str] = collections.Counter()
        for key, kind in self.kind.items():
            cpu[kind] += self.ticks[key] * TICK_S
            count[kind] += 1
        return sorted(((k, s, count[k]) for k, s in cpu.items()), key=lambda r: -r[1])


def host_ticks() -> list[int]:
    """The host's ``cpu`` line of /proc/stat (user, nice, system, idle, iowait, ...)."""
    with open("/proc/stat") as fh:
        return [int(x) for x in fh.readline().split()[1:]]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--interval-s", type=float, default=0.5)
    parser.add_argument("cmd", nargs=argparse.REMAINDER, help="-- then the command")
    args = parser.parse_args()
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        parser.error("give the command after --")
    census = Census()
    census.sample()
    before_ticks = dict(census.ticks)
    sampler = threading.Thread(target=census.loop, args=(args.interval_s,), daemon=True)
    t0, h0 = time.monotonic(), host_ticks()
    sampler.start()
    code = subprocess.call(cmd)
    census.stop.set()
    sampler.join()
    census.sample()
    wall, h1 = time.monotonic() - t0, host_ticks()
    # Processes alive before the command count only what they spent during it.
    for key, ticks in before_ticks.items():
        census.ticks[key] -= ticks
    delta = [b - a for a, b in zip(h0, h1, strict=True)]
    idle = (delta[3] + delta[4]) / max(1, sum(delta))
    print(f"\nwall {wall:.0f} s; host CPU busy {(sum(delta) - delta[3] - delta[4]) * TICK_S:.0f}"
          f" s, idle {idle:.1%} of {os.cpu_count()} CPUs; exit {code}")
    print(f"{'CPU s':>9}  {'procs':>5}  kind")
    for kind, seconds, n in census.totals():
        if seconds >= 0.5:
            print(f"{seconds:9.1f}  {n:5d}  {kind}")
    return code


if __name__ == "__main__":
    raise SystemExit(main())
