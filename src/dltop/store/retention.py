"""Retention: prune raw rows of ended campaigns, vacuum, and measure what is stored.

``Store.retention`` deletes a run's raw rows (``iterations``, ``gpu_samples``,
``host_samples``) after keeping, in ``run_archive``, the little that exports
compute from them (docs/retention.md): the measured iterations' seconds and
samples (bootstrap intervals and throughput need every one), the mean
process-tree CPU over all host samples (the fallback for runs stored before
``runs.tree_cpu_mean_pct``) and whether a GPU sample was simulated. Exports read
the archive where the raw rows are gone, so they do not change.

Only campaigns whose status is ended (finished, cancelled, failed) are touched,
checked inside each write transaction (``BEGIN IMMEDIATE``), so a campaign that
an append or a retry reopens is never pruned under its engine. Each run is
pruned in its own transaction (archive and delete together): an interrupted
prune leaves every run either whole or archived, and an engine writing another
campaign waits at most one run's delete.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass

import sqlite_utils

from dltop.catalog import ENDED_CAMPAIGN_STATUSES
from dltop.store import samples as sample_tables
from dltop.store.archive import ARCHIVE, pack_measured
from dltop.store.read.runs import in_chunks, marks
from dltop.store.rows import utc_now
from dltop.store.templates import TEMPLATES
from dltop.store.tx import transaction

RAW_TABLES = ("iterations", "gpu_samples", "host_samples")
"""The tables of raw rows, one row per step or sample window, that prune deletes."""
KEPT_TABLES = ("evals", "profile_ops", "generations", "serve_requests")
"""Per-run rows prune keeps (a few per run: evaluations, the top operators, one row per
generation request, whose packed latencies the TTFT/TPOT/ITL percentiles need and no
archive summary could replace; one row per serve request, likewise); deleting a
campaign deletes them."""
MEASURED_SQL = (
    "select i.seconds, coalesce(i.samples, r.samples_per_iter) as samples "
    "from iterations i join runs r on r.id = i.run_id where i.run_id = ? "
    "and coalesce(i.warmup, 0) = 0 and i.seconds is not null order by i.idx")
"""A run's measured iterations exactly as :mod:`dltop.results.aggregate` reads them."""


class CampaignNotEnded(Exception):
    """A campaign is (again) active: prune leaves it alone."""


class VacuumBlocked(Exception):
    """Another connection reads the database, so its WAL cannot be checkpointed.

    Args:
        rebuilt: False: found before VACUUM (nothing was rebuilt); True: a reader
            came during VACUUM, and the rebuilt pages wait in the WAL until the next
            checkpoint after it closes.
    """

    def __init__(self, rebuilt: bool) -> None:
        super().__init__("blocked by a reader after the rebuild" if rebuilt
                         else "blocked by a reader")
        self.rebuilt = rebuilt


@dataclass(frozen=True)
class PruneCounts:
    """Rows a prune deletes (or would): per raw table, plus runs already pruned."""

    runs: int = 0
    iterations: int = 0
    gpu_samples: int = 0
    host_samples: int = 0

    def __add__(self, other: PruneCounts) -> PruneCounts:
        return PruneCounts(self.runs + other.runs, self.iterations + other.iterations,
                           self.gpu_samples + other.gpu_samples,
                           self.host_samples + other.host_samples)


