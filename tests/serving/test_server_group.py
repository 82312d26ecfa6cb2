"""Issue 41 item 5: one server per configuration group (``server_scope = "group"``, the
default). ``dltop run`` starts tests/programs/fake_openai.py once for the consecutive runs
of one server, model and devices (a ``concurrency`` sweep), stores its cold start on the
group's first run only, and stops it after the group, after a run of the group that
failed, when the campaign is cancelled and when the engine is killed outright;
``server_scope = "run"`` starts one per run."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
from tests.dltop_env import query

from dltop.jobs import campaign
from dltop.jobs.allocator import DeviceAllocator
from dltop.jobs.engine import Engine
from dltop.jobs.environment import core_order
from dltop.profiles.loader import parse
from dltop.store import Store, connect
from dltop.telemetry.fake import FakeGpuBackend
from dltop.telemetry.sampler import Sampler

pytestmark = pytest.mark.slow

FAKE = Path(__file__).resolve().parents[1] / "programs" / "fake_openai.py"

HEAD = """[servers.fake]
command = "{python} {fake} --port {{port}} --ready-after-s 0.3 --ttft-ms 5 --itl-ms 2"
timeout_s = 20
[defaults]
frameworks = ["openai"]
mode = "serve"
new_tokens = 4
prompt_tokens = 4
iterations = 3
warmup = 1
timeout_s = 40
server = "fake"
"""


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def wait_gone(pid: int, within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while not gone(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def starts(log: Path) -> list[int]:
    """The pids of the fake servers started with their output in ``log``."""
    return [int(m) for m in re.findall(r"^PID (\d+)", log.read_text(), re.M)]


def profile(tmp: Path, body: str) -> Path:
    path = tmp / "p.toml"
    path.write_text(HEAD.format(python=sys.executable, fake=FAKE) + body)
    return path


def dltop(db: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "dltop", "--db", str(db), "run", *args]


ENV = {**os.environ, "DLTOP_DEFAULT_MIN_TIME_S": "0"}


def test_a_group_shares_one_server_and_scope_run_starts_one_per_run(tmp_path: Path) -> None:
    body = """[[matrix]]
models = ["steady"]
concurrency = [1, 2, 3]
[[matrix]]
models = ["other"]
[[matrix]]
models = ["cold"]
server_scope = "run"
concurrency = [1, 2, 3]
"""
    db = tmp_path / "d.db"
    res = subprocess.run(dltop(db, str(profile(tmp_path, body))), capture_output=True,
                         text=True, timeout=240, env=ENV)
    assert res.returncode == 0, res.stdout + res.stderr
    runs = query(db, "select r.id, j.model, r.status, r.server_cold_start_s, r.log_path "
                 "from runs r join jobs j on j.id = r.job_id order by r.id")
    assert [r["model"] for r in runs] == ["steady"] * 3 + ["other"] + ["cold"] * 3
    assert all(r["status"] == "ok" for r in runs)
    logs = [Path(r["log_path"]).with_name("server.log") for r in runs]
    extras = [json.loads(e["extra"]) for e in query(
        db, "select extra from environment order by run_id")]
    # the group of three: one start, in run 1's server.log; the same pid in every record
    (steady,) = starts(logs[0])
    assert [x.get("server_pid") for x in extras[:3]] == [steady] * 3
    assert [x.get("server_first_run") for x in extras[:3]] == [runs[0]["id"]] * 3
    assert runs[0]["server_cold_start_s"] >= 0.3
    assert [r["server_cold_start_s"] for r in runs[1:3]] == [None, None]
    for log in logs[1:3]:
        assert starts(log) == []
        assert log.read_text().startswith(f"server shared with run {runs[0]['id']}, started "
                                          f"before it; its log is {logs[0]}, from byte ")
    # the server's processes are the runs' own: the engine's child, not a runner's
    assert "the server's processes are the run's own" in extras[1]["telemetry"]
    # a group boundary: another model, another server
    (other,) = starts(logs[3])
    assert other != steady and extras[3]["server_pid"] == other
    # server_scope = "run": one per run, each a child of its runner, each cold start stored
    cold = [p for log in logs[4:] for p in starts(log)]
    assert len(set(cold)) == 3 and "server_pid" not in extras[4]
    assert all(r["server_cold_start_s"] >= 0.3 for r in runs[4:])
    assert all(gone(p) for p in (steady, other, *cold))
    # the URL each run used, never the endpoint's template: in its log's first line where
    # it is known then (a group's server started before the run), else once it is ready
    for r, extra in zip(runs, extras, strict=True):
        log = Path(r["log_path"]).read_text()
        first = log.splitlines()[0]
        assert "{" not in log and extra["endpoint"].startswith("http://127.0.0.1:"), log
        if r["model"] == "cold":
            assert "at the server fake that it starts" in first, first
            assert f"endpoint {extra['endpoint']}\n" in log, log
        else:
            assert f" at {extra['endpoint']} (pid " in first, first
    table = subprocess.run([sys.executable, "-m", "dltop", "export", "--db", str(db),
                            "--format", "md"], capture_output=True, text=True, timeout=60)
    assert "endpoint started by dltop (server fake)" in table.stdout, table.stdout
    assert "endpoint http" not in table.stdout, table.stdout
    # the environment line: 5 servers (the group of three, other's, one per cold run)
    assert len({x["endpoint"] for x in extras}) == 5
    assert "endpoints 5 servers started by dltop" in table.stdout, table.stdout


def test_a_failed_run_ends_the_groups_server_and_the_next_starts_another(
        tmp_path: Path) -> None:
    # the middle run fails (its API key variable is unset: setup_failed); same server,
    # model and devices, so one group, whose server is stopped after the failure
    body = """[[matrix]]
