"""The server's overhead (``dltop export --table overhead``, issue 41): each serve
configuration that says which of dltop's models it serves (``shape``) beside dltop's own
``generate`` runs of that model, prompt and new tokens.

A serve configuration **pairs** with a generate configuration of model ``shape``, the
same ``prompt_tokens`` and ``new_tokens``, and a batch equal to its ``concurrency``:
concurrency 1 against batch 1 is the like-for-like pair (one sequence decoded at a time
on both sides); concurrency c against batch c is labelled as such (the server's c
requests arrive and finish apart, the batch's c sequences step together). What else
differs between the two sides is stated in the row, never silently mixed: the
precision, the host, the devices or GPU model, and the lengths the server reported
(its usage) where they are not the asked ones. Its figures are the metrics of
:mod:`dltop.results.metrics` of each side: TPOT and TTFT (p50 / p90 / p99 with n), their
ratio and difference (p50s), and output tokens per second (generate: its throughput).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dltop import catalog
from dltop.errors import UserError
from dltop.results import caption, identity, queries
from dltop.results.aggregate import ConfigResult, config_results
from dltop.results.metricdefs import PCT
from dltop.results.metricdefs import metric as metric_spec
from dltop.results.metrics import value_of
from dltop.results.places import place_labeller, placed_identities, rank
from dltop.results.table import Cell, Column, Millis, Role, Row, Table, fmt_seconds, key_cell

if TYPE_CHECKING:  # annotations only: sqlite-utils costs ~0.1 s to import (store.reader)
    import sqlite_utils

SHAPE = "shape"
LENGTH_KEYS = ("prefix_tokens", "prompt_tokens_spread", "new_tokens_spread")
"""Serve workload settings under which the prompts are not ``prompt_tokens`` long each."""
NOTE_RULE = ("Pairs: a serve configuration that says which of dltop's models it serves "
             "(shape) beside each generate configuration of that model with the same "
             "prompt_tokens and new_tokens and a batch equal to its concurrency. TPOT and "
             "TTFT: p50 / p90 / p99 (n) of the measured requests of the ok runs of each "
             "side; serve/generate and serve − generate: of the p50s. Out tok/s: the serve "
             "runs' output tokens over their window; generate: its throughput.")
NOTE_BATCH = ("concurrency c ~ batch c: the server's c requests in flight arrive and "
              "finish apart; the batch's c sequences step together: a like, not the same, "
              "schedule.")
NOTE_DIFFERS = ("differs: what is not the same on the two sides, stated (precision, host, "
                "devices, the lengths served by the server's usage, else the client's "
                "estimate, said so; a client-bound or contaminated side).")


@dataclass(frozen=True)
class Pair:
    """A serve configuration beside a generate configuration of its shape."""

    serve: ConfigResult
    gen: ConfigResult
    differs: tuple[str, ...]
    """What is not the same on both sides (``precision generate bf16, serve fp32``)."""

    @property
    def like(self) -> bool:
        """Concurrency 1 against batch 1: one sequence at a time on both sides."""
        return self.gen.batch_size == 1


def _lengths_said(serve: ConfigResult) -> list[str]:
    """The lengths the server reported (its usage, median over the measured ok requests)
    where they are not the asked ``prompt_tokens`` / ``new_tokens``."""
    reqs = [q for r in serve.runs for q in r.serving if q.ok]
    out = []
    prompts = [q.prompt_tokens for q in reqs if q.prompt_tokens is not None]
    if prompts and statistics.median(prompts) != serve.identity.get("prompt_tokens"):
        out.append(f"served prompts {statistics.median(prompts):g} tokens (the server's "
                   f"usage), asked {serve.identity.get('prompt_tokens')}")
    outs = [q.output_tokens for q in reqs]
    if outs and statistics.median(outs) != serve.identity.get("new_tokens"):
        # without usage the count is the client's estimate (its chunks or words), no fact
        estimated = sum(q.tokens_estimated for q in reqs)
        how = f" (estimated for {estimated} of {len(reqs)}: no usage)" if estimated else ""
        out.append(f"served {statistics.median(outs):g} new tokens{how}, asked "
                   f"{serve.identity.get('new_tokens')}")
    return out


def differences(serve: ConfigResult, gen: ConfigResult) -> tuple[str, ...]:
    """What differs between a serve and a generate configuration besides the pairing."""
    out = []
    sp, gp = serve.identity.get("precision"), gen.identity.get("precision")
    if sp != gp:
        out.append(f"precision generate {gp}, serve {sp} (the profile's; the server's "
                   "command sets its own)")
    if serve.host != gen.host:
        out.append(f"host generate {gen.host}, serve {serve.host}")
    if serve.device != gen.device:
        out.append(f"devices generate {gen.device}, serve {serve.device}")
    elif (serve.gpu_name or "") != (gen.gpu_name or ""):
        out.append(f"GPU generate {gen.gpu_name or '?'}, serve {serve.gpu_name or '?'}")
    if serve.client_bound:
        out.append("serve client-bound (its figures measure the client as much)")
    out += [f"{side} contaminated (another process on its devices)" for side, res in
            (("generate", gen), ("serve", serve)) if res.contaminated]
    return (*out, *_lengths_said(serve))


def _why_alone(serve: ConfigResult, gens: Sequence[ConfigResult]) -> str:
    """Why a serve configuration with a shape has no generate configuration beside it."""
    shape, ident = serve.identity[SHAPE], serve.identity
    if spread := [k for k in LENGTH_KEYS if ident.get(k) is not None]:
        return f"{serve.model}: its prompts are not prompt_tokens long each ({', '.join(spread)})"
    same = [g for g in gens if g.model == shape]
    if not same:
        return f"no generate run of {shape} (set mode = \"generate\" runs of models = " \
               f"[\"{shape}\"] beside the serve runs of {serve.model})"
    want = (ident.get("prompt_tokens"), ident.get("new_tokens"))
    tokens = [g for g in same if (g.identity.get("prompt_tokens"),
                                  g.identity.get("new_tokens")) == want]
    if not tokens:
        have = sorted({f"{g.identity.get('prompt_tokens')}/{g.identity.get('new_tokens')}"
                       for g in same})
        return (f"the generate runs of {shape} have prompt_tokens/new_tokens "
                f"{', '.join(have)}; the serve runs of {serve.model} {want[0]}/{want[1]}")
    return (f"no generate run of {shape} at batch {ident.get('concurrency')} (the serve "
            f"runs' concurrency; batches run: "
            f"{', '.join(str(b) for b in sorted({g.batch_size for g in tokens}))})")


def pairs(results: Sequence[ConfigResult], where: str) -> tuple[list[Pair], list[str]]:
    """Every pair of a serve configuration with a generate configuration of its shape,
    and why each serve configuration left out has none.

    Raises:
        UserError: no serve configuration, none with a ``shape``, or no pair at all (the
            reasons said).
    """
    served = [r for r in results if r.identity.get("mode") == "serve"]
    if not served:
        raise UserError(f"--table overhead: no serve runs in {where} (it sets mode = "
                        '"serve" runs beside mode = "generate" runs of the same model: '
                        "docs/serving.md#the-servers-overhead)")
    shaped = [r for r in served if r.identity.get(SHAPE)]
    if not shaped:
        raise UserError(f"--table overhead: the serve runs of {where} do not say which of "
                        f"dltop's models they serve: set shape = \"NAME\" (one of "
                        f"{', '.join(catalog.TRANSFORMER_MODELS)}) in their [[matrix]] entry")
    gens = [r for r in results if r.identity.get("mode") == "generate"]
    found: list[Pair] = []
    alone: list[str] = []
    for s in shaped:
        ident = s.identity
        mine = [g for g in gens if g.model == ident[SHAPE]
                and g.identity.get("prompt_tokens") == ident.get("prompt_tokens")
                and g.identity.get("new_tokens") == ident.get("new_tokens")
                and g.batch_size == ident.get("concurrency")
                and not any(ident.get(k) is not None for k in LENGTH_KEYS)]
        if not mine:
            alone.append(_why_alone(s, gens))
        found += [Pair(s, g, differences(s, g)) for g in mine]
    if not found:
        raise UserError(f"--table overhead: no serve run of {where} pairs with a generate "
                        f"run: {'; '.join(dict.fromkeys(alone))}")
    if left := len(served) - len(shaped):
        alone.append(f"{left} serve configuration{'s' * (left > 1)} without a shape")
    return found, list(dict.fromkeys(alone))


COLUMNS = (
    Column("pairing", "pairing", Role.KEY),
    Column("tpot_generate", "TPOT generate s", Role.VALUE, "s", detail=PCT, ms=Millis.ALWAYS),
    Column("tpot_serve", "TPOT serve s", Role.VALUE, "s", detail=PCT, ms=Millis.ALWAYS),
    Column("tpot_ratio", "TPOT serve/generate", Role.VALUE, "1"),
    Column("tpot_diff", "TPOT serve − generate s", Role.VALUE, "s", ms=Millis.ALWAYS),
    Column("ttft_generate", "TTFT generate s", Role.VALUE, "s", detail=PCT, ms=Millis.ALWAYS),
    Column("ttft_serve", "TTFT serve s", Role.VALUE, "s", detail=PCT, ms=Millis.ALWAYS),
    Column("out_generate", "out tok/s generate", Role.VALUE, "tokens/s"),
    Column("out_serve", "out tok/s serve", Role.VALUE, "tokens/s"),
    Column("runs", "runs generate + serve", Role.KEY),
    Column("differs", "differs", Role.KEY),
)


def _metric_cell(res: ConfigResult, name: str) -> Cell:
    val = value_of(res, name)
    return Cell(val.text(metric_spec(name)), val.value, res.status, dict(val.extra))


def _compare_cells(p: Pair) -> tuple[Cell, Cell]:
    """TPOT serve / generate and serve − generate, of the p50s; why not, without both."""
    g, s = value_of(p.gen, "tpot").value, value_of(p.serve, "tpot").value
    if g is None or s is None or g <= 0:
        why = "n/a: no TPOT on " + ("both sides" if g is None and s is None
                                    else "the generate side" if g is None or g <= 0
                                    else "the serve side")
        return Cell(why, None, "none"), Cell(why, None, "none")
    return Cell(f"{s / g:.3g}", s / g, "ok"), Cell(fmt_seconds(s - g), s - g, "ok")


def _pairing(p: Pair) -> str:
    c = p.gen.batch_size
    rate = p.serve.identity.get("request_rate")
    at = f" at {identity.fmt_value(rate)} req/s" if rate not in (None, "inf") else ""
    return f"concurrency 1 = batch 1{at}" if p.like else f"concurrency {c} ~ batch {c}{at}"


def overhead_table(db: sqlite_utils.Database, camps: Sequence[queries.CampaignRow], *,
                   results: Sequence[ConfigResult] | None = None) -> Table:
    """The server's overhead table of resolved campaigns; ``results``: their
    :func:`config_results`, when the caller read them already.

    Raises:
        UserError: no serve run, none with a shape, or no pair (:func:`pairs`).
    """
    where = "campaign " + ", ".join(str(c.id) for c in camps)
    if results is None:
        results = config_results(db, [c.id for c in camps])
    found, alone = pairs(results, where)
    found.sort(key=lambda p: (rank(p.gen.model, catalog.MODELS), p.serve.model,
                              not p.like, p.gen.batch_size, identity.sort_value(
                                  p.serve.identity.get("request_rate")), p.gen.framework))
    idents = placed_identities([p.serve for p in found])
    # the shape and the concurrency have columns of their own (shape, pairing)
    var = identity.variation(idents).without(SHAPE, "concurrency")
    gen_var = identity.variation(placed_identities([p.gen for p in found]))
    gen_keys = gen_var.fields
    label = place_labeller([x for p in found for x in (p.serve, p.gen)])
    rows = []
    for p, ident in zip(found, idents, strict=True):
        settings = ", ".join(f"{k} {identity.shown(k, p.gen.identity.get(k))}"
                             for k in gen_keys)
        gen_text = f"{p.gen.framework} batch {p.gen.batch_size}" + \
            (f" ({settings})" if settings else "")
        dev = label(p.serve) if label(p.serve) == label(p.gen) else \
            f"{label(p.gen)} / {label(p.serve)}"
        ratio, diff = _compare_cells(p)
        cells = (key_cell(p.gen.model), key_cell(p.serve.model), key_cell(gen_text),
                 key_cell(dev), *var.cells(ident), key_cell(_pairing(p)),
                 _metric_cell(p.gen, "tpot"), _metric_cell(p.serve, "tpot"), ratio, diff,
                 _metric_cell(p.gen, "ttft"), _metric_cell(p.serve, "ttft"),
                 _metric_cell(p.gen, "throughput"), _metric_cell(p.serve, "output-rate"),
                 key_cell(f"{p.gen.n_runs} + {p.serve.n_runs}"),
                 key_cell("; ".join(p.differs)))
        rows.append(Row(cells, {
            "identity": ident, "generate_identity": dict(p.gen.identity),
            "like_for_like": p.like, "differs": list(p.differs),
            "detail": {c.key: dict(cell.detail) for c, cell in zip(COLUMNS, cells[-11:],
                                                                   strict=True) if c.detail}}))
    columns = (Column("shape", "shape", Role.KEY), Column("served", "served model", Role.KEY),
               Column("generate", "generate", Role.KEY), Column("device", "device", Role.KEY),
               *var.columns(), *COLUMNS)
    notes = [NOTE_RULE]
    if any(not p.like for p in found):
        notes.append(NOTE_BATCH)
    if any(p.differs for p in found):
        notes.append(NOTE_DIFFERS)
    if alone:
        notes.append(f"Left out: {'; '.join(alone)}.")
    what = "the server's overhead against dltop's own generate runs"
    # each side's own: the serve runs' "mode serve, iterations 10" is not the generate runs'
    constants = "; ".join(f"{side} runs' {text}" for side, text in (
        ("serve", var.caption()), ("generate", gen_var.caption())) if text)
    lines, meta = caption.context(db, camps, constants)
    return Table(title=caption.title(camps, what), comment=caption.comment(camps, what),
                 columns=columns, rows=tuple(rows), notes=tuple(notes), caption=lines,
                 meta={**meta, "table": "overhead", "identity": var.as_json(),
                       "left_out": alone})
