"""One run's operator profile as a table: ``dltop export --table profile --run N``.

The runner profiled a few extra steps after the measured ones (profile key
``profile = true``) and sent the top operators by self time
(:mod:`dltop.jobs.evals` stores them in ``profile_ops``). The table shows each
operator's calls and self times per profiled step, its share of the step's wall
time, and its input shapes when the runner recorded them. Self device (kernel)
time exists only on CUDA; elsewhere the cell says ``N/A``.

Operator names are stored whole: a CUDA kernel's (a CUTLASS template instance) runs
to thousands of characters. The table shows :func:`short_op_name` (the start and a
stable hash, so that two runs' long names can be matched); CSV and JSON keep the
full name too. A run that profiled but whose profile could not be stored (its
event refused, its write failed) says so and why, from the run's note.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dltop.catalog import PROFILE_NOT_STORED
from dltop.errors import UserError
from dltop.results import caption, labels, queries
from dltop.results.table import Cell, Column, Role, Row, Table, key_cell
from dltop.store.read import profile, runs

if TYPE_CHECKING:  # annotations only: sqlite-utils costs ~0.1 s to import (store.reader)
    import sqlite_utils

    from dltop.store.reader import Db

SHORT_OP_CHARS = 80
"""Characters of an operator name a table shows (longer ones: :func:`short_op_name`)."""
HASH_CHARS = 10
"""Hex digits of the hash that stands for a shortened name's cut part."""
COLUMNS = (
    Column("rank", "#", Role.KEY),
    Column("op", "op", Role.KEY, detail=("full_name",)),
    Column("calls", "calls/step", Role.VALUE, "1"),
    Column("self_cpu_ms", "self CPU ms/step", Role.VALUE, "ms"),
    Column("self_device_ms", "self device ms/step", Role.VALUE, "ms"),
    Column("share_pct", "share of step %", Role.VALUE, "%"),
    Column("shapes", "input shapes", Role.KEY),
)
NOTES = ("Per profiled step: the totals over the profiled steps (after the measured "
         "iterations, never part of them) divided by their number. self: time in the "
         "operator itself, not in the operators it calls. share: self time (device time on "
         "CUDA, else CPU time) over the mean step wall time; shares of ops that overlap "
         "(CPU launching while kernels run) may add up to more or less than 100 %. N/A: no "
         "device time (not a CUDA run). A name over "
         f"{SHORT_OP_CHARS} characters is shown as its start, '…' and the first "
         f"{HASH_CHARS} hex digits of its SHA-256 (the same name, the same hash); CSV "
         "and JSON keep the full name.",)


def short_op_name(name: str) -> str:
    """``name`` (an operator or kernel name, as stored), or its start, ``…`` and a stable
    hash when over :data:`SHORT_OP_CHARS` characters."""
    if len(name) <= SHORT_OP_CHARS:
        return name
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:HASH_CHARS]
    return f"{name[:max(1, SHORT_OP_CHARS - HASH_CHARS - 2)]}…#{digest}"


@dataclass(frozen=True)
class ProfileOp:
    """One operator of a run's profile, per profiled step."""

    name: str
    calls: float
    self_cpu_ms: float
    self_device_ms: float | None
    """CUDA kernel time; None off CUDA."""
    share_pct: float
    shapes: str | None
    rank: int = 0
    """Its stored rank by self time, 1 first."""


@dataclass(frozen=True)
class ProfiledRun:
    """A run with a stored operator profile: its profile summary and job."""

    run_id: int
    steps: int
    step_ms: float
    profile_device: str
    framework: str
    model: str
    batch_size: int
    device: str
    repeat: int


