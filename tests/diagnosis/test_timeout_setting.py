"""A timeout setting printed with its value ("timeout=5", a config dump's "timeout: 30", TrainingArguments'
"ddp_timeout=1800,") is not a failure line; a timeout that happened still is."""

from __future__ import annotations

from gpulens.diagnosis import logs


def test_a_timeout_setting_is_not_a_failure() -> None:
    for line in ("Shutdown initiated (timeout=5)", "ddp_timeout=1800,", "timeout: 30", "nccl_timeout = 600"):
        assert not logs.is_hard_error(line), line


def test_a_timeout_that_happened_is_a_failure() -> None:
    for line in ("RuntimeError: Timeout waiting for store", "Timeout: 30 seconds exceeded",
                 "[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, "
                 "Timeout(ms)=600000) ran for 600021 milliseconds before timing out."):
        assert logs.is_hard_error(line), line
