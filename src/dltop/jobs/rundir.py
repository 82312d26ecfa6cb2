"""Per-run folders, ``<db dir>/<db stem>-runs/run-N/``: created private, never through a link.

The folder holds what the engine hands a runner (``spec.json``) and what the runner
prints (``runner.log``). Another user who can write the runs directory (or a
folder left world-writable) could plant ``run-1/spec.json -> /victim`` and have
dltop overwrite the victim, or a ``runner.log`` link that dltop appends to. So:

- the runs directory is created ``0700``; an existing one must be a directory
  owned by this user and not writable by group or others (a symlink to such a
  directory, itself ours, is accepted: runs moved to a bigger disk);
- ``run-N`` is created ``0700`` relative to the runs directory's descriptor (a
  rename of the path under us changes nothing). If ``run-N`` exists already:
  a symlink, a non-directory or another user's directory fails the run with
  :class:`UnsafeRunDir` (nothing is written; the reason is stored with the run);
  a directory of ours is what an earlier database at this path left (run ids
  restart with a new database) and is moved aside to ``run-N.old-<ns>``;
- ``spec.json`` and ``runner.log`` (and ``server.log`` for a serve run whose runner
  starts a server) are created ``0600`` with
  ``O_CREAT | O_EXCL | O_NOFOLLOW`` relative to ``run-N``'s descriptor: a file or
  link already there is never opened.

``dltop prune`` removes folders with :func:`remove_run_dirs` (symlinks are
unlinked, never followed).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dltop.store.sizes import tree_bytes

DIR_MODE = 0o700
FILE_MODE = 0o600
SERVER_LOG = "server.log"
"""A serve run's started server writes here (issue 41), beside ``runner.log``."""
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class UnsafeRunDir(Exception):
    """A run folder (or the runs directory) dltop refuses to write into; says why."""


@dataclass(frozen=True)
class RunFiles:
    """A prepared run folder: the spec written, the (empty) log created."""

    dir: Path
    spec_path: Path
    log_path: Path


def runs_dir_of(db_path: Path) -> Path:
    """Per-run folders live beside the database: ``<db dir>/<db stem>-runs/``.

    Absolute, so the ``runs.log_path`` stored under it is valid from any directory
    (``dltop log`` run elsewhere with the same database).
    """
    return db_path.absolute().parent / f"{db_path.stem}-runs"


def run_dir(runs_dir: Path, run_id: int) -> Path:
    """``<runs dir>/run-<id>``."""
    return runs_dir / f"run-{run_id}"


def ensure_private_dir(path: Path, uid: int | None = None) -> None:
    """Create ``path`` with mode 0700 if missing, else check that it is safe to write in.

    Raises:
        UnsafeRunDir: it is not a directory, is owned by another user (or is a link
            owned by another user), or is writable by group or others.
    """
    uid = os.getuid() if uid is None else uid
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        path.mkdir(mode=DIR_MODE)
        os.chmod(path, DIR_MODE)  # mkdir's mode is cut by the umask
        return
    except FileExistsError:
        pass
    link = path.lstat()
    if stat.S_ISLNK(link.st_mode) and link.st_uid != uid:
        raise UnsafeRunDir(f"{path}: a symbolic link owned by uid {link.st_uid}, not you "
                           f"(uid {uid}); dltop writes run files only in your own directory")
    try:
        st = path.stat()
    except OSError as exc:
        raise UnsafeRunDir(f"{path}: {exc.strerror}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafeRunDir(f"{path}: not a directory")
    if st.st_uid != uid:
        raise UnsafeRunDir(f"{path}: owned by uid {st.st_uid}, not you (uid {uid}); dltop "
                           "writes run files only in your own directory")
    if st.st_mode & 0o022:
        raise UnsafeRunDir(f"{path}: writable by group or others (mode "
                           f"{stat.S_IMODE(st.st_mode):04o}); make it yours alone: "
                           f"chmod 700 {path}")


def prepare_run_dir(runs_dir: Path, run_id: int, spec: Mapping[str, Any],
                    uid: int | None = None) -> RunFiles:
    """Create ``run-<id>`` (0700) with ``spec.json`` written and ``runner.log`` empty (0600).

    Raises:
        UnsafeRunDir: the runs directory or an existing ``run-<id>`` is unsafe
            (module docstring); nothing was written.
    """
    uid = os.getuid() if uid is None else uid
    ensure_private_dir(runs_dir, uid)
    path = run_dir(runs_dir, run_id)
    name = path.name
    parent = os.open(runs_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        try:
            os.mkdir(name, DIR_MODE, dir_fd=parent)
        except FileExistsError:
            _move_aside(parent, name, path, uid)
            os.mkdir(name, DIR_MODE, dir_fd=parent)
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                     dir_fd=parent)
    finally:
        os.close(parent)
    try:
        st = os.fstat(fd)
        if st.st_uid != uid:  # replaced between mkdir and open: not ours
            raise UnsafeRunDir(f"{path}: owned by uid {st.st_uid}, not you (uid {uid})")
        os.fchmod(fd, DIR_MODE)
        _write_new(fd, "spec.json", json.dumps(dict(spec), indent=1).encode(), path)
        _write_new(fd, "runner.log", b"", path)
        if dict(spec.get("options") or {}).get("server_command"):
            _write_new(fd, SERVER_LOG, b"", path)  # the log of the server the runner starts
    finally:
        os.close(fd)
    return RunFiles(path, path / "spec.json", path / "runner.log")


def _move_aside(parent: int, name: str, path: Path, uid: int) -> None:
    st = os.stat(name, dir_fd=parent, follow_symlinks=False)
    if stat.S_ISLNK(st.st_mode):
        target = os.readlink(name, dir_fd=parent)
        raise UnsafeRunDir(f"{path}: a symbolic link (to {target}), not a folder dltop "
                           "made; dltop never writes through one. Remove it")
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafeRunDir(f"{path}: exists and is not a directory. Remove it")
    if st.st_uid != uid:
        raise UnsafeRunDir(f"{path}: a folder owned by uid {st.st_uid}, not you (uid {uid}). "
                           "Remove it")
    # An earlier database at this path left it (run ids restart): keep it, aside.
    os.rename(name, f"{name}.old-{time.time_ns()}", src_dir_fd=parent, dst_dir_fd=parent)


def _write_new(dir_fd: int, name: str, data: bytes, where: Path) -> None:
    try:
        fd = os.open(name, _NEW_FILE, FILE_MODE, dir_fd=dir_fd)
    except FileExistsError:
        raise UnsafeRunDir(f"{where / name}: appeared in a new run folder; not "
                           "written") from None
    try:
        os.fchmod(fd, FILE_MODE)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def run_dir_paths(runs_dir: Path, run_ids: Iterable[int]) -> list[Path]:
    """The folders of these runs that exist: ``run-N`` and ``run-N.old-*`` (symlinks too)."""
    wanted = {f"run-{i}" for i in run_ids}
    try:
        names = os.listdir(runs_dir)
    except OSError:
        return []
    return sorted(runs_dir / n for n in names if n.partition(".old-")[0] in wanted)


def remove_run_dirs(paths: Iterable[Path]) -> int:
    """Delete run folders (a symlink is unlinked, its target untouched); bytes freed."""
    freed = 0
    for path in paths:
        size = tree_bytes(path)
        try:
            if stat.S_ISDIR(path.lstat().st_mode):
                shutil.rmtree(path)  # fd-based on Linux: never follows a link inside
            else:
                path.unlink()
        except FileNotFoundError:
            continue
        freed += size
    return freed
