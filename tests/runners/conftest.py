"""Shared helpers: run a child runner like the supervisor does, and small data files."""

from __future__ import annotations

import gzip
import importlib
import json
import os
import pickle
import sqlite3
import struct
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dltop.profiles.device import DeviceSpec
from dltop.profiles.jobspec import JobSpec
from dltop.runners.registry import CHILD_DIR

# The child modules import each other as top-level modules (the runner's directory
# is sys.path[0] of a child); the tests import them the same way.
sys.path.insert(0, str(CHILD_DIR))


class LazyModule:
    """A module imported when a test first uses it, not when pytest collects the file.

    Test modules that imported TensorFlow, PyTorch or JAX at the top made every xdist
    worker load all three while collecting, even for ``-m "not slow"`` runs that use
    none of them (20 s of `make test-fast`'s collection). ``tf = LazyModule("tensorflow")``
    reads like the import it replaces; an install that is missing still fails the test
    that uses it (the framework markers say how to install it), not collection.
    """

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        # pytest probes every module-level object for private markers while collecting
        # (``_fixture_function_marker``...): those must not import the framework.
        if attr.startswith("_") and attr != "__version__":
            raise AttributeError(attr)
        return getattr(importlib.import_module(self._name), attr)


class Shapes:
    """jax_lm.init_params's ``init`` giving ``jax.ShapeDtypeStruct``s: the parameter tree,
    nothing allocated."""

    def normal(self, shape: Any, std: float) -> Any:
        import jax
        import jax.numpy as jnp

        return jax.ShapeDtypeStruct(tuple(shape), jnp.float32)

    def full(self, shape: Any, value: float) -> Any:
        return self.normal(shape, value)


def spec(model: str = "fcn-r", device: str = "cpu:1", **kw: Any) -> dict[str, Any]:
    base: dict[str, Any] = dict(
        profile="t", framework="torch", model=model, batch_size=4,
        device=DeviceSpec.parse(device), repeat=0, iterations=2, warmup=1, timeout_s=60,
        precision="fp32", data="synthetic", data_dir=None, batch_scaling="global", lr=0.01,
        momentum=0.0, seed=0)
    options = kw.pop("options", {})
    base.update(kw)
    job = JobSpec(**base, options=tuple(sorted(options.items())))
    return {**job.to_json_dict(), "run_id": 1}


