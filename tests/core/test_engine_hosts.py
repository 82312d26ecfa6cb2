"""Engine liveness across login nodes sharing one database (issue 33, item 2).

The host is named through ``DLTOP_HOST``, as a second login node would be: from another
host the recorded pid means nothing, the heartbeat decides; on the engine's own host
the process does.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dltop.procs import HEARTBEAT_STALE_S, engine_alive
from dltop.store import Store, connect


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", ""])
    proc.wait()
    return proc.pid


def dltop(db: Path, host: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DLTOP_DB": str(db), "DLTOP_HOST": host}
    return subprocess.run([sys.executable, "-m", "dltop", *args], capture_output=True,
                          text=True, env=env, timeout=120)


def test_liveness_is_the_pid_here_and_the_heartbeat_elsewhere(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DLTOP_HOST", "login1")
    me = os.getppid()  # alive, and not this process
    now = time.time()
    assert engine_alive(me, None, "login1", now - 3600)  # here: the process answers
    assert not engine_alive(dead_pid(), None, "login1", now)  # a fresh beat, a dead pid
    assert engine_alive(dead_pid(), None, "login2", now - 5)  # elsewhere: the beat
    assert not engine_alive(me, None, "login2", now - HEARTBEAT_STALE_S - 1)
    assert not engine_alive(me, None, "login2", None)
    assert engine_alive(me, None, None, None)  # a campaign older than heartbeats: the pid


@pytest.mark.slow  # spawns processes: over 1 s on a busy 2-core machine
def test_a_second_login_node_sees_the_engine_by_its_heartbeat(tmp_path: Path) -> None:
    db = tmp_path / "d.db"
    store = Store(connect(db))
    pid = dead_pid()  # on login1 it would be alive; here only its heartbeat says so
    cid = store.create_campaign("hosts", ["p.toml"], ["dltop", "run"], "login1", pid, 1.0)
    store.set_campaign_status(cid, "running")
    store.db.conn.close()

    status = dltop(db, "login2", "status")
    assert status.returncode == 0, status.stderr
    assert f"engine pid {pid} on host login1, heartbeat " in status.stdout, status.stdout
    refused = dltop(db, "login2", "run", "--resume", "--headless")
    assert refused.returncode == 2, refused.stderr
    assert f"campaign {cid} is still being run by dltop (pid {pid} on host login1" \
        in refused.stderr
    assert "Traceback" not in refused.stderr
    again = Store(connect(db, create=False))
    (camp,) = again.queue.open_campaigns()
    assert (camp.engine_pid, camp.engine_host) == (pid, "login1")  # nothing written

    # on login1 itself the dead pid decides, whatever the heartbeat says
    assert "engine NOT running" in dltop(db, "login1", "status").stdout

    # the heartbeat goes stale: login2 may take the campaign over
    again.db.execute("update campaigns set engine_heartbeat_s = ?",
                     [time.time() - HEARTBEAT_STALE_S - 60])
    again.db.conn.commit()
    stale = dltop(db, "login2", "status")
    assert "engine NOT running, heartbeat 2 min ago (dltop run --resume" in stale.stdout, \
        stale.stdout
    resumed = dltop(db, "login2", "run", "--resume", "--headless")
    assert resumed.returncode == 0, resumed.stderr
    assert f"resuming campaign {cid}" in resumed.stderr
    row = again.db.execute("select engine_host, engine_heartbeat_s, status from campaigns"
                           ).fetchone()
    assert row[0] == "login2" and time.time() - row[1] < 60 and row[2] == "finished"
