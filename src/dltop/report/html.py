"""The report page: one self-contained HTML file, figures inlined as SVG.

Nothing is loaded from anywhere: the style and the one small script (sorting the
summary table, choosing a run) are inline, every figure is an ``<svg>`` element
rendered offline by vl-convert (:mod:`dltop.report.specs`). Every text from the
database goes through :func:`dltop.textsafe.one_line` and :func:`html.escape`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from html import escape
from typing import Any

from dltop import __version__
from dltop.report.content import Figure, Report
from dltop.report.leftout import omitted_lines
from dltop.report.specs import render, spec
from dltop.report.vlsize import SCREEN
from dltop.results.display import left_out_lines, shown, superscript, without_unavailable
from dltop.results.table import Cell, Role, Table
from dltop.textsafe import one_line

STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:1.5em auto;max-width:1200px;color:#222;
padding:0 1em}
h1{font-size:1.5em}h2{margin-top:2em;border-bottom:1px solid #ccc}
dl.env{display:grid;grid-template-columns:max-content 1fr;gap:.1em 1em}dl.env dt{color:#666}
dl.env dd{margin:0}
.scroll{overflow-x:auto}table.summary{border-collapse:collapse;font-size:12px}
.summary th,.summary td{padding:2px 6px;border-bottom:1px solid #eee;white-space:nowrap}
.summary th{cursor:pointer;background:#f4f4f4;position:sticky;top:0}
.summary th[aria-sort=ascending]::after{content:" ▲"}
.summary th[aria-sort=descending]::after{content:" ▼"}
.summary tr.fail td{background:#fdecea}
.summary td.reason{color:#a12;white-space:normal;min-width:16em}
figure{margin:1.5em 0}figcaption{color:#444;font-size:13px;max-width:60em}
figure svg{max-width:100%;height:auto}
ul.omitted{color:#666;font-size:13px}p.empty{font-size:1.2em;color:#a12}
select{max-width:100%}dd{overflow-wrap:anywhere}
.notes{color:#555;font-size:12px}
"""

SCRIPT = """
var NUM=/^-?\\d+(\\.\\d+)?(e[-+]?\\d+)?(\\s|\\/|$)/;
document.querySelectorAll('table.summary').forEach(function(t){
  var ths=t.tHead.rows[0].cells;
  Array.prototype.forEach.call(ths,function(th,i){th.addEventListener('click',function(){
    var asc=th.getAttribute('aria-sort')!=='ascending';
    Array.prototype.forEach.call(ths,function(h){h.removeAttribute('aria-sort');});
    th.setAttribute('aria-sort',asc?'ascending':'descending');
    var body=t.tBodies[0],rows=Array.prototype.slice.call(body.rows);
    function key(r){var c=r.cells[i];if(!c)return [1,''];
      var v=c.getAttribute('data-v'),t=c.textContent;
      if(v===null&&NUM.test(t))v=t;
      return v===null?[1,t]:[0,parseFloat(v)];}
    rows.sort(function(a,b){var x=key(a),y=key(b);
      if(x[0]!==y[0])return x[0]-y[0];
      var d=x[0]===0?x[1]-y[1]:x[1].localeCompare(y[1],undefined,{numeric:true});
      return asc?d:-d;});
    rows.forEach(function(r){body.appendChild(r);});
  });});
});
var sel=document.getElementById('run-select');
if(sel){sel.addEventListener('change',function(){
  document.querySelectorAll('figure.run').forEach(function(f){
    f.hidden=f.getAttribute('data-run')!==sel.value;});});}
"""


def _t(text: object) -> str:
    return escape(one_line(str(text)))


_ID = re.compile(r'(\bid="|url\(#|href="#)([^")]+)')


def inline_svg(svg: str, prefix: str) -> str:
    """An SVG document as an element of the page: its ids prefixed, so the clip paths of
    one figure never resolve to another's (Vega numbers them from 1 in each)."""
    body = svg[svg.index("<svg"):]
    return _ID.sub(lambda m: f"{m.group(1)}{prefix}-{m.group(2)}", body)


