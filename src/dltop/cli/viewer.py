"""``dltop tui`` (and ``dltop`` alone on a terminal): the live viewer."""

from __future__ import annotations

import argparse
import gc
import sys
from typing import Any

DEFAULT_REFRESH_HZ = 4.0


def cmd_tui(args: argparse.Namespace) -> int:
    from dltop.jobs.engine import default_logs_dir
    from dltop.store import connect, resolve_db_path
    from dltop.telemetry import open_gpu_backend
    from dltop.telemetry.sampler import check_rate
    from dltop.tui.app import DltopApp

    hz = getattr(args, "refresh_hz", None)
    hz = check_rate("--refresh-hz", DEFAULT_REFRESH_HZ if hz is None else hz)
    db_path = resolve_db_path(getattr(args, "db", None))
    # Looking creates nothing: a missing database is created when a campaign is added
    # (the viewer shows the devices meanwhile). One that exists must be dltop's.
    if db_path.exists():
        connect(db_path, create=False).close()
    backend = None if getattr(args, "no_telemetry", False) else \
        open_gpu_backend(getattr(args, "fake_gpus", None))
    read_only = bool(getattr(args, "read_only", False))
    app = DltopApp(db_path, default_logs_dir(db_path), backend,
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
