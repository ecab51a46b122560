"""Text geotrain did not write (pod logs, server facts, API and remote error messages), made
safe to print on a terminal or show in the app.

A terminal acts on what it is sent: OSC 52 writes the clipboard, OSC 0 the window title, ESC c
(RIS) resets it, DCS and CSI sequences (with intermediates too) drive its state machine. Whole
7-bit escape sequences (ECMA-48: CSI, the OSC/DCS/SOS/PM/APC strings, nF and single-character
escapes; colour included) are removed; every control character left (C0 but tab, DEL, C1 — the
8-bit forms of those sequences — and the other characters Python does not call printable: line
separators, bidi overrides) becomes a space. The result is one line the terminal only draws.
"""

from __future__ import annotations

import re

_SEQUENCE = re.compile(
    r"\x1b\[[\x30-\x3f]*[\x20-\x2f]*[\x40-\x7e]"  # CSI: parameters, intermediates, final byte
    r"|\x1b[\]PX^_][^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)"  # OSC, DCS, SOS, PM, APC up to BEL or ST
    r"|\x1b[\x20-\x2f]+[\x30-\x7e]"  # nF: ESC ( B, ESC # 8 …
    r"|\x1b[\x30-\x7e]")  # ESC c (RIS), ESC 7, ESC M …; a cut-short sequence loses its ESC here
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]")


def printable(text: object) -> str:
    """`text` with escape sequences removed and every other control character but tab as a space."""
    text = str(text)
    if text.isprintable():
        return text
    if "\x1b" in text:
        text = _SEQUENCE.sub("", text)
    text = _CONTROL.sub(" ", text)
    if not text.replace("\t", "").isprintable():
        text = "".join(c if c.isprintable() or c == "\t" else " " for c in text)
    return text
