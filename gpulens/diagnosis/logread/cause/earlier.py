"""The root cause printed before the aftermath the error context shows: an earlier stage's failure
behind a checkpoint or a file that is not there, a gone DataLoader worker behind its shared
tensor, mp.spawn's child that died without a word, NCCL's own warning behind its system error,
the kernel's assert behind a device-side assert, torch's build warning behind SDPA's missing kernel."""

from __future__ import annotations

import re
from collections.abc import Sequence

from gpulens.diagnosis import logs
from gpulens.diagnosis.classifier import AFTERMATH_RULES, ROOT_CAUSE_CATEGORIES
from gpulens.diagnosis.keyscan import find_keys
from gpulens.diagnosis.logread import ranks
from gpulens.diagnosis.logread.cause.answers import (
    cause_of,
    evidence_line,
    unknown_because,
)
from gpulens.diagnosis.logread.cause.badrecord import one_record_failed
from gpulens.diagnosis.logread.indicators.origins import SPAWN_READ
from gpulens.diagnosis.logread.lines import ERROR_KEYS, is_failure
from gpulens.diagnosis.rules import Rule, RuleMatch, match_rules
from gpulens.diagnosis.types import Diagnosis

__all__ = ["earlier_root"]


#: Lines above the failed stage's error context searched for an earlier stage's root failure.
_EARLIER_LOOKBACK = 20000


def earlier_root(d: Diagnosis, lines: Sequence[str], floor: int, start: int, rules: tuple[Rule, ...]) -> Diagnosis:
    """For a checkpoint that is not there (``d`` from an aftermath rule), the root failure of an
    earlier stage of the same job script (its error lines in ``lines[floor:start]``: a training
    stage that died of OOM, a full disk, a crash before it wrote the checkpoint the next stage
    loads); for mp.spawn's EOFError on a child's empty error file, the child's own failure above
    it; for a missing file or a lost connection, :func:`_missing_input`; else ``d``."""
    if d.rule_id in _MISSING_FILE_RULES or d.rule_id in _SENDER_RULES:
        return _missing_input(d, lines, floor, start, rules)
    if d.rule_id in _NCCL_SYSTEM_RULES:
        return _nccl_warned(d, lines, floor, start, rules)
    if d.rule_id in _DEVICE_ASSERT_RULES and any("device-side assert" in e for e in d.evidence[:1]):
        return _kernel_asserted(d, lines, floor, start, rules)
    if d.rule_id in _SDPA_RULES:
        return _sdpa_unbuilt(d, lines, floor, start, rules)
    lost = _spawn_lost_child(d, lines, start)
    if lost is None and d.rule_id not in AFTERMATH_RULES:
        return d
    stop = start if lost is None else lost
    if stop <= floor:
        return d
    root = _roots(lines, max(floor, stop - _EARLIER_LOOKBACK), stop, rules, ROOT_CAUSE_CATEGORIES)
    if not root:
        return d if lost is None else unknown_because(
            d, "a spawned process died without writing its traceback (mp.spawn's EOFError reading it) and the log "
               "shows no error of its own")
    first = min(root, key=lambda m: m.position)  # the first stage that failed
    if lost is not None:
        return cause_of(d, first, f"a spawned process failed first ({first.rule.id}) and died without writing its "
                                   "traceback; mp.spawn's EOFError reading it is its aftermath, not a damaged file")
    return cause_of(d, first, f"an earlier stage of the job failed first ({first.rule.id}); the missing "
                               "checkpoint a later stage then looked for is its aftermath")


#: The rules of NCCL's bare "unhandled system error" (ncclSystemError), which the exception
#: torch raises says without its cause: NCCL prints the cause before it, as a "NCCL WARN" line
#: of the failing call (nccl src/misc/shmutils.cc ncclShmOpen: "Error: failed to extend
#: /dev/shm/nccl-X to N bytes" when /dev/shm is too small), and torch's message may then end in
#: an empty "Last error:".
_NCCL_SYSTEM_RULES = frozenset({"nccl-unhandled-system-error", "nccl-error-in", "nccl-error-short-form"})
#: NCCL WARN causes looked for above the exception (rule ids), and the literals of their lines
#: (an NCCL WARN line is no failure line by itself: NCCL warns of much it recovers from).
_NCCL_CAUSES = frozenset({"nccl-shm-too-small"})
_NCCL_CAUSE_KEYS = ("failed to extend /dev/shm/", "creating shared memory segment")
#: Lines above the error context searched for them (NCCL's INFO lines of the unwinding call and
#: the other ranks' lines come between).
_NCCL_LOOKBACK = 400


def _nccl_warned(d: Diagnosis, lines: Sequence[str], floor: int, start: int, rules: tuple[Rule, ...]) -> Diagnosis:
    """For NCCL's bare system error (``d``), the cause an NCCL WARN line printed above it
    (``_NCCL_CAUSES``), else ``d``."""
    found = find_keys(lines, _NCCL_CAUSE_KEYS, max(floor, start - _NCCL_LOOKBACK), start)
    text = "\n".join(logs.normalize_line(ranks.strip_prefix(lines[i])) for i in found)
    root = [m for m in match_rules(text, rules) if m.rule.id in _NCCL_CAUSES] if found else []
    if not root:
        return d
    first = min(root, key=lambda m: m.position)
    return cause_of(d, first, f"NCCL printed the cause of its system error before the exception ({first.rule.id})")


