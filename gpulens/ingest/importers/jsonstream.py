"""Stream the elements of a large JSON array without loading the file.

The Philly ``cluster_job_log`` is one JSON list of 117,325 jobs (gigabytes in
the full trace); ``sacct --json`` is an object whose ``jobs`` key is such a
list. :func:`iter_array` yields ``(line, element)`` pairs, where ``line`` is
the 1-based line on which the element starts, and raises :class:`InputError`
naming ``file:line`` on malformed JSON. Memory stays bounded by the largest
single element plus one read chunk.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from gpulens.errors import InputError

__all__ = ["iter_array"]

_WS = " \t\r\n"
_CHUNK = 1 << 20
_MARGIN = 1 << 16  # a decode error this far before the buffer end is real, not truncation


class _Reader:
    def __init__(self, fh: IO[str], name: str) -> None:
        self.fh = fh
        self.name = name
        self.buf = ""
        self.pos = 0
        self.line = 1  # line number at self.pos
        self.eof = False
        self.decoder = json.JSONDecoder()

    def _fill(self) -> bool:
        if self.eof:
            return False
        chunk = self.fh.read(_CHUNK)
        if not chunk:
            self.eof = True
            return False
        if self.pos:
            self.buf = self.buf[self.pos :]
            self.pos = 0
        self.buf += chunk
        return True

    def _advance(self, new_pos: int) -> None:
        self.line += self.buf.count("\n", self.pos, new_pos)
        self.pos = new_pos

    def error(self, what: str, line: int | None = None) -> InputError:
        return InputError(
            f"{self.name}:{line or self.line}: {what}.",
            "Fix or remove that record (or re-download the file) and import again; nothing was stored.",
        )

    def skip_ws(self) -> str:
        """Skip whitespace; return the next character ('' at end of file)."""
        while True:
            i = self.pos
            n = len(self.buf)
            while i < n and self.buf[i] in _WS:
                i += 1
            self._advance(i)
            if i < n:
                return self.buf[i]
            if not self._fill():
                return ""

    def expect(self, chars: str) -> str:
        c = self.skip_ws()
        if c == "" or c not in chars:
            found = "end of file" if c == "" else repr(c)
            raise self.error(f"expected one of {chars!r} in JSON, found {found}")
        self._advance(self.pos + 1)
        return c

    def value(self) -> tuple[int, Any]:
        self.skip_ws()
        start_line = self.line
        while True:
            try:
                obj, end = self.decoder.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError as exc:
                truncated = exc.msg.startswith("Unterminated string") or (
                    exc.pos >= len(self.buf) - _MARGIN
                )
                if truncated and self._fill():
                    continue
                bad_line = start_line + self.buf.count("\n", self.pos, exc.pos)
                raise self.error(f"malformed JSON ({exc.msg})", bad_line) from None
            # a number at the very end of the buffer may continue in the next chunk
            if end >= len(self.buf) and not self.eof and self._fill():
                continue
            self._advance(end)
            return start_line, obj


def _iter_elements(r: _Reader) -> Iterator[tuple[int, Any]]:
    r.expect("[")
    if r.skip_ws() == "]":
        r._advance(r.pos + 1)
        return
    while True:
        yield r.value()
        if r.expect(",]") == "]":
            return


def iter_array(path: str | Path, key: str | None = None, *, fh: IO[str] | None = None
               ) -> Iterator[tuple[int, Any]]:
    """Yield (line, element) for each element of the top-level JSON array of ``path``,
    or of the array under top-level object key ``key`` (other keys are skipped)."""
    name = str(path)
    own = fh is None
    stream: IO[str] = fh if fh is not None else open(path, encoding="utf-8", errors="strict")
    try:
        r = _Reader(stream, name)
        if key is None:
            yield from _iter_elements(r)
        else:
            r.expect("{")
            if r.skip_ws() == "}":
                raise r.error(f"no {key!r} list in the JSON object")
            while True:
                _, k = r.value()
                if not isinstance(k, str):
                    raise r.error("expected a string key in JSON object")
                r.expect(":")
                if k == key:
                    if r.skip_ws() != "[":
                        raise r.error(f"{key!r} is not a list")
                    yield from _iter_elements(r)
                    return
                r.value()
                if r.expect(",}") == "}":
                    raise r.error(f"no {key!r} list in the JSON object")
        if r.skip_ws() != "":
            raise r.error("unexpected data after the JSON value")
    except UnicodeDecodeError as exc:
        raise InputError(f"{name}: not UTF-8 text ({exc.reason}).",
                         "Pass the original trace file.") from None
    finally:
        if own:
            stream.close()
