"""store/read's queries for the live viewer (queue_view, slurm, changes) on real databases."""

from __future__ import annotations

from pathlib import Path

from dltop.jobs.executors.where import queued_reason
from dltop.profiles.loader import parse
from dltop.store import Store, connect, memory_db
from dltop.store.read.changes import data_version, main_file
from dltop.store.read.jobruns import running
from dltop.store.read.queue_view import job_row, queue_window
from dltop.store.read.slurm import queue_state
from dltop.store.reader import open_reader

PROFILE = ('[[matrix]]\nframeworks = ["torch"]\nmodels = ["fcn-r"]\nbatch_sizes = [8, 16, 32]\n'
           'devices = ["cpu:1"]\niterations = 20\nwarmup = 3\n')


def _running(store: Store, executor: str = "local") -> tuple[int, list[int], int]:
    """A campaign of three jobs, the first one running: its id, the job ids, the run id."""
    cid = store.create_campaign("c", ["p.toml"], ["dltop"], "host", 1, None)
    ids = store.add_jobs(cid, parse(PROFILE, "p.toml", "p").jobs)
    return cid, ids, store.start_run(ids[0], cid, 1, "", 8, executor)


def test_a_run_shows_its_slurm_queue_reason_until_it_runs() -> None:
    store = Store(memory_db())
    cid, _, local = _running(store)
    _, _, run = _running(store, "slurm-batch")

    def pending(campaign: int = cid + 1) -> str | None:
        return queued_reason(running(store.db, campaign)[0], True, "submitted")

    def in_queue() -> str | None:
        (window_run,) = [j["run_id"] for j in queue_window(store.db, cid + 1, 0, 10)
                         if j["run_id"] is not None]
        return queued_reason(queue_state(store.db, [window_run])[0])

    store.update_run(local, {"slurm_job_id": "16"})
    assert pending(cid) is None  # a local run: its executor holds no queue
    assert pending() is None  # not submitted yet
    store.update_run(run, {"slurm_job_id": "17"})
    assert pending() == "submitted"  # sbatch answered, squeue not asked yet
    store.update_run(run, {"slurm_state": "PENDING", "slurm_reason": "Priority"})
    assert pending() == "Priority" and in_queue() == "Priority"
    store.update_run(run, {"slurm_state": "RUNNING"})
    assert pending() is None and in_queue() is None


def test_a_database_without_the_plan_and_slurm_columns_reads_alike() -> None:
    store = Store(memory_db())
    cid, _, run = _running(store)
    store.update_run(run, {"plan_iterations": 99, "slurm_job_id": "17"})
    assert running(store.db, cid)[0]["total"] == 99
    for column in ("plan_iterations", "slurm_state"):  # as before migrations 14 and 15
        store.db.execute(f"alter table runs drop column {column}")
    row = running(store.db, cid)[0]
    assert row["total"] == 23  # the job's warm-up + iterations
    assert queued_reason(row, True, "submitted") is None


def test_a_jobs_row_leaves_out_the_removed_jobs_before_it() -> None:
    store = Store(memory_db())
    _, ids, _ = _running(store)
    assert job_row(store.db, ids[2]) == 2
    store.edits.remove_job(ids[1])
    assert job_row(store.db, ids[2]) == 1 and job_row(store.db, ids[2] + 100) is None


def test_data_version_moves_only_on_another_connections_commit(tmp_path: Path) -> None:
    path = tmp_path / "d.db"
    store = Store(connect(path))
    reader = open_reader(path)
    seen = data_version(reader)
    list(reader.query("select * from campaigns"))
    assert data_version(reader) == seen
    _running(store)
    assert data_version(reader) != seen
    assert Path(main_file(reader)).samefile(path) and main_file(memory_db()) == ""