#: The rules of the CUDA runtime's bare "device-side assert triggered" (cudaErrorAssert), which
#: names no check: the kernel's own assertion printed above it does (CUDA_KERNEL_ASSERT through
#: the device's printf: "<file>.cu:<line>: <function>: block: [..], thread: [..] Assertion `<cond>`
#: failed."), ATen's kernels among them (IndexKernel.cu, Indexing.cu, Loss.cu, ClassNLLCriterion).
_DEVICE_ASSERT_RULES = frozenset({"cuda-device-side-assert", "cuda-error-other"})
_KERNEL_ASSERT_KEY = ("Assertion `",)
#: Lines above the error context searched for the kernel's assertion (every failing thread prints one).
_ASSERT_LOOKBACK = 400


#: Kernel assertion lines read (one per failing GPU thread, thousands when a whole block fails the check): the
#: first ones name the check.
_ASSERTS_READ = 50


def _kernel_asserted(d: Diagnosis, lines: Sequence[str], floor: int, start: int, rules: tuple[Rule, ...]) -> Diagnosis:
    """For CUDA's bare device-side assert (``d``), the answer of the first kernel assertion a
    specific rule reads in the attempt's lines around the error context (README C7: the check
    names the value the job passed), else ``d``."""
    found = find_keys(lines, _KERNEL_ASSERT_KEY, max(floor, start - _ASSERT_LOOKBACK), len(lines))[:_ASSERTS_READ]
    text = "\n".join(logs.normalize_line(ranks.strip_prefix(lines[i])) for i in found)
    root = [m for m in match_rules(text, rules) if "Assertion `" in m.line and not m.rule.generic
            and not m.rule.secondary and m.rule.id not in _DEVICE_ASSERT_RULES] if found else []
    if not root:
        return d
    first = min(root, key=lambda m: m.position)
    return cause_of(d, first, f"the kernel's own assertion names the check that failed ({first.rule.id})")


#: scaled_dot_product_attention's bare "No available kernel. Aborting execution." (rule ids), and the
#: warning torch prints at the first call when the build lacks a kernel (pytorch
#: aten/src/ATen/native/transformers/cuda/sdp_utils.cpp: "Torch was not compiled with flash attention." /
#: "... memory efficient attention."), a warning among the others above the traceback.
_SDPA_RULES = frozenset({"torch-sdpa-no-kernel"})
_SDPA_BUILD_KEYS = ("Torch was not compiled with ",)
#: The rule that reads the error together with that warning.
_SDPA_UNBUILT_RULE = "torch-sdpa-not-compiled"
#: Lines above the error context searched for the warning (the job's own start-up lines come between).
_SDPA_LOOKBACK = 2000


def _sdpa_unbuilt(d: Diagnosis, lines: Sequence[str], floor: int, start: int, rules: tuple[Rule, ...]) -> Diagnosis:
    """For SDPA's "No available kernel" (``d``), the build that lacks the kernel when torch warned so
    above it in the attempt (README C7: a build without kernels for the job's request), else ``d``."""
    found = find_keys(lines, _SDPA_BUILD_KEYS, max(floor, start - _SDPA_LOOKBACK), start)
    if not found or not d.evidence:
        return d
    text = "\n".join([logs.normalize_line(lines[found[0]]), d.evidence[0]])
    root = [m for m in match_rules(text, rules) if m.rule.id == _SDPA_UNBUILT_RULE]
    if not root:
        return d
    return cause_of(d, root[0], "torch warned above the error that this build has no such kernel")


def _missing_input(d: Diagnosis, lines: Sequence[str], floor: int, start: int, rules: tuple[Rule, ...]) -> Diagnosis:
    """For a missing file or a lost connection (``d``): the process gone behind multiprocessing's
    resource sharer (:func:`_sender_gone`), or, for a missing file, the earlier stage that was to
    write it (:func:`_stage_output_missing`); else ``d``."""
    gone = _sender_gone(d, lines, floor, start, rules)
    if gone is not None:
        return gone
    return _stage_output_missing(d, lines, floor, start, rules) if d.rule_id in _MISSING_FILE_RULES else d


def _roots(lines: Sequence[str], lo: int, hi: int, rules: tuple[Rule, ...], categories: frozenset[str],
           ids: frozenset[str] = frozenset()) -> list[RuleMatch]:
    """The specific (not generic, not secondary) rule matches of ``categories`` (or ``ids``) in the
    failure lines of ``lines[lo:hi]``."""
    errs = [ranks.strip_prefix(lines[i]) for i in find_keys(lines, ERROR_KEYS, lo, hi)
            if is_failure(logs.normalize_line(lines[i]), lines[i])]
    return [m for m in match_rules("\n".join(logs.normalize_line(x) for x in errs), rules)
            if (m.rule.category in categories or m.rule.id in ids) and not m.rule.generic and not m.rule.secondary]


