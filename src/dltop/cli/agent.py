"""``dltop agent --out FILE [--hz H] [--gpus LIST] [--fake-gpus N]``: one node's telemetry.

The core is :mod:`dltop.telemetry.agent`; this only maps the options. It prints
nothing while it samples (a Slurm job's output is the runner's), and one line to
stderr when it stops.
"""

from __future__ import annotations

import argparse
import sys

from dltop.textsafe import one_line


def cmd_agent(args: argparse.Namespace) -> int:
    """Sample this node until SIGTERM / SIGINT or until the parent process is gone."""
    from dltop.telemetry.agent import AgentOptions, parse_gpus, run_agent

    options = AgentOptions(out=args.out, hz=args.hz,
                           gpus=parse_gpus(args.gpus) if args.gpus is not None else None,
                           node=args.node or "")
    reason = run_agent(options, fake_gpus=args.fake_gpus)
    print(f"dltop agent: stopped ({reason}), samples in {one_line(str(args.out))}", file=sys.stderr)
    return 0
