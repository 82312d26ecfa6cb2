"""The local cluster fixture itself: a job submitted with sbatch runs on its node.

One host gives one Slurm node: the multi-node path (nodes > 1) is covered by the
torchrun two-agent rendezvous test (tests/runners), not here.
"""

from __future__ import annotations

from pathlib import Path

from .cluster import NODE, LocalSlurm


def test_sbatch_runs_a_job_on_the_local_node(slurm_cluster: LocalSlurm, tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    job_id = slurm_cluster.run("sbatch", "--parsable", "--wait", "-o", str(out),
                               "--wrap", "echo node=$SLURMD_NODENAME", timeout=60).strip()
    assert job_id.isdigit()
    assert out.read_text().strip() == f"node={NODE}"
