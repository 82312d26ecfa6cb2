"""``dltop --help`` and every subcommand's ``--help`` against themselves and the docs: a
new user reads the docs and types what they show, then asks ``--help`` what it means."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from dltop.cli import parser as cli_parser
from dltop.store import connect

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _subparsers(p: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _all_parsers() -> Iterator[tuple[str, argparse.ArgumentParser]]:
    todo = [("dltop", cli_parser.build_parser())]
    while todo:
        name, p = todo.pop()
        yield name, p
        todo.extend((f"{name} {k}", sp) for k, sp in _subparsers(p).items())


def _options(p: argparse.ArgumentParser) -> set[str]:
    return {o for a in p._actions for o in a.option_strings}


def test_the_description_names_every_command() -> None:
    commands = _subparsers(cli_parser.build_parser())
    named = set(re.findall(r"[a-z]+", cli_parser.DESCRIPTION))
    assert sorted(set(commands) - named) == []
    assert "``" not in cli_parser.DESCRIPTION  # reST quotes printed raw by --help


def test_every_argument_says_what_it_is() -> None:
    """An option or positional without help leaves its meaning and default unsaid (`runs
    --limit` took -3 silently and printed every run)."""
    bare = [f"{name} {a.option_strings or a.dest}" for name, p in _all_parsers()
            for a in p._actions
            if not a.help and not isinstance(a, (argparse._HelpAction,
                                                 argparse._SubParsersAction))]
    assert bare == []


def test_the_top_usage_and_its_options_name_each_value_alike() -> None:
    """The top level's usage is written by hand: each value it names is the one the
    option's own line shows (it said --refresh-hz HZ above --refresh-hz GLOBAL_REFRESH_HZ)."""
    top = cli_parser.build_parser()
    usage, text = top.format_usage(), top.format_help()
    valued = [a.option_strings[0] for a in top._actions if a.option_strings and a.nargs != 0]
    assert "--refresh-hz" in valued
    for option in valued:
        m = re.search(rf"\[{option} (\S+)\]", usage)
        if m is None:
            continue  # --version and the like: not in the usage line
        assert f"  {option} {m.group(1)}" in text, option


def _doc_commands() -> Iterator[tuple[str, str, list[str]]]:
    """(where, subcommand, its --flags) for every ``dltop SUB ...`` the docs show."""
    commands = _subparsers(cli_parser.build_parser())
    for path in DOCS:
        text = path.read_text().replace("\\\n", " ")
        for lineno, line in enumerate(text.splitlines(), 1):
            for m in re.finditer(r"\bdltop ([a-z][a-z-]*)([^`\n|;#]*)", line):
                if m.group(1) in commands:
                    flags = re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", m.group(2))
                    yield f"{path.name}:{lineno}", m.group(1), flags


def test_every_flag_the_docs_show_exists() -> None:
    top = cli_parser.build_parser()
    commands = _subparsers(top)
    shown = list(_doc_commands())
    assert len(shown) > 300  # the extraction still finds the docs' commands
    wrong = []
    for where, command, flags in shown:
        known = _options(top) | {o for p in [commands[command],
                                             *_subparsers(commands[command]).values()]
                                 for o in _options(p)}
        wrong += [f"{where}: dltop {command} {f}" for f in flags if f not in known]
    assert wrong == []


@pytest.mark.parametrize("limit", ["0", "-3"])
def test_runs_limit_below_one_is_refused(limit: str, tmp_path: Path) -> None:
    db = tmp_path / "d.db"
    connect(db).close()
    before = db.read_bytes()
    res = subprocess.run([sys.executable, "-m", "dltop", "runs", "--db", str(db),
                          "--limit", limit], capture_output=True, text=True, timeout=60)
    assert (res.returncode, res.stdout) == (2, "")  # SQLite's LIMIT -3 listed every run
    assert f"argument --limit: expected an integer >= 1, got '{limit}'" in res.stderr
    assert db.read_bytes() == before


@pytest.mark.parametrize(("argv", "says"), [
    (["log", "x"], "RUN: expected a run id such as 12 (or d:12, the run as a study names "
     "it), got 'x'"),
    (["export", "--table", "profile", "--run", "x"], "--run: expected a run id such as 12"),
    (["report", "--run", "x1"], "--run: expected run ids such as 12 or 12,14 (or d:12, "),
])
def test_a_run_option_asks_for_what_it_takes(argv: list[str], says: str,
                                             tmp_path: Path) -> None:
    """`dltop log` takes one run: its error no longer suggests the list (12,14) it then
    refused."""
    db = tmp_path / "d.db"
    connect(db).close()
    res = subprocess.run([sys.executable, "-m", "dltop", *argv, "--db", str(db)],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and says in res.stderr, res.stderr
