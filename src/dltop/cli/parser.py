"""The ``dltop`` argument parser: every subcommand, its options and their help."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dltop import __version__
from dltop.catalog import Control
from dltop.cli import daemon_parsers, results_parsers

DESCRIPTION = ("Command line: dltop run | status | pause | resume | cancel | runs | log | "
               "export | compare | check | report | serve | exporter | agent | prune | import | "
               "vacuum | profiles | data | devices | env | doctor; with no command (or tui), "
               "the live viewer.")


VIEWER_OPTIONS = ("db", "campaign", "fake_gpus", "refresh_hz", "no_telemetry", "no_resume",
                  "read_only")
"""The viewer's options, also taken before any command (``dltop --fake-gpus 8``)."""
SHARED_OPTIONS = frozenset({"db", "fake_gpus"})
"""Viewer options that, before another command, go to that command when it takes them."""
_GLOBAL = "global_"  # dest prefix of the options given before the command


class _Parser(argparse.ArgumentParser):
    """The top-level parser: options before the command reach the viewer, or the command.

    argparse lets a subcommand's defaults overwrite what the top level parsed under the
    same name, so the top level keeps its values under other names (``global_db``) and
    hands them over here, once the command is known.
    """

    def parse_known_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                         namespace: argparse.Namespace | None = None,
                         ) -> tuple[argparse.Namespace, list[str]]:
        ns, rest = super().parse_known_args(args, namespace)
        command = getattr(ns, "command", None)
        for name in VIEWER_OPTIONS:
            if not hasattr(ns, _GLOBAL + name):
                continue  # not given (SUPPRESS): the command's own default stands
            value = getattr(ns, _GLOBAL + name)
            delattr(ns, _GLOBAL + name)
            option = "--" + name.replace("_", "-")
            if command in (None, "tui"):
                if command is None or getattr(ns, name) in (None, False):
                    setattr(ns, name, value)  # after 'tui', its own option wins
            elif name in SHARED_OPTIONS and hasattr(ns, name):
                if getattr(ns, name) is None:
                    setattr(ns, name, value)
            else:
                self.error(f"{option} before '{command}': it is an option of the viewer "
                           f"('dltop [tui] {option} ...'); put the command's own options "
                           "after the command")
        return ns, rest


