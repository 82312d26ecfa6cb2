"""Every query of the Grafana dashboards in docs/grafana checked against a real ``dltop
exporter`` process scraped over HTTP while a real serve campaign runs (the streaming fake
OpenAI server of tests/programs): each metric it names must be served, each label it
selects, groups by or shows in a legend must be one those series carry, and each panel's
unit must be the metric's. So a renamed series or label breaks this test, not a user's
dashboard. The same scrapes are checked as Prometheus exposition (HELP and TYPE on every
family, ``_total`` only on counters, no series twice, label values escaped) and as
OpenMetrics (what Prometheus asks for first)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families

from dltop.errors import UserError
from dltop.jobs.start import start_engine
from dltop.store import connect

from .metrics_campaign import add_waiting
from .test_exporter import free_port, serving

GRAFANA = Path(__file__).resolve().parents[2] / "docs" / "grafana"
FAKE = Path(__file__).resolve().parents[1] / "programs" / "fake_openai.py"
MODEL = 'llama "3" \\ ü→'
"""A served model's name is free-form: quotes, a backslash and non-ASCII reach the labels."""
PROFILE = """[defaults]
frameworks = ["openai"]
mode = "serve"
endpoint = "{url}"
new_tokens = 8
prompt_tokens = 4
warmup = 2
timeout_s = 300
concurrency = 4
arrival = "constant"
models = ['{model}']
[[matrix]]
iterations = 5
request_rate = 50
[[matrix]]
iterations = 400
request_rate = 20
"""
PROMQL_WORDS = frozenset({
    "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or",
    "unless", "offset", "inf", "nan"})
UNITS: tuple[tuple[str, frozenset[str | None], str | None], ...] = (
    # (metric pattern, the Grafana unit ids that say it, a scale the query must apply)
    (r"DCGM_FI_DEV_FB_(USED|FREE|TOTAL)", frozenset({"mbytes"}), None),  # MiB, not MB
    (r"DCGM_FI_DEV_(SM|MEM)_CLOCK", frozenset({"hertz"}), r"\*\s*(1000000|1e6)\b"),  # MHz
    (r"DCGM_FI_DEV_POWER_USAGE", frozenset({"watt"}), None),
    (r"DCGM_FI_DEV_(GPU|MEM_COPY)_UTIL|_percent$", frozenset({"percent"}), None),
    (r"_bytes$", frozenset({"bytes"}), None),
    (r"_seconds(_bucket)?$", frozenset({"s"}), None),
    (r"_requests_per_second$", frozenset({"reqps"}), None),
    (r"^dltop_up$|_(engine|db)_up$", frozenset({None, "none"}), None),  # 0/1, no unit
)


