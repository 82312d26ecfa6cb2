"""Issue 41 item 6: a serve run seen while it runs. A real engine runs a serve profile
against the streaming fake server on a slow schedule; stopped mid-run (SIGSTOP: its
rows then hold still), the run panel (a Textual pilot at 80 columns), ``read_campaign``
and an exporter scrape all show the requests stored so far, checked against those
rows; once the run ends its ``dltop_serve_*`` series are gone. A server that hangs
(SIGSTOP: it ends nothing) sees the live rates fall to 0 within the rate window."""

from __future__ import annotations

import json
import os
import re
import signal
import time
from bisect import bisect_right
from dataclasses import replace
from pathlib import Path
from typing import Any

import psutil
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from tests.dltop_env import query
from tests.tui.conftest import Seeded, make_app

from dltop.errors import UserError
from dltop.jobs.start import start_engine
from dltop.live.campaign import read_campaign
from dltop.live.exporter import MetricsSource, PrometheusCollector
from dltop.live.serve_live import RATE_WINDOW_S, serve_live
from dltop.live.serve_metrics import ITL_BUCKETS_S, TTFT_BUCKETS_S
from dltop.results.convergence import percentile
from dltop.store import connect
from dltop.store.generations import unpack_seconds
from dltop.tui.runpanel import RunServe

from .conftest import start_fake

pytestmark = pytest.mark.slow
DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana" / "dltop-campaign.json"

PROFILE = """[defaults]
frameworks = ["openai"]
mode = "serve"
endpoint = "{url}"
new_tokens = 8
prompt_tokens = 4
iterations = 150
warmup = 2
timeout_s = 300
[[matrix]]
models = ["flaky"]
request_rate = 20
concurrency = 8
arrival = "constant"
max_error_rate = 0.5
"""


def _measured(db_path: Path) -> int:
    try:
        db = connect(db_path, create=False)
    except UserError:  # not there yet, or being created
        return 0
    try:
        return int(next(iter(db.query(
            "select count(*) as n from serve_requests where warmup = 0")))["n"])
    except Exception:  # the table not migrated yet
        return 0
    finally:
        db.close()


def _scrape(db_path: Path) -> dict[str, list[Any]]:
    registry = CollectorRegistry()
    registry.register(PrometheusCollector(MetricsSource(None, db_path)))
    out: dict[str, list[Any]] = {}
    for fam in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in fam.samples:
            out.setdefault(s.name, []).append(s)
    return out


def _expected(db_path: Path) -> dict[str, Any]:
    """What the stored rows say, computed here from the rows themselves."""
    rows = query(db_path, "select * from serve_requests order by idx")
    measured = [r for r in rows if not r["warmup"]]
    ok = [r for r in measured if r["error"] is None and r["output_tokens"] >= 1]
    gens = query(db_path, "select ttft_s, itl_s from generations where warmup = 0")
    return {"ok": len(ok), "failed": len(measured) - len(ok), "warmup": len(rows) - len(
        measured), "in_flight": rows[-1]["in_flight"],
        "error": next(r["error"] for r in reversed(rows) if r["error"] is not None),
        "ends": [(_end(r), r["output_tokens"]) for r in ok],
        "ttft": sorted(g["ttft_s"] for g in gens),
        "itl": sorted(x for g in gens for x in unpack_seconds(g["itl_s"]))}


def _end(r: dict[str, Any]) -> float:
    return float(r["scheduled_s"] + r["dispatch_lag_s"] + r["slot_wait_s"]
                 + (r["resend_s"] or 0) + r["e2e_s"])


def _rates_at(ends: list[tuple[float, int]], now_s: float) -> tuple[float, float]:
    """(ok requests/s, output tokens/s) over the rate window ending at ``now_s`` on the
    load's clock, from the rows (docs/serve.md's definition)."""
    w = min(RATE_WINDOW_S, now_s)
    recent = [t for end, t in ends if end > now_s - RATE_WINDOW_S]  # none is past now
    return len(recent) / w, sum(recent) / w


