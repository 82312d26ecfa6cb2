"""Tables over several campaigns and hosts, ``--campaign`` references, CSV read back.

DLBench's Table 7 shape: a desktop's CPU threads, a server's CPU threads and
GPUs of two models, from three campaigns, in one table whose column keys name
the host (and the GPU model, since the set spans two).
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from dltop import cli
from dltop.errors import UserError
from dltop.profiles.loader import parse
from dltop.results import caption, export, queries, summary
from dltop.results.render import STATUS_SUFFIX, render
from dltop.results.stats import summarize_run
from dltop.results.table import NOTE_INCOMPLETE
from dltop.store import Store, connect

PROFILE = """
name = "t7"
[defaults]
repeats = {repeats}
[[matrix]]
frameworks = ["torch"]
models = ["fcn-r"]
batch_sizes = [64]
devices = {devices}
"""


def add_campaign(path: Path, name: str, host: str, devices: list[str],
                 seconds: dict[str, float], *, torch: str = "2.3.1", gpu: str | None = None,
                 repeats: int = 1, runs: int | None = None) -> int:
    """A campaign on ``host``; the first ``runs`` repeats of each device ran ok."""
    store = Store(connect(path))
    jobs = parse(PROFILE.format(repeats=repeats, devices=json.dumps(devices)), "t.toml",
                 "t").jobs
    cid = store.create_campaign(name, ["t.toml"], ["dltop"], host, 1, None)
    for job, job_id in zip(jobs, store.add_jobs(cid, jobs), strict=True):
        if job.repeat >= (repeats if runs is None else runs):
            continue
        label = job.device.label
        its = [seconds[label]] * 3
        run_id = store.start_run(job_id, cid, 1, "", 64)
        store.add_iterations(run_id, [{"idx": i, "seconds": s, "samples": 64, "warmup": 0,
                                       "loss": None} for i, s in enumerate(its)])
        fields = summarize_run(its, 64).to_columns()
        on_gpu = label.startswith("gpu")
        if on_gpu:
            fields["device_name"] = gpu
        store.finish_run(run_id, job_id, "ok", fields)
        store.record_environment(run_id, {
            "host": host, "os": "Linux", "cpu_model": f"CPU of {host}", "physical_cores": 8,
            "logical_cores": 16, "python_version": "3.11.4", "framework": "torch",
            "framework_version": torch, "blas": "mkl", "threads": 1, "thread_env": "{}",
            "python_executable": f"/{host}/venv/bin/python",
            "cuda_version": "12.1" if on_gpu else None,
            "device_name": gpu if on_gpu else None})
    return cid


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    path = tmp_path / "t.db"
    add_campaign(path, "desktop", "hostA", ["cpu:1", "cpu:2"], {"cpu:1": 0.4, "cpu:2": 0.25})
    add_campaign(path, "server", "hostB", ["cpu:1", "gpu:1"], {"cpu:1": 0.3, "gpu:1": 0.02},
                 torch="2.4.0", gpu="NVIDIA H100 80GB HBM3")
    add_campaign(path, "server-a100", "hostB", ["gpu:1"], {"gpu:1": 0.03},
                 torch="2.4.0", gpu="NVIDIA A100-SXM4-40GB")
    return path


def csv_rows(text: str) -> list[list[str]]:
    return list(csv.reader(line for line in io.StringIO(text) if not line.startswith("#")))


def test_hosts_and_gpu_models_become_column_keys(db_path: Path) -> None:
    db = connect(db_path, create=False)
    table = export.build_table(db, [1, 2, 3], "time")
    values = [c.header for c in table.columns if c.role == "value"]
    assert values == ["hostA cpu:1", "hostA cpu:2", "hostB cpu:1",
                      "hostB gpu:1 (A100-SXM4-40GB)", "hostB gpu:1 (H100 80GB HBM3)"]
    # one configuration identity: one row; the interpreters differ by host, which the
    # caption states per framework and host instead of splitting the row
    assert len(table.rows) == 1
    assert table.caption[0].endswith("; interpreter: torch @hostA /hostA/venv/bin/python, "
                                     "torch @hostB /hostB/venv/bin/python")
    scaling = export.results_table(db, "all", "scaling")
    assert [c.key for c in scaling.columns][:4] == ["model", "framework", "batch_size",
                                                    "device"]
    assert [r.cells[3].text for r in scaling.rows if r.cells[3]] == [
        "hostA cpu:1", "hostA cpu:2", "hostB cpu:1", "hostB gpu:1 (A100-SXM4-40GB)",
        "hostB gpu:1 (H100 80GB HBM3)"]
    assert [r.cells[6].text for r in scaling.rows if r.cells[6]] == [
        "1.00", "1.60", "1.00", "1.00", "1.00"]
    assert [c.text if c else "" for c in table.rows[0].cells[3:]] == [
        "0.4000", "0.2500", "0.3000", "0.03000", "0.02000"]
    # each campaign not finished says so (these were never marked finished)
    assert table.title.startswith(
        "Campaigns 1 `desktop` (queued), 2 `server` (queued), 3 `server-a100` (queued)")
    env = table.caption[-1]
    # every value that occurs is listed, none picked silently
    assert "host hostA, hostB;" in env and "frameworks torch 2.3.1 / 2.4.0;" in env
    assert "CPU hostA: CPU of hostA (8 cores, 16 threads), hostB: CPU of hostB" in env
    assert "GPU hostB: NVIDIA H100 80GB HBM3 (up to 1 per run), hostB: NVIDIA A100" in env
    doc = json.loads(render(table, "json"))
    assert [c["id"] for c in doc["campaigns"]] == [1, 2, 3]
    assert doc["environment"]["hosts"] == ["hostA", "hostB"]
    assert doc["environment"]["frameworks"] == {"torch": ["2.3.1", "2.4.0"]}


def test_one_host_keeps_plain_device_columns(db_path: Path) -> None:
    db = connect(db_path, create=False)
    table = export.build_table(db, 2, "time")
    assert [c.header for c in table.columns if c.role == "value"] == ["cpu:1", "gpu:1"]
    assert "GPU NVIDIA H100 80GB HBM3 (up to 1 per run)" in table.caption[-1]
    cpu_only = export.build_table(db, 1, "time").caption[-1]
    assert "GPU none;" in cpu_only and "CUDA n/a;" in cpu_only


def test_same_identity_and_place_merge_as_repeats(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    add_campaign(path, "one", "hostA", ["cpu:1"], {"cpu:1": 0.2})
    add_campaign(path, "two", "hostA", ["cpu:1"], {"cpu:1": 0.4})
    add_campaign(path, "elsewhere", "hostB", ["cpu:1"], {"cpu:1": 0.8})
    db = connect(path, create=False)
    merged = export.build_table(db, [1, 2], "time")
    cell = merged.rows[0].cells[-1]
    assert cell is not None and cell.value == pytest.approx(0.3)
    assert cell.detail["n_runs"] == 2
    apart = export.build_table(db, [1, 2, 3], "time")
    assert [c.header for c in apart.columns][3:] == ["hostA cpu:1", "hostB cpu:1"]
    rows = summary.summary_table(db, queries.resolve_campaigns(db, "all")).rows
    assert [r.cells[3].text for r in rows if r.cells[3]] == ["hostA cpu:1", "hostB cpu:1"]


def test_incomplete_repeats_are_marked(tmp_path: Path) -> None:
    path = tmp_path / "i.db"
    add_campaign(path, "part", "h", ["cpu:1"], {"cpu:1": 0.2}, repeats=3, runs=2)
    table = export.build_table(connect(path, create=False), 1, "time")
    cell = table.rows[0].cells[-1]
    assert cell is not None and cell.text == "0.2000 (2/3)" and cell.detail["incomplete"]
    assert NOTE_INCOMPLETE in table.notes


def test_csv_value_columns_hold_only_numbers(db_path: Path) -> None:
    db = connect(db_path, create=False)
    for table in ("pivot", "summary", "scaling"):
        t = export.results_table(db, "all", table)
        rows = csv_rows(render(t, "csv"))
        header = rows[0]
        value_headers = [c.header for c in t.columns if c.role == "value"]
        for h in value_headers:
            assert header[header.index(h) + 1] == h + STATUS_SUFFIX
        for row in rows[1:]:
            for h in value_headers:
                text = row[header.index(h)]
                if text:
                    float(text)  # raises if a label slipped into a value column
                else:  # no number: its status column says why, or no configuration
                    assert row[header.index(h + STATUS_SUFFIX)] in ("", "-") or \
                        row[header.index(h + STATUS_SUFFIX)].startswith("n/a")


def test_csv_status_column_names_a_missing_result() -> None:
    from dltop.results.table import Cell, Column, Role, Row, Table
    table = Table("t", (Column("m", "m", Role.KEY), Column("v", "v", Role.VALUE, "s")),
                  (Row((Cell("x"), Cell("OOM", None, "oom"))),
                   Row((Cell("y"), Cell("0.5", 0.5, "ok")))),
                  caption=("Environment: host h.",))
    text = render(table, "csv")
    assert text.splitlines()[:2] == ["# t", "# Environment: host h."]
    assert csv_rows(text) == [["m", "v", "v status"], ["x", "", "OOM"], ["y", "0.5", "ok"]]


def test_resolve_campaigns(db_path: Path) -> None:
    db = connect(db_path, create=False)
    ids = [c.id for c in queries.resolve_campaigns(db, "3,1")]
    assert ids == [1, 3]
    assert [c.id for c in queries.resolve_campaigns(db, "all")] == [1, 2, 3]
    assert [c.id for c in queries.resolve_campaigns(db, "latest")] == [3]
    assert [c.id for c in queries.resolve_campaigns(db, "server,desktop,1")] == [1, 2]
    with pytest.raises(UserError, match="no campaign named 'nope'"):
        queries.resolve_campaigns(db, "1,nope")
    with pytest.raises(UserError, match="no campaign 9"):
        queries.resolve_campaigns(db, "9")
    with pytest.raises(UserError, match="names 3 campaigns"):
        queries.resolve_campaign(db, "all")


def test_cli_campaign_references(db_path: Path, tmp_path: Path,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    db = ["--db", str(db_path)]
    assert cli.main(["export", *db, "--campaign", "1,2", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [c["id"] for c in doc["campaigns"]] == [1, 2]
    assert cli.main(["export", *db, "--campaign", "all", "--format", "json"]) == 0
    assert [c["id"] for c in json.loads(capsys.readouterr().out)["campaigns"]] == [1, 2, 3]
    assert cli.main(["export", *db, "--campaign", "server"]) == 0
    assert capsys.readouterr().out.startswith("Campaign 2 `server`")
    out = tmp_path / "t.csv"
    assert cli.main(["export", *db, "--campaign", "missing", "-o", str(out)]) == 2
    assert "no campaign named 'missing'" in capsys.readouterr().err
    assert not out.exists()
    assert cli.main(["export", *db, "--campaign", "1,42", "-o", str(out)]) == 2
    assert "no campaign 42" in capsys.readouterr().err and not out.exists()


def test_cli_compare_takes_lists(db_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A: the server's CPU run; B: desktop and server campaigns pooled (two hosts, so the
    # pairing keeps the hosts apart and the server's own run pairs with itself)
    # single runs: inconclusive (issue 40's policy), unless --within-run, labelled so
    for extra, same in (([], "inconclusive: one run"),
                        (["--within-run"], "no significant change (within-run)")):
        assert cli.main(["compare", "--db", str(db_path), "server", "1,2", "--format",
                         "json", *extra]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert doc["b"] == [{"id": 1, "name": "desktop"}, {"id": 2, "name": "server"}]
        assert [c["id"] for c in doc["campaigns"]] == [2, 1]
        assert doc["environment"]["hosts"] == ["hostA", "hostB"]
        verdicts = {(r["device"], r["identity"].get("host")): r["verdict"]
                    for r in doc["rows"]}
        assert verdicts == {("cpu:1", "hostA"): "only in B", ("cpu:2", None): "only in B",
                            ("cpu:1", "hostB"): same, ("gpu:1", None): same}
    # one host per side: the desktop's CPU runs pair with the server's across hosts
    assert cli.main(["compare", "--db", str(db_path), "desktop", "server", "--format",
                     "json", "--within-run"]) == 0
    rows = {r["device"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    assert rows["cpu:1"]["ratio"] == pytest.approx(0.3 / 0.4)
    assert rows["cpu:1"]["verdict"] == "faster (within-run)"
    assert rows["cpu:1"]["interval"] == "within-run" and "host" not in rows["cpu:1"]["identity"]
    assert cli.main(["compare", "--db", str(db_path), "nope", "1"]) == 2


@pytest.mark.parametrize("table", ["pivot", "summary", "scaling"])
def test_every_table_takes_its_format_from_the_suffix(db_path: Path, tmp_path: Path,
                                                      table: str) -> None:
    db = ["--db", str(db_path), "--campaign", "all", "--table", table]
    for suffix in (".md", ".csv", ".json", ".tex"):
        out = tmp_path / f"t{suffix.upper() if suffix == '.tex' else suffix}"
        assert cli.main(["export", *db, "-o", str(out)]) == 0
        text = out.read_text()
        assert "Environment: host hostA, hostB;" in text  # every format has the caption
        if suffix == ".json":
            doc = json.loads(text)
            assert list(doc)[:2] == ["campaigns", "environment"]
            assert {"columns", "rows", "layout"} <= doc.keys()
        elif suffix == ".csv":
            assert text.startswith("# Campaigns 1 `desktop`")
            assert csv_rows(text)[0][0] == "model"
        elif suffix == ".tex":
            first = text.splitlines()[0]
            assert first.startswith("% ") and ("1 (desktop)" in first or "1 `desktop`" in first)
            assert "\\toprule" in text
        else:
            assert text.startswith("Campaigns 1 `desktop`") and "| model |" in text


@pytest.mark.parametrize(("ends", "said"), [
    (("http://127.0.0.1:5000/v1",) * 2, "endpoint http://127.0.0.1:5000/v1 (started by dltop);"),
    (("http://127.0.0.1:5000/v1", "http://127.0.0.1:5001/v1"),
     "endpoints 2 servers started by dltop, each run's URL in its environment;"),
    ((None, None), None)])
def test_the_url_a_started_server_got_is_in_the_environment_caption(
        tmp_path: Path, ends: tuple[str | None, ...], said: str | None) -> None:
    """The constant line says only "started by dltop" (a template is all a job holds):
    the environment line gives the URL where the set's runs used one server."""
    path = tmp_path / "t.db"
    cid = add_campaign(path, "served", "hostA", ["cpu:1", "cpu:2"], {"cpu:1": 0.4, "cpu:2": 0.2})
    store = Store(connect(path))
    run_ids = [r["id"] for r in store.db.query("select id from runs order by id")]
    for run_id, url in zip(run_ids, ends, strict=True):
        served = {"server": "fake", "endpoint": url} if url else {
            "server": None, "endpoint": "http://gpu7:8000/v1"}  # already serving
        store.record_environment(run_id, {"host": "hostA", "extra": json.dumps(served)})
    env = caption.environment(store.db, [cid])
    if said is None:
        assert "endpoint" not in env.caption() and "started_endpoints" not in env.as_json()
    else:
        assert said in env.caption(), env.caption()
        assert env.as_json()["started_endpoints"] == sorted(set(ends))


