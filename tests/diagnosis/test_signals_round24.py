"""Round 24: abseil's failure signal handler's report of a stop signal ("*** SIGTERM received at time=... on cpu N
***", absl/debugging/failure_signal_handler.cc) is the line that says the process was stopped (README rule R6);
the KeyboardInterrupt and asyncio CancelledError tracebacks that the signal then raises are its aftermath. And an
except clause is a code line, a message that says "except in dimension 1" is not."""

from __future__ import annotations

from gpulens.diagnosis import logs
from gpulens.diagnosis.logread.lines import is_failure
from gpulens.diagnosis.logread.whole import diagnose_text

_REPORT = "*** SIGTERM received at time=1716300290 on cpu 3 ***"
_WAITING = [f"INFO 05-21 10:{m:02d}:03 [ray_utils.py:233] Waiting for creating a placement group of specs for {s} seconds."
            for m, s in ((1, 10), (2, 30), (3, 70))]
_STACK = ["PC: @     0x7f30bba98d71  (unknown)  (unknown)", "    @     0x7f30bba45330  1867120128  (unknown)"]
_CANCELLED = ["Traceback (most recent call last):",
              '  File "/env/lib/python3.12/site-packages/vllm/engine/multiprocessing/client.py", line 320, in _send',
              "    if await socket.poll(timeout=VLLM_RPC_TIMEOUT) == 0:", "asyncio.exceptions.CancelledError", "",
              "During handling of the above exception, another exception occurred:", "",
              "Traceback (most recent call last):", '  File "/env/bin/vllm", line 8, in <module>',
              "    sys.exit(main())", "KeyboardInterrupt"]


def test_abseil_s_stop_signal_report_is_a_failure_line() -> None:
    assert is_failure(logs.normalize_line(_REPORT), _REPORT)
    ray = "[2024-05-21 10:04:10,599 E 62 62] logging.cc:496: *** SIGTERM received at time=1716300290 on cpu 3 ***"
    assert is_failure(logs.normalize_line(ray), ray)


def test_the_exceptions_the_signal_raises_after_it_are_not_the_root() -> None:
    lines = ["INFO 05-21 10:00:50 [llm_engine.py:240] Initializing an LLM engine (v0.8.5) with config: model='m'"]
    engine = "ERROR 05-21 10:04:11 [engine.py:448] "
    logged = [engine + "Traceback (most recent call last):",
              engine + '  File "/env/lib/python3.12/site-packages/ray/_private/worker.py", line 3053, in wait',
              engine + "    ready_ids, remaining_ids = worker.core_worker.wait(", engine + "KeyboardInterrupt"]
    lines += _WAITING + [_REPORT] + _STACK + logged + _CANCELLED
    w = diagnose_text("\n".join(lines))
    assert w.diagnosis.category == "preempted"
    assert w.indicator_lines == [len(_WAITING) + 2]


def test_a_message_with_the_word_except_is_no_code_line() -> None:
    from gpulens.diagnosis.logs import is_hard_error
    assert is_hard_error("RuntimeError: Sizes of tensors must match except in dimension 1. Expected size 8 but got size 9")
    for code in ("except Exception as e:", "except:", "except (ValueError, KeyError) as err:"):
        assert not is_hard_error(code), code
