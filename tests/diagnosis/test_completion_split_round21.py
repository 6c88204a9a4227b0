"""Round 21 refactor (r21-refC): completion.py split into modules of one job each (round 22: callers import
each name from the module that owns it; completion exports only what it defines). Hand-written excerpts in the
formats the parts read (CPython's traceback, pytest's summary, Hydra's report, abseil's fatal-signal handler, bash's reports)."""
from __future__ import annotations

import importlib
from pathlib import Path

from tests.diagnosis.logread_structure import LOGREAD, assert_part, assert_unique, defined, module

_PARTS = ("completion", "completion_messages", "progress_end", "after_error", "failed_runs", "uncaught", "lastwords",
          "hydra", "handler_stops", "script_reports", "shutdown")


def test_completion_messages_and_progress_end() -> None:
    from gpulens.diagnosis.logread.end import completion_messages, progress_end

    assert completion_messages.completion_strength("Training complete in 2h 3m") == 0.95
    assert completion_messages.completion_strength("Early stopping patience: 20") == 0.0
    assert completion_messages.completion_strength("done.") == 0.8
    assert progress_end.counters_end("Epoch 30/30 | step 200/200") is True
    assert progress_end.counters_end("Epoch 3/30") is False
    assert progress_end.last_refresh(" 10%|#  | 1/10\r100%|###| 10/10") == "100%|###| 10/10"
    assert progress_end.configured_totals(["max_epochs=100", "epoch 99"], 0)["epoch"] == {100}
    assert progress_end.at_configured_end("epoch 99 loss 0.1", {"epoch": {100}, "step": set()})


def test_goes_on_after_a_caught_error() -> None:
    from gpulens.diagnosis.logread.end import after_error

    log = ["Error loading model: CUDA out of memory. Tried to allocate 20.00 MiB", *[f"step {k} loss 0.5" for k in range(4)]]
    assert after_error.caught_print(log, 0)
    assert after_error.went_on(log, 0)
    assert not after_error.went_on([*log[:1], "Exiting.", *log[1:]], 0)
    assert after_error.trial_after(["ValueError: x", "[I 2024-05-01 10:04:00,123] Trial 4 finished with value: 0.2 and"], 0)


def test_failed_runs_tallies_and_the_failed_run_line() -> None:
    from gpulens.diagnosis.logread.end import failed_runs

    log = ["Traceback (most recent call last):", '  File "t.py", line 1, in test_x', "AssertionError: 1 != 2",
           "==== 1 failed, 4 passed in 2.31s ===="]
    assert failed_runs.failed_tally(log, [0, 1, 2, 3]) == 3
    assert failed_runs.failed_run_line(log, 0, 3) == 2
    assert failed_runs.runs_failed(["Passed: 4/5", "Failed: 1/5"], [0, 1]) == 1
    assert failed_runs.runs_failed(["Failed: 1/5"], [0]) is None  # no count of passed runs beside it
    banner = ["Command '['python', 'eval.py']' returned non-zero exit status 2.", "=" * 20, "EXPERIMENT COMPLETE"]
    assert failed_runs.closed_after_failed_stage(banner, [], 2) == 0


def test_uncaught_exit_and_last_words() -> None:
    from gpulens.diagnosis.logread.end import lastwords, uncaught

    tb = ["Training complete.", "Traceback (most recent call last):", '  File "train.py", line 9, in <module>',
          "    save()", "OSError: [Errno 28] No space left on device"]
    assert uncaught.process_exit(tb, 1) == 4
    assert uncaught.uncaught_exception(tb, 0, 4)  # after a completion message
    assert not uncaught.uncaught_exception(tb[1:], 0, 3)  # no message above: the traceback says it already
    assert lastwords.last_words(["step 3", "job.sh: line 12: torchrun: command not found"], 0) == [1]


def test_hydra_and_signal_ends() -> None:
    from gpulens.diagnosis.logread.end import handler_stops, hydra

    report = ["Error in call to target 'models.build':", "TypeError(\"build() got an unexpected keyword 'k'\")",
              "Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace."]
    assert hydra.hydra_report(report, 0, 2) == [1]
    compact = ["In 'config': Could not find 'model/x'", "", report[2]]
    assert hydra.hydra_report(compact, 0, 2) == [0, 2]
    sig = ["step 4", "*** SIGTERM received at time=1756174802 on cpu 91 ***", "PC: @ 0x7f (unknown)"]
    assert handler_stops.signal_reports(sig, 0) == [1]
    assert handler_stops.signal_reports(["step 4", "Caught signal 15, exiting"], 0) == [1]
    fatal = ["F0617 14:30:47.707742 1097242 device_event_mgr.cc:226] Unexpected Event status: 1",
             "*** Check failure stack trace: ***", "    @ 0x7f0 abort"]
    assert handler_stops.check_failures(fatal, 0) == [0]


def test_script_reports_and_shutdown() -> None:
    from gpulens.diagnosis.logread.end import script_reports, shutdown

    log = ["Training complete in 1h", "rm: cannot remove 'tmp.txt': No such file or directory"]
    assert script_reports.after_work(log, 0, 1)
    assert not script_reports.script_report("job.sh: line 3: python: command not found")  # the next program
    assert shutdown.shutdown_error("RuntimeError: DataLoader worker (pid 4242) is killed by signal: Killed.") == "teardown"
    assert shutdown.shutdown_error("slurmstepd: error: Exceeded step memory limit at some point.") == "accounting"
    assert shutdown.shutdown_error("ValueError: bad shape") is None
    ends = ["Training complete in 1h", "RuntimeError: DataLoader worker (pid 4242) is killed by signal: Killed."]
    got = shutdown.finished_before(ends, 0, [1], lambda s: s)
    assert got is not None and got.at == 0


def test_each_part_says_its_job_exports_its_names_and_defines_each_name_once() -> None:
    for name in _PARTS:
        assert_part(name)
    assert_unique(_PARTS)
    assert not {"_TRACEBACK", "_WARNING", "_END_KEYS", "_HANDLER_STOP"} & set(defined("completion"))  # moved or shared
    assert "Traceback (most recent call last)" not in Path(importlib.import_module(
        "gpulens.diagnosis.logread.whole").__file__ or "").read_text()  # whole asks tracebacks.has_head


def test_the_parts_names_are_defined_nowhere_else_in_logread() -> None:
    parts = {n for name in _PARTS for n in defined(name)}
    others = {p.stem for p in LOGREAD.rglob("*.py")}
    clash = {n for other in others - set(_PARTS) - {"__init__"} for n in defined(other) if n in parts}
    assert clash == set(), clash  # aftermath's went_on renamed killed_after_going_on (round 22)


#: Names completion once forwarded, each with the module that owns it.
_OWNERS = {"completion_strength": "completion_messages", "went_on": "after_error", "caught_print": "after_error",
           "stage_failed": "failed_runs", "process_exit": "uncaught", "last_words": "lastwords",
           "signal_reports": "handler_stops", "shutdown_error": "shutdown", "after_work": "script_reports"}


def test_completion_exports_only_what_it_defines_and_each_name_comes_from_its_owner() -> None:
    completion = importlib.import_module("gpulens.diagnosis.logread.end.completion")
    assert set(completion.__all__) <= set(defined("completion")), completion.__all__
    for name, owner in _OWNERS.items():
        mod = module(owner)
        assert name in mod.__all__ and name in defined(owner) and name not in completion.__all__, name
