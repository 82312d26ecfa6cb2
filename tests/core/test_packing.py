"""Device allocation and opt-in packing: disjoint devices, real processes, stored state."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from dltop.errors import UserError
from dltop.jobs import campaign
from dltop.jobs.allocator import Allocation, DeviceAllocator, Room
from dltop.jobs.engine import Engine
from dltop.jobs.environment import core_order
from dltop.jobs.resume import resume
from dltop.profiles.device import DeviceSpec
from dltop.profiles.loader import parse
from dltop.store import Store, connect
from dltop.telemetry.fake import FakeGpuBackend
from dltop.telemetry.sampler import Sampler

# A program that says which devices it was given and when it ran. Given a directory
# (argv[4]) it first waits there, bounded, for a second run to start: runs that really
# run side by side then overlap however slowly the loaded machine starts them.
RECORDER = """
import json, os, signal, sys, time
from dltop_report import step
if len(sys.argv) > 4:
    open(os.path.join(sys.argv[4], str(os.getpid())), "w").close()
    end = time.time() + 30
    while len(os.listdir(sys.argv[4])) < 2 and time.time() < end:
        time.sleep(0.05)
t0 = time.time()
def record(*_):
    # at the program's end, or when dltop stops it (TERM) once it has every step
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    with open(sys.argv[1], "a") as f:
        f.write(json.dumps({"device": sys.argv[3], "t0": t0,
                            "t1": time.time(),
                            "cvd": os.environ.get("CUDA_VISIBLE_DEVICES"),
                            "affinity": sorted(os.sched_getaffinity(0))}) + "\\n")
    os._exit(0)
signal.signal(signal.SIGTERM, record)
for _ in range(int(sys.argv[2])):
    with step(samples=8) as s:
        time.sleep(0.1)
        s.loss = 1.0
