"""The parsers of dltop's results commands: ``export``, ``report``, ``compare`` and
``check`` (they read campaigns, from one database or several); out of parser.py."""

from __future__ import annotations

from typing import Any

from dltop.results.metricdefs import METRICS


def results_parsers(sub: Any, dbs_arg: Any) -> None:
    """``dltop export``, ``report``, ``compare`` and ``check``."""
    exp = sub.add_parser("export", help="print a campaign's results table")
    dbs_arg(exp)
    exp.add_argument("--campaign", default="latest", metavar="REF",
                     help="an id, a name (its most recent campaign), latest (default), all, "
                          "or a comma-separated list (3,5): one table over all of them")
    exp.add_argument("--format", default=None, choices=["md", "csv", "json", "latex", "tex"],
                     type=_format, help="tex is latex; default: the -o file's suffix (.md "
                                        ".csv .json .tex; .txt or none: md)")
    # the declared metrics (metricdefs is light: no results code runs to list them)
    exp.add_argument("--metric", default=None, choices=list(METRICS),
                     help="the pivot's cells (docs/metrics.md): time (median s/iter, "
                          "default), " + ", ".join(f"{n} ({m.unit})" if m.unit else n
                                                   for n, m in METRICS.items() if n != "time")
                          .replace("%", "%%"))
    exp.add_argument("--flops", default=None, choices=["nanogpt", "no-embedding"],
                     help="the FLOPs convention of --metric tflops and mfu: nanogpt "
                          "(default: the tied embedding counted) or no-embedding "
                          "(torchtitan's); causal attention is not halved in either")
    exp.add_argument("--table", default="pivot",
                     choices=["pivot", "summary", "scaling", "profile", "slo", "overhead"],
                     help="pivot: the paper's table of one metric (default); summary: one "
                          "row per configuration with every metric and a 95%% CI; scaling: "
                          "time, speedup and efficiency against one device; profile: the "
                          "top operators of one run (--run N, profile = true); slo: per "
                          "serve configuration, the highest request_rate meeting its SLOs "
                          "and its J per output token; overhead: serve runs (shape = NAME) "
                          "beside dltop's own generate runs of that model, TPOT and TTFT "
                          "of both, their ratio and difference")
    exp.add_argument("--attainment", default=None, type=float, metavar="SHARE",
                     help="--table slo: the share of requests that must meet the SLOs "
                          "(default 0.9, DistServe's; docs/metrics.md)")
    exp.add_argument("--run", default=None, metavar="N",
                     help="the run of --table profile ('dltop runs' lists run ids)")
    exp.add_argument("--columns", action="append", metavar="NAMES",
                     help="only these columns, in this order: headers or keys, comma-separated "
                          "or repeated (--columns model,batch,samples/s,J/sample)")
    exp.add_argument("--where", action="append", metavar="COLUMN=VALUE[,VALUE]",
                     help="only the rows whose key column holds one of the values "
                          "(--where model=resnet-50 --where precision=bf16,fp16)")
    exp.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")

    rep = sub.add_parser("report", help="an offline HTML report (figures inlined as SVG), "
                                        "or paper figures with --figures")
    dbs_arg(rep)
    rep.add_argument("--campaign", default="latest", metavar="REF",
                     help="an id, a name, latest (default), all, or a list (3,5)")
    rep.add_argument("-o", "--output", metavar="FILE",
                     help="the HTML file (default: report.html; not written with --figures "
                          "unless given)")
    rep.add_argument("--figures", metavar="DIR",
                     help="write each figure as a file sized for a two-column paper, with "
                          "their captions in DIR/figures.md")
    rep.add_argument("--format", default=None, choices=["svg", "png", "pdf"],
                     help="the --figures files' format (default svg; png at 300 ppi)")
    rep.add_argument("--max-runs", type=int, default=24, metavar="N",
                     help="per-run figures drawn at most (24; first repeats first)")
    rep.add_argument("--run", default=None, metavar="N[,M...]",
                     help="draw these runs over time instead ('dltop runs' lists run ids)")

    cmp = sub.add_parser("compare", help="B/A per configuration of two campaigns (or of "
                                         "one setting's values inside one: --by), with a "
                                         "95%% CI and a verdict")
    dbs_arg(cmp)
    cmp.add_argument("a", metavar="A", help="baseline campaign(s): id, name, latest, all, "
                                            "or a list (3,5); with --by, the campaign")
    cmp.add_argument("b", metavar="B", nargs="?", default=None,
                     help="campaign(s) compared with it: id, name, latest, all, or a list "
                          "(3,5); not with --by")
    cmp.add_argument("--by", default=None, metavar="SETTING",
                     help="pair A's configurations that differ only in this setting "
                          "(compile, cuda_graphs, precision, framework, batch, any identity "
                          "field) and compare each value with the baseline")
    cmp.add_argument("--baseline", default=None, metavar="VALUE",
                     help="with --by: the value the others are compared with (default: "
                          "the setting's default where the campaign has it, compile off, "
                          "fp32...; else the first in queue order)")
    cmp.add_argument("--metric", default=None,
                     choices=[n for n, m in METRICS.items() if m.words],
                     help="default: time for A B; every metric a pair has for --by")
    cmp.add_argument("--flops", default=None, choices=["nanogpt", "no-embedding"],
                     help="with --metric mfu: the FLOPs convention (nanogpt, the default, "
                          "or no-embedding, torchtitan's)")
    cmp.add_argument("--within-run", action="store_true",
                     help="give pairs with a single-run side an interval from that run's "
                          "own samples, labelled within-run (default: inconclusive)")
    cmp.add_argument("--threshold", type=float, default=0.05,
                     help="smallest relative change called significant (default 0.05 = "
                          "5%%)")
    cmp.add_argument("--format", default="md", choices=["md", "csv", "json", "latex", "tex"],
                     type=_format, help="tex is latex")
    cmp.add_argument("--fail-on-regression", action="store_true",
                     help="exit 1 when any configuration of B is conclusively slower "
                          "(flagged pairs are inconclusive and do not count)")
    cmp.add_argument("--allow-flagged", action="store_true",
                     help="give pairs with a noisy, packed, shared, contaminated or "
                          "simulated side a verdict too (default: inconclusive)")

    chk = sub.add_parser("check", help="a campaign's results against its performance "
                                       "references (exit 0 all pass, 1 a failure)")
    dbs_arg(chk)
    chk.add_argument("campaign", nargs="?", default="latest", metavar="CAMPAIGN",
                     help="id, name, latest (default) or a list (3,5)")
    chk.add_argument("--format", default="md", choices=["md", "csv", "json"],
                     help="default md")


def _format(text: str) -> str:
    """A table format; ``tex`` (the file suffix) is read as ``latex``."""
    return "latex" if text == "tex" else text
