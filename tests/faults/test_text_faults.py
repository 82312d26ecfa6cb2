"""Faults of issue 20 about text: Rich markup in data, terminal escapes, plain errors.

Every case runs the real thing where the fault campaign did: ``dltop run`` of a
``command`` job whose program prints markup and escape sequences and exits 1,
the CLI printers over the database it leaves, the TUI through ``run_test``.
A fault is *held* when nothing crashes, no raw control character reaches the
output, and what was there is still shown (escaped). docs/faults.md lists them.
"""

from __future__ import annotations

import csv
import io
import os
import re
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dltop.textsafe import markdown_cell, multiline, one_line

NAME = "sweep [/] v2"
HOSTILE = "\x1b]0;PWNED\x07\x1b]52;c;aGk=\x07\x1b[2J"
"""Retitle the pane, write the clipboard (OSC 52), clear the screen."""
GLOO = ("RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:534]"
        " Connection closed by peer [127.0.0.1]:1234")
PROGRAM = f"""
import sys, time
time.sleep(float(sys.argv[1]) if len(sys.argv) > 1 else 0)
print({HOSTILE!r} + "log [bold]line[/] [/__w/x]")
print({GLOO!r}, file=sys.stderr)
sys.exit(1)
"""
PROFILE = """
name = {name}
[defaults]
iterations = 3
warmup = 1
timeout_s = 60
retries = {retries}
[[matrix]]
frameworks = ["command"]
models = {models}
batch_sizes = [8]
devices = ["cpu:1"]
command = [{python}, "{prog}"{args}]
"""
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
"""Raw control characters that must never be printed (newline and tab are fine)."""


def toml_str(text: str) -> str:
    """A TOML basic string that may hold control characters (as \\uXXXX escapes)."""
    out = []
    for ch in text:
        if ch in '"\\' or ord(ch) < 0x20 or 0x7f <= ord(ch) <= 0x9f:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def write_campaign(tmp_path: Path, models: tuple[str, ...] = ("net[/]" + HOSTILE,),
                   retries: int = 0, sleep_s: float = 0.0, name: str = NAME) -> Path:
    prog = tmp_path / "prog.py"
    prog.write_text(PROGRAM)
    path = tmp_path / "p.toml"
    path.write_text(PROFILE.format(
        name=toml_str(name), retries=retries,
        models="[" + ", ".join(toml_str(m) for m in models) + "]",
        python=toml_str(sys.executable), prog=prog,
        args=f', "{sleep_s}"' if sleep_s else ""))
    return path


def dltop(tmp_path: Path, *args: str, timeout: float = 180,
          env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "DLTOP_DB": str(tmp_path / "d.db"), **(env or {})}
    return subprocess.run([sys.executable, "-m", "dltop", *args], capture_output=True,
                          text=True, env=full, timeout=timeout)


def assert_clean(res: subprocess.CompletedProcess[str]) -> None:
    """No traceback, no markup error, no raw control character on either stream."""
    both = res.stdout + res.stderr
    assert "Traceback" not in both, both
    assert "MarkupError" not in both, both
    assert not CONTROL.search(both), repr(both)


