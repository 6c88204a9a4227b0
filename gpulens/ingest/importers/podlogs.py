"""Kubernetes container logs: find them, strip the runtime's prefix, stage a plain copy.

Two sources, both found under any path given to ``gpulens import kubernetes --logs``:

* the kubelet's files on a node, ``/var/log/pods/<namespace>_<pod>_<uid>/<container>/<N>.log``
  where ``N`` is the container's restart count when it started (so restart N is attempt N),
  with the pieces log rotation left (``N.log.20260105-090000``, ``N.log.20260105-080000.gz``),
  read oldest first. Lines are in the CRI format, ``<RFC3339Nano time> stdout|stderr F|P <text>``
  (``P``: a partial line, joined with the next ones of the same stream up to an ``F``); the
  Docker ``json-file`` format (``{"log": ..., "stream": ..., "time": ...}``) of dockershim-era
  nodes is read too.
* ``kubectl logs [--previous]`` dumps named ``<namespace>_<pod>[_<container>][.previous].log``
  (``_`` appears in no namespace, pod or container name). ``--timestamps`` prefixes are
  stripped. The current container's log is the pod's last attempt, ``--previous`` the one
  before.

The copy (:func:`stage_copy`) is the plain text the classifier and the dashboard read: no
prefix, partial lines joined, at most :data:`MAX_COPY_BYTES` (the first
:data:`HEAD_KEEP_BYTES` and the end, with one line saying what was left out between). Bad
lines are kept as they are and counted; a binary file is skipped and counted; neither is
ever a traceback.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, cast

from gpulens.errors import InputError
from gpulens.ingest.importers.common import Quirks

__all__ = ["HEAD_KEEP_BYTES", "MAX_COPY_BYTES", "LogFile", "find_logs", "stage_copy"]

#: Largest copy kept per attempt (the classifier scans at most this much of a log).
MAX_COPY_BYTES = 64 * 1024 * 1024
#: How much of the beginning a longer log keeps (start-up lines: versions, hosts, config).
HEAD_KEEP_BYTES = 4 * 1024 * 1024
_MAX_LINE = 1024 * 1024  # a longer line (or a partial line never completed) is cut here

_NAME = r"[a-z0-9](?:[a-z0-9.-]*[a-z0-9])?"  # DNS-1123: namespaces, pods, containers
_POD_DIR = re.compile(rf"^({_NAME})_({_NAME})_([0-9a-fA-F-]{{8,}})$")
_KUBELET_FILE = re.compile(r"^(\d{1,6})\.log(?:\.(\d{8}-\d{6}))?(\.gz)?$")
_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]*[a-z0-9])?")  # namespaces, containers: no dots
_CRI = re.compile(rb"^\d{4}-\d\d-\d\dT\S+ (stdout|stderr) ([FP])(?::\S*)?(?: |$)")
_STAMP = re.compile(rb"^\d{4}-\d\d-\d\dT[0-9:.]+(?:Z|[+-]\d\d:?\d\d) ?")


@dataclass(frozen=True)
class LogFile:
    """One container run's log: where it is and whose it is."""

    namespace: str
    pod: str
    uid: str | None  # kubelet files name the pod's uid; kubectl dumps do not
    container: str | None  # None: a dump that names no container (the pod's main one)
    restart: int | None  # kubelet: the restart count; None for dumps
    previous: bool  # a `kubectl logs --previous` dump
    pieces: tuple[Path, ...]  # oldest first

    @property
    def kubelet(self) -> bool:
        return self.restart is not None

    @property
    def job_id(self) -> str:
        return f"{self.namespace}/{self.pod}"


# ------------------------------------------------------------------ discovery
def _rotated_key(p: Path) -> tuple[int, str]:
    m = _KUBELET_FILE.match(p.name)
    stamp = m.group(2) if m else None
    return (1, "") if stamp is None else (0, stamp)  # rotated pieces by time, the live file last


