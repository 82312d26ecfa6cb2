"""Bytes a database takes on disk (``dltop status``, ``dltop vacuum``).

Its own small module: ``dltop status`` prints the sizes and must start fast, so
nothing here imports sqlite-utils (benchmarks/startup.py).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["StorageSizes", "storage_sizes"]


@dataclass(frozen=True)
class StorageSizes:
    """Bytes on disk of a database: its file, WAL, shared memory and run folders."""

    db_bytes: int
    wal_bytes: int
    shm_bytes: int
    runs_dir_bytes: int
    run_dirs: int

    @property
    def total_bytes(self) -> int:
        """Database, WAL and run folders (not the ``-shm`` index: 32 kB that exists
        while any connection, the measuring one included, is open)."""
        return self.db_bytes + self.wal_bytes + self.runs_dir_bytes


def storage_sizes(db_path: Path, runs_dir: Path) -> StorageSizes:
    """Bytes of the database file, its ``-wal`` and ``-shm``, and the run folders
    (``run-N`` directories and engine logs; symlinks are not followed)."""
    def size(p: Path) -> int:
        try:
            return p.lstat().st_size
        except OSError:
            return 0

    total, dirs = 0, 0
    if runs_dir.is_dir() and not runs_dir.is_symlink():
        for root, subdirs, files in os.walk(runs_dir):
            if Path(root) == runs_dir:
                dirs = sum(1 for d in subdirs if d.startswith("run-"))
            total += sum(size(Path(root) / f) for f in files)
    return StorageSizes(size(db_path), size(Path(f"{db_path}-wal")),
                        size(Path(f"{db_path}-shm")), total, dirs)
