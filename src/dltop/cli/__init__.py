"""Command line: ``dltop run | export | compare | runs | profiles | devices | doctor``.

A thin client over the headless core. Every :class:`~dltop.errors.DltopError`
is printed as one line, without a traceback, and sets the exit status: 2 for a
:class:`~dltop.errors.UserError` (bad input, nothing written), 1 for a
:class:`~dltop.errors.SetupError` (pip, apt-get, an engine that did not start).
Exit status of ``dltop run``: 0 when every run ended ok or with an expected
benchmark outcome (``oom``, ``unsupported``, ``unsatisfiable``), 1 when any run
crashed, timed out, diverged or failed its Slurm setup, 130 when stopped with Ctrl-C, 2 on
bad input.

This package may print with Rich; it is outside the headless core. ``parser`` builds the
arguments, one module per command family implements them (``run``, ``control``,
``results``, ``info``, ``viewer``), and :func:`main` dispatches and turns errors into
exit statuses.

Start-up is part of every command's cost (``benchmarks/startup.py``), so nothing is
imported before it is needed: :data:`COMMANDS` names each command's implementation
as ``"module:function"`` and :func:`main` imports only that module, and a command
module imports what it uses inside its functions. A new subcommand adds its parser
in ``parser.py`` and one entry here; ``tests/core/test_startup_imports.py`` checks
what ``dltop.cli`` and the read-only commands load.
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
from collections.abc import Callable, Sequence

from dltop.catalog import Control
from dltop.cli.common import EXIT_INTERRUPTED, fit_output_encoding
from dltop.cli.parser import build_parser
from dltop.errors import DltopError
from dltop.textsafe import multiline, one_line  # messages quote paths and names: no raw ESC

__all__ = ["main"]


COMMANDS: dict[str, str] = {
    "export": "results:cmd_export", "compare": "results:cmd_compare",
    "runs": "results:cmd_runs", "check": "results:cmd_check", "profiles": "info:cmd_profiles",
    "status": "control:cmd_status", "devices": "info:cmd_devices", "env": "info:cmd_env",
    "doctor": "info:cmd_doctor", "tui": "viewer:cmd_tui",
    "prune": "storage:cmd_prune", "vacuum": "storage:cmd_vacuum",
    "import": "storage:cmd_import",
    "report": "report:cmd_report",
    "data": "info:cmd_data",
    "serve": "serve:cmd_serve", "exporter": "serve:cmd_exporter",
    "log": "logs:cmd_log", "agent": "serve:cmd_agent",
    **{verb.value: "control:cmd_control" for verb in Control},
}
"""Every subcommand but ``run`` (which also takes the command line) -> its implementation,
as ``module:function`` in this package (imported only when that command runs)."""


def command(name: str) -> Callable[[argparse.Namespace], int]:
    """The implementation of subcommand ``name`` (importing its module now)."""
    module, function = COMMANDS[name].split(":")
    impl: Callable[[argparse.Namespace], int] = getattr(
        importlib.import_module(f"dltop.cli.{module}"), function)
    return impl


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``dltop`` console script."""
    fit_output_encoding()  # before anything prints, --help included
    args = build_parser().parse_args(argv)
    try:
        if args.command == "run":
            from dltop.cli.run import cmd_run

            return cmd_run(args, list(sys.argv if argv is None else ["dltop", *argv]))
        if args.command in COMMANDS:
            return command(args.command)(args)
        if args.command is None and sys.stdout.isatty():
            return command("tui")(args)
        build_parser().print_help()
        return 0
    except DltopError as exc:
        print(f"dltop: error: {multiline(str(exc))}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("dltop: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except UnicodeEncodeError as exc:
        # Without a UTF-8 locale (LANG=C) Python reads non-ASCII arguments and names as
        # surrogate escapes, which SQLite and UTF-8 text refuse: bad input, one line.
        bad = exc.object[exc.start:exc.end]
        if not isinstance(bad, str) or not all(0xDC80 <= ord(ch) <= 0xDCFF for ch in bad):
            raise
        given = exc.object.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
        print(f"dltop: error: {one_line(given)!r} is not text in this locale's encoding "
              f"({sys.getfilesystemencoding()}): run dltop in a UTF-8 locale "
              "(LANG=C.UTF-8) or with PYTHONUTF8=1", file=sys.stderr)
        return 2
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

        db_arg = getattr(args, "db", None)  # the reading commands' --db is a list
        line, code = explain_failure(resolve_db_path(
            db_arg[0] if isinstance(db_arg, list) and db_arg else db_arg or None), exc)
        print(f"dltop: error: {multiline(line)}", file=sys.stderr)  # it names the path
        return code
