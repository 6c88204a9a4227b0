"""What makes a failure line the root error (README rules R2, R3, R5): not a symptom of an error
elsewhere (a collective's timeout, a launcher's SIGTERM or exit line), not a traceback's frame or
code line, not a later line of a CUDA error's message, not a warning, a trace-level record or a
library's notice printed before the failure.
"""

from __future__ import annotations

import re

from gpulens.diagnosis import logs
from gpulens.diagnosis.guarded import Guarded, remembered
from gpulens.diagnosis.logread.lines import is_benign
from gpulens.diagnosis.logread.records import tf_notice

__all__ = ["is_root_error"]

#: Symptoms of an error elsewhere beyond ``logs.is_weak``: collective timeouts and aborts, the
#: launcher's signals to the other ranks, its exit-code rows and lines, srun's/LSF's exit lines.
_ECHO = Guarded(
    r"Watchdog caught collective operation timeout|[Ww]atchdog thread terminated(?! with exception: CUDA error)"
    r"|NCCL operations have failed or timed out"
    r"|NCCL communicator was aborted|ProcessGroupNCCL.*(?:[Tt]imeout|timed out|abort)|[Tt]o avoid data inconsistency"
    r"|closing signal SIG|[Ss]ignal \d+ \(SIGTERM\)|[Rr]eceived SIGTERM|exits? with return code|SignalException"
    r"|Caught signal 15|DistBackendError(?!.*(?:unhandled (?:cuda|system) error|invalid usage))|collective operation timeout"
    r"|failed \(exitcode|^\s*exitcode\s*:"
    r"|Exited with exit code|RayTaskError\(|process rank \d+ with PID|BAD TERMINATION OF ONE",
    ("atchdog", "NCCL", "ProcessGroupNCCL", "o avoid data inconsistency", "closing signal SIG", "SIGTERM",
     "return code", "SignalException", "Caught signal 15", "DistBackendError", "collective operation timeout",
     "failed (exitcode", "exitcode", "Exited with exit code", "RayTaskError(", "process rank ", "BAD TERMINATION OF ONE"),
)


@remembered  # a pure test of one line, asked again about the same lines by several stages
def is_root_error(norm: str) -> bool:
    """A (normalized) failure line that can be the root error: not a symptom of an error
    elsewhere, not a traceback frame or code line, not a later line of a CUDA error's message,
    not benign noise."""
    if not norm or norm[0] in " \t" or norm.startswith(("File \"", "raise ", "^")) \
            or (any(k in norm for k in _NOT_THE_ERROR) and _CUDA_ERROR not in norm) or _quiet(norm) \
            or ("==" in norm and _PINNED.match(norm) is not None):
        return False
    return not (logs.is_weak(norm) or _ECHO.search(norm) is not None or is_benign(norm) or _RETRYING in norm
                or (_DUMPING in norm and _STATE_DUMP.search(norm) is not None))


#: A log line's level that says it is a trace, not an error (README rule R2), in its header:
#: UCX's "[1580511823.09] [host:53890:1] rcache.c:545  UCX  DEBUG failed to register region ..."
#: (openucx/ucx src/ucs/debug/log.c, ucs_log_default_handler), Python logging's "DEBUG:root:...",
#: loguru's "| DEBUG |", "[TRACE]".
_QUIET_LEVEL = re.compile(r"(?:^|[\s\[|(])(?:DEBUG|TRACE)(?:[\s\]|):])")
#: The characters of a line's start where a level is read (its header, not its message).
_LEVEL_SPAN = 120


#: A line of ``pip freeze`` (an experiment's dump of its environment): "async-timeout==4.0.3", one
#: requirement pinned to its version (pypa/pip src/pip/_internal/operations/freeze.py,
#: FrozenRequirement.__str__: "name==version"). A package's name, not an error (README rule R2).
_PINNED = re.compile(r"^[A-Za-z0-9][\w.-]*(?:\[[\w,.-]+\])?==[\w.!+-]+$")