def figure_html(fig: Figure, draw: Callable[[Mapping[str, Any]], str], *,
                cls: str = "", hidden: bool = False) -> str:
    """A drawn figure with its caption (an omitted one is a line of
    :func:`omitted_html`)."""
    attrs = f' class="{cls}"' if cls else ""
    if fig.kind in ("run", "serverun"):
        attrs += f' data-run="{_t(fig.extra.get("run_id", ""))}"'
    attrs += " hidden" if hidden else ""
    svg = inline_svg(draw(spec(fig, SCREEN)), fig.key)
    return (f'<figure id="{_t(fig.key)}"{attrs}>{svg}<figcaption><b>{_t(fig.title)}.</b> '
            f"{_t(fig.caption)}</figcaption></figure>")


def omitted_html(figs: Sequence[Figure]) -> str:
    """The figures not drawn, one line per reason (:mod:`dltop.report.leftout`), or
    nothing; each figure's key stays an anchor on its line."""
    omitted = [f for f in figs if f.omitted]
    if not omitted:
        return ""
    lines = omitted_lines([(f.title, f.omitted) for f in omitted])
    anchors = "".join(f'<a id="{_t(f.key)}"></a>' for f in omitted)
    items = "".join(f"<li>{_t(line)}</li>" for line in lines)
    return f'<h2>Not drawn</h2>{anchors}<ul class="omitted" id="omitted">{items}</ul>'


NUMBER = re.compile(r"-?\d+(\.\d+)?(e[-+]?\d+)?(?=\s|/|$)")
"""A cell text the page's script sorts by its leading number (the script's ``NUM``)."""


def _cell(cell: Cell | None) -> str:
    """One cell; its closing tag is implied (HTML), which keeps a table of 10 000
    configurations a few MB. ``data-v`` carries the number to sort by only where the
    text does not start with it (``n/a``, other units)."""
    if cell is None:
        return "<td>"
    value = cell.value
    text = _t(cell.text)
    if not isinstance(value, int | float) or isinstance(value, bool):
        return f"<td>{text}"
    shown = NUMBER.match(text)
    if shown is not None and abs(float(shown.group(0)) - value) <= 5e-4 * abs(value):
        return f"<td>{text}"
    return f'<td data-v="{value:.9g}">{text}'


def summary_html(report: Report) -> str:
    """The summary table, sortable by any header; failed rows coloured, with why; its
    columns n/a for one reason in every row named once under it instead."""
    table = without_unavailable(report.summary)
    dropped = left_out_lines(report.summary, table)  # every line of them, not the first
    head = "".join(f'<th title="{_t(c.unit)}">{_t(c.header)}</th>' for c in table.columns)
    right = ",".join(f".summary td:nth-child({i})" for i, c in
                     enumerate(table.columns, 1) if c.role is Role.VALUE)
    body = []
    status_at = [c.key for c in table.columns].index("status")
    for i, row in enumerate(table.rows):
        status = row.cells[status_at]
        failed = status is not None and status.text != "ok"
        cells = "".join(_cell(c) for c in row.cells)
        reason = report.reasons.get(i, "")
        why = f"<td class=reason>{_t(reason)}" if reason else "<td>"
        body.append(f'<tr{" class=fail" if failed else ""}>{cells}{why}')
    notes = "".join(f"<p>{_t(n)}</p>" for n in (*table.notes, *dropped))
    style = f"<style>{right}{{text-align:right}}</style>" if right else ""
    return (f'{style}<div class="scroll"><table class="summary" id="summary"><thead><tr>'
            f"{head}<th>reason</th></tr></thead><tbody>\n{chr(10).join(body)}\n</tbody>"
            f'</table></div><div class="notes">{notes}</div>')


def table_html(table: Table, key: str) -> str:
    """A results table as the exports show it (:func:`dltop.results.display.shown`: ms,
    4 significant digits, n/a by footnote), sortable, with its notes and caption."""
    kept = without_unavailable(table)
    view = shown(kept)
    head = "".join(f'<th title="{_t(c.unit)}">{_t(h)}</th>'
                   for c, h in zip(kept.columns, view.headers, strict=True))
    body = "\n".join("<tr>" + "".join(f"<td>{_t(text)}{superscript(mark) if mark else ''}"
                                       for text, mark in row) for row in view.rows)
    reasons = [f"{superscript(k)} n/a: {why}" for k, why in enumerate(view.footnotes, 1)]
    notes = "".join(f"<p>{_t(n)}</p>" for n in (*reasons, *kept.notes, *kept.caption))
    return (f'<p id="{_t(key)}-title"><b>{_t(view.title)}</b></p><div class="scroll">'
            f'<table class="summary" id="{_t(key)}"><thead><tr>{head}</tr></thead><tbody>\n'
            f'{body}\n</tbody></table></div><div class="notes">{notes}</div>')