class Retention:
    """Pruning and vacuuming one database (``Store.retention``)."""

    def __init__(self, db: sqlite_utils.Database) -> None:
        self._db = db

    def ended_campaigns(self, older_than_iso: str | None = None) -> list[int]:
        """Ended campaigns (finished, cancelled, failed), oldest first; with
        ``older_than_iso``, only those that ended (or, never started, were created)
        at or before that UTC timestamp (the stored format: ``2026-11-23T12:00:00.000Z``)."""
        sql = (f"select id from campaigns where status in ({marks(ENDED_CAMPAIGN_STATUSES)})")
        args: list[object] = [*sorted(ENDED_CAMPAIGN_STATUSES)]
        if older_than_iso is not None:
            sql += " and coalesce(finished_at, started_at, created_at) <= ?"
            args.append(older_than_iso)
        return [int(r["id"]) for r in self._db.query(sql + " order by id", args)]

    def runs_of(self, campaign_ids: Sequence[int]) -> list[int]:
        """Every run of the campaigns, in id order."""
        if not campaign_ids:
            return []
        return [int(r["id"]) for r in self._db.query(
            f"select id from runs where campaign_id in ({marks(campaign_ids)}) order by id",
            list(campaign_ids))]

    def count_raw(self, run_ids: Sequence[int]) -> PruneCounts:
        """Raw rows the runs hold (what pruning them deletes)."""
        counts = {t: 0 for t in RAW_TABLES}
        names = set(self._db.table_names())
        for chunk, qs in in_chunks(run_ids):
            for table in RAW_TABLES:
                if table in names:
                    counts[table] += int(next(self._db.query(
                        f"select count(*) as n from {table} where run_id in ({qs})",
                        chunk))["n"])
        return PruneCounts(len(run_ids), counts["iterations"], counts["gpu_samples"],
                           counts["host_samples"])

    def table_bytes(self) -> dict[str, int] | None:
        """Bytes of each table with its indexes (SQLite's dbstat), or None without it."""
        try:
            rows = list(self._db.query(
                "select m.tbl_name as t, sum(s.pgsize) as b from dbstat s "
                "join sqlite_master m on m.name = s.name group by m.tbl_name"))
        except sqlite3.Error:
            return None
        return {r["t"]: int(r["b"] or 0) for r in rows}

    def prune_run(self, run_id: int) -> PruneCounts:
        """Archive what exports need of one run's raw rows, then delete them: one
        transaction. A run with no raw rows left is not touched.

        Raises:
            CampaignNotEnded: the run's campaign is active (it was reopened).
        """
        with transaction(self._db):
            self._check_ended(run_id)
            counts = self.count_raw([run_id])
            if not (counts.iterations or counts.gpu_samples or counts.host_samples):
                return PruneCounts()
            measured = [(float(r["seconds"]), int(r["samples"] or 0))
                        for r in self._db.query(MEASURED_SQL, [run_id])]
            tree = sample_tables.tree_cpu_means(self._db, [run_id]).get(run_id)
            simulated = sample_tables.run_simulated(self._db, run_id)
            seconds, samples = pack_measured(measured)
            # An ended campaign's runs get no new rows, so a run is archived once.
            self._db.table(ARCHIVE).insert({
                "run_id": run_id, "pruned_at": utc_now(), "n_measured": len(measured),
                "measured_seconds": seconds, "measured_samples": samples,
                "tree_cpu_all_pct": tree, "gpu_simulated": int(bool(simulated)),
                "iterations": counts.iterations, "gpu_samples": counts.gpu_samples,
                "host_samples": counts.host_samples,
            })
            for table in RAW_TABLES:
                self._db.execute(f"delete from {table} where run_id = ?", [run_id])
        return counts

    def delete_campaign(self, campaign_id: int) -> int:
        """Delete an ended campaign entirely: its runs (raw rows, archive, environment),
        jobs and the campaign row, in one transaction. Returns the runs deleted.

        Raises:
            CampaignNotEnded: the campaign is active.
        """
        with transaction(self._db):
            status = self._status(campaign_id)
            if status not in ENDED_CAMPAIGN_STATUSES:
                raise CampaignNotEnded(f"campaign {campaign_id} is {status}")
            runs = "select id from runs where campaign_id = ?"
            n = int(next(self._db.query(
                "select count(*) as n from runs where campaign_id = ?", [campaign_id]))["n"])
            for table in (*RAW_TABLES, ARCHIVE, "environment", *KEPT_TABLES):
                self._db.execute(f"delete from {table} where run_id in ({runs})",
                                 [campaign_id])
            self._db.execute("delete from runs where campaign_id = ?", [campaign_id])
            self._db.execute("delete from jobs where campaign_id = ?", [campaign_id])
            if TEMPLATES in self._db.table_names():  # after its jobs: their trigger reads it
                self._db.execute(f"delete from {TEMPLATES} where campaign_id = ?",
                                 [campaign_id])
            self._db.execute("delete from campaigns where id = ?", [campaign_id])
        return n

    def prune_idle_samples(self, before_wall_s: float) -> int:
        """Delete telemetry windows of no run (the host between runs) older than
        ``before_wall_s`` (epoch seconds); returns the rows deleted."""
        deleted = 0
        with transaction(self._db):
            for table in ("gpu_samples", "host_samples"):
                deleted += self._db.execute(
                    f"delete from {table} where run_id is null and t_wall_s < ?",
                    [before_wall_s]).rowcount
        return deleted

    def count_idle_samples(self, before_wall_s: float) -> int:
        """Telemetry windows of no run older than ``before_wall_s``."""
        return sum(int(next(self._db.query(
            f"select count(*) as n from {t} where run_id is null and t_wall_s < ?",
            [before_wall_s]))["n"]) for t in ("gpu_samples", "host_samples"))

    def vacuum(self) -> None:
        """Checkpoint the WAL into the database file, then rebuild the file (VACUUM)
        and truncate the WAL: freed pages go back to the file system.

        Raises:
            VacuumBlocked: another connection reads the database, before anything is
                rebuilt (``rebuilt`` False) or, a reader that came meanwhile, after.
        """
        conn = self._db.conn
        # A reader (a viewer, serve, a query left open) pins the pages it reads, and
        # VACUUM would leave the whole rebuilt file in the WAL beside the old one. One
        # unchanged page written first gives the checkpoint something to copy, so a
        # reader of the file itself (whose snapshot holds no WAL frame) is found too.
        with transaction(self._db):
            version = int(conn.execute("pragma user_version").fetchone()[0])
            conn.execute(f"pragma user_version = {version}")
        _checkpoint(conn, rebuilt=False)
        conn.execute("VACUUM")
        _checkpoint(conn, rebuilt=True)

    def _status(self, campaign_id: int) -> str | None:
        rows = list(self._db.query("select status from campaigns where id = ?", [campaign_id]))
        return str(rows[0]["status"]) if rows else None

    def _check_ended(self, run_id: int) -> None:
        rows = list(self._db.query(
            "select c.id, c.status from runs r join campaigns c on c.id = r.campaign_id "
            "where r.id = ?", [run_id]))
        if not rows or rows[0]["status"] not in ENDED_CAMPAIGN_STATUSES:
            what = f"campaign {rows[0]['id']} is {rows[0]['status']}" if rows else "no such run"
            raise CampaignNotEnded(f"run {run_id}: {what}")


def _checkpoint(conn: sqlite3.Connection, *, rebuilt: bool) -> None:
    """``wal_checkpoint(TRUNCATE)``, waiting up to the busy timeout for readers.

    Raises:
        VacuumBlocked: a reader still held a snapshot the checkpoint needed.
    """
    busy, log_frames, copied = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    if busy or copied < log_frames:
        raise VacuumBlocked(rebuilt)
