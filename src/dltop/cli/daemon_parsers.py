"""The parsers of dltop's long-running commands: ``serve`` and ``exporter`` (they listen
on a port) and ``agent`` (one node's telemetry for a Slurm job); out of parser.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def serve_parsers(sub: Any, db_arg: Any, fake_arg: Any) -> None:
    """``dltop serve`` (the TUI in a browser) and ``dltop exporter`` (Prometheus metrics)."""
    srv = sub.add_parser("serve", help="the TUI in a browser (textual-serve), on 127.0.0.1 "
                                       "unless --host says otherwise; see docs/serve.md")
    exp = sub.add_parser("exporter", help="Prometheus metrics of the GPUs, the host and the "
                                          "runs in progress (dcgm-exporter names)")
    for sp, port in ((srv, 8000), (exp, 9400)):
        db_arg(sp)
        fake_arg(sp)
        sp.add_argument("--host", default="127.0.0.1",
                        help="address to bind (default 127.0.0.1: reach it through an SSH "
                             "tunnel" + ("" if sp is srv else "; there is no authentication")
                             + ")")
        sp.add_argument("--port", type=int, default=port, help=f"port ({port})")
    exp.add_argument("--no-gpu-metrics", action="store_true",
                     help="leave out the DCGM_FI_* GPU series: dcgm-exporter serves them on "
                          "this host (the runs, campaigns and host series stay)")
    srv.add_argument("--metrics-port", type=int, default=None, metavar="PORT",
                     help="also serve Prometheus metrics on this port (as dltop exporter)")
    srv.add_argument("--token-file", default=None, metavar="PATH",
                     help="read the token from this file (mode 0600) instead of a new "
                          "random one per start")
    srv.add_argument("--control", action="store_true",
                     help="let the page steer dltop (add, pause, cancel, retry, remove, "
                          "quit the engine); the default is read-only")


def agent_parser(sub: Any, fake_arg: Any) -> None:
    """``dltop agent``: one node's telemetry as JSON lines (started by a Slurm job)."""
    ag = sub.add_parser("agent", help="sample this node's GPUs and host into a JSON-lines "
                                      "file until SIGTERM (each node of a Slurm job runs one; "
                                      "docs/cluster.md)")
    ag.add_argument("--out", type=Path, required=True, metavar="FILE",
                    help="the file to append to (agent-<node>.jsonl in the run's folder)")
    ag.add_argument("--hz", type=float, default=10.0, help="GPU sampling rate (10)")
    ag.add_argument("--gpus", default=None, metavar="LIST",
                    help="only these GPUs: indexes or UUIDs, comma-separated (default: "
                         "$CUDA_VISIBLE_DEVICES, else every GPU of the node)")
    ag.add_argument("--node", default=None,
                    help="node name in every line (default: $SLURMD_NODENAME, else the "
                         "host name)")
    fake_arg(ag)
