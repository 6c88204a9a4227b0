"""Round 23: CPython's own error for a script it cannot open (Modules/main.c pymain_run_file: "%ls: can't open
file %R: [Errno %d] %s", exit status 2) is a failure line, and the copies every process of a launch prints of it
at once are one run whose first copy is the indicator line (README rule R5)."""

from __future__ import annotations

from gpulens.diagnosis import logs
from gpulens.diagnosis.logread.lines import is_failure
from gpulens.diagnosis.logread.whole import diagnose_text

_BANNER = [
    "W0311 12:20:08.521000 294935 torch/distributed/run.py:852] ",
    "W0311 12:20:08.521000 294935 torch/distributed/run.py:852] *****************************************",
    "W0311 12:20:08.521000 294935 torch/distributed/run.py:852] Setting OMP_NUM_THREADS environment variable for "
    "each process to be 1 in default, to avoid your system being overloaded",
    "W0311 12:20:08.521000 294935 torch/distributed/run.py:852] *****************************************",
]
_CANT = "/opt/env/bin/python3.10: can't open file '/work/proj/main.py': [Errno 2] No such file or directory"
_VERDICT = ("E0311 12:20:08.746000 294935 torch/distributed/elastic/multiprocessing/api.py:984] failed (exitcode: 2) "
            "local_rank: 0 (pid: 295140) of binary: /opt/env/bin/python3.10")
_AFTER = ["[WARNING] async_io requires the dev libaio .so object and headers but these were not found."] * 6


def test_cpython_cannot_open_the_script_is_a_failure_line() -> None:
    for line in (_CANT, "python: can't open file 'train.py': [Errno 2] No such file or directory",
                 "C:\\Python39\\python.exe: can't open file 'x.py': [Errno 13] Permission denied"):
        assert is_failure(logs.normalize_line(line), line)
    assert not is_failure("print(\"can't open file\")", "print(\"can't open file\")")


def test_a_script_that_cannot_be_opened_is_a_failure_not_a_normal_end() -> None:
    w = diagnose_text("\n".join(["Starting job", _CANT, "Done."]))
    assert w.diagnosis.category != "none"
    assert w.indicator_lines == [2]


def test_every_rank_printing_it_at_once_is_one_run_labelled_at_its_first_copy() -> None:
    w = diagnose_text("\n".join(_BANNER + [_CANT] * 8 + [_VERDICT] + _AFTER))
    assert w.diagnosis.category != "none"
    assert w.indicator_lines == [len(_BANNER) + 1]
