"""``dltop pause | resume | cancel`` and ``dltop status``: steer and inspect engines."""

from __future__ import annotations

import argparse

from dltop.catalog import CampaignStatus, Control
from dltop.cli.common import db_list, open_existing, open_reader
from dltop.errors import UserError
from dltop.textsafe import one_line


def engine_where(pid: int | None, host: str | None) -> str:
    """``pid 12``, or ``pid 12 on host login2`` for another host's engine."""
    from dltop.procs import this_host

    if host is None or host == this_host():
        return f"pid {pid}"
    return f"pid {pid} on host {one_line(host)}"


def cmd_control(args: argparse.Namespace) -> int:
    from dltop.procs import engine_alive
    from dltop.store import Store

    store = Store(open_existing(args.db))
    open_ = store.queue.open_campaigns()
    if args.campaign is not None:
        open_ = [c for c in open_ if str(c.id) == str(args.campaign)]
    if not open_:
        which = f"campaign {args.campaign}" if args.campaign else "any campaign"
        raise UserError(f"{which}: nothing unfinished to {args.command}")
    camp = open_[-1]
    if not engine_alive(camp.engine_pid, camp.engine_start_time, camp.engine_host,
                        camp.engine_heartbeat_s):
        raise UserError(f"campaign {camp.id} has no running engine (it died or was killed); "
                        "continue it with 'dltop run --resume'")
    store.set_control(camp.id, Control(args.command))
    print(f"campaign {camp.id} ({one_line(camp.name)}): {args.command} requested; the engine "
          f"({engine_where(camp.engine_pid, camp.engine_host)}) acts on it within a second")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    """Each database's engines, campaigns and storage; several ``--db``: one after the
    other, each under its path (a status is live: it is read per database, not as a
    study)."""
    from dltop.store.study import unique_paths

    paths = db_list(args.db)
    if len(paths) == 1:
        return _status(paths[0])
    given = unique_paths([str(p) for p in paths])
    for path in given:  # every file checked before any is printed, as a study does
        open_reader(path).close()
    for i, path in enumerate(given):
        print(f"{'' if i == 0 else chr(10)}{one_line(path)}:")
        _status(path)
    return 0


def _status(db_arg: str | None) -> int:
    from dltop.cli.storage import storage_line
    from dltop.procs import engine_alive, heartbeat_age
    from dltop.results import queries
    from dltop.store.db import resolve_db_path
    from dltop.store.read import campaigns, jobs

    db = open_reader(db_arg)
    open_ = campaigns.open_campaigns(db)
    if not open_:
        last = queries.campaigns(db, limit=1)
        if not last:
            print("no campaigns yet")
            print(storage_line(resolve_db_path(db_arg)))
            return 0
        done = last[0]
        # "finished 2026-..." for a finished campaign, "cancelled, ended 2026-..." else
        when = done.finished_at or "-"
        ended = f"{done.status} {when}" if done.status == CampaignStatus.FINISHED \
            else f"{done.status}, ended {when}"
        print(f"no engine running. Last campaign {done.id} `{one_line(done.name)}`: "
              f"{ended}")
        reason = queries.campaign_error(db, done.id)
        if done.status == CampaignStatus.FAILED:
            print(f"  stopped by: {one_line(reason or 'unknown')}; "
                  "'dltop run --resume' continues its queue")
        elif done.status == CampaignStatus.CANCELLED and reason:  # a signal, dltop cancel
            print(f"  {one_line(reason)}; 'dltop run --resume' runs its cancelled jobs")
        print(storage_line(resolve_db_path(db_arg)))
        return 0
    for c in open_:
        alive = engine_alive(c.engine_pid, c.engine_start_time, c.engine_host,
                             c.engine_heartbeat_s)
        counts = jobs.status_counts(db, c.id)
        shown = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
        # The owner's host and heartbeat, whichever host asks (from another host the
        # heartbeat is all that says the engine lives).
        beat = "" if c.engine_heartbeat_s is None else \
            f", heartbeat {heartbeat_age(c.engine_heartbeat_s)}"
        where = f"pid {c.engine_pid}" if c.engine_host is None else \
            f"pid {c.engine_pid} on host {one_line(c.engine_host)}"
        engine = f"engine {where}{beat}" if alive else \
            f"engine NOT running{beat} (dltop run --resume continues it)"
        packed = " (packed: runs share the host on disjoint devices)" \
            if c.pack else ""
        waiting = f" for devices: {one_line(c.waiting_for or '')}" \
            if c.status == CampaignStatus.WAITING else ""
        print(f"campaign {c.id} `{one_line(c.name)}`: {c.status}{waiting}{packed}; {engine}; "
              f"jobs: {shown}")
        for r in queries.current_runs(db, c.id):
            if r.pending is not None:
                print(f"  run {r.run_id}: {one_line(r.label)}: pending in Slurm's queue "
                      f"({one_line(r.pending)})")
                continue
            queued = "" if r.queue_s is None else f" after {r.queue_s:.0f} s in Slurm's queue"
            print(f"  run {r.run_id}: {one_line(r.label)}: iteration {r.done}/{r.total}"
                  f"{' (warm-up)' if r.in_warmup else ''}, started {r.started_at}{queued}")
    print(storage_line(resolve_db_path(db_arg)))
    return 0
