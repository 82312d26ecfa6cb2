"""The TensorFlow runner's ``cpus:P`` workers (tf_dist.py) as real processes: a run, the
global batch, a worker that dies or is killed, a chief that is killed."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest

from dltop.childfiles import child_module
from dltop.runners.registry import CHILD_DIR

from .conftest import run_runner, spec, write_mnist, write_mnist_test

pytestmark = [pytest.mark.slow, pytest.mark.tensorflow]

SCRIPT = "tf_runner.py"


def tf_spec(device: str = "cpus:2", **kw: Any) -> dict[str, Any]:
    return spec("fcn-r", device, framework="tensorflow", **kw)


def losses(events: list[dict[str, Any]]) -> list[float]:
    return [float(e["loss"]) for e in events if e["event"] == "iter"]


def test_two_workers_train_on_the_global_batch(tmp_path: Path) -> None:
    code, events, out = run_runner(tmp_path, tf_spec(batch_size=32, iterations=3),
                                   script=SCRIPT, timeout=300)
    assert code == 0, out
    assert [e["event"] for e in events] == ["hello", "model", "plan"] + ["iter"] * 4 + ["done"]
    hello = events[0]
    assert hello["world_size"] == 2 and hello["threads"] == 1 and hello["device"] == "cpu"
    assert hello["intra_op_threads"] == 1 and hello["inter_op_threads"] == 1
    assert all(e["samples"] == 32 for e in events if e["event"] == "iter")  # 16 per worker
    assert "TensorFlow cluster of 2 workers on 127.0.0.1" in out
    assert out.count("[dltop] run 1: tensorflow fcn-r") == 2  # both workers logged


def test_two_workers_follow_one_process_step_for_step(tmp_path: Path) -> None:
    """Global batch semantics: the same first weights (broadcast by worker 0), each worker
    a half of the same global batch, the gradients averaged: the losses of cpus:2 are those
    of one process on the whole batch, up to float summation order; and so is worker 0's
    evaluation of the trained weights (the other worker does not evaluate)."""
    write_mnist(tmp_path, n=64)
    write_mnist_test(tmp_path, n=20, pixel_step=7)
    common: dict[str, Any] = dict(batch_size=16, iterations=3, warmup=0, data="real",
                                  data_dir=str(tmp_path), lr=0.1, eval_every=3)
    code, one, out = run_runner(tmp_path, tf_spec("cpu:1", **common), script=SCRIPT,
                                timeout=300)
    assert code == 0, out
    code, two, out = run_runner(tmp_path, tf_spec("cpus:2", **common), script=SCRIPT,
                                timeout=300)
    assert code == 0, out
    assert len(losses(two)) == 3
    assert losses(two) == pytest.approx(losses(one), rel=1e-4)
    assert losses(two)[2] != pytest.approx(losses(two)[0], rel=1e-4)  # it did learn
    (eval_one,) = [e for e in one if e["event"] == "eval"]
    (eval_two,) = [e for e in two if e["event"] == "eval"]
    assert eval_two["samples"] == 20 and eval_two["loss"] == pytest.approx(eval_one["loss"],
                                                                           rel=1e-4)


def test_a_worker_that_dies_ends_the_run_naming_it(tmp_path: Path) -> None:
    code, events, out = run_runner(tmp_path, tf_spec(options={"inject": "crash-rank1"}),
                                   script=SCRIPT, timeout=300)
    assert code == 3, out
    assert events[-1]["event"] == "error" and events[-1]["kind"] == "crash"
    assert "TensorFlow worker 1 of 2" in events[-1]["message"]
    assert "exited with status 1" in events[-1]["message"]


class Hung:
    """A cpus:2 run hung after its first step (``inject = "hang"``), read event by event."""

    def __init__(self, tmp_path: Path) -> None:
        path = tmp_path / "spec.json"
        path.write_text(json.dumps(tf_spec(options={"inject": "hang"})))
        r, w = os.pipe()
        env = {**os.environ, "DLTOP_EVENT_FD": str(w), "CUDA_VISIBLE_DEVICES": ""}
        self.proc = subprocess.Popen([sys.executable, str(CHILD_DIR / SCRIPT), str(path)],
                                     pass_fds=(w,), env=env, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, start_new_session=True)
        os.close(w)
        self.events = os.fdopen(r, "rb")
        for line in self.events:  # up to the first iteration: both workers are in the loop
            if json.loads(line)["event"] == "iter":
                break
        self.worker = psutil.Process(self.proc.pid).children()[0]

    def rest(self) -> list[dict[str, Any]]:
        return [json.loads(x) for x in self.events.read().splitlines()]

    def close(self) -> None:
        self.events.close()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


def test_a_killed_worker_is_reported_while_worker_0_waits(tmp_path: Path) -> None:
    """Worker 0 is blocked (here asleep; in a real run, in an all-reduce that never ends):
    its watcher thread reports the killed worker and ends the process."""
    run = Hung(tmp_path)
    try:
        run.worker.kill()
        assert run.proc.wait(timeout=60) == 3
        (error,) = run.rest()
        assert error["event"] == "error" and error["kind"] == "crash"
        assert "TensorFlow worker 1 of 2" in error["message"]
        assert "killed by SIGKILL" in error["message"]
    finally:
        run.close()


def test_workers_die_with_worker_0(tmp_path: Path, wait_until: Callable[..., None]) -> None:
    run = Hung(tmp_path)
    try:
        os.kill(run.proc.pid, signal.SIGKILL)  # not the group: only worker 0
        run.proc.wait(timeout=30)
        wait_until(lambda: not run.worker.is_running()
                   or run.worker.status() == psutil.STATUS_ZOMBIE,
                   30, "worker 1 to die with worker 0")
    finally:
        run.close()


class _GoneAtBarrier(Exception):
    """Stands for ``tf.errors.UnavailableError`` (labelled fake at the TF boundary)."""


class _Context:
    """A stand-in for TF's eager context at the end barrier: its ``wait_at_barrier`` fails
    as TF's does once worker 0's process, which holds the coordination service, is gone
    ("Socket closed": the real race runs in tests/slurm/test_slurm_nodes.py, 1 in ~25)."""

    def __init__(self, error: Exception | None) -> None:
        self.error, self.calls = error, []  # type: ignore[var-annotated]

    def wait_at_barrier(self, name: str, timeout_ms: int) -> None:
        self.calls.append((name, timeout_ms))
        if self.error is not None:
            raise self.error


def test_a_worker_whose_leader_left_at_the_end_barrier_ends_as_it_would(
        capsys: pytest.CaptureFixture[str]) -> None:
    tf_dist = child_module("tf_dist")
    gone = _GoneAtBarrier("Failed to send RPC to coordination service.\n:UNKNOWN:Error "
                          "received from peer {grpc_message:\"Socket closed\"}")
    ctx = _Context(gone)
    tf_dist.end_barrier(ctx, 5000, 1, _GoneAtBarrier)  # worker 1: said, not raised
    assert ctx.calls == [("dltop-run-end", 5000)]
    said = capsys.readouterr().err
    assert said.startswith("[dltop] worker 1: worker 0 was gone at the end barrier (Failed "
                           "to send RPC to coordination service.)"), said
    with pytest.raises(_GoneAtBarrier):  # worker 0's own failure is its run's
        tf_dist.end_barrier(_Context(gone), 5000, 0, _GoneAtBarrier)
    with pytest.raises(ValueError):  # any other error is raised on every worker
        tf_dist.end_barrier(_Context(ValueError("x")), 5000, 1, _GoneAtBarrier)
    tf_dist.end_barrier(_Context(None), 5000, 1, _GoneAtBarrier)
    assert capsys.readouterr().err == ""
