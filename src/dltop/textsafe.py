"""Text from data made safe to print: control characters shown, never sent.

Names, labels, error messages and log tails come from profiles, programs and
databases that dltop does not control. Written raw to a terminal, an ``ESC``
sequence clears the screen, retitles the pane or writes the clipboard (OSC
52); a newline or a ``|`` breaks a Markdown row. Every place text leaves
dltop (the CLI printers, the TUI, the exports) passes it through here.

Control characters (C0 ``U+0000``-``U+001F``, ``DEL`` ``U+007F``, C1
``U+0080``-``U+009F``) and the Unicode line and paragraph separators are
replaced by Python's escape notation (``\\x1b``, ``\\n``, ``\\t``, ``\\u2028``),
so the user sees that something was there and what it was, in plain ASCII that
every output format (terminal, Markdown, CSV, LaTeX) carries. So are the invisible
format characters that change how a line reads without showing themselves: the
bidirectional embeddings, overrides and isolates (``U+202A``-``U+202E``,
``U+2066``-``U+2069``, the Arabic letter mark ``U+061C``), which can reverse the
rest of a terminal line ("Trojan Source"), and the zero-width characters
(``U+200B``-``U+200F``, the word joiner and invisible operators ``U+2060``-``U+2064``,
the byte-order mark ``U+FEFF``, the soft hyphen ``U+00AD``, the Mongolian vowel
separator ``U+180E``, the interlinear annotation marks ``U+FFF9``-``U+FFFB`` and the
tag characters ``U+E0000``-``U+E007F``), which make one label look like another or
hide text. Text shown as
several lines (a log tail, an error message) keeps its newlines and tabs; a
carriage return keeps what a terminal would have shown (the text after it).

Exports add their own rules on top: :func:`markdown_cell` and :func:`markdown_text`
(``|`` and HTML), :func:`csv_cell` (spreadsheet formulas). A stream that cannot encode
every character (``PYTHONIOENCODING=latin-1``, an ASCII locale) writes ASCII stand-ins
through the error handler :func:`register_stand_ins` registers (``†`` as ``+``, ``…``
as ``...``, anything else as ``\\u2603``).

Standard library only: part of the headless core (no Rich, no Textual).
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Mapping

# Invisible format characters: the soft hyphen, the Arabic letter mark, the Mongolian
# vowel separator, zero-width and directional marks, line and paragraph separators,
# bidirectional embeddings/overrides and isolates, the word joiner and invisible
# operators, the BOM, interlinear annotation marks, tag characters.
_INVISIBLE = ("\u00ad\u061c\u180e\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u2069"
              "\ufeff\ufff9-\ufffb\U000e0000-\U000e007f")
_CONTROL = re.compile(f"[\x00-\x1f\x7f-\x9f{_INVISIBLE}]")
_CONTROL_BUT_LINES = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{_INVISIBLE}]")
_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _notation(match: re.Match[str]) -> str:
    ch = match.group()
    named = _NAMED.get(ch)
    if named is not None:
        return named
    return _escape(ord(ch))


def _escape(code: int) -> str:
    """Python's notation of a code point: ``\\x1b``, ``\\u202e``, ``\\U000e0041``."""
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def one_line(text: str) -> str:
    """``text`` with every control character (newlines and tabs too) as an escape.

    For a value shown on one line: a name, a label, a table cell, a title.
    """
    return _CONTROL.sub(_notation, text)


def multiline(text: str) -> str:
    """``text`` with its lines and tabs kept and every other control character escaped.

    For text shown as lines (a log tail, an error message). ``\\r\\n`` counts as a
    newline; within a line, a carriage return keeps only what follows it, as a
    terminal shows a progress bar that redraws itself.
    """
    lines = text.replace("\r\n", "\n").split("\n")
    kept = []
    for line in lines:
        if "\r" in line:
            parts = [p for p in line.split("\r") if p]
            line = parts[-1] if parts else ""
        kept.append(_CONTROL_BUT_LINES.sub(_notation, line))
    return "\n".join(kept)


# ``<`` opens a tag; ``&`` only matters where it starts a character reference, so
# "a & b" stays as written.
_HTML = re.compile(r"<|&(?=#?[0-9A-Za-z]+;)")


def markdown_text(text: str) -> str:
    """One line of Markdown: :func:`one_line`, and no HTML a renderer would run.

    ``<`` becomes ``&lt;`` and an ``&`` that starts a character reference ``&amp;``,
    so a label ``<img src=x onerror=...>`` is shown as text, not rendered as a tag.
    """
    return _HTML.sub(lambda m: "&lt;" if m.group() == "<" else "&amp;", one_line(text))


def markdown_cell(text: str) -> str:
    """A Markdown table cell: :func:`markdown_text`, with ``|`` escaped so the row keeps
    its columns."""
    return markdown_text(text).replace("|", "\\|")


FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "\uff1d", "\uff0b", "\uff0d", "\uff20")
"""How a spreadsheet formula can start (OWASP's CSV injection rule, and the full-width
forms some spreadsheets read alike)."""
_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")


def formula_safe(text: str) -> str:
    """``text`` with a ``'`` before it when a spreadsheet would read it as a formula.

    A text starting with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return is
    prefixed with a single quote (spreadsheets show it as text and hide the quote);
    a plain number (``-1.5``, ``+3e-4``) and a lone ``-`` (no value) are left as they are.
    """
    if not text.startswith(FORMULA_START) or text == "-" or _NUMBER.fullmatch(text):
        return text
    return "'" + text


def csv_cell(text: str) -> str:
    """A CSV text field: :func:`one_line`, then :func:`formula_safe`."""
    return formula_safe(one_line(text))


STAND_INS: Mapping[str, str] = {
    "\u2020": "+", "\u2021": "++", "\u00a7": "S", "\u2026": "...", "\u00b1": "+/-",
    "\u2265": ">=", "\u2264": "<=", "\u2260": "!=", "\u2248": "~", "\u00d7": "x",
    "\u00f7": "/", "\u2192": "->", "\u2190": "<-", "\u2191": "^", "\u2193": "v",
    "\u2014": "--", "\u2013": "-", "\u2212": "-", "\u2010": "-", "\u2018": "'",
    "\u2019": "'", "\u201c": '"', "\u201d": '"', "\u00b7": ".", "\u2022": "*",
    "\u2219": ".", "\u00b5": "u", "\u03bc": "u", "\u03a3": "sum", "\u2211": "sum",
    "\u0394": "d", "\u00b0": " deg", "\u00b2": "^2", "\u00b3": "^3", "\u00a0": " ",
    "\u2009": " ", "\u202f": " ", "\u2713": "ok", "\u2714": "ok", "\u2717": "x",
    "\u2718": "x", "\u26a0": "!", "\u25b2": "^", "\u25bc": "v", "\u25b6": ">",
    "\u25cf": "*", "\u25cb": "o", "\u2588": "#", "\u2591": ".", "\u2592": ":",
    "\u2593": "#", "\u00ab": "<<", "\u00bb": ">>", "\u221e": "inf",
}
"""ASCII for the characters dltop itself prints, where the output cannot encode them."""
STAND_IN_ERRORS = "dltop-stand-in"
"""The ``errors=`` name of the handler :func:`register_stand_ins` registers."""


def stand_in(ch: str) -> str:
    """ASCII for one character: :data:`STAND_INS`, box drawing as ``-``, ``|`` or ``+``,
    anything else in escape notation (``é`` as ``\\xe9``, ``\\u2603``): two labels
    that differ still differ."""
    known = STAND_INS.get(ch)
    if known is not None:
        return known
    code = ord(ch)
    if 0x2500 <= code <= 0x257F:  # box drawing: Rich's and the listing's borders
        import unicodedata  # only here: most output never gets to this handler

        name = unicodedata.name(ch, "")
        if "HORIZONTAL" in name and "VERTICAL" in name:
            return "+"
        return "-" if "HORIZONTAL" in name else "|" if "VERTICAL" in name else "+"
    return _escape(code)


SUPERSCRIPT_DIGITS = "⁰¹²³⁴⁵⁶⁷⁸⁹"
"""The tables' footnote marks (``n/a¹²``: :mod:`dltop.results.display`)."""
_SUPERSCRIPT_RUN = re.compile(f"[{SUPERSCRIPT_DIGITS}]+")


def _stand_ins(exc: UnicodeError) -> tuple[str, int]:
    if not isinstance(exc, UnicodeEncodeError):
        raise exc
    text = exc.object[exc.start:exc.end]
    if any(ch in SUPERSCRIPT_DIGITS for ch in text):
        # a footnote mark is one number: ``n/a¹²`` as ``n/a^12``, not ``n/a^1^2``
        return _SUPERSCRIPT_RUN.sub(lambda m: "^" + "".join(
            str(SUPERSCRIPT_DIGITS.index(ch)) for ch in m.group(0)),
            "".join(ch if ch in SUPERSCRIPT_DIGITS else stand_in(ch) for ch in text)), exc.end
    return "".join(map(stand_in, text)), exc.end


def register_stand_ins() -> str:
    """Register the ``errors=`` handler that writes :func:`stand_in` for what an encoding
    lacks; returns its name (:data:`STAND_IN_ERRORS`). Registering again is harmless."""
    codecs.register_error(STAND_IN_ERRORS, _stand_ins)
    return STAND_IN_ERRORS


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` and ``noun`` with its plural unless ``n`` is 1 ("1 run", "3 runs", "0 runs").

    Args:
        n: The count.
        noun: The singular noun.
        plural: The plural where it is not ``noun + "s"`` ("process" → "processes").
    """
    return f"{n} {noun if n == 1 else (plural or noun + 's')}"
