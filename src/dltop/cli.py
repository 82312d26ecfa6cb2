"""Command line: ``dltop run | export | compare | runs | profiles | devices | doctor``.

A thin client over the headless core. Every :class:`~dltop.errors.DltopError`
is printed as one line, without a traceback, and sets the exit status: 2 for a
:class:`~dltop.errors.UserError` (bad input, nothing written), 1 for a
:class:`~dltop.errors.SetupError` (pip, apt-get, an engine that did not start).
Exit status of ``dltop run``: 0 when every run ended ok or with an expected
benchmark outcome (``oom``, ``unsupported``, ``unsatisfiable``), 1 when any run
crashed, timed out or diverged, 130 when stopped with Ctrl-C, 2 on bad input.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dltop import __version__
from dltop.catalog import FAILURE_STATUSES, CampaignStatus, Control
from dltop.errors import DltopError, UserError

if TYPE_CHECKING:
    from dltop.jobs.events import EngineEvent

EXIT_FAILED_RUNS = 1
EXIT_REGRESSION = 1
EXPORT_METRICS = ["time", "mean-time", "throughput", "power", "energy", "gpu-memory",
                  "host-memory", "cpu", "tflops", "mfu"]
"""``dltop export --metric`` choices (dltop.results.metrics.METRICS; kept literal so that
the parser imports no results code)."""
EXIT_INTERRUPTED = 130


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="dltop", description=__doc__.split("\n")[0])
    p.add_argument("--version", action="version", version=f"dltop {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    def db_arg(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--db", metavar="PATH",
                        help="database file (default: $DLTOP_DB or "
                             "~/.local/share/dltop/dltop.db)")

    run = sub.add_parser("run", help="run one or more profiles as a campaign")
    run.add_argument("profiles", nargs="*", metavar="PROFILE",
                     help="built-in profile name or path to a .toml file")
    run.add_argument("--detach", action="store_true",
                     help="run the campaign in a background engine that survives the "
                          "terminal closing; watch it with 'dltop status'")
    run.add_argument("--resume", action="store_true",
                     help="continue an unfinished campaign whose engine died (reaps its "
                          "orphaned runners, re-queues the interrupted run)")
    run.add_argument("--campaign", type=int, default=None, metavar="ID",
                     help="with --resume: which campaign (default: the latest unfinished)")
    db_arg(run)
    run.add_argument("--headless", action="store_true",
                     help="plain progress (automatic when stdout is not a terminal)")
    run.add_argument("--json", action="store_true", help="one JSON event per line on stdout")
    run.add_argument("--skip-unavailable", action="store_true",
                     help="record jobs this host cannot run as 'unsatisfiable' instead of "
                          "refusing the campaign")
    run.add_argument("--pack", action="store_true",
                     help="run jobs at once on disjoint GPUs / CPU cores (throughput; the "
                          "default runs one at a time for clean numbers)")

    def fake_arg(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--fake-gpus", type=_count, default=None, metavar="N",
                        help="simulate N GPUs for telemetry (demo/tests; marked simulated "
                             "everywhere; also $DLTOP_FAKE_GPUS)")

    fake_arg(run)
    run.add_argument("--gpu-hz", type=float, default=10.0, help="GPU sampling rate (10)")
    run.add_argument("--host-hz", type=float, default=2.0, help="host sampling rate (2)")
    run.add_argument("--no-telemetry", action="store_true", help="do not sample devices")

    tui = sub.add_parser("tui", help="the live viewer (also: dltop with no command)")
    db_arg(tui)
    fake_arg(tui)
    tui.add_argument("--campaign", type=int, default=None, metavar="ID",
                     help="show this campaign (default: follow the newest)")
    tui.add_argument("--refresh-hz", type=float, default=4.0,
                     help="device refresh rate (4)")
    tui.add_argument("--no-telemetry", action="store_true", help="do not read devices")
    tui.add_argument("--no-resume", action="store_true",
                     help="only watch: do not start engines for campaigns whose engine died")

    envp = sub.add_parser("env", help="build a framework's own environment (CNTK)")
    env_sub = envp.add_subparsers(dest="env_command", metavar="ACTION", required=True)
    setup = env_sub.add_parser("setup", help="build the environment a framework runs in")
    setup.add_argument("framework", choices=["cntk"])
    setup.add_argument("--prefix", type=Path, default=None,
                       help="where (default: $DLTOP_CNTK_ENV or ~/.local/share/dltop/envs/cntk)")
    setup.add_argument("--python", default=None, help="a Python 3.6/3.7 interpreter to use")

    dev = sub.add_parser("devices", help="one snapshot of every GPU and the host")
    dev.add_argument("--json", action="store_true")
    fake_arg(dev)
    doc = sub.add_parser("doctor", help="check NVML, drivers and frameworks")
    fake_arg(doc)

    exp = sub.add_parser("export", help="print a campaign's results table")
    db_arg(exp)
    exp.add_argument("--campaign", default="latest", metavar="REF",
                     help="an id, a name (its most recent campaign), latest (default), all, "
                          "or a comma-separated list (3,5): one table over all of them")
    exp.add_argument("--format", default=None, choices=["md", "csv", "json", "latex"],
                     help="default: the -o file's suffix (.md .csv .json .tex), else md")
    exp.add_argument("--metric", default=None, choices=EXPORT_METRICS,
                     help="the pivot's cells: time (median s/iter, default), mean-time, "
                          "throughput (samples/s), power (W), energy (J/sample), gpu-memory "
                          "and host-memory (MiB), cpu (%%), tflops (TFLOP/s), mfu (%%)")
    exp.add_argument("--table", default="pivot", choices=["pivot", "summary", "scaling"],
                     help="pivot: the paper's table of one metric (default); summary: one "
                          "row per configuration with every metric and a 95%% CI; scaling: "
                          "time, speedup and efficiency against one device")
    exp.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")

    cmp = sub.add_parser("compare", help="B/A per configuration of two campaigns, with a "
                                         "95%% CI and a verdict")
    db_arg(cmp)
    cmp.add_argument("a", metavar="A", help="baseline campaign(s): id, name, latest, all, "
                                            "or a list (3,5)")
    cmp.add_argument("b", metavar="B", help="campaign(s) compared with it: id, name, latest, "
                                            "all, or a list (3,5)")
    cmp.add_argument("--metric", default="time", choices=["time", "throughput"])
    cmp.add_argument("--threshold", type=float, default=0.05,
                     help="smallest relative change called significant (0.05 = 5%%)")
    cmp.add_argument("--format", default="md", choices=["md", "csv", "json", "latex"])
    cmp.add_argument("--fail-on-regression", action="store_true",
                     help="exit 1 when any configuration of B is significantly slower")

    for verb, text in ((Control.PAUSE, "pause a running campaign after its current run"),
                       (Control.RESUME, "resume a paused campaign"),
                       (Control.CANCEL, "cancel a campaign: stop its current run, drop its queue")):
        ctl = sub.add_parser(verb, help=text)
        db_arg(ctl)
        ctl.add_argument("--campaign", default=None, metavar="ID",
                         help="default: the latest unfinished campaign")

    st = sub.add_parser("status", help="the engine's state: campaigns, queue, current run")
    db_arg(st)

    runs = sub.add_parser("runs", help="list recent runs with their status")
    db_arg(runs)
    runs.add_argument("--campaign", default=None, metavar="ID|latest")
    runs.add_argument("--limit", type=int, default=30)

    prof = sub.add_parser("profiles", help="list built-in profiles, or show one's jobs")
    prof_sub = prof.add_subparsers(dest="profiles_command", metavar="SUBCOMMAND")
    show = prof_sub.add_parser("show", help="print the jobs a profile expands to")
    show.add_argument("profile", metavar="NAME_OR_FILE")
    return p


def _count(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = -1
    if n < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}")
    return n


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``dltop`` console script."""
    args = _parser().parse_args(argv)
    try:
        if args.command == "run":
            return _cmd_run(args, list(sys.argv if argv is None else ["dltop", *argv]))
        if args.command == "export":
            return _cmd_export(args)
        if args.command == "compare":
            return _cmd_compare(args)
        if args.command == "runs":
            return _cmd_runs(args)
        if args.command == "profiles":
            return _cmd_profiles(args)
        if args.command == "status":
            return _cmd_status(args)
        if args.command in tuple(Control):
            return _cmd_control(args)
        if args.command == "devices":
            return _cmd_devices(args)
        if args.command == "env":
            from dltop.envsetup import default_prefix, setup_cntk

            setup_cntk(args.prefix or default_prefix(), args.python)
            return 0
        if args.command == "doctor":
            return _cmd_doctor(args)
        if args.command == "tui" or (args.command is None and sys.stdout.isatty()):
            return _cmd_tui(args)
        _parser().print_help()
        return 0
    except DltopError as exc:
        print(f"dltop: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("dltop: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # `dltop ... | head`: the reader left. Point stdout at /dev/null so the
        # interpreter's final flush does not raise again, and exit as a C tool would.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE


# run ------------------------------------------------------------------------
def _cmd_run(args: argparse.Namespace, argv: list[str]) -> int:
    from dltop.jobs import campaign
    from dltop.jobs.allocator import DeviceAllocator
    from dltop.jobs.engine import Engine, default_logs_dir
    from dltop.jobs.environment import core_order
    from dltop.profiles.loader import load
    from dltop.store import Store, connect, resolve_db_path
    from dltop.telemetry import gpu_count, open_gpu_backend
    from dltop.telemetry.sampler import Sampler, check_rate

    gpu_hz = check_rate("--gpu-hz", args.gpu_hz)
    host_hz = check_rate("--host-hz", args.host_hz)
    db_path = resolve_db_path(args.db)
    if args.detach:
        if not args.resume:  # refuse bad input here, where the user sees it
            campaign.preflight([load(ref) for ref in args.profiles], gpu_count(),
                               args.skip_unavailable, args.pack)
        return _detach(argv, db_path, default_logs_dir(db_path))
    backend = None if args.no_telemetry else open_gpu_backend(args.fake_gpus)
    n_gpus = gpu_count()
    if args.resume:
        if args.profiles or args.pack:
            raise UserError("--resume takes no profiles and no --pack: it continues a stored "
                            "campaign as it was queued")
        from dltop.jobs.resume import resume

        store = Store(connect(db_path, create=False))
        resumed = resume(store, args.campaign)
        campaign_id, name, queued = resumed.campaign_id, resumed.name, resumed.jobs
        pack = resumed.pack
        print(f"dltop: resuming campaign {campaign_id}: {len(queued)} jobs queued, "
              f"{resumed.lost_runs} interrupted run(s) re-queued, "
              f"{resumed.killed_processes} orphaned process(es) killed", file=sys.stderr)
    else:
        if not args.profiles:
            raise UserError("dltop run needs at least one PROFILE (or --resume)")
        profiles = [load(ref) for ref in args.profiles]
        plan = campaign.preflight(profiles, n_gpus, args.skip_unavailable, args.pack)
        for warning in plan.warnings:
            print(f"dltop: warning: {warning}", file=sys.stderr)
        store = Store(connect(db_path))
        campaign_id, queued = campaign.create(store, plan, argv)
        name, pack = plan.name, plan.pack
    sink: Callable[[EngineEvent], None]
    ctx: contextlib.AbstractContextManager[Any]
    if args.json:
        sink = _print_json
        ctx = contextlib.nullcontext()
    else:
        from dltop.tui.progress import HeadlessProgress

        sink = ctx = HeadlessProgress(interactive=sys.stdout.isatty() and not args.headless)
    engine = Engine(store, campaign_id, name, queued, logs_dir=default_logs_dir(db_path),
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
    if status == CampaignStatus.CANCELLED:
        print(f"dltop: campaign {campaign_id} cancelled; finished runs are stored in {db_path}",
              file=sys.stderr)
        return EXIT_INTERRUPTED
    if any(engine.counts.get(s, 0) for s in FAILURE_STATUSES):
        return EXIT_FAILED_RUNS
    return 0


def _detach(argv: list[str], db_path: Path, logs_dir: Path) -> int:
    from dltop.jobs.launch import start_engine

    run_args = [a for a in argv[2:] if a != "--detach"]
    launch = start_engine(run_args, db_path, logs_dir)
    if launch.exit_code is None:
        print(f"dltop: engine started in the background (pid {launch.pid}); "
              f"log: {launch.log_path}\n"
              "       watch: dltop (the TUI) or dltop status    steer: dltop pause | resume | "
              "cancel")
        return 0
    sys.stderr.write(launch.log_tail)
    return launch.exit_code


def _print_json(event: EngineEvent) -> None:
    print(json.dumps(event.to_dict(), default=str), flush=True)


# pause / resume / cancel -----------------------------------------------------------
def _cmd_control(args: argparse.Namespace) -> int:
    from dltop.procs import engine_alive
    from dltop.store import Store

    store = Store(_open_existing(args.db))
    open_ = store.queue.open_campaigns()
    if args.campaign is not None:
        open_ = [c for c in open_ if str(c.id) == str(args.campaign)]
    if not open_:
        which = f"campaign {args.campaign}" if args.campaign else "any campaign"
        raise UserError(f"{which}: nothing unfinished to {args.command}")
    camp = open_[-1]
    if not engine_alive(camp.engine_pid, camp.engine_start_time):
        raise UserError(f"campaign {camp.id} has no running engine (it died or was killed); "
                        "continue it with 'dltop run --resume'")
    store.set_control(camp.id, Control(args.command))
    print(f"campaign {camp.id} ({camp.name}): {args.command} requested; the engine (pid "
          f"{camp.engine_pid}) acts on it within a second")
    return 0


def _cmd_status(args: argparse.Namespace) -> int:
    from dltop.procs import engine_alive
    from dltop.results import queries
    from dltop.store import Store

    db = _open_existing(args.db)
    queue = Store(db).queue
    open_ = queue.open_campaigns()
    if not open_:
        last = queries.campaigns(db, limit=1)
        if not last:
            print("no campaigns yet")
            return 0
        done = last[0]
        print(f"no engine running. Last campaign {done.id} `{done.name}`: {done.status}, "
              f"finished {done.finished_at or '-'}")
        return 0
    for c in open_:
        alive = engine_alive(c.engine_pid, c.engine_start_time)
        counts = queries.status_counts(db, c.id)
        shown = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
        engine = f"engine pid {c.engine_pid}" if alive else \
            "engine NOT running (dltop run --resume continues it)"
        packed = " (packed: runs share the host on disjoint devices)" \
            if queue.packs(c.id) else ""
        print(f"campaign {c.id} `{c.name}`: {c.status}{packed}; {engine}; jobs: {shown}")
        for r in queries.current_runs(db, c.id):
            print(f"  run {r.run_id}: {r.label}: iteration {r.done}/{r.total}"
                  f"{' (warm-up)' if r.done < r.warmup else ''}, started {r.started_at}")
    return 0


# tui ---------------------------------------------------------------------------------
def _cmd_tui(args: argparse.Namespace) -> int:
    from dltop.jobs.engine import default_logs_dir
    from dltop.store import connect, resolve_db_path
    from dltop.store.db import DB_ENV
    from dltop.telemetry import open_gpu_backend
    from dltop.telemetry.sampler import check_rate
    from dltop.tui.app import DltopApp

    db_arg = getattr(args, "db", None)
    hz = check_rate("--refresh-hz", getattr(args, "refresh_hz", 4.0))
    db_path = resolve_db_path(db_arg)
    # A database named by the user must exist; the default one is created on first use.
    connect(db_path, create=not (db_arg or os.environ.get(DB_ENV)))
    backend = None if getattr(args, "no_telemetry", False) else \
        open_gpu_backend(getattr(args, "fake_gpus", None))
    app = DltopApp(db_path, default_logs_dir(db_path), backend,
                   campaign_id=getattr(args, "campaign", None), device_hz=hz,
                   resume_orphans=not getattr(args, "no_resume", False))
    # Textual's strips cache themselves, so painting makes cyclic garbage and full
    # collections come every few seconds; freezing what start-up made (modules, classes,
    # about 55 000 objects) keeps them from scanning it, inside a keypress, each time.
    gc.collect()
    gc.freeze()
    result = app.run()
    if result == "leave":
        print("dltop: the engine keeps running; re-attach with 'dltop', or 'dltop status'")
    return 0


# devices / doctor -----------------------------------------------------------------
def _cmd_devices(args: argparse.Namespace) -> int:
    from dltop.telemetry import open_gpu_backend
    from dltop.telemetry.report import render_devices, snapshot_devices

    report = snapshot_devices(open_gpu_backend(args.fake_gpus))
    if args.json:
        print(json.dumps(report.to_json(), indent=2, default=str))
    else:
        sys.stdout.write(render_devices(report))
    return 0


def _cmd_doctor(args: argparse.Namespace) -> int:
    from dltop.telemetry import open_gpu_backend
    from dltop.telemetry.report import doctor, render_doctor

    sys.stdout.write(render_doctor(doctor(open_gpu_backend(args.fake_gpus))))
    return 0


# export / runs -----------------------------------------------------------------
def _open_existing(db: str | None) -> Any:
    from dltop.store import connect, resolve_db_path

    return connect(resolve_db_path(db), create=False)


def _cmd_export(args: argparse.Namespace) -> int:
    from dltop.results import export, queries

    if args.metric is not None and args.table != "pivot":
        raise UserError(f"--metric picks the pivot table's cells; --table {args.table} "
                        "shows its own columns (drop --metric)")
    metric = args.metric or "time"
    db = _open_existing(args.db)
    ids = [c.id for c in queries.resolve_campaigns(db, args.campaign)]
    if args.output:
        fmt = args.format or export.format_for_path(args.output, default="md")
        export.export_to_file(db, ids, args.output, fmt=fmt, table=args.table,
                              metric=metric)
    else:
        table = export.results_table(db, ids, args.table, metric)
        sys.stdout.write(export.render(table, args.format or "md"))
    return 0


def _cmd_compare(args: argparse.Namespace) -> int:
    from dltop.results import compare, queries
    from dltop.results.render import render

    db = _open_existing(args.db)
    a = queries.resolve_campaigns(db, args.a)
    b = queries.resolve_campaigns(db, args.b)
    rows = compare.compare(db, [c.id for c in a], [c.id for c in b], args.metric,
                           args.threshold)
    sys.stdout.write(render(compare.compare_table(rows, a, b, args.metric, args.threshold,
                                                  db), args.format))
    if args.fail_on_regression and any(r.regression for r in rows):
        slower = sum(r.regression for r in rows)
        where = ",".join(str(c.id) for c in b)
        print(f"dltop: {slower} configuration(s) significantly slower in campaign {where}",
              file=sys.stderr)
        return EXIT_REGRESSION
    return 0


def _cmd_runs(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from dltop.results import identity, queries

    db = _open_existing(args.db)
    campaign_id = None
    if args.campaign is not None:
        campaign_id = queries.resolve_campaign(db, args.campaign).id
    rows = queries.recent_runs(db, limit=args.limit, campaign_id=campaign_id)
    # the identity fields that tell the listed runs apart, beside the usual keys
    idents = identity.run_identities(db, [r.run_id for r in rows])
    var = identity.variation(idents.values())
    table = Table("run", "campaign", "started", "status", "framework", "model", "batch",
                  "device", *var.headers, "rep", "median s", "samples/s", "cv", "note")
    for r in rows:
        table.add_row(
            str(r.run_id), str(r.campaign_id), (r.started_at or "")[:19].replace("T", " "),
            r.status, r.framework,
            r.model, str(r.batch_size), r.device, *var.texts(idents[r.run_id]),
            str(r.repeat + 1),
            f"{r.median_s:.4g}" if r.median_s is not None else "-",
            f"{r.samples_per_s:.1f}" if r.samples_per_s is not None else "-",
            f"{r.cv:.3f}" if r.cv is not None else "-",
            ("noisy " if r.noisy else "") + (r.message or ""),
        )
    # Not a terminal: a wide virtual console, so piped output is never truncated.
    console = Console(width=None if sys.stdout.isatty() else 200)
    console.print(table)
    if rows and var.caption():
        console.print(var.caption(), markup=False, highlight=False)
    return 0


# profiles ----------------------------------------------------------------------
def _cmd_profiles(args: argparse.Namespace) -> int:
    from dltop.profiles.loader import builtin_names, load

    if args.profiles_command == "show":
        prof = load(args.profile)
        print(f"# {prof.name}: {prof.description}" if prof.description else f"# {prof.name}")
        packing = "packed on disjoint devices" if prof.pack else "one run at a time"
        print(f"# source: {prof.source}; {len(prof.jobs)} jobs; {packing}")
        print(f"{'#':>4}  {'framework':<10} {'model':<10} {'batch':>6} {'device':<7} "
              f"{'rep':>3} {'iters':>5} {'warmup':>6} {'precision':<9} {'data':<9} timeout_s")
        for i, j in enumerate(prof.jobs, 1):
            print(f"{i:>4}  {j.framework:<10} {j.model:<10} {j.batch_size:>6} "
                  f"{j.device.label:<7} {j.repeat + 1:>3} {j.iterations:>5} {j.warmup:>6} "
                  f"{j.precision:<9} {j.data:<9} {j.timeout_s:g}")
        return 0
    for name in builtin_names():
        prof = load(name)
        print(f"{name:<18} {len(prof.jobs):>4} jobs  {prof.description}")
    return 0
