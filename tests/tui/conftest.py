"""A stored campaign in every state the TUI shows, and a deterministic app over it.

The only fakes are at the hardware boundary and are labelled: simulated GPUs
on a stepping clock, a fixed host reading, and (for snapshots) an engine
liveness check pinned to True so the title does not depend on a pid.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dltop.jobs import campaign
from dltop.procs import process_start_time
from dltop.profiles.loader import parse
from dltop.store import Store, connect
from dltop.telemetry.fake import FakeGpuBackend
from dltop.telemetry.values import HostSample
from dltop.tui.app import DltopApp

PROFILE = """
name = "tui-test"
[defaults]
iterations = 20
warmup = 5
[[matrix]]
frameworks = ["torch"]
models = ["fcn-r", "alexnet-r", "resnet-56"]
batch_sizes = [64]
devices = ["cpu:1", "cpu:2"]
"""
FIXED_TIME = "2026-11-22T12:00:00Z"


@dataclass
class Seeded:
    db_path: Path
    campaign_id: int
    job_ids: list[int]
    run_id: int


def seed(tmp_path: Path, engine_pid: int | None = None) -> Seeded:
    """Six jobs: ok, crashed, running (12 of 25 iterations), three queued."""
    db_path = tmp_path / "t.db"
    store = Store(connect(db_path))
    prof = parse(PROFILE, "tui-test.toml", "tui-test")
    plan = campaign.preflight([prof], 0, False)
    cid, queued = campaign.create(store, plan, ["dltop", "run", "tui-test.toml"])
    ids = [q.job_id for q in queued]
    db = store.db
    for k, status in ((0, "ok"), (1, "crashed")):
        rid = store.start_run(ids[k], cid, 1, "", 64)
        fields = {"median_s": 0.05 * (k + 1), "samples_per_s": 1280.0 / (k + 1), "cv": 0.01,
                  "n_iterations": 20, "error_message": "boom" if status == "crashed" else None}
        store.finish_run(rid, ids[k], status, fields)
    rid = store.start_run(ids[2], cid, 1, "", 64)
    log = tmp_path / "runner.log"
    log.write_text("".join(f"log line {i}\n" for i in range(50)))
    store.update_run(rid, {"log_path": str(log)})
    store.add_iterations(rid, [{"idx": i, "seconds": 0.1 + 0.01 * (i % 4), "samples": 64,
                                "warmup": int(i < 5), "loss": 2.0} for i in range(12)])
    start = process_start_time(engine_pid) if engine_pid else None
    with db.conn:
        db.execute("update campaigns set status = 'running', created_at = ?, started_at = ?, "
                   "engine_pid = ?, engine_start_time = ?, host = 'testhost'",
                   [FIXED_TIME, FIXED_TIME, engine_pid, start])
        db.execute("update runs set started_at = ?, finished_at = ?", [FIXED_TIME, FIXED_TIME])
    return Seeded(db_path, cid, ids, rid)


class SteppingClock:
    """A clock that advances 250 ms per reading: sparklines move, runs repeat exactly."""

    def __init__(self) -> None:
        self.t = 0

    def __call__(self) -> int:
        self.t += 250_000_000
        return self.t


def fixed_host() -> HostSample:
    return HostSample(0, (37.5, 62.5), 1.25, 3 * 2**30, 16 * 2**30, 0)


def make_app(seeded: Seeded, gpus: int = 8, *,
             backend: FakeGpuBackend | None = None, **kw: object) -> DltopApp:
    if backend is None and gpus:
        backend = FakeGpuBackend(gpus, clock_ns=SteppingClock())
    return DltopApp(seeded.db_path, seeded.db_path.parent / "logs", backend,
                    host=fixed_host, live=False, resume_orphans=False, **kw)  # type: ignore[arg-type]
