"""``dltop run``: a campaign in this process (progress on the terminal) or detached."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dltop.catalog import FAILURE_STATUSES, CampaignStatus
from dltop.cli.common import EXIT_FAILED_RUNS, EXIT_INTERRUPTED
from dltop.errors import UserError
from dltop.textsafe import counted, multiline, one_line

if TYPE_CHECKING:
    from dltop.jobs.events import EngineEvent


def cmd_run(args: argparse.Namespace, argv: list[str]) -> int:
    from dltop.jobs import campaign
    from dltop.jobs.allocator import DeviceAllocator
    from dltop.jobs.engine import Engine, default_logs_dir
    from dltop.jobs.environment import core_order
    from dltop.jobs.writes import check_runs_dir
    from dltop.profiles.loader import load
    from dltop.store import Store, connect, resolve_db_path
    from dltop.store.db import database_file
    from dltop.systems import load_system
    from dltop.telemetry import gpu_count, open_gpu_backend
    from dltop.telemetry.sampler import Sampler, check_rate

    system = load_system(args.system) if args.system and not args.resume else None
    gpu_hz = check_rate("--gpu-hz", args.gpu_hz)
    host_hz = check_rate("--host-hz", args.host_hz)
    db_path = resolve_db_path(args.db)
    database_file(db_path)  # a link or a directory is refused before anything is made
    if args.detach:
        if not args.resume:  # refuse bad input here, where the user sees it
            campaign.preflight([load(ref, system=system) for ref in args.profiles], gpu_count(),
                               args.skip_unavailable, args.pack)
        return _detach(argv, db_path, default_logs_dir(db_path))
    backend = None if args.no_telemetry else open_gpu_backend(args.fake_gpus)
    n_gpus = gpu_count()
    if args.resume:
        if args.profiles or args.pack or args.system:
            raise UserError("--resume takes no profiles, no --pack and no --system: it "
                            "continues a stored campaign as it was queued")
        from dltop.jobs.resume import resume

        check_runs_dir(default_logs_dir(db_path))  # before anything is stored
        store = Store(connect(db_path, create=False, migrate=True))
        resumed = resume(store, args.campaign)
        campaign_id, name = resumed.campaign_id, resumed.name
        pack = resumed.pack
        slurm = (f", {len(resumed.cancelled_slurm_jobs)} orphaned Slurm job(s) cancelled "
                 f"({one_line(', '.join(resumed.cancelled_slurm_jobs))})"
                 if resumed.cancelled_slurm_jobs else "")
        if resumed.kept_runs:  # COMPLETED in Slurm after the engine died: kept, not re-run
            slurm += (f", {counted(len(resumed.kept_runs), 'finished Slurm run')} kept "
                      f"({', '.join(map(str, resumed.kept_runs))})")
        print(f"dltop: resuming campaign {campaign_id}: {counted(resumed.queued, 'job')} queued, "
              f"{counted(resumed.lost_runs, 'interrupted run')} re-queued, "
              f"{counted(resumed.killed_processes, 'orphaned process', 'orphaned processes')}"
              f" killed{slurm}", file=sys.stderr)
        for warning in resumed.warnings:
            print(f"dltop: warning: {one_line(warning)}", file=sys.stderr)
    else:
        if not args.profiles:
            raise UserError("dltop run needs at least one PROFILE (or --resume)")
        profiles = [load(ref, system=system) for ref in args.profiles]
        plan = campaign.preflight(profiles, n_gpus, args.skip_unavailable, args.pack)
        for warning in plan.warnings:
            print(f"dltop: warning: {one_line(warning)}", file=sys.stderr)
        # after the profiles passed (bad input creates nothing), before anything is stored
        check_runs_dir(default_logs_dir(db_path))
        store = Store(connect(db_path))
        campaign_id = campaign.store_plan(store, plan, argv)
        store.fence(campaign_id)  # its first owner: a takeover's writes are refused here
        name, pack = plan.name, plan.pack
    sink: Callable[[EngineEvent], None]
    ctx: contextlib.AbstractContextManager[Any]
    if args.json:
        sink = _JsonEvents()
        ctx = contextlib.nullcontext()
    else:
        from dltop.tui.progress import HeadlessProgress

        sink = ctx = HeadlessProgress(interactive=sys.stdout.isatty() and not args.headless)
    engine = Engine(store, campaign_id, name, logs_dir=default_logs_dir(db_path),
                    db_label=str(db_path), on_event=sink,
                    sampler_factory=None if backend is None else (
                        lambda on_batch: Sampler(backend, on_batch, gpu_hz, host_hz)),
                    allocator=DeviceAllocator(n_gpus, core_order(), pack=pack))

    async def go() -> str:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            loop.add_signal_handler(sig, engine.request_stop)
        return await engine.run()

    with ctx:
        status = asyncio.run(go())
    lost = engine.telemetry_loss
    if lost.batches:  # each run's note says its own share; this is the campaign's total
        print(f"dltop: warning: {lost.batches} telemetry batch(es) could not be stored "
              f"({one_line(lost.first_error or '?')}); the runs' notes say which",
              file=sys.stderr)
    if status == CampaignStatus.CANCELLED:
        print(f"dltop: campaign {campaign_id} cancelled; finished runs are stored in "
              f"{one_line(str(db_path))}",
              file=sys.stderr)
        return EXIT_INTERRUPTED
    if any(engine.counts.get(s, 0) for s in FAILURE_STATUSES):
        return EXIT_FAILED_RUNS
    return 0


def _detach(argv: list[str], db_path: Path, logs_dir: Path) -> int:
    from dltop.jobs.launch import start_engine

    run_args = _without_db([a for a in argv[2:] if a != "--detach"])
    launch = start_engine(run_args, db_path, logs_dir)
    if launch.exit_code is None:
        print(f"dltop: engine started in the background (pid {launch.pid}); "
              f"log: {one_line(str(launch.log_path))}\n"
              "       watch: dltop (the TUI) or dltop status    steer: dltop pause | resume | "
              "cancel")
        return 0
    sys.stderr.write(multiline(launch.log_tail))
    return launch.exit_code


def _without_db(args: list[str]) -> list[str]:
    """``args`` less their ``--db PATH`` / ``--db=PATH``: the engine is given the resolved
    database once (a second ``--db`` is refused, issue 40)."""
    out: list[str] = []
    skip = False
    for a in args:
        if skip:
            skip = False
        elif a == "--db":
            skip = True
        elif not a.startswith("--db="):
            out.append(a)
    return out


class _JsonEvents:
    """``--json``: one event per line on stdout; a reader that leaves ends only the output."""

    closed = False

    def __call__(self, event: EngineEvent) -> None:
        if self.closed:
            return
        try:
            print(json.dumps(event.to_dict(), default=str), flush=True)
        except OSError as exc:  # `dltop run --json | head`: the campaign goes on, stored
            self.closed = True
            with contextlib.suppress(OSError, ValueError):  # later prints go nowhere
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            with contextlib.suppress(OSError):
                print(f"dltop: warning: the event output failed ({exc.strerror or exc}); the "
                      "campaign goes on: 'dltop status' and 'dltop runs' follow it",
                      file=sys.stderr)
