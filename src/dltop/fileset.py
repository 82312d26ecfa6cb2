"""Files written into one directory all or nothing, never through a symbolic link.

``dltop data synth`` writes several files that only make sense together (an
MNIST set is four). Each is written to a temporary name in the target directory,
created ``O_CREAT | O_EXCL | O_NOFOLLOW`` through the directory's descriptor, and
renamed over its final name only when every file of the set is complete; on any
failure the temporaries are removed and no file of the set has changed. A target
directory that is a symbolic link, a data file that is one, or (without
``force``) an existing data file is refused before anything is written. A full or
read-only file system is one :class:`~dltop.errors.UserError` naming the
directory.

Standard library only: part of the headless core.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

from dltop.errors import UserError

TEMP_PREFIX = ".dltop-tmp-"
"""Temporary files start with this (hidden; removed on failure)."""


def write_error(where: Path, exc: OSError) -> UserError:
    """``exc`` from writing into ``where`` as one line that says what to do."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        why = "no space left on the device (or the quota is used up)"
    elif exc.errno == errno.EROFS:
        why = "read-only file system"
    elif exc.errno in (errno.EACCES, errno.EPERM):
        why = "permission denied (not writable by this user)"
    else:
        why = exc.strerror or str(exc)
    return UserError(f"{where}: cannot write: {why}; nothing was written")


class FileSet:
    """A set of files in ``directory``: :meth:`add` each, then :meth:`commit`.

    Use as a context manager: leaving it without :meth:`commit` (an exception)
    removes what :meth:`add` wrote. ``names`` are checked at once (see the module).
    """

    def __init__(self, directory: Path, names: Sequence[str], *, force: bool = False) -> None:
        self.directory = Path(directory)
        self._temps: dict[str, str] = {}
        self._created = [p for p in (self.directory, *self.directory.parents)
                         if not os.path.lexists(p)]
        """Directories this set creates: removed again when it fails (if still empty)."""
        self._fd = _open_dir(self.directory)
        try:
            _check_targets(self.directory, self._fd, names, force)
        except BaseException:
            os.close(self._fd)
            self._remove_created()
            raise

    def add(self, name: str, data: bytes) -> Path:
        """Write ``data`` to a temporary file that :meth:`commit` renames to ``name``."""
        temp = f"{TEMP_PREFIX}{os.getpid()}-{len(self._temps)}-{name}"
        try:
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                         | getattr(os, "O_CLOEXEC", 0), 0o644, dir_fd=self._fd)
        except OSError as exc:
            raise write_error(self.directory, exc) from None
        self._temps[name] = temp
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())  # on disk before the rename makes it the data file
        except OSError as exc:
            raise write_error(self.directory, exc) from None
        return self.directory / name

    def commit(self) -> list[Path]:
        """Rename every temporary file to its name (over an existing one); return the paths."""
        done = []
        try:
            for name, temp in list(self._temps.items()):
                os.replace(temp, name, src_dir_fd=self._fd, dst_dir_fd=self._fd)
                del self._temps[name]
                done.append(self.directory / name)
        except OSError as exc:
            raise write_error(self.directory, exc) from None
        return done

    def discard(self) -> None:
        """Remove the temporary files not yet committed."""
        for temp in self._temps.values():
            with contextlib.suppress(OSError):  # gone already: nothing else to undo
                os.unlink(temp, dir_fd=self._fd)
        self._temps.clear()

    def __enter__(self) -> FileSet:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        try:
            self.discard()
        finally:
            os.close(self._fd)
        if exc is not None:
            self._remove_created()

    def _remove_created(self) -> None:
        for path in self._created:  # innermost first; rmdir leaves a non-empty one
            try:
                path.rmdir()
            except OSError:
                return


def _open_dir(directory: Path) -> int:
    """Create ``directory`` if needed and open it, refusing a symbolic link."""
    try:
        st = os.lstat(directory)
    except FileNotFoundError:
        try:
            directory.mkdir(parents=True, exist_ok=True)  # exists meanwhile: checked below
        except OSError as exc:
            raise write_error(directory, exc) from None
        st = os.lstat(directory)
    if stat.S_ISLNK(st.st_mode):
        raise UserError(f"{directory}: is a symbolic link; give the real directory "
                        f"({os.path.realpath(directory)}) if it is the one meant")
    if not stat.S_ISDIR(st.st_mode):
        raise UserError(f"{directory}: exists and is not a directory")
    try:  # O_NOFOLLOW: a link swapped in since the check is refused too
        return os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
                       | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UserError(f"{directory}: is a symbolic link") from None
        raise write_error(directory, exc) from None


def _check_targets(directory: Path, fd: int, names: Sequence[str], force: bool) -> None:
    existing = []
    for name in names:
        try:
            st = os.lstat(name, dir_fd=fd)
        except FileNotFoundError:
            continue
        if stat.S_ISLNK(st.st_mode):
            raise UserError(f"{directory / name}: is a symbolic link; dltop does not write "
                            "through one (remove it)")
        if not stat.S_ISREG(st.st_mode):
            raise UserError(f"{directory / name}: exists and is not a regular file")
        existing.append(name)
    if existing and not force:
        raise UserError(f"{directory / existing[0]}: exists"
                        + (f" (and {len(existing) - 1} more of the set)" if len(existing) > 1
                           else "")
                        + "; pass --force to replace the data set")