async def test_a_running_serve_run_is_seen_in_the_panel_and_the_exporter(
        tmp_path: Path, fake_server: Any, wait_until: Any) -> None:
    url = fake_server("--ttft-ms", "100", "--itl-ms", "40")
    profile = tmp_path / "serve.toml"
    profile.write_text(PROFILE.format(url=url))
    db_path = tmp_path / "s.db"
    launch = start_engine([str(profile)], db_path, tmp_path / "logs", wait_s=0.5)
    assert launch.exit_code is None, launch.log_tail
    stopped = False
    try:
        # enough ended for an ITL p99 (7 gaps a request), too few for a TTFT p99 (100)
        wait_until(lambda: _measured(db_path) >= 30, 120, "30 measured requests stored",
                   interval_s=0.1)
        os.kill(launch.pid, signal.SIGSTOP)  # the engine writes nothing more until CONT
        stopped = True
        exp = _expected(db_path)
        assert 30 <= exp["ok"] + exp["failed"] < 150 and exp["failed"] >= 1
        assert 0 <= exp["in_flight"] <= 8 and len(exp["ttft"]) == exp["ok"] < 100
        assert len(exp["itl"]) == 7 * exp["ok"] >= 100

        view = read_campaign(connect(db_path, create=False), 1)
        assert view is not None and view.current is not None
        s = view.current.serve
        assert s is not None
        assert (s.ok, s.failed, s.warmup_done, s.in_flight, s.last_error) == (
            exp["ok"], exp["failed"], exp["warmup"], exp["in_flight"], exp["error"])
        assert s.asked_rate_per_s == 20.0
        assert s.now_s is not None and s.now_s >= max(e for e, _ in exp["ends"]) - 1e-9
        exp["rate"], exp["tokens_s"] = _rates_at(exp["ends"], s.now_s)
        assert s.achieved_rate_per_s == pytest.approx(exp["rate"])
        assert s.output_tokens_per_s == pytest.approx(exp["tokens_s"])
        assert s.ttft.p50_s == pytest.approx(percentile(exp["ttft"], 50))
        assert s.ttft.p99_s is None and s.ttft.n == exp["ok"]  # the sample rule
        assert s.itl.p99_s == pytest.approx(percentile(exp["itl"], 99))

        app = make_app(Seeded(db_path, 1, [], 0), gpus=0)
        async with app.run_test(size=(80, 30)) as pilot:
            await app.refresh_now()
            await pilot.pause()
            panel = app.screen.query_one(RunServe)
            assert panel.display and panel.run is not None and panel.run.serve is not None
            shown = panel.run.serve  # read later than s: the load's clock moved on
            assert shown.now_s is not None and shown.now_s >= s.now_s
            assert shown == replace(s, now_s=shown.now_s, recent_ok=shown.recent_ok,
                                    recent_tokens=shown.recent_tokens)
            rate, tokens_s = _rates_at(exp["ends"], shown.now_s)
            lines = panel.render().plain.split("\n")
            assert lines[0] == (
                f"{exp['in_flight']} in flight  {exp['ok']} ok  {exp['failed']} failed  "
                f"{rate:.3g}/20 req/s  {tokens_s:,.0f} tok/s")
            assert lines[1] == (
                f"TTFT p50 {percentile(exp['ttft'], 50) * 1e3:.3g} ms p99 N/A "
                f"n={exp['ok']}  ITL p50 {percentile(exp['itl'], 50) * 1e3:.3g} ms p99 "
                f"{percentile(exp['itl'], 99) * 1e3:.3g} ms n={len(exp['itl']):,}")
            assert lines[2] == f"last error: {exp['error']}"[:len(lines[2])]
            # readable at 80 columns: the counts and percentiles are not cut
            assert panel.size.width <= 80 and all(
                len(line) <= panel.size.width for line in lines[:2])

        got = _scrape(db_path)
        later = serve_live(connect(db_path, create=False), 1)  # after the scrape
        assert later is not None and later.now_s is not None
        by_status = {x.labels["status"]: x.value for x in got["dltop_serve_requests_total"]}
        assert by_status == {"ok": exp["ok"], "failed": exp["failed"]}
        (lab,) = {tuple(sorted((k, v) for k, v in x.labels.items() if k != "status"))
                  for x in got["dltop_serve_requests_total"]}
        run_labels = dict(lab)
        assert run_labels == dict(got["dltop_run_iterations_done"][0].labels)
        assert [x.value for x in got["dltop_serve_requests_in_flight"]] == [exp["in_flight"]]
        assert [x.value for x in got["dltop_serve_asked_requests_per_second"]] == [20.0]
        # the rows hold still: the rates only fall as the load's clock runs on, so the
        # scrape's lie between those at the panel's read and at the read after it
        low = _rates_at(exp["ends"], later.now_s)
        for name, hi, lo in (("achieved_requests_per_second", exp["rate"], low[0]),
                             ("output_tokens_per_second", exp["tokens_s"], low[1])):
            value = got[f"dltop_serve_{name}"][0].value
            assert lo * (1 - 1e-9) <= value <= hi * (1 + 1e-9), (name, lo, value, hi)
        for name, values, bounds in (("ttft", exp["ttft"], TTFT_BUCKETS_S),
                                     ("itl", exp["itl"], ITL_BUCKETS_S)):
            buckets = {x.labels["le"]: x.value for x in got[f"dltop_serve_{name}_seconds_bucket"]}
            assert buckets["+Inf"] == len(values)
            assert all(buckets[f"{le:g}"] == bisect_right(values, le) for le in bounds)
            assert got[f"dltop_serve_{name}_seconds_count"][0].value == len(values)
            assert got[f"dltop_serve_{name}_seconds_sum"][0].value == pytest.approx(
                sum(values))
            assert got[f"dltop_serve_{name}_seconds_sum"][0].labels == run_labels
        # the Grafana dashboard's serve panels query series this scrape serves
        dash = json.loads(DASHBOARD.read_text())
        queried = {m for p in dash["panels"] for t in p.get("targets", [])
                   for m in re.findall(r"\bdltop_serve_[a-z_]+", t["expr"])}
        assert len(queried) >= 6 and queried <= set(got), queried - set(got)

        os.kill(launch.pid, signal.SIGCONT)
        stopped = False
        wait_until(lambda: _engine_gone(launch.pid), 180, "the campaign to end",
                   interval_s=0.2)
        (run,) = query(db_path, "select status from runs")
        assert run["status"] == "ok"
        after = _scrape(db_path)
        assert not [name for name in after if name.startswith("dltop_serve_")]
    finally:
        if stopped:
            os.kill(launch.pid, signal.SIGCONT)
        if not _engine_gone(launch.pid):
            os.kill(launch.pid, signal.SIGTERM)
            wait_until(lambda: _engine_gone(launch.pid), 60, "the engine to stop")