@pytest.mark.parametrize(("runs", "said"), [
    # a server of its own per run: the third got the port the first had freed
    ((("A", None), ("B", None), ("A", None)), "endpoints 3 servers started by dltop"),
    # a group's server for the first two (one server), the third its own
    ((("A", 10), ("A", 10), ("B", None)), "endpoints 2 servers started by dltop")])
def test_started_servers_are_counted_by_server_not_by_url(
        tmp_path: Path, runs: tuple[tuple[str, int | None], ...], said: str) -> None:
    path = tmp_path / "t.db"
    cid = add_campaign(path, "served", "hostA", ["cpu:1", "cpu:2", "cpu:4"],
                       {"cpu:1": 0.4, "cpu:2": 0.2, "cpu:4": 0.1})
    store = Store(connect(path))
    run_ids = [r["id"] for r in store.db.query("select id from runs order by id")]
    for run_id, (port, pid) in zip(run_ids, runs, strict=True):
        served: dict[str, object] = {"server": "fake",
                                     "endpoint": f"http://127.0.0.1:{port}/v1"}
        if pid is not None:  # the group's server: the runner says which (openai_runner)
            served.update(server_pid=pid, server_first_run=run_ids[0])
        store.record_environment(run_id, {"host": "hostA", "extra": json.dumps(served)})
    assert said in caption.environment(store.db, [cid]).caption()