def _quiet(norm: str) -> bool:
    """Whether a line is logged at a DEBUG or TRACE level (its header says so), or by TensorFlow's
    logging at INFO or WARNING severity."""
    head = norm[:_LEVEL_SPAN]
    if tf_notice(norm):
        return True
    return ("DEBUG" in head or "TRACE" in head) and _QUIET_LEVEL.search(head) is not None


#: The lines torch appends to every CUDA error's message (c10/cuda/CUDAException.cpp,
#: c10_cuda_check_implementation: the asynchronous-report suffix and the device-side assertion
#: note; pytorch/pytorch 0e4c6cd): the error is the message's first line (README rule R3).
_CUDA_ADVICE = ("CUDA kernel errors might be asynchronously reported", "consider passing CUDA_LAUNCH_BLOCKING=1",
                "Compile with `TORCH_USE_CUDA_DSA`", "Device-side assertions were explicitly omitted")
#: pip's notice, logged at CRITICAL level ("ERROR: pip's dependency resolver does not currently take
#: into account all the packages that are installed. ..."), of conflicts among the packages it has
#: just installed; it then prints "Successfully installed ..." and exits 0 (pypa/pip 00226a8,
#: src/pip/_internal/commands/install.py, _warn_about_conflicts): not an error that ends a run. pip
#: 20.2's legacy resolver words the same notice "ERROR: After October 2020 you may experience errors
#: when installing or updating packages. This is because pip will change the way that it resolves
#: dependency conflicts." (the same function at tag 20.2).
_PIP_NOTICE = ("pip's dependency resolver does not currently take into account",
               "pip's legacy dependency resolver does not consider dependency conflicts",
               "After October 2020 you may experience errors when installing or updating packages")
#: huggingface_hub's warning before it retries a request (huggingface_hub/utils/_http.py,
#: http_backoff: logger.warning(f"'{err}' thrown while requesting {method} {url}")): the error,
#: if any, is raised when it gives up (README rule R2: a warning printed before the failure).
_HUB_RETRY = ("' thrown while requesting ",)
#: DeepSpeed ZeRO-3's warning of memory pressure (deepspeed/runtime/zero/stage3.py,
#: DeepSpeedZeroOptimizer_Stage3.step: "N pytorch allocator cache flushes since last step. this
#: happens when there is high memory pressure and is detrimental to performance. ... consider
#: adding get_accelerator().empty_cache() calls in your training loop ..."): a warning, whichever
#: part of the line a progress bar's refresh left (README rule R2).
_ZERO3_FLUSHES = ("pytorch allocator cache flushes since last step", "empty_cache() calls in your training loop")
_NOT_THE_ERROR = _CUDA_ADVICE + _PIP_NOTICE + _HUB_RETRY + _ZERO3_FLUSHES
#: The error a CUDA error's message states. torch 1.8-1.10 put the advice first, on the same line
#: ("RuntimeError: CUDA kernel errors might be asynchronously reported at some other API call,so the
#: stacktrace below might be incorrect. For debugging consider passing CUDA_LAUNCH_BLOCKING=1. CUDA
#: error: an illegal memory access was encountered": c10/cuda/CUDAException.h C10_CUDA_CHECK with
#: c10::cuda::get_cuda_check_prefix(), pytorch v1.8.0): that line is the error (README rule R3).
_CUDA_ERROR = "CUDA error: "


_DUMPING = "Dumping "
#: vLLM's dump of the engine's state when its core crashes, logged at ERROR level ("ERROR 04-05
#: 03:52:41 [dump_input.py:72] Dumping input data for V1 LLM engine (v0.10.1) with config: ...",
#: "Dumping scheduler output for model execution: ...", "Dumping scheduler stats: ..."): a
#: config dump, not the error (README rule R2).
_STATE_DUMP = re.compile(r"Dumping (?:input data for V\d+ LLM engine|scheduler (?:output|stats))")


#: urllib3's warning before it tries a request again ("Retrying (Retry(total=4, connect=4, ...)) after
#: connection broken by 'ConnectTimeoutError(...)'"): the error, if any, is raised when it gives up.
_RETRYING = "Retrying (Retry("
