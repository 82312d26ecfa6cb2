"""Prometheus campaign series, run labels with the varying identity fields, and the
Grafana dashboard in docs/grafana checked against a real exporter's scrape."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from dltop.live.campaign_metrics import label_name
from dltop.live.exporter import MetricsSource, start_metrics_server
from dltop.profiles.loader import parse
from dltop.store import Store, connect
from dltop.telemetry.fake import FakeGpuBackend
from dltop.telemetry.values import HostSample

from .metrics_campaign import PROFILE, WAITING_DEVICES, WAITING_HOLDERS, seed

# One worker seeds and scrapes the shared campaign: under xdist's --dist loadgroup the
# module fixtures would otherwise run once on each worker.
pytestmark = pytest.mark.xdist_group("campaign_metrics")

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana" / "dltop-campaign.json"


def host() -> HostSample:
    return HostSample(0, (25.0, 75.0), 0.5, 3 * 2**30, 16 * 2**30, 0, cpu_user_pct=40.0,
                      cpu_system_pct=8.0, cpu_iowait_pct=2.0)


@pytest.fixture
def db_path(tmp_path: Path, stand_in_engine: int) -> Path:
    """The campaign of :func:`metrics_campaign.seed` (a stand-in engine keeps it live)."""
    path = tmp_path / "m.db"
    seed(path, stand_in_engine)
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def scraped_db(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """:func:`db_path`'s campaign for the module's tests that only read it and its scrape
    (seeded and scraped once: the first scrape waits for the exporter's first read)."""
    engine = subprocess.Popen(["sleep", "600"])  # a stand-in engine keeps it live
    try:
        path = tmp_path_factory.mktemp("scraped") / "m.db"
        seed(path, engine.pid)
        yield path
    finally:
        engine.kill()
        engine.wait()


@pytest.fixture(scope="module")
def scraped(scraped_db: Path) -> dict[str, list[Any]]:
    """One scrape of a real exporter (HTTP, prometheus_client's server) over the
    database, parsed by prometheus_client's text parser (the tests only read it)."""
    source = MetricsSource(FakeGpuBackend(2), scraped_db, host=host).start()
    port = free_port()
    server = start_metrics_server(source, "127.0.0.1", port)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as resp:
            text = resp.read().decode()
    finally:
        server.shutdown()
        source.stop()
    out: dict[str, list[Any]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append(s)
    return out


def one(samples: list[Any], **labels: str) -> Any:
    (s,) = [s for s in samples if all(s.labels.get(k) == v for k, v in labels.items())]
    return s


def test_campaign_states_jobs_and_what_it_waits_for(scraped: dict[str, list[Any]],
                                                    scraped_db: Path) -> None:
    states = {s.labels["state"]: s.value for s in scraped["dltop_campaign_state"]}
    assert states["waiting"] == 1 and sum(states.values()) == 1 and "finished" in states
    assert one(scraped["dltop_campaign_engine_up"]).value == 1
    # which devices, since when, on how many processes: never who holds them (the stored
    # text's pid, user, campaign and database stay on the host: dltop status, the TUI)
    wait = one(scraped["dltop_campaign_waiting_for_devices"])
    assert wait.value == 1 and wait.labels["devices"] == WAITING_DEVICES
    assert one(scraped["dltop_campaign_waiting_holders"]).value == WAITING_HOLDERS
    (since,) = connect(scraped_db).execute("select waiting_since_s from campaigns").fetchone()
    assert one(scraped["dltop_campaign_waiting_start_time_seconds"]).value == since
    values = {v for samples in scraped.values() for s in samples for v in s.labels.values()}
    assert not [v for v in values if re.search(r"4242|alice|secret|pid|held", v)], values
    jobs = {s.labels["state"]: s.value for s in scraped["dltop_campaign_jobs"]}
    assert {k: v for k, v in jobs.items() if v} == {"ok": 1, "crashed": 1, "running": 1,
                                                     "queued": 1}
    assert jobs["oom"] == 0  # every state is served, 0 included
    runs = {s.labels["status"]: s.value for s in scraped["dltop_campaign_runs"]}
    assert runs["ok"] == 1 and runs["crashed"] == 1 and "running" not in runs


def test_the_last_ended_run_outlives_it_with_its_status_and_identity(
        scraped: dict[str, list[Any]]) -> None:
    info = one(scraped["dltop_campaign_last_run_info"])
    assert info.labels["status"] == "ok" and info.labels["model"] == "alexnet-r"
    assert info.labels["precision"] == "fp32" and info.labels["campaign"] == "prec"
    rate = one(scraped["dltop_campaign_last_run_samples_per_second"])
    # labelled by the campaign only: the run is the info series', joined on these
    assert rate.labels == {k: info.labels[k] for k in ("campaign", "campaign_id", "Hostname")}
    assert rate.value == pytest.approx(64 * 3 / 0.6)  # samples / seconds, not batch / median
    assert one(scraped["dltop_campaign_last_run_seconds_per_iteration"]).value == \
        pytest.approx(0.1)


def test_run_series_carry_the_varying_identity_fields(scraped: dict[str, list[Any]]) -> None:
    info = one(scraped["dltop_run_info"])
    assert info.value == 1 and info.labels["run_id"] == "3"
    assert info.labels["precision"] == "bf16" and info.labels["model"] == "fcn-r"
    done = one(scraped["dltop_run_iterations_done"])
    assert done.value == 8  # its values: labelled by where it runs (a lone run: host)
    assert done.labels == {"campaign": "prec", "campaign_id": "1", "slot": "host",
                           "Hostname": info.labels["Hostname"]}
    assert {k: info.labels[k] for k in done.labels} == done.labels  # the join's labels
    assert one(scraped["dltop_run_samples_per_second"]).value == pytest.approx(64 / 0.2)
    assert one(scraped["dltop_run_median_seconds_per_iteration"]).value == pytest.approx(0.2)
    # identity fields named like a label the families use do not overwrite it
    assert label_name("device") == "id_device" and label_name("seq_len") == "seq_len"
    # nor a histogram's bucket bound, and no name is one Prometheus refuses or keeps
    assert [label_name(n) for n in ("le", "quantile", "__name__", "8bit", "a-b")] == [
        "id_le", "id_quantile", "id___name__", "id_8bit", "a_b"]


def test_fake_gpus_give_whole_mhz_and_mib(scraped: dict[str, list[Any]]) -> None:
    for name in ("DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_MEM_CLOCK", "DCGM_FI_DEV_FB_USED",
                 "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_GPU_UTIL"):
        assert len(scraped[name]) == 2 and all(s.value == int(s.value)
                                               for s in scraped[name]), name


METRIC = re.compile(r"\b(?:dltop|DCGM)_[A-Za-z0-9_]+")


def test_grafana_dashboard_is_valid_and_queries_served_metrics(
        scraped: dict[str, list[Any]]) -> None:
    """Grafana is not installable here (no Debian package): the dashboard is checked
    against the fields Grafana's dashboard schema requires, and every metric its
    queries name must be one this exporter serves."""
    dash = json.loads(DASHBOARD.read_text())
    assert isinstance(dash["schemaVersion"], int) and dash["schemaVersion"] >= 36
    assert dash["title"] and dash["uid"] and isinstance(dash["panels"], list)
    served = set(scraped)
    exprs = [v["definition"] for v in dash["templating"]["list"] if v.get("definition")]
    ids = set()
    for p in dash["panels"]:
        assert isinstance(p["id"], int) and p["id"] not in ids and p["type"] and p["title"]
        ids.add(p["id"])
        assert {"x", "y", "w", "h"} <= set(p["gridPos"]) and p["gridPos"]["x"] + \
            p["gridPos"]["w"] <= 24
        if p["type"] == "row":
            continue
        assert p["datasource"]["type"] == "prometheus" and p["targets"], p["title"]
        refs = [t["refId"] for t in p["targets"]]
        assert len(set(refs)) == len(refs)
        exprs += [t["expr"] for t in p["targets"]]
    # a serve run's series: checked against a scrape of one, tests/serving/test_serve_live.py
    names = {m for e in exprs for m in METRIC.findall(e) if not m.startswith("dltop_serve_")}
    assert names and names - served == set(), f"queried but not served: {names - served}"
    # the campaign, its jobs, whom it waits on and the runs in progress are all shown
    assert {"dltop_campaign_state", "dltop_campaign_jobs",
            "dltop_campaign_waiting_for_devices", "dltop_run_samples_per_second",
            "dltop_telemetry_age_seconds"} <= names


def test_identity_labels_are_kept_between_scrapes_until_the_jobs_change(
        db_path: Path) -> None:
    from dltop.live.campaign_metrics import read_campaigns

    cache: dict[int, Any] = {}
    db = connect(db_path)
    first: dict[int, Any] = {}
    read_campaigns(db, first, cache)
    again: dict[int, Any] = {}
    read_campaigns(db, again, cache)
    assert again[1] is first[1]  # the same labels object: not parsed again
    assert {lab["precision"] for lab in first[1].values()} == {"fp32", "bf16"}
    assert all(set(lab) == {"precision"} for lab in first[1].values())
    # a job appended to the queue needs its labels: they are read again
    more = parse(PROFILE.replace("[64]", "[32]"), "more.toml", "more").jobs
    Store(db).edits.append_jobs(1, more[:1], "more.toml")
    after: dict[int, Any] = {}
    read_campaigns(db, after, cache)
    assert after[1] is not first[1] and len(after[1]) == len(first[1]) + 1


def test_the_next_run_in_a_slot_reuses_its_series(db_path: Path) -> None:
    """Prometheus' advice on label cardinality: a run id on every series left ~10 new
    series (a serve run ~60) behind per run. The values of runs and of the last ended
    run are labelled by campaign and slot, so the next run in the slot writes the same
    series; only dltop_run_info (one series a run) and dltop_campaign_last_run_info
    (one a campaign at a time) say which run."""
    from dltop.results.stats import summarize_run

    store = Store(connect(db_path))
    source = MetricsSource(None, db_path)

    def series() -> dict[str, set[tuple[tuple[str, str], ...]]]:
        out: dict[str, set[tuple[tuple[str, str], ...]]] = {}
        for f in source.families():
            if f.name.startswith(("dltop_run", "dltop_campaign_last_run")):
                out[f.name] = {tuple(sorted(lab.items())) for lab, _ in f.samples}
        return out

    before = series()
    (run,) = store.db.query("select id, job_id from runs where status = 'running'")
    store.add_iterations(run["id"], [{"idx": 8 + i, "seconds": 0.2, "samples": 64,
                                      "warmup": 0, "loss": None} for i in range(17)])
    store.finish_run(run["id"], run["job_id"], "ok", summarize_run([0.2] * 17, 64).to_columns())
    (job,) = store.db.query("select id from jobs where status = 'queued'")
    nxt = store.start_run(job["id"], 1, 1, "", 64)
    store.add_iterations(nxt, [{"idx": 0, "seconds": 0.3, "samples": 64, "warmup": 1,
                                "loss": None}])
    after = series()
    infos = ("dltop_run_info", "dltop_campaign_last_run_info")
    assert {k: v for k, v in after.items() if k not in infos} == \
        {k: v for k, v in before.items() if k not in infos}
    assert len(before) >= 9 and all(len(v) == 1 for v in after.values())
    (old,), (new,) = before["dltop_run_info"], after["dltop_run_info"]
    assert (dict(old)["run_id"], dict(new)["run_id"]) == (str(run["id"]), str(nxt))
    assert dict(new)["model"] == "alexnet-r"


@pytest.mark.parametrize(("status", "result"), [("short", True), ("cancelled", False),
                                                ("timeout", False), ("crashed", False)])
def test_the_last_run_s_figures_are_served_only_when_they_are_its_result(
        db_path: Path, status: str, result: bool) -> None:
    """A stopped run's median covers the iterations before it stopped: the queue and
    ``dltop runs`` do not show it as a result, nor does the exporter; a ``short`` run's
    figures are its result (catalog.RESULT_STATUSES)."""
    from dltop.live.campaign_metrics import read_campaigns
    from dltop.results.stats import summarize_run

    store = Store(connect(db_path))
    (run,) = store.db.query("select id, job_id from runs where status = 'running'")
    seconds = [0.2, 0.3, 0.25]
    store.add_iterations(run["id"], [{"idx": 8 + i, "seconds": s, "samples": 64, "warmup": 0,
                                      "loss": None} for i, s in enumerate(seconds)])
    store.finish_run(run["id"], run["job_id"], status,
                     summarize_run(seconds, 64).to_columns())
    (camp,) = read_campaigns(store.db)
    last = camp.last_run
    assert last is not None and last.run_id == run["id"] and last.status == status
    assert (last.median_s, last.samples_per_s) == (
        (pytest.approx(0.25), pytest.approx(64 * 3 / 0.75)) if result else (None, None))


def test_a_pause_asked_is_served_before_the_campaign_is_paused(db_path: Path) -> None:
    """``dltop pause`` lets the runs going on finish: the state stays ``running`` till
    then, and ``dltop_campaign_control{control="pause"}`` says it is pausing (the TUI's
    "pausing after run N"); a resume replaces it, and none is all 0."""
    from dltop.live.campaign_metrics import campaign_families, read_campaigns

    store = Store(connect(db_path))

    def control() -> dict[str, float]:
        fams = {f.name: f for f in campaign_families(read_campaigns(store.db), "h")}
        return {lab["control"]: v for lab, v in fams["dltop_campaign_control"].samples}

    assert control() == {"pause": 0, "resume": 0, "cancel": 0}
    store.set_control(1, "pause")
    assert control() == {"pause": 1, "resume": 0, "cancel": 0}
    store.set_control(1, "resume")
    assert control() == {"pause": 0, "resume": 1, "cancel": 0}
    store.set_control(1, "cancel")
    assert control() == {"pause": 0, "resume": 0, "cancel": 1}
    # once the engine acted on it, the campaign ended: no request stands for anyone
    store.set_campaign_status(1, "cancelled")
    assert control() == {"pause": 0, "resume": 0, "cancel": 0}