#: Rules of a missing input file, and the lines above it searched for the earlier stage of the
#: same script that was to write it and failed (a pipeline script: train, predict, evaluate).
_MISSING_FILE_RULES = frozenset({"data-file-missing", "data-file-not-found", "data-folder-missing"})
_STAGE_SPAN = 30
#: Categories of a failure that ends the program that prints it (the earlier stage then wrote
#: nothing): argparse's usage error (exit status 2), a Python that cannot import or parse the
#: script, and the root causes a checkpoint's aftermath is traced to.
_STAGE_ENDS = ROOT_CAUSE_CATEGORIES | {"import_error", "syntax_error"}
_STAGE_RULES = frozenset({"argparse-usage-error"})


def _stage_output_missing(d: Diagnosis, lines: Sequence[str], floor: int, start: int,
                          rules: tuple[Rule, ...]) -> Diagnosis:
    """For a missing file (``d``), the failure of an earlier stage of the same script printed just
    above its line (at most ``_STAGE_SPAN`` lines) that ended that stage before it wrote its
    output: the missing file is its aftermath (README R5); else ``d``."""
    at = evidence_line(d, lines, max(floor, start - _STAGE_SPAN))
    if at is None:
        return d
    root = _roots(lines, max(floor, at - _STAGE_SPAN), at, rules, _STAGE_ENDS, _STAGE_RULES)
    if not root:
        return d
    first = min(root, key=lambda m: m.position)
    return cause_of(d, first, f"the stage before failed first ({first.rule.id}); the file a later stage then "
                               "looked for is its missing output")


#: The frame in which multiprocessing connects to the process that shared a tensor's file
#: descriptor (torch.multiprocessing reductions.rebuild_storage_fd -> resource_sharer.DupFd.detach
#: -> get_connection -> connection.Client): its "FileNotFoundError: [Errno 2] No such file or
#: directory" (no path: the sender's socket) or ConnectionRefusedError says that process (a
#: DataLoader worker) is gone, not that an input file is missing.
_SHARER_FRAME = "multiprocessing/resource_sharer.py"
_SENDER_LINE = re.compile(r"(?:FileNotFoundError: \[Errno 2\] No such file or directory|ConnectionRefusedError: "
                          r"\[Errno 111\] Connection refused|ConnectionResetError: \[Errno 104\] Connection reset by peer)\s*$")
#: Rules, beside the missing-file ones, that read those lines.
_SENDER_RULES = frozenset({"socket-connection-errors"})
_SHARER_SPAN = 12
#: Lines above it searched for what ended that process (an interrupt, a kill, an OOM, a crash).
_SENDER_LOOKBACK = 400
_SENDER_ENDS = ROOT_CAUSE_CATEGORIES | {"preempted"}


def _sender_gone(d: Diagnosis, lines: Sequence[str], floor: int, start: int,
                 rules: tuple[Rule, ...]) -> Diagnosis | None:
    """For a bare "No such file or directory" (or a refused or reset connection) raised in
    multiprocessing's resource sharer, what ended the process that had shared the tensor (printed above it), else ``unknown``; None when
    ``d`` is not that error."""
    at = evidence_line(d, lines, max(floor, start - _SENDER_LOOKBACK))
    if at is None or not _SENDER_LINE.search(lines[at]):
        return None
    if not any(_SHARER_FRAME in ln.replace("\\", "/") for ln in lines[max(floor, at - _SHARER_SPAN):at]):
        return None
    root = _roots(lines, max(floor, at - _SENDER_LOOKBACK), at, rules, _SENDER_ENDS)
    if not root and (record := one_record_failed(d, lines, floor, at)) is not d:
        return record
    if not root:
        return unknown_because(d, "a DataLoader worker that had shared a tensor was gone when it was read, and the "
                                   "log does not say why")
    first = min(root, key=lambda m: m.position)
    return cause_of(d, first, f"a DataLoader worker was ended first ({first.rule.id}); reading the tensor it had "
                               "shared then failed in multiprocessing's resource sharer")


#: What torch.multiprocessing.spawn's ProcessContext.join runs to read a failed child's pickled
#: traceback from its error file (pytorch torch/multiprocessing/spawn.py: "original_trace =
#: pickle.load(fh)"): an EOFError ("Ran out of input") there says the child died without writing
#: one (aborted in C++, as the NCCL watchdog does, or killed), not that a file of the job is damaged.
_SPAWN_EOF = "EOFError: Ran out of input"
#: Lines after the error context's start searched for that traceback.
_SPAWN_SPAN = 400


def _spawn_lost_child(d: Diagnosis, lines: Sequence[str], start: int) -> int | None:
    """The index of mp.spawn's "EOFError: Ran out of input" under its join frame when ``d`` read
    that line as a damaged file; else None."""
    if d.category != "checkpoint_error" or not d.evidence or not d.evidence[0].startswith(_SPAWN_EOF):
        return None
    for i in find_keys(lines, (_SPAWN_EOF,), start, start + _SPAWN_SPAN):
        if i > 0 and SPAWN_READ in lines[i - 1]:
            return i
    return None
