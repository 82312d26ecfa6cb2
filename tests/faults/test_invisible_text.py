"""Issue 27: bidirectional and zero-width characters are shown escaped, like control ones.

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

from dltop.textsafe import markdown_cell, multiline, one_line

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
