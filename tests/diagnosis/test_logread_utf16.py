"""Whole logs written as UTF-16 with a byte-order mark (Windows PowerShell 5's `>` / Out-File)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpulens.diagnosis.logread.source import read_whole
from gpulens.diagnosis.logread.whole import diagnose_path

_OOM = [
    "Epoch 1/3: loss 0.41",
    "Traceback (most recent call last):",
    '  File "C:\\\\Users\\\\me\\\\train.py", line 40, in <module>',
    "    loss.backward()",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total"
    " capacity of 8.00 GiB of which 1.10 GiB is free.",
]


def _write(path: Path, lines: list[str], encoding: str) -> Path:
    # "utf-16" writes the BOM in the machine's order; name the order explicitly for BE
    bom = {"utf-16-le": b"\xff\xfe", "utf-16-be": b"\xfe\xff"}[encoding]
    path.write_bytes(bom + "\r\n".join(lines).encode(encoding) + "\r\n".encode(encoding))
    return path


@pytest.mark.parametrize("encoding", ["utf-16-le", "utf-16-be"])
def test_a_utf16_log_is_read_as_text_with_its_line_numbers(tmp_path: Path, encoding: str) -> None:
    d = diagnose_path(_write(tmp_path / "train.log", _OOM, encoding))
    assert d.diagnosis.category == "gpu_oom"
    assert d.indicator_lines == [5]


def test_a_long_utf16_log_keeps_grep_line_numbers(tmp_path: Path) -> None:
    # U+0A0A (a Gurmukhi letter) is the byte pair 0A 0A: counting newline bytes would miscount
    lines = [f"step {i} \u0a0a loss 0.{i % 10}" for i in range(6000)] + _OOM
    path = _write(tmp_path / "big.log", lines, "utf-16-le")
    src = read_whole(path, keep_bytes=16 * 1024)
    assert src.reason is None and src.head and src.first > len(src.head) + 1
    for i in (0, len(src.lines) // 2, len(src.lines) - 1):
        assert src.lines[i].rstrip("\r") == lines[src.number(i) - 1]
    assert src.n_lines == len(lines)


def test_a_binary_file_behind_a_bom_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "weights.log"
    path.write_bytes(b"\xff\xfe" + os.urandom(64 * 1024))
    src = read_whole(path)
    assert src.reason is not None and not src.lines


def test_the_excerpt_reader_and_the_dashboard_read_utf16_too(tmp_path: Path) -> None:
    from gpulens.diagnosis import logs

    path = _write(tmp_path / "train.log", _OOM, "utf-16-le")
    got = logs.read_log(path)
    assert got.reason is None and "CUDA out of memory" in got.text and not got.truncated
    big = _write(tmp_path / "big.log", [f"step {i}" for i in range(40_000)] + _OOM, "utf-16-le")
    got = logs.read_log(big, head_bytes=4096, tail_bytes=4096)
    assert got.truncated and got.reason is None
    assert got.text.startswith("step 0\r\n") and got.text.rstrip().endswith("1.10 GiB is free.")
    noise = tmp_path / "noise.log"
    noise.write_bytes(b"\xfe\xff" + os.urandom(32 * 1024))
    assert logs.read_log(noise).reason is not None


def test_utf8_text_after_bom_like_bytes_is_read_as_utf8(tmp_path: Path) -> None:
    from gpulens.diagnosis import logs

    path = tmp_path / "train.log"
    path.write_bytes(b"\xff\xfe x\n" + "\n".join(_OOM).encode() + b"\n")
    assert diagnose_path(path).indicator_lines == [6]
    assert "CUDA out of memory" in logs.read_log(path).text


def test_a_utf16_log_in_chinese_is_text(tmp_path: Path) -> None:
    lines = [f"第 {i} 轮 训练 损失 0.{i}" for i in range(1, 9)] + _OOM
    d = diagnose_path(_write(tmp_path / "train.log", lines, "utf-16-le"))
    assert d.diagnosis.category == "gpu_oom" and d.indicator_lines == [13]


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "train.log"
    os.mkfifo(fifo)
    src = read_whole(fifo)  # no writer: opening it for reading would block
    assert src.reason is not None and "FIFO" in src.reason
