"""Writing the report: the HTML page, or each figure as a paper-sized file with
``figures.md`` (its captions).

Nothing is written unless everything can be: the output path is checked first,
every figure is rendered in memory, and the HTML file replaces its target in one
``os.replace``. A path that cannot be written is a :class:`~dltop.errors.UserError`
naming it.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from dltop.errors import UserError
from dltop.report.content import Figure, Report
from dltop.report.leftout import omitted_lines
from dltop.report.specs import FORMATS, render, spec
from dltop.report.vlsize import paper_size
from dltop.textsafe import markdown_text

WIDTH_IN = {"single": 3.3, "double": 7.0}
"""Column widths of a two-column paper (IEEE/ACM), in inches."""


def check_file(path: Path) -> None:
    """Raise a :class:`UserError` naming ``path`` unless a file can be written there."""
    parent = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise UserError(f"{path}: is a directory (give a file name, e.g. report.html)")
    if not parent.is_dir():
        raise UserError(f"{path}: cannot write: no directory {parent}")
    if not os.access(parent, os.W_OK | os.X_OK) or (path.exists()
                                                    and not os.access(path, os.W_OK)):
        raise UserError(f"{path}: cannot write: permission denied")


def check_dir(path: Path) -> None:
    """Raise a :class:`UserError` naming ``path`` unless figures can be written into it
    (an existing, writable directory, or one its writable parent can hold)."""
    if path.exists() and not path.is_dir():
        raise UserError(f"{path}: not a directory")
    target = path if path.exists() else path.parent
    if not target.is_dir():
        raise UserError(f"{path}: cannot write: no directory {target}")
    if not os.access(target, os.W_OK | os.X_OK):
        raise UserError(f"{path}: cannot write: permission denied")


def write_file(path: Path, data: bytes | Iterable[bytes]) -> None:
    """Write ``data`` (or its chunks, in order) to ``path`` whole or not at all (a
    temporary file, then rename).

    Raises:
        UserError: the file cannot be written (the message names it).
    """
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent or ".")
        try:
            with os.fdopen(fd, "wb") as f:
                if isinstance(data, bytes):
                    f.write(data)
                else:
                    f.writelines(data)
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as exc:
        raise UserError(f"{path}: cannot write: {exc.strerror or exc}") from None


def drawn(report: Report) -> list[Figure]:
    """The report's figures that have data, runs last."""
    return [f for f in (*report.figures, *report.runs) if not f.omitted]


def render_figures(report: Report, fmt: str,
                   draw: Callable[[Mapping[str, Any], str], bytes] = render,
                   ) -> dict[str, bytes]:
    """File name → content of every figure at its paper size, and ``figures.md``.

    Raises:
        UserError: an unknown format.
    """
    if fmt not in FORMATS:
        raise UserError(f"--format {fmt!r}: use one of {', '.join(FORMATS)}")
    files: dict[str, bytes] = {}
    # Markdown: names and titles are data, their HTML shown as text (markdown_text)
    lines = [f"# {markdown_text(report.title)}: figures", ""]
    if report.empty:
        lines += [markdown_text(report.empty), ""]
    for number, fig in enumerate(drawn(report), 1):
        size, width = paper_size(fig)
        name = f"{fig.key}.{fmt}"
        files[name] = draw(spec(fig, size), fmt)
        lines += [f"## Figure {number}: {markdown_text(fig.title)}", "",
                  f"![{markdown_text(fig.title)}]({name})", "",
                  f"*Figure {number}.* {markdown_text(fig.title)}. {markdown_text(fig.caption)} "
                  f"({width} column, {WIDTH_IN[width]:g} in wide.)", ""]
    omitted = [(f.title, f.omitted) for f in (*report.figures, *report.runs) if f.omitted]
    if omitted:  # one line per reason, not one per figure
        lines += ["## Not drawn", ""]
        lines += [f"- {markdown_text(line)}." for line in omitted_lines(omitted)]
        lines.append("")
    if report.left_out:
        lines += [markdown_text(report.left_out), ""]
    if report.runs_note:
        lines += [markdown_text(report.runs_note), ""]
    files["figures.md"] = "\n".join(lines).encode()
    return files


def write_figures(directory: Path, files: Mapping[str, bytes]) -> list[Path]:
    """Write rendered figures into ``directory`` (created if missing); the paths written.

    Raises:
        UserError: the directory cannot be made or written.
    """
    check_dir(directory)
    try:
        directory.mkdir(exist_ok=True)
    except OSError as exc:
        raise UserError(f"{directory}: cannot create: {exc.strerror or exc}") from None
    out = []
    for name, data in files.items():
        write_file(directory / name, data)
        out.append(directory / name)
    return out
