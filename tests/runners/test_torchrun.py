"""torchrun for PyTorch data-parallel jobs: the command, the event relay, two nodes on one host.

The cpus:2 runs through ``dltop run`` (timeout, a dying rank, the sweep) are in
tests/core/test_data_parallel.py.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dltop.runners.launchers import torchrun_argv
from dltop.runners.registry import CHILD_DIR

from .conftest import spec

RUNNER = CHILD_DIR / "torch_runner.py"


def test_one_node_is_a_standalone_rendezvous_without_restarts() -> None:
    argv = torchrun_argv("/py", RUNNER, "/r/spec.json", 4, log_dir="/r/torchrun")
    assert argv == ["/py", "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
                    "4", "--max-restarts", "0", "--log-dir", "/r/torchrun", str(RUNNER),
                    "/r/spec.json"]


def test_several_nodes_meet_at_a_c10d_endpoint() -> None:
    argv = torchrun_argv("/py", "r.py", "s.json", 8, nnodes=4, rdzv_endpoint="node1:29400",
                         rdzv_id="tok123", node_rank=2)
    assert "--standalone" not in argv
    flags = dict(zip(argv[3:-2:2], argv[4:-2:2], strict=True))
    assert flags == {"--nnodes": "4", "--rdzv-backend": "c10d", "--rdzv-endpoint": "node1:29400",
                     "--rdzv-id": "tok123", "--node-rank": "2", "--nproc-per-node": "8",
                     "--max-restarts": "0"}
    assert argv[-2:] == ["r.py", "s.json"]


@pytest.mark.parametrize("kw", [dict(nnodes=2), dict(nnodes=2, rdzv_endpoint="h:1"),
                                dict(nnodes=0)])
def test_bad_commands_are_refused(kw: Any) -> None:
    with pytest.raises(ValueError, match="torchrun"):
        torchrun_argv("/py", "r.py", "s.json", 2, **kw)
    with pytest.raises(ValueError, match="nproc_per_node"):
        torchrun_argv("/py", "r.py", "s.json", 0)


def test_the_runner_launches_the_same_command(tmp_path: Path) -> None:
    """The child builds its one-host command itself (Python 3.6, no dltop): same argv."""
    import torch_runner  # the child module, from CHILD_DIR on sys.path (conftest)

    spec_path = str(tmp_path / "spec.json")
    assert torch_runner._torchrun_cmd(spec_path, 2) == torchrun_argv(
        sys.executable, RUNNER, spec_path, 2, log_dir=tmp_path / "torchrun")


# the relay ------------------------------------------------------------------------------
RANK0 = """
import sys
sys.path.insert(0, {child!r})
import dltop_protocol as proto, relay
relay.join("0")
r = proto.Reporter()
r.hello("fake", "1", "cpu", 1)
{more}
"""


def relayed(tmp_path: Path, more: str, monkeypatch: pytest.MonkeyPatch) -> tuple[int, list[Any]]:
    """Run a fake launcher whose rank 0 reports through the relay; (exit status, events)."""
    import relay

    r, w = os.pipe()
    monkeypatch.setenv("DLTOP_EVENT_FD", str(w))
    code = relay.launch([sys.executable, "-c", RANK0.format(child=str(CHILD_DIR), more=more)],
                        "fake (2 ranks)", directory=str(tmp_path))
    os.close(w)
    with os.fdopen(r, "rb") as fh:
        events = [json.loads(line) for line in fh.read().splitlines()]
    assert list(tmp_path.iterdir()) == []  # the FIFO is gone
    return code, events


def test_relay_passes_rank0s_events_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code, events = relayed(tmp_path, "r.done(3)", monkeypatch)
    assert code == 0
    assert [e["event"] for e in events] == ["hello", "done"]
    assert events[0]["pid"] != os.getpid()  # reported by the rank, not the relay


def test_a_launcher_ending_early_is_a_crash(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    code, events = relayed(tmp_path, "sys.exit(1)", monkeypatch)
    assert code == 3
    assert [e["event"] for e in events] == ["hello", "error"]
    assert events[-1]["kind"] == "crash"
    assert events[-1]["message"] == ("fake (2 ranks) exited with status 1 before rank 0 "
                                     "reported the end of the run")


# two nodes on one host --------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Both:
    """``poll()`` of two agents: None while either runs."""

    def __init__(self, procs: list[subprocess.Popen[bytes]]) -> None:
        self.procs = procs

    def poll(self) -> int | None:
        codes = [p.poll() for p in self.procs]
        return None if None in codes else max(c or 0 for c in codes)


@pytest.mark.slow
def test_two_nodes_meet_through_c10d_on_one_host(tmp_path: Path, wait_until: Any) -> None:
    """Two torchrun agents (``--nnodes 2``, c10d on 127.0.0.1) train fcn-r as one job.

    The multi-node path without Slurm: each agent stands for a node with one
    rank; rank 0 (on whichever node the rendezvous put it) reports through the
    FIFO, the other rank stays silent.
    """
    import relay

    job = spec("fcn-r", device="cpus:1", batch_size=8, iterations=3, warmup=1)
    spec_path = tmp_path / "spec.json"
    spec_path.write_text(json.dumps(job))
    fifo, rfd, keep = relay.create(str(tmp_path))
    env = {**os.environ, "DLTOP_EVENT_FIFO": fifo, "OMP_NUM_THREADS": "1",
           "CUDA_VISIBLE_DEVICES": ""}
    env.pop("DLTOP_EVENT_FD", None)
    endpoint = f"127.0.0.1:{free_port()}"
    agents = [subprocess.Popen(
        torchrun_argv(sys.executable, RUNNER, spec_path, 1, nnodes=2, rdzv_endpoint=endpoint,
                      rdzv_id="test-two-nodes", log_dir=tmp_path / f"node{i}"),
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for i in range(2)]
    out_fd = os.open(tmp_path / "events.jsonl", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        last = relay.relay(rfd, keep, out_fd, Both(agents))
        logs = [p.communicate(timeout=60)[0].decode(errors="replace") for p in agents]
    finally:
        os.close(out_fd)
        os.close(rfd)
        for p in agents:
            p.kill()
    assert [p.returncode for p in agents] == [0, 0], "\n".join(logs)
    events = [json.loads(x) for x in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert last == "done"
    assert [e["event"] for e in events] == ["hello", "model", "plan", "iter", "iter", "iter",
                                            "iter", "done"]  # rank 0 only: one of each
    hello = events[0]
    assert (hello["launcher"], hello["nodes"], hello["world_size"]) == ("torchrun", 2, 2)
    wait_until(lambda: not relay_ranks_alive(spec_path), 30, "every rank to end")


def relay_ranks_alive(spec_path: Path) -> list[int]:
    import psutil

    return [p.pid for p in psutil.process_iter(["cmdline", "status"])
            if str(spec_path) in (p.info["cmdline"] or []) and p.info["status"] != "zombie"]
