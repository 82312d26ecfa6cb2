"""End-to-end tests' stand-in runner: a fake framework interpreter behind
``$DLTOP_PYTHON_<FRAMEWORK>`` that the engine cannot tell from the runner's Python, and
the ``dltop`` commands around its database."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any


def fake_python(path: Path, program: Path) -> Path:
    """A shell script at ``path``: the real Python for ``-c`` (the engine's interpreter
    probe), ``program`` with the runner's arguments otherwise."""
    path.write_text(f'#!/bin/sh\nif [ "$1" = "-c" ]; then exec "{sys.executable}" "$@"; fi\n'
                    f'exec "{sys.executable}" "{program}" "$@"\n')
    path.chmod(0o755)
    return path


def query(db: Path, sql: str) -> list[dict[str, Any]]:
    """Every row of ``sql`` on ``db`` as a dict (a connection of its own, closed)."""
    conn = sqlite3.connect(db)
    conn.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in conn.execute(sql)]
    finally:
        conn.close()


def campaign_status(db: Path) -> str | None:
    """The (first) campaign's status; None before an engine has written one. A read-only
    look: it never creates the file or takes a writer's lock."""
    if not db.exists():
        return None
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        row = conn.execute("select status from campaigns").fetchone()
    except sqlite3.OperationalError:  # the schema is not there yet
        return None
    finally:
        conn.close()
    return None if row is None else str(row[0])


class DltopEnv:
    """A database, a profile and ``dltop`` commands whose ``framework`` runs ``program``."""

    def __init__(self, tmp: Path, program: Path, profile: str,
                 framework: str = "torch") -> None:
        self.db = tmp / "d.db"
        fake = fake_python(tmp / "fake-python", program)
        self.profile = tmp / "p.toml"
        self.profile.write_text(profile)
        self.env = {**os.environ, "DLTOP_DB": str(self.db),
                    f"DLTOP_PYTHON_{framework.upper()}": str(fake)}

    def dltop(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``dltop ARGS`` on this database; a traceback fails the test."""
        res = subprocess.run([sys.executable, "-m", "dltop", *args], capture_output=True,
                             text=True, env=self.env, timeout=240)
        assert "Traceback" not in res.stderr, res.stderr
        return res

    def rows(self, sql: str) -> list[dict[str, Any]]:
        """:func:`query` on this database."""
        return query(self.db, sql)

    def export(self, *args: str) -> dict[str, Any]:
        """``dltop export --format json ARGS``, parsed (it must succeed)."""
        res = self.dltop("export", "--format", "json", *args)
        assert res.returncode == 0, res.stderr
        return dict(json.loads(res.stdout))
