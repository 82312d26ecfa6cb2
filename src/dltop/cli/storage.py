"""``dltop prune | vacuum``, the storage line of ``dltop status`` (docs/retention.md), and
``dltop import --db TARGET SOURCE.db...``: campaigns of other databases copied in."""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path
from typing import Any

from dltop.errors import DltopError, UserError
from dltop.textsafe import counted, one_line

DEFAULT_AGE = "30d"
"""``dltop prune`` with neither ``--campaign`` nor ``--older-than``: ended over 30 days ago."""
UNITS_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_AGE = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")


def parse_age(text: str) -> float:
    """``30d``, ``12h``, ``2w``, ``90m``, ``45s`` -> seconds.

    Raises:
        UserError: anything else (the flag, the value and the expected form).
    """
    m = _AGE.fullmatch(text.strip().lower())
    if m is None:
        raise UserError(f"--older-than: expected a duration such as 30d, 12h, 2w, 90m or "
                        f"45s, got {text!r}")
    return float(m.group(1)) * UNITS_S[m.group(2)]


def human_bytes(n: float) -> str:
    """``1.5 MB``: decimal units, three significant figures."""
    for unit in ("B", "kB", "MB", "GB"):
        if abs(n) < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.3g} {unit}"
        n /= 1000
    return f"{n:.3g} TB"  # pragma: no cover - the loop returns


def storage_line(db_path: Path) -> str:
    """``storage: database 12.3 MB + WAL 1.2 MB; run folders 45.6 MB in 120 runs (<dir>);
    total 59.1 MB``."""
    from dltop.jobs.rundir import runs_dir_of
    from dltop.store.sizes import storage_sizes
    runs_dir = runs_dir_of(db_path)
    s = storage_sizes(db_path, runs_dir)
    return (f"storage: database {human_bytes(s.db_bytes)} + WAL "
            f"{human_bytes(s.wal_bytes)}; run folders "
            f"{human_bytes(s.runs_dir_bytes)} in {counted(s.run_dirs, 'run')} "
            f"({one_line(str(runs_dir))}); total "
            f"{human_bytes(s.total_bytes)}")


def _open(db: str | None) -> tuple[Path, Any]:
    from dltop.store import connect, resolve_db_path
    from dltop.store.db import existing_database_file

    path = resolve_db_path(db)
    existing_database_file(path)  # not created here; a link or a directory is refused
    return path, connect(path)  # migrated: prune keeps summaries in run_archive (v12)


def _select(store: Any, db: Any, ref: str | None, older_than: str | None) -> tuple[list[int],
                                                                                     float | None]:
    """Campaign ids to prune and the age cutoff (epoch seconds), checked before any write."""
    from dltop.results import queries

    age_s = parse_age(older_than if older_than is not None else DEFAULT_AGE) \
        if (older_than is not None or ref is None) else None
    cutoff = None if age_s is None else time.time() - age_s
    cutoff_iso = None if cutoff is None else (  # the stored format (store.rows.utc_now)
        time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(cutoff)) +
        f".{int(cutoff * 1000) % 1000:03d}Z")
    ended = store.retention.ended_campaigns(cutoff_iso)
    if ref is None:
        return ended, cutoff
    named = queries.resolve_campaigns(db, ref)
    every = {p.strip() for p in ref.split(",")} == {"all"}
    active = [c for c in named if c.id not in set(store.retention.ended_campaigns())]
    if active and not every:
        c = active[0]
        raise UserError(f"--campaign: campaign {c.id} `{one_line(c.name)}` is {c.status}; "
                        "prune never touches a campaign that has not ended. Nothing was deleted")
    return [c.id for c in named if c.id in set(ended)], cutoff


def cmd_prune(args: argparse.Namespace) -> int:
    from dltop.jobs import rundir
    from dltop.store import Store
    from dltop.store.retention import CampaignNotEnded, PruneCounts
    from dltop.store.sizes import tree_bytes

    db_path, db = _open(args.db)
    store = Store(db)
    ids, cutoff = _select(store, db, args.campaign, args.older_than)
    drop = not args.keep_summaries
    run_ids = store.retention.runs_of(ids)
    raw = store.retention.count_raw(run_ids)
    idle = store.retention.count_idle_samples(cutoff) if cutoff is not None else 0
    dirs = rundir.run_dir_paths(rundir.runs_dir_of(db_path), run_ids)
    dir_bytes = sum(tree_bytes(d) for d in dirs)
    if not ids and not idle:
        why = f" older than {args.older_than or DEFAULT_AGE}" if cutoff is not None else ""
        print(f"prune: nothing to prune (no ended campaign{why} in {one_line(str(db_path))})")
        return 0
    what = "deletes entirely (runs, jobs, results)" if drop else \
        "keeps run summaries, deletes raw rows of"
    print(f"prune: {what} {counted(len(ids), 'campaign')} {_ids(ids)}: "
          f"{counted(len(run_ids), 'run')}, "
          f"{raw.iterations:,} iterations, {raw.gpu_samples:,} GPU and {raw.host_samples:,} "
          f"host samples, {idle:,} idle samples, {counted(len(dirs), 'run folder')} "
          f"({human_bytes(dir_bytes)}); frees about "
          f"{_db_estimate(store, raw, idle)} in the database (given back to the "
          f"file system by 'dltop vacuum') and {human_bytes(dir_bytes)} of run folders")
    if args.dry_run:
        print("prune: dry run, nothing deleted")
        return 0
    if not args.yes:
        if not sys.stdin.isatty():
            raise UserError("prune deletes data: pass --yes to confirm (or --dry-run to see "
                            "what would go). Nothing was deleted")
        if input("delete? [y/N] ").strip().lower() not in ("y", "yes"):
            print("prune: nothing deleted")
            return 0
    done, skipped, total = [], [], PruneCounts()
    for cid in ids:
        try:
            for rid in store.retention.runs_of([cid]):
                total += store.retention.prune_run(rid)
            if drop:
                store.retention.delete_campaign(cid)
        except CampaignNotEnded:
            skipped.append(cid)  # reopened meanwhile (an append, a retry): left alone
            continue
        done.append(cid)
    idle_deleted = store.retention.prune_idle_samples(cutoff) if cutoff is not None else 0
    freed = rundir.remove_run_dirs(rundir.run_dir_paths(
        rundir.runs_dir_of(db_path), store.retention.runs_of(done) if not drop else
        [r for r in run_ids if r not in set(store.retention.runs_of(skipped))]))
    print(f"prune: {'deleted' if drop else 'pruned'} {counted(len(done), 'campaign')} "
          f"{_ids(done)}: "
          f"{total.iterations:,} iterations, {total.gpu_samples:,} GPU and "
          f"{total.host_samples:,} host samples, {idle_deleted:,} idle samples deleted; run "
          f"folders freed {human_bytes(freed)}"
          + (f"; skipped {_ids(skipped)} (reopened)" if skipped else ""))
    return 0