models = ["m"]
concurrency = 1
[[matrix]]
models = ["m"]
concurrency = 2
api_key_env = "DLTOP_TEST_UNSET_KEY"
[[matrix]]
models = ["m"]
concurrency = 3
"""
    db = tmp_path / "d.db"
    env = {k: v for k, v in ENV.items() if k != "DLTOP_TEST_UNSET_KEY"}
    res = subprocess.run(dltop(db, str(profile(tmp_path, body))), capture_output=True,
                         text=True, timeout=240, env=env)
    assert res.returncode == 1, res.stdout + res.stderr
    runs = query(db, "select id, status, server_cold_start_s, log_path from runs order by id")
    assert [r["status"] for r in runs] == ["ok", "setup_failed", "ok"]
    logs = [Path(r["log_path"]).with_name("server.log") for r in runs]
    (first,) = starts(logs[0])
    (second,) = starts(logs[2])
    assert first != second and runs[2]["server_cold_start_s"] >= 0.3
    assert "[dltop] shared server stopped (exit status -15)" in logs[0].read_text()
    assert gone(first) and gone(second)


def test_a_cancelled_campaign_and_a_killed_engine_leave_no_server(
        tmp_path: Path, wait_until: Callable[..., None],
        group_members: Callable[[int], list[int]]) -> None:
    # a slow load (1 request/s for 100 s): stopped once the server is up
    body = """[[matrix]]