STALL_PROFILE = """[defaults]
frameworks = ["openai"]
mode = "serve"
endpoint = "{url}"
new_tokens = 4
prompt_tokens = 4
iterations = 2000
warmup = 2
timeout_s = 120
[[matrix]]
models = ["steady"]
request_rate = 20
concurrency = 4
arrival = "constant"
"""


def test_the_live_rates_fall_while_a_hung_server_ends_nothing(
        tmp_path: Path, wait_until: Any) -> None:
    """The server stopped (SIGSTOP: it takes requests and answers none) while the engine
    runs on: the ok count holds still, and the achieved rate and tokens/s the panel and
    the exporter read fall to 0 once the rate window has passed the last end (the whole
    load's ok / seconds to the last end, the definition before, held still)."""
    server, url = start_fake("--ttft-ms", "20", "--itl-ms", "5")
    profile = tmp_path / "serve.toml"
    profile.write_text(STALL_PROFILE.format(url=url))
    db_path = tmp_path / "s.db"
    launch = start_engine([str(profile)], db_path, tmp_path / "logs", wait_s=0.5)
    assert launch.exit_code is None, launch.log_tail
    try:
        wait_until(lambda: _measured(db_path) >= 20, 120, "20 measured requests stored",
                   interval_s=0.1)
        before = serve_live(connect(db_path, create=False), 1)
        assert before is not None and before.achieved_rate_per_s
        assert before.achieved_rate_per_s > 5 and (before.output_tokens_per_s or 0) > 20
        os.kill(server.pid, signal.SIGSTOP)
        time.sleep(1.0)  # the requests that ended before the stop are written
        stalled = serve_live(connect(db_path, create=False), 1)
        assert stalled is not None and stalled.window_s is not None
        assert stalled.achieved_rate_per_s and stalled.achieved_rate_per_s > 0
        ok, held = stalled.ok, stalled.ok / stalled.window_s  # what the panel showed before
        time.sleep(RATE_WINDOW_S + 0.5)
        after = serve_live(connect(db_path, create=False), 1)
        assert after is not None and after.ok == ok and after.window_s == stalled.window_s
        assert held > 5  # the whole load's rate: still where it was
        assert (after.achieved_rate_per_s, after.output_tokens_per_s) == (0.0, 0.0)
        got = _scrape(db_path)
        assert [x.value for x in got["dltop_serve_achieved_requests_per_second"]] == [0.0]
        assert [x.value for x in got["dltop_serve_output_tokens_per_second"]] == [0.0]
        assert {x.labels["status"]: x.value for x in got["dltop_serve_requests_total"]
                }["ok"] == ok
    finally:
        os.kill(server.pid, signal.SIGCONT)
        server.kill()
        server.wait()
        if not _engine_gone(launch.pid):
            os.kill(launch.pid, signal.SIGTERM)
            wait_until(lambda: _engine_gone(launch.pid), 60, "the engine to stop")


def _engine_gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True
