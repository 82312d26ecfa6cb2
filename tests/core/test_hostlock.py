"""Two real engines on one host (one database or two): never both on one CPU at once.

The runs are the ``command`` framework's: a tiny script that waits for a gate file
before its first timed step, so a test holds the first engine's run open until it
has seen what the second engine does.
"""

from __future__ import annotations

import getpass
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from dltop.jobs.foreign import FOREIGN_POLL_S
from dltop.live.exporter import MetricsSource, PrometheusCollector

pytestmark = pytest.mark.slow

SCRIPT = """
import os, sys, time
from dltop_report import step
while not os.path.exists(sys.argv[2]):
    time.sleep(0.02)
for i in range(int(sys.argv[1])):
    with step(samples=8):
        time.sleep(0.01)
"""

@pytest.fixture
def profile(tmp_path: Path, profile_text: Any) -> Callable[[str], Path]:
    """Writes campaign ``name``'s profile: one sleeper run that waits for the gate file."""
    script = tmp_path / "sleeper.py"
    script.write_text(SCRIPT)

    def write(name: str) -> Path:
        path = tmp_path / f"{name}.toml"
        path.write_text(profile_text({
            "frameworks": ["command"], "models": ["sleeper"], "batch_sizes": [8],
            "devices": ["cpu:1"], "warmup": 1, "iterations": 5, "timeout_s": 120,
            "command": [sys.executable, str(script), "{total}", str(tmp_path / "gate")],
        }, name=name))
        return path

    return write


def dltop(*args: str | Path) -> list[str]:
    return [sys.executable, "-m", "dltop", *map(str, args)]