def engine_gone(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True


def dashboards() -> list[Path]:
    return sorted(GRAFANA.glob("*.json"))


def queries(dash: dict[str, Any]) -> list[tuple[dict[str, Any] | None, dict[str, Any]]]:
    """(panel, target) of every query: the panels' targets (rows' nested panels too) and
    the template variables' (panel None)."""
    out: list[tuple[dict[str, Any] | None, dict[str, Any]]] = [
        (None, {"expr": v["definition"], "legendFormat": ""})
        for v in dash.get("templating", {}).get("list", []) if v.get("definition")]
    panels = list(dash["panels"])
    while panels:
        p = panels.pop(0)
        panels += p.get("panels", [])
        out += [(p, t) for t in p.get("targets", [])]
    return out


def parse_promql(expr: str) -> tuple[dict[str, set[str]], set[str]]:
    """The metrics an expression reads with the labels each selector names, and the labels
    it groups by. Enough PromQL for dashboards: selectors, functions, aggregations with
    ``by``/``without``, binary operators, ``label_values(metric, label)``."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # string contents hold no names
    expr = re.sub(r"\[[^\]]*\]", "", expr)  # range durations
    grouped = {lab.strip() for g in re.findall(r"\b(?:by|without|on|ignoring)\s*\(([^)]*)\)",
                                               expr) for lab in g.split(",") if lab.strip()}
    expr = re.sub(r"\b(?:by|without|on|ignoring)\s*\([^)]*\)", " ", expr)
    if m := re.fullmatch(r"\s*label_values\((.*),\s*(\w+)\s*\)\s*", expr):
        inner, _ = parse_promql(m.group(1))
        return {name: {*labels, m.group(2)} for name, labels in inner.items()}, set()
    metrics: dict[str, set[str]] = {}
    for m in re.finditer(r"(?<![\w.])([A-Za-z_:][\w:]*)?\s*(\{[^}]*\})?", expr):
        name, sel = m.group(1), m.group(2)
        if not name and not sel:
            continue
        if name and ((expr[m.end():].lstrip().startswith("(") and not sel)
                     or name.lower() in PROMQL_WORDS):
            continue  # a function or aggregation, or a keyword
        assert name, f"a selector without a metric name in {expr!r}"
        labels = set(re.findall(r"(\w+)\s*(?:=~|!~|!=|=)", sel or ""))
        metrics.setdefault(name, set()).update(labels)
    return metrics, grouped


def test_the_parser_finds_names_and_labels() -> None:
    """The PromQL reading above, on the shapes the dashboards use."""
    got = parse_promql('histogram_quantile(0.99, sum by (le, run_id) (rate('
                       'dltop_serve_ttft_seconds_bucket{campaign_id=~"$c",x="a,b"}[1m])))')
    assert got == ({"dltop_serve_ttft_seconds_bucket": {"campaign_id", "x"}},
                   {"le", "run_id"})
    assert parse_promql("DCGM_FI_DEV_SM_CLOCK * 1e6 / on (gpu) b == 1") == (
        {"DCGM_FI_DEV_SM_CLOCK": set(), "b": set()}, {"gpu"})
    assert parse_promql("label_values(dltop_up, Hostname)") == ({"dltop_up": {"Hostname"}},
                                                                  set())
    assert parse_promql('label_values(dltop_campaign_state{Hostname=~"$host"}, campaign_id)'
                        ) == ({"dltop_campaign_state": {"Hostname", "campaign_id"}}, set())


def unit_of(panel: dict[str, Any], legend: str) -> str | None:
    """The unit Grafana gives the series of ``legend``: an override whose regex matches
    it (its ``{{label}}`` parts as any text), else the panel's default."""
    shown = re.sub(r"\{\{\s*\w+\s*\}\}", "x", legend)
    fc = panel.get("fieldConfig", {})
    for o in fc.get("overrides", []):
        if o["matcher"]["id"] == "byRegexp" and re.fullmatch(o["matcher"]["options"], shown):
            for prop in o["properties"]:
                if prop["id"] == "unit":
                    return str(prop["value"])
    unit = fc.get("defaults", {}).get("unit")
    return None if unit is None else str(unit)


def scrape_text(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as resp:
        return str(resp.read().decode())


def check_exposition(text: str) -> dict[str, list[Any]]:
    """The scrape as Prometheus reads it; fails on what its naming rules forbid."""
    helped = set(re.findall(r"^# HELP (\S+) \S", text, re.M))
    typed = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))
    assert helped == set(typed), set(typed) ^ helped
    out: dict[str, list[Any]] = {}
    seen: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
    for fam in text_string_to_metric_families(text):
        declared = typed.get(fam.name) or typed.get(f"{fam.name}_total")
        assert declared == ("untyped" if fam.type == "unknown" else fam.type), fam.name
        for s in fam.samples:
            assert s.name.endswith("_total") == (fam.type == "counter"), (s.name, fam.type)
            key = (s.name, tuple(sorted(s.labels.items())))
            assert key not in seen, f"series twice: {key}"
            seen.add(key)
            out.setdefault(s.name, []).append(s)
    return out


