"""Where dltop keeps things (XDG base directories) and search-path variables.

Standard library only, so any layer may import it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path


def _xdg(var: str, fallback: str) -> Path:
    return Path(os.environ.get(var) or str(Path.home() / fallback))


def data_dir() -> Path:
    """``$XDG_DATA_HOME/dltop``, falling back to ``~/.local/share/dltop``."""
    return _xdg("XDG_DATA_HOME", ".local/share") / "dltop"


def config_dir() -> Path:
    """``$XDG_CONFIG_HOME/dltop``, falling back to ``~/.config/dltop``."""
    return _xdg("XDG_CONFIG_HOME", ".config") / "dltop"


def library_path_with(directory: str, env: Mapping[str, str]) -> str:
    """``LD_LIBRARY_PATH`` with ``directory`` first, ahead of the value in ``env``.

    Args:
        directory: the library directory to search first.
        env: the environment whose ``LD_LIBRARY_PATH`` (if any) follows it.
    """
    old = env.get("LD_LIBRARY_PATH")
    return directory + (os.pathsep + old if old else "")


def stored_path(stored: str, db_path: str | os.PathLike[str]) -> str:
    """A path read from the database, absolute.

    dltop stores absolute paths. Databases written before it did held paths
    relative to the directory the engine ran in, which may not be the database's
    (``--db sub/d.db`` stored ``sub/d-runs/run-1/runner.log``). A run's files lie in
    the runs folder beside the database (``<db stem>-runs``), so a relative path
    that passes through that folder is resolved from it; any other against the
    database's directory.

    Args:
        stored: the path as stored (``runs.log_path``).
        db_path: the database file it was read from.
    """
    if not stored or os.path.isabs(stored):
        return stored
    db = Path(db_path).absolute()
    parts = Path(stored).parts
    runs = f"{db.stem}-runs"
    if runs in parts:
        cut = len(parts) - 1 - parts[::-1].index(runs)
        return str(db.parent.joinpath(*parts[cut:]))
    return str(db.parent / stored)
