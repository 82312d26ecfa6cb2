"""glibc's default malloc against a fixed policy: two bare loops sharing one core.

The duet of harness_duet.py with a bare loop on each side, the same model and batch,
one side started under :data:`harness_duet.FIXED_MALLOC` and the other under glibc's
defaults (which side alternates round by round, so the duet's own start-order bias,
about -1 % for the side started second, cancels). Each round's ``fixed/default`` is the
fixed side's mean step over the default side's over their overlap. Why: a PyTorch CPU
step allocates its activations with malloc; under glibc's default policy the mmap
threshold follows each process's history, and a step may map and zero its buffers
afresh every time (measured: 4 096-12 256 page faults a step on alexnet-r, batch 128).

    nice -n -15 .venv/bin/python benchmarks/malloc_duet.py --model alexnet-r --rounds 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
from pathlib import Path
from typing import Any

import harness_duet as hd

ORIGINAL_CONTROL = hd._control_side
BASE_ENV = {k: v for k, v in os.environ.items() if k not in hd.FIXED_MALLOC}


def _env(fixed: bool) -> None:
    """This process's environment (which each side inherits as it starts)."""
    os.environ.clear()
    os.environ.update(BASE_ENV)
    if fixed:
        os.environ.update(hd.FIXED_MALLOC)


def one_round(model: str, batch: int, iterations: int, cpu: int, workdir: Path,
              fixed_second: bool) -> float | None:
    """fixed/default of one duet round (None: too little overlap)."""
    def control(*args: Any, **kw: Any) -> Any:
        _env(fixed_second)
        return ORIGINAL_CONTROL(*args, **kw)

    hd._control_side = control  # the second side starts through it
    _env(not fixed_second)  # the first (bare) side
    try:
        r = hd.duet_round("torch", model, batch, iterations, 5, cpu, workdir, side="control")
    finally:
        _env(False)
        hd._control_side = ORIGINAL_CONTROL
    if r is None:
        return None
    return r.ratio if fixed_second else 1 / r.ratio


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="alexnet-r")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=5, help="each round: both orders")
    ap.add_argument("--iterations", type=int, default=40)
    ap.add_argument("--out", type=Path, metavar="FILE")
    args = ap.parse_args()
    from dltop.jobs.environment import core_order

    cpu = core_order()[0]
    got: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.rounds):
            for fixed_second in ((True, False) if i % 2 == 0 else (False, True)):
                ratio = one_round(args.model, args.batch, args.iterations, cpu, Path(tmp),
                                  fixed_second)
                if ratio is None:
                    continue
                got.append({"fixed_second": fixed_second, "fixed_over_default": ratio})
                print(f"round {i + 1} ({'fixed second' if fixed_second else 'fixed first'}):"
                      f" fixed/default {ratio:.4f}", flush=True)
    ratios = [g["fixed_over_default"] for g in got]
    lo, hi = hd.median_interval(ratios)
    print(f"torch {args.model} b{args.batch}: fixed/default {statistics.median(ratios):.4f} "
          f"95% [{lo:.4f}, {hi:.4f}] ({len(ratios)} rounds)")
    if args.out is not None:
        args.out.write_text(json.dumps(got, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