@pytest.fixture
def live_scrape(tmp_path: Path, wait_until: Callable[..., None]) -> Iterator[
        dict[str, list[Any]]]:
    """Two scrapes of ``dltop exporter --fake-gpus 2`` (a real process) while a serve
    campaign's second run is in progress (its engine held with SIGSTOP: alive, nothing
    more written), its first ended, and another campaign waits for devices (the series
    served only while one waits); parsed by prometheus_client."""
    fake = subprocess.Popen([sys.executable, str(FAKE), "--ttft-ms", "50", "--itl-ms", "10"],
                            stdout=subprocess.PIPE, text=True)
    assert fake.stdout is not None
    line = fake.stdout.readline()
    line = fake.stdout.readline() if line.startswith("PID ") else line
    url = f"http://127.0.0.1:{int(line.split()[1])}/v1"
    profile = tmp_path / "serve.toml"
    profile.write_text(PROFILE.format(url=url, model=MODEL))  # a TOML literal string
    db_path, port = tmp_path / "s.db", free_port()
    exporter = subprocess.Popen(
        [sys.executable, "-m", "dltop", "exporter", "--port", str(port), "--db",
         str(db_path), "--fake-gpus", "2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)
    launch = start_engine([str(profile)], db_path, tmp_path / "logs", wait_s=0.5)
    stopped = False

    def second_run_going() -> bool:
        try:
            db = connect(db_path, create=False)
        except UserError:  # not there yet, or being created
            return False
        try:
            return bool(list(db.query(
                "select 1 from serve_requests q join runs r on r.id = q.run_id where "
                "r.status = 'running' and q.warmup = 0 and r.id > (select min(id) from "
                "runs) group by r.id having count(*) >= 10")))
        except Exception:  # the tables not there yet
            return False
        finally:
            db.close()

    try:
        assert launch.exit_code is None, launch.log_tail
        wait_until(lambda: serving(port) or exporter.poll() is not None, 60, "the exporter")
        assert exporter.poll() is None, exporter.communicate()
        wait_until(second_run_going, 120, "the second run with 10 measured requests",
                   interval_s=0.1)
        os.kill(launch.pid, signal.SIGSTOP)
        stopped = True
        add_waiting(db_path)
        first = check_exposition(scrape_text(port))
        time.sleep(1.1)  # a second scrape, a device reading later: the same series
        second = check_exposition(scrape_text(port))
        assert {n: len(v) for n, v in first.items()} == {n: len(v) for n, v in second.items()}
        # Prometheus asks for OpenMetrics first: its stricter parser reads it too
        # (histogram buckets ascending to +Inf and matching _count, counters' _total, EOF)
        req = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers={
            "Accept": "application/openmetrics-text; version=1.0.0"})
        with urllib.request.urlopen(req, timeout=30) as resp:
            assert resp.headers["Content-Type"].startswith("application/openmetrics-text")
            families = list(openmetrics_families(resp.read().decode()))
        assert {f.name for f in families} >= {"dltop_serve_ttft_seconds",
                                              "dltop_serve_requests"}
        yield second
    finally:
        if stopped:
            os.kill(launch.pid, signal.SIGCONT)
        os.kill(launch.pid, signal.SIGTERM)
        wait_until(lambda: engine_gone(launch.pid), 60, "the engine to stop")
        exporter.terminate()
        _out, err = exporter.communicate(timeout=30)
        assert exporter.returncode == 0 and "Traceback" not in err, err
        fake.kill()
        fake.wait()


def test_every_dashboard_query_reads_served_series_with_their_labels_and_units(
        live_scrape: dict[str, list[Any]]) -> None:
    got = live_scrape
    labels_of = {name: set().union(*(s.labels for s in samples))
                 for name, samples in got.items()}
    # a label value with quotes, a backslash and non-ASCII arrives as it was
    assert {s.labels["model"] for s in got["dltop_run_info"]} == {MODEL}
    assert got["dltop_campaign_last_run_info"][0].labels["status"] == "ok"
    assert dashboards(), "no dashboard in docs/grafana"
    checked = set()
    for path in dashboards():
        dash = json.loads(path.read_text())
        for panel, target in queries(dash):
            where = f"{path.name}: {panel['title'] if panel else 'a variable'}: " \
                    f"{target['expr']}"
            metrics, grouped = parse_promql(target["expr"])
            assert metrics, where
            for name, selected in metrics.items():
                assert name in set(got), f"{where}: {name} is not served"
                assert selected <= labels_of[name], \
                    f"{where}: {name} has no label {selected - labels_of[name]}"
                checked.add(name)
            carried = set().union(*(labels_of[n] for n in metrics))
            assert grouped <= carried, f"{where}: no label {grouped - carried}"
            legend = target.get("legendFormat") or ""
            shown = set(re.findall(r"\{\{\s*(\w+)\s*\}\}", legend))
            # a one-to-one match (an info series joined on): the left side's labels
            lead = re.match(r"\s*([A-Za-z_:][\w:]*)\s*(?:\{[^}]*\})?\s*[-+*/]\s*on\b",
                            target["expr"])
            have = labels_of[lead.group(1)] if lead else (grouped - {"le"}) \
                if re.search(r"\bby\s*\(", target["expr"]) else carried
            assert shown <= have, f"{where}: the legend shows no label {shown - have}"
            if panel is None or panel["type"] in ("table", "state-timeline", "bargauge"):
                continue
            unit = unit_of(panel, legend)
            for pattern, want, scale in UNITS:
                if any(re.search(pattern, n) for n in metrics):
                    assert unit in want, f"{where}: unit {unit!r}, expected {set(want)}"
                    assert scale is None or re.search(scale, target["expr"]), \
                        f"{where}: {want} needs the query to scale it ({scale})"
                    break
    # the dashboard shows a campaign, its runs, a serve run, devices and the host
    assert {"dltop_campaign_state", "dltop_run_samples_per_second",
            "dltop_serve_ttft_seconds_bucket", "DCGM_FI_DEV_GPU_UTIL",
            "dltop_host_cpu_percent", "dltop_campaign_waiting_holders",
            "dltop_campaign_waiting_start_time_seconds"} <= checked
