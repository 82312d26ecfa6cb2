"""The status, error-kind and control vocabularies (dltop.catalog) cover what the code uses."""

from __future__ import annotations

import ast
import asyncio
import signal
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from dltop import catalog
from dltop.catalog import (
    ACTIVE_CAMPAIGN_STATUSES,
    FAILURE_STATUSES,
    RETRYABLE_STATUSES,
    CampaignStatus,
    Control,
    ErrorKind,
    JobStatus,
    RunStatus,
    control_of,
)
from dltop.jobs import engine as engine_mod
from dltop.jobs.engine import Engine
from dltop.jobs.eventreader import classify_outcome
from dltop.store import Store, connect
from dltop.tui.format import STATUS_STYLE

SRC = Path(catalog.__file__).parent


def reader(*, error: dict[str, Any] | None = None, done: bool = False,
           measured: int = 0) -> Any:
    return SimpleNamespace(error=error, done={"event": "done"} if done else None,
                           measured=measured, extra_runner=None)


CLASSIFY_CASES = [
    (RunStatus.CANCELLED, None, reader()),
    (RunStatus.TIMEOUT, None, reader()),
    (None, 0, reader(done=True, measured=3)),
    (None, 0, reader(done=True, measured=0)),
    (None, -signal.SIGKILL, reader()),
    (None, 1, reader()),
    (None, 1, reader(done=True, measured=3)),
    (None, 3, reader(error={"kind": "never-heard-of-it"})),
    *((None, 3, reader(error={"kind": k.value})) for k in ErrorKind),
]


@pytest.mark.parametrize(("reason", "exit_code", "r"), CLASSIFY_CASES)
def test_every_status_the_supervisor_produces_is_a_member(reason: RunStatus | None,
                                                          exit_code: int | None, r: Any) -> None:
    status, _, _ = classify_outcome(reason, exit_code, r, 10.0)
    assert isinstance(status, RunStatus) and status is not RunStatus.RUNNING
    assert status in catalog.FINAL_RUN_STATUSES


def test_runner_error_kinds_map_to_their_status() -> None:
    for kind in (ErrorKind.OOM, ErrorKind.UNSUPPORTED, ErrorKind.DIVERGED):
        assert classify_outcome(None, 3, reader(error={"kind": kind.value}), 1.0)[0] == kind.value
    assert classify_outcome(None, 3, reader(error={"kind": "crash"}), 1.0)[0] is RunStatus.CRASHED


def _string_args(tree: ast.AST, func_attr: str) -> set[str]:
    """First string arguments of every ``<x>.<func_attr>("...")`` call."""
    return {n.args[0].value for n in ast.walk(tree)
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
            and n.func.attr == func_attr and n.args
            and isinstance(n.args[0], ast.Constant) and isinstance(n.args[0].value, str)}


@pytest.mark.slow  # over 1.5 s on an idle 2-core machine
def test_every_error_kind_written_anywhere_is_a_member() -> None:
    kinds: set[str] = set()
    for path in (SRC / "runners" / "child").glob("*.py"):
        tree = ast.parse(path.read_text())
        kinds |= _string_args(tree, "error")  # reporter.error("kind", message)
        for fn in ast.walk(tree):
            if isinstance(fn, ast.FunctionDef) and fn.name == "classify":
                kinds |= {n.value.value for n in ast.walk(fn) if isinstance(n, ast.Return)
                          and isinstance(n.value, ast.Constant)}
    for path in SRC.rglob("*.py"):  # {"error_kind": "..."} in the store and the engine
        for n in ast.walk(ast.parse(path.read_text())):
            if isinstance(n, ast.Dict):
                for k, v in zip(n.keys, n.values, strict=True):
                    if not (isinstance(k, ast.Constant) and k.value == "error_kind"):
                        continue
                    if isinstance(v, ast.Constant) and isinstance(v.value, str):
                        kinds.add(v.value)
                    elif (isinstance(v, ast.Attribute) and isinstance(v.value, ast.Name)
                          and v.value.id == "ErrorKind"):
                        kinds.add(ErrorKind[v.attr].value)  # KeyError: no such member
    assert {"oom", "crash", "engine_lost"} <= kinds  # the scan found them
    assert kinds <= {k.value for k in ErrorKind}, kinds - {k.value for k in ErrorKind}


