"""Issue 41 item 5 end to end: ``dltop run`` of a serve profile with ``server = "..."`` and
``server_scope = "run"`` starts the server (tests/programs/fake_openai.py on ``{port}``)
as a child of the run's runner, waits for its readiness route, stores the run, its cold start and
``server.log``, and leaves none of the server's processes behind; a server that exits at
once, or never becomes ready, is ``setup_failed`` with its log's tail."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from tests.dltop_env import query

pytestmark = pytest.mark.slow

FAKE = Path(__file__).resolve().parents[1] / "programs" / "fake_openai.py"

PROFILE = """[servers.fake]
command = "{python} {fake} --port {{port}} --ready-after-s 0.4 --ttft-ms 5 --itl-ms 2"
timeout_s = 20
[servers.dies]
command = "sh -c 'echo PID $$; echo cannot load the model >&2; exit 3' sh {{port}}"
[servers.never]
command = "sh -c 'echo PID $$; exec sleep 60' sh {{port}}"
timeout_s = 1.5
[defaults]
frameworks = ["openai"]
mode = "serve"
new_tokens = 4
prompt_tokens = 4
iterations = 4
warmup = 1
concurrency = 2
timeout_s = 40
server_scope = "run"
[[matrix]]
models = ["steady", "multi"]
server = "fake"
[[matrix]]
models = ["m"]
server = ["dies", "never"]
"""


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_dltop_starts_the_server_and_stops_it(tmp_path: Path) -> None:
    profile = tmp_path / "servers.toml"
    profile.write_text(PROFILE.format(python=sys.executable, fake=FAKE))
    db = tmp_path / "d.db"
    t0 = time.monotonic()
    res = subprocess.run([sys.executable, "-m", "dltop", "--db", str(db), "run", str(profile)],
                         capture_output=True, text=True, timeout=240,
                         env={**os.environ, "DLTOP_DEFAULT_MIN_TIME_S": "0"})
    assert "Traceback" not in res.stderr, res.stderr
    assert res.returncode == 1, res.stdout + res.stderr  # the two servers that fail
    runs = query(db, "select r.id, j.model, r.status, r.error_kind, r.error_message, r.pid, "
                 "r.log_path, r.server_cold_start_s from runs r join jobs j on "
                 "j.id = r.job_id order by r.id")
    assert [(r["model"], r["status"]) for r in runs] == [
        ("steady", "ok"), ("multi", "ok"), ("m", "setup_failed"), ("m", "setup_failed")]
    pids = []
    for r in runs[:2]:
        # started, ready (it listens 0.4 s after its start), the load stored
        assert 0.4 <= r["server_cold_start_s"] < 20, r
        n = query(db, f"select count(*) as n from serve_requests where run_id = {r['id']} "
                  "and error is null")[0]["n"]
        assert n == 5
        log = Path(r["log_path"]).with_name("server.log")
        assert log.stat().st_mode & 0o777 == 0o600
        first = log.read_text().splitlines()[0]
        pid, ppid, pgid = map(int, re.findall(r"\d+", first))
        # a child of the run's runner (its tree: attributed to the run, never foreign),
        # leading its own group (stopped as a whole)
        assert ppid == r["pid"] and pgid == pid
        pids.append(pid)
        runner_log = Path(r["log_path"]).read_text()
        assert "server ready at http://127.0.0.1:" in runner_log
        assert "server stopped (exit status" in runner_log
    assert all(gone(p) for p in pids)  # stopped with its run
    extras = [json.loads(e["extra"]) for e in query(
        db, "select extra from environment order by run_id")][:2]
    assert [(x["server"], x["telemetry"]) for x in extras] == [
        ("fake", "the server's processes are the run's own (started by dltop)")] * 2
    dies, never = runs[2:]
    assert dies["error_kind"] == "setup" and dies["server_cold_start_s"] is None
    assert dies["error_message"].startswith("server command exited with status 3 before it "
                                            "was ready")
    assert dies["error_message"].endswith("cannot load the model")  # the log's tail
    assert never["error_message"].startswith(
        "server not ready at http://127.0.0.1:")
    assert "after 1.5 s (timeout_s); server.log ends: PID " in never["error_message"]
    sleeper = int(never["error_message"].rsplit("PID ", 1)[1].split()[0])
    assert gone(sleeper)  # KILLed or TERMed with its group, not left sleeping
    assert time.monotonic() - t0 < 120



def test_ctrl_c_stops_the_server_cleanly(tmp_path: Path) -> None:
    # A slow load (1 request/s): Ctrl-C once the server is ready; the runner's TERM
    # unwinds into the server's stop: TERM to its group, which it obeys (status -15).
    profile = tmp_path / "slow.toml"
    profile.write_text(PROFILE.format(python=sys.executable, fake=FAKE).split("[[matrix]]")[0]
                       + '[[matrix]]\nmodels = ["steady"]\nserver = "fake"\n'
                       'iterations = 100\nrequest_rate = 1\narrival = "constant"\n')
    db = tmp_path / "d.db"
    proc = subprocess.Popen([sys.executable, "-m", "dltop", "--db", str(db), "run",
                             str(profile)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "DLTOP_DEFAULT_MIN_TIME_S": "0"})
    log = tmp_path / "d-runs" / "run-1" / "server.log"
    deadline = time.monotonic() + 60
    while not (log.exists() and "PORT " in log.read_text()):
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.1)
    time.sleep(1.0)  # a request or two on the way
    proc.send_signal(2)
    _, err = proc.communicate(timeout=60)
    assert "Traceback" not in err, err
    (run,) = query(db, "select status, server_cold_start_s from runs")
    assert run["status"] == "cancelled" and run["server_cold_start_s"] is None
    runner_log = (tmp_path / "d-runs" / "run-1" / "runner.log").read_text()
    assert "server stopped (exit status -15)" in runner_log, runner_log
    pid = int(log.read_text().split()[1])
    assert gone(pid)
