"""``dltop import --db TARGET SOURCE.db...``: campaigns of other databases copied in."""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from dltop.errors import UserError
from dltop.textsafe import counted, one_line


def cmd_import(args: argparse.Namespace) -> int:
    """Check every source, stage their campaigns, then copy them into the target in one
    transaction; print what each source campaign became."""
    from dltop.store import resolve_db_path
    from dltop.store.importer import FAULT_ENV, import_file
    from dltop.store.study import stage, unique_paths

    target = resolve_db_path(args.db)
    sources = unique_paths(args.sources, what="source")
    if target.is_dir():
        raise UserError(f"--db {target}: a directory, not a database file")
    with tempfile.TemporaryDirectory(prefix="dltop-import-") as tmp:
        staging = Path(tmp) / "staging.db"
        # every source read and checked before the target is opened: bad input leaves it
        staged = stage(sources, staging, target=target, absolute=True)
        copied = {c.origin_id: c for c in import_file(
            target, staging, fault=bool(os.environ.get(FAULT_ENV)))}
    added = 0
    for src in staged:
        for c in src.copied:
            where = f"{one_line(src.given)}: campaign {c.origin_id} `{one_line(c.name)}`"
            final = copied.get(c.new_id) if c.new_id is not None else None
            if final is not None and final.new_id is not None:
                added += 1
                print(f"{where}: imported as campaign {final.new_id}")
            else:
                why = c.skipped if final is None else final.skipped
                if c.new_id is None:
                    why = "the same campaign as another source's (its UUID)"
                print(f"{where}: not imported ({why})")
    print(f"{counted(added, 'campaign')} imported into {one_line(str(target))}; run folders "
          "stay where they are ('dltop log' reads them there)")
    return 0
