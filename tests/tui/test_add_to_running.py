"""`a` while viewing an older campaign appends to the campaign whose engine runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from dltop.jobs.supervisor import process_start_time
from dltop.live.campaign import read_campaign
from dltop.store import Store, connect
from dltop.tui import ops


def test_add_goes_to_the_running_engines_campaign_not_the_viewed_one(tmp_path: Path,
                                                                      profile_text: Any) -> None:
    db = tmp_path / "d.db"
    store = Store(connect(db))
    # A stand-in engine process: alive, with its start time recorded as an engine's is.
    engine = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        old = store.create_campaign("old", [], [], "h", 1, None)
        store.set_campaign_status(old, "finished")
        running = store.create_campaign("now", [], [], "h", engine.pid,
                                        process_start_time(engine.pid))
        store.set_campaign_status(running, "running")
        prof = tmp_path / "p.toml"
        prof.write_text(profile_text({"frameworks": ["command"], "models": ["x"],
                                      "batch_sizes": [8], "devices": ["cpu:1"],
                                      "command": ["true"]}))
        view = read_campaign(store.db, old)
        assert view is not None and not view.active
        text = ops.add_profile(db, tmp_path / "logs", str(prof), view)
    finally:
        engine.kill()
        engine.wait()
    assert text == f"1 job(s) of {prof} added to campaign {running}", text
    counts = dict(store.db.execute("select campaign_id, count(*) from jobs group by campaign_id")
                  .fetchall())
    assert counts == {running: 1}
    ids = [r["id"] for r in store.db.query("select id from campaigns order by id")]
    assert ids == [old, running]
