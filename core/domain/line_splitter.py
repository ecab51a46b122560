"""Lines out of bytes that arrive in arbitrary chunks (a pod's log stream, a local worker's
pipe, a log file being followed), bounded whatever the other side writes."""

from __future__ import annotations

import codecs

MAX_LINE_CHARS = 64 * 1024  # a longer line is shown cut: no worker line worth reading is longer
CUT_MARK = f" … [line cut: longer than {MAX_LINE_CHARS // 1024} KiB]"


class LineSplitter:
    """Bytes in arbitrary chunks in, whole lines out; the partial last line is kept.

    Linear in the bytes fed, and bounded: a line longer than `max_line` characters is shown
    cut, as soon as it is that long, with CUT_MARK; the rest of it, up to its newline, is dropped
    (a pod that writes 8 MB without a newline costs 64 KiB here, not 8 MB squared)."""

    def __init__(self, max_line: int = MAX_LINE_CHARS) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self.max_line = max_line
        self._parts: list[str] = []  # the partial line, in the pieces it came in
        self._size = 0
        self._cut = False  # this line was shown cut: drop the rest of it

    def feed(self, chunk: bytes) -> list[str]:
        *ends, rest = self._decoder.decode(chunk).split("\n")
        lines: list[str] = []
        for piece in ends:
            self._add(piece, lines)
            if not self._cut:
                lines.append("".join(self._parts).rstrip("\r"))
            self._parts, self._size, self._cut = [], 0, False
        self._add(rest, lines)
        return lines

    def flush(self) -> list[str]:
        lines: list[str] = []
        self._add(self._decoder.decode(b"", final=True), lines)
        if self._parts and not self._cut:
            lines.append("".join(self._parts).rstrip("\r"))
        self._parts, self._size, self._cut = [], 0, False
        return lines

    def _add(self, piece: str, lines: list[str]) -> None:
        if self._cut or not piece:
            return
        self._parts.append(piece)
        self._size += len(piece)
        if self._size > self.max_line:
            lines.append("".join(self._parts)[:self.max_line] + CUT_MARK)
            self._parts, self._size, self._cut = [], 0, True
