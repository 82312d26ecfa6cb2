"""A profile that could not be stored says so (issue 30 item 6, the H200 run's finding):
long kernel names pass, a refused profile event and a failed write are named in the run's
note, and ``export --table profile`` repeats the note instead of "profiling not set"."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import pytest

from dltop.catalog import OPERATOR_PROFILE, PROFILE_NOT_STORED
from dltop.errors import UserError
from dltop.jobs.collector import protocol_note
from dltop.jobs.eventreader import MAX_EVENT_LINE_BYTES, EventReader
from dltop.jobs.protocol_evals import MAX_OP_NAME
from dltop.jobs.supervisor import ChildOutcome
from dltop.jobs.writes import ITERATION_ROWS, RunWrites
from dltop.results.profile import profile_table, short_op_name
from dltop.store import Store
from dltop.store.guard import StorageError

from .conftest import campaign


def _profile_line(name: str, pad: int = 0) -> bytes:
    op = {"name": name, "calls": 1, "self_cpu_ms": 1.0, "self_device_ms": 0.5,
          "total_ms": 1.0, "shapes": "x" * pad or None}
    # the event's name last, as the child's dltop_protocol writes it
    return (json.dumps({"steps": 5, "step_ms": 2.0, "device": "cuda", "ops": [op],
                        "v": 1, "event": "profile"}) + "\n").encode()


def _read(*lines: bytes) -> tuple[EventReader, list[dict[str, Any]]]:
    got: list[dict[str, Any]] = []
    reader = EventReader(got.append)
    for line in lines:
        for at in range(0, len(line), 1 << 16):  # as the pipe delivers it
            reader.feed(line[at:at + (1 << 16)])
    reader.finish()
    return reader, got


def test_a_2000_character_kernel_name_passes_and_a_refused_profile_is_named() -> None:
    kernel = "void cutlass::Kernel2<" + "cute::C<8>, " * 165 + ">"
    assert len(kernel) > 1900
    reader, got = _read(_profile_line(kernel))
    assert reader.protocol_errors == 0 and got[0]["ops"][0]["name"] == kernel

    reader, got = _read(_profile_line("k" * (MAX_OP_NAME + 1)))
    assert got == [] and reader.profile_refused is not None
    assert "ops.0.name" in reader.profile_refused
    outcome = ChildOutcome("ok", 0, 1, 1, 0.5, protocol_errors=1,
                           protocol_note=reader.protocol_note,
                           profile_refused=reader.profile_refused)
    assert protocol_note(outcome) == \
        f"protocol error (1), first: {PROFILE_NOT_STORED}: {reader.protocol_note}"
    # a profile refused after another event's error is named apart
    later = replace(outcome, protocol_errors=2, protocol_note="iter event: seconds -1 ...")
    assert str(protocol_note(later)).endswith(
        f"first: iter event: seconds -1 ...; {PROFILE_NOT_STORED}: {reader.profile_refused}")


def test_a_profile_over_the_line_limit_is_named_and_other_long_lines_are_not() -> None:
    big = _profile_line("aten::mm", pad=2 * MAX_EVENT_LINE_BYTES)
    reader, got = _read(big, b'{"v": 1, "event": "iter", "index": 0, "seconds": 0.1}\n')
    assert reader.protocol_errors == 1 and [e["event"] for e in got] == ["iter"]
    assert reader.profile_refused is not None and "over" in reader.profile_refused
    other = (json.dumps({"x": "y" * 2 * MAX_EVENT_LINE_BYTES, "v": 1, "event": "setup"})
             + "\n").encode()
    reader, _ = _read(other)
    assert reader.protocol_errors == 1 and reader.profile_refused is None


def test_long_names_are_shortened_with_a_stable_hash() -> None:
    a, b = "k" * 300 + "A", "k" * 300 + "B"
    assert short_op_name("aten::mm") == "aten::mm"
    assert len(short_op_name(a)) == 80 and short_op_name(a) == short_op_name(a)
    assert short_op_name(a) != short_op_name(b) and short_op_name(a).startswith("k" * 60)


def test_failed_writes_are_named_by_what_they_held_and_their_error_type() -> None:
    def refuse(*_: Any) -> None:
        raise StorageError("d.db: database or disk is full")

    def bug(*_: Any) -> None:
        raise TypeError("an unwritable value")

    with ThreadPoolExecutor(1) as pool:
        writes = RunWrites(pool, "d.db")
        writes.later(refuse, 1, [{}] * 25, what=ITERATION_ROWS, count=25)
        writes.later(refuse, 1, {}, [], what=OPERATOR_PROFILE)
        writes.later(bug, 1, {})
        writes.later(lambda *_: None, 1, what=ITERATION_ROWS, count=5)  # stored: not lost
        asyncio.run(writes.settled())
    assert writes.lost[ITERATION_ROWS] == 25
    assert writes.note() == ("storage: 25 iteration rows not stored, operator profile not "
                             "stored, 1 other writes failed (d.db: database or disk is full)")
    with ThreadPoolExecutor(1) as pool:
        writes = RunWrites(pool, "d.db")
        writes.later(bug, 1, what="evaluation rows", count=1)
        writes.later(lambda: (_ for _ in ()).throw(sqlite3.IntegrityError("UNIQUE")))
        asyncio.run(writes.settled())
    assert writes.note() == ("storage: 1 evaluation rows not stored, 1 other writes failed "
                             "(TypeError: an unwritable value)")


def test_the_profile_export_says_why_there_is_no_profile(store: Store) -> None:
    cid, jobs = campaign(store, 3)
    runs = [store.start_run(j, cid, 1, "", 8) for j in jobs]
    for job in jobs[:2]:  # profile = true
        # the job's own spec, overriding its configuration's template (job_specs)
        store.db.execute("update jobs set spec_json = json_set((select spec_json from job_specs "
                         "where job_id = jobs.id), '$.op_profile', json('true')) where id = ?",
                         [job])
    store.update_run(runs[0], {"note": f"protocol error (1), first: x; {PROFILE_NOT_STORED}: "
                                       "profile event: ops.0.name 'kkk...' is not text"})
    why = []
    for run in runs:
        with pytest.raises(UserError) as err:
            profile_table(store.db, run)
        why.append(str(err.value))
    assert ("the run was profiled, but its profile could not be stored; its note says: "
            f"{PROFILE_NOT_STORED}: profile event: ops.0.name") in why[0]
    assert "profile = true, but the runner sent no operator profile" in why[1]
    assert "has no operator profile (set profile = true" in why[2]
