"""Whether the failure's lines show the job's teardown (P10).

``destroy_process_group``, atexit and destructors, "shutting down" (not a kill's reaction, not a
``KeyboardInterrupt`` landing in a destructor, not an atexit report after the failure), and a native
crash in glibc's exit handlers.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from gpulens.diagnosis import logs
from gpulens.diagnosis.guarded import Guarded
from gpulens.diagnosis.logread.lines import is_benign, is_terminal_kill

__all__ = ["shutting_down"]


#: What a job's teardown prints. glibc's "FATAL: exception not rethrown" (``nptl/unwind.c``, ``__libc_fatal``) is a
#: thread's forced unwind (``pthread_exit``/``pthread_cancel``) caught by C++ code and not rethrown; CPython before
#: 3.14 makes a daemon thread that wants the GIL after finalization began call ``pthread_exit`` (``PyThread_exit_thread``,
#: ``Python/ceval_gil.c``), so it is printed while the interpreter exits (P10: crashes at interpreter exit).
_TEARDOWN = Guarded(r"destroy_process_group|atexit|__del__|finalize|[Ss]hutting down|(?:^|FATAL: )exception not rethrown\s*$",
                    ("destroy_process_group", "atexit", "__del__", "finalize", "hutting down", "exception not rethrown"))


def shutting_down(lines: Sequence[str], failure: int, region: Sequence[str], tb: Sequence[str] | None) -> bool:
    """Whether the failure's lines show the job's teardown (not a ``KeyboardInterrupt`` landing in a destructor,
    not an atexit callback's report printed after the failure), or, without a traceback, a native backtrace
    through glibc's exit handlers follows the failure."""
    orphaned = any(_PARENT_GONE in ln for ln in lines[max(0, failure - _ORPHAN_REACH):failure + 1])
    if _teardown(_signal_aside(tb or [], _without_unraisable_after(region, lines, failure)), orphaned):
        return True
    return tb is None and _in_exit_handlers(lines, failure)


#: Python's report of an exception it cannot raise (``PyErr_WriteUnraisable``: "Exception ignored in atexit
#: callback: <function ...>", "Exception ignored in: <function X.__del__ ...>"), printed as the interpreter exits.
_UNRAISABLE = "Exception ignored in"
#: Python's report of an atexit callback that raised (``atexit._run_exitfuncs``: "Error in atexit._run_exitfuncs:",
#: Python 3.7-3.11), printed as the interpreter exits after the failure (a second Ctrl-C landing in the exit functions).
_ATEXIT_ERROR = "Error in atexit._run_exitfuncs"


def _without_unraisable_after(region: Sequence[str], lines: Sequence[str], failure: int) -> Sequence[str]:
    """``region`` without Python's unraisable-exception and atexit-error reports printed after the failure line (an
    atexit callback failing while the interpreter exits because of that failure: its aftermath, not a shutdown)."""
    if failure >= len(lines) or not any(_UNRAISABLE in ln or _ATEXIT_ERROR in ln for ln in region):
        return region
    own = logs.normalize_line(lines[failure])
    at = next((k for k in range(len(region)) if region[k] == own), None)
    if at is None:
        return region
    return [*region[:at + 1], *(ln for ln in region[at + 1:] if _UNRAISABLE not in ln and _ATEXIT_ERROR not in ln)]


def _signal_aside(frames: Sequence[str], region: Sequence[str]) -> Sequence[str]:
    """``region`` without the destructor lines (``__del__``, Python's "Exception ignored in" report) when the failure is
    a ``KeyboardInterrupt`` (SIGINT): the signal lands in whatever code runs, a destructor the garbage collector called
    in the middle of training too; it takes the phase of the job's activity (P9), not a shutdown's."""
    last = frames[-1].strip() if frames else ""
    if not last.startswith("KeyboardInterrupt"):
        return region
    return [ln for ln in region if "__del__" not in ln and _UNRAISABLE not in ln]


def _teardown(region: Sequence[str], orphaned: bool) -> bool:
    """Whether the failure's lines show the job shutting down; warnings printed at any exit
    ("destroy_process_group() was not called") and a kill's own "shutting down workers" do not (torchrun's
    agent, ``torch/distributed/elastic/agent/server/api.py``: ``logger.warning("Received %s death signal, shutting
    down workers", e.sigval)``, the signal as ``15`` or, before Python 3.11, ``Signals.SIGTERM``), nor a server's
    reaction to its engine's death (:data:`_ENGINE_DIED`), nor, when a worker reported its parent gone (``orphaned``),
    that worker's shutting down (:data:`_PARENT_GONE`)."""
    return any(_TEARDOWN.search(ln) and not is_benign(ln) and not is_terminal_kill(ln) and "death signal" not in ln
               and not _ENGINE_DIED.search(ln) and not (orphaned and _WORKER_DOWN in ln) for ln in region)


#: vLLM's worker process noticing its parent died (``vllm/v1/executor/multiproc_executor.py``: ``logger.info("Parent
#: process exited, terminating worker")``, then ``WorkerProc shutting down.``): the reaction to a failure of the API
#: server or engine, printed before that process's own traceback reaches the log, not a teardown of the job's.
_PARENT_GONE = "Parent process exited, terminating worker"
_WORKER_DOWN = "WorkerProc shutting down"
#: Lines above the failure searched for a worker's report that its parent died (the parent's traceback below it).
_ORPHAN_REACH = 120


#: A server shutting down because its engine died, not a teardown of its own: vLLM's V1 client
#: (``vllm/v1/engine/core_client.py``, ``logger.error("Engine core proc %s died unexpectedly, shutting down client.",
#: ...)``) and the uvicorn server it then stops (``uvicorn/server.py`` ``Server.shutdown``: ``logger.info("Shutting
#: down")``, printed with uvicorn's padded level name, "INFO:     Shutting down", after vLLM's ``terminate_if_errored``
#: sets ``should_exit``): a server only shuts down on a signal or on such an error.
_ENGINE_DIED = re.compile(r"died unexpectedly, shutting down client|INFO: +Shutting down\s*$")


#: glibc's exit path in a native backtrace: ``exit`` -> ``__run_exit_handlers`` -> ``_dl_fini`` -> each shared
#: library's destructors through ``__cxa_finalize`` (glibc ``stdlib/exit.c``, ``elf/dl-fini.c``): a crash there (glibc's
#: "*** Error in `prog': corrupted size vs. prev_size" then "======= Backtrace: =========", a CUDA library's static
#: destructor) happens while the process exits (P10).
_EXIT_FRAMES = re.compile(r"[(\s](?:__cxa_finalize|_dl_fini|__run_exit_handlers)\b")
#: Lines after a native crash's first line read for its backtrace.
_BACKTRACE_LINES = 40


def _in_exit_handlers(lines: Sequence[str], failure: int) -> bool:
    """Whether the native backtrace printed after the failure line runs through glibc's exit handlers
    (:data:`_EXIT_FRAMES`)."""
    return any(("finalize" in ln or "_fini" in ln or "exit_handlers" in ln) and _EXIT_FRAMES.search(ln)
               for ln in lines[failure:failure + _BACKTRACE_LINES])