def run_runner(tmp_path: Path, job: dict[str, Any], script: str = "torch_runner.py",
               timeout: float = 120) -> tuple[int, list[dict[str, Any]], str]:
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(job))
    r, w = os.pipe()
    env = {**os.environ, "DLTOP_EVENT_FD": str(w), "CUDA_VISIBLE_DEVICES": "",
           "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, str(CHILD_DIR / script), str(path)],
                            pass_fds=(w,), env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    os.close(w)
    with os.fdopen(r, "rb") as fh:
        lines = fh.read().splitlines()
    out, _ = proc.communicate(timeout=timeout)
    return proc.returncode, [json.loads(x) for x in lines], out.decode(errors="replace")


def write_idx(path: Path, shape: tuple[int, ...], data: bytes, gz: bool = False) -> None:
    blob = bytes([0, 0, 8, len(shape)]) + struct.pack(">" + "I" * len(shape), *shape) + data
    if gz:
        with gzip.open(str(path) + ".gz", "wb") as fh:
            fh.write(blob)
    else:
        path.write_bytes(blob)


def write_mnist(d: Path, n: int = 16, gz: bool = False) -> None:
    write_idx(d / "train-images-idx3-ubyte", (n, 28, 28),
              bytes(i % 256 for i in range(n * 784)), gz)
    write_idx(d / "train-labels-idx1-ubyte", (n,), bytes(i % 10 for i in range(n)), gz)


def write_mnist_test(d: Path, n: int = 12, pixel_step: int = 3) -> None:
    """MNIST's test set (the t10k files) of ``n`` images, pixel ``i`` ``i * pixel_step``."""
    write_idx(d / "t10k-images-idx3-ubyte", (n, 28, 28),
              bytes((i * pixel_step) % 256 for i in range(n * 784)))
    write_idx(d / "t10k-labels-idx1-ubyte", (n,), bytes(i % 10 for i in range(n)))


def write_cifar_python(d: Path, n: int = 8) -> None:
    batch = {b"data": bytes((i * 7) % 256 for i in range(n * 3072)),
             b"labels": [i % 10 for i in range(n)]}
    (d / "data_batch_1").write_bytes(pickle.dumps(batch))


# command jobs --------------------------------------------------------------------------
PROGRAMS = Path(__file__).resolve().parent.parent / "programs"
"""The cmd_* example programs (tests/programs/), each printing like a real program."""


@dataclass
class CommandRun:
    """What one ``dltop run`` of a command job left: exit code, its run, its iterations."""

    code: int
    stderr: str
    run: dict[str, Any]
    """The ``runs`` row (empty when nothing was stored)."""
    seconds: list[float]
    """Every stored iteration's seconds, warm-up included, in order."""
    warmup: list[bool]
    samples: list[int]
    spec: dict[str, Any]
    """The runner's spec.json (with ``command_launch``)."""
    environment: dict[str, Any]

    def truth(self, path: Path) -> list[float]:
        return [float(x) for x in path.read_text().split()]


def run_profile(prof: Path, timeout_s: float) -> CommandRun:
    """``dltop run`` of the one-command-job profile ``prof`` into ``d.db`` beside it."""
    db = prof.parent / "d.db"
    res = subprocess.run([sys.executable, "-m", "dltop", "run", str(prof), "--db", str(db),
                          "--headless", "--no-telemetry"], capture_output=True, text=True,
                         timeout=timeout_s)
    if not db.exists():
        return CommandRun(res.returncode, res.stderr, {}, [], [], [], {}, {})
    conn = sqlite3.connect(db)
    conn.row_factory = sqlite3.Row
    try:
        row = conn.execute("select * from runs").fetchone()
        iters = conn.execute("select seconds, warmup, samples from iterations "
                             "order by idx").fetchall()
        env = conn.execute("select * from environment").fetchone()
    finally:
        conn.close()
    spec_path = prof.parent / "d-runs" / f"run-{row['id']}" / "spec.json"
    return CommandRun(res.returncode, res.stderr, dict(row), [r[0] for r in iters],
                      [bool(r[1]) for r in iters], [r[2] for r in iters],
                      json.loads(spec_path.read_text()) if spec_path.exists() else {},
                      dict(env) if env is not None else {})


@pytest.fixture
def command_job(tmp_path: Path, profile_text: Any) -> Callable[..., CommandRun]:
    """Runs one command job with ``dltop run``: ``command_job(argv, iterations=, warmup=,
    **keys)``, ``extra`` TOML lines; the profile lives in ``tmp_path``."""
    def run(argv: list[str], *, iterations: int = 6, warmup: int = 2, batch: int = 32,
            extra: str = "", timeout_s: float = 60, **keys: Any) -> CommandRun:
        prof = tmp_path / "p.toml"
        prof.write_text(profile_text({
            "frameworks": ["command"], "models": ["my-net"], "batch_sizes": [batch],
            "devices": ["cpu:1"], "warmup": warmup, "iterations": iterations,
            "timeout_s": timeout_s, "command": argv, **keys}, extra=extra))
        return run_profile(prof, timeout_s + 120)
    return run


RunJob = Callable[..., CommandRun]


def program(name: str, *args: object) -> list[str]:
    """The argv that runs example program ``tests/programs/<name>`` with ``args``."""
    return [sys.executable, str(PROGRAMS / name), *map(str, args)]


def assert_close(stored: list[float], truth: list[float], rel: float = 0.02) -> None:
    """Stored per-step seconds match the program's own measurement, step by step."""
    assert len(stored) == len(truth), (stored, truth)
    for i, (s, t) in enumerate(zip(stored, truth, strict=True)):
        assert s == pytest.approx(t, rel=rel), f"step {i}: stored {s}, truth {t}"
