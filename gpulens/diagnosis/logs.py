"""Log understanding: bounded reading, the fatal region, evidence lines, input paths.

A training log can be gigabytes of progress bars and warnings; the failure is
almost always described in a small region near the end: the last Python
traceback (with its chained causes), torchrun's "Root Cause" box, or one line
written by the scheduler (Slurm), the kubelet or the kernel (dmesg). This module
finds that region so the rules and the SVM only look at what matters, and so a
misleading earlier error (a caught exception, a deprecation warning mentioning
"error") does not decide the answer.

Reading is bounded: :func:`read_log` reads the head and the tail of a file and,
when the tail holds no failure marker, scans backwards chunk by chunk (up to a
byte budget) for the last traceback; it never loads a whole large file.
"""

from __future__ import annotations

import array
import dataclasses
import os
import re
import stat
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import BinaryIO, overload

from gpulens.diagnosis.guarded import Guarded, Prefiltered, remembered, remembered_text
from gpulens.diagnosis.keyscan import find_keys

__all__ = [
    "FatalRegion",
    "binary_reason",
    "LogText",
    "unreadable_reason",
    "LogView",
    "analyze",
    "blamed_records",
    "error_context",
    "extract_inputs",
    "failing_context",
    "is_hard_error",
    "is_infra",
    "is_secondary",
    "is_weak",
    "fatal_region",
    "last_frames",
    "normalize_line",
    "normalize_lines",
    "read_log",
    "Utf16Ends",
    "bom_codec",
    "count_streamed",
    "read_utf16",
]

#: Bytes read from the start and the end of a file.
HEAD_BYTES = 32 * 1024
TAIL_BYTES = 512 * 1024
#: How far back from the tail to look for a traceback when the tail has none.
SCAN_BYTES = 64 * 1024 * 1024
SCAN_CHUNK = 1024 * 1024
#: Bytes kept around a traceback found by the backwards scan.
WINDOW_BEFORE = 16 * 1024
WINDOW_AFTER = 128 * 1024
#: Lines after the last traceback kept in the fatal region.
MAX_AFTER_LINES = 150
#: Lines at the end of a log without a traceback taken as the fatal region.
TAIL_LINES = 40

_TB_MARK = b"Traceback (most recent call last)"
_MARKERS = (
    _TB_MARK,
    b"Root Cause (first observed failure)",
    b"Fatal Python error",
    b"slurmstepd",
    b"Xid",
    b"Out of memory",
    b"terminate called",
)

# Prefixes that launchers, loggers and schedulers put before a program's own line.
_PREFIX_PATTERN = r"""^(?:
        [ \t]*\[\d+\]<std(?:out|err)>:                                     # horovodrun (Gloo) "[3]<stderr>:"
      | [ \t]*\[(?:rank|default|local_rank)?[ \t]*\d+\][ \t]*:?[ \t]?     # [rank1]: [default0]: [1]: (indent kept)
      | [ \t]*(?:rank|RANK)[ \t]*\d+[ \t]*[:|][ \t]*                      # rank 1: / RANK 1 |
      | \d{1,4}:[ \t]                                                     # srun -l "0: "
      | \[?\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?\]?[ \t]*  # timestamps
        (?:[|-][ \t]+)?                               # and their separator: "%(asctime)s - " / " | "
      | :?[ \t]*\[\d+,\d+\]<std(?:out|err)>:                                # mpirun --tag-output
      | \[[ \t]*\d+\.\d+\][ \t]                                            # dmesg [ 1234.567890]
      | [IWEF]\d{4}[ \t]\d\d:\d\d:\d\d\.\d+[ \t]+\d+[ \t]+\S+:\d+\][ \t]*  # glog: W1122 02:19:36.353 20776 api.py:1028]
      | \[[IWEF]\d{4}[ \t]\d\d:\d\d:\d\d\.\d+[ \t]+(?:\d+[ \t]+)?\S+:\d+\][ \t]*  # [E1206 18:44:12.715 ProcessGroupNCCL.cpp:607]
      | \[?(?:INFO|WARNING|WARN|ERROR|DEBUG|CRITICAL|FATAL|E|W|I)\]?[ \t]*[:|-]?[ \t]+(?=\S)  # levels
      | [\w.-]+[ \t]+\d+[ \t]*\|[ \t]*                                       # host 0 |
      | [\w.]+[ \t]+-[ \t]+(?=(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)[ \t]+-)   # logging "%(name)s - %(levelname)s - "
      | (?:\d{1,3}\.){3}\d{1,3}:[ \t]|localhost:[ \t]                         # pdsh (DeepSpeed multi-node): "10.0.0.7: "
      | [A-Za-z][\w.-]*\d[\w.-]*:[ \t]+(?=\[(?:rank|default)\d+\])            # pdsh "gpu07: " before a rank tag
    )+"""
# Prefixes that launchers, loggers and schedulers put before a program's own line. Only
# blanks and tabs ([ \t], never \s), so the MULTILINE form strips every line of a text in one
# pass without ever joining two lines.
_PREFIX_RE = re.compile(_PREFIX_PATTERN, re.VERBOSE)
_PREFIX_ML = re.compile(_PREFIX_PATTERN, re.VERBOSE | re.MULTILINE)

# Lines written by schedulers, kubelet, the kernel or the NVIDIA driver: always evidence.
_INFRA_RE = re.compile(
    r"slurmstepd|srun: error|salloc: |sbatch: |\*\*\* JOB \d+|\*\*\* STEP \d+|DUE TO (?:TIME LIMIT|PREEMPTION|NODE FAILURE)"
    r"|NVRM: |Xid\b|\bXID\b|Out of memory: Kill|oom-kill|oom_reaper|invoked oom-killer|Memory cgroup out of memory"
    r"|\bEvicted\b|low on resource|OOMKilled|Preempt|preempt|kubelet|SIGTERM|SIGKILL|Signals\.SIG"
    r"|fallen off the bus|uncorrectable ECC|double bit ECC|DBE|row remap"
    r"|Segmentation fault|core dumped|Fatal Python error|terminate called|Aborted"
    r"|\bKilled\b|exitcode\s*:\s*-\d+|killed by signal",
)

#: Cheap substring prefilter for _INFRA_RE (a big alternation is slow in Python's re).
_INFRA_KEYS = (
    "slurm", "srun", "salloc", "sbatch", "*** ", "DUE TO", "NVRM", "Xid", "XID", "Out of memory",
    "oom", "OOM", "Evicted", "low on resource", "reempt", "kubelet", "SIG", "fallen off", "ECC",
    "DBE", "row remap", "Segmentation", "core dumped", "Fatal Python", "terminate called",
    "Aborted", "Killed", "exitcode", "killed by signal",
)