def engine(profile: Path, db: Path, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """A foreground engine on ``db``; its stdout and stderr come in one pipe."""
    return subprocess.Popen(dltop("run", profile, "--db", db, "--headless", "--no-telemetry"),
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@contextmanager
def engines() -> Iterator[list[subprocess.Popen[str]]]:
    """The engines a test starts (it appends them); whatever is left is killed at the end."""
    procs: list[subprocess.Popen[str]] = []
    try:
        yield procs
    finally:
        # TERM first: an engine stops its runner (its own session, which a KILL of the
        # engine would leave waiting on the gate for ever); KILL what is left.
        for p in procs:
            if p.poll() is None:
                p.terminate()
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()


def open_gate(tmp_path: Path, procs: list[subprocess.Popen[str]]) -> list[str]:
    """Lets the held runs go on; every engine must then end with 0. Returns their output."""
    (tmp_path / "gate").write_text("")
    outs = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [0] * len(procs), outs
    return outs


def query(db: Path, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(db)
    try:
        return conn.execute(sql, params).fetchall()
    except sqlite3.OperationalError:  # the engine has not created its tables yet
        return []
    finally:
        conn.close()


def status(db: Path, name: str) -> str | None:
    rows = query(db, "select status from campaigns where name = ?", name)
    return rows[0][0] if rows else None


def run_rows(db: Path) -> list[tuple[Any, ...]]:
    return query(db, "select c.name, r.status, r.started_at, r.finished_at, r.cpu_affinity, "
                     "r.device_lease, r.concurrent_runs from runs r join campaigns c "
                     "on c.id = r.campaign_id order by r.id")


def assert_one_after_the_other(rows: list[tuple[Any, ...]], others: set[int]) -> None:
    (a, b) = sorted(rows, key=lambda r: r[2])
    assert a[1] == b[1] == "ok", rows
    assert a[4] == b[4] is not None, "both pinned to the same CPU (the host's first)"
    assert a[3] <= b[2], f"the runs overlapped: {rows}"
    assert a[5] == b[5] == "held", rows
    if not others:
        assert a[6] == b[6] == 0, rows


def test_a_second_detached_engine_on_the_same_database_waits(tmp_path: Path, wait_until: Any,
                                                             other_runners: Any,
                                                             profile: Any) -> None:
    with other_runners(tmp_path) as others:
        same_database(tmp_path, wait_until, profile)
        assert_one_after_the_other(run_rows(tmp_path / "d.db"), others)


def same_database(tmp_path: Path, wait_until: Any, profile: Callable[[str], Path]) -> None:
    db = tmp_path / "d.db"
    first = subprocess.run(dltop("run", profile("a"), "--detach", "--db", db,
                                 "--no-telemetry"), capture_output=True, text=True, timeout=60)
    assert first.returncode == 0, first.stderr
    wait_until(lambda: query(db, "select 1 from runs where status = 'running'"), 60,
               "the first engine's run")
    second = subprocess.run(dltop("run", profile("b"), "--detach", "--db", db,
                                  "--no-telemetry"), capture_output=True, text=True,
                            timeout=60)
    assert second.returncode == 0, second.stderr
    wait_until(lambda: status(db, "b") == "waiting", 60, "campaign b to wait for devices")
    shown = subprocess.run(dltop("status", "--db", db), capture_output=True, text=True,
                           timeout=60).stdout
    assert "`b`: waiting for devices: cpu " in shown, shown
    assert "1st in line; cpu-" in shown and "held by campaign 1 `a`" in shown, shown
    assert len(run_rows(db)) == 1, "b started no run while a holds the CPU"
    (tmp_path / "gate").write_text("")
    wait_until(lambda: status(db, "a") == status(db, "b") == "finished", 120,
               "both campaigns to finish")


def test_engines_on_two_databases_share_the_lease(tmp_path: Path, wait_until: Any,
                                                  other_runners: Any, profile: Any) -> None:
    with other_runners(tmp_path) as others:
        two_databases(tmp_path, wait_until, profile)
        assert_one_after_the_other(run_rows(tmp_path / "a.db") + run_rows(tmp_path / "b.db"),
                                   others)


def two_databases(tmp_path: Path, wait_until: Any, profile: Callable[[str], Path]) -> None:
    da, dbb = tmp_path / "a.db", tmp_path / "b.db"
    with engines() as procs:
        procs.append(engine(profile("a"), da))
        wait_until(lambda: query(da, "select 1 from runs where status = 'running'"), 60,
                   "the first engine's run")
        procs.append(engine(profile("b"), dbb))
        wait_until(lambda: status(dbb, "b") == "waiting", 60, "b to wait for devices")
        (waiting_for,) = query(dbb, "select waiting_for from campaigns")[0]
        assert f"db {da}" in waiting_for, waiting_for
        outs = open_gate(tmp_path, procs)
    assert "campaign 1 waiting for devices: cpu " in outs[1], outs[1]


def test_without_a_lease_sharing_is_recorded_and_marked(tmp_path: Path, wait_until: Any,
                                                        profile: Any) -> None:
    # A lock directory that cannot exist (a read-only /tmp): both engines run at once.
    (tmp_path / "not-a-dir").write_text("")
    env = {**os.environ, "DLTOP_LOCK_DIR": str(tmp_path / "not-a-dir" / "locks")}
    db = tmp_path / "d.db"
    with engines() as procs:
        for name in ("a", "b"):
            procs.append(engine(profile(name), db, env))
            wait_until(lambda n=name: query(db, "select 1 from runs r join campaigns c on "  # type: ignore[misc]
                                               "c.id = r.campaign_id where c.name = ? and "
                                               "r.pid is not null", n), 60, f"{name}'s run")
        # Each engine scans its run's CPUs every FOREIGN_POLL_S: let a's next scan come.
        time.sleep(FOREIGN_POLL_S * 1.5)
        errs = open_gate(tmp_path, procs)
    assert all(e.count("warning: no device lease (lock directory") == 1 for e in errs), errs
    rows = run_rows(db)
    assert len(rows) == 2 and all(r[1] == "ok" for r in rows), rows
    assert all(r[5].startswith("unavailable: lock directory") for r in rows), rows
    assert all(r[6] >= 1 for r in rows), f"the sharing went unrecorded: {rows}"
    table = subprocess.run(dltop("export", "--db", db, "--campaign", "1"),
                           capture_output=True, text=True, timeout=60).stdout
    assert "†" in table, table


def waiting_for(db: Path) -> str:
    rows = query(db, "select waiting_for from campaigns")
    return (rows[0][0] or "") if rows else ""


def three_in_line(tmp_path: Path, wait_until: Any, profile: Callable[[str], Path],
                  procs: list[subprocess.Popen[str]]) -> dict[str, Path]:
    """Engine a runs (held at the gate); b, then c, wait for the same cores."""
    dbs = {n: tmp_path / f"{n}.db" for n in "abc"}
    procs.append(engine(profile("a"), dbs["a"]))
    wait_until(lambda: query(dbs["a"], "select 1 from runs where status = 'running'"), 60,
               "a's run")
    procs.append(engine(profile("b"), dbs["b"]))
    wait_until(lambda: "1st in line" in waiting_for(dbs["b"]), 60, "b to wait, first in line")
    procs.append(engine(profile("c"), dbs["c"]))
    wait_until(lambda: "2nd in line" in waiting_for(dbs["c"]), 60, "c to wait behind b")
    return dbs


def scrape(db: Path) -> tuple[str, dict[str, list[Any]]]:
    """An exporter's scrape of ``db``: prometheus_client's text, and its samples by name."""
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    registry = CollectorRegistry()
    registry.register(PrometheusCollector(MetricsSource(None, db)))
    text = generate_latest(registry).decode()
    out: dict[str, list[Any]] = {}
    for fam in text_string_to_metric_families(text):
        for x in fam.samples:
            out.setdefault(x.name, []).append(x)
    return text, out


def test_waiting_engines_get_the_cores_in_arrival_order(tmp_path: Path, wait_until: Any,
                                                        profile: Any) -> None:
    t0 = time.time()
    with engines() as procs:
        dbs = three_in_line(tmp_path, wait_until, profile, procs)
        shown = subprocess.run(dltop("status", "--db", dbs["c"]), capture_output=True,
                               text=True, timeout=60).stdout
        assert f"2nd in line behind campaign 1 `b` (pid {procs[1].pid}," in shown, shown
        assert f"db {dbs['b']})" in shown, shown
        # The exporter (no authentication, maybe on a network address) says that c waits,
        # since when, on how many processes and for which devices; never b's pid, user,
        # name or database, which waiting_for's text (shown above, locally) holds.
        ((devices, holders, since),) = query(
            dbs["c"], "select waiting_devices, waiting_holders, waiting_since_s from campaigns")
        assert devices.startswith("cpu ") and holders == 1 and t0 <= since <= time.time()
        text, got = scrape(dbs["c"])
        assert (f"pid {procs[1].pid}" not in text and str(dbs["b"]) not in text
                and "`b`" not in text and f"user {getpass.getuser()}" not in text), text
        (wait,) = got["dltop_campaign_waiting_for_devices"]
        assert (wait.labels["devices"], wait.value) == (devices, 1)
        assert [x.value for x in got["dltop_campaign_waiting_holders"]] == [1]
        assert [x.value for x in got["dltop_campaign_waiting_start_time_seconds"]] == [since]
        open_gate(tmp_path, procs)
    (a, b, c) = (run_rows(dbs[n]) for n in "abc")
    assert [len(a), len(b), len(c)] == [1, 1, 1] and all(
        r[0][1] == "ok" for r in (a, b, c)), (a, b, c)
    # started_at, finished_at: one after the other, b (which came first) before c.
    assert a[0][3] <= b[0][2] <= b[0][3] <= c[0][2], (a, b, c)


def test_a_waiter_killed_in_line_does_not_block_the_next(tmp_path: Path, wait_until: Any,
                                                         profile: Any) -> None:
    with engines() as procs:
        dbs = three_in_line(tmp_path, wait_until, profile, procs)
        procs[1].send_signal(signal.SIGKILL)
        procs[1].wait()
        # c removes b's dead ticket at its next poll and moves up.
        wait_until(lambda: "1st in line; cpu-" in waiting_for(dbs["c"]), 30,
                   "c to be first in line")
        assert "held by campaign 1 `a`" in waiting_for(dbs["c"]), waiting_for(dbs["c"])
        open_gate(tmp_path, [procs[0], procs[2]])
    assert [r[1] for r in run_rows(dbs["c"])] == ["ok"]
    assert not list((Path(os.environ["DLTOP_LOCK_DIR"]) / "tickets").glob("*.json"))
