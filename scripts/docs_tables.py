"""Regenerate the tables in docs that ``dltop`` itself prints (issue 40: the numbers in
docs come from the tool).

A block in a Markdown file under docs/ reads::

    <!-- dltop: export --db docs/gpu-runs/2026-11-26-h200-llm/campaign.db --table summary -->

    ...what that command prints...

    <!-- /dltop -->

This script runs each block's command with this checkout's dltop (``python -m dltop``
under the interpreter running the script, ``src/`` first on the path, from the
repository root) and writes its output between the two markers::

    python scripts/docs_tables.py            # rewrite every stale block
    python scripts/docs_tables.py --check    # exit 1 with a diff when one is stale

Only commands that read (``export``, ``compare``) are run, each naming its database
(``--db``, a file committed beside the docs: never the user's default), and never with
``-o``. A
command that fails stops the script (exit 2, naming the file and line) with nothing
written. Files: those given, else every ``*.md`` under docs/ (the raw run folders of
docs/gpu-runs/ included: they hold no blocks, and scanning them costs nothing).
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OPEN = re.compile(r"<!--\s*dltop:(?P<cmd>.*?)-->", re.DOTALL)
CLOSE = "<!-- /dltop -->"
READING_COMMANDS = ("export", "compare")
RERUN = "run scripts/docs_tables.py"


class BlockError(Exception):
    """A block that cannot be regenerated: FILE:LINE and the reason."""


@dataclass(frozen=True)
class Block:
    """One marked block: its command and where its content lies in the file's text."""

    path: Path
    line: int
    args: tuple[str, ...]
    start: int  # first character after the opening marker
    end: int  # first character of the closing marker


def _where(path: Path, line: int) -> str:
    try:
        shown = path.resolve().relative_to(ROOT)
    except ValueError:
        shown = path
    return f"{shown}:{line}"


def _fenced(text: str) -> list[tuple[int, int]]:
    """Character spans of the file's fenced code blocks (``` or ~~~): a marker shown
    there as an example is not a block."""
    spans, start, fence, pos = [], 0, "", 0
    for line in text.splitlines(keepends=True):
        stripped = line.lstrip()
        if not fence and stripped[:3] in ("```", "~~~"):
            fence, start = stripped[:3], pos
        elif fence and stripped.startswith(fence):
            spans.append((start, pos + len(line)))
            fence = ""
        pos += len(line)
    if fence:
        spans.append((start, pos))
    return spans


def find_blocks(path: Path, text: str) -> list[Block]:
    """The marked blocks of one file, in order (markers inside code fences are text).

    Raises:
        BlockError: a block without its closing marker, a command that is not one of
            ``export``/``compare``, names no ``--db`` or writes a file (``-o``).
    """
    fenced = _fenced(text)

    def after(find: Callable[[int], int], at: int) -> int:
        """FIND's first hit from AT outside the code fences, or -1."""
        while (i := find(at)) >= 0 and any(lo <= i < hi for lo, hi in fenced):
            at = i + 1
        return i

    def find_open(at: int) -> int:
        m = OPEN.search(text, at)
        return m.start() if m else -1

    def find_close(at: int) -> int:
        return text.find(CLOSE, at)

    blocks = []
    pos = 0
    while (begin := after(find_open, pos)) >= 0:
        m = OPEN.match(text, begin)
        assert m is not None
        line = text.count("\n", 0, m.start()) + 1
        end = after(find_close, m.end())
        nxt = after(find_open, m.end())
        if end < 0 or 0 <= nxt < end:
            raise BlockError(f"{_where(path, line)}: a 'dltop:' block without its "
                             f"closing '{CLOSE}'")
        try:
            args = tuple(shlex.split(m.group("cmd")))
        except ValueError as exc:
            raise BlockError(f"{_where(path, line)}: the command does not parse: "
                             f"{exc}") from None
        if not args or args[0] not in READING_COMMANDS:
            raise BlockError(f"{_where(path, line)}: the command must be one of "
                             f"{', '.join(READING_COMMANDS)}, got "
                             f"{args[0] if args else 'nothing'!r}")
        if not any(a == "--db" or a.startswith("--db=") for a in args):
            raise BlockError(f"{_where(path, line)}: the command names no database "
                             "(--db FILE, a file committed with the docs)")
        if any(a in ("-o", "--output") or a.startswith("--output=") for a in args):
            raise BlockError(f"{_where(path, line)}: the command writes a file (-o); "
                             "a block shows what the command prints")
        blocks.append(Block(path, line, args, m.end(), end))
        pos = end + len(CLOSE)
    return blocks


def run_dltop(block: Block) -> str:
    """What ``dltop ARGS`` prints, run from the repository root with this checkout's code.

    Raises:
        BlockError: the command exited non-zero (its stderr in the message).
    """
    env = {k: v for k, v in os.environ.items() if k not in ("DLTOP_DB", "COLUMNS")}
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])])
    env["NO_COLOR"] = "1"
    res = subprocess.run([sys.executable, "-m", "dltop", *block.args], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300)
    if res.returncode != 0:
        raise BlockError(f"{_where(block.path, block.line)}: dltop {shlex.join(block.args)} "
                         f"exited {res.returncode}: {res.stderr.strip() or res.stdout.strip()}")
    return res.stdout


def render(text: str, blocks: list[Block], outputs: list[str]) -> str:
    """TEXT with each block's content replaced by its command's output."""
    parts, pos = [], 0
    for block, out in zip(blocks, outputs, strict=True):
        parts += [text[pos:block.start], "\n\n", out.strip("\n"), "\n\n"]
        pos = block.end
    parts.append(text[pos:])
    return "".join(parts)


def default_files() -> list[Path]:
    return sorted((ROOT / "docs").rglob("*.md"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    ap.add_argument("files", nargs="*", type=Path,
                    help="Markdown files (default: every *.md under docs/)")
    ap.add_argument("--check", action="store_true",
                    help="change nothing; exit 1 with a diff when a block is stale")
    args = ap.parse_args(argv)
    files = args.files or default_files()
    try:
        found = []
        for path in files:
            text = path.read_text(encoding="utf-8")
            blocks = find_blocks(path, text)
            if blocks:
                found.append((path, text, blocks))
        every = [b for _, _, bs in found for b in bs]
        # the exports are independent processes, each mostly start-up: two at a time
        with ThreadPoolExecutor(max_workers=2) as pool:
            outputs = dict(zip(every, pool.map(run_dltop, every), strict=True))
    except (BlockError, OSError) as exc:
        print(f"docs_tables: {exc}", file=sys.stderr)
        return 2
    stale = 0
    for path, text, blocks in found:
        new = render(text, blocks, [outputs[b] for b in blocks])
        if new == text:
            continue
        stale += 1
        name = _where(path, 0).rsplit(":", 1)[0]
        if args.check:
            sys.stdout.writelines(difflib.unified_diff(
                text.splitlines(keepends=True), new.splitlines(keepends=True),
                f"{name} (committed)", f"{name} (what dltop prints now)"))
        else:
            path.write_text(new, encoding="utf-8")
            print(f"docs_tables: rewrote {name}")
    n = sum(len(bs) for _, _, bs in found)
    if args.check and stale:
        print(f"docs_tables: {stale} file(s) disagree with what dltop prints for their "
              f"blocks; {RERUN} to rewrite them, then review and commit the diff",
              file=sys.stderr)
        return 1
    print(f"docs_tables: {n} block(s) in {len(found)} file(s) "
          f"{'agree with dltop' if args.check else 'up to date'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
