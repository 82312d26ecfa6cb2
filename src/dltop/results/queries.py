"""Read-only queries over the dltop database (any connection; never writes)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dltop.catalog import RunStatus
from dltop.errors import UserError
from dltop.jobs.executors.where import queued_reason
from dltop.results import labels, studyrefs
from dltop.store import samples
from dltop.store.read import campaigns as stored
from dltop.store.read import jobruns
from dltop.store.read.changes import main_file

if TYPE_CHECKING:  # annotations only: sqlite-utils costs ~0.1 s to import (store.reader)
    import sqlite_utils


class StudyId(int):
    """A campaign's id in a study of several databases (:mod:`dltop.store.study`): the
    number the results read by, written as the ``FILE:ID`` the user addresses it by
    (in every title, caption and message that formats the id)."""

    ref: str

    def __new__(cls, value: int, ref: str) -> StudyId:
        self = super().__new__(cls, value)
        self.ref = ref
        return self

    def __str__(self) -> str:
        return self.ref

    __repr__ = int.__repr__


@dataclass(frozen=True)
class CampaignRow:
    """A stored campaign."""

    id: int
    name: str
    status: str
    created_at: str
    finished_at: str | None
    host: str | None
    dltop_version: str | None = None

    def as_json(self) -> dict[str, Any]:
        """``{id, name, status, created_at, finished_at, host, dltop_version}`` for JSON;
        in a study of several databases also ``ref`` (``FILE:ID``, ``id`` its ID)."""
        ref = {"ref": str(self.id)} if isinstance(self.id, StudyId) else {}
        cid = int(str(self.id).rpartition(":")[2]) if ref else self.id
        return {"id": cid, **ref, "name": self.name, "status": self.status,
                "created_at": self.created_at, "finished_at": self.finished_at,
                "host": self.host, "dltop_version": self.dltop_version}


@dataclass(frozen=True)
class RunRow:
    """A run with its job's configuration, for listings."""

    run_id: int
    campaign_id: int
    job_id: int
    attempt: int
    started_at: str | None
    status: str
    framework: str
    model: str
    batch_size: int
    device: str
    repeat: int
    median_s: float | None
    samples_per_s: float | None
    cv: float | None
    noisy: bool
    message: str | None
    wall_s: float | None = None
    """Seconds the run ran (a Slurm job's from its start, not its submission)."""
    queue_s: float | None = None
    """Seconds its Slurm job waited in the queue (None: not a Slurm batch job)."""
    n_iterations: int | None = None
    """The iterations it measured (warm-up excluded): ``iterations``, or more where a time
    window (``min_time_s``) held it longer; fewer for a run that ended early."""


def campaign_row(r: dict[str, Any]) -> CampaignRow:
    """A ``campaigns`` row as a :class:`CampaignRow`."""
    cid = StudyId(r["id"], r["study_ref"]) if r.get("study_ref") else r["id"]
    return CampaignRow(cid, r["name"], r["status"], r["created_at"], r["finished_at"],
                       r["host"], r.get("dltop_version"))


def campaigns(db: sqlite_utils.Database, limit: int = 50) -> list[CampaignRow]:
    """Most recent campaigns first."""
    return [campaign_row(r) for r in stored.recent_campaigns(db, limit)]


def campaign_error(db: sqlite_utils.Database, campaign_id: int) -> str | None:
    """Why the campaign's engine stopped it (``failed``: a storage error; ``cancelled``:
    the signal or ``dltop cancel``), or None."""
    rows = stored.campaigns_by_id(db, [campaign_id])
    return rows[0].get("error_message") if rows else None


def packed_campaigns(db: sqlite_utils.Database, ids: Sequence[int]) -> set[int]:
    """Which of ``ids`` ran with ``--pack``: their overlapping runs are "packed", other
    campaigns' are "shared" (foreign runners). ``campaigns.pack`` is absent from
    databases older than packing, hence ``select *``."""
    return {int(c["id"]) for c in stored.campaigns_by_id(db, ids) if c.get("pack")}


