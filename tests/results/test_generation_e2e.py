"""Issue 29, the host side of ``mode = "generate"``: a real child process runs the real
generation loop (``lm_loop.run_generate`` and ``dltop_protocol``), a real ``dltop run``
checks its ``generate`` events and stores them in ``generations``, and ``dltop export``
gives TTFT, TPOT, ITL and decode tokens/s that a hand computation confirms.

The child is tests/programs/proto_generate.py behind ``$DLTOP_PYTHON_TORCH``: only its
model is fake (prefill and decode advance the loop's clock by known amounts), so every
latency dltop stores is a known function of the request and token index.
"""

from __future__ import annotations

import csv
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tests.dltop_env import DltopEnv

from dltop.report import data, specs
from dltop.results import queries
from dltop.results.convergence import percentiles
from dltop.results.generation import decode_rate
from dltop.store.generations import unpack_seconds
from dltop.store.reader import open_reader

from .conftest import distinct_fraction

PROGRAMS = Path(__file__).resolve().parents[1] / "programs"
sys.path.insert(0, str(PROGRAMS))
import proto_generate as child  # noqa: E402

# One worker runs the campaign (a real engine): under `make test`'s --dist loadgroup the
# module fixture would otherwise run once on each worker.
pytestmark = pytest.mark.xdist_group("generation_e2e")

WARMUP, ITERS, PROMPT, NEW = 1, 6, 16, 8
GENERATE = f"""
[[matrix]]
frameworks = ["torch"]
models = ["gpt-tiny"]
batch_sizes = [2, 4]
devices = ["cpu:1"]
mode = "generate"
prompt_tokens = {{prompt}}
new_tokens = {NEW}
iterations = {ITERS}
warmup = {WARMUP}
timeout_s = 120
"""
PROFILE = 'name = "gen"\n' + GENERATE.format(prompt=PROMPT) + GENERATE.format(prompt=32) + """

[[matrix]]
frameworks = ["torch"]
models = ["gpt-tiny"]
batch_sizes = [2]
devices = ["cpu:1"]
mode = "inference"
iterations = 3
warmup = 1
timeout_s = 120
"""


class Env(DltopEnv):
    def __init__(self, tmp: Path) -> None:
        super().__init__(tmp, PROGRAMS / "proto_generate.py", PROFILE)


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> Env:
    e = Env(tmp_path_factory.mktemp("gen"))
    res = e.dltop("run", str(e.profile), "--headless", "--no-telemetry", "--json")
    assert res.returncode == 0, res.stderr + res.stdout
    return e


def _requests() -> list[tuple[float, list[float]]]:
    """(TTFT, ITLs) of the measured requests the child made, by hand."""
    return [(child.ttft_s(i), [child.itl_s(i, j) for j in range(NEW - 1)])
            for i in range(WARMUP, WARMUP + ITERS)]


def _gen_runs(e: Env) -> list[dict[str, Any]]:
    return e.rows("select r.id, r.status, r.protocol_errors, r.note, r.n_iterations, "
                  "j.spec_json from runs r join job_specs j on j.job_id = r.job_id order by r.id")


