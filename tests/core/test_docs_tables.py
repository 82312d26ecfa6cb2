"""The numbers in docs come from the tool (issue 40, item 7).

docs/gpu.md's tables are blocks that scripts/docs_tables.py fills with what ``dltop
export`` prints for the databases committed under docs/gpu-runs/; these tests hold the
docs to the tool, the script to its contract, and the committed databases (and the GPU
check's copy of one) to one checkpointed file each.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "docs_tables.py"
LLM_DB = "docs/gpu-runs/2026-11-26-h200-llm/campaign.db"
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "benchmarks"))

import docs_tables  # noqa: E402
import gpu_check  # noqa: E402
import harness_overhead  # noqa: E402


def _script(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)


def _wal_mode(path: Path) -> bool:
    """Whether a SQLite file's header says WAL (bytes 18-19 are 2; 1 is rollback)."""
    return path.read_bytes()[18:20] == b"\x02\x02"


@pytest.mark.slow
def test_docs_tables_agree_with_what_dltop_prints() -> None:
    res = _script("--check")
    assert res.returncode == 0, (
        "docs disagree with dltop's output: run scripts/docs_tables.py, review the diff "
        f"and commit it\n{res.stdout[-6000:]}{res.stderr}")
    assert "agree with dltop" in res.stdout
    # docs/gpu.md has its tables as blocks (a doc losing its markers would pass vacuously)
    blocks = docs_tables.find_blocks(ROOT / "docs/gpu.md",
                                     (ROOT / "docs/gpu.md").read_text())
    assert len(blocks) >= 4
    named = [b.args[b.args.index("--db") + 1] for b in blocks if "--db" in b.args]
    assert named and all((ROOT / db).is_file() for db in named)


