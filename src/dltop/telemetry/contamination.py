"""CPU contamination: how much of a run's pinned CPUs other processes used.

Method: the kernel's per-CPU busy time (``psutil.cpu_times(percpu=True)``:
user, nice, system, irq, softirq, steal) summed over the run's pinned CPUs,
minus the CPU time of the run's own process tree (pinned there, so all its time
is on those CPUs) and of the dltop process itself (the sampler and engine are
the measurement, not a foreign load), between the first and the last host
reading inside the measured window. What is left is foreign use, reported in %
of the pinned CPUs' capacity (``runs.cpu_foreign_pct``); above
:data:`CPU_FOREIGN_THRESHOLD_PCT` the run is flagged ``contaminated``.

Limits: dltop's own time is subtracted in full although it may have run on
other CPUs, so up to that much foreign use (a few % of one CPU at the default
rates) can hide; interrupts and kernel threads serving the run itself count as
foreign; a tree process that exits without being reaped by another tree
process takes its CPU time with it (the foreign share then reads high); runs
that are not pinned (GPU jobs, CPU jobs wider than the host) are not checked.
The culprit named in the reason is the foreign process that used the most CPU
time while last seen on those CPUs (``Process.cpu_num``), scanned only while
the foreign share is over the threshold.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: results.export reads the threshold below at start-up
    from dltop.telemetry.values import HostSample

CPU_FOREIGN_THRESHOLD_PCT = 10.0
"""Foreign CPU use over the window, in % of the pinned CPUs' capacity, that flags a run
(10 % of the CPU for a run pinned to one CPU)."""


def foreign_cpu_pct(first: HostSample, last: HostSample, cpus: Collection[int],
                    ) -> float | None:
    """Foreign use of ``cpus`` between two host readings, in % of their capacity.

    None when it cannot be computed (no CPU times, no process tree, no time
    between the readings).
    """
    dt = (last.t_mono_ns - first.t_mono_ns) / 1e9
    if dt <= 0 or first.tree is None or last.tree is None:
        return None
    known = [c for c in cpus if c < len(first.cpu_busy_s) and c < len(last.cpu_busy_s)]
    if not known:
        return None
    busy = sum(last.cpu_busy_s[c] - first.cpu_busy_s[c] for c in known)
    own = last.tree.cpu_time_s - first.tree.cpu_time_s
    if first.self_cpu_s is not None and last.self_cpu_s is not None:
        own += last.self_cpu_s - first.self_cpu_s
    return max(0.0, busy - own) / (dt * len(known)) * 100.0


def cpu_reason(pct: float, cpus: Collection[int], culprit: tuple[int, str] | None) -> str:
    """``cpu: 35% of CPU 0 used by other processes, most by pid 456 (stress)``."""
    names = ",".join(map(str, sorted(cpus)))
    text = f"cpu: {pct:.0f}% of CPU{'s' if len(cpus) > 1 else ''} {names} used by other processes"
    return text + (f", most by pid {culprit[0]} ({culprit[1]})" if culprit else "")