def _kubelet(path: Path) -> tuple[str, str, str, str, int] | None:
    m = _KUBELET_FILE.match(path.name)
    pod = _POD_DIR.match(path.parent.parent.name)
    if not m or not pod or not re.fullmatch(_NAME, path.parent.name):
        return None
    return pod.group(1), pod.group(2), pod.group(3), path.parent.name, int(m.group(1))


def _dump(path: Path) -> LogFile | None:
    """A `kubectl logs` dump named ``<namespace>_<pod>[_<container>][.previous].log``."""
    stem, dot, ext = path.name.rpartition(".")
    if not dot or ext not in ("log", "txt"):
        return None
    previous = stem.endswith(".previous")
    parts = stem.removesuffix(".previous").split("_")
    if len(parts) not in (2, 3) or not _LABEL.fullmatch(parts[0]) or not re.fullmatch(_NAME, parts[1]) \
            or (len(parts) == 3 and not _LABEL.fullmatch(parts[2])):
        return None
    return LogFile(parts[0], parts[1], None, parts[2] if len(parts) == 3 else None, None, previous, (path,))


def _files(root: Path) -> Iterator[Path]:
    if root.is_file():
        yield root
        return
    for dirpath, _dirs, names in os.walk(root):
        for name in sorted(names):
            yield Path(dirpath) / name


def find_logs(roots: Iterable[Path], q: Quirks) -> list[LogFile]:
    """Every container log under ``roots`` (directories or files), unrecognised files counted."""
    kubelet: dict[tuple[str, str, str, str, int], list[Path]] = {}
    out: list[LogFile] = []
    for root in roots:
        if not root.exists():
            raise InputError(f"{root} does not exist.",
                             "Pass the kubelet's pod log directory (/var/log/pods) or `kubectl logs` dumps.")
        for path in _files(root):
            if path.is_symlink() and not path.exists():
                q["log_files_dangling_links"] += 1
                continue
            key = _kubelet(path)
            if key is not None:
                kubelet.setdefault(key, []).append(path)
                continue
            dump = _dump(path)
            if dump is None:
                q["log_files_not_recognised"] += 1
                continue
            out.append(dump)
    for (ns, pod, uid, container, restart), paths in sorted(kubelet.items()):
        out.append(LogFile(ns, pod, uid, container, restart, False, tuple(sorted(paths, key=_rotated_key))))
    return out


# ------------------------------------------------------------------ reading
def _open(path: Path) -> BinaryIO:
    if path.name.endswith(".gz"):
        return cast(BinaryIO, gzip.open(path, "rb"))
    return open(path, "rb")


def _raw_lines(lf: LogFile, q: Quirks) -> Iterator[bytes]:
    for path in lf.pieces:
        try:
            with _open(path) as fh:
                while chunk := fh.readline(_MAX_LINE):
                    yield chunk.rstrip(b"\r\n")
        except PermissionError:
            raise InputError(f"{path}: permission denied.",
                             "The kubelet's /var/log/pods is readable by root only: run the import as root "
                             "on the node, or pass `kubectl logs` dumps instead; nothing was stored.") from None
        except (OSError, EOFError):  # a damaged rotated .gz, a file removed while read
            q["log_pieces_unreadable"] += 1


def _kind(first: bytes) -> str:
    if _CRI.match(first):
        return "cri"
    if first.startswith(b'{"log":'):
        return "docker"
    return "stamped" if _STAMP.match(first) else "plain"


def _docker(raw: bytes) -> tuple[bytes, bytes, bool] | None:
    try:
        rec = json.loads(raw)
        text, stream = rec["log"], rec.get("stream", "stdout")
    except (ValueError, KeyError, TypeError):
        return None
    if not isinstance(text, str) or not isinstance(stream, str):
        return None
    return stream.encode(), text.rstrip("\n").encode("utf-8", "replace"), text.endswith("\n")


def _cri(raw: bytes) -> tuple[bytes, bytes, bool] | None:
    m = _CRI.match(raw)
    if m is None:
        return None
    return m.group(1), raw[m.end():], m.group(2) == b"F"