def _infra_candidates(lines: list[str], first: int) -> list[int]:
    """Indexes (>= first) of lines holding an infra keyword (:func:`find_keys`: str.find on one
    block, line numbers counted once)."""
    return find_keys(lines, _INFRA_KEYS, first)


_TRACEBACK = "Traceback (most recent call last)"
_CHAIN_MARKERS = (
    "The above exception was the direct cause of the following exception:",
    "During handling of the above exception, another exception occurred:",
)
_LAUNCHER_EXC = re.compile(r"ChildFailedError|torch\.distributed\.elastic\.multiprocessing\.errors")
_EXC_LINE = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?([A-Z]\w*(?:Error|Exception|Interrupt|Exit|Warning|Failure)|error|Error)\b:?")
#: An exception raised without a message: Python prints only its qualified name ("bdb.BdbQuit").
_BARE_EXC = re.compile(r"^(?:[a-z_]\w*\.)*[A-Z]\w*$")

# Paths mentioned in messages (quoted or bare absolute/relative with a directory part).
_PATH_RE = re.compile(
    r"""(?:'|"|\s|^|=|:)((?:[A-Za-z]:)?(?:~|\.{1,2})?/[^\s'",:;()<>\[\]{}]+|[\w.-]+/[^\s'",:;()<>\[\]{}]*\.[A-Za-z0-9]{1,8})"""
)
_CODE_PATH = re.compile(
    r"\.(?:py|pyc|pyx|so|cc|cpp|cu|h|hpp|c)(?::\d+)?$|site-packages|dist-packages|/lib/python|"
    r"^/(?:usr|proc|sys|dev|etc|opt/conda/lib)/|^https?:|^//|pytorch\.org|/torch/|/bin/|/\.venv/|/envs/"
)


@dataclasses.dataclass
class LogText:
    """What :func:`read_log` read from a file: text plus what was skipped and why."""

    text: str
    size: int
    truncated: bool = False
    reason: str | None = None  # set when the file is not a usable text log


@dataclasses.dataclass
class FatalRegion:
    """The lines that describe the failure: ``lines == text.splitlines()[start_line:end_line]``
    (0-based, end exclusive), for highlighting."""

    start_line: int
    end_line: int
    lines: list[str]


@dataclasses.dataclass
class LogView:
    """Everything the classifier needs from one log."""

    lines: list[str]
    fatal: FatalRegion
    infra_lines: list[str]  # scheduler / kubelet / kernel lines (original text)
    exception_lines: list[str]  # the final "Type: message" lines of each traceback in the region
    focus: str  # normalized text the rules and the SVM look at
    inputs: list[str]  # paths in the failing lines (exception lines, the last traceback's code)
    has_traceback: bool
    #: (file, function, code line) of the frames of the last traceback in the region, outermost first
    frames: list[tuple[str, str, str]] = dataclasses.field(default_factory=list)
    #: the exception lines and the traceback's code lines, innermost first (failing_context)
    failing_lines: list[str] = dataclasses.field(default_factory=list)
    #: Hard error lines found *outside* the fatal region (normalized, in log order, each with its
    #: continuation line): errors printed before a stack, the real error above a truncated or
    #: secondary final traceback, exception lines that are not in any traceback.
    context_lines: list[str] = dataclasses.field(default_factory=list)
    #: The final traceback lost its exception line (paste cut, ranks interleaved).
    truncated: bool = False
    #: Every error line of the log is a secondary symptom (a peer closed the connection, a
    #: launcher reports a child's non-zero exit, an actor died): the originating error is absent.
    secondary_only: bool = False
    #: The secondary lines seen (for the abstention reason).
    secondary_lines: list[str] = dataclasses.field(default_factory=list)


@remembered_text  # the whole-log reader's stages normalize the same lines again
def normalize_line(line: str) -> str:
    """Strip rank prefixes, timestamps and log levels that launchers put before a line."""
    m = _PREFIX_RE.match(line)
    if m and m.end() > 0:
        line = line[m.end():]
    return line.rstrip()


class _LazyNorm(Sequence[str]):
    """``normalize_lines(lines)``, computed line by line on first access: finding the fatal
    region touches a few hundred lines of a log, not all of it."""

    __slots__ = ("_lines", "_cache")

    def __init__(self, lines: list[str]) -> None:
        self._lines = lines
        self._cache: dict[int, str] = {}

    def __len__(self) -> int:
        return len(self._lines)

    @overload
    def __getitem__(self, i: int) -> str: ...

    @overload
    def __getitem__(self, i: slice) -> list[str]: ...

    def __getitem__(self, i: int | slice) -> str | list[str]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self._lines)))]
        if i < 0:
            i += len(self._lines)
        try:
            return self._cache[i]
        except KeyError:
            v = self._cache[i] = normalize_line(self._lines[i])
            return v


def normalize_lines(lines: list[str]) -> list[str]:
    """``[normalize_line(x) for x in lines]`` in one regex pass over the joined text."""
    if not lines:
        return []
    stripped = _PREFIX_ML.sub("", "\n".join(lines)).split("\n")
    return [x.rstrip() for x in stripped]


# --------------------------------------------------------------------------- reading


