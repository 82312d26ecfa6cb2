"""What Slurm's accounting (``sacct``) says of an ended job: MaxRSS, elapsed, energy.

Stored next to dltop's own figures (``runs.slurm_max_rss_bytes``, ``slurm_elapsed_s``,
``slurm_energy_j``), never in their place: Slurm's MaxRSS is sampled by its
``jobacct_gather`` plugin every ``JobAcctGatherFrequency`` seconds (dltop's peak RSS
is the kernel's), its elapsed time includes the ``setup`` lines and the framework's
import, and its energy needs an ``acct_gather_energy`` plugin (0 without one, stored as
None). A cluster without accounting (``AccountingStorageType=accounting_storage/none``,
no slurmdbd) says so, and ``runs.slurm_acct_note`` keeps why the three are missing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dltop.jobs.executors.slurm_query import run_slurm_cmd

SACCT_FIELDS = "JobIDRaw,State,ElapsedRaw,MaxRSS,ConsumedEnergyRaw"
RETRIES = 2
"""Asks again, a second apart, while slurmdbd has not recorded the job yet."""
_UNITS = {"K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4, "P": 1024**5}


@dataclass(frozen=True)
class JobUsage:
    """Accounting's figures of one job; None where it has none (``note`` says why)."""

    max_rss_bytes: int | None = None
    """The largest MaxRSS of the job's steps (one task's peak, as jobacct_gather sampled)."""
    elapsed_s: float | None = None
    energy_j: float | None = None
    note: str | None = None
    state: str | None = None
    """Accounting's state of the job (or step); not among :meth:`columns`."""

    def columns(self) -> dict[str, Any]:
        """The ``runs`` columns these fill."""
        return {"slurm_max_rss_bytes": self.max_rss_bytes, "slurm_elapsed_s": self.elapsed_s,
                "slurm_energy_j": self.energy_j, "slurm_acct_note": self.note}


def rss_bytes(text: str) -> int | None:
    """sacct's ``MaxRSS`` (``1234K``, ``1.5G``, ``0``) in bytes; None when empty."""
    text = text.strip()
    if not text:
        return None
    scale = _UNITS.get(text[-1].upper())
    try:
        return int(float(text[:-1] if scale else text) * (scale or 1))
    except ValueError:
        return None


def parse_sacct_usage(out: str, job_id: str) -> JobUsage | None:
    """``sacct -n -P -j ID -o`` :data:`SACCT_FIELDS` as a :class:`JobUsage`; None when the
    job's own line is missing (not recorded yet)."""
    alloc: list[str] | None = None
    rss: list[int] = []
    for line in out.splitlines():
        fields = line.strip().split("|")
        if len(fields) != 5:
            continue
        if fields[0] == job_id:
            alloc = fields
        got = rss_bytes(fields[3])
        if got is not None and (fields[0] == job_id or fields[0].startswith(job_id + ".")):
            rss.append(got)
    if alloc is None:
        return None
    elapsed = float(alloc[2]) if alloc[2].isdigit() else None
    energy = float(alloc[4]) if alloc[4].isdigit() and int(alloc[4]) > 0 else None
    notes = [] if energy is not None else ["no energy (no acct_gather_energy plugin)"]
    if not rss:
        notes.append("no MaxRSS (no jobacct_gather plugin)")
    return JobUsage(max(rss) if rss else None, elapsed, energy, "; ".join(notes) or None,
                    alloc[1].split(" ")[0] or None)


async def job_usage(job_id: str, env: Mapping[str, str]) -> JobUsage:
    """Ask ``sacct`` about the ended job ``job_id``; its note says when it cannot."""
    for attempt in range(RETRIES + 1):
        rc, out, err = await run_slurm_cmd("sacct", "-n", "-P", "-j", job_id, "-o",
                                           SACCT_FIELDS, env=env, timeout_s=30.0)
        if rc != 0:
            why = (err or out).strip().splitlines()[:1] or [f"exit {rc}"]
            return JobUsage(note=f"no accounting ({why[0].removeprefix('sacct: error: ')})")
        got = parse_sacct_usage(out, job_id)
        if got is not None:
            return got
        if attempt < RETRIES:
            await asyncio.sleep(1.0)
    return JobUsage(note=f"accounting has no record of job {job_id}")


async def step_usage(job_id: str, job_env: Mapping[str, str] | None,
                     env: Mapping[str, str]) -> dict[str, Any]:
    """The ``runs`` columns of accounting for a run that was a step of the job ``job_id``
    (a server group's): its own step's (``SLURM_STEP_ID`` as ``node.sh`` reported it),
    never the whole job's, and the step's state (``slurm_state``) when accounting has it."""
    step = (job_env or {}).get("SLURM_STEP_ID", "")
    if not step.isdigit():
        return JobUsage(note="no accounting: the step's id is unknown (node.sh did not "
                             "report it)").columns()
    usage = await job_usage(f"{job_id}.{step}", env)
    return {**usage.columns(), **({"slurm_state": usage.state} if usage.state else {})}
