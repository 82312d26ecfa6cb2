"""``dltop tui`` (and ``dltop`` alone on a terminal): the live viewer."""

from __future__ import annotations

import argparse
import gc
import os
import sys
from typing import Any


def cmd_tui(args: argparse.Namespace) -> int:
    from dltop.jobs.engine import default_logs_dir
    from dltop.store import connect, resolve_db_path
    from dltop.store.db import DB_ENV
    from dltop.telemetry import open_gpu_backend
    from dltop.telemetry.sampler import check_rate
    from dltop.tui.app import DltopApp

    db_arg = getattr(args, "db", None)
    hz = check_rate("--refresh-hz", getattr(args, "refresh_hz", 4.0))
    db_path = resolve_db_path(db_arg)
    # A database named by the user must exist; the default one is created on first use.
    connect(db_path, create=not (db_arg or os.environ.get(DB_ENV)))
    backend = None if getattr(args, "no_telemetry", False) else \
        open_gpu_backend(getattr(args, "fake_gpus", None))
    app = DltopApp(db_path, default_logs_dir(db_path), backend,
                   campaign_id=getattr(args, "campaign", None), device_hz=hz,
                   resume_orphans=not getattr(args, "no_resume", False))
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