def test_each_request_is_stored_once_with_its_latencies(ran: Env) -> None:
    runs = _gen_runs(ran)
    assert [r["status"] for r in runs] == ["ok"] * 5
    gen = [r for r in runs if json.loads(r["spec_json"])["mode"] == "generate"]
    assert len(gen) == 4
    for run in gen:
        # the two bad generate events: protocol errors, stored nowhere
        assert run["protocol_errors"] == 2, run["note"]
        assert "itl_s is not a list of new_tokens - 1 = 7 latencies (got 6" in run["note"]
        spec = json.loads(run["spec_json"])
        rows = ran.rows(f"select * from generations where run_id = {run['id']} order by idx")
        assert [r["idx"] for r in rows] == list(range(WARMUP + ITERS))
        assert [r["warmup"] for r in rows] == [1] * WARMUP + [0] * ITERS
        iters = ran.rows(f"select idx, seconds, samples from iterations where run_id = "
                         f"{run['id']} order by idx")
        for r, it in zip(rows, iters, strict=True):
            i = r["idx"]
            assert (r["prompt_tokens"], r["new_tokens"]) == (spec["prompt_tokens"], NEW)
            assert r["batch"] == spec["batch_size"] and it["samples"] == r["batch"] * NEW
            assert r["ttft_s"] == pytest.approx(child.ttft_s(i), abs=1e-12)
            itl = unpack_seconds(r["itl_s"])
            assert itl == pytest.approx([child.itl_s(i, j) for j in range(NEW - 1)],
                                        abs=1e-12)
            # e2e is the iter's seconds, and the loop's TTFT + Σ ITL
            assert r["e2e_s"] == it["seconds"]
            assert r["e2e_s"] == pytest.approx(r["ttft_s"] + sum(itl), rel=1e-9)
        # the run's samples/s counts generated tokens (batch x new_tokens per request)
        # (total tokens over total measured seconds: the batch over the mean iteration)
        stored = ran.rows(f"select samples_per_s, mean_s from runs where id = {run['id']}")
        assert stored[0]["samples_per_s"] == pytest.approx(
            spec["batch_size"] * NEW / stored[0]["mean_s"])


def _distinct(i: int, batch: int) -> int:
    """Request ``i``'s Σ over sequences of their distinct ids, by hand."""
    return sum(len({child.token_id(i, b, j) for j in range(NEW)}) for b in range(batch))


def test_distinct_tokens_are_stored_per_request_and_per_run(ran: Env) -> None:
    fracs = {}
    for run in _gen_runs(ran):
        spec = json.loads(run["spec_json"])
        if spec["mode"] != "generate":
            assert ran.rows(f"select distinct_token_frac as f from runs where id = "
                            f"{run['id']}")[0]["f"] is None
            continue
        batch = spec["batch_size"]
        rows = ran.rows(f"select idx, warmup, batch, new_tokens, distinct_tokens from "
                        f"generations where run_id = {run['id']} order by idx")
        assert [r["distinct_tokens"] for r in rows] == [
            _distinct(i, batch) for i in range(WARMUP + ITERS)]
        stored = ran.rows(f"select distinct_token_frac as f from runs where id = "
                          f"{run['id']}")[0]["f"]
        recomputed = distinct_fraction([(bool(r["warmup"]), r["batch"], r["new_tokens"],
                                          r["distinct_tokens"]) for r in rows])
        by_hand = sum(_distinct(i, batch) for i in range(WARMUP, WARMUP + ITERS)) \
            / (batch * NEW * ITERS)
        assert stored == recomputed == pytest.approx(by_hand, rel=1e-12)
        assert 0.25 < stored < 0.8  # 2..6 distinct of 8: never all, never one
        fracs[(batch, spec["prompt_tokens"])] = stored
    table = _by_config(ran.export("--table", "summary"))
    for (batch, prompt), frac in fracs.items():
        assert table[(batch, prompt, "generate")]["distinct-tokens"] == pytest.approx(frac)
    assert table[(2, None, "inference")]["reasons"]["distinct-tokens"] == \
        "n/a: inference run"
    md = ran.dltop("export", "--table", "summary")
    assert "distinct tok" in md.stdout and "distinct generated ids" in md.stdout
    pivot = ran.export("--metric", "distinct-tokens")
    cells = sorted(c["value"] for row in pivot["rows"] for c in row["cells"].values()
                   if c and c["value"] is not None)
    assert cells == pytest.approx(sorted(fracs.values()))


def _by_config(table: dict[str, Any]) -> dict[tuple[int, int | None, str], dict[str, Any]]:
    out = {}
    for row in table["rows"]:
        ident = row["identity"]
        out[(ident["batch_size"], ident.get("prompt_tokens"), ident["mode"])] = row
    return out


