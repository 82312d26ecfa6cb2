"""A 100 000-job queue: virtual rows, windowed reads, and the cursor over all of it."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot

from dltop.catalog import JobStatus
from dltop.live.campaign import read_campaign, read_jobs
from dltop.profiles.loader import parse
from dltop.store import Store, connect, memory_db
from dltop.store.read.queue_view import queue_row
from dltop.store.rows import job_row
from dltop.tui.app import DltopApp
from dltop.tui.queue import QueueHeader, QueueTable

# Builds a database of a large queue once (~16 s), on one worker: under `make test`'s
# --dist loadgroup the module fixture would otherwise run once on each worker.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("big_queue")]

N_JOBS = 100_000


def add_jobs(store: Store, n: int) -> tuple[int, list[int]]:
    """A campaign of ``n`` queued jobs (four configurations in turn); its id, job ids."""
    prof = parse('[[matrix]]\nframeworks = ["torch"]\nmodels = ["fcn-r", "lstm"]\n'
                 'batch_sizes = [8, 16]\ndevices = ["cpu:1"]\n', "big.toml", "big")
    cid = store.create_campaign("big", ["big.toml"], ["dltop"], "h", 1, None)
    rows = [job_row(cid, pos, JobStatus.QUEUED, prof.jobs[pos % 4]) for pos in range(n)]
    cols = list(rows[0])
    with store.transaction():  # one statement: Store.add_jobs inserts row by row
        store.db.conn.executemany(
            f"insert into jobs ({', '.join(cols)}) values ({', '.join('?' * len(cols))})",
            [tuple(r[c] for c in cols) for r in rows])
    ids = [r["id"] for r in store.db.query(
        "select id from jobs where campaign_id = ? order by position", [cid])]
    return cid, ids


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[int]]:
    path = tmp_path_factory.mktemp("big") / "big.db"
    _, ids = add_jobs(Store(connect(path)), N_JOBS)
    return path, ids


def test_windows_skip_removed_jobs_like_a_full_read() -> None:
    store = Store(memory_db())
    cid, ids = add_jobs(store, 300)
    rng = random.Random(4)
    removed = set(rng.sample(ids, 90)) | set(ids[:5]) | set(ids[100:140])  # runs of them
    store.db.conn.executemany("update jobs set status = 'removed' where id = ?",
                              [(i,) for i in removed])
    shown = [i for i in ids if i not in removed]
    for offset in (0, 1, 7, 50, 99, 150, len(shown) - 3, len(shown), len(shown) + 5):
        for hint in (None, len(shown), 0, 10_000):  # counted from either end
            got = [j.job_id for j in read_jobs(store.db, cid, offset, 20, hint)]
            assert got == shown[offset:offset + 20], (offset, hint)
    positions = {r["id"]: r["position"] for r in store.db.query("select id, position from jobs")}
    for row in (0, 3, 60, len(shown) - 1):
        assert queue_row(store.db, cid, positions[shown[row]]) == row
    view = read_campaign(store.db, cid, 150, 20)
    assert view is not None and view.job_total == len(shown) and view.jobs_offset == 150


def test_a_read_fetches_one_window_and_the_counts(big: tuple[Path, list[int]]) -> None:
    path, ids = big
    db = connect(path, create=False)
    view = read_campaign(db, 1, 99_990, 200)
    assert view is not None
    assert view.job_total == N_JOBS and view.counts == {"queued": N_JOBS}
    # A window past the end is moved back so that it ends with the queue.
    assert view.jobs_offset == N_JOBS - 200 and len(view.jobs) == 200
    assert view.jobs[-1].job_id == ids[-1] and view.jobs[0].position == N_JOBS - 200
    assert view.tail == view.jobs[-100:] and [j.job_id for j in view.head] == ids[:100]


async def wait_for(pilot: Pilot[Any], cond: Any, what: str) -> None:
    for _ in range(400):
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()
        if cond():
            return
    raise AssertionError(f"never: {what}")


def line(table: QueueTable, y: int) -> str:
    return table.render_line(y).text


async def test_the_queue_scrolls_through_100000_jobs(big: tuple[Path, list[int]]) -> None:
    path, ids = big
    app = DltopApp(path, path.parent / "logs", None, live=False, resume_orphans=False)
    async with app.run_test(size=(100, 30)) as pilot:
        await app.refresh_now()
        table = app.screen.query_one(QueueTable)
        await wait_for(pilot, lambda: table.row_count == N_JOBS, "the count")
        assert "jobs 0/100000" in str(app.screen.query_one("#title").render())
        assert line(table, 0).split()[:2] == ["1", "queued"]
        assert table.selected_job == ids[0]
        assert table.cells_at(N_JOBS - 1) is not None  # the tail came too: End reads nothing
        assert table.cells_at(N_JOBS // 2) is None
        height = table.size.height
        assert height > 3 and line(table, height - 1).split()[0] == str(height)
        table.focus()

        await pilot.press("down", "down")
        assert table.cursor_row == 2 and table.selected_job == ids[2]
        await pilot.press("pagedown")
        assert table.cursor_row == 12 and table.selected_job == ids[12]

        await pilot.press("end")
        await wait_for(pilot, lambda: table.selected_job == ids[-1], "the last job")
        assert table.cursor_row == N_JOBS - 1
        assert line(table, height - 1).split()[:2] == ["100000", "queued"]
        assert line(table, 0).split()[0] == str(N_JOBS - height + 1)
        # "100000" fits: the # column widened, and the header with it
        header = str(app.screen.query_one(QueueHeader).render())
        assert header.index("status") == line(table, height - 1).index("queued")

        await pilot.press("pageup", "up")
        assert table.cursor_row == N_JOBS - 12 and table.selected_job == ids[-12]

        table.scroll_to(y=50_000, animate=False)  # the scroll bar dragged to the middle
        await wait_for(pilot, lambda: table.cells_at(50_000) is not None, "the middle rows")
        await wait_for(pilot, lambda: line(table, 0).split()[0] == "50001",
                       f"the redraw {line(table, 0)!r} {table.scroll_offset} {table._offset}")

        await pilot.press("home")
        await wait_for(pilot, lambda: table.selected_job == ids[0], "the first job")
        assert line(table, 0).split()[0] == "1" and table.cursor_row == 0
