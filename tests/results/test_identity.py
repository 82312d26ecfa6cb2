"""Configuration identity: runs that differ in any identity field are never merged.

Campaigns are built as a user's would be: a profile parsed by the loader, its
jobs stored with :meth:`Store.add_jobs`, and one stored run per job (no
framework runs). Each job's run has its own time, so a cell that merged two
configurations, or one configuration overwriting another, shows.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import sqlite_utils

from dltop.profiles.jobspec import JobSpec
from dltop.profiles.loader import parse
from dltop.results import (
    compare,
    comparetable,
    export,
    identity,
    idread,
    labels,
    queries,
    scaling,
    summary,
)
from dltop.results.render import render
from dltop.results.stats import summarize_run
from dltop.results.table import Cell, Role, Table
from dltop.store import Store, memory_db

BASE: dict[str, Any] = {"frameworks": ["torch"], "models": ["fcn-r"], "batch_sizes": [8],
                        "devices": ["cpu:1"]}
COMMAND: dict[str, Any] = {"frameworks": ["command"], "models": ["my-net"],
                           "command": ["python", "train.py"]}
TIMED: dict[str, Any] = {**COMMAND, "iteration_regex": "took (?P<seconds>[0-9.]+)"}


def _toml(entries: list[dict[str, Any]]) -> str:
    out = ['name = "ident"']
    for entry in entries:
        out.append("[[matrix]]")
        out += [f"{k} = {_value(v)}" for k, v in {**BASE, **entry}.items()]
    return "\n".join(out) + "\n"


def _value(v: Any) -> str:
    if isinstance(v, dict):  # an inline table (env)
        return "{ " + ", ".join(f"{k} = {json.dumps(x)}" for k, x in v.items()) + " }"
    return json.dumps(v)


def campaign(entries: list[dict[str, Any]], interpreters: list[str | None] | None = None,
             db: sqlite_utils.Database | None = None) -> tuple[sqlite_utils.Database, int]:
    """A campaign of ``entries``; job k ran once, ok, at 0.1 * (k + 1) s per iteration."""
    db = db or memory_db()
    store = Store(db)
    jobs = parse(_toml(entries), "ident.toml", "ident").jobs
    cid = store.create_campaign("ident", ["ident.toml"], ["dltop"], "host-1", 1, None)
    for k, job_id in enumerate(store.add_jobs(cid, jobs)):
        seconds = [0.1 * (k + 1)] * 3
        run_id = store.start_run(job_id, cid, 1, "", 8)
        store.add_iterations(run_id, [{"idx": i, "seconds": s, "samples": 8, "warmup": 0,
                                       "loss": None} for i, s in enumerate(seconds)])
        if interpreters and interpreters[k]:
            store.record_environment(run_id, {"python_executable": interpreters[k]})
        store.finish_run(run_id, job_id, "ok", summarize_run(seconds, 8).to_columns())
    return db, cid


def value_cells(table: Table) -> list[Cell]:
    """Every cell of a value column that holds a result."""
    return [cell for row in table.rows
            for col, cell in zip(table.columns, row.cells, strict=True)
            if col.role is Role.VALUE and cell is not None and cell.value is not None]


def assert_kept_apart(db: sqlite_utils.Database, cid: int, n: int) -> Table:
    table = export.build_table(db, cid, "time")
    cells = value_cells(table)
    assert len(cells) == n, render(table, "md")
    assert sorted(c.value or 0.0 for c in cells) == pytest.approx(
        [0.1 * (k + 1) for k in range(n)])
    assert {c.detail["n_runs"] for c in cells} == {1}
    assert len(scaling.scaling_rows(db, cid)) == n
    return table


REAL = {"data": "real", "data_dir": "/data"}
LM = {"models": ["gpt-tiny"]}
GEN = {**LM, "mode": "generate"}
FP8 = {**LM, "devices": ["gpu:1"], "precision": "fp8"}
SERVE = {"frameworks": ["openai"], "models": ["served"], "batch_sizes": [1], "mode": "serve",
         "endpoint": "http://127.0.0.1:8000/v1"}
FIELD_CASES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "framework": ({}, {"frameworks": ["tensorflow"]}),
    "model": ({}, {"models": ["alexnet-r"]}),
    "batch_size": ({}, {"batch_sizes": [16]}),
    "device": ({}, {"devices": ["cpu:2"]}),
    "iterations": ({"iterations": 3}, {"iterations": 5}),
    "warmup": ({"warmup": 0}, {"warmup": 2}),
    "min_time_s": ({}, {"min_time_s": 2}),  # {}: 0 in the tests (conftest), left out
    "warmup_s": ({"warmup_s": 0}, {"warmup_s": 1}),
    "precision": ({}, {"precision": "bf16"}),
    "data": ({}, {"data": "real", "data_dir": "/data", "shuffle": False}),
    "batch_scaling": ({}, {"batch_scaling": "per-device"}),
    "lr": ({}, {"lr": 0.5}),
    "momentum": ({}, {"momentum": 0.9}),
    "seed": ({}, {"seed": 1}),
    "xla": ({"frameworks": ["tensorflow"]}, {"frameworks": ["tensorflow"], "xla": True}),
    "inject": ({}, {"inject": "nan"}),
    "command": (COMMAND, {**COMMAND, "command": ["python", "train.py", "--fast"]}),
    "iteration_regex": ({**COMMAND, "iteration_regex": "took (?P<ms>[0-9.]+)"}, TIMED),
    "timing": (TIMED, {**TIMED, "timing": "helper"}),
    "cumulative": (TIMED, {**TIMED, "cumulative": True}),
    "steps_per_match": (TIMED, {**TIMED, "steps_per_match": 10}),
    "cwd": (COMMAND, {**COMMAND, "cwd": "/"}),
    "env": (COMMAND, {**COMMAND, "env": {"A": "1"}}),
    "optimizer": ({}, {"optimizer": "adam"}),
    "weight_decay": ({}, {"weight_decay": 0.01}),
    "mode": ({}, {"mode": "inference"}),
    "epochs": ({**REAL, "epochs": 1}, {**REAL, "epochs": 2}),
    "eval_every": ({**REAL, "eval_every": 5}, {**REAL, "eval_every": 10}),
    "shuffle": (REAL, {**REAL, "shuffle": False}),
    "input_size": ({"models": ["resnet-50"]}, {"models": ["resnet-50"], "input_size": 32}),
    "data_loader": ({}, {"data_loader": "host"}),
    "loader_workers": ({**REAL, "data_loader": "host"},
                       {**REAL, "data_loader": "host", "loader_workers": 2}),
    "channels_last": ({"models": ["alexnet-r"]},
                      {"models": ["alexnet-r"], "channels_last": True}),
    "torch_compile": ({}, {"compile": "default"}),
    "cudnn_benchmark": ({}, {"cudnn_benchmark": False}),
    "cuda_graphs": ({}, {"cuda_graphs": True}),
    "fp8_recipe": (FP8, {**FP8, "fp8_recipe": "rowwise"}),
    "nodes": ({"executor": "slurm"}, {"executor": "slurm", "nodes": 2}),
    "executor": ({}, {"executor": "slurm"}),
    "seq_len": (LM, {**LM, "seq_len": 64}),
    "attention": (LM, {**LM, "attention": "plain"}),
    "prompt_tokens": (GEN, {**GEN, "prompt_tokens": 16}),
    "new_tokens": (GEN, {**GEN, "new_tokens": 16}),
    "request_rate": (SERVE, {**SERVE, "request_rate": 4}),
    "concurrency": (SERVE, {**SERVE, "concurrency": 4}),
    "server": (SERVE, {**SERVE, "server": "vllm"}),
    "prefix_tokens": (SERVE, {**SERVE, "prefix_tokens": 16}),
    "prefix_groups": ({**SERVE, "prefix_tokens": 16},
                      {**SERVE, "prefix_tokens": 16, "prefix_groups": 2}),
    "prompt_tokens_spread": (SERVE, {**SERVE, "prompt_tokens_spread": 0.5}),
    "new_tokens_spread": (SERVE, {**SERVE, "new_tokens_spread": 0.5}),
    "shape": (SERVE, {**SERVE, "shape": "gpt-tiny"}),
}


def test_every_identity_field_has_a_case() -> None:
    from dltop.profiles.command import KEYS as COMMAND_KEYS
    from dltop.profiles.loader import OPTION_KEYS

    # system: not a profile key but `dltop run --system` (test_two_systems_never_pool)
    fields = {f for f in JobSpec.identity_fields() if f not in ("options", "system")}
    # a preset is not stored: the keys it sets are, each its own case
    assert fields | set(OPTION_KEYS) | set(COMMAND_KEYS) - {"preset"} == set(FIELD_CASES)


@pytest.mark.parametrize("field", list(FIELD_CASES))
def test_two_entries_differing_in_one_identity_field_give_two_cells(field: str) -> None:
    a, b = FIELD_CASES[field]
    db, cid = campaign([a, b])
    table = assert_kept_apart(db, cid, 2)
    keys = [c.key for c in table.columns if c.role is Role.KEY]
    if field in ("framework", "model", "batch_size", "device"):
        assert keys == ["model", "framework", "batch"]
    elif field == "server":  # its command, URL, timeout and the length fields it takes
        # (vllm: ignore_eos and min_tokens; the other preset none) are identity
        assert keys == ["model", "framework", "batch", "server", "force_length",
                        "server_command", "server_ready_url", "server_timeout_s"]
    else:  # the field that varies is a row key, named after it
        assert keys == ["model", "framework", "batch", field]
        assert len(table.rows) == 2


def test_the_interpreter_is_identity() -> None:
    db, cid = campaign([{"repeats": 2}], interpreters=["/venv-a/bin/python",
                                                       "/venv-b/bin/python"])
    table = assert_kept_apart(db, cid, 2)
    assert [c.key for c in table.columns if c.role is Role.KEY][-1] == "interpreter"
    assert [row.cells[3].text for row in table.rows if row.cells[3]] == [
        "/venv-a/bin/python", "/venv-b/bin/python"]


def test_the_issue_reproduction_gives_three_cells() -> None:
    db, cid = campaign([{"precision": "fp32", "lr": 0.01}, {"precision": "bf16", "lr": 0.01},
                        {"precision": "fp32", "lr": 0.5}])
    table = assert_kept_apart(db, cid, 3)
    md = render(table, "md")
    assert "| model | framework | batch | precision | lr | cpu:1 |" in md
    assert "constant: data synthetic, batch scaling global, momentum 0, seed 0, " \
           "iterations 50, warmup 10" in md


NOT_IDENTITY = {"timeout_s": 60, "retries": 2, "cooldown_s": 1.0, "data_dir": "/elsewhere",
                "cooldown_temp_c": 50.0, "cooldown_power_w": 100.0, "profile": True}


@pytest.mark.parametrize("field", list(NOT_IDENTITY))
def test_entries_differing_in_a_schedule_setting_are_repeats(field: str) -> None:
    db, cid = campaign([{}, {field: NOT_IDENTITY[field]}])
    cells = value_cells(export.build_table(db, cid, "time"))
    assert [c.detail["n_runs"] for c in cells] == [2]


def test_identity_declarations() -> None:
    assert JobSpec.identity_fields() == (
        "framework", "model", "batch_size", "device", "iterations", "warmup", "min_time_s",
        "warmup_s", "precision",
        "data", "batch_scaling", "lr", "momentum", "seed", "optimizer", "weight_decay", "mode",
        "epochs", "eval_every", "shuffle", "input_size", "data_loader", "loader_workers",
        "channels_last", "torch_compile", "cudnn_benchmark", "cuda_graphs", "fp8_recipe",
        "seq_len", "attention", "prompt_tokens", "new_tokens", "request_rate", "concurrency",
        "server", "prefix_tokens", "prefix_groups", "prompt_tokens_spread", "new_tokens_spread",
        "shape", "nodes", "executor", "system", "options")


def test_variation_constant_varying_and_interpreters_per_framework() -> None:
    base = {"framework": "torch", "model": "fcn-r", "batch_size": 8, "device": "cpu:1",
            "precision": "fp32", "lr": 0.01, "interpreter": "/a/python"}
    idents = [base, {**base, "device": "cpu:2", "lr": 0.5, "xla": True},
              {**base, "framework": "tensorflow", "interpreter": "/tf/python"},
              {**base, "interpreter": None}]
    var = identity.variation(idents)
    assert var.fields == ("lr", "xla")
    assert var.texts(idents[1]) == ("0.5", "true")
    assert var.texts(idents[0]) == ("0.01", "-")
    assert var.caption() == ("constant: precision fp32; "
                             "interpreter: tensorflow /tf/python, torch /a/python")
    assert var.as_json()["constant"] == {"precision": "fp32"}
    # one framework under two interpreters: the interpreter is a row key
    var2 = identity.variation([base, {**base, "interpreter": "/b/python"}])
    assert var2.fields == ("interpreter",)


def test_a_started_servers_endpoint_is_never_shown_as_its_template() -> None:
    """A server dltop starts has an endpoint template in its identity (its port is
    known only when it starts, per run): a caption and a row key say what it is."""
    base = {"framework": "openai", "model": "m", "batch_size": 1, "device": "cpu:1",
            "mode": "serve", "server": "vllm", "endpoint": "http://{host}:{port}/v1",
            "interpreter": "/a/python"}
    var = identity.variation([base, {**base, "concurrency": 2}])
    assert "endpoint started by dltop (server vllm)" in var.caption()
    assert "{" not in var.caption()
    assert var.as_json()["constant"]["endpoint"] == "http://{host}:{port}/v1"  # as stored
    given = {**base, "server": None, "endpoint": "http://gpu7:8000/v1"}
    custom = {**base, "endpoint": "http://{host}:{port}/api/v1"}
    var2 = identity.variation([base, given, custom])
    assert var2.fields == ("server", "endpoint")
    assert [var2.texts(i)[1] for i in (base, given, custom)] == [
        "started by dltop (server vllm)", "http://gpu7:8000/v1",
        "started by dltop (server vllm, path /api/v1)"]
    assert var2.cells(custom)[1].text == "started by dltop (server vllm, path /api/v1)"
    assert labels.field_text("endpoint", base["endpoint"]) == "endpoint started by dltop"


def test_an_unfinished_repeat_stays_with_its_configuration() -> None:
    db, cid = campaign([{"repeats": 2}], interpreters=["/a/python", None])
    idents = idread.campaign_identities(db, cid)
    assert [i["interpreter"] for i in idents.values()] == ["/a/python", "/a/python"]
    cells = value_cells(export.build_table(db, cid, "time"))
    assert [c.detail["n_runs"] for c in cells] == [2]


def test_runs_listing_shows_the_varying_fields(tmp_path: Path) -> None:
    import subprocess
    import sys

    path = tmp_path / "d.db"
    mem, _ = campaign([{}, {"lr": 0.5}, {"lr": 0.5, "seed": 3}])
    file_db = sqlite_utils.Database(path)
    mem.conn.backup(file_db.conn)
    file_db.close()
    out = subprocess.run([sys.executable, "-m", "dltop", "runs", "--db", str(path)],
                         capture_output=True, text=True, check=True).stdout
    header = out.splitlines()[0]
    assert "lr" in header and "seed" in header and "precision" not in header
    assert "framework" not in header and "model" not in header  # the same in every row
    assert "constant: campaign 1, framework torch, model fcn-r, batch 8, device cpu:1, " \
        "precision fp32" in " ".join(out.split())


REPRO = [{"precision": "fp32", "lr": 0.01}, {"precision": "bf16", "lr": 0.01},
         {"precision": "fp32", "lr": 0.5}]


def test_summary_has_a_row_per_configuration_keyed_by_the_varying_fields() -> None:
    db, cid = campaign(REPRO)
    table = summary.summary_table(db, cid)
    keys = [c.key for c in table.columns if c.role is Role.KEY][:6]
    assert keys == ["model", "framework", "batch", "device", "precision", "lr"]
    assert [(r.cells[4].text if r.cells[4] else "", r.cells[5].value if r.cells[5] else None,
             r.cells[6].text if r.cells[6] else "") for r in table.rows] == [
        ("bf16", 0.01, "1/1"), ("fp32", 0.01, "1/1"), ("fp32", 0.5, "1/1")]
    doc = json.loads(render(table, "json"))
    assert doc["identity"]["varying"] == ["precision", "lr"]
    assert [r["identity"]["lr"] for r in doc["rows"]] == [0.01, 0.01, 0.5]


def test_pivot_json_keeps_numeric_keys_and_states_the_constants() -> None:
    db, cid = campaign(REPRO)
    doc = json.loads(render(export.build_table(db, cid, "time"), "json"))
    assert [(r["precision"], r["lr"]) for r in doc["rows"]] == [
        ("bf16", 0.01), ("fp32", 0.01), ("fp32", 0.5)]
    assert doc["identity"]["constant"]["seed"] == 0
    assert "lr" not in doc["identity"]["constant"]


def test_scaling_groups_keep_the_varying_fields_apart() -> None:
    db, cid = campaign([{"devices": ["cpu:1", "cpu:2"]},
                        {"devices": ["cpu:1", "cpu:2"], "lr": 0.5}])
    rows = scaling.scaling_rows(db, cid)
    # job k ran at 0.1 (k + 1) s: lr 0.01 cpu:1/cpu:2 = 0.1/0.2 s, lr 0.5 = 0.3/0.4 s
    speedups = {(r.identity["lr"], r.device): r.speedup for r in rows}
    assert speedups[(0.01, "cpu:2")] == pytest.approx(0.5)
    assert speedups[(0.5, "cpu:2")] == pytest.approx(0.3 / 0.4)
    md = render(scaling.scaling_table(rows, "t"), "md")
    assert "| model | framework | batch | lr | devices |" in md
    assert "constant: precision fp32" in md


def test_compare_pairs_by_identity_across_interpreters() -> None:
    db, a = campaign(REPRO[::2], interpreters=["/old/python"] * 2)
    _, b = campaign(REPRO[::2], interpreters=["/new/python"] * 2, db=db)
    rows = compare.compare(db, a, b)
    assert len(rows) == 2
    assert {r.identity["lr"] for r in rows} == {0.01, 0.5}
    assert not any(r.verdict.startswith("only in") for r in rows)
    camp = {c.id: c for c in (queries.resolve_campaign(db, a), queries.resolve_campaign(db, b))}
    md = render(comparetable.compare_table(rows, camp[a], camp[b], "time", 0.05), "md")
    assert "| device | lr | A s |" in md and "constant: precision fp32" in md


def test_compare_keeps_two_interpreters_of_one_campaign_apart() -> None:
    db, a = campaign([{"repeats": 2}], interpreters=["/x/python", "/y/python"])
    _, b = campaign([{"repeats": 2}], interpreters=["/x/python", "/y/python"], db=db)
    rows = compare.compare(db, a, b)
    assert sorted(r.identity["interpreter"] for r in rows) == ["/x/python", "/y/python"]


def test_two_systems_never_pool(campaigns: Any) -> None:
    """The same profile on two sites (``--system``) and on none: three configurations,
    told apart by a ``system`` row key; without a system the identity reads as before."""
    from dltop.profiles.site import System

    db = memory_db()
    store = Store(db)
    text = campaigns.profile("s", ["cpu:1"])
    for k, site in enumerate((None, "alpha", "beta")):
        jobs = parse(text, "s.toml", "s",
                     system=None if site is None else System(site, "x", "local")).jobs
        cid = store.create_campaign(f"s{k}", ["s.toml"], ["dltop"], "h", 1, None)
        campaigns.add_run(db, cid, store.add_jobs(cid, jobs)[0], [0.1, 0.1, 0.1])
    table = summary.summary_table(db, queries.resolve_campaigns(db, "all"))
    assert [c.key for c in table.columns if c.role is Role.KEY][4:6] == ["precision", "system"]
    assert sorted(row.cells[5].text for row in table.rows) == ["-", "alpha", "beta"]


def test_a_started_servers_other_scheme_is_said_not_its_default_path() -> None:
    """An https template differs from the default in its scheme, not its path: saying
    "path /v1" (the default's own) would state a difference that is not there."""
    tls = identity.endpoint_text("https://{host}:{port}/v1", "vllm")
    assert tls == "started by dltop (server vllm, https)"
    assert identity.endpoint_text("http://127.0.0.1:{port}/v1", None) == \
        "started by dltop (host 127.0.0.1)"
    # a path of its own is still said as a path; the default as nothing more
    assert identity.endpoint_text("http://{host}:{port}/api/v1", "vllm") == \
        "started by dltop (server vllm, path /api/v1)"
    assert identity.endpoint_text("http://{host}:{port}/v1", "vllm") == \
        "started by dltop (server vllm)"
