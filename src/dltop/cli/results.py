"""``dltop export | compare | runs``: a stored campaign's results, printed or written;
``dltop check CAMPAIGN``: its results against its performance references."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from dltop.catalog import RESULT_STATUSES
from dltop.cli.common import EXIT_REGRESSION, one_db_for_run, open_reading
from dltop.errors import UserError


def cmd_export(args: argparse.Namespace) -> int:
    from dltop.results import export, queries, slo

    if args.metric is not None and args.table != "pivot":
        raise UserError(f"--metric picks the pivot table's cells; --table {args.table} "
                        "shows its own columns (drop --metric)")
    run = getattr(args, "run", None)
    if (run is None) != (args.table != "profile"):
        raise UserError("--table profile needs --run N (the run whose operators to show)"
                        if run is None else
                        f"--run picks the run of --table profile, not of --table {args.table}")
    attainment = getattr(args, "attainment", None)
    if attainment is not None and args.table != "slo":
        raise UserError(f"--attainment is the target of --table slo, not of --table {args.table}")
    # `is None`, not `or`: --attainment 0 is refused by the table, never the default
    target = slo.DEFAULT_ATTAINMENT if attainment is None else attainment
    metric = args.metric or "time"
    flops = getattr(args, "flops", None)
    if flops is not None:
        if metric not in ("tflops", "mfu"):
            what = f"--metric {metric}" if args.metric else f"--table {args.table}"
            raise UserError("--flops picks the FLOPs convention of --metric tflops or mfu, "
                            f"not of {what}")
        metric = metric if flops == "nanogpt" else f"{metric}-{flops}"
    columns = [name for arg in getattr(args, "columns", None) or () for name in arg.split(",")
               if name.strip()]
    if run is not None:
        from dltop.cli.report import run_ids

        one_db_for_run(args.db)
        (run, *more) = run_ids(run, args.db, several=False)
        if more:
            raise UserError(f"--run: one run's operators at a time, got {args.run!r}")
    db = open_reading(args.db)
    # a run's profile names its own campaign
    ids = [] if run is not None else [c.id for c in queries.resolve_campaigns(db, args.campaign)]
    if args.output:
        suffix = Path(args.output).suffix.lower()
        if args.format is None and suffix not in (*export.SUFFIXES, "", ".txt"):
            # Markdown under a .xlsx or .html name opens as a broken file there
            raise UserError(f"{args.output}: dltop does not write {suffix} files (.md .csv "
                            ".json .tex by their suffix; .txt or none: Markdown); give "
                            "--format to write one under this name")
        fmt = args.format or export.format_for_path(args.output, default="md")
        export.export_to_file(db, ids, args.output, fmt=fmt, table=args.table,
                              metric=metric, run=run, columns=columns,
                              where=getattr(args, "where", None) or (),
                              attainment=target)
    else:
        sys.stdout.write(export.results_text(db, ids, args.format or "md", args.table,
                                             metric, run, columns,
                                             getattr(args, "where", None) or (),
                                             target))
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from dltop.results import abtest, compare, comparemetrics, comparetable, queries
    from dltop.results.render import render

    if args.by is None and args.b is None:
        raise UserError("compare needs B (the campaign(s) compared with A), or --by SETTING "
                        "to compare one setting's values inside A")
    if args.by is not None and args.b is not None:
        raise UserError(f"compare --by {args.by} compares inside one campaign: give "
                        f"CAMPAIGN only, not B ({args.b})")
    if args.baseline is not None and args.by is None:
        raise UserError("compare --baseline picks a value of --by SETTING: give --by too")
    flops = getattr(args, "flops", None)
    if flops is not None and args.metric != "mfu":
        raise UserError("compare --flops picks the FLOPs convention of --metric mfu")
    if flops == "no-embedding":
        args.metric = "mfu-no-embedding"
    db = open_reading(args.db)
    if args.by is not None:
        camps = queries.resolve_campaigns(db, args.a, given_as="compare CAMPAIGN")
        metrics = (args.metric,) if args.metric else comparemetrics.METRICS
        res = abtest.by_setting(db, [c.id for c in camps], args.by, args.baseline, metrics,
                                args.threshold, args.allow_flagged, args.within_run)
        sys.stdout.write(render(abtest.by_table(res, camps, args.threshold, db), args.format))
        rows = [p.comparison for p in res.pairs]
        return _gate(args, rows, ",".join(str(c.id) for c in camps)) \
            if args.fail_on_regression else 0
    metric = args.metric or "time"
    a = queries.resolve_campaigns(db, args.a, given_as="compare A")
    b = queries.resolve_campaigns(db, args.b, given_as="compare B")
    rows = compare.compare(db, [c.id for c in a], [c.id for c in b], metric,
                           args.threshold, allow_flagged=args.allow_flagged,
                           within_run=args.within_run)
    sys.stdout.write(render(comparetable.compare_table(rows, a, b, metric, args.threshold,
                                                  db), args.format))
    if not args.fail_on_regression:
        return 0
    return _gate(args, rows, ",".join(str(c.id) for c in b))


def _gate(args: argparse.Namespace, rows: list[Any], where: str) -> int:
    """``--fail-on-regression``: exit 1 on a conclusive regression; say what was not
    counted (flagged pairs, single runs)."""
    from dltop.results import compare

    # The gate counts conclusive regressions only, and says what it did not count.
    slower = sum(r.regression for r in rows)
    flagged = sum(r.inconclusive and r.why != compare.ONE_RUN for r in rows)
    single = sum(r.why == compare.ONE_RUN for r in rows)
    skipped = (f"; {flagged} flagged pair(s) inconclusive, not counted (--allow-flagged "
               "counts them)") if flagged else ""
    skipped += (f"; {single} pair(s) with a single run inconclusive, not counted "
                "(--within-run counts them)") if single else ""
    if slower:
        print(f"dltop: {slower} configuration(s) conclusively slower in campaign "
              f"{where}{skipped}", file=sys.stderr)
        return EXIT_REGRESSION
    if skipped:
        print(f"dltop: no conclusive regression in campaign {where}{skipped}",
              file=sys.stderr)
    return 0


RUN_KEYS = ("run_id", "campaign_id", "job_id", "attempt", "started_at", "status",
            "framework", "model", "batch_size", "device", "repeat", "n_iterations",
            "median_s", "samples_per_s", "cv", "noisy", "message", "wall_s", "queue_s")
"""``dltop runs --json/--csv`` keys, in order (``repeat`` counts from 1, as listed); JSON
adds ``identity`` (the job's whole identity), CSV has it as a JSON text column."""


def run_statuses(given: list[str] | None) -> list[str]:
    """``--status`` values (repeated or comma lists), checked against the run statuses.

    Raises:
        UserError: a status that is not one, naming the allowed ones.
    """
    from dltop.catalog import RunStatus

    wanted = [s.strip() for arg in given or () for s in arg.split(",") if s.strip()]
    allowed = [str(s) for s in RunStatus]
    bad = [s for s in wanted if s not in allowed]
    if bad:
        raise UserError(f"--status: unknown run status {', '.join(map(repr, bad))}: use one "
                        f"or more of {', '.join(allowed)}")
    return list(dict.fromkeys(wanted))


def cmd_runs(args: argparse.Namespace) -> int:
    from dltop.results import identity, idread, queries, tokens

    statuses = run_statuses(args.status)
    db = open_reading(args.db)
    campaign_id = None
    if args.campaign is not None:
        campaign_id = queries.resolve_campaign(db, args.campaign).id
    rows = study_runs(db, queries.recent_runs(db, limit=args.limit,
                                              campaign_id=campaign_id, statuses=statuses))
    # the identity fields that tell the listed runs apart, beside the usual keys
    idents = idread.run_identities(db, [r.run_id for r in rows])
    if args.json or args.csv:
        _print_records(rows, idents, as_json=args.json)
        return 0
    from dltop.results import oversub
    from dltop.results.display import number_text
    from dltop.store.read.environment import host_cores
    from dltop.tui.listing import ListColumn, print_listing

    var = identity.variation(idents.values())
    cores = host_cores(db, [r.run_id for r in rows])

    def note(r: Any) -> str:
        count = r.device.partition(":")[2]
        over = not r.device.startswith("gpu") and count.isdigit() and r.run_id in cores \
            and int(count) > cores[r.run_id]
        return ("noisy " if r.noisy else "") + \
            (f"{oversub.FLAG} ({cores[r.run_id]}-core host) " if over else "") + \
            (r.message or "")
    # Transformer runs count tokens: the header says which, or (mixed) each cell does.
    mixed = tokens.kind(r.model for r in rows) == tokens.MIXED
    rate = tokens.metric_for("throughput", [r.model for r in rows]).header

    def per_s(r: Any) -> str:
        if r.samples_per_s is None:
            return "-"
        word = (" tokens" if tokens.is_lm(r.model) else " samples") if mixed else ""
        rate = r.samples_per_s
        # from 1 000 on: 4 significant digits, grouped (392 200), as the exports show
        return f"{number_text(rate) if abs(rate) >= 1000 else f'{rate:.1f}'}{word}"

    def figures(r: Any) -> tuple[str, str, str]:
        median = number_text(r.median_s) if r.median_s is not None else "-"
        if r.status in RESULT_STATUSES or r.median_s is None:
            return median, per_s(r), f"{r.cv:.3f}" if r.cv is not None else "-"
        return f"{median} partial", "-", "-"  # a stopped run's: not a result

    # Slurm runs: the time in the queue beside the run's own (started excludes it)
    slurm = any(r.queue_s is not None for r in rows)
    times = (ListColumn("queued s", 4), ListColumn("run s", 4)) if slurm else ()
    columns = (ListColumn("run", 1), ListColumn("campaign", 4, setting=True),
               ListColumn("started", 6), *times, ListColumn("status", 1),
               ListColumn("framework", 1, setting=True), ListColumn("model", 1, setting=True),
               ListColumn("batch", 3, setting=True), ListColumn("device", 1, setting=True),
               *(ListColumn(h, 3) for h in var.headers), ListColumn("rep", 5),
               # the n behind the median: a time window measures more than `iterations`
               ListColumn("n iters", 5), ListColumn("median s", 1),
               ListColumn("per s" if mixed else rate, 3),
               ListColumn("cv", 5), ListColumn("note", 2, flex=True, min_width=12))
    cells = [(str(r.run_id), str(r.campaign_id), (r.started_at or "")[:19].replace("T", " "),
              *((_secs(r.queue_s), _secs(r.wall_s)) if slurm else ()), r.status,
              r.framework, r.model, str(r.batch_size), r.device,
              *var.texts(idents[r.run_id]), str(r.repeat + 1),
              "-" if r.n_iterations is None else str(r.n_iterations),
              *figures(r), note(r))
             for r in rows]
    print_listing(columns, cells, var.caption() if rows else None)
    return 0


def study_runs(db: Any, rows: list[Any]) -> list[Any]:
    """Runs of a study of several databases with their run and campaign ids as each
    database has them, written ``FILE:ID`` (:class:`~dltop.results.queries.StudyId`);
    the rows unchanged for one database."""
    import dataclasses

    from dltop.results import studyrefs
    from dltop.results.queries import StudyId

    refs = studyrefs.run_refs(db)
    if refs is None:
        return rows
    out = []
    for r in rows:
        label, cid, runs, jobs = refs[int(r.campaign_id)]
        out.append(dataclasses.replace(
            r, run_id=StudyId(r.run_id, f"{label}:{r.run_id - runs}"),
            campaign_id=StudyId(r.campaign_id, f"{label}:{cid}"),
            job_id=StudyId(r.job_id, f"{label}:{r.job_id - jobs}")))
    return out


def _plain(value: Any) -> Any:
    """An id as its database has it (a study's ``FILE:ID`` less FILE)."""
    from dltop.results.queries import StudyId

    return int(value.ref.rpartition(":")[2]) if isinstance(value, StudyId) else value


def _secs(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _print_records(rows: list[Any], idents: dict[int, dict[str, Any]], *,
                   as_json: bool) -> None:
    """The runs as data: a JSON array of objects, or CSV with a header row."""
    import json

    from dltop.results.queries import StudyId
    from dltop.results.render import json_text

    # a study of several databases: each run's ids as its database has them, and which
    study = bool(rows) and isinstance(rows[0].run_id, StudyId)
    records = [{**dict(zip(RUN_KEYS, (
        _plain(r.run_id), _plain(r.campaign_id), _plain(r.job_id), r.attempt, r.started_at,
        r.status, r.framework, r.model, r.batch_size, r.device, r.repeat + 1,
        r.n_iterations, r.median_s,
        r.samples_per_s, r.cv, r.noisy, r.message, r.wall_s, r.queue_s), strict=True)),
        "identity": idents.get(r.run_id, {}),
        **({"database": str(r.run_id).rpartition(":")[0]} if study else {})}
        for r in rows]
    if as_json:
        sys.stdout.write(json_text(records))  # strict: a nan cv is null
        return
    import csv

    w = csv.writer(sys.stdout, lineterminator="\n")
    extra = ["database"] if study else []
    w.writerow([*RUN_KEYS, "identity", *extra])
    for rec in records:
        w.writerow([_csv_value(v) for v in (*(rec[k] for k in RUN_KEYS),
                                            json.dumps(rec["identity"], sort_keys=True),
                                            *(rec[k] for k in extra))])


def _csv_value(v: Any) -> Any:
    """A CSV field: flags as 1/0 (as the exports' numeric columns, which pandas and
    spreadsheets read as numbers), nothing for None or a non-finite number, text on one
    line and never read as a formula (:func:`dltop.textsafe.csv_cell`)."""
    import math

    from dltop.textsafe import csv_cell

    if isinstance(v, bool):
        return int(v)
    if isinstance(v, str):
        return csv_cell(v)
    if isinstance(v, float) and not math.isfinite(v):
        return ""
    return "" if v is None else v


def cmd_check(args: argparse.Namespace) -> int:
    from dltop.results import checks, queries, references
    from dltop.results.render import render

    db = open_reading(args.db)
    camps = queries.resolve_campaigns(db, args.campaign, given_as="check")
    verdicts = checks.check(db, [c.id for c in camps])
    sys.stdout.write(render(references.check_table(verdicts, camps, db), args.format))
    failed = [v for v in verdicts if v.outcome == references.FAIL]
    judged = [v for v in verdicts if v.ref is not None]
    if failed:
        print(f"dltop: {len(failed)} of {len(judged)} reference check(s) failed",
              file=sys.stderr)
        return EXIT_REGRESSION
    if not judged:
        # Not a failure (ReFrame's rule: no reference, no performance check), but said:
        # a pattern with a typo must not pass unnoticed.
        print("dltop: no configuration of the campaign has a reference ([references] in "
              "the profile, or [systems.NAME.references] with --system)", file=sys.stderr)
    return 0
