"""Two processes take over the same dead engine's campaign at once: exactly one wins."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from dltop.procs import this_host
from dltop.store import Store, connect

CLAIM = textwrap.dedent("""
    import os, sys, time
    from pathlib import Path
    from dltop.errors import UserError
    from dltop.jobs.resume import resume
    from dltop.store import Store, connect
    store = Store(connect(Path(sys.argv[1]), create=False))
    go = Path(sys.argv[2])
    print("ready", flush=True)
    while not go.exists():
        pass
    try:
        r = resume(store, int(sys.argv[3]))
    except UserError as exc:
        print("lost", exc, flush=True)
    else:
        print("won", os.getpid(), flush=True)
""")


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", ""])
    proc.wait()
    return proc.pid


@pytest.mark.slow  # four rounds of racing resumer processes
def test_two_resumers_at_once_exactly_one_takes_the_campaign(tmp_path: Path) -> None:
    db = tmp_path / "d.db"
    store = Store(connect(db))
    for attempt in range(4):
        # a dead engine of this host: its pid answers (another host's would be judged
        # by its heartbeat, fresh here)
        cid = store.create_campaign(f"c{attempt}", [], [], this_host(), dead_pid(), 123.5)
        store.set_campaign_status(cid, "running")
        go = tmp_path / f"go{attempt}"
        procs = [subprocess.Popen([sys.executable, "-c", CLAIM, str(db), str(go), str(cid)],
                                  stdout=subprocess.PIPE, text=True) for _ in range(2)]
        for p in procs:
            assert p.stdout is not None and p.stdout.readline() == "ready\n"
        go.write_text("")
        outs = [p.communicate(timeout=60)[0] for p in procs]
        won = [o for o in outs if o.startswith("won")]
        lost = [o for o in outs if o.startswith("lost")]
        assert len(won) == 1 and len(lost) == 1, outs
        assert "was just taken over by another dltop process" in lost[0] or \
            "still being run by dltop" in lost[0], lost[0]
        (owner,) = store.db.query("select engine_pid from campaigns where id = ?", [cid])
        assert owner["engine_pid"] == int(won[0].split()[1])
