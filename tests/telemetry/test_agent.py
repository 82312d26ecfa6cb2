"""``dltop agent`` (issue 15): a real process sampling simulated GPUs into a JSON-lines file.

Also the engine's side of those files (:class:`dltop.jobs.agentfeed.AgentFeed`): a file
read while it grows, a partial last line, and the windows stored per node.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from dltop.errors import UserError
from dltop.jobs.agentfeed import AgentFeed
from dltop.profiles.loader import parse
from dltop.store import Store, memory_db
from dltop.telemetry.agent import AgentOptions, resolve_gpus, run_agent
from dltop.telemetry.fake import FakeGpuBackend


def _agent(out: Path, *extra: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "dltop", "agent", "--out", str(out), "--hz", "10", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, **(env or {})})


def _lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _kinds(path: Path) -> list[object]:
    return [r["kind"] for r in _lines(path)] if path.exists() else []


@pytest.mark.slow  # over 1.5 s on an idle 2-core machine
def test_the_agent_writes_whole_lines_until_sigterm(
        tmp_path: Path, wait_until: Callable[..., None]) -> None:
    out = tmp_path / "agent-n1.jsonl"
    proc = _agent(out, "--fake-gpus", "2", env={"SLURMD_NODENAME": "n1"})
    try:
        wait_until(lambda: _kinds(out).count("host") >= 2 and "gpu" in _kinds(out), 60,
                   "the agent's first windows")
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    text = out.read_text()
    assert text.endswith("\n")  # the last line is whole
    lines = _lines(out)
    assert lines[0]["kind"] == "hello" and lines[0]["simulated"] is True
    assert [g["index"] for g in lines[0]["gpus"]] == [0, 1]  # type: ignore[union-attr]
    assert lines[-1] == {"v": 1, "node": "n1", "kind": "bye", "reason": "SIGTERM",
                         "t_wall_s": lines[-1]["t_wall_s"]}
    assert {r["node"] for r in lines} == {"n1"}
    gpus = [r for r in lines if r["kind"] == "gpu"]
    assert {r["gpu_index"] for r in gpus} == {0, 1}
    assert all(r["simulated"] is True and r["power_mean_w"] for r in gpus)
    assert "stopped (SIGTERM)" in err


@pytest.mark.slow  # spawns processes: over 1 s on a busy 2-core machine
def test_the_agent_samples_only_the_gpus_asked_for(
        tmp_path: Path, wait_until: Callable[..., None]) -> None:
    out = tmp_path / "agent-n2.jsonl"
    proc = _agent(out, "--fake-gpus", "4", "--gpus", "3,GPU-fake-0001", "--node", "n2")
    try:
        wait_until(lambda: _kinds(out).count("gpu") >= 4, 60, "GPU windows")
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)
    lines = _lines(out)
    assert [g["index"] for g in lines[0]["gpus"]] == [3, 1]  # type: ignore[union-attr]
    assert {r["gpu_index"] for r in lines if r["kind"] == "gpu"} == {1, 3}
    assert lines[-1]["reason"] == "SIGINT"


@pytest.mark.slow  # over 1.5 s on an idle 2-core machine
def test_the_agent_stops_when_its_parent_dies(
        tmp_path: Path, wait_until: Callable[..., None]) -> None:
    out = tmp_path / "agent-n3.jsonl"
    # a shell starts the agent in the background and exits: the agent is re-parented
    cmd = (f"{sys.executable} -m dltop agent --out {out} --fake-gpus 1 --node n3 "
           "2>/dev/null & sleep 3")
    subprocess.run(["sh", "-c", cmd], check=True, timeout=60)
    wait_until(lambda: "bye" in _kinds(out), 60, "the agent to notice its parent is gone")
    assert _lines(out)[-1]["reason"] == "parent exited"


def test_a_gpu_the_node_lacks_is_refused() -> None:
    with pytest.raises(UserError, match="'5' is not a GPU of this node"):
        resolve_gpus(FakeGpuBackend(2), ["5"])
    with pytest.raises(UserError, match="--hz"):
        run_agent(AgentOptions(out=Path("/nonexistent/x.jsonl"), hz=0.0), fake_gpus=1)


def _record(kind: str, node: str, t: float, **fields: object) -> bytes:
    base: dict[str, object] = {"v": 1, "node": node, "kind": kind}
    if kind == "gpu":
        base.update(t_start_mono_s=5.0, gpu_index=0, n=5, util_mean_pct=50.0,
                    util_min_pct=40.0, util_max_pct=60.0, mem_used_max_bytes=1 << 30,
                    power_mean_w=100.0, power_min_w=90.0, power_max_w=110.0,
                    energy_j=None, temperature_max_c=None, sm_clock_mhz=None,
                    simulated=True, t_wall_s=t)
    base.update(fields)
    return (json.dumps(base) + "\n").encode()


def test_the_feed_tails_a_growing_file_and_keeps_a_partial_line(tmp_path: Path) -> None:
    feed = AgentFeed(tmp_path)
    assert feed.poll() == []  # no agent started yet
    a = tmp_path / "agent-a.jsonl"
    whole = _record("gpu", "a", 1e9)
    a.write_bytes(_record("hello", "a", 1e9, gpus=[]) + whole + whole[:30])
    got = feed.poll()
    assert [(g.node, len(g.gpu), g.hello is not None) for g in got] == [("a", 1, True)]
    assert feed.poll() == []  # the partial line waits for its newline
    with a.open("ab") as f:
        f.write(whole[30:] + b'{"v": 1, "node": "a", "kind": "gp')  # a write cut by a kill
    got = feed.poll()
    assert [len(g.gpu) for g in got] == [1]  # the line completed, nothing twice
    assert got[0].gpu[0].power_mean_w == 100.0 and got[0].gpu[0].t_wall_s == 1e9
    (tmp_path / "agent-b.jsonl").write_bytes(_record("gpu", "b", 1e9 + 1) + b"not json\n")
    got = feed.poll()
    assert [(g.node, len(g.gpu)) for g in got] == [("b", 1)]
    assert feed.bad_lines == 1
    assert feed.drain() == [] and feed.bad_lines == 2  # the torn last line of a
    assert set(feed.nodes) == {"a"}


@pytest.mark.slow  # spawns processes: over 1 s on a busy 2-core machine
def test_agent_files_reach_the_database_per_node(
        tmp_path: Path, wait_until: Callable[..., None]) -> None:
    """Two real agents (one per 'node', both with a GPU 0) while the feed polls."""
    store = Store(memory_db())
    jobs = parse('[[matrix]]\nframeworks = ["torch"]\nmodels = ["fcn-r"]\n'
                 'batch_sizes = [1]\ndevices = ["cpu:1"]\n', "p.toml", "p").jobs
    cid = store.create_campaign("c", ["p.toml"], ["dltop"], "host", 1, None)
    run_id = store.start_run(store.add_jobs(cid, jobs)[0], cid, 1, "", 1)
    feed = AgentFeed(tmp_path)
    procs = [_agent(tmp_path / f"agent-{n}.jsonl", "--fake-gpus", "1", "--node", n)
             for n in ("n1", "n2")]

    def stored() -> set[str]:
        for got in feed.poll():
            store.telemetry.add_agent_samples(run_id, got.node, got.gpu, got.host)
        return {r["node"] for r in store.db.query("select distinct node from gpu_samples")}

    try:
        wait_until(lambda: stored() == {"n1", "n2"}, 60, "both nodes' GPU rows")
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            p.communicate(timeout=60)
    for got in feed.drain():
        store.telemetry.add_agent_samples(run_id, got.node, got.gpu, got.host)
    per_node = {r["node"]: r["n"] for r in store.db.query(
        "select node, count(*) as n from gpu_samples where run_id = ? and gpu_index = 0 "
        "group by node", [run_id])}
    in_files = {n: _kinds(tmp_path / f"agent-{n}.jsonl").count("gpu") for n in ("n1", "n2")}
    assert per_node == in_files  # every window of each file stored once, under its node
    assert feed.bad_lines == 0


def test_the_agent_loads_no_viewer_and_no_database_code() -> None:
    """A compute node needs the standard library, psutil and nvidia-ml-py only."""
    code = ("import sys, dltop.cli, dltop.cli.serve, dltop.telemetry.agent\n"
            "from dltop.telemetry import open_gpu_backend\n"
            "open_gpu_backend(2)\n"
            "print(sorted(m for m in ('textual', 'rich', 'sqlite3', 'sqlite_utils', 'numpy')"
            " if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60).stdout
    assert out.strip() == "[]"


def test_cuda_visible_devices_picks_the_gpus_unless_it_names_none_of_this_node(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from dltop import telemetry

    seen: list[tuple[int, ...]] = []

    class Probe:
        def __init__(self, backend: object, options: AgentOptions) -> None:
            seen.append(tuple(int(g) for g in options.gpus or ()))

        def run(self, signals: object = None) -> str:
            return "probe"

    monkeypatch.setattr("dltop.telemetry.agent.Agent", Probe)
    monkeypatch.setattr(telemetry, "open_gpu_backend", lambda n=None: FakeGpuBackend(4))
    for visible in ("2,3", "7"):
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
        run_agent(AgentOptions(out=tmp_path / "a.jsonl"))
    assert seen == [(2, 3), ()]  # "7": not a GPU here, so all of them (no --gpus)