@pytest.fixture(scope="module")
def crashed_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished campaign named with markup whose one run crashed with markup and ESC."""
    tmp = tmp_path_factory.mktemp("crashed")
    res = dltop(tmp, "run", "--headless", str(write_campaign(tmp)))
    assert_clean(res)
    assert res.returncode == 1, res.stdout + res.stderr  # a crashed run, not a crashed dltop
    return tmp


# the helper ---------------------------------------------------------------------------------


def test_textsafe_escapes_every_control_character_visibly() -> None:
    assert one_line("a\x1b[2Jb") == "a\\x1b[2Jb"
    assert one_line("x\ny\tz\r") == "x\\ny\\tz\\r"
    assert one_line("\x9b31m\x7f\x00") == "\\x9b31m\\x7f\\x00"
    assert one_line("é ü † [/] ✓") == "é ü † [/] ✓"  # printable text is untouched
    assert multiline("one\ttab\r\ntwo\x07\nthree") == "one\ttab\ntwo\\x07\nthree"
    assert multiline("10%\r50%\r100%") == "100%"  # what a terminal shows of a redrawn bar
    assert markdown_cell("a|b\nc") == "a\\|b\\nc"
    for ch in map(chr, [*range(0x20), *range(0x7f, 0xa0), 0x2028]):
        assert not CONTROL.search(one_line(f"<{ch}>"))
        assert "\u2028" not in one_line(f"<{ch}>")


# fault 1 and 6: dltop run, --resume, runs, status, profiles show, exports ----------------


@pytest.mark.slow
def test_run_prints_markup_and_escapes_literally(crashed_db: Path) -> None:
    res = dltop(crashed_db, "run", "--headless", str(crashed_db / "p.toml"))
    assert_clean(res)
    assert res.returncode == 1
    assert NAME in res.stdout  # the name as written
    assert "net[/]\\x1b]0;PWNED" in res.stdout  # the label, its ESC shown escaped
    assert "[/__w/pytorch/pytorch/third_party/gloo" in res.stdout or "exit" in res.stdout


def test_interactive_progress_bars_take_labels_literally(tmp_path: Path) -> None:
    """The Rich progress bar (a terminal) parsed its description as markup."""
    from rich.console import Console

    from dltop.jobs.events import RunFinished, RunProgress, RunStarted
    from dltop.profiles.loader import load
    from dltop.tui.progress import HeadlessProgress

    job = load(str(write_campaign(tmp_path))).jobs[0]
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=200)
    with HeadlessProgress(interactive=True, console=console) as progress:
        progress(RunStarted(1, 1, 0, 1, job, ""))
        progress(RunProgress(1, 0, 13, True, 0.01, None))
        progress(RunFinished(1, job, "crashed", None, None, None, False,
                             HOSTILE + "[/]\n" + GLOO))
    text = out.getvalue()
    assert "[/__w/pytorch" in text
    assert "\x1b]0;PWNED" not in text and "\x1b[2J" not in text and "\x1b]52" not in text
    assert "net[/]\\x1b]0;PWNED" in text  # the label, in the bar and the final line


@pytest.mark.slow
def test_resume_of_a_marked_up_campaign_finishes(tmp_path: Path) -> None:
    """--resume printed the same names and crashed again; status printed them raw."""
    prof = write_campaign(tmp_path, models=("a[/]" + HOSTILE, "b[/]"), sleep_s=60)
    env = {**os.environ, "DLTOP_DB": str(tmp_path / "d.db")}
    engine = subprocess.Popen([sys.executable, "-m", "dltop", "run", "--headless", str(prof)],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if (tmp_path / "d.db").exists() and _runs(tmp_path):
                break
            time.sleep(0.2)
        assert _runs(tmp_path), "the first run never started"
    finally:
        os.killpg(engine.pid, signal.SIGKILL)  # the engine and its runner: an engine lost
        engine.wait()
    res = dltop(tmp_path, "status")
    assert_clean(res)
    assert f"`{NAME}`" in res.stdout and "engine NOT running" in res.stdout
    prof.write_text(prof.read_text())  # unchanged; the stored spec is what resumes
    (tmp_path / "prog.py").write_text(PROGRAM.replace("time.sleep(", "(lambda s: 0)("))
    res = dltop(tmp_path, "run", "--resume", "--headless")
    assert_clean(res)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "b[/]" in res.stdout
    conn = sqlite3.connect(tmp_path / "d.db")
    try:
        status = conn.execute("select status from campaigns").fetchone()[0]
    finally:
        conn.close()
    assert status == "finished"


def _runs(tmp_path: Path) -> int:
    try:
        conn = sqlite3.connect(tmp_path / "d.db", timeout=5)
        try:
            return int(conn.execute("select count(*) from runs where pid is not null")
                       .fetchone()[0])
        finally:
            conn.close()
    except sqlite3.Error:
        return 0


@pytest.mark.parametrize("mode", ["--headless", "--json"])
@pytest.mark.slow
def test_a_reader_that_leaves_does_not_end_the_campaign(tmp_path: Path, mode: str) -> None:
    """``dltop run | head -1``: the first print after the reader left raised
    BrokenPipeError in the engine; the campaign stayed `running` with no engine."""
    prof = write_campaign(tmp_path, models=("a", "b", "c"))
    env = {**os.environ, "DLTOP_DB": str(tmp_path / "d.db")}
    proc = subprocess.Popen([sys.executable, "-m", "dltop", "run", mode, str(prof)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline()
    proc.stdout.close()  # as `head -1` does
    _, err = proc.communicate(timeout=180)
    assert proc.returncode == 1, err  # crashed runs, as without the pipe
    assert "Traceback" not in err and "campaign goes on" in err
    conn = sqlite3.connect(tmp_path / "d.db")
    try:
        assert conn.execute("select status from campaigns").fetchone()[0] == "finished"
        assert [r[0] for r in conn.execute("select status from jobs")] == ["crashed"] * 3
    finally:
        conn.close()


@pytest.mark.slow
def test_runs_listing_shows_messages_literally(crashed_db: Path) -> None:
    res = dltop(crashed_db, "runs")
    assert_clean(res)
    assert res.returncode == 0
    assert "crashed" in res.stdout and "net[/]" in res.stdout


def test_profiles_show_escapes_names_and_labels(tmp_path: Path) -> None:
    res = dltop(tmp_path, "profiles", "show", str(write_campaign(tmp_path, name=NAME + HOSTILE)))
    assert_clean(res)
    assert res.returncode == 0
    assert "sweep [/] v2\\x1b]0;PWNED" in res.stdout and "net[/]\\x1b" in res.stdout


def test_profile_error_in_a_path_with_control_characters_is_escaped(tmp_path: Path) -> None:
    bad = tmp_path / "bad\x1b[2J.toml"
    bad.write_text("name = 3\n")
    res = dltop(tmp_path, "profiles", "show", str(bad))
    assert_clean(res)
    assert res.returncode == 2 and "bad\\x1b[2J.toml" in res.stderr


@pytest.mark.slow
def test_markdown_export_keeps_one_row_per_configuration(tmp_path: Path) -> None:
    models = ("pipe|label", "new\nline", "esc" + HOSTILE)
    # A line break in a profile string is refused at load (issue 27): the newline label
    # is what a database written before that holds.
    loaded = tuple(m.replace("\n", "@NL@") for m in models)
    res = dltop(tmp_path, "run", "--headless", str(write_campaign(tmp_path, models=loaded)))
    assert res.returncode == 1, res.stderr
    with sqlite3.connect(tmp_path / "d.db") as conn:
        conn.execute("update jobs set model = replace(model, '@NL@', char(10))")
    md = dltop(tmp_path, "export", "--format", "md")
    assert_clean(md)
    table = [ln for ln in md.stdout.splitlines() if ln.startswith("|")]
    assert len(table) == 2 + len(models)  # header, rule, one row each
    widths = {len(re.split(r"(?<!\\)\|", ln)) for ln in table}
    assert len(widths) == 1, table  # no escaped | splits a row
    assert "pipe\\|label" in md.stdout and "new\\nline" in md.stdout
    for fmt in ("csv", "latex", "json"):
        out = dltop(tmp_path, "export", "--format", fmt)
        assert_clean(out)
        assert out.returncode == 0
    rows = list(csv.reader(line for line in dltop(tmp_path, "export", "--format", "csv")
                           .stdout.splitlines() if not line.startswith("#")))
    assert len(rows) == 1 + len(models)
    assert {"pipe|label", "new\\nline"} <= {cell for row in rows for cell in row}
    tex = dltop(tmp_path, "export", "--format", "latex").stdout
    assert "pipe\\textbar{}label" in tex and "esc\\textbackslash{}x1b" in tex


def test_latex_comment_lines_cannot_be_ended_by_a_newline() -> None:
    """A newline in a title or caption ended the ``%`` line: the rest was typeset."""
    from dltop.results.render import render
    from dltop.results.table import Cell, Column, Role, Row, Table

    evil = "campaign\n\\input{/etc/passwd}\x1b[2J"
    table = Table(title=evil, columns=(Column("m", "model", Role.KEY), Column("t", "time")),
                  rows=(Row((Cell(evil), Cell("1.0", 1.0, "ok"))),),
                  caption=(evil,))
    tex = render(table, "latex")
    body = [ln for ln in tex.splitlines() if not ln.startswith("%")]
    assert body[0].startswith("\\begin{tabular}")
    assert "\\input" not in tex and "\x1b" not in tex
    md = render(table, "md")
    assert not CONTROL.search(md) and md.count("\n") == len(md.splitlines())
    assert "campaign\\n\\input{/etc/passwd}\\x1b[2J" in md


# fault 1 and 6: the TUI ----------------------------------------------------------------------


def _seed_hostile(tmp_path: Path) -> Path:
    """A campaign named with markup and ESC, its run going on with such a log and label."""
    from dltop.catalog import RunStatus
    from dltop.jobs import campaign
    from dltop.profiles.loader import parse
    from dltop.store import Store, connect

    db_path = tmp_path / "t.db"
    store = Store(connect(db_path))
    prof = parse('[[matrix]]\nframeworks = ["torch"]\nmodels = ["fcn-r", "alexnet-r"]\n'
                 'batch_sizes = [8]\ndevices = ["cpu:1"]\n', "p.toml", "p")
    cid, queued = campaign.create(store, campaign.preflight([prof], 0, False), ["dltop"])
    done = store.start_run(queued[0].job_id, cid, 1, "", 8)
    store.finish_run(done, queued[0].job_id, RunStatus.CRASHED,
                     {"error_message": GLOO + HOSTILE})
    running = store.start_run(queued[1].job_id, cid, 1, "", 8)
    log = tmp_path / "runner.log"
    log.write_text("line one\n" + HOSTILE + "log [bold]x[/] [/__w/x]\n")
    store.update_run(running, {"log_path": str(log)})
    store.add_iterations(running, [{"idx": i, "seconds": 0.1, "samples": 8,
                                    "warmup": int(i < 1), "loss": 2.0} for i in range(3)])
    conn = sqlite3.connect(db_path)
    with conn:
        conn.execute("update campaigns set name = ?, status = 'running'", [NAME + HOSTILE])
        conn.execute("update jobs set model = model || ?", ["[/]" + HOSTILE])
    conn.close()
    return db_path


async def test_tui_screens_show_marked_up_names_literally(tmp_path: Path) -> None:
    from rich.console import Console
    from textual.widgets import DataTable

    from dltop.tui.app import DltopApp
    from dltop.tui.messages import ActionDone
    from dltop.tui.queue import QueueTable
    from dltop.tui.runpanel import LogTail, RunHeadline
    from dltop.tui.screens import TitleBar

    db_path = _seed_hostile(tmp_path)
    app = DltopApp(db_path, tmp_path / "logs", None, live=False, resume_orphans=False)
    async with app.run_test(size=(160, 40)) as pilot:
        await app.refresh_now()
        await pilot.pause()
        title = str(app.screen.query_one(TitleBar).render())
        assert NAME in title and "\x1b" not in title and "\\x1b]0;PWNED" in title
        tail = app.screen.query_one(LogTail).render().plain
        assert "[/__w/x]" in tail and "\x1b" not in tail and "\\x1b[2J" in tail
        head = app.screen.query_one(RunHeadline).render().plain
        assert "[/]" in head and "\x1b" not in head
        models = [row[3] for row in app.screen.query_one(QueueTable)._cells]
        assert models and all("[/]\\x1b]0;PWNED" in m for m in models), models
        app.post_message(ActionDone("add", f"{NAME}: bad [/] input {HOSTILE}", False))
        await pilot.pause()
        await pilot.press("3")
        for _ in range(50):
            await pilot.pause(0.05)
            if app.screen.query_one(DataTable).row_count:
                break
        table = app.screen.query_one(DataTable)
        assert table.row_count == 1
        console = Console(file=io.StringIO(), width=200)
        console.print(table.get_row_at(0)[1])
        shown = console.file.getvalue()  # type: ignore[attr-defined]
        assert NAME in shown and "\\x1b]0" in shown and "\x1b]0" not in shown
        await pilot.pause()


async def test_tui_add_dialog_shows_an_error_for_a_marked_up_path(tmp_path: Path) -> None:
    from textual.widgets import Input, Static

    from dltop.tui.app import DltopApp
    from dltop.tui.modals import ProfilePicker

    db_path = _seed_hostile(tmp_path)
    app = DltopApp(db_path, tmp_path / "logs", None, live=False, resume_orphans=False)
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.press("a")
        await pilot.pause()
        assert isinstance(app.screen, ProfilePicker)
        app.screen.query_one(Input).value = str(tmp_path / "odd [/] dir" / "p.toml\x1b[2J")
        app.screen.query_one(Input).focus()
        await pilot.press("enter")
        error = app.screen.query_one("#profile-error", Static)
        for _ in range(100):
            await pilot.pause(0.05)
            if str(error.render()):
                break
        shown = str(error.render())
        assert "odd [/] dir" in shown and "\x1b" not in shown and "\\x1b[2J" in shown


async def test_tui_crash_gives_a_non_zero_exit_status(tmp_path: Path) -> None:
    """A crashed viewer returned 0 from ``dltop tui``."""
    from dltop.cli.viewer import exit_status
    from dltop.tui.app import DltopApp

    db_path = _seed_hostile(tmp_path)

    class Crashing(DltopApp):
        def on_mount(self) -> None:
            raise RuntimeError("a bug in the viewer")

    app = Crashing(db_path, tmp_path / "logs", None, live=False, resume_orphans=False)
    with pytest.raises(RuntimeError):
        async with app.run_test() as pilot:
            await pilot.pause()
    assert exit_status(app, None) == 1
    ok = DltopApp(db_path, tmp_path / "logs", None, live=False, resume_orphans=False)
    async with ok.run_test() as pilot:
        await pilot.press("q")
    assert exit_status(ok, "quit") == 0


# fault 11: plain errors ----------------------------------------------------------------------


@pytest.mark.slow
def test_retry_progress_counts_jobs_not_attempts(tmp_path: Path) -> None:
    res = dltop(tmp_path, "run", "--headless",
                str(write_campaign(tmp_path, models=("m",), retries=1)))
    assert_clean(res)
    labels = re.findall(r"\[(\d+)/(\d+)\]", res.stdout)
    assert labels and all(int(k) <= int(n) for k, n in labels), res.stdout
    assert "attempt 2" in res.stdout


@pytest.mark.parametrize("depth", [500, 5000])
def test_deeply_nested_toml_is_a_user_error(tmp_path: Path, depth: int) -> None:
    prof = tmp_path / "deep.toml"
    prof.write_text("a = " + "[" * depth + "]" * depth + "\n")
    res = dltop(tmp_path, "profiles", "show", str(prof))
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr and str(prof) in res.stderr
    assert "nested" in res.stderr
    cfg = tmp_path / "cfg"
    (cfg / "dltop").mkdir(parents=True)
    (cfg / "dltop" / "config.toml").write_text(prof.read_text())
    res = dltop(tmp_path, "run", str(write_campaign(tmp_path)), "--headless",
                env={"XDG_CONFIG_HOME": str(cfg)})
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert "config.toml" in res.stderr and "nested" in res.stderr
    assert not (tmp_path / "d.db").exists()


def test_huge_fake_gpu_count_is_refused(tmp_path: Path) -> None:
    for args, env in ((("devices",), {"DLTOP_FAKE_GPUS": "1000000000"}),
                      (("devices", "--fake-gpus", "1000000000"), {})):
        res = dltop(tmp_path, *args, env=env, timeout=60)
        assert res.returncode == 2, res.stderr
        assert "at most 64" in res.stderr and "Traceback" not in res.stderr
    res = dltop(tmp_path, "devices", env={"DLTOP_FAKE_GPUS": "64"}, timeout=60)
    assert res.returncode == 0 and "SIMULATED" in res.stdout


def test_a_file_as_data_dir_is_named_as_such(tmp_path: Path) -> None:
    (tmp_path / "data").write_text("not a directory")
    prof = tmp_path / "p.toml"
    prof.write_text('[defaults]\ndata = "real"\ndata_dir = "' + str(tmp_path / "data") + '"\n'
                    '[[matrix]]\nframeworks = ["torch"]\nmodels = ["fcn-r"]\n'
                    'batch_sizes = [8]\ndevices = ["cpu:1"]\n')
    res = dltop(tmp_path, "run", str(prof), "--headless")
    assert res.returncode == 2, res.stderr
    assert f"data_dir {tmp_path / 'data'} is a file, not a directory" in res.stderr
    assert not (tmp_path / "d.db").exists()


# each message is tests/runners/test_lm_text.py's; here the CLI's exit and the database
@pytest.mark.parametrize(("content", "says"), [
    (b"\x7fELF\x02\x01\x01\x00" + bytes(range(1, 256)), "not text: a NUL byte at offset 7"),
    (b"a short text", "12 bytes, too short for seq_len = 32 at a batch of 4 (129 bytes"),
])
def test_a_transformers_text_that_is_not_what_it_claims_stores_nothing(
        tmp_path: Path, content: bytes, says: str) -> None:
    # issue 42 item 4: the byte-level text is checked before anything is stored
    (tmp_path / "text.txt").write_bytes(content)
    prof = tmp_path / "p.toml"
    prof.write_text('[defaults]\ndata = "real"\ndata_dir = "' + str(tmp_path / "text.txt")
                    + '"\nseq_len = 32\n[[matrix]]\nframeworks = ["torch"]\n'
                    'models = ["gpt-tiny"]\nbatch_sizes = [4]\ndevices = ["cpu:1"]\n')
    res = dltop(tmp_path, "run", str(prof), "--headless")
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert f"data_dir {tmp_path / 'text.txt'}: {says}" in res.stderr, res.stderr
    assert not (tmp_path / "d.db").exists()


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A directory outside pytest's 0700 tree (the process without its root powers reads it)."""
    path = Path(tempfile.mkdtemp(prefix="dltop-ftext-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        for p in [path, *path.rglob("*")]:
            if p.is_dir():
                p.chmod(0o755)
        subprocess.run(["rm", "-rf", str(path)], check=False)


def without_dac(args: list[str]) -> list[str]:
    """``args`` run without the right to ignore file permissions (root included)."""
    if os.geteuid() != 0:
        return args
    drop = "-dac_override,-dac_read_search,-fowner"
    return ["setpriv", f"--inh-caps={drop}", f"--bounding-set={drop}", *args]


def test_existing_db_in_a_read_only_directory_is_read_without_side_files(
        shared_tmp: Path) -> None:
    # a committed database on a read-only directory (an archive, a read-only share):
    # every reading command reads it, as a study of it already did, and nothing is
    # created beside it; one with a -wal but no -shm there still cannot be read
    from dltop.store import Store, connect

    folder = shared_tmp / "ro"
    folder.mkdir()
    db = connect(folder / "d.db")
    cid = Store(db).create_campaign("archived", [], [], "host-1", os.getpid(), None)
    db["campaigns"].update(cid, {"status": "finished", "finished_at": "2026-11-26T10:00:00"})
    db.close()
    (folder / "d.db").chmod(0o666)
    folder.chmod(0o555)
    env = {**os.environ, "DLTOP_DB": str(folder / "d.db")}
    for cmd, says in ((["status"], "campaign 1 `archived`"), (["runs"], "run  campaign"),
                      (["export"], "Campaign 1 `archived`")):
        res = subprocess.run(without_dac([sys.executable, "-m", "dltop", *cmd]),
                             capture_output=True, text=True, env=env, timeout=60)
        if cmd == ["export"]:  # read, and a campaign without jobs is said to be empty
            assert res.returncode == 2 and says in res.stderr, res.stderr
            assert "no runs yet" in res.stderr
            continue
        assert res.returncode == 0, res.stderr
        assert says in res.stdout, res.stdout
    assert sorted(p.name for p in folder.iterdir()) == ["d.db"]
    folder.chmod(0o755)
    (folder / "d.db-wal").write_bytes(b"")
    folder.chmod(0o555)
    res = subprocess.run(without_dac([sys.executable, "-m", "dltop", "export"]),
                         capture_output=True, text=True, env=env, timeout=60)
    assert res.returncode == 2, res.stderr
    assert "not a SQLite database" not in res.stderr, res.stderr
    assert f"the directory {folder} is not writable" in res.stderr, res.stderr
