"""The summary's shortcuts at scale (issue 32) give what the long way gave.

Each shortcut of ``dltop export --table summary`` at 10 000 configurations is checked
against the computation it replaced: keys put together from a key without the
interpreter, the readings rule once per configuration, environments read grouped,
Markdown rows escaped only where needed, median distributions sorted unstably where
no value repeats, the cyclic collector paused and given back.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import random
from typing import Any

import pytest

from dltop.profiles.jobspec import JobSpec
from dltop.profiles.loader import parse
from dltop.results import bootstrap, bootstrap_batch, caption, export, idread, summary
from dltop.results.aggregate import config_results
from dltop.results.gcpause import gc_paused
from dltop.results.readings import check_runs
from dltop.results.render import markdown, render
from dltop.results.table import Cell, Column, Role, Row, Table
from dltop.store import Store, memory_db


def _rows() -> list[dict[str, Any]]:
    spec = parse(PROFILE, "k.toml", "k").jobs[0]

    def row(job: JobSpec, interpreter: str | None, stored_key: bool = False) -> dict[str, Any]:
        return {"config_key": idread.key(job.identity()) if stored_key else None,
                "spec_json": json.dumps(job.to_json_dict()), "python_executable": interpreter}

    nested = dataclasses.replace(spec, options=(("env", {"interpreter": None}),))
    return [row(spec, "/a/python"), row(spec, None), row(spec, "/a/python", True),
            row(dataclasses.replace(spec, batch_size=16), '/b "quoted" ünï/python', True),
            row(nested, "/c/python"), row(nested, "/c/python", True),
            row(dataclasses.replace(spec, batch_size=32), None, True)]


PROFILE = ('[[matrix]]\nframeworks = ["torch"]\nmodels = ["fcn-r"]\nbatch_sizes = [8]\n'
           'devices = ["cpu:1"]\n')


def test_keys_put_together_equal_keys_encoded() -> None:
    rows = _rows()
    idents, keys = idread.resolve_keyed(rows)
    assert idents == idread.resolve(_rows())
    assert keys == [idread.key(i) for i in idents]
    # the unknown interpreter joined its configuration's; a nested "interpreter": null
    # (the entry twice in the key) took the long way and still matched
    assert idents[1]["interpreter"] == "/a/python" and keys[1] == keys[0] == keys[2]
    assert keys[4] == keys[5] and keys[4].count('"interpreter":') == 2
    assert idents[6]["interpreter"] is None and '"interpreter":null' in keys[6]
    assert '"interpreter":"/b \\"quoted\\" ünï/python"' in keys[3]


def _runs(*pairs: tuple[float | None, int | None]) -> Any:
    return tuple(type("Run", (), {"get": lambda self, k, w=w, n=n: {
        "window_s": w, "gpu_readings": n, "host_readings": n}.get(k)})() for w, n in pairs)


def test_readings_rule_over_runs_names_the_weakest() -> None:
    worst, detail = check_runs(_runs((10.0, 100), (0.04, 0), (None, None)), gpu=True)
    assert worst.startswith("n/a: window 0.04 s, 0 readings")
    assert dict(detail) == {"readings": 0, "window_s": 0.04}
    assert check_runs(_runs((10.0, 100), (12.0, 120)), gpu=False) == \
        ("", (("readings", 100), ("window_s", 10.0)))
    assert check_runs((), gpu=True) == ("", (("readings", None), ("window_s", None)))


def test_configuration_checks_its_readings_once(campaigns: Any) -> None:
    db = memory_db()
    cid, jobs = campaigns.create(db, campaigns.profile("r", ["cpu:1"], repeats=2))
    for (_, job_id), (window, n) in zip(jobs, ((30.0, 300), (0.04, 0)), strict=True):
        campaigns.add_run(db, cid, job_id, [0.1, 0.11, 0.12],
                          fields={"window_s": window, "host_readings": n})
    (res,) = config_results(db, cid)
    assert res.host_readings is res.host_readings  # cached on the result
    assert res.host_readings == check_runs(res.runs, gpu=False)
    assert res.host_readings[0].startswith("n/a: window 0.04 s")
    # a copy with other runs asks again: the cache is not copied with the fields
    fine = dataclasses.replace(res, runs=res.runs[:1])
    assert fine.host_readings == ("", (("readings", 300), ("window_s", 30.0)))


def test_environments_read_grouped_keep_first_seen_order_and_count(campaigns: Any) -> None:
    db = memory_db()
    store = Store(db)
    cid, jobs = campaigns.create(db, campaigns.profile("e", ["cpu:1"], repeats=5))
    versions = ["2.4.0", "2.3.1", "2.4.0", "2.5.0", "2.3.1"]
    for (_, job_id), version in zip(jobs, versions, strict=True):
        run_id = campaigns.add_run(db, cid, job_id, [0.1, 0.11])
        store.record_environment(run_id, {
            "host": "h", "os": "Linux", "framework": "torch", "framework_version": version,
            "python_version": "3.11.4", "threads": 1, "thread_env": "{}"})
    env = caption.environment(db, [cid]).as_json()
    assert env["frameworks"] == {"torch": ["2.4.0", "2.3.1", "2.5.0"]}
    assert env["runs_reported"] == 5


def test_markdown_rows_escaped_where_needed() -> None:
    cols = (Column("a", "a", Role.KEY), Column("b", "b"))
    table = Table(title="t", columns=cols, rows=(
        Row((Cell("plain"), Cell("1.0"))), Row((Cell("x | y"), Cell("tab\there"))),
        Row((Cell("ok"), None))))
    lines = markdown(table).splitlines()
    assert lines[4:7] == ["| plain | 1.0 |", "| x \\| y | tab\\there |", "| ok |  |"]


@pytest.mark.parametrize("n_runs", [1, 2, 3])
def test_batch_intervals_with_repeated_values_equal_one_at_a_time(n_runs: int) -> None:
    rng = random.Random(n_runs)
    # times on a millisecond clock repeat: rows with ties take the stable sort
    configs = [[[(round(rng.lognormvariate(-2.3, 0.05), 3), 8) for _ in range(20)]
                for _ in range(n_runs)] for _ in range(bootstrap_batch.BATCH_MIN)]
    configs += [[[(rng.lognormvariate(-2.3, 0.05), 8) for _ in range(20)]
                 for _ in range(n_runs)] for _ in range(4)]
    assert bootstrap_batch.median_cis(configs) == [bootstrap.median_ci(c) for c in configs]


def test_median_distributions_with_ties_are_those_of_one_run_at_a_time() -> None:
    rng = random.Random(7)
    rows = [[round(rng.lognormvariate(-2.3, 0.05), 3) for _ in range(20)] for _ in range(30)]
    rows.append([0.1] * 20)
    values, cdf = bootstrap_batch._distributions(20, rows)
    for k, row in enumerate(rows):
        one = bootstrap._Run([(s, 8) for s in row], bootstrap.run_median_s).dist
        assert one is not None
        assert values[k].tolist() == one[0].tolist() and cdf[k].tolist() == one[1].tolist()


def test_gc_paused_restores_the_state_it_found() -> None:
    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the outer block still holds it
    assert gc.isenabled()
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()  # disabled before: left so
    finally:
        gc.enable()
    with pytest.raises(ValueError), gc_paused():
        raise ValueError("the build failed")
    assert gc.isenabled()


def test_convergence_columns_only_where_a_configuration_can_have_them(campaigns: Any) -> None:
    db = memory_db()
    cid, jobs = campaigns.create(db, campaigns.profile("x", ["cpu:1"], batch_sizes=(8, 16)))
    campaigns.add_run(db, cid, jobs[0][1], [0.1, 0.11, 0.12])
    results = config_results(db, cid)
    assert summary.shown_extras(results) == ()
    inference = [dataclasses.replace(r, identity={**r.identity, "mode": "inference"})
                 for r in results]
    assert summary.shown_extras(inference) == ("latency",)


def test_results_text_is_the_table_drawn(campaigns: Any) -> None:
    db = memory_db()
    cid, jobs = campaigns.create(db, campaigns.profile("t", ["cpu:1"], batch_sizes=(8, 16)))
    campaigns.add_run(db, cid, jobs[0][1], [0.1, 0.11, 0.12])
    for fmt in ("md", "json"):
        assert export.results_text(db, cid, fmt, "summary") == \
            render(export.results_table(db, cid, "summary"), fmt)
    assert gc.isenabled()
