"""The per-node figures of a multi-node run and the scheduler's accounting, as the run
detail shows them (:mod:`dltop.live.rundetail` reads the run; these read its node rows
and format a runs row's ``sacct`` columns)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dltop.store import samples
from dltop.telemetry.values import opt_float

if TYPE_CHECKING:
    from dltop.store.reader import Db


@dataclass(frozen=True)
class OnNode:
    """A GPU of a node of a multi-node (Slurm) run, which the node's agent reads."""

    node: str
    gpu_index: int

    @property
    def label(self) -> str:
        """``node:gpuN``, as the main screen's device rows name it."""
        return f"{self.node}:gpu{self.gpu_index}"


@dataclass(frozen=True)
class NodeGpu(OnNode):
    """One GPU of one node of a multi-node (Slurm) run, over the whole run so far."""

    windows: int
    util_mean_pct: float | None
    power_mean_w: float | None
    mem_peak_bytes: int | None
    energy_j: float | None
    """Its energy counter's rise over the run (None without a counter)."""
    simulated: bool


def slurm_acct_text(r: dict[str, Any]) -> str | None:
    """``sacct: MaxRSS 1.2 GiB, elapsed 41 s, 5230 J`` from a runs row, or why not."""
    got = [f"{name} {r[column] / scale:.{digits}f} {unit}"
           for name, column, scale, digits, unit in (
               ("MaxRSS", "slurm_max_rss_bytes", 2**30, 2, "GiB"),
               ("elapsed", "slurm_elapsed_s", 1, 0, "s"), ("energy", "slurm_energy_j", 1, 0, "J"))
           if r.get(column) is not None]
    note = r.get("slurm_acct_note")
    if not got:
        return note
    return f"sacct: {', '.join(got)}" + (f" ({note})" if note else "")


def node_gpus(db: Db, run_id: int) -> tuple[NodeGpu, ...]:
    """Per node and GPU figures of a run from its node agents' rows (``gpu_samples.node``).

    Empty for a local run (its rows have no node) and for a database before
    migration 16.
    """
    rows = samples.node_gpu_totals(db, run_id)
    return tuple(NodeGpu(str(r["node"]), int(r["gpu_index"]), int(r["n"] or 0),
                         opt_float(r["util"]), opt_float(r["power"]), r["mem"],
                         opt_float(r["energy"]), bool(r["sim"]))
                 for r in rows)


def node_gpu_lines(gpus: tuple[NodeGpu, ...]) -> tuple[tuple[str, str], ...]:
    """(``node:gpuN``, its figures) per node GPU, then one total line per node."""
    def fig(v: float | None, fmt: str, unit: str) -> str:
        return "N/A" if v is None else f"{v:{fmt}}{unit}"

    lines: list[tuple[str, str]] = []
    for node in dict.fromkeys(g.node for g in gpus):
        mine = [g for g in gpus if g.node == node]
        for g in mine:
            mem = None if g.mem_peak_bytes is None else g.mem_peak_bytes / 2**30
            lines.append((g.label, f"util {fig(g.util_mean_pct, '.0f', ' %')}, power "
                                   f"{fig(g.power_mean_w, '.0f', ' W')}, mem peak "
                                   f"{fig(mem, '.1f', ' GiB')}"
                                   + (" (simulated)" if g.simulated else "")))
        powers = [g.power_mean_w for g in mine if g.power_mean_w is not None]
        energies = [g.energy_j for g in mine if g.energy_j is not None]
        power = sum(powers) if powers else None
        energy = sum(energies) if energies and len(energies) == len(mine) else None
        lines.append((f"{node} total", f"{len(mine)} GPUs, power {fig(power, '.0f', ' W')}, "
                                       f"energy {fig(energy, '.0f', ' J')}"))
    return tuple(lines)