models = ["m"]
iterations = 100
request_rate = 1
arrival = "constant"
concurrency = [1, 2]
"""
    path = profile(tmp_path, body)
    for n, sig in enumerate((signal.SIGINT, signal.SIGKILL)):
        db = tmp_path / f"d{n}.db"
        proc = subprocess.Popen(dltop(db, str(path)), stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True, env=ENV,
                                start_new_session=True)
        log = tmp_path / f"d{n}-runs" / "run-1" / "server.log"
        deadline = time.monotonic() + 60
        while not (log.exists() and "PORT " in log.read_text()):
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.1)
        (pid,) = starts(log)
        time.sleep(0.5)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
        assert "Traceback" not in err, err
        if sig == signal.SIGINT:
            (run,) = query(db, "select status from runs")
            assert run["status"] == "cancelled"
            assert gone(pid)
            assert "shared server stopped (exit status -15)" in log.read_text()
        else:
            # the engine died without a word: the runner's next event finds its pipe
            # closed, and it stops its server and itself (nothing it measures can be
            # stored), saying why in its log, without a traceback
            assert wait_gone(pid, 10.0), log.read_text()
            ((pgid,),) = [tuple(r.values()) for r in query(db, "select pgid from runs")]
            wait_until(lambda g=pgid: not group_members(g), 10, "the runner to stop")
            runner_log = (log.parent / "runner.log").read_text()
            assert "the engine's event pipe closed (the engine is gone); this run stops" \
                in runner_log and "Traceback" not in runner_log, runner_log
            assert "shared server stopped (exit status -15)" in log.read_text()


def test_a_shared_servers_busy_tree_is_the_runs_own_never_foreign() -> None:
    # The sampler half of the attribution: a busy process outside the run's tree, on its
    # CPU, registered as the run's shared server (as jobs.servergroup does), is counted in
    # the run's tree and subtracted from the foreign share (~100 % were it foreign).
    from tests.telemetry.test_cpu_contamination import BUSY, IDLE, spawned

    from dltop.telemetry.fake import FakeGpuBackend
    from dltop.telemetry.sampler import Sampler

    cpu = max(os.sched_getaffinity(0))
    with spawned(IDLE) as run, spawned(BUSY % cpu) as server:
        time.sleep(0.3)
        sampler = Sampler(FakeGpuBackend(0), lambda b: None, gpu_hz=10, host_hz=10)
        sampler.begin_run(1, run.pid, (), (cpu,))
        sampler.shared_roots[1] = server.pid
        proc = psutil.Process(server.pid)
        cpu0, t0 = proc.cpu_times(), time.monotonic()
        sampler.tick()
        time.sleep(0.1)
        sampler.iteration(1, time.monotonic_ns(), 0.0, warmup=True)
        while time.monotonic() - t0 < 3.0:
            sampler.tick()
            time.sleep(0.1)
        sampler.iteration(1, time.monotonic_ns(), 3.0, warmup=False)
        t = sampler.end_run(1, samples=1)
        cpu1, t1 = proc.cpu_times(), time.monotonic()
    assert t is not None and t.host_samples >= 5
    own_pct = (cpu1.user + cpu1.system - cpu0.user - cpu0.system) / (t1 - t0) * 100
    assert own_pct > 20.0
    assert t.cpu_foreign_pct is not None and t.cpu_foreign_pct < 100.0 - own_pct / 2
    assert t.contamination is None or f"pid {server.pid} " not in t.contamination


def test_a_group_server_that_exits_before_ready_is_setup_failed_with_its_log(
        tmp_path: Path) -> None:
    body = """[servers.dies]
command = "sh -c 'echo PID $$; echo cannot load the model >&2; exit 3' sh {port}"
[[matrix]]
models = ["m"]
server = "dies"
"""
    db = tmp_path / "d.db"
    res = subprocess.run(dltop(db, str(profile(tmp_path, body))), capture_output=True,
                         text=True, timeout=120, env=ENV)
    assert res.returncode == 1, res.stdout + res.stderr
    (run,) = query(db, "select status, error_kind, error_message, server_cold_start_s "
                   "from runs")
    assert (run["status"], run["error_kind"], run["server_cold_start_s"]) == (
        "setup_failed", "setup", None)
    assert run["error_message"].startswith("server command exited with status 3 before it "
                                           "was ready"), run["error_message"]
    assert run["error_message"].endswith("cannot load the model")
    # the run's one-line note (its message's last line) says what failed, and the cause
    assert ("setup_failed  — server command exited with status 3 before it was ready; "
            "server.log's last line: cannot load the model\n") in res.stdout


def test_packed_runs_of_a_group_keep_one_server_per_device_set(tmp_path: Path) -> None:
    # packed on two GPUs (simulated: FakeGpuBackend, the hardware boundary): a group's
    # runs run two at a time, each on its own GPU, so the group has two servers, one per
    # GPU, that its later runs reuse; a run of the group starting must not stop its
    # sibling on the other GPU (it did: each packed run then paid its own cold start).
    # The next group stops both.
    body = """devices = ["gpu:1"]
