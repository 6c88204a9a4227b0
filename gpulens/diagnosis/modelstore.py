"""Where trained models are kept: formats that cannot run code, checked on load.

A model is a :class:`ModelBlob`: named numpy arrays plus JSON metadata (vocabularies,
templates, parameters). :class:`FileModelStore` writes three files per model::

    <name>.npz            the arrays (numpy's zip of .npy files), loaded with allow_pickle=False
    <name>.json           the metadata
    <name>.manifest.json  {"format", "sha256": {file name: hex digest}} of the two above,
                          written last

Neither format can execute code when it is read (no pickle, no joblib, no jsonpickle).
A model whose files fail a check (hash mismatch, an object array, malformed JSON) is
refused with one line naming the file, moved aside as ``<file>.rejected-<UTC time>``
(never overwritten), and :meth:`load` answers ``None`` so the caller retrains.
:class:`MemoryModelStore` keeps blobs in a dict (tests, read-only installations),
like Drain3's in-memory persistence handler.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

__all__ = ["FORMAT", "FileModelStore", "MemoryModelStore", "ModelBlob", "ModelRejected", "ModelStore"]

FORMAT = "gpulens-model/1"
_MAX_MANIFEST_BYTES = 1 << 16


@dataclasses.dataclass
class ModelBlob:
    """A model as plain data: numeric arrays and JSON-able metadata."""

    arrays: dict[str, Any]
    meta: dict[str, Any]


class ModelRejected(Exception):  # internal: caught by FileModelStore.load
    """A stored model failed its integrity check."""


class ModelStore(Protocol):
    """Keeps models by name. ``load`` answers None when there is no usable model."""

    def load(self, name: str) -> ModelBlob | None: ...

    def save(self, name: str, blob: ModelBlob) -> None: ...

    def reject(self, name: str, why: str) -> None:
        """Report a loaded model that turned out unusable and set it aside."""


class MemoryModelStore:
    """Models in a dict (no files)."""

    def __init__(self) -> None:
        self.blobs: dict[str, ModelBlob] = {}

    def load(self, name: str) -> ModelBlob | None:
        return self.blobs.get(name)

    def save(self, name: str, blob: ModelBlob) -> None:
        self.blobs[name] = blob

    def reject(self, name: str, why: str) -> None:
        self.blobs.pop(name, None)


def _warn_stderr(line: str) -> None:
    print(f"gpulens: warning: {line}", file=sys.stderr)


class FileModelStore:
    """Models as ``<name>.npz`` + ``<name>.json`` in ``root``.

    ``fallback`` (a per-user directory) is read after ``root`` and written when ``root``
    cannot be written (a read-only data directory). Rejections are reported through
    ``warn`` (one line on stderr by default) and kept in :attr:`rejected`.
    """

    def __init__(self, root: str | os.PathLike[str], *, fallback: str | os.PathLike[str] | None = None,
                 warn: Callable[[str], None] = _warn_stderr) -> None:
        self.root = Path(root)
        self.fallback = Path(fallback) if fallback is not None else None
        self.warn = warn
        self.rejected: list[str] = []

    def _dirs(self) -> list[Path]:
        return [self.root] + ([self.fallback] if self.fallback is not None else [])

    # ------------------------------------------------------------------ loading
    def _files(self, d: Path, name: str) -> tuple[Path, Path, Path]:
        return d / f"{name}.npz", d / f"{name}.json", d / f"{name}.manifest.json"

    def load(self, name: str) -> ModelBlob | None:
        for d in self._dirs():
            files = self._files(d, name)
            if not any(f.exists() for f in files):
                continue
            try:
                return self._read(*files)
            except ModelRejected as exc:
                self._reject(files, str(exc))
        return None

    def reject(self, name: str, why: str) -> None:
        for d in self._dirs():
            files = self._files(d, name)
            if any(f.exists() for f in files):
                self._reject(files, why)
                return

    def _read(self, npz: Path, meta: Path, manifest: Path) -> ModelBlob:
        import numpy as np

        sums = self._manifest(manifest)
        raw: dict[Path, bytes] = {}
        for f in (npz, meta):
            try:
                raw[f] = f.read_bytes()
            except OSError as exc:
                raise ModelRejected(f"{f} cannot be read ({exc.strerror or exc})") from None
            if hashlib.sha256(raw[f]).hexdigest() != sums.get(f.name):
                raise ModelRejected(f"{f} does not match the SHA-256 recorded in {manifest.name}")
        try:
            info = json.loads(raw[meta])
        except ValueError as exc:
            raise ModelRejected(f"{meta} is not valid JSON ({exc})") from None
        if not isinstance(info, dict):
            raise ModelRejected(f"{meta} is not a JSON object")
        try:
            with np.load(io.BytesIO(raw[npz]), allow_pickle=False) as z:
                arrays = {k: z[k] for k in z.files}
        except Exception as exc:  # ValueError (object arrays), BadZipFile, OSError, ...
            raise ModelRejected(f"{npz} is not a plain numeric array file ({exc})") from None
        for key, arr in arrays.items():
            if arr.dtype.hasobject:
                raise ModelRejected(f"{npz} holds an object array {key!r}")
        return ModelBlob(arrays=arrays, meta=info)

    def _manifest(self, manifest: Path) -> dict[str, Any]:
        try:
            raw = manifest.read_bytes()
            if len(raw) > _MAX_MANIFEST_BYTES:
                raise ModelRejected(f"{manifest} is larger than a manifest can be")
            head = json.loads(raw)
        except FileNotFoundError:
            raise ModelRejected(f"{manifest} is missing, so the model files cannot be checked") from None
        except OSError as exc:
            raise ModelRejected(f"{manifest} cannot be read ({exc.strerror or exc})") from None
        except ValueError as exc:
            raise ModelRejected(f"{manifest} is not valid JSON ({exc})") from None
        if not isinstance(head, dict) or head.get("format") != FORMAT or not isinstance(head.get("sha256"), dict):
            raise ModelRejected(f"{manifest} is not a {FORMAT} manifest")
        return dict(head["sha256"])

    def _reject(self, files: tuple[Path, ...], why: str) -> None:
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        moved = []
        for f in files:
            if not f.exists():
                continue
            dest = f.with_name(f"{f.name}.rejected-{stamp}")
            if dest.exists():
                dest = f.with_name(f"{f.name}.rejected-{stamp}-{uuid.uuid4().hex[:6]}")
            try:
                os.replace(f, dest)
                moved.append(dest.name)
            except OSError:
                pass  # read-only directory: the file stays, and is refused again next time
        where = f"moved aside as {', '.join(moved)}" if moved else "left in place (directory not writable)"
        line = f"refused stored model: {why}; {where}; the model is retrained."
        self.rejected.append(line)
        self.warn(line)

    # ------------------------------------------------------------------ saving
    def save(self, name: str, blob: ModelBlob) -> None:
        """Write the model to ``root`` (or ``fallback`` if ``root`` is not writable).

        Files are written under temporary names and renamed, the manifest last, so a
        reader never sees a manifest without its arrays. Raises OSError when no
        directory can be written.
        """
        err: OSError | None = None
        for d in self._dirs():
            try:
                self._write(d, name, blob)
                return
            except OSError as exc:
                err = exc
        assert err is not None
        raise err

    def _write(self, d: Path, name: str, blob: ModelBlob) -> None:
        import numpy as np

        d.mkdir(parents=True, exist_ok=True)
        buf = io.BytesIO()
        np.savez(buf, allow_pickle=False, **blob.arrays)
        npz, meta, manifest = self._files(d, name)
        payloads = {npz: buf.getvalue(), meta: json.dumps(blob.meta, allow_nan=False).encode()}
        sums = {f.name: hashlib.sha256(data).hexdigest() for f, data in payloads.items()}
        payloads[manifest] = json.dumps({"format": FORMAT, "sha256": sums}, indent=1).encode()
        tag = f".tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        for final, data in payloads.items():  # the manifest last
            tmp = final.with_name(final.name + tag)
            try:
                with open(tmp, "wb") as fh:
                    fh.write(data)
                    fh.flush()
                    os.fsync(fh.fileno())
                os.replace(tmp, final)
            except OSError:
                tmp.unlink(missing_ok=True)
                raise