def cmd_vacuum(args: argparse.Namespace) -> int:
    from dltop.jobs.rundir import runs_dir_of
    from dltop.procs import engine_alive
    from dltop.store import Store
    from dltop.store.retention import VacuumBlocked
    from dltop.store.sizes import storage_sizes

    db_path, db = _open(args.db)
    store = Store(db)
    for c in store.queue.open_campaigns():
        if engine_alive(c.engine_pid, c.engine_start_time, c.engine_host,
                        c.engine_heartbeat_s):
            raise UserError(f"campaign {c.id} `{one_line(c.name)}` has a running engine (pid "
                            f"{c.engine_pid}); vacuum rewrites the whole database and would "
                            "stall it: run it when no engine runs. Nothing was done")
    runs_dir = runs_dir_of(db_path)
    before = storage_sizes(db_path, runs_dir)
    try:
        store.retention.vacuum()
    except VacuumBlocked as exc:
        raise DltopError(_blocked(db_path, exc.rebuilt)) from None
    after = storage_sizes(db_path, runs_dir)
    old, new = before.db_bytes + before.wal_bytes, after.db_bytes + after.wal_bytes
    freed = f"freed {human_bytes(old - new)}" if new <= old else "nothing freed"
    print(f"vacuum: {one_line(str(db_path))}: {human_bytes(old)} -> {human_bytes(new)} "
          "(database + WAL; "
          f"{freed})")
    return 0


def _blocked(db_path: Path, rebuilt: bool) -> str:
    """Why vacuum stopped: a reader held the database past the busy timeout (exit 1)."""
    from dltop.store.db import busy_timeout_s

    shown = one_line(str(db_path))
    who = (f"another connection is reading it (a viewer, dltop serve or an exporter, or "
           f"a query left open; waited {busy_timeout_s():g} s)")
    if not rebuilt:
        return f"vacuum: {shown}: blocked: {who}. Nothing was done: run it once they close"
    return (f"vacuum: {shown}: rebuilt, but blocked from truncating the WAL: {who}. "
            "The rebuilt pages wait in the WAL until they close: run it again then")


def _ids(ids: list[int]) -> str:
    if not ids:
        return "(none)"
    shown = ", ".join(map(str, ids[:10]))
    return f"({shown}{', ...' if len(ids) > 10 else ''})"


def _db_estimate(store: Any, raw: Any, idle: int) -> str:
    from dltop.store.sizes import deleted_bytes

    sizes = store.retention.table_bytes()
    if sizes is None:
        return "an unknown amount (no dbstat in this SQLite)"
    return human_bytes(deleted_bytes(store.db, sizes, {
        "iterations": raw.iterations, "gpu_samples": raw.gpu_samples,
        "host_samples": raw.host_samples + idle}))


def cmd_import(args: argparse.Namespace) -> int:
    """Check every source, stage their campaigns, then copy them into the target in one
    transaction; print what each source campaign became."""
    import os
    import tempfile

    from dltop.store import resolve_db_path
    from dltop.store.importer import FAULT_ENV, import_file
    from dltop.store.study import stage, unique_paths

    target = resolve_db_path(args.db)
    sources = unique_paths(args.sources, what="source")
    if target.is_dir():
        raise UserError(f"--db {target}: a directory, not a database file")
    with tempfile.TemporaryDirectory(prefix="dltop-import-") as tmp:
        staging = Path(tmp) / "staging.db"
        # every source read and checked before the target is opened: bad input leaves it
        staged = stage(sources, staging, target=target, absolute=True)
        copied = {c.origin_id: c for c in import_file(
            target, staging, fault=bool(os.environ.get(FAULT_ENV)))}
    added = 0
    for src in staged:
        for c in src.copied:
            where = f"{one_line(src.given)}: campaign {c.origin_id} `{one_line(c.name)}`"
            final = copied.get(c.new_id) if c.new_id is not None else None
            if final is not None and final.new_id is not None:
                added += 1
                print(f"{where}: imported as campaign {final.new_id}")
            else:
                why = c.skipped if final is None else final.skipped
                if c.new_id is None:
                    why = "the same campaign as another source's (its UUID)"
                print(f"{where}: not imported ({why})")
    print(f"{counted(added, 'campaign')} imported into {one_line(str(target))}; run folders "
          "stay where they are ('dltop log' reads them there)")
    return 0
