"""Validator-side refinements of the log classifier's answer, from what the start-up hook saw.

The classifier reads only the output. The hook also records the uncaught
exception (type, message, the innermost frames with their source lines) and
which declared inputs the process opened, so the validator can tell a missing
*training-data* file (``incorrect_input``) from a missing *checkpoint*
(``checkpoint_error``), a failed ``assert os.path.exists(path)`` (a missing input,
not a logic error) from any other assert, and a file that could not be *read*
from one that could not be *written*.

``refine(category, origin, exception, context)`` returns a ``Refined`` (or None
when the classifier's answer stands).
"""

from __future__ import annotations

import dataclasses
import os
import re
from typing import Any

from gpulens.validator.hints import HintContext, path_in_evidence, path_origin

__all__ = ["DECODE_ERRORS", "DECODER_FILES", "Refined", "exception_of", "input_blame", "refine", "user_frame"]

#: Exception types (or the modules they are raised in) that mean "this file's contents are bad".
DECODE_ERRORS = (
    "BadGzipFile", "BadZipFile", "UnpicklingError", "UnicodeDecodeError", "JSONDecodeError",
    "EOFError", "zlib.error", "csv.Error", "ParserError", "EmptyDataError", "UnidentifiedImageError",
    "HeaderParsingError", "DecompressionBombError", "ArrowInvalid",
)  # fmt: skip
DECODER_FILES = (
    "/gzip.py", "/zipfile", "/pickle.py", "/json/", "/csv.py", "/_npyio_impl.py", "/npyio.py",
    "/numpy/lib/format.py", "/pandas/io/", "/PIL/", "/h5py/", "/torch/serialization.py",
    "/safetensors/", "/pyarrow/", "/lzma.py", "/bz2.py", "/tarfile.py",
)  # fmt: skip
#: Program-error exceptions: an uncaught one the classifier could not place is the program's own error.
_PROGRAM_ERRORS = (
    "TypeError", "ValueError", "IndexError", "KeyError", "AttributeError", "RuntimeError",
    "AssertionError", "NameError", "ZeroDivisionError", "NotImplementedError", "UnboundLocalError",
)  # fmt: skip
_EXISTS_RE = re.compile(r"\bassert\b.*(os\.path\.(exists|isfile|isdir|lexists)|\.(exists|is_file|is_dir)\(\)|glob)")
_WRITE_RE = re.compile(r"\.save\(|save_pretrained|savetxt|to_csv|\.dump\(|makedirs|mkdir|open\([^)]*['\"][wax]")
_WRITER_FRAMES = {"save", "_save", "_open_zipfile_writer", "savetxt", "to_csv", "mkdir", "makedirs"}
_EXEC_FRAMES = {"_execute_child", "execvpe", "execve", "_spawn_posix", "spawnv"}
_CHECKPOINT_RE = re.compile(r"ckpt|checkpoint|resume|init_from|pretrained|snapshot", re.IGNORECASE)


@dataclasses.dataclass
class Refined:
    category: str
    origin: str
    evidence: list[str]
    reason: str


def _library(filename: str) -> bool:
    return (
        filename.startswith("<")
        or "/site-packages/" in filename
        or "/dist-packages/" in filename
        or re.search(r"/lib/python\d", filename) is not None
    )


