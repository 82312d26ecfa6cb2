"""``dltop data synth KIND DIR``: a small learnable data set in the real format (docs/data.md)."""

from __future__ import annotations

import argparse

from dltop.errors import UserError
from dltop.textsafe import one_line


def cmd_data(args: argparse.Namespace) -> int:
    """Write the generated data set and list its files.

    Every refusal (a size or seed out of bounds, a symbolic link, existing files
    without ``--force``, a full or read-only directory) is one line, exit 2, and
    leaves the directory as it was.
    """
    from dltop import datagen

    for flag in ("train", "test"):
        value = getattr(args, flag)
        problem = None if value is None else datagen.size_problem(args.kind, flag, value)
        if problem:
            raise UserError(f"--{flag}: {problem}")
    if not 0 <= args.seed <= datagen.SEED_MAX:
        raise UserError(f"--seed: expected 0 to {datagen.SEED_MAX}, got {args.seed}")
    files = datagen.synth(args.kind, args.dir, train=args.train, test=args.test,
                          seed=args.seed, force=args.force)
    for path in files:
        print(f"{one_line(str(path))}  {path.stat().st_size} bytes")
    print(f"{args.kind}: {len(files)} files in {one_line(str(args.dir))} (use data = \"real\", "
          f"data_dir = \"{args.dir}\")")
    return 0
