"""Scaling tables (Shi et al. Table 8 shape): time, speedup and efficiency per device count.

Groups are (framework, model, batch, device family); the family is ``cpu``
(threads of one process), ``cpus`` (CPU worker processes) or ``gpu``. Speedup
is throughput against the group's 1-device run (``cpu:1``, ``cpus:1`` or
``gpu:1``), which under strong scaling (global batch fixed) equals the ratio
of seconds per iteration, and under weak scaling counts the extra samples.
Efficiency = speedup / N. Rows appear as runs complete; a group without its
1-device result shows no speedup.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import asdict, dataclass

import sqlite_utils

from dltop import catalog
from dltop.results.aggregate import config_results
from dltop.results.export import LABELS, fmt_seconds, latex_escape


@dataclass(frozen=True)
class ScalingRow:
    """One device configuration of a scaling group."""

    framework: str
    model: str
    batch_size: int
    device: str
    n_devices: int
    status: str
    seconds_per_iter: float | None
    samples_per_s: float | None
    speedup: float | None
    efficiency: float | None


def _rank(value: str, order: tuple[str, ...]) -> int:
    return order.index(value) if value in order else len(order)


def scaling_rows(db: sqlite_utils.Database, campaign_id: int) -> list[ScalingRow]:
    """Every configuration with its speedup and efficiency against one device."""
    results = config_results(db, campaign_id)
    base: dict[tuple[str, str, int, str], float] = {}
    for r in results:
        family, _, count = r.device.partition(":")
        if count == "1" and r.samples_per_s:
            base[(r.framework, r.model, r.batch_size, family)] = r.samples_per_s
    rows = []
    for r in results:
        family, _, n_text = r.device.partition(":")
        n = int(n_text)
        b = base.get((r.framework, r.model, r.batch_size, family))
        speedup = r.samples_per_s / b if (b and r.samples_per_s) else None
        rows.append(ScalingRow(r.framework, r.model, r.batch_size, r.device, n, r.status,
                               r.median_s, r.samples_per_s, speedup,
                               speedup / n if speedup is not None else None))
    rows.sort(key=lambda x: (_rank(x.model, catalog.MODELS), x.batch_size,
                             _rank(x.framework, catalog.FRAMEWORKS),
                             x.device.partition(":")[0], x.n_devices))
    return rows


HEAD = ("model", "framework", "batch", "devices", "s/iter", "samples/s", "speedup",
        "efficiency")


def _cells(r: ScalingRow) -> list[str]:
    if r.seconds_per_iter is None:
        label = LABELS.get(r.status, r.status)
        return [r.model, r.framework, str(r.batch_size), r.device, label, label, "", ""]
    return [r.model, r.framework, str(r.batch_size), r.device, fmt_seconds(r.seconds_per_iter),
            f"{r.samples_per_s:.1f}" if r.samples_per_s else "",
            f"{r.speedup:.2f}" if r.speedup is not None else "",
            f"{r.efficiency:.0%}" if r.efficiency is not None else ""]


def render_scaling(rows: list[ScalingRow], fmt: str, title: str) -> str:
    """The scaling table as ``md``, ``csv``, ``json`` or ``latex``."""
    if fmt == "json":
        return json.dumps({"title": title, "rows": [asdict(r) for r in rows]}, indent=2) + "\n"
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(HEAD)
        for r in rows:
            w.writerow([r.model, r.framework, r.batch_size, r.device,
                        r.seconds_per_iter if r.seconds_per_iter is not None
                        else LABELS.get(r.status, r.status),
                        r.samples_per_s, r.speedup, r.efficiency])
        return buf.getvalue()
    if fmt == "latex":
        lines = [f"% {latex_escape(title)}", "\\begin{tabular}{llllrrrr}", "\\toprule",
                 " & ".join(latex_escape(h) for h in HEAD) + " \\\\", "\\midrule"]
        lines += [" & ".join(latex_escape(c) for c in _cells(r)) + " \\\\" for r in rows]
        return "\n".join([*lines, "\\bottomrule", "\\end{tabular}"]) + "\n"
    lines = [title, "", "| " + " | ".join(HEAD) + " |",
             "|" + "|".join(["---"] * 4 + ["---:"] * 4) + "|"]
    lines += ["| " + " | ".join(_cells(r)) + " |" for r in rows]
    lines += ["", "Speedup: samples/s against the same group's 1-device run "
              "(cpu:1, cpus:1 or gpu:1); efficiency = speedup / N."]
    return "\n".join(lines) + "\n"
