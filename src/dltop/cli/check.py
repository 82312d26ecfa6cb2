"""``dltop check CAMPAIGN``: a campaign's results against its performance references."""

from __future__ import annotations

import argparse
import sys

from dltop.cli.common import EXIT_REGRESSION, open_reading


def cmd_check(args: argparse.Namespace) -> int:
    from dltop.results import checks, queries, references
    from dltop.results.render import render

    db = open_reading(args.db)
    camps = queries.resolve_campaigns(db, args.campaign, given_as="check")
    verdicts = checks.check(db, [c.id for c in camps])
    sys.stdout.write(render(references.check_table(verdicts, camps), args.format))
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
