"""``dltop export | compare | runs``: a stored campaign's results, printed or written."""

from __future__ import annotations

import argparse
import sys

from dltop.cli.common import EXIT_REGRESSION, open_reader
from dltop.errors import UserError


def cmd_export(args: argparse.Namespace) -> int:
    from dltop.results import export, queries

    if args.metric is not None and args.table != "pivot":
        raise UserError(f"--metric picks the pivot table's cells; --table {args.table} "
                        "shows its own columns (drop --metric)")
    metric = args.metric or "time"
    db = open_reader(args.db)
    ids = [c.id for c in queries.resolve_campaigns(db, args.campaign)]
    if args.output:
        fmt = args.format or export.format_for_path(args.output, default="md")
        export.export_to_file(db, ids, args.output, fmt=fmt, table=args.table,
                              metric=metric)
    else:
        table = export.results_table(db, ids, args.table, metric)
        sys.stdout.write(export.render(table, args.format or "md"))
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from dltop.results import compare, queries
    from dltop.results.render import render

    db = open_reader(args.db)
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


def cmd_runs(args: argparse.Namespace) -> int:
    from dltop.results import identity, queries
    from dltop.tui.listing import print_rows

    db = open_reader(args.db)
    campaign_id = None
    if args.campaign is not None:
        campaign_id = queries.resolve_campaign(db, args.campaign).id
    rows = queries.recent_runs(db, limit=args.limit, campaign_id=campaign_id)
    # the identity fields that tell the listed runs apart, beside the usual keys
    idents = identity.run_identities(db, [r.run_id for r in rows])
    var = identity.variation(idents.values())
    headers = ("run", "campaign", "started", "status", "framework", "model", "batch",
               "device", *var.headers, "rep", "median s", "samples/s", "cv", "note")
    cells = [(str(r.run_id), str(r.campaign_id), (r.started_at or "")[:19].replace("T", " "),
              r.status, r.framework, r.model, str(r.batch_size), r.device,
              *var.texts(idents[r.run_id]), str(r.repeat + 1),
              f"{r.median_s:.4g}" if r.median_s is not None else "-",
              f"{r.samples_per_s:.1f}" if r.samples_per_s is not None else "-",
              f"{r.cv:.3f}" if r.cv is not None else "-",
              ("noisy " if r.noisy else "") + (r.message or ""))
             for r in rows]
    print_rows(headers, cells, var.caption() if rows else None)
    return 0
