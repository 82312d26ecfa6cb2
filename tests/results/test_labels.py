"""Golden run labels (results/labels.py, issue 31 item 3): configurations that differ only
in precision, cuda_graphs or compile get different labels; shared settings are left out."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import sqlite_utils

from dltop.results import labels, queries
from dltop.store.views import ensure_views

H200 = Path(__file__).parents[2] / "docs/gpu-runs/2026-11-26-h200-check"


def _db(name: str) -> sqlite_utils.Database:
    db = sqlite_utils.Database(sqlite3.connect(f"file:{H200 / name}?mode=ro", uri=True))
    ensure_views(db.conn)  # written before the readers' views: temporary ones, as readers do
    return db


def _run_labels(db: sqlite_utils.Database, run_ids: list[int]) -> dict[int, str]:
    """Each run's label as the viewers and the report compose it: its job's columns and
    its settings against its campaign's varying fields (:func:`labels.run_settings`)."""
    settings = labels.run_settings(db, run_ids)
    rows = {r.run_id: r for r in queries.recent_runs(db, limit=10_000)}
    return {i: labels.compose(rows[i].framework, rows[i].model, rows[i].batch_size,
                              rows[i].device, settings[i]) for i in run_ids}


def test_field_texts() -> None:
    assert labels.field_text("precision", "bf16") == "bf16"
    assert labels.field_text("mode", "inference") == "inference"
    assert labels.field_text("mode", "train") == ""  # the default: the label without it
    assert labels.field_text("cuda_graphs", True) == "cuda graphs"
    assert labels.field_text("cuda_graphs", False) == ""
    assert labels.field_text("torch_compile", "default") == "compile default"
    assert labels.field_text("torch_compile", "off") == ""
    assert labels.field_text("seq_len", 1024) == "seq len 1024"
    assert labels.field_text("iterations", 40) == "40 it"
    assert labels.field_text("xla", None) == ""


def test_label_orders_the_run_length_last_and_numbers_the_repeat() -> None:
    ident = {"framework": "torch", "model": "gpt2-s", "batch_size": 8, "device": "gpu:2",
             "iterations": 40, "precision": "bf16", "seq_len": 512}
    assert labels.label(ident, ("precision", "iterations", "seq_len"), repeat=1) == \
        "torch gpt2-s b8 gpu:2 bf16 seq len 512 40 it #2"
    assert labels.label(ident, ()) == "torch gpt2-s b8 gpu:2"


def test_the_h200_check_labels_tell_every_run_apart() -> None:
    got = _run_labels(_db("gpu-check.db"), list(range(1, 22)))
    assert len(set(got.values())) == 21
    assert got[1] == "torch resnet-50 b256 gpu:1 bf16 channels last 40 it 10 warm-up"
    assert got[2] == "torch resnet-50 b256 gpu:1 fp16 channels last 40 it 10 warm-up"
    assert got[3] == "torch fcn-r b1024 gpu:1 fp32 20 it 5 warm-up"
    assert got[7] == "torch fcn-r b1024 gpu:1 tf32 20 it 5 warm-up"
    assert got[11] == "torch fcn-r b1024 gpu:1 bf16 20 it 5 warm-up"
    assert got[15] == "torch fcn-r b1024 gpu:1 fp16 20 it 5 warm-up"
    assert got[21] == "jax alexnet-r b1024 gpu:1 bf16 20 it 5 warm-up"


def test_the_options_campaign_labels_name_graphs_mode_and_compile() -> None:
    got = _run_labels(_db("options.db"), list(range(1, 7)))
    assert got == {
        1: "torch resnet-50 b256 gpu:1 channels last cuda graphs 40 it 10 warm-up",
        2: "torch resnet-50 b1 gpu:1 inference channels last 200 it 20 warm-up",
        3: "torch resnet-50 b32 gpu:1 inference channels last 200 it 20 warm-up",
        4: "torch resnet-50 b1 gpu:1 inference channels last cuda graphs 200 it 20 warm-up",
        5: "torch alexnet-r b1024 gpu:1 40 it 10 warm-up",
        6: "torch resnet-50 b256 gpu:1 channels last compile default 40 it 10 warm-up"}


def test_the_queue_rows_carry_the_varying_settings() -> None:
    from dltop.live.campaign import read_jobs
    from dltop.tui.queue import COLUMNS, WIDTHS, _cells, _line

    db = _db("gpu-check.db")
    jobs = read_jobs(db, 1, 0, 21)
    assert [j.settings for j in jobs[:3]] == [
        "bf16 channels last 40 it 10 warm-up", "fp16 channels last 40 it 10 warm-up",
        "fp32 20 it 5 warm-up"]  # rows 1 and 2 were "torch resnet-50 256 gpu:1" alike
    line = _line(_cells(jobs[0], "", 0), WIDTHS).plain
    assert line.endswith(" bf16 channels last 40 it 10 warm-up")
    assert _line((*COLUMNS, "settings"), WIDTHS).plain.endswith(" settings")
    options = read_jobs(_db("options.db"), 1, 0, 6)
    assert [j.settings for j in options][1:4] == [
        "inference channels last 200 it 20 warm-up", "inference channels last 200 it 20 warm-up",
        "inference channels last cuda graphs 200 it 20 warm-up"]


def test_every_label_of_a_run_is_the_one_label(tmp_path: Path) -> None:
    """The running run (TUI run panel, cancel dialog, ``dltop status``), the queue's
    remove dialog, the report's run and profile titles: one composition, varying
    settings included (they read "torch fcn-r b8 cpu:1 #1" for fp32 and bf16 alike)."""
    from tests.report.reportdb import add_campaign

    from dltop.live.campaign import JobLine
    from dltop.report.runs import run_label
    from dltop.store import connect
    from dltop.tui.actions import job_label

    prof = ('name = "p"\n[defaults]\nwarmup = 1\niterations = 2\n' + "".join(
        f'[[matrix]]\nframeworks = ["torch"]\nmodels = ["fcn-r"]\nbatch_sizes = [8]\n'
        f'devices = ["cpu:1"]\nprecision = "{p}"\n' for p in ("fp32", "bf16")))
    db = connect(tmp_path / "l.db")
    cid = add_campaign(db, prof, "p", gpu=False, finish=False)
    with db.conn:
        db.execute("update runs set status = 'running' where id = 2")
    (current,) = queries.current_runs(db, cid)
    assert current.label == "torch fcn-r b8 cpu:1 bf16 #1"
    assert _run_labels(db, [1, 2]) == {1: "torch fcn-r b8 cpu:1 fp32",
                                       2: "torch fcn-r b8 cpu:1 bf16"}
    row = {"run_id": 2, "framework": "torch", "model": "fcn-r", "batch_size": 8,
           "device": "cpu:1", "repeat": 0, "settings": labels.run_settings(db, [2])[2]}
    assert run_label(row) == "run 2: torch fcn-r b8 cpu:1 bf16 #1"
    job = JobLine(2, 2, "ok", "torch", "fcn-r", 8, "cpu:1", 0, settings="bf16")
    assert job_label(job, 1) == "job #2: torch fcn-r b8 cpu:1 bf16, repeat 1"
