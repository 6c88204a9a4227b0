"""Read a whole job log with exact 1-based line numbers, in bounded memory.

A file up to :data:`WHOLE_BYTES` is read whole. A larger one keeps its head and its last
:data:`WHOLE_BYTES`; the newlines of the skipped middle are counted (streamed, in chunks), so
every kept line still has the number ``grep -n`` gives it.

A file that starts with a UTF-16 byte-order mark is decoded as UTF-16: Windows PowerShell 5's
``>``, ``Tee-Object`` and ``Out-File`` write UTF-16LE with a BOM by default, so a job run there
and redirected to a file is one (line numbers are those of the decoded text, as ``grep -n`` on
``iconv -f UTF-16`` output gives them).

A progress bar that refreshes with ``\\r`` and writes no newline until it closes (tqdm, Keras'
progbar) leaves one line holding every refresh: hundreds of kilobytes for one epoch, up to the
whole kept text for a bar that ran for hours. Such a line (over :data:`LONG_BAR` characters)
keeps its text before the refreshes and its first ones, then its last ones (about
:data:`BAR_KEPT` characters each way): what a terminal showed last, and whatever was written
onto the line after the bar (a shell's "Killed", slurmstepd's cancel line, a traceback's first
line) are kept; the refreshes overwritten in between are not. The line keeps its number; the
reader's stages then read each line in bounded time.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from gpulens.diagnosis import logs
from gpulens.diagnosis.keyscan import KeyedLines

__all__ = ["BAR_KEPT", "LONG_BAR", "WHOLE_BYTES", "WholeText", "compact_bar", "read_whole", "text_source"]

#: Bytes of a log kept in memory (the end of a larger file; its head is kept too).
WHOLE_BYTES = 16 * 1024 * 1024
_HEAD_BYTES = 64 * 1024
#: Characters over which a line of progress-bar refreshes keeps only its first and last ones.
LONG_BAR = 32 * 1024
#: Characters of refreshes such a line keeps at its start and at its end (whole refreshes).
BAR_KEPT = 4 * 1024


@dataclasses.dataclass
class WholeText:
    """The kept lines of a log: ``lines[i]`` is line ``first + i`` of the file (1-based), after
    ``head`` (lines 1..len(head)) when the middle was skipped."""

    lines: list[str]
    first: int
    size: int
    head: list[str] = dataclasses.field(default_factory=list)
    reason: str | None = None  # set when the file is not a usable text log

    @property
    def n_lines(self) -> int:
        return self.first + len(self.lines) - 1

    def number(self, index: int) -> int:
        """The 1-based file line number of ``lines[index]``."""
        return self.first + index


def text_source(text: str) -> WholeText:
    """A log given as text (line 1 is its first line)."""
    return _finish(text, len(text.encode("utf-8", "replace")))


def read_whole(path: str | os.PathLike[str], *, keep_bytes: int = WHOLE_BYTES) -> WholeText:
    """Read ``path`` (see the module doc; ``keep_bytes`` of its end kept). Raises ``OSError``
    when it cannot be opened; other problems (empty, binary, not a regular file) come back as
    ``reason``."""
    encoding = _utf16_encoding(path)
    if encoding is not None:
        got = _read_utf16(path, encoding, keep_bytes)
        if got.reason is None:
            return got  # else: two bytes that look like a BOM before UTF-8 text, or binary
    probe = logs.read_log(path, head_bytes=4096, tail_bytes=4096, scan_bytes=0)
    if probe.reason and not (probe.reason.startswith("binary data") and _text_with_noise(path, probe.size)):
        return WholeText([], 1, probe.size, reason=probe.reason)
    with Path(path).open("rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if size <= keep_bytes + _HEAD_BYTES:
            data = fh.read()
            return _finish(data.decode("utf-8", errors="replace"), size, data)
        chunk = fh.read(_HEAD_BYTES)
        head = chunk.rsplit(b"\n", 1)[0] if b"\n" in chunk else None  # (a first line longer than the chunk: none kept)
        start = size - keep_bytes
        skipped = logs.count_streamed(fh, len(head) + 1 if head is not None else 0, start, _newlines)
        fh.seek(start)
        tail = fh.read()
    nl = tail.find(b"\n")
    raw = tail[nl + 1:]
    body = raw.decode("utf-8", errors="replace")
    head_lines = head.decode("utf-8", errors="replace").split("\n") if head is not None else []
    # newlines before the body: the head's, the one after it, the middle's, the one ending the cut line
    got = _finish(body, size, raw)
    return dataclasses.replace(got, first=len(head_lines) + skipped + 2, head=head_lines)


def compact_bar(line: str) -> str:
    """A line of progress-bar refreshes (``\\r``) without those between its first and last
    :data:`BAR_KEPT` characters (see the module doc); any other line as it is."""
    head = line.rfind("\r", 0, BAR_KEPT)
    if head <= 0:
        head = line.find("\r", 1)  # the text before the first refresh, however long
    tail = line.find("\r", len(line) - BAR_KEPT)
    if tail < 0:
        tail = line.rfind("\r")  # the last refresh, however long
    return line[:head] + line[tail:] if 0 < head < tail else line


def _newlines(data: bytes) -> int:
    return data.count(b"\n")


def _utf16_encoding(path: str | os.PathLike[str]) -> str | None:
    """The UTF-16 codec a file's byte-order mark names, or None (no BOM, or not a regular file:
    :func:`logs.read_log` reports that)."""
    try:
        if not os.path.isfile(path):  # before opening: a FIFO with no writer would block the open
            return None
        with Path(path).open("rb") as fh:
            return logs.bom_codec(fh)
    except OSError:
        return None


def _read_utf16(path: str | os.PathLike[str], encoding: str, keep_bytes: int) -> WholeText:
    """A UTF-16 log (module doc): whole up to twice the kept sizes (two bytes a character),
    else its head and its last ``2 * keep_bytes`` bytes with the middle's newlines counted."""
    with Path(path).open("rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        fh.seek(2)  # whole: the file, its BOM included, up to twice the kept sizes
        ends = logs.read_utf16(fh, size, encoding, head=2 * _HEAD_BYTES, tail=2 * keep_bytes,
                               whole=2 * (keep_bytes + _HEAD_BYTES) - 2, count_middle=True)
    if ends.whole is not None:
        return _checked(_finish(ends.whole, size))
    head = ends.head_lines
    head_lines = head.split("\n") if head is not None else []
    # newlines before the tail: the head's, the one after it, the middle's, the one ending the cut line
    first = len(head_lines) + ends.middle_newlines + 2
    return _checked(dataclasses.replace(_finish(ends.tail, size), first=first, head=head_lines))


def _checked(got: WholeText) -> WholeText:
    """``got``, with the binary test's reason when its text is not a log (a UTF-16 BOM before
    an image or a model file)."""
    sample = "\n".join([*got.head[:50], *got.lines[:200], *got.lines[-200:]])
    if not logs.looks_utf16_text(sample):
        return WholeText([], 1, got.size, reason="not UTF-16 text")
    data = sample.encode("utf-8", "replace").translate(None, _NOISE)
    reason = logs.binary_reason(data) if got.lines or got.head else "empty log"
    return got if reason is None else WholeText([], 1, got.size, reason=reason)


#: Bytes a text log carries beside its text: NUL runs (a region of the file allocated but never
#: written: the log truncated while its writer kept its offset, a node that died mid-write), the
#: backspaces of Keras' progress bar, bells, form feeds and the escapes of colour codes.
_NOISE = bytes([0, 7, 8, 11, 12, 27])
_PROBE = 4096


def _text_with_noise(path: str | os.PathLike[str], size: int) -> bool:
    """Whether a file the binary test turned down is a text log once that noise is left out:
    enough text lines, no other control bytes, valid UTF-8 (a model file or an image is not)."""
    with Path(path).open("rb") as fh:
        sample = fh.read(_PROBE)
        if size > 2 * _PROBE:
            fh.seek(size - _PROBE)
        sample += fh.read(_PROBE)
    rest = sample.translate(None, _NOISE)
    text = rest.decode("utf-8", errors="replace")
    return (len(rest) >= 256 and rest.count(b"\n") >= 4 and text.count("\ufffd") <= len(text) // 100
            and logs.binary_reason(rest) is None)


def _finish(text: str, size: int, raw: bytes | None = None) -> WholeText:
    """The lines of ``text``, decoded from ``raw`` when given (kept as the lines' bytes when
    the decoding lost nothing: the key scans then need not encode the lines again)."""
    if (b"\x00" in raw) if raw is not None else ("\x00" in text):  # (a NUL byte decodes to NUL only)
        text = text.replace("\x00", "")  # NUL runs hold no line (they are not text)
        raw = None
    if raw is not None and not text.isascii() and "\ufffd" in text:
        raw = None  # bytes that are not UTF-8 (or a replacement character): not the lines' bytes
    lines = text.split("\n") if text else []
    if lines and lines[-1] == "":
        lines.pop()  # a final newline does not start a line
        raw = raw[:-1] if raw is not None else None
    if len(text) > LONG_BAR and max(map(len, lines)) > LONG_BAR:
        compacted = [compact_bar(ln) if len(ln) > LONG_BAR else ln for ln in lines]
        if compacted != lines:
            lines, raw = compacted, None  # the lines' bytes are no longer the file's
    return WholeText(KeyedLines(lines, raw), 1, size)  # scanned for keys many times: keeps its bytes