def _decode(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


_CTRL_BYTES = bytes(b for b in range(32) if b < 9 or 13 < b < 32)


def binary_reason(sample: bytes) -> str | None:
    """Why a sample of a file is not text (NUL or other control bytes, undecodable), or None."""
    return _binary_reason(sample, _decode(sample))


def _binary_reason(sample: bytes, text: str) -> str | None:
    if not sample:
        return None
    nul = sample.count(b"\x00")
    if nul > max(8, len(sample) // 100):
        return "binary data (NUL bytes), not a text log"
    ctrl = len(sample) - len(sample.translate(None, _CTRL_BYTES))
    if ctrl > len(sample) * 0.10:
        return "binary data (control bytes), not a text log"
    bad = text.count("\ufffd")
    if bad > len(text) * 0.30:
        return "mostly undecodable bytes (not UTF-8 text)"
    return None


def unreadable_reason(exc: OSError) -> str:
    """Why a log file could not be read, in the words ``diagnose`` reports."""
    if isinstance(exc, FileNotFoundError):
        return "file not found"
    if isinstance(exc, IsADirectoryError):
        return "is a directory, not a log file"
    if isinstance(exc, PermissionError):
        return "permission denied reading the log"
    return f"cannot read the log ({exc.strerror or exc})"


def read_log(path: str | os.PathLike[str], *, head_bytes: int = HEAD_BYTES,
             tail_bytes: int = TAIL_BYTES, scan_bytes: int = SCAN_BYTES) -> LogText:
    """Read the parts of a log that matter, in bounded memory and time.

    Small files are read whole. Larger ones: the head, the tail and, if the tail
    shows no failure marker, a window around the last traceback found by
    scanning backwards at most ``scan_bytes``. Never raises for unreadable
    content; raises ``OSError`` only when the file cannot be opened.
    """
    fd = _open_regular(path)
    if isinstance(fd, LogText):
        return fd
    with os.fdopen(fd, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if size == 0:
            return LogText("", 0, reason="empty log")
        encoding = bom_codec(fh)
        if encoding is not None:
            got = _read_utf16(fh, size, encoding, 2 * head_bytes, 2 * tail_bytes)
            if got.reason is None:
                return got  # else: two bytes that look like a BOM before UTF-8 text, or binary
        fh.seek(0)
        if size <= head_bytes + tail_bytes:
            data = fh.read(head_bytes + tail_bytes)
            sample = data[:8192] + data[-8192:]
            return LogText(_decode(data), size, reason=_binary_reason(sample, _decode(sample)))
        return _read_ends(fh, size, head_bytes, tail_bytes, scan_bytes)


def _open_regular(path: str | os.PathLike[str]) -> int | LogText:
    """A descriptor of ``path`` open for reading, or (when it is no regular file) why it is not
    read. Raises ``OSError`` when it cannot be opened."""
    fd = os.open(Path(path), os.O_RDONLY | os.O_NONBLOCK)  # a FIFO with no writer must not block
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = ("a FIFO" if stat.S_ISFIFO(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
                else "a socket" if stat.S_ISSOCK(mode) else "not a file")
        return LogText("", 0, reason=f"not a regular file ({kind}); save the log to a file first")
    os.set_blocking(fd, True)
    return fd


def _read_ends(fh: BinaryIO, size: int, head_bytes: int, tail_bytes: int, scan_bytes: int) -> LogText:
    """A (UTF-8) log larger than ``head_bytes + tail_bytes``: its head and its tail and, when the
    tail shows no failure marker, the window around the last traceback before it."""
    head = fh.read(head_bytes)
    fh.seek(size - tail_bytes)
    tail = fh.read(tail_bytes)
    sample = head[:8192] + tail[-8192:]
    reason = _binary_reason(sample, _decode(sample))
    if reason:
        return LogText("", size, truncated=True, reason=reason)
    window = b""
    if not any(m in tail for m in _MARKERS):
        window = _scan_back(fh, size - tail_bytes, scan_bytes, head_bytes)
    parts = [head.rsplit(b"\n", 1)[0]]
    if window:
        parts.append(window)
    # drop the partial first line of the tail
    nl = tail.find(b"\n")
    parts.append(tail[nl + 1:] if nl >= 0 else tail)
    skipped = size - sum(len(x) for x in parts)
    text = f"\n[... gpulens: {skipped} bytes not read ...]\n".join(_decode(x) for x in parts)
    return LogText(text, size, truncated=True)


#: The byte-order marks of UTF-16 logs (Windows PowerShell 5's `>` and Out-File write UTF-16LE
#: with a BOM) and their codecs
UTF16_BOMS = {b"\xff\xfe": "utf-16-le", b"\xfe\xff": "utf-16-be"}
#: Bytes read at a time where a reader streams through a part of a file it does not keep.
STREAM_CHUNK = 8 * 1024 * 1024


def bom_codec(fh: BinaryIO) -> str | None:
    """The UTF-16 codec that the byte-order mark at ``fh``'s position names, or None (no BOM);
    ``fh`` is left two bytes further on."""
    return UTF16_BOMS.get(fh.read(2))


def count_streamed(fh: BinaryIO, start: int, end: int, count: Callable[[bytes], int]) -> int:
    """The sum of ``count`` over the bytes ``start..end`` of ``fh``, read :data:`STREAM_CHUNK`
    bytes at a time (an even size: a UTF-16 unit is never split when ``start`` is unit-aligned)."""
    fh.seek(start)
    total = 0
    pos = start
    while pos < end:
        chunk = fh.read(min(STREAM_CHUNK, end - pos))
        if not chunk:
            break
        total += count(chunk)
        pos += len(chunk)
    return total


def _utf16_newlines(encoding: str) -> Callable[[bytes], int]:
    """A counter of the UTF-16 code units equal to U+000A in (unit-aligned) bytes of
    ``encoding``: exact, unlike counting the byte pair, which can straddle two units."""
    swap = (encoding == "utf-16-le") != (sys.byteorder == "little")

    def count(data: bytes) -> int:
        units = array.array("H", data[: len(data) // 2 * 2])
        if swap:
            units.byteswap()
        return units.count(10)

    return count


@dataclasses.dataclass(frozen=True)
class Utf16Ends:
    """What :func:`read_utf16` read of a UTF-16 log: its ``whole`` text; or (``whole`` None) its
    ``head`` (the first bytes after the BOM, decoded) and its ``tail`` (the last bytes, from a
    unit boundary, decoded, its partial first line dropped), with ``middle_newlines`` counted
    from the head's last line end to the tail (when asked; else 0)."""

    whole: str | None
    head: str = ""
    tail: str = ""
    middle_newlines: int = 0

    @property
    def head_lines(self) -> str | None:
        """The head up to (not including) its last newline, or None when it holds none."""
        return _before_last_newline(self.head)


def _before_last_newline(text: str) -> str | None:
    return text.rsplit("\n", 1)[0] if "\n" in text else None


def read_utf16(fh: BinaryIO, size: int, encoding: str, *, head: int, tail: int, whole: int,
               count_middle: bool = False) -> Utf16Ends:
    """Read a UTF-16 log of ``size`` bytes (``fh`` just after its BOM) in bounded memory: whole
    when at most ``whole`` bytes follow the BOM, else its first ``head`` and last ``tail`` bytes
    (see :class:`Utf16Ends`; the middle streamed when ``count_middle``)."""
    if size - 2 <= whole:
        return Utf16Ends(fh.read().decode(encoding, errors="replace"))
    head_text = fh.read(head - head % 2).decode(encoding, errors="replace")
    start = size - tail + (size - tail) % 2  # unit-aligned (the BOM is one unit)
    middle = 0
    if count_middle:
        lines = _before_last_newline(head_text)  # then the newline after them, then the middle
        head_end = 2 + len(lines.encode(encoding, errors="replace")) + 2 if lines is not None else 2
        middle = count_streamed(fh, head_end, start, _utf16_newlines(encoding))
    fh.seek(start)
    last = fh.read().decode(encoding, errors="replace")
    return Utf16Ends(None, head_text, last[last.find("\n") + 1:], middle)


def _read_utf16(fh: BinaryIO, size: int, encoding: str, head: int, tail: int) -> LogText:
    """A UTF-16 log after its BOM: whole up to ``head + tail`` bytes, else those two ends
    (unit-aligned); text without line structure (random bytes behind a BOM) is refused."""
    ends = read_utf16(fh, size, encoding, head=head, tail=tail, whole=head + tail)
    if ends.whole is not None:
        text = ends.whole
        truncated = False
    else:
        first = ends.head_lines if ends.head_lines is not None else ends.head
        text = f"{first}\n[... gpulens: {size - head - tail} bytes not read ...]\n{ends.tail}"
        truncated = True
    sample = text[:8192] + text[-8192:]
    if not looks_utf16_text(sample):
        return LogText("", size, truncated=truncated, reason="not UTF-16 text")
    return LogText(text, size, truncated=truncated,
                   reason=_binary_reason(sample.encode("utf-8", "replace"), sample))


def looks_utf16_text(sample: str) -> bool:
    """Whether text decoded as UTF-16 reads as a log: at least a fifth of its characters below
    U+0100 (digits, blanks, newlines, punctuation: even a log in Chinese has them). Random bytes
    behind a BOM, or UTF-8 text behind two bytes that look like one, decode to characters all over
    the 65,536 code units: about 0.4% below U+0100."""
    return bool(sample) and len(sample.encode("latin-1", "ignore")) >= len(sample) / 5


def _scan_back(fh: object, end: int, budget: int, floor: int) -> bytes:
    """Find the last traceback before ``end`` (at most ``budget`` bytes back); return a window."""
    import io

    assert isinstance(fh, io.BufferedReader)
    pos = end
    overlap = len(_TB_MARK)
    stop = max(floor, end - budget)
    while pos > stop:
        start = max(stop, pos - SCAN_CHUNK)
        fh.seek(start)
        chunk = fh.read(pos - start + overlap)
        i = chunk.rfind(_TB_MARK)
        if i >= 0:
            at = start + i
            lo = max(floor, at - WINDOW_BEFORE)
            hi = min(end, at + WINDOW_AFTER)
            fh.seek(lo)
            win = fh.read(hi - lo)
            nl = win.find(b"\n")
            win = win[nl + 1:] if nl >= 0 else win
            return win.rsplit(b"\n", 1)[0]
        pos = start
    return b""


# --------------------------------------------------------------------------- fatal region


def _traceback_starts(lines: list[str]) -> list[int]:
    return [i for i, ln in enumerate(lines) if _TRACEBACK in ln]


def _traceback_end(norm: Sequence[str], start: int) -> int:
    """Index one past the exception message that ends the traceback starting at ``start``."""
    n = len(norm)
    i = start + 1
    # frames: indented lines ("  File ...", code lines, "    ^^^^")
    while i < n and (norm[i].startswith((" ", "\t")) or norm[i] == ""):
        if norm[i] == "" and i + 1 < n and not norm[i + 1].startswith((" ", "\t")):
            break
        i += 1
    # exception message: the first unindented line and its continuation lines
    end = min(n, i + 1)
    j = end
    limit = min(n, i + 40)
    while j < limit:
        s = norm[j]
        if s == "" or _TRACEBACK in s or s in _CHAIN_MARKERS:
            break
        if s.startswith((" ", "\t", "=", "-", "[", "(", "<", "{", "Root Cause", "Failures")):
            j += 1
            continue
        if _EXC_LINE.match(s) is None and len(s) < 200 and not re.match(r"^[a-z0-9]", s):
            break
        j += 1
    return max(end, j)


def _chain_start(norm: Sequence[str], start: int, starts: list[int]) -> int:
    """Extend a traceback backwards over its chained causes."""
    current = start
    while True:
        k = current - 1
        while k >= 0 and norm[k].strip() == "":
            k -= 1
        if k < 0 or norm[k].strip() not in _CHAIN_MARKERS:
            return current
        earlier = [s for s in starts if s < k]
        if not earlier:
            return current
        current = earlier[-1]


def _root_cause_box(lines: list[str], norm: Sequence[str]) -> tuple[int, int] | None:
    idx = None
    for i in range(len(lines) - 1, -1, -1):
        if "Root Cause (first observed failure)" in lines[i]:
            idx = i
            break
    if idx is None:
        return None
    end = idx + 1
    while end < len(norm) and end < idx + 60:
        if norm[end].startswith("====="):
            end += 1
            break
        end += 1
    start = idx
    for k in range(idx - 1, max(-1, idx - 40), -1):
        if "FAILED" in norm[k] or "ChildFailedError" in norm[k]:
            start = k
            break
    return start, end


_RANK_PREFIX = re.compile(r"^\s*\[(?:rank|default)?(\d+)\]\s*:")
_ROOT_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)")
_PROGRESS = re.compile(r"\b(?:step|epoch|iter(?:ation)?|loss|batch)\b|it/s|s/it", re.IGNORECASE)


def _root_rank(norm: Sequence[str], box: tuple[int, int] | None) -> int | None:
    if box is None:
        return None
    start = next((i for i in range(box[0], box[1]) if "Root Cause" in norm[i]), box[0])
    for i in range(start, min(len(norm), box[1])):
        m = _ROOT_RANK.match(norm[i])
        if m:
            return int(m.group(1))
    return None


def _rank_of(line: str) -> int | None:
    m = _RANK_PREFIX.match(line)
    return int(m.group(1)) if m else None


def _region(lines: list[str], norm: Sequence[str]) -> tuple[int, int, bool, int | None]:
    """(start, end, has_traceback, root_rank) of the fatal region."""
    n = len(lines)
    starts = _traceback_starts(lines)  # the marker survives normalization: raw lines will do
    if not starts:
        return max(0, n - TAIL_LINES), n, False, None
    last = starts[-1]
    last_end = _traceback_end(norm, last)
    launcher = any(_LAUNCHER_EXC.search(norm[k]) for k in range(last, min(n, last_end + 2)))
    if launcher:
        # torchrun's own ChildFailedError traceback: the root-cause rank's traceback is the cause
        box = _root_cause_box(lines, norm)
        box_end = box[1] if box else last_end
        rank = _root_rank(norm, box)
        earlier = [s for s in starts if s < last and last - s < 5000]
        if rank is not None:
            mine = [s for s in earlier if _rank_of(lines[s]) == rank]
            if mine:
                earlier = mine
        if earlier:
            start = _chain_start(norm, earlier[-1], starts)
        else:
            start = box[0] if box else last
        return start, min(n, max(box_end, last_end) + 5), True, rank
    if n - last_end > MAX_AFTER_LINES:
        # the job went on after this traceback (caught and logged): the end of the log decides
        return max(0, n - TAIL_LINES), n, False, None
    after = norm[last_end:]
    if len(after) > MAX_AFTER_LINES or _count_progress(after, 3) >= 3:
        # the job went on after this traceback (caught and logged): the end of the log decides
        return max(0, n - TAIL_LINES), n, False, None
    return _chain_start(norm, last, starts), n, True, None


def _count_progress(lines: Sequence[str], enough: int) -> int:
    n = 0
    for x in lines:
        if _PROGRESS.search(x):
            n += 1
            if n >= enough:
                break
    return n


def fatal_region(text: str) -> FatalRegion:
    """The last traceback with its chained causes (or the torchrun root-cause box, or the
    last lines when there is no traceback)."""
    lines = text.splitlines()
    start, end, _, _ = _region(lines, _LazyNorm(lines))
    return FatalRegion(start, end, lines[start:end])


# --------------------------------------------------------------------------- inputs


#: path-like tokens that are never a job's input: progress-bar fractions (``2.20kit/30.0kit``,
#: ``12/64``), experiment-tracker run directories, launcher/framework config files
_NOT_INPUT = re.compile(
    r"^[\d.,]+\s*[kMGTP]?(?:it|B|s)?/[\d.,]+|"
    r"(?:^|/)(?:wandb|mlruns|lightning_logs|tensorboard|tb_logs)(?:/|$)|"
    r"(?:^|/)(?:[^/]*(?:config|cfg)[^/]*|ds_[^/]*|deepspeed[^/]*|zero[^/]*|(?:configs?|conf)/[^/]*)"
    r"\.(?:json|ya?ml|toml|ini|cfg)$"
)
#: a record position named by the failing line: "line 52", "record 7", "offset 1844", "index 3"
_RECORD = re.compile(
    r"\b(record|line|row|index|sample|example|item|offset|byte)\s*(?:#|no\.?|number)?\s*[:=]?\s*(\d+)",
    re.IGNORECASE,
)


#: the path an error message names: the object of these phrases, ...
_NAMED_BY_ERROR = re.compile(
    r"""(?:No such file or directory|does not exist|not found|Permission denied)[^'"\n]*['"]([^'"\n]+)['"]""")
#: ... a bare path on a line saying something is missing, a quoted path on an error line
_MISSING_WORDS = re.compile(r"not found|does not exist|missing|No such|cannot find|can't find", re.IGNORECASE)
_BARE = re.compile(r"(?:^|[\s:(])((?:[\w.~-]*/)+[\w.-]+|[\w-]+\.[A-Za-z]\w{0,5})(?=$|[\s,;:)])")
_QUOTED = re.compile(r"""['"]([^'"\s]*[/.][^'"\s]*)['"]""")


def _named_by_error(lines: Sequence[str]) -> Iterator[str]:
    """Paths an error message names, surest first: ``No such file or directory: 'x'``, the
    validator's ``missing path x``, a bare path on a "not found" line, a quoted one on an error line."""
    for ln in lines:
        if m := _NAMED_BY_ERROR.search(ln):
            yield m.group(1)
    for ln in lines:
        if ln.startswith("missing path ") and len(ln.split()) > 2:
            yield ln.split()[2]
    for ln in lines:
        if _MISSING_WORDS.search(ln) and (m := _BARE.search(ln.split(": ", 1)[-1])):
            yield m.group(1)
    for ln in lines:
        if ("Error" in ln or "assert" in ln) and (m := _QUOTED.search(ln)):
            yield m.group(1)


def extract_inputs(lines: Sequence[str], *, any_file: bool = False) -> list[str]:
    """The paths the lines name (the one project-wide path extractor): those an error message
    names first, then the others in line order. Data/checkpoint paths only (a directory part;
    not source files, library paths, progress bars, tracker run directories or config files),
    unless ``any_file``: then only what an error names, whatever it is (``'nvidia-smi'``,
    ``train.bin``), as the validator's fix hints want."""
    named = list(_named_by_error(lines))
    if any_file:
        return list(dict.fromkeys(named))[:20]
    mentioned = (m.group(1) for ln in lines if not ln.lstrip().startswith('File "') for m in _PATH_RE.finditer(ln))
    seen: dict[str, None] = {}
    for raw in (*named, *mentioned):
        path = raw.rstrip(".")
        if len(path) < 3 or _CODE_PATH.search(path) or "/" not in path or _NOT_INPUT.search(path):
            continue
        seen.setdefault(path, None)
    return list(seen)[:20]


def failing_context(region: Sequence[str], exception_lines: Sequence[str]) -> list[str]:
    """The lines that say what failed: the last exception lines, then the code line under
    each traceback frame of the region, innermost first (indentation may be stripped)."""
    code: list[str] = []
    for i in range(len(region) - 1):
        if _FRAME_RE.match(region[i]):
            nxt = region[i + 1].strip()
            if nxt and not _FRAME_RE.match(region[i + 1]) and not nxt.startswith(("^", "~")):
                code.append(nxt)
    return [*exception_lines[-3:], *reversed(code)]


def blamed_records(context: Sequence[str]) -> list[str]:
    """Record positions the failing lines name ("line 52", "offset 18446744")."""
    seen: dict[str, None] = {}
    for ln in context:
        if ln.lstrip().startswith('File "'):
            continue
        for m in _RECORD.finditer(ln):
            seen.setdefault(f"{m.group(1).lower()} {m.group(2)}", None)
    return list(seen)[:5]


# --------------------------------------------------------------------------- error lines anywhere

#: Lines looked at (from the end) when searching error lines outside the fatal region.
ERROR_SCAN_LINES = 600
#: At most this many context lines are kept (the earliest and the latest halves).
MAX_CONTEXT = 24

#: Cheap literal prefilter for lines that may state an error.
_ERR_KEY = re.compile(
    r"Error|error|ERROR|Exception|FATAL|Fatal|fatal|[Ff]ailed|FAILED|[Kk]illed|xhausted|EXHAUSTED"
    r"|[Aa]ssert|[Aa]bort|Segmentation|denied|No space|CANCELLED|OOM|[Tt]imed out|[Tt]imeout|[Ii]nvalid"
)
#: Shapes of lines that state a failure (checked on normalized lines).
#: A metric's value and nothing else after the colon ("MeanSquaredError: 0.0123", "Error: 3.2%", "error - 1e-4"): a
#: result line named for an error, not an error. A whole number alone is not one ("KeyError: 3" is a dict's missing key).
_METRIC = r"\s*[-+]?(?:\d*\.\d+(?:[eE][-+]?\d+)?\s*%?|\d+(?:[eE][-+]?\d+\s*%?|\s*%))\s*$"
#: Literals of the Open MPI / PRRTE / Horovod launch and stall failures in _HARD_RE (help texts with no error
#: word of their own): every literal prefilter of failure lines holds them (here, lines.ERROR_KEYS).
MPI_LAUNCH_KEYS = ("slots available", "run as root", "unable to launch", "find the specified executable",
                   "TCP connection", "reliably start", "lost communication", "MPI_INIT", "MPI_Init", "MPI_ABORT",
                   "stalled for longer")
_HARD_RE = re.compile(
    r"^(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception|Failure|Exit)(?:\([\w.]*\))?\s*(?::(?!" + _METRIC + r")|$)"  # Python
    r"|^(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception)\b.*\bsee above\b"                 # TF summary
    r"|^(?:F\d{4}\s|Check failed|\S+\s+Check failed|\*\*\* Check failure)"                  # glog fatal
    r"|^terminate called|^libc\+\+abi: terminating|Segmentation fault|\bBus error|Illegal instruction|Fatal Python error"
    r"|SIGKILL|SIGSEGV|SIGABRT|SIGBUS|Signals\.SIG|exitcode\s*:\s*-\d+|signal \d+ \(SIG"
    r"|^(?:ERROR|FATAL|Error|error|CRITICAL)\b\s*[:|\]-](?!" + _METRIC + r")"                        # level words
    r"|\b(?:CUDA error|CUDA_ERROR_\w+|cudaError\w+|HIP error|ROCm error|hipError\w+|HSA_STATUS_ERROR_\w+|NCCL error|RESOURCE_EXHAUSTED|INTERNAL:|"
    r"Resource exhausted|OOM when allocating|out of memory|No space left on device|Permission denied|"
    r"Read-only file system|Input/output error|Stale file handle|INTERNAL ASSERT FAILED|Assertion .* failed|"
    r"AssertionError|device-side assert|RET_CHECK failure|Killed|killed by signal|Out Of Memory|"
    r"DUE TO TIME LIMIT|CANCELLED AT|walltime|timed out|Timeout(?!\s*=\s*\d)|timeout(?!\s*[=:]\s*\d))"  # not a setting: "timeout=5", "timeout: 30"
    # Open MPI / PRRTE help texts that end the launch (help-orte-rmaps-base.txt alloc-error, help-orterun.txt root,
    # help-orte-odls-base.txt execv-error, ORTE/PRRTE oob_tcp_connection.c, help-plm-base.txt, PRRTE errmgr,
    # help-mpi-runtime.txt mpi_init:startup; ompi/errhandler "*** An error occurred in MPI_Init"), and Horovod's stall
    # inspector shutting the job down (horovod/common/stall_inspector.cc): blocks with no error word of their own
    r"|There are not enough slots available in the system|mpirun has detected an attempt to run as root"
    r"|mpirun was unable to (?:launch the specified application|find the specified executable)"
    r"|unable to complete a TCP connection|ORTE was unable to reliably start one or more daemons"
    r"|(?:PRTE|ORTE) has lost communication with (?:a remote daemon|its daemon)|MPI_INIT failed for some reason"
    r"|An error occurred in MPI_Init|is stalled for longer than \d+ seconds\. Will shutdown"
    # ompi/runtime/ompi_mpi_init.c: "Local abort before MPI_INIT completed completed successfully, but am not able
    # to aggregate error messages, ..." (its "completed successfully" is no completion)
    r"|Local abort before MPI_INIT completed"
)
#: Secondary symptoms: true, but caused by an error that happened elsewhere (another rank,
#: a child process, a dead actor). A log holding only these does not say why it failed. A child
#: that a fatal signal ended (torch.multiprocessing.spawn's "process 1 terminated with signal
#: SIGSEGV", SIGKILL) is told how it died; one the parent stopped (SIGTERM, SIGINT) is not.
_SECONDARY_RE = Guarded(
    r"ChildFailedError|CalledProcessError|ProcessExitedException(?!: process \d+ terminated with signal SIG(?:SEGV|ABRT|BUS|ILL|FPE|KILL)\b)"
    r"|ProcessRaisedException(?!.*\w+Error:)"
    r"|process \d+ terminated with (?:exit code|signal SIG(?:TERM|INT|HUP)\b)|returned non-zero exit status|exitcode\s*:\s*1\b"
    r"|exits? with return code\s*=\s*1\b|exited with (?:code|status) 1\b|non-zero exit (?:code|status)"
    r"|EOF (?:from|on) (?:the )?(?:peer|socket)"
    r"|RayActorError|ActorDiedError|ActorUnavailableError|[Tt]he actor (?:died|is dead)|[Ww]orker (?:process )?(?:has )?died|RaySystemError"
    r"|[Tt]here are some potential root causes|[Ww]orker unexpectedly exits"
    r"|Sending process \d+ closing signal|WorkerGroupFailure"
    r"|error_file\s*:|Root Cause \(first observed failure\)|^Failures:|primary job\s+terminated"
    r"|detected that one or more processes exited"
    r"|Killing subprocess|[Ss]ubprocess .* (?:died|exited)|one or more (?:processes|ranks) (?:failed|exited)"
    r"|Terminating process|\bfailed \(exitcode: 1\)|[Pp]lease inspect the previous error messages"
    r"|MPI_ABORT was invoked on rank"  # Open MPI help-mpi-api.txt [mpi-abort]: a rank called MPI_Abort; why is above
    # Sample Factory's runner (``sample_factory/algo/runners/runner.py``, ``_check_heartbeats``): "Stopping training due to
    # lack of heartbeats from <class '...RolloutWorker'>" once its workers stopped reporting: why they did is above
    r"|Stopping training due to lack of heartbeats",
    ("ChildFailedError", "CalledProcessError", "ProcessExitedException", "ProcessRaisedException", "terminated with",
     "non-zero exit", "exitcode", "with return code", "exited with ", "EOF ", "Actor", "he actor ", "orker ",
     "RaySystemError", "here are some potential root causes", "Sending process ", "WorkerGroupFailure",
     "error_file", "Root Cause", "Failures:", "primary job", "one or more ", "Killing subprocess", "ubprocess ",
     "Terminating process", "lease inspect the previous error", "MPI_ABORT was invoked", "lack of heartbeats"),
)
_NOISE_ERR = Guarded(
    r"Warning\b|warnings\.warn|\bwarn(?:ing)?\s*:|UserWarning|FutureWarning|DeprecationWarning|^\s*File \""
    r"|\b0 errors?\b|errors?\s*[:=]\s*0\b|error_file: <N/A>|\bif .*error|\berror_?handl|ignore_errors"
    # code lines of a traceback printed without indentation: "raise X", an except clause (it ends with its colon; torch's
    # message "Sizes of tensors must match except in dimension 1" is no code line)
    r"|on_error|errors='|--\w*error|raise \w|\bexcept\b[^:]*:\s*$"
    # a row of wandb's run summary or history at the process's exit (``wandb_run.py`` ``_footer``): a metric's name and
    # its value or sparkline ("wandb:          hero/timeout 0.0", "wandb:   train/oom_count ▁▁▁▁"), no failure
    r"|^wandb:\s+[\w/.()\[\]-]+\s+(?:[-+]?(?:\d[\d.]*(?:e[-+]?\d+)?|nan|inf)|True|False|[▁▂▃▄▅▆▇█ ]+)$",
    ("Warning", "warn", 'File "', "error", "raise ", "except ", "wandb:"), split=True,
)


#: Connection-level symptoms: weak (a hard error elsewhere in the log is preferred to them), but
#: on their own they are what a communication failure looks like, so they do not make a log
#: secondary-only.
_PEER_RE = re.compile(r"Connection (?:closed|reset) by (?:remote )?peer|Broken pipe|has (?:been )?shut ?down"
                      r"|[Pp]eer .*(?:shut ?down|closed)")


#: Literal prefilter for lines that may be hard or secondary error lines.
_ANY_KEY = re.compile(_ERR_KEY.pattern + r"|exit|Connection|Broken pipe|actor|[Ww]orker|signal|Root Cause"
                      r"|Failures|terminated|shut ?down|Killing|Terminating|SIG|Bus error|Illegal"
                      r"|" + "|".join(re.escape(k) for k in MPI_LAUNCH_KEYS))


#: _HARD_RE, _PROGRESS, _ERR_KEY and _PEER_RE searched only on lines holding a literal their
#: patterns require (read from the patterns: the same answers, see guarded.Prefiltered).
_HARD_FAST = Prefiltered(_HARD_RE)
_PROGRESS_FAST = Prefiltered(_PROGRESS)
_ERR_KEY_FAST = Prefiltered(_ERR_KEY)
_PEER_FAST = Prefiltered(_PEER_RE)


@remembered  # a pure test of one line, asked again about the same lines by several stages
def is_secondary(line: str) -> bool:
    """Whether a (normalized) line is only a secondary symptom of an error elsewhere."""
    return _SECONDARY_RE.search(line) is not None


def is_infra(raw: str) -> bool:
    """Whether a raw line is a scheduler's, the kernel's or the driver's, or a process abort."""
    return _INFRA_RE.search(raw) is not None and not _is_noise(normalize_line(raw))


@remembered  # a pure test of one line, asked again about the same lines by several stages
def is_weak(line: str) -> bool:
    """Secondary, or a connection-level symptom (a hard error elsewhere is preferred)."""
    return _SECONDARY_RE.search(line) is not None or _PEER_FAST.matches(line)


@remembered  # asked again about the same lines by several stages
def is_hard_error(line: str) -> bool:
    """Whether a (normalized) line states a failure (not a warning, not a code line)."""
    s = line.strip()
    if not s or line.startswith((" ", "\t")) or _NOISE_ERR.search(s):
        return False
    return _HARD_FAST.matches(s)


def _going_on_before(norm: Sequence[str], floor: int, stop: int, enough: int = 3) -> int:
    """The index ``k`` of the ``enough``-th progress line counted back from ``stop``: an error
    line at ``i < k`` was followed by ongoing training (at least ``enough`` progress lines, not
    counting traceback frames and code lines such as "for batch in loader:"), and did not end
    the job; ``floor`` when there are fewer."""
    count = 0
    for i in range(stop - 1, floor, -1):
        ln = norm[i]
        if ln.startswith((" ", "\t")) or "Traceback" in ln:
            continue
        if _PROGRESS_FAST.matches(ln) and not _ERR_KEY_FAST.matches(ln):
            count += 1
            if count >= enough:
                return i
    return floor


#: The literals of _ERR_KEY, searched with str.find (much faster than the regex on a long block).
_ERR_LITERALS = (
    "Error", "error", "ERROR", "Exception", "FATAL", "Fatal", "fatal", "failed", "Failed", "FAILED",
    "killed", "Killed", "xhausted", "EXHAUSTED", "assert", "Assert", "abort", "Abort", "Segmentation",
    "denied", "No space", "CANCELLED", "OOM", "timed out", "Timed out", "timeout", "Timeout", "nvalid",
    *MPI_LAUNCH_KEYS,
)


def _error_hits(lines: list[str], first: int) -> list[int]:
    """Indexes (>= first) of lines holding an error keyword (see find_keys)."""
    return find_keys(lines, _ERR_LITERALS, first)


#: A glog/TensorFlow source prefix without a date (" W tensorflow/core/x.cc:1753] ", or without its level).
_GLOG_SHORT = re.compile(r"^[\s:]*(?:[IWEF]\d{0,4}\s+)?[\w/.-]+\.(?:cc|cpp|h|py|c):\d+\]\s*")


def error_context(lines: list[str], norm: Sequence[str], start: int, end: int) -> list[str]:
    """Hard error lines outside ``[start, end)`` (the fatal region), in log order, each with its
    continuation line; lines followed by ongoing training (progress lines) are dropped: the
    job went on after them, they did not end it."""
    n = len(lines)
    out: list[str] = []
    going_on = _going_on_before(norm, max(0, n - ERROR_SCAN_LINES) - 1, n)
    for i in _error_hits(lines, max(0, n - ERROR_SCAN_LINES)):
        if start <= i < end:
            continue
        s = _GLOG_SHORT.sub("", norm[i], count=1)
        if i < going_on or not is_hard_error(s):
            continue
        out.append(s.strip()[:400])
        if i + 1 < n and not (start <= i + 1 < end):
            nxt = norm[i + 1].strip()
            if nxt and _TRACEBACK not in nxt and not nxt.startswith("File ") and len(nxt) < 400:
                out.append(nxt)
    out = list(dict.fromkeys(out))
    if len(out) > MAX_CONTEXT:
        out = out[: MAX_CONTEXT // 2] + out[-MAX_CONTEXT // 2:]
    return out


def _secondary_only(exc_lines: list[str], infra_norm: list[str], context: list[str],
                    region: list[str]) -> tuple[bool, list[str]]:
    """(whether every error line is secondary, the secondary lines seen)."""
    errors = [x for x in exc_lines + infra_norm + context if is_hard_error(x) or is_secondary(x)]
    if not exc_lines:  # no traceback ended with an exception: look at the region's error lines too
        errors += [x for x in region if _ANY_KEY.search(x) and (is_hard_error(x) or is_secondary(x))]
    secondary = [x.strip() for x in errors if is_secondary(x)]
    primary = [x for x in errors if not is_secondary(x) and not _GENERIC_EXIT.search(x)]
    return bool(secondary) and not primary, list(dict.fromkeys(secondary))[:4]


#: Lines that only restate that a child exited (no cause of their own).
_GENERIC_EXIT = re.compile(
    r"^(?:subprocess\.)?CalledProcessError|^(?:torch\.\S+\.)?ChildFailedError"
    r"|^(?:\w+\.)*ProcessExitedException(?!: process \d+ terminated with signal SIG(?:SEGV|ABRT|BUS|ILL|FPE|KILL)\b)"
    r"|^(?:ERROR|error)\b.*\b(?:exit(?:ed)?|return) (?:code|status)\b|exitcode\s*:\s*1\b|^\s*$"
)


# --------------------------------------------------------------------------- analysis


def analyze(text: str) -> LogView:
    """Split a log into the parts the classifier uses."""
    lines = text.splitlines()
    n = len(lines)
    norm = _LazyNorm(lines)  # only the lines looked at get normalized
    start, end, has_tb, root_rank = _region(lines, norm)
    if root_rank is not None:  # drop other ranks' lines (symptoms of the root rank's failure)
        region_norm = [
            norm[i] for i in range(start, end) if _rank_of(lines[i]) in (None, root_rank)
        ]
    else:
        region_norm = norm[start:end]
    infra: list[str] = []
    infra_norm: list[str] = []
    scan_from = max(0, n - 400)
    for i in _infra_candidates(lines, scan_from):
        if _INFRA_RE.search(lines[i]) is None or _is_noise(norm[i]):
            continue
        if start <= i < end:
            if lines[i] not in infra:
                infra.append(lines[i])
        else:
            infra.append(lines[i])
            infra_norm.append(norm[i])
    exc_lines = _exception_lines(region_norm)
    tail_norm = norm[max(end, n - 5):n] if end < n else []
    focus = "\n".join(region_norm + infra_norm + tail_norm)
    context = error_context(lines, norm, start, end)
    failing = failing_context(region_norm, exc_lines)
    if not exc_lines:  # the exception line is missing from the region (cut paste): take the context's
        failing += [x for x in context[-3:] if is_hard_error(x)]
    truncated = has_tb and _last_traceback_truncated(region_norm)
    sec_only, sec_lines = _secondary_only(exc_lines, infra_norm + [normalize_line(x) for x in infra],
                                          context, region_norm[-TAIL_LINES:])
    return LogView(lines=lines, fatal=FatalRegion(start, end, lines[start:end]),
                   infra_lines=infra[-12:], exception_lines=exc_lines, focus=focus,
                   inputs=extract_inputs(failing), has_traceback=has_tb,
                   frames=last_frames(region_norm), failing_lines=failing,
                   context_lines=context, truncated=truncated, secondary_only=sec_only,
                   secondary_lines=sec_lines)


def _last_traceback_truncated(region: list[str]) -> bool:
    """Whether the last traceback of the region ends without its exception line."""
    at = next((i for i in range(len(region) - 1, -1, -1) if _TRACEBACK in region[i]), None)
    if at is None:
        return False
    return not any(s and not s.startswith((" ", "\t")) and _ends_traceback(s)
                   for s in region[at + 1:])


_FRAME_RE = re.compile(r'^\s*File "([^"]+)", line \d+, in (\S+)')


def last_frames(region: list[str]) -> list[tuple[str, str, str]]:
    """(file, function, code) of each frame of the last traceback in ``region``."""
    at = next((i for i in range(len(region) - 1, -1, -1) if _TRACEBACK in region[i]), None)
    if at is None:
        return []
    frames: list[tuple[str, str, str]] = []
    i = at + 1
    n = len(region)
    while i < n and i < at + 400:
        m = _FRAME_RE.match(region[i])
        if m:
            code = ""
            if i + 1 < n and region[i + 1].startswith(("    ", "\t")) and not _FRAME_RE.match(region[i + 1]):
                code = region[i + 1].strip()
            frames.append((m.group(1), m.group(2), code))
        elif region[i] and not region[i].startswith((" ", "\t")):
            break  # the exception line ends the frames
        i += 1
    return frames[-12:]


def _is_noise(norm_line: str) -> bool:
    s = norm_line.lstrip()
    return s.startswith(("File ", "warnings.warn")) or "Warning:" in s and "Killed" not in s


def _ends_traceback(s: str) -> bool:
    """Whether an unindented line after a traceback's frames is its exception line."""
    return _EXC_LINE.match(s) is not None or ":" in s or _BARE_EXC.match(s) is not None


def _exception_lines(region: list[str]) -> list[str]:
    out: list[str] = []
    in_tb = False
    for i, s in enumerate(region):
        if _TRACEBACK in s:
            in_tb = True
            continue
        if in_tb and s and not s.startswith((" ", "\t")):
            if _ends_traceback(s):
                out.append(s.strip())
                in_tb = False
        if not in_tb and i > 0 and out and s and region[i - 1].strip() == out[-1] and not s.startswith(" "):
            continue
    return out