def _svg(vl: Mapping[str, Any]) -> str:
    return render(vl, "svg").decode()


SECTIONS = (("devices", "Time per mini-batch vs threads / GPUs"),
            ("scaling", "Scaling: speedup and efficiency"),
            ("batch", "Throughput and memory vs batch size"),
            ("energy", "Power and energy per sample"),
            ("precision", "Precision: throughput and energy per sample"),
            ("profile", "Operator profiles: time per step by operator"),
            ("serving", "Serving: latency, throughput, goodput and energy vs request rate"))


def page_parts(report: Report, draw: Callable[[Mapping[str, Any]], str] = _svg,
               summary: str | None = None) -> list[str]:
    """The page's parts, in order, each a line (joined by newlines: the page): a writer
    encodes them one by one instead of holding the page as text and bytes at once
    (11.6 + 5.8 MB at 10 000 configurations, while Vega's engine holds its most).

    Args:
        summary: :func:`summary_html` of the report made before, when the caller
            dropped the summary table's rows to draw the figures with less memory.
    """
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           f"<title>{_t(report.title)}</title><style>{STYLE}</style></head><body>",
           f"<h1>{_t(report.title)}</h1>", "<h2>Campaigns</h2><ul>"]
    for c in report.campaigns:
        ended = f", finished {c.finished_at}" if c.finished_at else ""
        out.append(f"<li>{c.id} <b>{_t(c.name)}</b>: {_t(c.status)}, created "
                   f"{_t(c.created_at)}{_t(ended)}, host {_t(c.host or 'n/a')}</li>")
    out.append("</ul><h2>Settings and environment</h2><dl class=env>")
    if report.constants:
        out.append(f"<dt>settings</dt><dd>{_t(report.constants)}</dd>")
    out += [f"<dt>{_t(k)}</dt><dd>{_t(v)}</dd>" for k, v in report.environment]
    out.append("</dl><h2>Summary</h2><p class=notes>Click a header to sort.</p>")
    out.append(summary_html(report) if summary is None else summary)
    if report.empty:
        out.append(f'<p class="empty" id="empty">{_t(report.empty)}</p>')
    if report.left_out:
        out.append(f'<p class="notes" id="left-out">{_t(report.left_out)}</p>')
    for kind, heading in SECTIONS:
        figs = [f for f in report.figures if f.kind == kind and not f.omitted]
        answers = [(t, k) for t, k in ((report.slo, "slo"), (report.overhead, "overhead"))
                   if t is not None and kind == "serving"]
        if figs or answers:
            for unit in ("per token", "per sample or token"):  # transformers: tokens
                if all(unit in f.title for f in figs):
                    heading = heading.replace("per sample", unit)
            served = [f for f in figs if "request latency" in f.title]
            if kind == "devices" and served:  # a serve run's time is a request's
                heading = "Median e2e request latency vs threads / GPUs" if len(
                    served) == len(figs) else "Time per mini-batch or request vs threads / GPUs"
            out.append(f"<h2>{_t(heading)}</h2>")
            # the questions the figures below are read for
            out += [table_html(table, key) for table, key in answers]
            out += [figure_html(f, draw) for f in figs]
    out.append(omitted_html([*report.figures, *report.runs]))
    if report.runs:
        out.append(f"<h2>Runs over time</h2><p>{_t(report.runs_note)} Choose a run: "
                   '<select id="run-select">')
        drawn = [f for f in report.runs if not f.omitted]
        out += [f'<option value="{_t(f.extra.get("run_id", ""))}">{_t(f.title)}</option>'
                for f in drawn if f.kind == "run"]  # a serve run's requests: with its run
        out.append("</select></p>")
        first = drawn[0].extra.get("run_id") if drawn else None
        out += [figure_html(f, draw, cls="run", hidden=f.extra.get("run_id") != first)
                for f in drawn]
    out.append(f'<p class="notes">dltop {_t(__version__)}; figures: Vega-Lite rendered '
               f"offline to SVG by vl-convert.</p><script>{SCRIPT}</script></body></html>")
    return out