def resolve_campaign(db: sqlite_utils.Database, ref: str | int | None) -> CampaignRow:
    """One campaign by id, name (the most recent of that name), or the latest for
    ``None``/``"latest"``.

    Raises:
        UserError: no campaigns at all, no such campaign, or ``ref`` names several.
    """
    found = resolve_campaigns(db, ref)
    if len(found) != 1:
        raise UserError(f"--campaign: {ref!r} names {len(found)} campaigns; give one")
    return found[0]


def resolve_campaigns(db: sqlite_utils.Database, ref: str | int | None,
                      given_as: str = "--campaign") -> list[CampaignRow]:
    """Campaigns named by ``ref``, in id order, each once.

    ``given_as`` names what the user typed ``ref`` as (an option, or a positional
    such as ``compare``'s ``A``), so an error points at it.

    ``ref`` is ``None`` or ``latest`` (the newest campaign), ``all``, an id, a name
    (the most recent campaign of that name; a name made of digits is read as an
    id), or a comma-separated list of any of these (``3,5``, ``baseline,latest``).

    Raises:
        UserError: no campaigns at all, or a part of ``ref`` names no campaign
            (the message lists the most recent ones).
    """
    study = stored.is_study(db)
    rows = [campaign_row(r) for r in stored.all_campaigns(db)]
    if not rows:
        raise UserError("no campaigns in these databases yet" if study else
                        "no campaigns in this database yet (run 'dltop run PROFILE' first)")
    # newest last: by creation over several databases (their ids interleave), else by id
    newest = sorted(rows, key=lambda c: (c.created_at or "", int(c.id))) if study else rows
    files = studyrefs.files(db) if study else {}
    parts = ["latest"] if ref is None else [p.strip() for p in str(ref).split(",")]
    if not all(parts):
        example = "h100:3,h200:1 or all" if study else "3,5 or latest or all"
        raise UserError(f"{given_as}: empty part in {ref!r} (use e.g. {example})")
    found: dict[int, CampaignRow] = {}
    for part in parts:
        if part == "all":
            found.update((int(c.id), c) for c in rows)
            continue
        hits = [newest[-1]] if part == "latest" else \
            studyrefs.match(rows, newest, files, part) if study else \
            _match(rows, part) or _match(rows, studyrefs.in_file(part, main_file(db)))
        if not hits:
            known = ", ".join(f"{c.id} `{c.name}`" for c in reversed(newest[-5:]))
            what = f"no campaign {part}" if part.isdigit() else \
                f"no campaign named {part!r}"
            raise UserError(
                f"{given_as}: no campaign {part!r} in these databases (most recent: {known}; "
                "FILE:ID names one, FILE the path or its stem)" if study else
                f"{given_as}: {what} (most recent: {known}; see 'dltop runs')")
        if len(hits) > 1:
            raise UserError(f"{given_as}: campaign {part} is in several databases: "
                            f"{', '.join(str(c.id) for c in hits)}; give FILE:ID")
        found[int(hits[0].id)] = hits[0]
    return [found[i] for i in sorted(found)]


def _match(rows: list[CampaignRow], part: str) -> list[CampaignRow]:
    """The campaign one part names in one database: an id, else the newest of a name."""
    if part.isdigit():
        return [c for c in rows if c.id == int(part)]
    return [c for c in reversed(rows) if c.name == part][:1]