def _binary(lf: LogFile) -> bool:
    """Whether the log's first bytes are not text (NULs, or many control or non-UTF-8 bytes)."""
    try:
        with _open(lf.pieces[0]) as fh:
            sample = fh.read(8192)
    except (OSError, EOFError):
        return False  # _raw_lines counts it
    if not sample:
        return False
    if b"\x00" in sample:
        return True
    odd = sum(1 for b in sample if b < 32 and b not in b"\t\n\r\f\b\x1b")
    bad = len(sample) - len(sample.decode("utf-8", "ignore").encode())
    return (odd + bad) > len(sample) // 10


def plain_lines(lf: LogFile, q: Quirks) -> Iterator[str]:
    """The log's lines as the program wrote them: prefixes stripped, partial lines joined."""
    if _binary(lf):
        q["log_files_skipped_binary"] += 1
        return
    kind: str | None = None
    pending: dict[bytes, bytes] = {}
    for raw in _raw_lines(lf, q):
        if kind is None:
            if not raw.strip():
                continue
            kind = _kind(raw)
        if b"\x00" in raw:
            q["log_nul_bytes_removed"] += 1
            raw = raw.replace(b"\x00", b"")
        if kind == "plain":
            yield raw.decode("utf-8", "replace")
            continue
        if kind == "stamped":
            m = _STAMP.match(raw)
            yield raw[m.end():].decode("utf-8", "replace") if m else raw.decode("utf-8", "replace")
            continue
        got = _cri(raw) if kind == "cri" else _docker(raw)
        if got is None:
            if raw.strip():
                q["log_lines_without_prefix"] += 1
            yield raw.decode("utf-8", "replace")
            continue
        stream, text, full = got
        text = pending.pop(stream, b"") + text
        if full or len(text) >= _MAX_LINE:
            q["log_lines_cut"] += not full
            yield text.decode("utf-8", "replace")
        else:
            pending[stream] = text
    for text in pending.values():  # the run ended in the middle of a line
        q["log_partial_lines_at_end"] += 1
        yield text.decode("utf-8", "replace")


# ------------------------------------------------------------------ staging
def _needs_two_passes(lf: LogFile, max_bytes: int) -> bool:
    try:
        size = sum(p.stat().st_size for p in lf.pieces)
    except OSError:
        return True
    return size > max_bytes or any(p.name.endswith(".gz") for p in lf.pieces)


def stage_copy(lf: LogFile, dest: Path, q: Quirks, *, max_bytes: int = MAX_COPY_BYTES,
               head_bytes: int = HEAD_KEEP_BYTES) -> Path | None:
    """Write the plain text of ``lf`` next to ``dest`` under a temporary name and return that
    name (the caller renames it over ``dest`` when the import commits); None when the log
    has no readable text (binary, empty). A log longer than ``max_bytes`` keeps its first
    ``head_bytes`` and its end (read twice: once to measure, in constant memory)."""
    total = None
    if _needs_two_passes(lf, max_bytes):
        total = sum(len(line.encode("utf-8", "replace")) + 1 for line in plain_lines(lf, Quirks()))
    cut = (head_bytes, total - (max_bytes - head_bytes)) if total and total > max_bytes else None
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    written = pos = 0
    marked = False
    try:
        with open(tmp, "wb") as out:
            for line in plain_lines(lf, q):
                data = line.encode("utf-8", "replace") + b"\n"
                start, pos = pos, pos + len(data)
                if cut and cut[0] <= start < cut[1]:
                    if not marked:  # the first line left out
                        out.write(f"[gpulens: about {cut[1] - cut[0]:,} bytes of the log left out]\n".encode())
                        marked = True
                        q["logs_shortened"] += 1
                    continue
                out.write(data)
                written += len(data)
            out.flush()
            os.fsync(out.fileno())
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    if written == 0:
        tmp.unlink()
        return None
    return tmp
