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
(``U+200B``-``U+200F``, the byte-order mark ``U+FEFF``), which make one label look
like another. Text shown as
several lines (a log tail, an error message) keeps its newlines and tabs; a
carriage return keeps what a terminal would have shown (the text after it).

Standard library only: part of the headless core (no Rich, no Textual).
"""

from __future__ import annotations

import re

# Invisible format characters: zero-width and directional marks, line and paragraph
# separators, bidirectional embeddings/overrides and isolates, the BOM.
_INVISIBLE = "\u061c\u200b-\u200f\u2028-\u202e\u2066-\u2069\ufeff"
_CONTROL = re.compile(f"[\x00-\x1f\x7f-\x9f{_INVISIBLE}]")
_CONTROL_BUT_LINES = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{_INVISIBLE}]")
_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _notation(match: re.Match[str]) -> str:
    ch = match.group()
    named = _NAMED.get(ch)
    if named is not None:
        return named
    code = ord(ch)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


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


def markdown_cell(text: str) -> str:
    """A Markdown table cell: one line, with ``|`` escaped so the row keeps its columns."""
    return one_line(text).replace("|", "\\|")