def exception_of(markers: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The first uncaught exception any process of the run recorded."""
    for m in markers:
        if m.get("exception"):
            exc: dict[str, Any] = m["exception"]
            return exc
    return None


def user_frame(exc: dict[str, Any]) -> tuple[str, int, str] | None:
    """Innermost frame of the job's own code: (file, line, source line)."""
    for frame in reversed(exc.get("frames") or []):
        filename, lineno = str(frame[0]), int(frame[1] or 0)
        source = str(frame[3]) if len(frame) > 3 and frame[3] else ""
        if not _library(filename):
            return filename, lineno, source
    return None


def input_blame(markers: list[dict[str, Any]]) -> tuple[str, list[str]] | None:
    """A decoding error raised after a declared input was opened: the input's contents are bad."""
    for m in markers:
        exc = m.get("exception")
        opened = m.get("inputs_opened") or []
        if not exc or not opened:
            continue
        exc_type = str(exc.get("type", ""))
        frames = exc.get("frames") or []
        in_decoder = any(any(mark in str(f[0]) for mark in DECODER_FILES) for f in frames[-3:])
        by_type = any(exc_type.endswith(t) for t in DECODE_ERRORS)
        if by_type or in_decoder:
            short = exc_type.rsplit(".", 1)[-1]
            return opened[-1], [
                f"{short}: {exc.get('message', '')}".rstrip(": "),
                f"raised while reading declared input {opened[-1]}",
            ]
    return None


def _writing(exc: dict[str, Any], source: str) -> bool:
    frames = exc.get("frames") or []
    if any(str(f[2]) in _WRITER_FRAMES for f in frames):
        return True
    return _WRITE_RE.search(source) is not None


def _checkpoint_like(path: str, origin: str | None) -> bool:
    return _CHECKPOINT_RE.search(os.path.basename(path)) is not None or (
        origin is not None and (_CHECKPOINT_RE.search(origin) is not None or "output directory" in origin)
    )


def _head(exc: dict[str, Any]) -> str:
    short = str(exc.get("type", "")).rsplit(".", 1)[-1]
    message = str(exc.get("message", "")).strip().splitlines()
    return f"{short}: {message[0][:300]}" if message else short


def _missing_arg(context: HintContext) -> str | None:
    """A path-like command-line value that does not exist (what an ``assert exists`` checked)."""
    base = context.workdir or "."
    for a in context.args:
        value = a.split("=", 1)[1] if a.startswith("-") and "=" in a else a
        if value.startswith("-") or not ("/" in value or re.search(r"\.[A-Za-z]\w{0,5}$", value)):
            continue
        if not os.path.exists(os.path.join(base, value)):
            return value
    return None


def _missing_assert(exc: dict[str, Any], frame: tuple[str, int, str] | None, context: HintContext) -> Refined | None:
    if not str(exc.get("type", "")).endswith("AssertionError") or frame is None:
        return None
    if not _EXISTS_RE.search(frame[2]):
        return None
    file, line, source = frame
    evidence = [_head(exc), f"{file}:{line}: {source.strip()}"]
    path = path_in_evidence([str(exc.get("message", ""))]) or _missing_arg(context)
    if path:
        origin = path_origin(path, context)
        evidence.append(f"missing path {path}" + (f" ({origin})" if origin else ""))
    return Refined("incorrect_input", "data", evidence, "an input the program checks for does not exist")


def _unreadable_file(exc: dict[str, Any], frame: tuple[str, int, str] | None, context: HintContext) -> Refined | None:
    exc_type = str(exc.get("type", ""))
    message = str(exc.get("message", ""))
    missing = exc_type.endswith("FileNotFoundError") or "No such file or directory" in message
    unpickle = exc_type.endswith("UnpicklingError") or "Weights only load failed" in message
    if not (missing or unpickle):
        return None
    source = frame[2] if frame else ""
    if any(str(f[2]) in _EXEC_FRAMES for f in exc.get("frames") or []):
        return None  # a missing program (subprocess), not a file the job reads
    if missing and _writing(exc, source):
        return None  # a write into a missing directory: the classifier's checkpoint/permission answer stands
    path = path_in_evidence([message]) or ""
    if not path and frame is not None:
        m = re.search(r"""['"]([^'"]+\.[A-Za-z0-9]+)['"]""", source)
        path = m.group(1) if m else ""
    origin = path_origin(path, context) if path else None
    where = f" at {frame[0]}:{frame[1]}" if frame else ""
    evidence = [_head(exc)]
    if unpickle:
        glob = re.search(r"Unsupported global: GLOBAL ([\w.]+)", message)
        if glob:
            evidence.append(f"weights_only rejected global {glob.group(1)}")
    read_line = f"raised while reading {path or 'a file'}{where}" + (f" ({origin})" if origin else "")
    evidence.append(read_line)
    checkpoint = bool(path) and _checkpoint_like(path, origin)
    if unpickle:
        category = "checkpoint_error" if checkpoint else "incorrect_input"
        return Refined(category, "user", evidence, f"torch.load refused to unpickle {path or 'a file'} (weights_only)")
    if checkpoint:
        return Refined("checkpoint_error", "user", evidence, f"the checkpoint {path} to read does not exist")
    return Refined("incorrect_input", "data", evidence, f"the input {path or 'file'} the program reads does not exist")


_WRITE_FAIL_RE = re.compile(r"does not exist|No such file|Permission denied|Read-only file system|Not a directory")
_PARENT_RE = re.compile(r"Parent directory (\S+) does not exist")


def _unwritable_file(exc: dict[str, Any], frame: tuple[str, int, str] | None, context: HintContext) -> Refined | None:
    """A save/open-for-writing that failed: the output or checkpoint location, not an input."""
    message = str(exc.get("message", ""))
    if not _WRITE_FAIL_RE.search(message) or not _writing(exc, frame[2] if frame else ""):
        return None
    if "Permission denied" in message or "Read-only" in message:
        return None  # the classifier's permission_error / storage answers stand
    parent = _PARENT_RE.search(message)
    path = parent.group(1) if parent else (path_in_evidence([message]) or "")
    origin = path_origin(path, context) if path else None
    where = f" at {frame[0]}:{frame[1]}" if frame else ""
    evidence = [_head(exc), f"raised while writing into {path or 'a directory'}{where}" + (f" ({origin})" if origin else "")]
    return Refined("checkpoint_error", "user", evidence, f"the program could not write into {path or 'its output directory'}")


def refine(
    category: str, exc: dict[str, Any] | None, context: HintContext
) -> Refined | None:
    """A better category than the classifier's ``category`` from the recorded exception, or None."""
    if exc is None:
        return None
    frame = user_frame(exc)
    if frame is not None:
        context.where = f"{frame[0]}:{frame[1]}"
    for rule in (_missing_assert, _unwritable_file, _unreadable_file):
        found = rule(exc, frame, context)
        if found is not None:
            return found
    short = str(exc.get("type", "")).rsplit(".", 1)[-1]
    if category == "unknown" and short in _PROGRAM_ERRORS:
        evidence = [_head(exc)] + ([f"{frame[0]}:{frame[1]}: {frame[2].strip()}"] if frame else [])
        return Refined("semantic_error", "user", evidence, f"the program raised {short}")
    return None