record()
"""


def job(device: str) -> DeviceSpec:
    return DeviceSpec.parse(device)


# allocator ---------------------------------------------------------------------------
def test_without_packing_one_run_at_a_time_on_the_first_devices() -> None:
    a = DeviceAllocator(4, (0, 1, 2, 3), pack=False)
    got = a.try_allocate(job("gpu:2"))
    assert got is not None and got[1].gpu_indices == (0, 1) and got[1].cpu_affinity is None
    assert a.try_allocate(job("gpu:1")) is None  # two GPUs are free, but no packing
    a.release(got[0])
    cpu = a.try_allocate(job("cpu:3"))
    assert cpu is not None and cpu[1].cpu_affinity == (0, 1, 2) and cpu[1].gpu_indices == ()


def test_packing_hands_out_disjoint_sets_lowest_first() -> None:
    a = DeviceAllocator(4, (0, 2, 1, 3), pack=True)
    g2 = a.try_allocate(job("gpu:2"))
    g1 = a.try_allocate(job("gpu:1"))
    assert g2 is not None and g1 is not None
    assert g2[1].gpu_indices == (0, 1) and g1[1].gpu_indices == (2,)
    assert a.try_allocate(job("gpu:2")) is None  # only GPU 3 is free
    c2 = a.try_allocate(job("cpus:2"))  # GPU jobs hold no cores; CPU order is kept
    assert c2 is not None and c2[1].cpu_affinity == (0, 2)
    c1 = a.try_allocate(job("cpu:1"))
    assert c1 is not None and c1[1].cpu_affinity == (1,)
    assert a.try_allocate(job("cpu:2")) is None
    assert a.active == 4 and a.overlap(g2[0]) == 3 and a.overlap(c1[0]) == 3
    a.release(g2[0])
    again = a.try_allocate(job("gpu:2"))
    assert again is not None and again[1].gpu_indices == (0, 1)
    assert a.overlap(again[0]) == 3 and a.overlap(c1[0]) == 3  # the most seen, not now
    a.release(g2[0])  # releasing twice is harmless
    assert a.active == 4


def test_a_job_wider_than_the_host_runs_alone() -> None:
    a = DeviceAllocator(2, (0, 1), pack=True)
    small = a.try_allocate(job("cpu:1"))
    assert small is not None
    assert a.try_allocate(job("cpu:4")) is None  # needs the whole host: waits
    assert a.try_allocate(job("gpu:4")) is None
    a.release(small[0])
    wide = a.try_allocate(job("cpu:4"))
    assert wide is not None and wide[1].exclusive and wide[1].cpu_affinity is None
    assert a.try_allocate(job("gpu:1")) is None  # nothing starts beside it
    a.release(wide[0])
    too_many = a.try_allocate(job("gpu:4"))  # the runner says why; the queue does not stall
    assert too_many is not None and too_many[1].gpu_indices == (0, 1)


# profiles ----------------------------------------------------------------------------
ONE = '[[matrix]]\nframeworks=["torch"]\nmodels=["fcn-r"]\nbatch_sizes=[8]\ndevices=["cpu:1"]\n'


def test_a_run_rebound_to_what_its_lease_got_keeps_the_room_right() -> None:
    a = DeviceAllocator(0, (0, 1, 2), pack=True)
    t1, c1 = a.try_allocate(job("cpu:1")) or (0, None)
    t2, c2 = a.try_allocate(job("cpu:1")) or (0, None)
    assert (c1, c2) == (Allocation((), (0,)), Allocation((), (1,)))
    # t1's lease got cpu 1 (another engine held 0): t2, still waiting, is meant for 0
    assert a.rebind(t1, Allocation((), (1,))) == Allocation((), (1,))
    assert a.room() == Room(0, 1)
    t3, c3 = a.try_allocate(job("cpu:1")) or (0, None)
    assert c3 == Allocation((), (2,)) and a.room() == Room(0, 0)
    a.release(t1)
    assert a.try_allocate(job("cpu:1")) == (4, Allocation((), (1,)))
    assert t2 and t3


def test_pack_key_is_validated_and_campaign_packs_only_if_every_profile_asks() -> None:
    with pytest.raises(UserError, match=r"p\.toml: pack: expected true or false, got 'yes'"):
        parse('pack = "yes"\n' + ONE, "p.toml", "p")
    packed = parse("pack = true\n" + ONE, "a.toml", "a")
    plain = parse(ONE, "b.toml", "b")
    assert packed.pack and not plain.pack
    assert campaign.preflight([packed], 0, False).pack
    assert not campaign.preflight([packed, plain], 0, False).pack
    assert campaign.preflight([plain], 0, False, pack=True).pack


def test_resume_keeps_the_campaigns_packing(tmp_path: Path) -> None:
    store = Store(connect(tmp_path / "d.db"))
    plan = campaign.preflight([parse("pack = true\n" + ONE, "a.toml", "a")], 0, False)
    cid, _ = campaign.create(store, plan, ["dltop"])
    store.db["campaigns"].update(cid, {"engine_pid": None})
    assert resume(store, cid).pack


# the engine with real processes --------------------------------------------------------
def records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def overlapping(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return bool(a["t0"] < b["t1"] and b["t0"] < a["t1"])


def recorder_profile(tmp_path: Path, devices: list[str], models: list[str],
                     barrier: bool = False) -> str:
    script = tmp_path / "rec.py"
    script.write_text(RECORDER)
    out = tmp_path / "seen.jsonl"
    argv = [sys.executable, str(script), str(out), "{total}", "{device}"]
    if barrier:
        (tmp_path / "barrier").mkdir()
        argv.append(str(tmp_path / "barrier"))
    command = json.dumps(argv)
    return (f'[[matrix]]\nframeworks=["command"]\nmodels={json.dumps(models)}\n'
            f'batch_sizes=[8]\ndevices={json.dumps(devices)}\nwarmup=1\niterations=8\n'
            f'timeout_s=60\ncommand={command}\n')


@pytest.mark.slow
def test_packed_gpu_runs_never_share_a_gpu(tmp_path: Path) -> None:
    # Hardware boundary: this host has no GPU, so the allocator is told of 4 and the
    # sampler reads 4 simulated ones. The runs are real processes (a `command` job
    # that records CUDA_VISIBLE_DEVICES), so everything above the hardware is real.
    prof = parse(recorder_profile(tmp_path, ["gpu:2", "gpu:1"], ["a", "b", "c"]),
                 "gpu.toml", "gpu")
    store = Store(connect(tmp_path / "d.db"))
    plan = campaign.preflight([prof], 4, False, pack=True)
    cid = campaign.store_plan(store, plan, ["test"])
    engine = Engine(store, cid, plan.name, logs_dir=tmp_path / "runs", db_label="t",
                    sampler_factory=lambda cb: Sampler(FakeGpuBackend(4), cb, 10, 2),
                    allocator=DeviceAllocator(4, core_order(), pack=True))
    assert asyncio.run(engine.run()) == "finished"
    seen = records(tmp_path / "seen.jsonl")
    assert len(seen) == 6
    for r in seen:
        gpus = r["cvd"].split(",")
        assert len(gpus) == int(r["device"].split(":")[1]) and len(set(gpus)) == len(gpus)
    for a, b in itertools.combinations(seen, 2):
        if overlapping(a, b):
            assert not set(a["cvd"].split(",")) & set(b["cvd"].split(",")), (a, b)
    assert max(sum(overlapping(a, b) for b in seen if b is not a) for a in seen) >= 1
    conn = sqlite3.connect(tmp_path / "d.db")
    rows = conn.execute("select status, gpu_indices, concurrent_runs, telemetry_simulated, "
                        "gpu_util_mean_pct from runs order by id").fetchall()
    assert [r[0] for r in rows] == ["ok"] * 6
    assert sorted(r[1] for r in rows) == sorted(r["cvd"] for r in seen)
    assert max(r[2] for r in rows) >= 1
    assert all(r[3] == 1 and r[4] is not None for r in rows)
    conn.close()


def run_cli(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    prof = tmp_path / "p.toml"
    prof.write_text(recorder_profile(tmp_path, ["cpu:1"], ["a", "b"], barrier="--pack" in extra))
    return subprocess.run([sys.executable, "-m", "dltop", "run", str(prof), "--db",
                           str(tmp_path / "d.db"), "--headless", "--no-telemetry", *extra],
                          capture_output=True, text=True, timeout=120)


@pytest.mark.slow
@pytest.mark.skipif(len(core_order()) < 2, reason="packing CPU runs needs 2 usable CPUs")
def test_dltop_run_pack_runs_cpu_jobs_side_by_side_on_their_own_cores(
        tmp_path: Path, other_runners: Any) -> None:
    with other_runners(tmp_path) as others:
        res = run_cli(tmp_path, "--pack")
    assert res.returncode == 0, res.stderr
    a, b = records(tmp_path / "seen.jsonl")
    assert overlapping(a, b)
    assert len(a["affinity"]) == len(b["affinity"]) == 1 and a["affinity"] != b["affinity"]
    conn = sqlite3.connect(tmp_path / "d.db")
    assert conn.execute("select pack from campaigns").fetchone() == (1,)
    rows = conn.execute("select status, cpu_affinity, concurrent_runs from runs").fetchall()
    conn.close()
    assert sorted(r[:2] for r in rows) == sorted([("ok", str(a["affinity"][0])),
                                                  ("ok", str(b["affinity"][0]))])
    # Another engine's runner on the host (a shared machine) rightly counts too.
    assert all(r[2] == 1 if not others else r[2] >= 1 for r in rows), (rows, others)


@pytest.mark.slow
def test_dltop_run_without_pack_runs_one_at_a_time(tmp_path: Path, other_runners: Any) -> None:
    with other_runners(tmp_path) as others:
        res = run_cli(tmp_path)
    assert res.returncode == 0, res.stderr
    a, b = records(tmp_path / "seen.jsonl")
    assert not overlapping(a, b)
    assert a["affinity"] == b["affinity"] == [core_order()[0]]
    conn = sqlite3.connect(tmp_path / "d.db")
    most, pack = conn.execute("select max(concurrent_runs), max(pack) from runs, campaigns"
                              ).fetchone()
    assert pack == 0 and (most == 0 or others), (most, others)
    conn.close()


# faults while packed runs are going on -------------------------------------------------
# A runner whose engine died ends at its next event (its write finds the pipe closed),
# so a step that has not ended keeps it alive: from the 5th on, a step takes 60 s (none when
# resumed).
LONG = """
import os, sys, time
from dltop_report import step
fast = bool(os.environ.get("RECORDER_FAST"))
for i in range(600):  # warm-up + iterations: fewer would end the run short
    with step(samples=8) as s:
        time.sleep(0.0 if fast else 60.0 if i >= 4 else 0.1)
        s.loss = 1.0
