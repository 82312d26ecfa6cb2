"""Command line: ``dltop run | export | compare | runs | profiles | devices | doctor``.

A thin client over the headless core. Every :class:`~dltop.errors.DltopError`
is printed as one line, without a traceback, and sets the exit status: 2 for a
:class:`~dltop.errors.UserError` (bad input, nothing written), 1 for a
:class:`~dltop.errors.SetupError` (pip, apt-get, an engine that did not start).
Exit status of ``dltop run``: 0 when every run ended ok or with an expected
benchmark outcome (``oom``, ``unsupported``, ``unsatisfiable``), 1 when any run
crashed, timed out or diverged, 130 when stopped with Ctrl-C, 2 on bad input.

This package may print with Rich; it is outside the headless core. ``parser`` builds the
arguments, one module per command family implements them (``run``, ``control``,
``results``, ``info``, ``viewer``), and :func:`main` dispatches and turns errors into
exit statuses.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Callable, Sequence

from dltop.catalog import Control
from dltop.cli.common import EXIT_INTERRUPTED
from dltop.cli.control import cmd_control, cmd_status
from dltop.cli.info import cmd_devices, cmd_doctor, cmd_env, cmd_profiles
from dltop.cli.parser import EXPORT_METRICS, build_parser
from dltop.cli.results import cmd_compare, cmd_export, cmd_runs
from dltop.cli.run import cmd_run
from dltop.cli.storage import cmd_prune, cmd_vacuum
from dltop.cli.viewer import cmd_tui
from dltop.errors import DltopError

__all__ = ["EXPORT_METRICS", "main"]


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "export": cmd_export, "compare": cmd_compare, "runs": cmd_runs, "profiles": cmd_profiles,
    "status": cmd_status, "devices": cmd_devices, "env": cmd_env, "doctor": cmd_doctor,
    "tui": cmd_tui, "prune": cmd_prune, "vacuum": cmd_vacuum,
    **{verb.value: cmd_control for verb in Control},
}
"""Every subcommand but ``run`` (which also takes the command line) -> its implementation."""


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``dltop`` console script."""
    args = build_parser().parse_args(argv)
    try:
        if args.command == "run":
            return cmd_run(args, list(sys.argv if argv is None else ["dltop", *argv]))
        if args.command in COMMANDS:
            return COMMANDS[args.command](args)
        if args.command is None and sys.stdout.isatty():
            return cmd_tui(args)
        build_parser().print_help()
        return 0
    except DltopError as exc:
        from dltop.textsafe import multiline  # messages quote paths and names: no raw ESC

        print(f"dltop: error: {multiline(str(exc))}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("dltop: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # `dltop ... | head`: the reader left. Point stdout at /dev/null so the
        # interpreter's final flush does not raise again, and exit as a C tool would.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    except Exception as exc:
        # A malformed page, a schema changed by hand: one line. sqlite3 is looked up, not
        # imported: a command that never loaded it cannot have raised its errors.
        sqlite3 = sys.modules.get("sqlite3")
        if sqlite3 is None or not isinstance(exc, sqlite3.Error):
            raise
        from dltop.store.db import explain_failure, resolve_db_path

        line, code = explain_failure(resolve_db_path(getattr(args, "db", None)), exc)
        print(f"dltop: error: {line}", file=sys.stderr)
        return code
