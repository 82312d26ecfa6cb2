"""Exit 2 means bad input found before anything was written; later failures end a run."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from dltop import cli, envsetup
from dltop.errors import DltopError, SetupError, UserError
from dltop.jobs import campaign
from dltop.jobs.collector import IterationCollector, run_fields
from dltop.jobs.engine import Engine
from dltop.jobs.start import EngineDidNotStart
from dltop.jobs.supervisor import ChildOutcome
from dltop.profiles.loader import parse
from dltop.store import Store, connect

PROFILE = f"""
[[matrix]]
frameworks = ["command"]
models = ["a", "b"]
batch_sizes = [8]
devices = ["cpu:1"]
warmup = 1
iterations = 3
timeout_s = 60
command = {json.dumps([sys.executable, "-c", "pass"])}
"""


def test_the_hierarchy_and_exit_codes() -> None:
    assert issubclass(UserError, DltopError) and UserError.exit_code == 2
    assert issubclass(SetupError, DltopError) and SetupError.exit_code == 1
    assert issubclass(EngineDidNotStart, SetupError)
    assert not issubclass(SetupError, UserError)  # a failed pip is not bad input


def test_a_config_file_broken_mid_campaign_crashes_the_runs_not_the_engine(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "config.toml"
    monkeypatch.setenv("DLTOP_CONFIG", str(config))
    monkeypatch.delenv("DLTOP_PYTHON_COMMAND", raising=False)
    store = Store(connect(tmp_path / "d.db"))
    plan = campaign.preflight([parse(PROFILE, "p.toml", "p")], 0, False)  # config fine
    cid = campaign.store_plan(store, plan, ["dltop", "run", "p.toml"])
    config.write_text("[frameworks.torch\npython = ")  # edited while the campaign runs
    engine = Engine(store, cid, plan.name, logs_dir=tmp_path / "runs", db_label="t")
    assert asyncio.run(engine.run()) == "finished"  # before: UserError, campaign 'running'
    assert engine.counts == {"crashed": 2}  # the first failure did not stop the queue
    runs = list(store.db.query("select status, error_kind, error_message from runs"))
    assert [(r["status"], r["error_kind"]) for r in runs] == [("crashed", "interpreter")] * 2
    assert all(str(config) in r["error_message"] and "TOML" in r["error_message"]
               for r in runs)
    camp = store.db["campaigns"].get(cid)
    assert camp["status"] == "finished"
    jobs = [j["status"] for j in store.db.query("select status from jobs")]
    assert jobs == ["crashed", "crashed"]


def test_a_failed_pip_exits_1_with_one_message_and_no_traceback(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    def failing_setup(prefix: Path, python: str | None) -> None:
        envsetup._run([sys.executable, "-c", "import sys; sys.exit(3)"], "pip install")

    monkeypatch.setattr(envsetup, "setup_cntk", failing_setup)
    assert cli.main(["env", "setup", "cntk", "--prefix", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("dltop: error: pip install failed (exit 3)")
    assert "Traceback" not in err


def test_bad_input_still_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["run"]) == 2
    assert capsys.readouterr().err == ("dltop: error: dltop run needs at least one PROFILE "
                                       "(or --resume)\n")



def _stored_run(tmp_path: Path, outcome: ChildOutcome) -> dict[str, Any]:
    """The ``runs`` row of a run that ended with ``outcome``, stored as the engine does."""
    store = Store(connect(tmp_path / "d.db"))
    plan = campaign.preflight([parse(PROFILE, "p.toml", "p")], 0, False)
    cid, queued = campaign.create(store, plan, ["dltop", "run", "p.toml"])
    job = queued[0]
    run_id = store.start_run(job.job_id, cid, 1, "", 8)
    collector = IterationCollector(run_id, job.spec, lambda e: None, store,
                                   lambda *a, **_: None)
    store.finish_run(run_id, job.job_id, "ok", run_fields(outcome, collector))
    return dict(store.db["runs"].get(run_id))


def test_protocol_errors_are_stored_with_the_run(tmp_path: Path) -> None:
    # What the supervisor counted for a child that wrote two undecodable event lines
    # (tests/core/test_supervisor.py checks the counting against a real child).
    outcome = ChildOutcome("ok", 0, 1, 1, 0.5, protocol_errors=2)
    assert _stored_run(tmp_path, outcome)["protocol_errors"] == 2


def test_kernel_and_framework_memory_peaks_are_stored_with_the_run(tmp_path: Path) -> None:
    outcome = ChildOutcome("ok", 0, 1, 1, 0.5, rss_peak_kernel_bytes=700 << 20,
                           done={"v": 1, "event": "done", "gpu_mem_peak_bytes": 9 << 30})
    row = _stored_run(tmp_path, outcome)
    assert (row["rss_peak_kernel_bytes"], row["gpu_mem_framework_peak_bytes"]) == (
        700 << 20, 9 << 30)


@pytest.mark.slow  # over 1.5 s on an idle 2-core machine
def test_a_slow_interpreter_probe_does_not_block_the_event_loop(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # An interpreter that takes seconds to start (a cold NFS home, a conda shim): after
    # --resume nothing probed it yet, so the engine probes it when the run starts.
    slow = tmp_path / "slow-python"
    # 3 s against a bound of 1.5: a loaded 2-core machine stalls a loop 0.7 s anyway
    slow.write_text(f'#!/bin/sh\nsleep 3\nexec "{sys.executable}" "$@"\n')
    slow.chmod(0o755)
    store = Store(connect(tmp_path / "d.db"))
    text = PROFILE.replace('models = ["a", "b"]', 'models = ["a"]')
    plan = campaign.preflight([parse(text, "p.toml", "p")], 0, False)
    cid = campaign.store_plan(store, plan, ["dltop", "run", "p.toml"])
    monkeypatch.setenv("DLTOP_PYTHON_COMMAND", str(slow))
    engine = Engine(store, cid, plan.name, logs_dir=tmp_path / "runs", db_label="t")

    async def go() -> float:
        loop = asyncio.get_running_loop()
        run = asyncio.create_task(engine.run())
        worst, last = 0.0, loop.time()
        while not run.done():
            await asyncio.sleep(0.02)
            worst, last = max(worst, loop.time() - last), loop.time()
        await run
        return worst

    assert asyncio.run(go()) < 1.5  # before: the probe held the loop for its 3 s
    assert store.db["runs"].count == 1
