"""``dltop report``: one offline HTML file, or paper figures, of stored campaigns."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Iterator
from pathlib import Path

from dltop.errors import UserError
from dltop.textsafe import one_line

DEFAULT_OUTPUT = "report.html"


def run_ids(text: str, db: str | list[str] | None, option: str = "--run",
            several: bool = True) -> tuple[int, ...]:
    """``--run 12,14`` as run ids of the one database ``db`` names; a study's ``FILE:12``
    is taken where FILE is that database (its path or stem, as ``dltop runs`` of a study
    prints it). ``several``: the option takes a list (its error shows one).

    Raises:
        UserError: an item is not a positive whole number, or names another database.
    """
    from dltop.cli.common import db_list
    from dltop.results.studyrefs import in_file
    from dltop.store.db import resolve_db_path

    path = str(resolve_db_path(db_list(db)[0]))
    out = []
    for item in text.split(","):
        own = in_file(item.strip(), path)
        if not own.isdigit() or int(own) < 1:
            what = "run ids such as 12 or 12,14" if several else "a run id such as 12"
            raise UserError(f"{option}: expected {what} (or {Path(path).stem}:12, the run "
                            f"as a study names it), got {text!r}")
        out.append(int(own))
    return tuple(dict.fromkeys(out))


def _release_results() -> None:
    """Give the memory of the results read back before the figures are drawn.

    Drawing starts Vega in an embedded JavaScript engine (about 150 MB of its own): a
    report of 10 000 configurations kept its results (~70 MB, the per-process cache),
    and the C heap kept the pages they were freed from, beside it.
    """
    import contextlib
    import ctypes
    import gc

    from dltop.results.aggregate import forget_cached

    forget_cached()
    gc.collect()
    # glibc: return free heap pages to the system (elsewhere there is nothing to do)
    with contextlib.suppress(AttributeError, OSError):
        ctypes.CDLL(None).malloc_trim(0)


def _lines(parts: list[str]) -> Iterator[bytes]:
    """The page's parts as UTF-8 lines, each dropped once encoded."""
    for k in range(len(parts)):
        part, parts[k] = parts[k], ""
        yield (part + "\n" if k < len(parts) - 1 else part).encode()


def cmd_report(args: argparse.Namespace) -> int:
    """Check the output path, read the campaigns, render everything, then write."""
    from dltop.cli.common import one_db_for_run, open_reading
    from dltop.report import data, figures
    from dltop.results import queries

    if args.max_runs < 0:
        raise UserError(f"--max-runs: expected a number >= 0, got {args.max_runs}")
    if getattr(args, "run", None):
        one_db_for_run(args.db)
    only = run_ids(args.run, args.db) if getattr(args, "run", None) else ()
    if args.format is not None and args.figures is None:
        raise UserError("--format picks the --figures files' format (give --figures DIR)")
    output = Path(args.output) if args.output else (
        None if args.figures else Path(DEFAULT_OUTPUT))
    figdir = Path(args.figures) if args.figures else None
    if output is not None:
        figures.check_file(output)
    if figdir is not None:
        figures.check_dir(figdir)
    db = open_reading(args.db)
    camps = queries.resolve_campaigns(db, args.campaign)
    report = data.build(db, camps, max_runs=args.max_runs, only_runs=only)
    summary = None
    if output is not None:
        from dltop.report.html import summary_html

        # the table as HTML, then without its rows (50 MB at 10 000 configurations)
        # while Vega draws: only the page needs them, and it has them now
        summary = summary_html(report)
        report = dataclasses.replace(report, summary=dataclasses.replace(report.summary,
                                                                         rows=()))
    _release_results()
    files = figures.render_figures(report, args.format or "svg") if figdir else {}
    if output is not None:
        from dltop.report.html import page_parts

        parts = page_parts(report, summary=summary)  # every figure drawn before writing
        figures.write_file(output, _lines(parts))
        print(f"wrote {one_line(str(output))}")
    if figdir is not None:
        written = figures.write_figures(figdir, files)
        print(f"wrote {len(written) - 1} figure(s) and figures.md to {one_line(str(figdir))}")
    if report.empty:
        print(f"dltop: {one_line(report.empty)}", file=sys.stderr)
    return 0
