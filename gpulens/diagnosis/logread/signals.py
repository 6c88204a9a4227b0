"""A stop signal's messages, as the reader meets them in one place: a fatal-signal handler's
report of the signal (Paddle's, glog's, abseil's), a program's own SIGTERM handler's record,
torchrun's agent passing on the signal it got, a data loader's report that the signal ended its
workers, and the exceptions a signal raises in the process it reaches (README rule R6).

The handlers' reports are three formats kept apart on purpose (each answers as it did): Paddle's
"FatalError: `Termination signal` is detected" (:func:`stop_report`, read on one line), and glog's
and abseil's "*** SIGTERM (@0x...) received by PID" / "*** SIGTERM received at time=" (only
:data:`TERM_REPORT_KEYS`, the literals a whole log is scanned for).
"""

from __future__ import annotations

import re

__all__ = ["ABSEIL_STOP", "FORWARD_KEY", "TERM_REPORT_KEYS", "abseil_stop", "agent_death_signal", "is_stop_record", "launcher_forward",
           "names_a_signal", "sigterm_report", "signal_raised", "stop_report", "workers_terminated"]

#: The literals of glog's and abseil's fatal-signal handler's report of a SIGTERM (glog's, which Paddle
#: installs: "[SignalInfo: *** SIGTERM (@0x...) received by PID N ... from PID M ***]"; abseil's
#: absl/debugging/failure_signal_handler.cc "*** SIGTERM received at time=...").
TERM_REPORT_KEYS = ("SIGTERM (@0x", "SIGTERM received at time=")
#: Paddle's report of a stop signal its handler caught (paddle/fluid/platform/init.cc ``SignalHandle``: "FatalError:
#: `Termination signal` is detected by the operating system." for a SIGTERM), or of a SIGABRT ("FatalError: `Process
#: abort signal` is detected ..."): after an uncaught Python exception, the abort is the process's C++ teardown at exit
#: (a destructor that throws while the interpreter exits: "0   paddle::framework::ParallelExecutor::~ParallelExecutor()").
_STOP_REPORT = re.compile(r"FatalError: `(Termination|Process abort) signal` is detected")
#: A program's own record, at warning level, that its SIGTERM handler caught the signal and is
#: stopping the run ("Signal 15 received — raising KeyboardInterrupt", "SIGTERM received, exiting"):
#: the handler a script installs with signal.signal(SIGTERM, ...) (CPython's default SIGTERM action
#: ends the process without a word; only SIGINT becomes KeyboardInterrupt by itself).
#: The same format is the last alternative of the ``sigterm-handler`` signature rule (which reads to the line's
#: end); change both together.
_STOP_RECORD = re.compile(r"\b(?:[Ss]ignal (?:15|SIGTERM)|SIGTERM) (?:was )?received\b(?! at time=)"
                          r"[^\n]{0,200}?\b(?:KeyboardInterrupt|exit|stop|shut)")
#: torchrun's agent reporting the signal it got ("Received 1 death signal, shutting down
#: workers", "Received Signals.SIGTERM death signal, shutting down workers":
#: torch/distributed/elastic/agent/server/api.py, the signal it got and passes on to its workers).
_DEATH_SIGNAL = re.compile(r"Received (?:\d+|Signals\.SIG[A-Z]+) death signal")
#: Lightning's rank-0 process passing on a stop signal it got to the other ranks' processes it started (lightning/
#: pytorch/strategies/launchers/subprocess_script.py ``_SubprocessScriptLauncher.kill``: ``log.info(f"pid
#: {os.getpid()} killing {proc.pid} with {signum}")``, called by the SIGTERM handler of trainer/connectors/
#: signal_connector.py before each rank logs "[rank: N] Received SIGTERM: 15"): the first line that says a signal
#: ended the run (README rule R6).
_FORWARD = re.compile(r"^pid \d+ killing \d+ with (?:\d+|Signals\.SIG[A-Z]+)\s*$")
#: The literal :data:`_FORWARD`'s lines hold, for a scan of the whole attempt.
FORWARD_KEY = " killing "
#: The exceptions a signal raises in the process it reaches (README rule R6: not labelled after the
#: line that says a scheduler ended the job): Python's KeyboardInterrupt (SIGINT), torchrun's
#: ``SignalException: Process N got signal: 15`` (torch/distributed/elastic/multiprocessing/api.py),
#: Lightning's ``SIGTERMException`` (lightning/pytorch/utilities/exceptions.py), and asyncio's ``CancelledError`` of the
#: tasks an event loop cancels as the signal's exception unwinds it (asyncio/runners.py ``_cancel_all_tasks``: a
#: server's pending requests, vLLM's RPC client waiting on its engine).
_AFTERMATH = re.compile(r"(?:[\w.]+\.)?(?:KeyboardInterrupt|SignalException|SIGTERMException|CancelledError)\b")
#: A data loader's report that its worker processes ended by SIGTERM (Paddle's
#: paddle/fluid/imperative/data_loader.cc "DataLoader process (pid N) exited is killed by signal:
#: Terminated.", raised by multiprocess_utils' SIGCHLD handler; torch's "DataLoader worker (pid N) is
#: killed by signal: Terminated."): after the process's own SIGTERM report, the same stop (R6).
_WORKERS_TERMINATED = re.compile(r"DataLoader (?:process|worker) \(pid:? ?\d+\)[^\n]* killed by signal: Terminated")

