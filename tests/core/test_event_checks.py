"""The parent's checks of runner events (jobs.protocol) and the store's lock retry (store.guard)."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest

from dltop.jobs.protocol import EventChecker
from dltop.store import connect, guard


def iter_event(**over: Any) -> dict[str, Any]:
    return {"v": 1, "event": "iter", "index": 0, "seconds": 0.01, "samples": 8,
            "warmup": False, "loss": 1.5, "t_mono_ns": 123, **over}


@pytest.mark.parametrize(("field", "value", "says"), [
    ("index", 2**70, "out of range"), ("index", -1, "index -1"), ("index", True, "index True"),
    ("index", 1.0, "index 1.0"), ("seconds", -6.24, "seconds -6.24"),
    ("seconds", float("nan"), "seconds nan"), ("seconds", 1e308, "seconds 1e+308"),
    ("seconds", 0, "seconds 0"), ("seconds", "0.1", "seconds '0.1'"),
    ("samples", 10**20, "out of range"), ("samples", 2**53, "samples 9007199254740992"),
    ("samples", 0, "samples 0"), ("loss", 10**400, "out of range"), ("loss", "x", "loss 'x'"),
    ("loss", [1], "loss [1]"), ("warmup", "yes", "warmup 'yes'"), ("t_mono_ns", -5, "t_mono_ns"),
])
def test_an_out_of_range_iteration_field_is_refused_with_its_name(
        field: str, value: Any, says: str) -> None:
    problem = EventChecker().problem(iter_event(**{field: value}))
    assert problem is not None and problem.startswith("iter event: ") and says in problem


@pytest.mark.parametrize("over", [{}, {"samples": None}, {"loss": None}, {"loss": "nan"},
                                  {"loss": "-Infinity"}, {"loss": float("inf")}, {"warmup": 1},
                                  {"t_mono_ns": None}, {"seconds": 3}])
def test_valid_iterations_pass(over: dict[str, Any]) -> None:
    assert EventChecker().problem(iter_event(**over)) is None


def test_indexes_must_increase() -> None:
    checker = EventChecker()
    assert checker.problem(iter_event(index=0)) is None
    assert checker.problem(iter_event(index=2)) is None  # a gap is allowed
    assert "index 2 repeats" in str(checker.problem(iter_event(index=2)))
    assert "index 1 repeats or goes back (after 2)" in str(checker.problem(iter_event(index=1)))
    assert checker.problem(iter_event(index=3)) is None  # refused ones do not move it


@pytest.mark.parametrize(("event", "says"), [
    ({"event": "hello", "threads": 10**20}, "threads"),
    ({"event": "hello", "threads": -1}, "threads -1"),
    ({"event": "hello", "framework_version": {"a": 1}}, "framework_version"),
    ({"event": "model", "param_count": 2**64}, "param_count"),
    ({"event": "model", "param_count": "many"}, "param_count"),
    ({"event": "model", "flops_per_sample": float("inf")}, "flops_per_sample"),
    ({"event": "error", "kind": 3}, "kind 3"),
    ({"event": "setup", "compile_s": -1.0}, "compile_s -1.0"),
    ({"event": "setup", "capture_s": float("nan")}, "capture_s nan"),
    ({"event": "setup", "compile_s": "12"}, "compile_s '12'"),
    ({"event": "setup", "backend": {"inductor": 1}}, "backend"),
    ({"event": "done", "iterations": 2**63}, "iterations"),
    ({"event": "future", "nested": [{"x": -(2**64)}]}, "nested.0.x"),
])
def test_other_events_are_checked_too(event: dict[str, Any], says: str) -> None:
    problem = EventChecker().problem({"v": 1, **event})
    assert problem is not None and says in problem


def test_a_setup_event_with_its_seconds_passes() -> None:
    assert EventChecker().problem({"v": 1, "event": "setup", "compile_s": 12.5,
                                   "capture_s": 0, "backend": "inductor"}) is None


@pytest.mark.slow  # waits a held lock out: over 1 s
def test_a_lock_is_waited_out_and_a_permanent_error_named(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    db = connect(tmp_path / "d.db")
    db.conn.execute("pragma busy_timeout = 50")  # the real one is 30 s
    other = sqlite3.connect(tmp_path / "d.db", isolation_level=None, check_same_thread=False)
    other.execute("begin immediate")
    released = threading.Event()

    def release() -> None:
        other.execute("rollback")
        released.set()

    threading.Timer(0.5, release).start()
    guard.call("d.db", db.execute, "insert into schema_migrations values (77, 'x', 'y')")
    assert released.is_set()  # it waited for the lock rather than failing
    other.execute("begin immediate")
    monkeypatch.setattr(guard, "RETRY_BUDGET_S", 0.3)
    with pytest.raises(guard.StorageError, match=r"^d\.db: database is locked$"):
        guard.call("d.db", db.execute, "insert into schema_migrations values (78, 'x', 'y')")
    other.execute("rollback")
    with pytest.raises(guard.StorageError, match=r"^d\.db: no such table: nope$"):
        guard.call("d.db", db.execute, "select * from nope")


@pytest.mark.parametrize(("peak", "ok"), [(None, True), (0, True), (80 << 30, True),
                                          (-1, False), (1.5, False), ("8G", False),
                                          (True, False)])
def test_done_gpu_memory_peak_is_a_byte_count(peak: Any, ok: bool) -> None:
    event = {"v": 1, "event": "done", "iterations": 3, "gpu_mem_peak_bytes": peak}
    problem = EventChecker().problem(event)
    assert (problem is None) == ok, problem
    if not ok:
        assert problem is not None and "gpu_mem_peak_bytes" in problem


@pytest.mark.parametrize(("event", "why"), [
    ({"start_mono_ns": 5, "end_mono_ns": 9}, None),
    ({"start_mono_ns": 9, "end_mono_ns": 5}, "start_mono_ns 9 and end_mono_ns 5 are not"),
    ({"start_mono_ns": -1, "end_mono_ns": 5}, "start_mono_ns -1"),
    ({"start_mono_ns": 1.5, "end_mono_ns": 5}, "start_mono_ns 1.5"),
    ({"end_mono_ns": 5}, "start_mono_ns None"),
])
def test_an_idle_event_gives_the_wait_before_the_load(event: dict[str, Any],
                                                       why: str | None) -> None:
    got = EventChecker().problem({"v": 1, "event": "idle", **event})
    assert got == why if why is None else got is not None and got.startswith(f"idle event: {why}")
