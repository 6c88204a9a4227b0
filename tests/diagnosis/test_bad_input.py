"""Bad input: huge, binary, non-UTF-8, empty, missing -> 'unknown' with a reason, never a crash."""

from __future__ import annotations

import os
import resource
import time
from pathlib import Path

import pytest

from gpulens.diagnosis import classify_file, classify_text


def test_empty_file(tmp_path: Path) -> None:
    p = tmp_path / "empty.log"
    p.write_bytes(b"")
    d = classify_file(p)
    assert d.category == "unknown" and d.reason == "empty log"
    assert classify_text("   \n\n").category == "unknown"


def test_binary_garbage(tmp_path: Path) -> None:
    p = tmp_path / "core.bin"
    p.write_bytes(os.urandom(200_000))
    d = classify_file(p)
    assert d.category == "unknown" and d.reason and "binary" in d.reason or "undecodable" in (d.reason or "")


def test_non_utf8_text_still_classified(tmp_path: Path) -> None:
    p = tmp_path / "latin1.log"
    p.write_bytes("Données chargées\xff\xfe\n".encode("latin-1") + b"\xff\xfe\xfa\n"
                  b"Traceback (most recent call last):\n  File \"t.py\", line 1, in <module>\n"
                  b"ModuleNotFoundError: No module named 'caf\xe9'\n")
    d = classify_file(p)
    assert d.category == "import_error"


def test_missing_and_directory(tmp_path: Path) -> None:
    assert classify_file(tmp_path / "nope.log").reason == "file not found"
    assert classify_file(tmp_path).category == "unknown"


@pytest.mark.slow
def test_one_gigabyte_log_bounded(tmp_path: Path) -> None:
    """A sparse 1 GiB log: progress at the start, a hole, the failure at the end."""
    p = tmp_path / "huge.log"
    gib = 1024**3
    end = b"".join(b"Epoch 9: 97%%|#########7| %d/99999 [01:01<00:02, 9.8it/s, loss=2.31]\n" % i for i in range(1000))
    end += (b"Traceback (most recent call last):\n  File \"train.py\", line 3, in <module>\n"
            b"RuntimeError: CUDA error: an illegal memory access was encountered\n")
    with p.open("wb") as fh:
        fh.write(b"epoch 0 step 1 loss 2.0\n" * 1000)
        fh.seek(gib - len(end))
        fh.write(end)
    assert p.stat().st_size == gib
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    d = classify_file(p)
    elapsed = time.perf_counter() - t0
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert d.category == "cuda_error", d
    assert elapsed < 30
    assert grown_kib < 200 * 1024  # far less than the 1 GiB file


def test_scan_back_finds_traceback_before_the_tail(tmp_path: Path) -> None:
    from gpulens.diagnosis.logs import read_log

    p = tmp_path / "mid.log"
    tb = (b"Traceback (most recent call last):\n  File \"t.py\", line 1, in <module>\n"
          b"OSError: [Errno 28] No space left on device\n")
    p.write_bytes(b"start\n" * 20_000 + tb + b"shutdown line\n" * 20_000)
    got = read_log(p, head_bytes=1024, tail_bytes=4096, scan_bytes=10 * 1024 * 1024)
    assert got.truncated and "No space left on device" in got.text
    assert len(got.text) < 200_000
    got = read_log(p, head_bytes=1024, tail_bytes=4096, scan_bytes=8192)  # budget too small
    assert "No space left" not in got.text


def test_one_gigabyte_of_nothing(tmp_path: Path) -> None:
    p = tmp_path / "zeros.log"
    with p.open("wb") as fh:
        fh.truncate(1024**3)  # sparse: all NUL bytes
    d = classify_file(p)
    assert d.category == "unknown" and d.reason


def test_very_long_text_log() -> None:
    lines = [f"Epoch 3: {i % 100:3d}%|#####     | {i}/99999 [00:01<00:09, 9.8it/s, loss=2.31]" for i in range(60_000)]
    text = "\n".join(lines) + "\nTraceback (most recent call last):\n  File \"x.py\", line 1, in <module>\nSyntaxError: invalid syntax\n"
    assert classify_text(text).category == "syntax_error"


def test_fifo_without_writer_does_not_hang(tmp_path: Path) -> None:
    fifo = tmp_path / "job.log"
    os.mkfifo(fifo)
    t0 = time.monotonic()
    d = classify_file(fifo)  # opening a FIFO with no writer would block forever
    assert time.monotonic() - t0 < 5
    assert d.category == "unknown" and d.reason and "not a regular file (a FIFO)" in d.reason


def test_dev_zero_is_not_a_regular_file() -> None:
    d = classify_file("/dev/zero")
    assert d.category == "unknown" and d.reason and "not a regular file (a device)" in d.reason