def test_job_statuses_include_every_run_status() -> None:
    assert {s.value for s in RunStatus} <= {s.value for s in catalog.JOB_STATUSES}
    assert {s.value for s in JobStatus} <= {s.value for s in catalog.JOB_STATUSES}
    assert {s.value for s in RunStatus} & {s.value for s in JobStatus} == {"running"}


def test_results_name_every_status_a_cell_can_have() -> None:
    from dltop.results.aggregate import FAILURE_PRECEDENCE
    from dltop.results.table import LABELS

    in_cells = catalog.JOB_STATUSES - {RunStatus.OK, JobStatus.REMOVED}
    assert set(LABELS) == in_cells
    assert set(FAILURE_PRECEDENCE) == in_cells and len(FAILURE_PRECEDENCE) == len(in_cells)


def test_the_colour_map_covers_every_status() -> None:
    every = {*RunStatus, *JobStatus, *CampaignStatus}
    assert not [s for s in every if s not in STATUS_STYLE]
    assert set(STATUS_STYLE) == {s.value for s in every}  # and nothing else


def test_derived_sets() -> None:
    assert FAILURE_STATUSES < RETRYABLE_STATUSES <= set(catalog.FINAL_RUN_STATUSES)
    assert set(catalog.ENDED_CAMPAIGN_STATUSES) == {"finished", "cancelled", "failed"}
    assert not hasattr(engine_mod, "FAILURE_STATUSES")  # one definition only


def test_active_campaigns_are_the_ones_the_store_calls_open(tmp_path: Path) -> None:
    store = Store(connect(tmp_path / "d.db"))
    for status in CampaignStatus:
        cid = store.create_campaign(status.value, [], [], "h", 1, None)
        store.db.execute("update campaigns set status = ? where id = ?", [status, cid])
    store.db.conn.commit()
    assert {c.status for c in store.queue.open_campaigns()} == ACTIVE_CAMPAIGN_STATUSES


def test_control_values() -> None:
    assert [c.value for c in Control] == ["pause", "resume", "cancel"]  # the CLI verbs
    assert Control("run") is Control.RESUME  # stored by dltop before 0.2
    assert control_of("run") is Control.RESUME
    assert control_of(None) is None and control_of("") is None
    assert control_of("stop-the-world") is None
    with pytest.raises(ValueError):
        Control("stop-the-world")


async def test_the_engine_resumes_on_a_legacy_run_control(tmp_path: Path) -> None:
    store = Store(connect(tmp_path / "d.db"))
    cid = store.create_campaign("c", [], [], "h", 1, None)
    engine = Engine(store, cid, "c", logs_dir=tmp_path, db_label="d.db")

    async def until(cond: Any) -> bool:
        for _ in range(100):
            if cond():
                return True
            await asyncio.sleep(0.05)
        return False

    watcher = asyncio.create_task(engine._watch_control())
    try:
        store.set_control(cid, Control.PAUSE)
        assert await until(lambda: not engine._running.is_set())
        store.db.execute("update campaigns set control = 'run' where id = ?", [cid])
        store.db.conn.commit()
        assert await until(engine._running.is_set)
    finally:
        watcher.cancel()
        engine._writer.shutdown(wait=True)


def test_usage_errors_name_the_control_verbs_as_typed(capsys: pytest.CaptureFixture[str]) -> None:
    """argparse prints its choices with repr(): an enum member there read <Control.PAUSE: ...>."""
    from dltop import cli

    with pytest.raises(SystemExit) as exit_info:
        cli.main(["nope"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "'pause', 'resume', 'cancel'" in err and "Control." not in err
