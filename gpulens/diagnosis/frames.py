"""Where a deterministic crash or CUDA error happened: in the user's code or inside
the framework (the origin convention of docs/diagnosis.md, "One origin convention").

:func:`fault_frame` reads a failure log and answers

* ``framework`` when the log shows a framework's internal check failing
  (PyTorch ``INTERNAL ASSERT FAILED`` / "please report a bug", a C++
  ``c10::Error`` or TensorFlow ``Check failed:`` abort, a cuBLAS/cuDNN
  ``*_STATUS_INTERNAL_ERROR``), or when the innermost frame of the last stack
  that is not the Python standard library lies in an installed package
  (``site-packages`` / ``dist-packages``);
* ``user_code`` when that innermost frame is the user's own file;
* ``None`` when the log has no stack to read (a bare "Segmentation fault").

Python tracebacks list the innermost call last; faulthandler dumps ("most
recent call first") list it first; both are handled.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Final

__all__ = ["FRAME_STATES", "fault_frame", "fault_frame_of_file"]

FRAME_STATES: Final[tuple[str, ...]] = ("user_code", "framework")

_INTERNAL: Final = re.compile(
    r"INTERNAL ASSERT FAILED|please report a bug to (?:PyTorch|TensorFlow|JAX)|Check failed: "
    r"|terminate called after throwing an instance of '(?:c10|tensorflow|at)::"
    r"|(?:CUBLAS|CUDNN|CUSOLVER|CUFFT)_STATUS_INTERNAL_ERROR",
    re.IGNORECASE,
)
_FRAME: Final = re.compile(r'^\s*(?:\[[^\]]*\]:\s*)?File "([^"]+)", line \d+')
_STACK_START: Final = re.compile(r"Traceback \(most recent call last\)|\(most recent call first\)")
_PACKAGE: Final = re.compile(r"[/\\](?:site|dist)-packages[/\\]")
_STDLIB: Final = re.compile(r"[/\\]lib[/\\]python\d+(?:\.\d+)?[/\\]|^<frozen |^<string>")
#: read at most this much of a log's end (the fatal part is at the end)
_TAIL_BYTES: Final = 256 * 1024


def _last_stack(lines: list[str]) -> tuple[list[str], bool]:
    """Paths of the frames of the last stack in the log, and whether it lists the innermost first."""
    start = None
    for i in range(len(lines) - 1, -1, -1):
        if _STACK_START.search(lines[i]):
            start = i
            break
    if start is None:
        return [], False
    first = "most recent call first" in lines[start]
    paths: list[str] = []
    for line in lines[start + 1:]:
        m = _FRAME.match(line)
        if m:
            paths.append(m.group(1))
        elif paths and first and not line.strip():
            break
    return paths, first


def fault_frame(text: str) -> str | None:
    """``framework``, ``user_code`` or None for a failure log's text (see the module doc)."""
    if _INTERNAL.search(text):
        return "framework"
    paths, innermost_first = _last_stack(text.splitlines())
    order = paths if innermost_first else list(reversed(paths))
    for path in order:
        if _PACKAGE.search(path):
            return "framework"
        if _STDLIB.search(path):
            continue
        return "user_code"
    return None


def fault_frame_of_file(path: Path) -> str | None:
    """:func:`fault_frame` of a log file's last 256 KiB (None when it cannot be read)."""
    try:
        with path.open("rb") as fh:
            fh.seek(0, 2)
            size = fh.tell()
            fh.seek(max(0, size - _TAIL_BYTES))
            raw = fh.read()
    except OSError:
        return None
    return fault_frame(raw.decode("utf-8", errors="replace"))