class _OneDb(argparse.Action):
    """``--db`` of a command that reads or writes one database: a second one is refused
    (argparse's store action kept the last silently; issue 40)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        if getattr(namespace, self.dest, None) not in (None, argparse.SUPPRESS):
            where = "before the command: the viewer" if self.dest.startswith(_GLOBAL) \
                else "this command"
            parser.error(f"{option_string} given twice: {where} uses one database "
                         "(several --db, after the command, are read as one by export, "
                         "compare, report, runs, check and status)")
        setattr(namespace, self.dest, values)


def build_parser() -> argparse.ArgumentParser:
    """The ``dltop`` argument parser, every subcommand included."""
    p = _Parser(prog="dltop", description=DESCRIPTION,
                usage="dltop [--db PATH] [--campaign ID] [--fake-gpus N] [--refresh-hz HZ] "
                      "[--no-telemetry] [--no-resume] [--read-only] [COMMAND ...]")
    p.add_argument("--version", action="version", version=f"dltop {__version__}")
    viewer_args(p, dest_prefix=_GLOBAL, default=argparse.SUPPRESS)
    # prog: argparse would otherwise build the commands' usage from the custom usage
    # above ("usage: dltop [--db PATH] ... [COMMAND ...] run")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", prog="dltop",
                           parser_class=argparse.ArgumentParser)

    def db_arg(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--db", metavar="PATH", action=_OneDb,
                        help="database file (default: $DLTOP_DB or "
                             "~/.local/share/dltop/dltop.db)")

    def dbs_arg(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--db", metavar="PATH", action="append",
                        help="database file (default: $DLTOP_DB or "
                             "~/.local/share/dltop/dltop.db); give it again to read "
                             "several as one study (campaigns then as FILE:ID, FILE the "
                             "path or its stem; docs/exports.md#several-databases)")

    run = sub.add_parser(
        "run", help="run one or more profiles as a campaign",
        epilog="exit status: 0 every job ok or an expected outcome (oom, unsupported, "
               "unsatisfiable); 1 a job failed (crashed, timeout, diverged, setup_failed); "
               "4 none failed but one ended short (fewer measured iterations than asked); "
               "2 bad input, nothing stored; 3 another engine took the campaign over; "
               "130 Ctrl-C or 'dltop cancel'; 143 SIGTERM; 129 SIGHUP. With --resume the "
               "campaign's jobs count, those earlier engines ran too (docs/profiles.md)")
    run.add_argument("profiles", nargs="*", metavar="PROFILE",
                     help="built-in profile name or path to a .toml file")
    flags(run, ("--detach", "run the campaign in a background engine that survives the "
                            "terminal closing; watch it with 'dltop status'"),
          ("--resume", "continue an unfinished campaign whose engine died (reaps its "
                       "orphaned runners, re-queues the interrupted run), or a cancelled "
                       "one (Ctrl-C, SIGTERM, 'dltop cancel': its cancelled jobs queued "
                       "again)"))
    run.add_argument("--campaign", type=int, default=None, metavar="ID",
                     help="with --resume: which campaign (default: the latest unfinished, "
                          "or the latest campaign if it was cancelled)")
    run.add_argument("--system", default=None, metavar="NAME",
                     help="the site: a [systems.NAME] table of ~/.config/dltop/config.toml "
                          "(Slurm defaults, references); stored with every run")
    db_arg(run)
    flags(run, ("--headless", "plain progress (automatic when stdout is not a terminal)"),
          ("--json", "one JSON event per line on stdout"),
          ("--skip-unavailable", "record jobs this host cannot run as 'unsatisfiable' "
                                 "instead of refusing the campaign"),
          ("--pack", "run jobs at once on disjoint GPUs / CPU cores (throughput; the "
                     "default runs one at a time for clean numbers)"))

    def fake_arg(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--fake-gpus", type=_count, default=None, metavar="N",
                        help="simulate N GPUs (at most 64) for telemetry (demo/tests; marked "
                             "simulated everywhere; also $DLTOP_FAKE_GPUS)")

    fake_arg(run)
    run.add_argument("--gpu-hz", type=float, default=10.0, metavar="HZ",
                     help="GPU sampling rate (10)")
    run.add_argument("--host-hz", type=float, default=2.0, metavar="HZ",
                     help="host sampling rate (2)")
    run.add_argument("--no-telemetry", action="store_true", help="do not sample devices")

    tui = sub.add_parser("tui", help="the live viewer (also: dltop with no command, its "
                                     "options before any command)")
    viewer_args(tui, several_db=True)

    daemon_parsers.serve_parsers(sub, db_arg, fake_arg)
    daemon_parsers.agent_parser(sub, fake_arg)

    envp = sub.add_parser("env", help="build a framework's own environment (CNTK)")
    env_sub = envp.add_subparsers(dest="env_command", metavar="ACTION", required=True)
    setup = env_sub.add_parser("setup", help="build the environment a framework runs in")
    setup.add_argument("framework", choices=["cntk"], help="the framework (CNTK only)")
    setup.add_argument("--prefix", type=Path, default=None,
                       help="where (default: $DLTOP_CNTK_ENV or ~/.local/share/dltop/envs/cntk)")
    setup.add_argument("--python", default=None, help="a Python 3.6/3.7 interpreter to use")

    data = sub.add_parser("data", help="generated data sets in the real formats (docs/data.md)")
    data_sub = data.add_subparsers(dest="data_command", metavar="ACTION", required=True)
    synth = data_sub.add_parser("synth", help="write a small learnable data set (MNIST IDX, "
                                              "CIFAR-10 python batches or PTB text) into DIR")
    synth.add_argument("kind", choices=["mnist", "cifar10", "ptb"],
                       help="mnist (fcn-r, lenet), cifar10 (alexnet-r, resnet-56, resnet-50 "
                            "at input_size 32) or ptb (lstm, the transformers)")
    synth.add_argument("dir", type=Path, metavar="DIR",
                       help="the directory to write (created if missing)")
    synth.add_argument("--train", type=int, default=None, metavar="N",
                       help="training images (PTB: words); default 6000/5000/60000, "
                            "10..60000/50000 (PTB 1..1000000)")
    synth.add_argument("--test", type=int, default=None, metavar="M",
                       help="test images (PTB: words of valid and of test); default "
                            "1000/1000/6000, 10..10000 (PTB 1..100000)")
    synth.add_argument("--seed", type=int, default=0, metavar="S",
                       help="random seed, 0..2^32-1 (0)")
    synth.add_argument("--force", action="store_true",
                       help="replace the files of an existing data set in DIR")

    dev = sub.add_parser("devices", help="one snapshot of every GPU and the host")
    dev.add_argument("--json", action="store_true", help="print one JSON object")
    fake_arg(dev)
    doc = sub.add_parser("doctor", help="check NVML, drivers and frameworks")
    fake_arg(doc)

    results_parsers.results_parsers(sub, dbs_arg)

    for verb, text in ((Control.PAUSE, "pause a running campaign after its current run"),
                       (Control.RESUME, "resume a paused campaign"),
                       (Control.CANCEL, "cancel a campaign: stop its current run, drop its queue")):
        ctl = sub.add_parser(verb.value, help=text)
        db_arg(ctl)
        ctl.add_argument("--campaign", default=None, metavar="ID",
                         help="default: the latest unfinished campaign")

    st = sub.add_parser("status", help="the engine's state: campaigns, queue, current run")
    dbs_arg(st)

    logp = sub.add_parser("log", help="print a run's runner.log (its id from 'dltop runs')")
    db_arg(logp)
    logp.add_argument("run", metavar="RUN", help="the run's id (a study's FILE:RUN too, "
                      "FILE this --db)")
    logp.add_argument("--tail", type=_count, default=None, metavar="N",
                      help="only the last N lines")
    logp.add_argument("-f", "--follow", action="store_true",
                      help="keep printing what the runner writes until the run ends")

    prune = sub.add_parser("prune", help="delete raw iterations, telemetry samples and run "
                                         "folders of ended campaigns; exports stay the same")
    db_arg(prune)
    prune.add_argument("--campaign", default=None, metavar="REF",
                       help="an id, a name, all, or a list (3,5); only ended campaigns "
                            "(default: every ended campaign older than --older-than)")
    prune.add_argument("--older-than", default=None, metavar="AGE",
                       help="ended longer ago than AGE: 30d, 12h, 2w, 90m, 45s (default 30d "
                            "without --campaign); also removes idle telemetry that old")
    prune.add_argument("--keep-summaries", action=argparse.BooleanOptionalAction, default=True,
                       help="keep runs and their summaries, so exports are unchanged (the "
                            "default); --no-keep-summaries deletes the campaigns entirely")
    flags(prune, ("--dry-run", "print what would be deleted and the space freed; delete "
                               "nothing"),
          ("--yes", "do not ask for confirmation (needed when stdin is not a terminal)"))

    imp = sub.add_parser("import", help="copy every campaign of other databases into this "
                                        "one (--db), under new ids; one transaction")
    db_arg(imp)
    imp.add_argument("sources", nargs="+", metavar="SOURCE",
                     help="a dltop database to copy from (opened read-only); campaigns "
                          "already in --db (their UUID) and unfinished ones are left out")

    vac = sub.add_parser("vacuum", help="checkpoint the WAL and rebuild the database file, "
                                        "giving freed space back (prints sizes)")
    db_arg(vac)

    runs = sub.add_parser("runs", help="list recent runs with their status")
    dbs_arg(runs)
    runs.add_argument("--campaign", default=None, metavar="ID|latest",
                      help="only this campaign's runs (default: every campaign)")
    runs.add_argument("--limit", type=_positive, default=30, metavar="N",
                      help="the N newest runs (default 30)")
    runs.add_argument("--status", action="append", default=None, metavar="S[,S...]",
                      help="only runs of these statuses (repeatable): ok, crashed, oom, ...")
    out = runs.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true",
                     help="print one JSON array of objects (units in the key names)")
    out.add_argument("--csv", action="store_true", help="print CSV with a header row")

    prof = sub.add_parser("profiles", help="list built-in profiles, or show one's jobs")
    prof_sub = prof.add_subparsers(dest="profiles_command", metavar="SUBCOMMAND")
    show = prof_sub.add_parser("show", help="print the jobs a profile expands to")
    show.add_argument("profile", metavar="NAME_OR_FILE",
                      help="a built-in profile's name or a .toml file")
    show.add_argument("--all", action="store_true",
                      help="every job, not the first 50 and a count of the rest")
    return p


def viewer_args(sp: argparse.ArgumentParser, dest_prefix: str = "",
                default: object = None, several_db: bool = False) -> None:
    """The viewer's options: on ``dltop tui``, and on ``dltop`` itself (given before any
    command, kept under ``dest_prefix`` names with ``SUPPRESS`` defaults).

    ``several_db``: ``dltop tui --read-only`` shows several ``--db`` as one study (the
    options before a command hand one database on to any command, so there it is one).
    """

    def arg(name: str, dflt: object, **kw: object) -> None:
        dest = dest_prefix + name.lstrip("-").replace("-", "_")
        sp.add_argument(name, dest=dest, default=dflt if default is None else default,
                        **kw)  # type: ignore[arg-type]

    arg("--db", None, metavar="PATH", action="append" if several_db else _OneDb,
        help="database file (default: $DLTOP_DB or ~/.local/share/dltop/dltop.db); "
             "the viewer creates it only when a campaign is added"
             + ("; several, with --read-only: one study, a snapshot taken at start"
                if several_db else ""))
    arg("--fake-gpus", None, type=_count, metavar="N",
        help="simulate N GPUs (at most 64) for telemetry (demo/tests; marked simulated "
             "everywhere; also $DLTOP_FAKE_GPUS)")
    arg("--campaign", None, type=int, metavar="ID",
        help="show this campaign (default: follow the newest)")
    arg("--refresh-hz", None, type=float, metavar="HZ", help="device refresh rate (4)")
    arg("--no-telemetry", False, action="store_true", help="do not read devices")
    arg("--no-resume", False, action="store_true",
        help="only watch: do not start engines for campaigns whose engine died")
    arg("--read-only", False, action="store_true",
        help="watch only: no add, cancel, pause, retry, move, remove, export or stopping "
             "the engine, and no engine started (what dltop serve runs)")


def flags(sp: argparse.ArgumentParser, *names_and_help: tuple[str, str]) -> None:
    """Add on/off options (``store_true``) to ``sp``, in the order given."""
    for name, text in names_and_help:
        sp.add_argument(name, action="store_true", help=text)


def _positive(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return n


def _count(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = -1
    if n < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}")
    return n