def profile_ops(db: Db, run_id: int,
                steps: int | None, *, top: int | None = None) -> tuple[ProfileOp, ...]:
    """The run's stored operators, ranked, their totals divided by the ``steps``
    profiled (empty without a profile); ``top``: those ranked up to it only."""
    if not steps:
        return ()
    return tuple(
        ProfileOp(str(o["name"]), o["calls"] / steps, o["self_cpu_ms"] / steps,
                  None if o["self_device_ms"] is None else o["self_device_ms"] / steps,
                  float(o["share_pct"]), o["shapes"], int(o["rank"]))
        for o in profile.ops(db, run_id, top=top))


def profiled_runs(db: Db, campaign_ids: Sequence[int], limit: int) -> list[ProfiledRun]:
    """The first ``limit`` ok runs of the campaigns with a stored profile, in run order
    (none before migration 14)."""
    return [ProfiledRun(int(r["id"]), int(r["profile_steps"]), float(r["profile_step_ms"]),
                        str(r["profile_device"]), r["framework"], r["model"],
                        int(r["batch_size"]), r["device"], int(r["repeat"]))
            for r in profile.profiled_runs(db, campaign_ids, limit)]


def _number(value: Any, text: str) -> Cell:
    return Cell(text, value) if value is not None else Cell("N/A")


def profile_table(db: sqlite_utils.Database, run_id: int) -> Table:
    """The stored operator profile of run ``run_id``.

    Raises:
        UserError: no such run, or the run has no profile (named with why).
    """
    run = runs.with_job(db, run_id)
    if run is None:
        raise UserError(f"--run {run_id}: no such run ('dltop runs' lists them)")
    steps = run.get("profile_steps")
    if not steps:
        raise UserError(_why_no_profile(run))
    rows = [Row((key_cell(rank), Cell(short_op_name(op.name), detail={"full_name": op.name}),
                 Cell(f"{op.calls:g}", op.calls),
                 Cell(f"{op.self_cpu_ms:.3f}", op.self_cpu_ms),
                 _number(op.self_device_ms, "" if op.self_device_ms is None
                         else f"{op.self_device_ms:.3f}"),
                 Cell(f"{op.share_pct:.1f}", op.share_pct), Cell(op.shapes or "-")),
                {"op_full_name": op.name})
            for rank, op in enumerate(profile_ops(db, run_id, steps), 1)]
    camp = queries.resolve_campaign(db, int(run["campaign_id"]))
    # the run label, as the report's figure
    label = queries.run_label(run, labels.run_settings(db, [run_id]).get(run_id, ""))
    what = (f"operator profile of run {run_id} ({label}): "
            f"{steps} steps of {run['profile_step_ms']:.3f} ms on "
            f"{run['profile_device']}")
    lines, meta = caption.context(db, [camp])
    return Table(
        title=caption.title([camp], what), comment=caption.comment([camp], what),
        columns=COLUMNS, rows=tuple(rows), notes=NOTES, caption=lines,
        meta={**meta, "table": "profile", "run_id": run_id, "steps": steps,
              "step_ms": run["profile_step_ms"], "device": run["profile_device"]})


def _why_no_profile(row: dict[str, Any]) -> str:
    """Why the run (:func:`dltop.store.read.runs.with_job`'s row) has no stored profile:
    not asked for, asked for but not stored (the note's words: its event refused, its
    write failed), or never sent."""
    run_id, status = row["id"], row["status"]
    try:
        asked = bool(json.loads(row.get("spec_json") or "{}").get("op_profile"))
    except (ValueError, AttributeError):
        asked = False
    note = str(row.get("note") or "")
    if PROFILE_NOT_STORED in note:
        lost = note[note.index(PROFILE_NOT_STORED):]
        return (f"--run {run_id}: the run was profiled, but its profile could not be "
                f"stored; its note says: {lost}")
    if asked:
        return (f"--run {run_id}: profile = true, but the runner sent no operator profile "
                f"(run {status}; its log says why: dltop log {run_id})")
    return (f"--run {run_id}: the run has no operator profile (set profile = true in its "
            "profile; the framework's runner must support it, see docs/frameworks.md)")
