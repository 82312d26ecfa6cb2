"""The run panel while a run's Slurm job waits in the queue (a real database, no
cluster): "queued in Slurm" with squeue's whole reason, no iteration count, no
WARM-UP, no growing clock, no "starting" or stall line."""

from __future__ import annotations

from dltop.catalog import RunStatus
from dltop.live.campaign import read_campaign
from dltop.profiles.loader import parse
from dltop.store import Store, memory_db
from dltop.tui.runpanel import RunHeadline, RunHealth, RunRate

REASON = "ReqNodeNotAvail, UnavailableNodes:gpu[001-040,042-077,079-128],login[01-02]" * 3


def test_a_queued_slurm_run_says_so_with_its_whole_reason() -> None:
    store = Store(memory_db())
    jobs = parse('[defaults]\nexecutor = "slurm"\nwarmup = 2\n[[matrix]]\nframeworks = '
                 '["torch"]\nmodels = ["fcn-r"]\nbatch_sizes = [1]\ndevices = ["cpu:1"]\n',
                 "p.toml", "p").jobs
    cid = store.create_campaign("c", ["p.toml"], ["dltop"], "host", 1, None)
    run_id = store.start_run(store.add_jobs(cid, jobs)[0], cid, 1, "", 1, "slurm-batch")

    def panel() -> tuple[str, str, str]:
        view = read_campaign(store.db, cid)
        assert view is not None and view.current is not None
        head, rate, health = RunHeadline(), RunRate(), RunHealth()
        head.run = rate.run = health.run = view.current
        return head.render().plain, rate.render().plain, health.render().plain

    store.update_run(run_id, {"slurm_job_id": "41"})  # submitted, not yet seen
    head, rate, _ = panel()
    assert "queued in Slurm (submitted)" in head and "elapsed" not in rate
    store.update_run(run_id, {"slurm_state": "PENDING", "slurm_reason": REASON})
    head, rate, health = panel()
    assert head.endswith(f"queued in Slurm ({REASON})")  # whole, however long
    assert "WARM-UP" not in head and "iteration" not in head
    assert rate == "not started: the job waits in Slurm's queue"
    assert "starting" not in health and "stalled" not in health
    store.update_run(run_id, {"slurm_state": "RUNNING", "slurm_reason": None})
    head, rate, health = panel()
    assert "iteration 0/" in head and "WARM-UP" in head and "queued" not in head
    assert "elapsed" in rate
    assert store.db.execute("select status from runs").fetchone()[0] == RunStatus.RUNNING
