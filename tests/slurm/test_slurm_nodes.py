"""``nodes = 2`` for real: one Slurm job over two nodes (two slurmd on this host, partition
``two``; the second node's name resolves nowhere, so every address is its NodeAddr).

PyTorch runs torchrun on each node with a c10d rendezvous at the first node's address;
TensorFlow runs one MultiWorkerMirroredStrategy worker per node from the TF_CONFIG that
node.sh builds. Each run must end ``ok`` with a world of two, both nodes recorded, and an
agent's telemetry from each node.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from .cluster import NODE, NODE2, LocalSlurm
from .test_slurm_runs import dltop, runs, write


def _two_node_run(tmp_path: Path, framework: str) -> dict[str, object]:
    prof = write(tmp_path, iterations=4, extra="nodes = 2",
                 slurm='[slurm]\npartition = "two"')
    prof.write_text(prof.read_text().replace('frameworks = ["torch"]',
                                             f'frameworks = ["{framework}"]'))
    res = dltop(tmp_path, "run", str(prof), "--headless", timeout=420)
    (run,) = runs(tmp_path)
    assert res.returncode == 0 and run["status"] == "ok", (res.stdout + res.stderr, run)
    return run


def _checks(cluster: LocalSlurm, tmp_path: Path, run: dict[str, object]) -> None:
    assert run["slurm_state"] == "COMPLETED"
    nodes = cluster.run("scontrol", "show", "hostnames", str(run["slurm_nodes"])).split()
    assert nodes == [NODE, NODE2], run["slurm_nodes"]
    conn = sqlite3.connect(tmp_path / "d.db")
    try:
        (extra,) = conn.execute("select extra from environment").fetchone()
        nodes = {n for (n,) in conn.execute(
            "select distinct node from host_samples where node is not null")}
        iters = conn.execute("select count(*) from iterations where warmup = 0").fetchone()[0]
    finally:
        conn.close()
    assert json.loads(extra)["world_size"] == 2
    assert nodes == {NODE, NODE2}  # each node's agent reported
    assert iters == 4


@pytest.mark.slow
def test_torch_trains_over_two_nodes_through_c10d(slurm_env: LocalSlurm,
                                                  tmp_path: Path) -> None:
    _checks(slurm_env, tmp_path, _two_node_run(tmp_path, "torch"))


@pytest.mark.slow
@pytest.mark.tensorflow
def test_tensorflow_trains_over_two_nodes_one_worker_each(slurm_env: LocalSlurm,
                                                          tmp_path: Path) -> None:
    _checks(slurm_env, tmp_path, _two_node_run(tmp_path, "tensorflow"))
