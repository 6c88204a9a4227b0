"""Round 20: a script run again in the same file after a crash; its last run's end is the verdict."""

from __future__ import annotations

from pathlib import Path

from gpulens.diagnosis.logread.attempts import attempt_starts
from gpulens.diagnosis.logread.whole import diagnose_path

#: The file's first line is a warning printed once (not a banner whose repeat starts an attempt).
_WARN = "/env/torch/cuda/__init__.py:230: UserWarning: this GPU is not supported by this build"
_CRASH = [
    "Device: gpu",
    "Loading data",
    "Traceback (most recent call last):",
    '  File "train.py", line 10, in <module>',
    "    run()",
    "RuntimeError: CUDA error: no kernel image is available for execution on the device",
    "",
]
#: A run stopped with Ctrl-C (CPython prints the traceback, then the bare exception name).
_STOPPED = ["Device: cpu", "Traceback (most recent call last):", '  File "train.py", line 12, in <module>',
            "    loss.backward()", "KeyboardInterrupt"]
_GOOD = [
    "Device: gpu",
    "Loading data",
    "---",
    "final_loss:   2.500",
    "total_seconds: 130.5",
    "num_steps:     50",
]


def test_relaunch_after_traceback_starts_an_attempt() -> None:
    lines = [_WARN, *_CRASH, *_CRASH, *_GOOD]
    assert attempt_starts(lines)[-1] == 1 + 2 * len(_CRASH)


def test_no_relaunch_without_a_traceback_before_it() -> None:
    lines = [_WARN, "Device: gpu", "Loading data", "x", "y", "z", "Device: gpu", "Loading data", "more"]
    assert attempt_starts(lines) == [0]


def test_last_run_completing_is_healthy(tmp_path: Path) -> None:
    log = tmp_path / "run.log"
    log.write_text("\n".join([_WARN, *_CRASH, *_CRASH, *_STOPPED, *_GOOD]) + "\n")
    assert diagnose_path(str(log)).diagnosis.category == "none"


def test_per_rank_prints_are_no_relaunch() -> None:
    head = ["Files already downloaded and verified", "Files already downloaded and verified"]
    tb = ["Traceback (most recent call last):", '  File "a.py", line 1, in <module>', "ValueError: bad"]
    lines = [_WARN, *head, *tb, *head, "more", "more", "more"]
    assert attempt_starts(lines) == [0]


def test_error_lines_are_no_opening_print() -> None:
    err = ["ncclSystemError: System call failed", "Last error:"]
    tb = ["Traceback (most recent call last):", '  File "a.py", line 1, in <module>', "RuntimeError: x"]
    lines = [_WARN, *err, *tb, *err, "more", "more", "more"]
    assert attempt_starts(lines) == [0]