@pytest.mark.slow
def test_a_stale_block_fails_the_check_and_the_script_rewrites_it(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    before = (f"# A\n\nprose stays\n\n<!-- dltop: export --db {LLM_DB} --campaign all "
              "--metric mfu --format md -->\n\n| stale | 34.1 |\n\n<!-- /dltop -->\n\n"
              "prose after stays\n")
    doc.write_text(before)

    res = _script("--check", str(doc))
    assert res.returncode == 1
    assert "run scripts/docs_tables.py" in res.stderr
    assert "-| stale | 34.1 |" in res.stdout  # a unified diff of the block
    assert doc.read_text() == before  # --check writes nothing

    assert _script(str(doc)).returncode == 0
    text = doc.read_text()
    assert text.startswith("# A\n\nprose stays\n\n<!-- dltop: export")
    assert text.endswith("<!-- /dltop -->\n\nprose after stays\n")
    assert "stale" not in text
    assert "| 33.9 |" in text  # gpt2-small compile's MFU, as the export prints it
    assert _script("--check", str(doc)).returncode == 0
    # the read left the committed database one file
    assert not list((ROOT / LLM_DB).parent.glob("*.db-wal"))


def test_markers_inside_code_fences_are_examples_not_blocks(tmp_path: Path) -> None:
    text = ("```\n<!-- dltop: export --db x.db -->\n(example)\n<!-- /dltop -->\n```\n\n"
            "<!-- dltop: compare 1 2\n  --db y.db -->\nold\n<!-- /dltop -->\n")
    blocks = docs_tables.find_blocks(tmp_path / "d.md", text)
    assert [b.args for b in blocks] == [("compare", "1", "2", "--db", "y.db")]
    assert blocks[0].line == 7
    new = docs_tables.render(text, blocks, ["| fresh |\n"])
    assert new.startswith(text.split("\n\n")[0])  # the fenced example untouched
    assert new.endswith("--db y.db -->\n\n| fresh |\n\n<!-- /dltop -->\n")


@pytest.mark.parametrize(("body", "why"), [
    ("<!-- dltop: run p.toml -->\n<!-- /dltop -->\n", "must be one of export, compare"),
    ("<!-- dltop: export --db x.db -o out.md -->\n<!-- /dltop -->\n", "writes a file"),
    ("<!-- dltop: export --metric mfu -->\n<!-- /dltop -->\n", "names no database"),
    ("<!-- dltop: export --db x.db -->\nno end\n", "without its closing"),
    ("<!-- dltop: export --db x.db -->\n<!-- dltop: export --db x.db -->\n"
     "<!-- /dltop -->\n",
     "without its closing"),
    ("<!-- dltop: export --db 'x.db -->\n<!-- /dltop -->\n", "does not parse"),
])
def test_bad_blocks_are_refused_naming_file_and_line(tmp_path: Path, body: str,
                                                     why: str) -> None:
    doc = tmp_path / "bad.md"
    doc.write_text("intro\n\n" + body)
    res = _script("--check", str(doc))
    assert res.returncode == 2
    assert "bad.md:3: " in res.stderr and why in res.stderr, res.stderr
    assert "Traceback" not in res.stderr
    assert doc.read_text() == "intro\n\n" + body


def test_a_failing_command_stops_the_script_with_nothing_written(tmp_path: Path) -> None:
    doc = tmp_path / "d.md"
    body = ("<!-- dltop: export --db docs/gpu-runs/none.db -->\nold\n<!-- /dltop -->\n")
    doc.write_text(body)
    res = _script(str(doc))
    assert res.returncode == 2
    assert "d.md:1: dltop export --db docs/gpu-runs/none.db exited 2" in res.stderr
    assert "no such database" in res.stderr
    assert doc.read_text() == body


def test_no_wal_or_shm_file_is_committed_and_every_database_is_checkpointed() -> None:
    tracked = subprocess.run(["git", "ls-files", "docs"], cwd=ROOT, capture_output=True,
                             text=True, check=True).stdout.split()
    assert tracked, "git ls-files gave nothing: not a checkout?"
    assert [p for p in tracked if p.endswith(("-wal", "-shm", "-journal"))] == []
    dbs = [ROOT / p for p in tracked if p.endswith(".db")]
    assert len(dbs) >= 5
    assert [str(p) for p in dbs if _wal_mode(p)] == []


def test_the_gpu_checks_database_copy_is_one_checkpointed_file(tmp_path: Path) -> None:
    work = tmp_path / "check.db"
    src = sqlite3.connect(work)
    src.execute("PRAGMA journal_mode=WAL")
    src.execute("create table t (x)")
    src.executemany("insert into t values (?)", [(i,) for i in range(100)])
    src.commit()  # the rows are in check.db-wal, not yet in check.db
    assert (tmp_path / "check.db-wal").stat().st_size > 0
    out = tmp_path / "out"
    out.mkdir()
    gpu_check.Check.copy_db(SimpleNamespace(db=work, out=out))  # only .db and .out are read
    src.close()
    copy = out / "campaign.db"
    assert not _wal_mode(copy)
    assert sorted(p.name for p in out.iterdir()) == ["campaign.db"]
    ro = sqlite3.connect(f"file:{copy}?mode=ro", uri=True)
    assert ro.execute("select count(*), sum(x) from t").fetchone() == (100, 4950)
    ro.close()
    assert sorted(p.name for p in out.iterdir()) == ["campaign.db"]


def test_harness_rounds_are_written_whole_per_case(tmp_path: Path) -> None:
    path = tmp_path / "rounds.json"
    case = {"framework": "torch", "model": "resnet-50", "batch": 64,
            "bare_s": [0.0727, 0.0728], "dltop_s": [0.0729, 0.0730]}
    harness_overhead.write_rounds(path, [case])
    harness_overhead.write_rounds(path, [case, {**case, "model": "alexnet-r"}])
    got = json.loads(path.read_text())
    assert [c["model"] for c in got] == ["resnet-50", "alexnet-r"]
    assert got[0]["bare_s"] == [0.0727, 0.0728]
    assert [p.name for p in tmp_path.iterdir()] == ["rounds.json"]  # no .tmp left
