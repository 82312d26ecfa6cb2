"""The transformers' text data (issue 42 item 4): byte-level ids, windows drawn in a
seeded order, a text that is not UTF-8 refused, and a gpt-tiny run whose held-out loss
falls, the convergence signal a single synthetic batch cannot give."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import convergence
import datasets
import lm_text
import pytest

from .conftest import run_runner, spec

FOX = "the quick brown fox jumps over the lazy dog; "


def test_ids_are_the_texts_utf8_bytes(tmp_path: Path) -> None:
    path = tmp_path / "t.txt"
    path.write_text("añb\n", encoding="utf-8")
    assert list(lm_text.read(str(path))) == [0x61, 0xC3, 0xB1, 0x62, 0x0A]
    x, y, n = lm_text.windows(lm_text.read(str(path)), 2, str(path))
    assert (x, y, n) == ([0x61, 0xC3, 0xB1, 0x62], [0xC3, 0xB1, 0x62, 0x0A], 2)


def test_a_directory_reads_train_and_valid_a_file_has_no_test(tmp_path: Path) -> None:
    (tmp_path / "ptb.train.txt").write_text(FOX * 20)
    (tmp_path / "ptb.valid.txt").write_text(FOX * 5)
    kind, shape, train, test = datasets.real_split("gpt-tiny", str(tmp_path), seq_len=16,
                                                   need_test=True)
    assert (kind, shape, train[2], test[2]) == ("ptb", (16,), (20 * len(FOX) - 1) // 16,
                                                (5 * len(FOX) - 1) // 16)
    assert max(train[0]) < 256 and train[1][:5] == list(FOX[1:6].encode())
    one = str(tmp_path / "ptb.train.txt")
    assert datasets.real_split("gpt-tiny", one, seq_len=16)[3] is None
    with pytest.raises(Exception, match="one text file"):
        datasets.real_split("gpt-tiny", one, seq_len=16, need_test=True)


def test_successive_batches_are_new_windows_in_a_seeded_order() -> None:
    order = convergence.EpochOrder(40, True, 7)
    first = [tuple(order.batch(s, 4, 10)) for s in range(10)]
    assert len({i for b in first for i in b}) == 40  # an epoch: every window once
    assert first != [tuple(range(4 * s, 4 * s + 4)) for s in range(10)]  # shuffled
    assert first == [tuple(convergence.EpochOrder(40, True, 7).batch(s, 4, 10))
                     for s in range(10)]  # the same seed, the same order


@pytest.mark.parametrize(("content", "says"), [
    (b"", "empty"),
    (b"ok text\x00more", "not text: a NUL byte at offset 7"),
    (b"caf\xc3\xa9 \xff\xfe", "not UTF-8 text: byte 0xff at offset 6"),
    (b"\x89PNG\r\n\x1a\n" + bytes(range(256)), "not text: a NUL byte"),
    (b"short", "5 bytes, too short for seq_len = 8 at a batch of 2 (17 bytes at least"),
])
def test_a_text_that_is_not_what_it_claims_is_named_with_why(
        tmp_path: Path, content: bytes, says: str) -> None:
    path = tmp_path / "bad.txt"
    path.write_bytes(content)
    problem = lm_text.problem(str(path), 8, 2)
    assert problem is not None and problem.startswith(f"{path}: ") and says in problem
    if len(content) > 5:
        with pytest.raises(datasets.BadData, match=r"bad data: .*bad\.txt"):
            datasets.real_split("gpt-tiny", str(path), seq_len=8)
    assert lm_text.problem(str(tmp_path / "none.txt"), 8, 2) == \
        f"{tmp_path / 'none.txt'}: file not found"


def _losses(events: list[dict[str, Any]], kind: str) -> list[float]:
    return [e["loss"] for e in events if e["event"] == kind]


@pytest.mark.slow
def test_gpt_tiny_learns_a_text_its_held_out_loss_falls(tmp_path: Path) -> None:
    (tmp_path / "ptb.train.txt").write_text(FOX * 60)
    (tmp_path / "ptb.valid.txt").write_text(FOX[5:] * 10)  # other windows of the text
    code, events, out = run_runner(tmp_path, spec(
        "gpt-tiny", seq_len=32, data="real", data_dir=str(tmp_path), optimizer="adamw",
        lr=1e-3, iterations=20, warmup=0, eval_every=10, shuffle=True))
    assert code == 0, out
    train, held = _losses(events, "iter"), _losses(events, "eval")
    assert all(math.isfinite(x) for x in train + held) and len(held) == 2
    assert train[0] == pytest.approx(math.log(10000), abs=0.2)
    # unseen windows: a uniform guess over the vocabulary is ln(10000) = 9.2, over the
    # 256 byte ids 5.5; the text's ~28 distinct bytes are learnt
    assert held[1] < held[0] < math.log(10000) - 1
    assert held[1] < math.log(256)
