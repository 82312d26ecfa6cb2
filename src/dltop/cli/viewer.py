"""``dltop tui`` (and ``dltop`` alone on a terminal): the live viewer."""

from __future__ import annotations

import argparse
import gc
import sys
from pathlib import Path
from typing import Any

DEFAULT_REFRESH_HZ = 4.0


def viewer_db(db: str | list[str] | None, read_only: bool,
              scratch: Path) -> tuple[Path, str | None]:
    """The database the viewer opens, and the note a study of several gets.

    One ``--db`` (or none) is the database itself. Several are staged into one study
    under ``scratch`` (:func:`dltop.store.study.stage`): a snapshot taken now, so only
    with ``--read-only``.

    Raises:
        UserError: several ``--db`` without ``--read-only``; a source that is not a
            readable dltop database.
    """
    from dltop.cli.common import db_list
    from dltop.errors import UserError
    from dltop.store import resolve_db_path

    paths = db_list(db)
    if len(paths) == 1:
        return resolve_db_path(paths[0]), None
    from dltop.store.study import stage, unique_paths

    given = unique_paths([str(p) for p in paths])
    if len(given) == 1:
        return resolve_db_path(given[0]), None
    if not read_only:
        raise UserError("tui: several --db are shown as one study, a snapshot: add "
                        "--read-only (the viewer steers and adds to one database)")
    study = scratch / "study.db"
    stage(given, study, absolute=True)
    return study, f"a snapshot of {len(given)} databases"


def cmd_tui(args: argparse.Namespace) -> int:
    import tempfile

    from dltop.telemetry.sampler import check_rate

    hz = getattr(args, "refresh_hz", None)
    hz = check_rate("--refresh-hz", DEFAULT_REFRESH_HZ if hz is None else hz)
    read_only = bool(getattr(args, "read_only", False))
    with tempfile.TemporaryDirectory(prefix="dltop-study-") as scratch:
        db_path, study = viewer_db(getattr(args, "db", None), read_only, Path(scratch))
        if study is not None:
            print(f"dltop: showing {study} (read-only)", file=sys.stderr)
        return _view(args, db_path, hz, read_only)


def _view(args: argparse.Namespace, db_path: Path, hz: float, read_only: bool) -> int:
    from dltop.jobs.rundir import runs_dir_of
    from dltop.store import connect
    from dltop.telemetry import open_gpu_backend
    from dltop.tui.app import DltopApp

    # Looking creates nothing: a missing database is created when a campaign is added
    # (the viewer shows the devices meanwhile). One that exists must be dltop's.
    if db_path.exists():
        connect(db_path, create=False).close()
    backend = None if getattr(args, "no_telemetry", False) else \
        open_gpu_backend(getattr(args, "fake_gpus", None))
    app = DltopApp(db_path, runs_dir_of(db_path), backend,
                   campaign_id=getattr(args, "campaign", None), device_hz=hz,
                   resume_orphans=not (getattr(args, "no_resume", False) or read_only),
                   freeze_gc=True, read_only=read_only)
    # Textual's strips cache themselves, so painting makes cyclic garbage and full
    # collections come every few seconds; freezing what start-up made (modules, classes,
    # about 55 000 objects) keeps them from scanning it, inside a keypress, each time.
    gc.collect()
    gc.freeze()
    return exit_status(app, app.run())


def exit_status(app: Any, result: str | None) -> int:
    """The exit status of ``dltop tui``: 1 when the viewer crashed, else 0.

    Textual prints a crash's traceback and returns from ``run()`` as if the user had
    quit; its ``return_code`` (1 after an unhandled exception) tells the two apart.
    """
    if app.return_code:
        print("dltop: the viewer crashed (traceback above); engines keep running: "
              "'dltop status' shows them", file=sys.stderr)
        return 1
    if result == "leave":
        print("dltop: the engine keeps running; re-attach with 'dltop', or 'dltop status'")
    return 0