[[matrix]]
models = ["m"]
concurrency = [1, 2, 3, 4, 5, 6]
[[matrix]]
models = ["n"]
concurrency = [1, 2]
"""
    db = packed(tmp_path, body, gpus=2)
    runs = query(db, "select r.id, j.model, r.status, r.gpu_indices, r.server_cold_start_s, "
                 "r.log_path, r.concurrent_runs from runs r join jobs j on j.id = r.job_id "
                 "order by r.id")
    assert sorted(r["model"] for r in runs) == ["m"] * 6 + ["n"] * 2
    assert all(r["status"] == "ok" for r in runs), [
        (r["id"], r["status"], Path(r["log_path"]).read_text()[-600:])
        for r in runs if r["status"] != "ok"]
    assert {r["gpu_indices"] for r in runs} == {"0", "1"}
    assert any(r["concurrent_runs"] for r in runs)  # packed: some ran side by side
    extras = {e["run_id"]: json.loads(e["extra"]) for e in query(
        db, "select run_id, extra from environment")}
    started = {r["id"]: starts(Path(r["log_path"]).with_name("server.log")) for r in runs}
    for model in ("m", "n"):
        group = [r for r in runs if r["model"] == model]
        firsts = [r for r in group if r["server_cold_start_s"] is not None]
        # one start per GPU the group ran on, none more
        assert sorted(r["gpu_indices"] for r in firsts) == sorted(
            {r["gpu_indices"] for r in group}), group
        assert sum(len(started[r["id"]]) for r in group) == len(firsts)
        for r in group:  # each run used the server on its own GPU
            (first,) = [f for f in firsts if f["gpu_indices"] == r["gpu_indices"]]
            assert extras[r["id"]]["server_pid"] == started[first["id"]][0]
    assert all(gone(p) for pids in started.values() for p in pids)


def test_packed_cpu_runs_of_a_group_share_its_one_server_at_once(tmp_path: Path) -> None:
    # cpu:1 runs packed on two cores: the group's server is the host's, so the runs that
    # run side by side use it at once; the second waits for the first's start (it read
    # the endpoint of a server not yet ready before)
    body = """devices = ["cpu:1"]
[[matrix]]
models = ["m"]
concurrency = [1, 2, 3, 4]
"""
    db = packed(tmp_path, body, gpus=0)
    runs = query(db, "select id, status, server_cold_start_s, log_path, concurrent_runs "
                 "from runs order by id")
    assert [r["status"] for r in runs] == ["ok"] * 4, runs
    assert any(r["concurrent_runs"] for r in runs)
    firsts = [r for r in runs if r["server_cold_start_s"] is not None]
    assert len(firsts) == 1
    (pid,) = starts(Path(firsts[0]["log_path"]).with_name("server.log"))
    assert all(json.loads(e["extra"])["server_pid"] == pid
               for e in query(db, "select extra from environment"))
    assert gone(pid)


def packed(tmp: Path, body: str, gpus: int) -> Path:
    """Run ``body`` packed, in this process, on ``gpus`` simulated GPUs (FakeGpuBackend,
    the hardware boundary); the database."""
    prof = parse(profile(tmp, body).read_text(), str(tmp / "p.toml"), "p")
    db = tmp / "d.db"
    store = Store(connect(db))
    plan = campaign.preflight([prof], gpus, False)
    cid = campaign.store_plan(store, plan, ["test"])
    # runs by count: tests/conftest.py sets DLTOP_DEFAULT_MIN_TIME_S = 0 for the session
    engine = Engine(store, cid, plan.name, logs_dir=tmp / "runs", db_label="t",
                    sampler_factory=lambda cb: Sampler(FakeGpuBackend(gpus), cb, 10, 5),
                    allocator=DeviceAllocator(gpus, core_order(), pack=True))
    assert asyncio.run(engine.run()) == "finished"
    return db