"""


def start_packed(tmp_path: Path, *extra: str) -> tuple[subprocess.Popen[str], list[int]]:
    """A packed campaign of two long cpu:1 runs; returns once both report iterations."""
    script = tmp_path / "long.py"
    script.write_text(LONG)
    prof = tmp_path / "p.toml"
    prof.write_text('pack = true\n[[matrix]]\nframeworks=["command"]\nmodels=["a","b"]\n'
                    'batch_sizes=[8]\ndevices=["cpu:1"]\nwarmup=1\niterations=599\n'
                    'timeout_s=120\n'
                    f'command={json.dumps([sys.executable, str(script)])}\n')
    engine = subprocess.Popen([sys.executable, "-m", "dltop", "run", str(prof), "--json",
                               "--no-telemetry", "--db", str(tmp_path / "d.db"), *extra],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert engine.stdout is not None
    started: set[int] = set()
    iterating: set[int] = set()
    for line in engine.stdout:
        event = json.loads(line)
        if event["event"] == "run_started":
            started.add(event["run_id"])
        elif event["event"] == "iteration" and event["index"] >= 2:
            iterating.add(event["run_id"])
        if len(iterating) == 2:
            break
    conn = sqlite3.connect(tmp_path / "d.db")
    pgids = [r[0] for r in conn.execute("select pgid from runs order by id")]
    conn.close()
    assert len(started) == 2 and len(pgids) == 2 and None not in pgids
    return engine, pgids


@pytest.mark.slow
@pytest.mark.skipif(len(core_order()) < 2, reason="packing CPU runs needs 2 usable CPUs")
def test_ctrl_c_stops_every_packed_run_and_leaves_no_process(
        tmp_path: Path, group_members: Any) -> None:
    engine, pgids = start_packed(tmp_path)
    engine.send_signal(signal.SIGINT)
    assert engine.wait(timeout=60) == 130
    assert all(group_members(g) == [] for g in pgids)
    conn = sqlite3.connect(tmp_path / "d.db")
    assert conn.execute("select status from runs").fetchall() == [("cancelled",)] * 2
    assert conn.execute("select status from campaigns").fetchone() == ("cancelled",)
    conn.close()


@pytest.mark.slow
@pytest.mark.skipif(len(core_order()) < 2, reason="packing CPU runs needs 2 usable CPUs")
def test_engine_killed_with_two_packed_runs_then_resumed(
        tmp_path: Path, group_members: Any) -> None:
    engine, pgids = start_packed(tmp_path)
    time.sleep(1.0)  # both inside their first long step
    engine.kill()
    engine.wait()
    assert all(group_members(g) for g in pgids), "runners outlive their engine"
    res = subprocess.run([sys.executable, "-m", "dltop", "run", "--resume", "--headless",
                          "--no-telemetry", "--db", str(tmp_path / "d.db")],
                         capture_output=True, text=True, timeout=120,
                         env={**os.environ, "RECORDER_FAST": "1"})
    assert res.returncode == 0, res.stderr
    assert "2 interrupted runs re-queued" in res.stderr
    assert all(group_members(g) == [] for g in pgids)
    conn = sqlite3.connect(tmp_path / "d.db")
    runs = conn.execute("select job_id, status, error_kind from runs order by id").fetchall()
    assert conn.execute("select status, pack from campaigns").fetchone() == ("finished", 1)
    conn.close()
    assert sorted(runs) == [(1, "crashed", "engine_lost"), (1, "ok", None),
                            (2, "crashed", "engine_lost"), (2, "ok", None)]


def test_export_marks_cells_measured_packed(tmp_path: Path) -> None:
    from dltop.results.export import build_table
    from dltop.results.render import render

    store = Store(connect(tmp_path / "d.db"))
    prof = parse(ONE.replace('devices=["cpu:1"]', 'devices=["cpu:1", "cpu:2"]'), "p.toml", "p")
    cid, queued = campaign.create(store, campaign.preflight([prof], 0, False), ["t"])
    for q, overlap in zip(queued, (1, 0), strict=True):
        rid = store.start_run(q.job_id, cid, 1, "", 8)
        store.finish_run(rid, q.job_id, "ok", {"median_s": 0.5, "concurrent_runs": overlap})
    md = render(build_table(store.db, cid, "time"), "md")
    assert "| fcn-r | torch | 8 | 0.5000† | 0.5000 |" in md
    assert "† measured while other runs shared its devices" in md
    assert r"0.5000\textdagger{}" in render(build_table(store.db, cid, "time"), "latex")


# three packed engines on two cores (issue 38) -------------------------------------------
# Each run waits, bounded, until two runs have begun: runs that can go side by side then
# overlap however slowly the loaded machine starts the engines.
PAIRED = """
import os, sys, time
from dltop_report import step
open(os.path.join(sys.argv[1], str(os.getpid())), "w").close()
end = time.time() + 20
while len(os.listdir(sys.argv[1])) < 2 and time.time() < end:
    time.sleep(0.05)
