"""``dltop data synth KIND DIR``: a small learnable data set in the real format (docs/data.md)."""

from __future__ import annotations

import argparse

from dltop.errors import UserError


def cmd_data(args: argparse.Namespace) -> int:
    """Write the generated data set and list its files."""
    from dltop import datagen

    for flag in ("train", "test"):
        value = getattr(args, flag)
        if value is not None and value < (1 if args.kind == "ptb" else 10):
            raise UserError(f"--{flag}: expected at least {1 if args.kind == 'ptb' else 10} "
                            f"({'words' if args.kind == 'ptb' else 'samples, one per class'}), "
                            f"got {value}")
    if args.dir.exists() and not args.dir.is_dir():
        raise UserError(f"{args.dir}: exists and is not a directory")
    files = datagen.synth(args.kind, args.dir, train=args.train, test=args.test,
                          seed=args.seed)
    for path in files:
        print(f"{path}  {path.stat().st_size} bytes")
    print(f"{args.kind}: {len(files)} files in {args.dir} (use data = \"real\", "
          f"data_dir = \"{args.dir}\")")
    return 0
