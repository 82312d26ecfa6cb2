"""How a data-parallel PyTorch job is started: the torchrun command line (pure).

One host (``nnodes == 1``): the PyTorch runner the supervisor started builds the
same command itself (``torch_runner._torchrun_cmd``, standard library, Python
3.6-valid; tests/runners/test_torchrun.py checks the two agree) and relays rank
0's events. Several hosts: the Slurm executor starts this command on every node
(``srun``), with a c10d rendezvous on the first node.
"""

from __future__ import annotations

from pathlib import Path


def torchrun_argv(python: str, script: str | Path, spec_path: str | Path,
                  nproc_per_node: int, *, nnodes: int = 1, rdzv_endpoint: str | None = None,
                  rdzv_id: str | None = None, node_rank: int | None = None,
                  log_dir: str | Path | None = None) -> list[str]:
    """The argv that runs ``script spec_path`` under torchrun (no shell, no restarts).

    Args:
        python: the framework's interpreter (torchrun runs as ``python -m
            torch.distributed.run``, so it is the same PyTorch as the workers).
        script: the runner script, e.g. ``torch_runner.py``.
        spec_path: the job spec the runner reads.
        nproc_per_node: worker processes on each node (P of ``cpus:P``, G GPUs).
        nnodes: 1 for a standalone rendezvous on a free port of this host;
            more for a c10d rendezvous that every node's agent joins.
        rdzv_endpoint: ``HOST:PORT`` of the first node (required when nnodes > 1).
        rdzv_id: the job's id, the same on every node (required when nnodes > 1).
        node_rank: this node's rank, when the caller knows it (c10d assigns one
            otherwise).
        log_dir: where torchrun keeps its per-rank error files (its default is a
            new folder under the temporary directory, left behind).

    Raises:
        ValueError: counts under 1, or a multi-node command without endpoint or id.
    """
    if nproc_per_node < 1 or nnodes < 1:
        raise ValueError(f"torchrun needs nproc_per_node and nnodes >= 1, got "
                         f"{nproc_per_node} and {nnodes}")
    argv = [python, "-m", "torch.distributed.run"]
    if nnodes == 1:
        argv.append("--standalone")
    else:
        if not rdzv_endpoint or not rdzv_id:
            raise ValueError("a multi-node torchrun needs rdzv_endpoint (HOST:PORT) and rdzv_id")
        argv += ["--nnodes", str(nnodes), "--rdzv-backend", "c10d",
                 "--rdzv-endpoint", rdzv_endpoint, "--rdzv-id", rdzv_id]
        if node_rank is not None:
            argv += ["--node-rank", str(node_rank)]
    argv += ["--nproc-per-node", str(nproc_per_node), "--max-restarts", "0"]
    if log_dir is not None:
        argv += ["--log-dir", str(log_dir)]
    return [*argv, str(script), str(spec_path)]