def test_summary_gives_percentiles_against_a_hand_computation(ran: Env) -> None:
    table = ran.export("--table", "summary")
    rows = _by_config(table)
    reqs = _requests()
    ttft = _ruled([t for t, _ in reqs])
    itl = _ruled([x for _, xs in reqs for x in xs])
    tpot = _ruled([sum(xs) / (NEW - 1) for _, xs in reqs])
    e2e = _ruled([t + sum(xs) for t, xs in reqs])
    # the percentile rule (docs/metrics.md): 6 requests give no p90 or p99; 42 ITLs a p90
    assert ttft[1:] == [None, None] and itl[1] is not None and itl[2] is None
    for batch in (2, 4):
        row = rows[(batch, PROMPT, "generate")]
        assert row["ttft"] == pytest.approx(ttft[0], rel=1e-9)
        d = row["detail"]
        for name, want in (("ttft", ttft), ("tpot", tpot), ("itl", itl), ("latency", e2e)):
            got = [d[name][k] for k in ("p50_s", "p90_s", "p99_s")]
            assert [g is None for g in got] == [w is None for w in want], name
            assert [g for g in got if g is not None] == pytest.approx(
                [w for w in want if w is not None]), name
            # a null percentile's why beside it, as CSV's status column says it
            n = ITERS * (NEW - 1) if name == "itl" else ITERS
            missing = [q for q, w in zip(("p90", "p99"), want[1:], strict=True) if w is None]
            assert d[name].get("note") == (
                f"{', '.join(missing)} n/a: n={n}" if missing else None), name
        assert d["ttft"]["n"] == ITERS and d["itl"]["n"] == ITERS * (NEW - 1)
        tokens = batch * (NEW - 1) * ITERS
        assert row["decode-rate"] == pytest.approx(tokens / sum(sum(x) for _, x in reqs))
    # the inference run has no generation requests: n/a with the reason
    infer = rows[(2, None, "inference")]
    assert infer["ttft"] is None or isinstance(infer["ttft"], str)
    assert infer["reasons"]["ttft"] == "n/a: inference run"
    md = ran.dltop("export", "--table", "summary")
    # Markdown shows latencies in ms (CSV and JSON keep seconds: above)
    assert "TTFT p50/p90/p99 (ms)" in md.stdout and "Generate runs" in md.stdout
    assert f"n={ITERS}" in md.stdout  # TTFT's p90 and p99 from 6 requests: a footnote


def _ruled(values: list[float]) -> list[float | None]:
    """p50, p90, p99 by numpy, None where the percentile rule (p90: n >= 10, p99:
    n >= 100) withholds it."""
    return [float(np.percentile(values, q)) if len(values) >= need else None
            for q, need in ((50, 1), (90, 10), (99, 100))]


@pytest.mark.parametrize("metric", ["ttft", "tpot", "itl", "decode-rate"])
def test_export_metric_cells_carry_p50_p90_p99_and_n(ran: Env, metric: str) -> None:
    table = ran.export("--metric", metric)
    cells = [c for row in table["rows"] for c in row["cells"].values() if c]
    have = [c for c in cells if c["value"] is not None]
    assert len(have) == 4 and len(cells) == 5
    for c in have:
        assert c["n"] >= 1
        if metric != "decode-rate":
            shown = [c[k] for k in ("p50_s", "p90_s", "p99_s") if c[k] is not None]
            assert shown == sorted(shown) and c["p99_s"] is None  # n < 100: no p99
            assert c["value"] == c["p50_s"]
    md = ran.dltop("export", "--metric", metric)
    assert md.returncode == 0 and "n/a: inference run" in md.stdout
    # CSV: the p50 cell, then its status, p90, p99 and n (decode-rate: n) in columns
    rows = list(csv.DictReader(line for line in ran.dltop(
        "export", "--metric", metric, "--format", "csv").stdout.splitlines()
        if not line.startswith("#")))
    got = [r for r in rows if r["mode"] == "generate"]
    assert len(got) == 4
    for r in got:
        # the status, then the cell's n and flags (docs/exports.md, CSV)
        assert float(r["cpu:1 n"]) >= 1 and r["cpu:1 status"].startswith("ok; n 1/1")
        if metric != "decode-rate":
            shown = [float(r[k]) for k in ("cpu:1", "cpu:1 p90_s", "cpu:1 p99_s") if r[k]]
            assert shown == sorted(shown) and r["cpu:1 p99_s"] == ""
    if metric == "ttft":  # Markdown: in ms, 4 significant digits
        assert f"{percentiles([t for t, _ in _requests()])[0] * 1000:#.4g}" in md.stdout
        assert "| cpu:1 (ms) |" in md.stdout


