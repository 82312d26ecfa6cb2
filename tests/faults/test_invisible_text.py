"""Issues 27 and 38: bidirectional and zero-width characters are shown escaped, like
control ones, by the one path every printed string takes (:mod:`dltop.textsafe`).

A label holding U+202E (right-to-left override) reverses the rest of the terminal
line it is printed on; a zero-width space makes two labels look alike. textsafe
escapes them wherever it escapes control characters; the CLI test runs the real
``dltop profiles show`` on a profile whose model label holds them.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dltop.textsafe import csv_cell, markdown_cell, markdown_text, multiline, one_line

INVISIBLE = [*range(0x202A, 0x202F), *range(0x2066, 0x206A), *range(0x200B, 0x2010),
             0x2028, 0x2029, 0xFEFF, 0x061C]


def test_every_bidi_and_zero_width_character_is_escaped() -> None:
    for code in INVISIBLE:
        ch = chr(code)
        for shown in (one_line(f"a{ch}b"), multiline(f"a{ch}b\nc"), markdown_cell(f"a{ch}b")):
            assert ch not in shown, hex(code)
            assert f"\\u{code:04x}" in shown, (hex(code), shown)
    # neighbours that are ordinary printable text stay as they are
    plain = "\u2010 \u2030 \u2065\u206a \u0627\u0644"
    assert one_line(plain) == plain
    assert one_line("net\u202egnp.exe") == "net\\u202egnp.exe"


def test_profiles_show_prints_a_reversing_label_escaped(tmp_path: Path) -> None:
    profile = tmp_path / "p.toml"
    profile.write_text('name = "bidi\\u200b"\n[defaults]\niterations = 3\n[[matrix]]\n'
                       'frameworks = ["command"]\nmodels = ["net\\u202egnp.exe\\u2066"]\n'
                       'batch_sizes = [8]\ndevices = ["cpu:1"]\ncommand = ["/bin/true"]\n')
    res = subprocess.run([sys.executable, "-m", "dltop", "profiles", "show", str(profile)],
                         capture_output=True, text=True, timeout=60,
                         env={**os.environ, "DLTOP_DB": str(tmp_path / "d.db")})
    assert res.returncode == 0, res.stderr
    assert "net\\u202egnp.exe\\u2066" in res.stdout
    assert "bidi\\u200b" in res.stdout
    assert not any(chr(c) in res.stdout + res.stderr for c in INVISIBLE)


# Issue 38: one escaping path, complete -------------------------------------------------------

HIDDEN = {
    "NUL": "\x00", "BEL": "\x07", "BS": "\x08", "CR": "\r", "ESC": "\x1b", "US": "\x1f",
    "DEL": "\x7f", "NEL (C1)": "\x85", "CSI (C1)": "\x9b", "OSC (C1)": "\x9d",
    "LRE": "\u202a", "RLE": "\u202b", "PDF": "\u202c", "LRO": "\u202d", "RLO": "\u202e",
    "LRI": "\u2066", "RLI": "\u2067", "FSI": "\u2068", "PDI": "\u2069",
    "LRM": "\u200e", "RLM": "\u200f", "ALM": "\u061c",
    "ZWSP": "\u200b", "ZWNJ": "\u200c", "ZWJ": "\u200d", "WJ": "\u2060",
    "invisible times": "\u2062", "BOM": "\ufeff", "soft hyphen": "\u00ad",
    "Mongolian vowel separator": "\u180e", "tag A": "\U000e0041",
    "interlinear annotation": "\ufff9",
}
"""Every character that must never reach a terminal raw: C0, DEL, C1, bidi, zero-width."""
SEQUENCES = {
    "CSI erase line": "\r\x1b[2K", "CSI clear": "\x1b[2J\x1b[H",
    "OSC 0 title": "\x1b]0;PWNED\x07", "OSC 52 clipboard": "\x1b]52;c;aGk=\x1b\\",
    "OSC 8 link": "\x1b]8;;http://evil\x1b\\x\x1b]8;;\x1b\\", "DCS": "\x1bP1$r\x1b\\",
}


@pytest.mark.parametrize("name", [*HIDDEN, *SEQUENCES])
def test_every_hidden_character_and_sequence_is_shown_escaped(name: str) -> None:
    text = HIDDEN.get(name) or SEQUENCES[name]
    raw = {ch for ch in text if not ch.isprintable()}
    assert raw
    for shown in (one_line(f"a{text}b"), markdown_cell(f"a{text}b"), csv_cell(f"a{text}b"),
                  markdown_text(f"a{text}b"), multiline(f"x\na{text}b")):
        assert not raw & set(shown), (name, shown)
        assert shown.isprintable() or "\n" in shown, (name, shown)
    if len(text) == 1:
        code = ord(text)
        want = ("\\r" if text == "\r" else f"\\x{code:02x}" if code <= 0xFF
                else f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}")
        assert one_line(f"a{text}b") == f"a{want}b"


def test_printable_text_is_left_as_it_is() -> None:
    plain = "résumé † … ± ≥ × 中文 العربية [/] <b> & a-b"
    assert one_line(plain) == plain and multiline(plain) == plain


def test_profiles_show_escapes_command_arguments_and_env(tmp_path: Path) -> None:
    """``\\r\\x1b[2K`` in an argument redrew the line: `sh -c 'touch PWNED'` read as
    `$ python3 train.py`; env values, OSC 52 and U+202E came through the same way."""
    profile = tmp_path / "p.toml"
    profile.write_text(
        'name = "cmd"\n[defaults]\niterations = 3\n[[matrix]]\nframeworks = ["command"]\n'
        'models = ["m"]\nbatch_sizes = [8]\ndevices = ["cpu:1"]\n'
        'command = ["sh", "-c", "touch PWNED", "\\r\\u001b[2K$ python3 train.py",'
        ' "\\u001b]52;c;aGk=\\u0007\\u202eexe.txt\\u00ad"]\n'
        'env = {SAFE = "\\r\\u001b[2Kplain", OTHER = "\\u001b]0;title\\u0007"}\n')
    res = subprocess.run([sys.executable, "-m", "dltop", "profiles", "show", str(profile)],
                         capture_output=True, text=True, timeout=60,
                         env={**os.environ, "DLTOP_DB": str(tmp_path / "d.db")})
    assert res.returncode == 0, res.stderr
    out = res.stdout
    hidden = set("".join(HIDDEN.values()))
    assert not hidden & set(out + res.stderr), repr(out)
    line = next(ln for ln in out.splitlines() if ln.lstrip().startswith("$ "))
    # the whole command on one visible line, the hiding part shown for what it is
    assert "sh -c 'touch PWNED'" in line and "\\r\\x1b[2K$ python3 train.py" in line
    assert "\\x1b]52;c;aGk=\\x07\\u202eexe.txt\\xad" in line
    assert "env SAFE=\\r\\x1b[2Kplain" in out and "env OTHER=\\x1b]0;title\\x07" in out
