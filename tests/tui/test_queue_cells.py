"""The queue's cells measured in terminal cells, not characters: a CJK model name (two
cells a character) keeps its row's columns under their headers, a name cut at the
column's edge says so with ``…``, and a contaminated run of 100-999 ms/it keeps its
``§``; a serve job's says ms/req. A real database, the real app (no GPUs)."""

from __future__ import annotations

from pathlib import Path

from rich.cells import cell_len

from dltop.jobs import campaign
from dltop.profiles.loader import parse
from dltop.store import Store, connect
from dltop.tui.queue import MODEL_MAX, QueueHeader, QueueTable

from .conftest import Seeded, make_app

LONG = "résnet-模型-ünïcode-very-long-model-name-for-layout"  # 51 characters, 53 cells
PROFILE = f"""
name = "wide"
[defaults]
iterations = 5
warmup = 0
[[matrix]]
frameworks = ["command"]
models = ["{LONG}", "模型", "tiny"]
batch_sizes = [8]
devices = ["cpu:1"]
command = ["true"]
[[matrix]]
frameworks = ["openai"]
mode = "serve"
endpoint = "http://127.0.0.1:9/v1"
models = ["served"]
"""


def _seed(tmp_path: Path) -> Seeded:
    store = Store(connect(tmp_path / "t.db"))
    plan = campaign.preflight([parse(PROFILE, "wide.toml", "wide")], 0, False)
    cid, queued = campaign.create(store, plan, ["dltop", "run", "wide.toml"])
    ids = [q.job_id for q in queued]
    for k, job in enumerate(ids):
        rid = store.start_run(job, cid, 1, "", 8)
        store.finish_run(rid, job, "ok", {"median_s": 0.1592, "contaminated": int(k in (0, 3)),
                                          "n_iterations": 5})
    return Seeded(tmp_path / "t.db", cid, ids, 0)


def _cell_of(line: str, word: str) -> int:
    """The terminal column where ``word`` starts in ``line``."""
    return cell_len(line[:line.index(word)])


async def test_wide_model_names_keep_the_columns_aligned(tmp_path: Path) -> None:
    app = make_app(_seed(tmp_path), gpus=0)
    async with app.run_test(size=(160, 30)) as pilot:
        await app.refresh_now()
        await pilot.pause()
        table = app.screen.query_one(QueueTable)
        rows = [table.render_line(y).text for y in range(3)]
        header = str(app.screen.query_one(QueueHeader).render())
        assert [_cell_of(r, " 8 ") + 1 for r in rows] == [_cell_of(header, "batch")] * 3, rows
        assert [_cell_of(r, "cpu:1") for r in rows] == [_cell_of(header, "device")] * 3
        cut = rows[0].split("command", 1)[1].strip().split(" ")[0]
        assert cut.endswith("…") and cell_len(cut) == MODEL_MAX - 1 and LONG.startswith(
            cut[:-1])
        assert "159.2 ms/it§" in rows[0] and "§" not in rows[1] + rows[2]
        # a serve job's figure is its requests' end-to-end latency, not a time per iteration
        served = table.render_line(3).text
        assert "served" in served and "159.2 ms/req§" in served and "/it" not in served


async def test_at_80_columns_a_long_model_name_gives_way_to_the_columns_after_it(
        tmp_path: Path) -> None:
    """A 40-column model name at 80 columns pushed device, rep and progress off the row
    (``résnet-模型-…-name- 8     c…``); the name is cut instead, the header over it."""
    app = make_app(_seed(tmp_path), gpus=0)
    async with app.run_test(size=(80, 24)) as pilot:
        await app.refresh_now()
        await pilot.pause()
        table = app.screen.query_one(QueueTable)
        rows = [table.render_line(y).text for y in range(4)]
        header = str(app.screen.query_one(QueueHeader).render())
        assert all("cpu:1" in r and "159.2 ms/" in r for r in rows), rows
        assert [_cell_of(r, "cpu:1") for r in rows] == [_cell_of(header, "device")] * 4
        assert [_cell_of(r, "159.2") for r in rows] == [_cell_of(header, "progress")] * 4
        assert "…" in rows[0] and "tiny" in rows[2]
        await pilot.resize_terminal(160, 30)  # room again: the whole 40 columns
        await pilot.pause()
        wide = table.render_line(0).text
        assert _cell_of(wide, " 8 ") + 1 == _cell_of(
            str(app.screen.query_one(QueueHeader).render()), "batch") == 30 + MODEL_MAX
