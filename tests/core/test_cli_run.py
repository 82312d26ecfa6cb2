"""End to end: ``dltop run`` with real PyTorch children, a real database, the CLI's exits."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

# `slow` marks the tests that run PyTorch children; the CLI's refusals run none.

TINY = """
name = "tiny"
[defaults]
iterations = 3
warmup = 1
timeout_s = 120
[[matrix]]
frameworks = ["torch"]
models = {models}
batch_sizes = [8]
devices = {devices}
{extra}
"""


def write_profile(tmp_path: Path, models: str = '["fcn-r"]', devices: str = '["cpu:1"]',
                  extra: str = "", name: str = "p.toml") -> Path:
    path = tmp_path / name
    path.write_text(TINY.format(models=models, devices=devices, extra=extra))
    return path


def dltop(tmp_path: Path, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DLTOP_DB": str(tmp_path / "d.db")}
    return subprocess.run([sys.executable, "-m", "dltop", *args], capture_output=True,
                          text=True, env=env, timeout=timeout)


def rows(tmp_path: Path, sql: str) -> list[dict[str, Any]]:
    conn = sqlite3.connect(tmp_path / "d.db")
    conn.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in conn.execute(sql)]
    finally:
        conn.close()


@pytest.mark.slow
def test_run_stores_runs_iterations_environment_and_exports(tmp_path: Path) -> None:
    prof = write_profile(tmp_path, models='["fcn-r", "alexnet-r"]')
    res = dltop(tmp_path, "run", str(prof), "--headless")
    assert res.returncode == 0, res.stderr + res.stdout
    runs = rows(tmp_path, "select * from runs order by id")
    assert [r["status"] for r in runs] == ["ok", "ok"]
    for r in runs:
        assert r["n_iterations"] == 3 and r["median_s"] > 0 and r["samples_per_s"] > 0
        assert r["param_count"] in (14_205_962, 85_098)
        assert r["pid"] and r["pgid"] and Path(r["log_path"]).is_file()
    its = rows(tmp_path, "select * from iterations where run_id = 1 order by idx")
    assert [i["warmup"] for i in its] == [1, 0, 0, 0]
    env = rows(tmp_path, "select * from environment")
    assert len(env) == 2 and env[0]["framework_version"].startswith("2.")
    assert json.loads(env[0]["thread_env"])["OMP_NUM_THREADS"] == "1"
    assert rows(tmp_path, "select status from campaigns") == [{"status": "finished"}]
    md = dltop(tmp_path, "export", "--format", "md")
    assert md.returncode == 0, md.stderr
    assert "cpu:1" in md.stdout and "fcn-r" in md.stdout and "alexnet-r" in md.stdout
    listing = dltop(tmp_path, "runs")
    assert listing.returncode == 0 and "fcn-r" in listing.stdout


@pytest.mark.slow
def test_run_with_fake_gpus_stores_labelled_telemetry(tmp_path: Path) -> None:
    res = dltop(tmp_path, "run", str(write_profile(tmp_path)), "--fake-gpus", "2",
                "--gpu-hz", "20", "--host-hz", "20", "--headless")
    assert res.returncode == 0, res.stderr
    (run,) = rows(tmp_path, "select * from runs")
    assert run["host_cpu_mean_pct"] is not None and run["rss_peak_bytes"] > 10_000_000
    assert run["sampler_achieved_hz"] > 5
    assert run["gpu_util_mean_pct"] is None  # a CPU run owns no GPU
    # The summary covers the measured window: end of warm-up to end of the last step.
    its = rows(tmp_path, "select * from iterations order by idx")
    measured = sum(i["seconds"] for i in its if not i["warmup"])
    assert measured * 0.99 <= run["window_s"] < measured + 1.0
    assert run["telemetry_note"] is None
    # pinned to a CPU (cpu:1): its foreign use was measured over the window
    assert run["cpu_affinity"] and run["cpu_foreign_pct"] is not None
    started = datetime.fromisoformat(run["started_at"].replace("Z", "+00:00")).timestamp()
    ends = [i["t_wall_s"] for i in its]
    assert started < ends[0] < ends[-1] < started + run["wall_s"] + 5
    assert [i["t_mono_ns"] for i in its] == sorted(i["t_mono_ns"] for i in its)
    host_wall = [h["t_wall_s"] for h in rows(tmp_path, "select t_wall_s from host_samples")]
    assert host_wall and all(started - 60 < t < ends[-1] + 60 for t in host_wall)
    sims = rows(tmp_path, "select distinct simulated, gpu_index from gpu_samples")
    assert {(s["simulated"], s["gpu_index"]) for s in sims} == {(1, 0), (1, 1)}
    assert "SIMULATED" in dltop(tmp_path, "export").stdout
    # The host's user/system/iowait split over the same window: shares of all CPUs' time.
    split = (run["host_cpu_user_pct"], run["host_cpu_system_pct"], run["host_cpu_iowait_pct"])
    assert all(v is not None and v >= 0.0 for v in split) and split[0] > 0.0
    assert sum(split) <= 100.0 + 1e-6
    # Three tiny steps: a window far under a second holds too few host readings for a CPU
    # figure, so the export says so with the window and the count (not a number from one).
    cpu = dltop(tmp_path, "export", "--metric", "cpu").stdout
    assert run["window_s"] < 1.0 and run["host_readings"] is not None
    assert (f"n/a: window {run['window_s']:.2g} s, {run['host_readings']} reading"
            f"{'' if run['host_readings'] == 1 else 's'} (set min_time_s)") in cpu
    assert "(host us" not in cpu
    # A CPU run with simulated GPUs present records no driver: the caption says why.
    assert rows(tmp_path, "select driver_version from environment") == [
        {"driver_version": None}]
    assert "; driver n/a (no GPU);" in cpu


@pytest.mark.slow
def test_json_events_are_one_object_per_line(tmp_path: Path) -> None:
    res = dltop(tmp_path, "run", str(write_profile(tmp_path)), "--json")
    assert res.returncode == 0, res.stderr
    events = [json.loads(line) for line in res.stdout.splitlines()]
    kinds = [e["event"] for e in events]
    assert kinds[0] == "campaign_started" and kinds[-1] == "campaign_finished"
    assert kinds.count("iteration") == 4
    finished = next(e for e in events if e["event"] == "run_finished")
    assert finished["status"] == "ok" and finished["median_s"] > 0


@pytest.mark.slow
@pytest.mark.parametrize("inject,status", [("nan", "diverged"), ("crash", "crashed"),
                                           ("oom", "oom")])
def test_failures_are_classified(tmp_path: Path, inject: str, status: str) -> None:
    prof = write_profile(tmp_path, extra=f'inject = "{inject}"')
    res = dltop(tmp_path, "run", str(prof), "--headless")
    assert res.returncode == (0 if status == "oom" else 1), res.stderr + res.stdout
    (run,) = rows(tmp_path, "select * from runs")
    assert run["status"] == status
    if status == "crashed":
        assert run["log_tail"] is not None
        assert "without a 'done' event" in run["error_message"]
    md = dltop(tmp_path, "export", "--format", "csv").stdout
    assert {"diverged": "diverged", "crashed": "failed", "oom": "OOM"}[status] in md


@pytest.mark.slow
def test_timeout_kills_the_runner_group(tmp_path: Path, group_members: Any) -> None:
    prof = write_profile(tmp_path, extra='inject = "hang"\ntimeout_s = 8')
    res = dltop(tmp_path, "run", str(prof), "--headless")
    assert res.returncode == 1
    (run,) = rows(tmp_path, "select * from runs")
    assert run["status"] == "timeout"
    assert not group_members(run["pgid"])


@pytest.mark.slow
def test_ctrl_c_cancels_cleanly(tmp_path: Path, group_members: Any) -> None:
    prof = write_profile(tmp_path, models='["fcn-r", "alexnet-r"]',
                         extra='inject = "hang"\ntimeout_s = 600')
    env = {**os.environ, "DLTOP_DB": str(tmp_path / "d.db")}
    proc = subprocess.Popen([sys.executable, "-m", "dltop", "run", str(prof), "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None
    deadline = time.monotonic() + 120
    for line in proc.stdout:
        if json.loads(line)["event"] == "iteration":
            break
        assert time.monotonic() < deadline
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=60) == 130
    runs = rows(tmp_path, "select * from runs")
    assert [(r["status"], r["error_message"]) for r in runs] == [
        ("cancelled", "cancelled by Ctrl-C (SIGINT)")]
    jobs = rows(tmp_path, "select status from jobs order by position")
    assert [j["status"] for j in jobs] == ["cancelled", "cancelled"]
    assert rows(tmp_path, "select status from campaigns") == [{"status": "cancelled"}]
    assert not group_members(runs[0]["pgid"])
    # `--resume` would queue both jobs again (tests/core/test_resume.py); a campaign of
    # another name after it leaves this one to `--campaign`, which the refusal names,
    # writing nothing
    before = hashlib.sha256((tmp_path / "d.db").read_bytes()).hexdigest()
    res = dltop(tmp_path, "run", "--resume", "--campaign", "7")
    assert res.returncode == 2 and "there is no campaign 7 to resume" in res.stderr
    assert hashlib.sha256((tmp_path / "d.db").read_bytes()).hexdigest() == before


@pytest.mark.slow
def test_bad_profile_exits_2_and_leaves_db_untouched(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[[matrix]]\nframeworks = ["torch"]\nmodels = ["fcn-x"]\n'
                   'batch_sizes = [8]\ndevices = ["cpu:1"]\n')
    res = dltop(tmp_path, "run", str(bad))
    assert res.returncode == 2
    assert "bad.toml: matrix[0].models[0]" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "d.db").exists()
    assert dltop(tmp_path, "run", str(write_profile(tmp_path))).returncode == 0
    before = hashlib.sha256((tmp_path / "d.db").read_bytes()).hexdigest()
    assert dltop(tmp_path, "run", str(bad)).returncode == 2
    assert dltop(tmp_path, "run", str(tmp_path / "missing.toml")).returncode == 2
    assert hashlib.sha256((tmp_path / "d.db").read_bytes()).hexdigest() == before


def test_a_job_that_cannot_run_names_its_profile_file(tmp_path: Path) -> None:
    # Two profiles in one campaign: the missing data_dir is the second's, and says so.
    good = write_profile(tmp_path)
    bad = write_profile(tmp_path, extra='data = "real"\ndata_dir = "/nonexistent/mnist"',
                        name="paper-mnist.toml")
    res = dltop(tmp_path, "run", str(good), str(bad))
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert f"  {bad}: data_dir /nonexistent/mnist does not exist" in res.stderr
    assert not (tmp_path / "d.db").exists()


@pytest.mark.slow
def test_gpu_jobs_refused_without_gpus_or_skipped_on_request(tmp_path: Path) -> None:
    prof = write_profile(tmp_path, devices='["cpu:1", "gpu:2"]')
    res = dltop(tmp_path, "run", str(prof))
    assert res.returncode == 2
    assert "gpu:2 needs 2 GPU(s); this host has 0" in res.stderr
    assert "--fake-gpus" not in res.stderr
    # simulated GPUs feed the telemetry only: said, where "this host has 0" puzzled
    res = dltop(tmp_path, "run", str(prof), "--fake-gpus", "2")
    assert res.returncode == 2 and "this host has 0" in res.stderr
    assert "--fake-gpus simulates GPUs for the telemetry only" in res.stderr
    assert not (tmp_path / "d.db").exists()
    res = dltop(tmp_path, "run", str(prof), "--skip-unavailable", "--headless")
    assert res.returncode == 0, res.stderr
    statuses = [r["status"] for r in rows(tmp_path, "select status from runs order by id")]
    assert sorted(statuses) == ["ok", "unsatisfiable"]
    csv = dltop(tmp_path, "export", "--format", "csv").stdout
    assert "n/a" in csv


def test_unwritable_db_path_is_a_clear_error(tmp_path: Path) -> None:
    # A one-job profile, not `quick`: were the check to regress, the run would stay short.
    prof = write_profile(tmp_path)
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    db = ro / "sub" / "x.db"
    if os.geteuid() == 0:
        # root ignores directory permissions; a path under a regular file fails for anyone
        (tmp_path / "file").write_text("")
        db = tmp_path / "file" / "x.db"
    try:
        res = subprocess.run([sys.executable, "-m", "dltop", "run", str(prof), "--db", str(db)],
                             capture_output=True, text=True, timeout=120)
    finally:
        ro.chmod(0o700)
    assert res.returncode == 2
    assert "cannot create the database directory" in res.stderr
    assert "Traceback" not in res.stderr
    assert not list(tmp_path.rglob("*.db"))  # nothing was run, nothing stored


def test_export_errors_are_clear(tmp_path: Path) -> None:
    res = dltop(tmp_path, "export")
    assert res.returncode == 2 and "no such database" in res.stderr
    (tmp_path / "d.db").write_text("this is not sqlite, just text" * 100)
    res = dltop(tmp_path, "export")
    assert res.returncode == 2 and "not" in res.stderr and "Traceback" not in res.stderr


def test_profiles_listing_and_show(tmp_path: Path) -> None:
    res = dltop(tmp_path, "profiles")
    assert res.returncode == 0
    for name in ("quick", "dlbench-cpu", "dlbench-gpu", "dlbench-scaling"):
        assert name in res.stdout
    show = dltop(tmp_path, "profiles", "show", "quick")
    assert show.returncode == 0 and show.stdout.count("torch") == 4


def test_output_into_a_closed_pipe_is_no_traceback(tmp_path: Path) -> None:
    prof = tmp_path / "big.toml"  # ~2 000 rows: more than a pipe buffer holds
    prof.write_text('pack = true\n[[matrix]]\nframeworks=["torch"]\nmodels=["fcn-r"]\n'
                    'batch_sizes=[8]\ndevices=["cpu:1"]\nrepeats=2000\n')
    proc = subprocess.Popen([sys.executable, "-m", "dltop", "profiles", "show", "--all",
                             str(prof)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()
    proc.stdout.close()  # like `| head -1`
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == 141 and "Traceback" not in err, err
    assert first.startswith("# big")
    full = dltop(tmp_path, "profiles", "show", str(prof))
    assert "2000 jobs; packed on disjoint devices" in full.stdout
