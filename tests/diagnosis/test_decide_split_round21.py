"""Round 21: decide.py split into modules of one job each (round 22: decide.py removed); Ray's line prefix read once (ranks.RAY_PREFIX);
the phase reader's signal test lives in signals.py."""

from __future__ import annotations

import importlib

import pytest

from gpulens.diagnosis.logread.lineprefix import process_key, strip_ray_prefixes
from gpulens.diagnosis.logread.ranks import RAY_PREFIX, launcher_text
from gpulens.diagnosis.logread.signals import names_a_signal
from gpulens.diagnosis.logread.tracebacks import unprefixed
from tests.diagnosis.logread_structure import assert_part, assert_unique, defined

_PARTS = ("answers", "badrecord", "childexit", "crashes", "damaged", "diedbefore", "divergence", "earlier",
          "heldmemory", "joblines", "kills", "lineprefix", "stops", "timeouts")


@pytest.mark.parametrize("name", _PARTS)
def test_each_part_says_its_job_and_exports_what_it_defines(name: str) -> None:
    assert_part(name)


def test_no_name_is_defined_in_two_parts_and_decide_is_gone() -> None:
    assert_unique(_PARTS)
    with pytest.raises(ModuleNotFoundError):  # the old flat decide.py (phase/decide.py is the phase's order)
        importlib.import_module("gpulens.diagnosis.logread.decide")


def test_ray_prefix_is_defined_once() -> None:
    names = {m: defined(m) for m in ("lines", "tracebacks", "lineprefix", "ranks")}
    assert "RAY_PREFIX" in names["ranks"]
    assert not any({"_RAY_LEAD", "_RAY_PREFIX", "_RAY_TAG"} & set(d) for d in names.values())


#: Ray's worker log lines as ray/_private/worker.py print_worker_logs writes them: "(" name " pid=" pid
#: [", ip=" address] ")" then the line, with colour codes around the prefix.
_RAY_LINES = (("(TrainWorker pid=731, ip=10.1.2.3) RuntimeError: boom", "731", "RuntimeError: boom"),
              ("\x1b[36m(pid=88)\x1b[0m   File \"/app/run.py\", line 3, in <module>", "88",
               "  File \"/app/run.py\", line 3, in <module>"))


@pytest.mark.parametrize(("line", "pid", "rest"), _RAY_LINES)
def test_every_reader_of_ray_prefix_agrees(line: str, pid: str, rest: str) -> None:
    m = RAY_PREFIX.match(line)
    assert m is not None and m.group(1) == pid
    assert process_key(line) == f"pid{pid}"
    assert unprefixed(line) == rest == launcher_text(line) == strip_ray_prefixes([line])[0]


def test_ray_daemon_prefix_has_no_pid_and_no_process_key() -> None:
    line = "(raylet) [2024-05-01 10:00:00] worker died"
    m = RAY_PREFIX.match(line)
    assert m is not None and m.group(1) is None
    assert process_key(line) is None
    assert strip_ray_prefixes([line]) == ["[2024-05-01 10:00:00] worker died"]


@pytest.mark.parametrize(("text", "named"), [("[SignalInfo: *** SIGTERM (@0x3e8) received by PID 7 ***]", True),
                                             ("process got signal 15", True), ("Signal 9 sent", True),
                                             ("FatalError: `Termination signal` is detected", True),
                                             ("design signed off", False), ("signalling done", False)])
def test_names_a_signal(text: str, named: bool) -> None:
    assert names_a_signal(text) is named


def test_traceback_head_words_are_defined_once() -> None:
    from gpulens.diagnosis.logread import tracebacks
    from gpulens.diagnosis.logread.phase import failing_traceback as phase_traceback

    assert "TRACEBACK_HEAD" not in defined("phase.failing_traceback") and "TRACEBACK_HEAD" not in phase_traceback.__all__
    assert all(h.startswith(tracebacks.TRACEBACK_HEAD) for h in tracebacks.TRACEBACK_HEADS)
    assert tracebacks.TRACEBACK == "Traceback (most recent call last)"
