"""Page faults per measured step and the allocator's variables, recorded with each run.

Why: with glibc's default malloc, whether a CPU training step maps its large buffers
afresh each time (and pays the kernel's zeroing of every page) depends on the process's
allocation history: measured on alexnet-r at batch 128, 4 096 to 12 256 faults a step
and ~17 % of its time (docs/frameworks.md). The count makes it visible per run, and the
allocator variables a run was started with go into the caption so runs under different
allocators are never mixed silently.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dltop.jobs.environment import ALLOC_VARS
from dltop.jobs.protocol import EventChecker
from dltop.live.rundetail import read_run_detail
from dltop.runners.registry import CHILD_DIR
from dltop.store.reader import open_reader
from dltop.tui.rundetail_rows import telemetry_rows

FRESH_BYTES = 64 << 20
"""Above glibc's largest mmap threshold (32 MiB): every allocation is a fresh mapping."""


PROBE = """
import os, sys
sys.path.insert(0, {child!r})
import dltop_protocol, measure

class Plan:
    measured_steps = 4
    def steps(self):
        return iter(range(6))
    def is_warmup(self, step):
        return step < 2
    def eval_after(self, step):
        return False

def fresh(_i):
    block = b"x" * {size}  # malloc (a new mapping) and every page written
    return float(len(block) > 0)

kept = bytearray({size})

def reuse(_i):
    kept[:4096] = b"y" * 4096  # memory mapped before the measured steps
    return 1.0

reporter = dltop_protocol.Reporter(fd=os.open(os.devnull, os.O_WRONLY))
measure.run(fresh if sys.argv[1] == "fresh" else reuse, Plan(), reporter, 1)
print(reporter.page_faults_per_step)
"""
"""In a fresh interpreter: the allocator's state is the process's (a test process that
ran others, or a library that called ``mallopt``, could serve 64 MB from its heap)."""


def _faults_per_step(kind: str) -> float:
    code = PROBE.format(child=str(CHILD_DIR), size=FRESH_BYTES)
    env = {k: v for k, v in os.environ.items() if k not in ALLOC_VARS}
    out = subprocess.run([sys.executable, "-c", code, kind], capture_output=True, text=True,
                         env=env, timeout=60, check=True).stdout
    return float(out.strip())


@pytest.mark.slow  # two fresh interpreters
def test_a_step_that_writes_fresh_memory_counts_its_pages() -> None:
    pages = FRESH_BYTES // os.sysconf("SC_PAGE_SIZE")
    assert _faults_per_step("fresh") >= 0.95 * pages
    assert _faults_per_step("reuse") < 0.01 * pages


@pytest.mark.parametrize(("value", "ok"), [(None, True), (0, True), (12256.5, True),
                                           (-1, False), ("many", False), (True, False)])
def test_done_page_faults_are_a_count(value: Any, ok: bool) -> None:
    event = {"v": 1, "event": "done", "iterations": 3, "page_faults_per_step": value}
    problem = EventChecker().problem(event)
    assert (problem is None) == ok, problem
    if not ok:
        assert problem is not None and "page_faults_per_step" in problem


@pytest.mark.slow
def test_a_run_stores_its_faults_and_its_allocator_variables(tmp_path: Path) -> None:
    profile = tmp_path / "p.toml"
    profile.write_text('name = "alloc"\n[[matrix]]\nframeworks = ["torch"]\n'
                       'models = ["fcn-r"]\nbatch_sizes = [32]\ndevices = ["cpu:1"]\n'
                       'iterations = 4\nwarmup = 1\n')
    db = tmp_path / "a.db"
    env = {k: v for k, v in os.environ.items() if k not in ALLOC_VARS}
    env["MALLOC_MMAP_THRESHOLD_"] = str(32 << 20)
    done = subprocess.run([sys.executable, "-m", "dltop", "--db", str(db), "run",
                           str(profile)], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    conn = sqlite3.connect(db)
    faults, extra = conn.execute(
        "select r.page_faults_per_step, e.extra from runs r "
        "join environment e on e.run_id = r.id").fetchone()
    conn.close()
    assert faults is not None and faults >= 0
    detail = read_run_detail(open_reader(db), 1)
    assert detail is not None
    shown_row = [(k, v) for k, v, _ in telemetry_rows(detail) if k == "page faults"]
    assert shown_row == [("page faults", f"{faults:.0f} / measured step")]
    assert json.loads(extra)["alloc_env"] == {"MALLOC_MMAP_THRESHOLD_": str(32 << 20)}
    shown = subprocess.run([sys.executable, "-m", "dltop", "--db", str(db), "export",
                            "--format", "md"], env=env, capture_output=True, text=True,
                           timeout=120)
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert f"allocator MALLOC_MMAP_THRESHOLD_={32 << 20};" in shown.stdout
