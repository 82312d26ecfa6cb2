"""TensorFlow over nodes (``nodes > 1``, the Slurm executor) without Slurm: two runner
processes on 127.0.0.1, each standing for a node, with the ``TF_CONFIG`` and
``DLTOP_RANK`` that ``node.sh`` exports (docs/cluster.md)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dltop.runners.registry import CHILD_DIR

from .conftest import run_runner, spec, write_mnist, write_mnist_test

RUNNER = str(CHILD_DIR / "tf_runner.py")


def node_spec(device: str = "cpu:1", **kw: Any) -> dict[str, Any]:
    return spec("fcn-r", device, framework="tensorflow", nodes=2, executor="slurm", **kw)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def tf_config(ports: list[int], index: int) -> str:
    return json.dumps({"cluster": {"worker": [f"127.0.0.1:{p}" for p in ports]},
                       "task": {"type": "worker", "index": index}})


@pytest.mark.slow
@pytest.mark.tensorflow
def test_two_nodes_train_as_one_job_on_one_host(tmp_path: Path) -> None:
    """One worker per "node", MultiWorkerMirroredStrategy over both: rank 0 reports
    every step with world_size 2 and the global batch; rank 1 stays silent; both end 0.
    Each node trains on its half of the global batch: the losses are those of one
    process on the whole batch (real data, the same order), up to summation order."""
    write_mnist(tmp_path, n=64)
    write_mnist_test(tmp_path, n=20, pixel_step=7)
    # eval_every = 4: rank 0 evaluates after the last step, when rank 1 may be gone
    common: dict[str, Any] = dict(batch_size=16, iterations=3, warmup=1, data="real",
                                  data_dir=str(tmp_path), lr=0.1, eval_every=4)
    code, one, out = run_runner(tmp_path, spec("fcn-r", "cpu:1", framework="tensorflow",
                                               **common), script="tf_runner.py", timeout=300)
    assert code == 0, out
    job = node_spec(**common)
    spec_path = tmp_path / "spec.json"
    spec_path.write_text(json.dumps(job))
    ports = [free_port(), free_port()]
    r, w = os.pipe()
    procs = []
    try:
        for rank in (0, 1):
            env = {**os.environ, "TF_CONFIG": tf_config(ports, rank), "DLTOP_RANK": str(rank),
                   "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}
            if rank == 0:
                env["DLTOP_EVENT_FD"] = str(w)
            else:  # as on a node other than the first: its descriptor is /dev/null
                env.pop("DLTOP_EVENT_FD", None)
            procs.append(subprocess.Popen(
                [sys.executable, RUNNER, str(spec_path)], env=env,
                pass_fds=(w,) if rank == 0 else (), stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT))
        os.close(w)
        w = -1
        with os.fdopen(r, "rb") as fh:
            lines = fh.read().splitlines()
        logs = [p.communicate(timeout=300)[0].decode(errors="replace") for p in procs]
    finally:
        if w >= 0:
            os.close(w)
        for p in procs:
            p.kill()
    assert [p.returncode for p in procs] == [0, 0], "\n".join(logs)
    events = [json.loads(x) for x in lines]
    assert [e["event"] for e in events] == (["hello", "model", "plan"] + ["iter"] * 4
                                            + ["eval", "done"])
    hello = events[0]
    assert (hello["world_size"], hello["nodes"], hello["threads"]) == (2, 2, 1)
    assert all(e["samples"] == 16 for e in events if e["event"] == "iter")  # 8 per node
    losses = [e["loss"] for e in events if e["event"] == "iter"]
    assert losses == pytest.approx([e["loss"] for e in one if e["event"] == "iter"], rel=1e-4)
    assert losses[3] != pytest.approx(losses[0], rel=1e-4)  # it did learn
    (eval_one,) = [e for e in one if e["event"] == "eval"]
    assert events[-2]["samples"] == 20
    assert events[-2]["loss"] == pytest.approx(eval_one["loss"], rel=1e-4)
    assert "[dltop] run 1: tensorflow fcn-r" in logs[1]  # rank 1 ran, silently


@pytest.mark.slow
@pytest.mark.tensorflow
def test_nodes_without_tf_config_is_a_crash_that_says_why(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TF_CONFIG", raising=False)
    code, events, out = run_runner(tmp_path, node_spec(), script="tf_runner.py", timeout=300)
    assert code == 3, out
    assert events[-1]["event"] == "error" and events[-1]["kind"] == "crash"
    assert "nodes = 2 needs TF_CONFIG" in events[-1]["message"]
