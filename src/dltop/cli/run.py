"""``dltop run``: a campaign in this process (progress on the terminal) or detached."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from dltop.catalog import CampaignStatus
from dltop.cli.common import EXIT_FAILED_RUNS, EXIT_INTERRUPTED, EXIT_SHORT_RUNS
from dltop.textsafe import counted, multiline, one_line

if TYPE_CHECKING:
    from dltop.jobs.events import EngineEvent
    from dltop.jobs.resume import Resumed
    from dltop.jobs.start import Launch


def cmd_run(args: argparse.Namespace, argv: list[str]) -> int:
    from dltop.jobs.start import StartOptions, start_campaign
    from dltop.store import resolve_db_path
    from dltop.telemetry.sampler import check_rate

    options = StartOptions(
        tuple(argv), system=args.system, pack=args.pack, skip_unavailable=args.skip_unavailable,
        detach=args.detach, resume=args.resume, campaign_id=args.campaign,
        telemetry=not args.no_telemetry, gpu_hz=check_rate("--gpu-hz", args.gpu_hz),
        host_hz=check_rate("--host-hz", args.host_hz), fake_gpus=args.fake_gpus)
    handle = start_campaign(args.profiles, resolve_db_path(args.db), options)
    if handle.launch is not None:
        return _detached(handle.launch)
    from dltop.jobs.foreground import run_here, take_over

    if handle.campaign_id is None:
        handle, resumed = take_over(handle)
        _say_resumed(resumed)
    for warning in handle.warnings:
        print(f"dltop: warning: {one_line(warning)}", file=sys.stderr)
    sink: Callable[[EngineEvent], None]
    ctx: contextlib.AbstractContextManager[Any]
    if args.json:
        sink = _JsonEvents()
        ctx = contextlib.nullcontext()
    else:
        from dltop.tui.progress import HeadlessProgress

        sink = ctx = HeadlessProgress(interactive=sys.stdout.isatty() and not args.headless)
    with ctx:
        outcome = run_here(handle, sink)
    lost = outcome.telemetry_loss
    if lost.batches:  # each run's note says its own share; this is the campaign's total
        print(f"dltop: warning: {lost.batches} telemetry batch(es) could not be stored "
              f"({one_line(lost.first_error or '?')}); the runs' notes say which",
              file=sys.stderr)
    if outcome.status == CampaignStatus.CANCELLED:
        print(f"dltop: campaign {outcome.campaign_id} "
              f"{one_line(outcome.stop_reason or 'cancelled')}; finished runs are stored in "
              f"{one_line(str(handle.db_path))}; 'dltop run --resume' runs the jobs left",
              file=sys.stderr)
        sig = outcome.stop_signal
        return EXIT_INTERRUPTED if sig is None else 128 + int(sig)
    if outcome.failed_runs:
        return EXIT_FAILED_RUNS
    if outcome.short_runs:
        print("dltop: a run ended short (fewer measured iterations than asked); exit "
              f"{EXIT_SHORT_RUNS}: 'dltop runs' names it", file=sys.stderr)
        return EXIT_SHORT_RUNS
    return 0


def _say_resumed(resumed: Resumed) -> None:
    slurm = (f", {len(resumed.cancelled_slurm_jobs)} orphaned Slurm job(s) cancelled "
             f"({one_line(', '.join(resumed.cancelled_slurm_jobs))})"
             if resumed.cancelled_slurm_jobs else "")
    if resumed.kept_runs:  # COMPLETED in Slurm after the engine died: kept, not re-run
        slurm += (f", {counted(len(resumed.kept_runs), 'finished Slurm run')} kept "
                  f"({', '.join(map(str, resumed.kept_runs))})")
    if resumed.uncancelled:  # a cancelled campaign: its cancelled jobs run after all
        slurm += (f" (it was cancelled: "
                  f"{counted(resumed.uncancelled, 'cancelled job')} queued again)")
    print(f"dltop: resuming campaign {resumed.campaign_id}: "
          f"{counted(resumed.queued, 'job')} queued, "
          f"{counted(resumed.lost_runs, 'interrupted run')} re-queued, "
          f"{counted(resumed.killed_processes, 'orphaned process', 'orphaned processes')}"
          f" killed{slurm}", file=sys.stderr)


def _detached(launch: Launch) -> int:
    if launch.exit_code is None:
        print(f"dltop: engine started in the background (pid {launch.pid}); "
              f"log: {one_line(str(launch.log_path))}\n"
              "       watch: dltop (the TUI) or dltop status    steer: dltop pause | resume | "
              "cancel")
        return 0
    sys.stderr.write(multiline(launch.log_tail))
    return launch.exit_code


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