def recent_runs(db: sqlite_utils.Database, limit: int = 30,
                campaign_id: int | None = None,
                statuses: Sequence[str] = ()) -> list[RunRow]:
    """Runs, newest first, optionally of one campaign and of some statuses only."""
    out = []
    for r in jobruns.recent_runs(db, limit, campaign_id, statuses):
        msg = "; ".join(m[:120] for m in (message_cause(r["error_message"]),
                                          message_cause(r.get("note"))) if m) or None
        status = r["status"]
        if status == RunStatus.RUNNING and (why := queued_reason(r, none="no reason given")):
            status, msg = "pending", f"Slurm: {why}"
        out.append(RunRow(r["run_id"], r["campaign_id"], r["job_id"], r["attempt"],
                          r["started_at"], status, r["framework"], r["model"],
                          r["batch_size"], r["device"], r["repeat"], r["median_s"],
                          r["samples_per_s"], r["cv"], bool(r["noisy"]), msg,
                          r["wall_s"], r.get("queue_s"), r["n_iterations"]))
    return out


_PROGRAM_LINES = "; last output lines:\n"
"""Where the command runner's note (runners/child/command_runner.py) gives the program's
last lines after its own reason."""
_PROGRAM_FAILED = re.compile(r" exited with status (-?\d+) after ")
"""A program that exited on its own error: its last line names it (a killed one's cannot)."""


def message_cause(text: str | None) -> str | None:
    """A stored run message in one line: its last line, which names the cause, not the
    log path a command's crash note ends with (``log: ...``); None for no text.

    A command's note is dltop's reason, then the program's last output lines: the last
    of those, after its exit status, is the cause when the program exited with an error
    (its exception), but
    dltop's reason when a signal killed it or dltop stopped a program that ran fine (a
    regex that never matched).
    """
    head, sep, _ = str(text or "").partition(_PROGRAM_LINES)
    if sep and not _PROGRAM_FAILED.search(head):
        return head.strip().splitlines()[-1] if head.strip() else None
    lines = [ln for ln in str(text or "").strip().splitlines()
             if ln.strip() and not ln.startswith("log: ")]
    if sep and lines and (failed := _PROGRAM_FAILED.search(head)):
        # its status beside its last line: a program that exits 3 without a word
        # left a step's line there ("step 4 took 2.076 ms"), no cause at all
        return f"exit status {failed.group(1)}: {lines[-1].strip()}"
    return lines[-1] if lines else None


def run_label(r: Mapping[str, Any], settings: str = "") -> str:
    """``torch fcn-r b128 cpu:1 bf16 #1`` from a row with the job's columns and its
    :func:`~dltop.results.labels.settings_text` (the run label, :mod:`~dltop.results.labels`)."""
    return labels.compose(r["framework"], r["model"], r["batch_size"], r["device"], settings,
                          int(r["repeat"]))


def running_settings(db: sqlite_utils.Database, campaign_id: int, job_ids: Sequence[int]
                     ) -> dict[int, str]:
    """Job id → the varying settings of its run label (the campaign's varying fields are
    cached: a viewer asks at every refresh)."""
    return labels.job_settings(db, job_ids, labels.campaign_varying(db, campaign_id))


@dataclass(frozen=True)
class CurrentRun:
    """A run in progress, as far as the database knows."""

    run_id: int
    job_id: int
    label: str
    done: int
    """Iterations reported so far, warm-up included."""
    total: int
    warmup: int
    started_at: str | None
    pending: str | None = None
    """Why Slurm still holds the run in its queue (squeue's reason); None once it runs."""
    queue_s: float | None = None
    """Seconds its Slurm job waited in the queue before it started (None: not known)."""

    @property
    def in_warmup(self) -> bool:
        """True while the runner is still in its warm-up iterations."""
        return self.done < self.warmup


def current_runs(db: sqlite_utils.Database, campaign_id: int) -> list[CurrentRun]:
    """Runs of the campaign stored as ``running``, with their iteration count so far."""
    rows = jobruns.running(db, campaign_id)
    settings = running_settings(db, campaign_id, [int(r["job_id"]) for r in rows])
    return [CurrentRun(r["id"], r["job_id"], run_label(r, settings.get(int(r["job_id"]), "")),
                       samples.count(db, "iterations", r["id"]), r["total"], r["warmup"],
                       r["started_at"], queued_reason(r), r["queue_s"])
            for r in rows]