#: Any signal named in a failure's lines (the phase reader's test, looser than every format above:
#: it asks only whether a signal's report may precede a Python handler's traceback): PaddlePaddle's
#: C++ signal handler (``paddle/fluid/platform/init.cc`` ``SignalHandle``: "FatalError: `Termination
#: signal` is detected by the operating system." then "[SignalInfo: *** SIGTERM (@0x...) received by
#: PID N ...]"), a kill's "SIGTERM", "signal 15".
_SIGNAL_NAMED = re.compile(r"\bSIG[A-Z]{3,}\b|[Ss]ignal\b")


def names_a_signal(text: str) -> bool:
    """Whether ``text`` names any signal (:data:`_SIGNAL_NAMED`), in whatever format."""
    return _SIGNAL_NAMED.search(text) is not None


def stop_report(norm: str) -> bool:
    """Whether a line is Paddle's report of a SIGTERM or a SIGABRT its handler caught (:data:`_STOP_REPORT`)."""
    return _STOP_REPORT.search(norm) is not None


#: abseil's failure signal handler reporting a stop signal (absl/debugging/failure_signal_handler.cc
#: WriteSignalMessage: "*** SIGTERM received at time=1748300290 on cpu 8 ***"; TensorFlow, JAX and Ray's workers install it).
#: Also an alternative of the kill lines (lines._KILL) and of a teardown's stop (shutdown), by its pattern.
ABSEIL_STOP = re.compile(r"\*\*\* SIG(?:TERM|INT|HUP|KILL) received at time=")


def abseil_stop(norm: str) -> bool:
    """Whether a line is abseil's report of a stop signal (:data:`ABSEIL_STOP`)."""
    return "received at time=" in norm and ABSEIL_STOP.search(norm) is not None


def sigterm_report(norm: str) -> bool:
    """Whether a line is Paddle's report of a SIGTERM (:data:`_STOP_REPORT`, "Termination signal")."""
    m = _STOP_REPORT.search(norm)
    return m is not None and m.group(1) == "Termination"


def is_stop_record(norm: str) -> bool:
    """Whether a line is a program's record that its SIGTERM handler is stopping the run."""
    return "received" in norm and _STOP_RECORD.search(norm) is not None


def agent_death_signal(text: str) -> bool:
    """Whether a line is torchrun's agent reporting the signal it got (:data:`_DEATH_SIGNAL`)."""
    return "death signal" in text and _DEATH_SIGNAL.search(text) is not None


def signal_raised(text: str) -> bool:
    """Whether an exception line (without its prefix) is one a signal raises (:data:`_AFTERMATH`)."""
    return _AFTERMATH.match(text) is not None


def workers_terminated(norm: str) -> bool:
    """Whether a line is a data loader's report that SIGTERM ended its workers."""
    return _WORKERS_TERMINATED.search(norm) is not None


def launcher_forward(text: str) -> bool:
    """Whether a line is Lightning's launcher passing on a stop signal to its ranks' processes (:data:`_FORWARD`)."""
    return FORWARD_KEY in text and _FORWARD.match(text.strip()) is not None