for _ in range(4):
    with step(samples=8):
        time.sleep(0.1)
"""


def _stored_runs(db: Path) -> list[tuple[str, str, str, str, str]]:
    conn = sqlite3.connect(db)
    try:
        return conn.execute("select status, cpu_affinity, started_at, finished_at, "
                            "device_lease from runs").fetchall()
    finally:
        conn.close()


@pytest.mark.slow
@pytest.mark.skipif(len(core_order()) < 2, reason="packing CPU runs needs 2 usable CPUs")
def test_three_packed_engines_on_two_cores_leave_no_core_idle(tmp_path: Path) -> None:
    # Was: every engine's allocator named the first core, so all three queued for it
    # while the second idled. Each engine here has one cpu:1 job; the host is two cores.
    from datetime import datetime

    two = set(core_order()[:2])
    (tmp_path / "barrier").mkdir()
    (tmp_path / "paired.py").write_text(PAIRED)
    argv = [sys.executable, str(tmp_path / "paired.py"), str(tmp_path / "barrier")]
    prof = tmp_path / "p.toml"
    prof.write_text('pack = true\n[[matrix]]\nframeworks=["command"]\nmodels=["a"]\n'
                    'batch_sizes=[8]\ndevices=["cpu:1"]\nwarmup=1\niterations=3\n'
                    f'timeout_s=60\ncommand={json.dumps(argv)}\n')
    engines = [subprocess.Popen(
        [sys.executable, "-m", "dltop", "run", str(prof), "--db", str(tmp_path / f"e{i}.db"),
         "--headless", "--no-telemetry"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True, preexec_fn=lambda: os.sched_setaffinity(0, two)) for i in range(3)]
    for e in engines:
        _, err = e.communicate(timeout=120)
        assert e.returncode == 0, err
    runs = [r for i in range(3) for r in _stored_runs(tmp_path / f"e{i}.db")]
    assert [(r[0], r[4]) for r in runs] == [("ok", "held")] * 3
    assert {r[1] for r in runs} == {str(c) for c in two}  # both cores served

    def span(r: tuple[str, ...]) -> tuple[float, float]:
        return tuple(datetime.fromisoformat(t.replace("Z", "+00:00")).timestamp()
                     for t in r[2:4])  # type: ignore[return-value]

    pairs = [(a, b) for a, b in itertools.combinations(runs, 2)
             if span(a)[0] < span(b)[1] and span(b)[0] < span(a)[1]]
    assert pairs and all(a[1] != b[1] for a, b in pairs), runs  # side by side, never shared
