"""Bytes a database takes on disk (``dltop status``, ``dltop vacuum``).

Its own small module: ``dltop status`` prints the sizes and must start fast, so
nothing here imports sqlite-utils (benchmarks/startup.py).
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["StorageSizes", "deleted_bytes", "storage_sizes", "tree_bytes"]


@dataclass(frozen=True)
class StorageSizes:
    """Bytes on disk of a database: its file, WAL and run folders."""

    db_bytes: int
    wal_bytes: int
    runs_dir_bytes: int
    run_dirs: int

    @property
    def total_bytes(self) -> int:
        """Database, WAL and run folders (not the ``-shm`` index: 32 kB that exists
        while any connection, the measuring one included, is open)."""
        return self.db_bytes + self.wal_bytes + self.runs_dir_bytes


def storage_sizes(db_path: Path, runs_dir: Path) -> StorageSizes:
    """Bytes of the database file, its ``-wal``, and the run folders
    (``run-N`` directories and engine logs; symlinks are not followed)."""
    def size(p: Path) -> int:
        try:
            return p.lstat().st_size
        except OSError:
            return 0

    total, dirs = 0, 0
    if runs_dir.is_dir() and not runs_dir.is_symlink():
        total = tree_bytes(runs_dir)
        with contextlib.suppress(OSError):
            dirs = sum(1 for e in os.scandir(runs_dir)
                       if e.name.startswith("run-") and e.is_dir())
    return StorageSizes(size(db_path), size(Path(f"{db_path}-wal")), total, dirs)


def tree_bytes(path: Path) -> int:
    """Bytes of the files under ``path`` (a link counts its own size; never followed)."""
    try:
        if not stat.S_ISDIR(path.lstat().st_mode):
            return path.lstat().st_size
    except OSError:
        return 0
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, f)).st_size
    return total


def deleted_bytes(db: Any, sizes: Mapping[str, int], deleted: Mapping[str, int]) -> float:
    """Bytes the deleted rows (table → rows) take: each table's bytes with its indexes
    (``sizes``, SQLite's dbstat) times the share of its rows deleted. Each table is
    counted whole: ``dltop prune``'s estimate, never a hot read."""
    est = 0.0
    for table, gone in deleted.items():
        n = int(db.execute(f"select count(*) from {table}").fetchone()[0])
        est += sizes.get(table, 0) * min(1.0, gone / n) if n else 0.0
    return est