@pytest.mark.slow  # over 1.5 s on an idle 2-core machine
def test_prune_keeps_generation_rows_and_their_metrics(ran: Env, tmp_path: Path) -> None:
    copy = Env(tmp_path)  # its own database: the other tests keep their raw rows
    shutil.copy(ran.db, copy.db)
    before = {m: copy.export("--metric", m) for m in ("itl", "latency")}
    n = len(copy.rows("select 1 from generations"))
    res = copy.dltop("prune", "--campaign", "all", "--yes")
    assert res.returncode == 0, res.stderr
    assert copy.rows("select count(*) as n from iterations")[0]["n"] == 0
    assert len(copy.rows("select 1 from generations")) == n == 4 * (WARMUP + ITERS)
    for m, table in before.items():
        assert copy.export("--metric", m)["rows"] == table["rows"], m


def test_report_draws_latency_vs_batch_and_ttft_vs_prompt(ran: Env) -> None:
    db = open_reader(ran.db)
    rep = data.build(db, queries.resolve_campaigns(db, "1"))
    figs = {f.key: f for f in rep.figures}
    batch = figs["generate-batch-gpt-tiny"]
    assert batch.panels == ("TPOT p50 s", "TTFT p50 s") and not batch.omitted
    reqs = _requests()
    tpot = percentiles([sum(xs) / (NEW - 1) for _, xs in reqs])
    ttft = percentiles([t for t, _ in reqs])
    assert tpot is not None and ttft is not None
    # 2 batch sizes × 2 prompt lengths (two series), each point its configuration's p50
    assert sorted((r["batch"], r["panel"]) for r in batch.rows) == sorted(
        (b, p) for b in (2, 4) for p in batch.panels for _ in range(2))
    for r in batch.rows:
        want = tpot[0] if r["panel"] == "TPOT p50 s" else ttft[0]
        assert r["value"] == pytest.approx(want) and r["low"] == pytest.approx(want)
    assert len({r["series"] for r in batch.rows}) == 2  # prompt 16 and 32
    assert "n = 1 ok run per point" in batch.caption
    prompt = figs["generate-prompt-gpt-tiny"]
    assert sorted((r["prompt_tokens"], r["series"]) for r in prompt.rows) == [
        (16, "torch b2 cpu:1"), (16, "torch b4 cpu:1"), (32, "torch b2 cpu:1"),
        (32, "torch b4 cpu:1")]
    for fig in (batch, prompt):
        vl = specs.spec(fig)
        assert vl["$schema"] and json.dumps(vl)  # a complete, serialisable spec
    svg = specs.render(specs.spec(prompt), "svg").decode()
    assert "<svg" in svg and "prompt tokens" in svg


def test_decode_rate_by_hand() -> None:
    from dltop.results.generation import Request

    reqs = [Request(0, False, 0.1, 0.1 + 0.03, 8, 4, 2, (0.01, 0.01, 0.01)),
            Request(1, False, 0.1, 0.1 + 0.05, 8, 4, 2, (0.01, 0.02, 0.02))]
    # 2 sequences × 3 tokens, twice, over 0.08 s of decoding
    assert decode_rate(reqs) == pytest.approx(12 / 0.08)
    assert reqs[0].tpot_s == pytest.approx(0.01) and reqs[1].tpot_s == pytest.approx(0.05 / 3)
