"""The first failing rank and node of a failed attempt: which one shows the root error first, whether a line
comes from it, and, when no line names them, the rank and host the attempt's start-up and scheduler lines name.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from gpulens.diagnosis import logs
from gpulens.diagnosis.keyscan import find_keys
from gpulens.diagnosis.logread import ranks
from gpulens.diagnosis.logread.indicators.origins import first_origin, same_origin

__all__ = ["MPIRUN_NOTICED_KEY", "SPAWN_REPORT_KEY", "NormCache", "failing_host", "failing_rank", "first_failing", "from_origin", "node_line", "spawn_report"]


class NormCache(dict[int, str]):
    """``{i: normalize_line(lines[i]).strip() for i >= start}``, each computed when first asked
    for (the evidence is usually found in the last few lines)."""

    def __init__(self, lines: Sequence[str], start: int) -> None:
        super().__init__()
        self._lines = lines
        self._start = start

    def __missing__(self, i: int) -> str:
        if not self._start <= i < len(self._lines):
            raise KeyError(i)
        got = self[i] = logs.normalize_line(self._lines[i]).strip()
        return got

    def get(self, i: int, default: str = "") -> str:  # type: ignore[override]
        try:
            return self[i]
        except KeyError:
            return default


def first_failing(lines: Sequence[str], found: Sequence[int], start: int) -> ranks.Origin:
    """The rank and node that show the root error first (:func:`origins.first_origin`)."""
    return first_origin(lines, found, start, NormCache(lines, start).get)


def from_origin(line: str, first: ranks.Origin) -> bool:
    """Whether a line comes from the first failing rank/node (or names neither)."""
    if first.rank is None and first.node is None:
        return True
    return same_origin(ranks.origin_of(line), first)


def failing_rank(lines: Sequence[str], floor: int, first: ranks.Origin, at: int | None = None) -> int | None:
    """The rank that failed first; when no line names one, the process ``torch.multiprocessing.spawn``
    reports for the traceback that ends at ``at`` (the root indicator line), else the one rank the failed
    attempt's start-up lines name for the log's process (a per-rank log, a one-process job)."""
    if first.rank is not None:
        return first.rank
    if at is not None and (spawned := spawn_report(lines, max(floor, at - _SPAWN_SPAN), at + 1)) is not None:
        return spawned
    if at is not None and (proxy := _nccl_proxy_rank(lines, at)) is not None:
        return proxy
    return ranks.announced_rank(lines, find_keys(lines, ranks.RANK_KEYS, floor))


#: NCCL's proxy thread reporting the operation it failed (``src/proxy.cc``: ``WARN("[Proxy Service %d] Failed to execute
#: operation %s from rank %d, retcode %d", proxyState->tpRank, ...)``), which torch's ProcessGroupNCCL prints as the
#: "Last error:" of the exception: the service's own rank is the process that raised it.
_NCCL_PROXY = re.compile(r"\[Proxy Service (\d+)\] Failed to execute operation \w+ from rank \d+")
#: Lines after the root indicator line searched for NCCL's "Last error:" detail.
_LAST_ERROR_SPAN = 6


def _nccl_proxy_rank(lines: Sequence[str], at: int) -> int | None:
    """The rank whose NCCL proxy thread reported the failed operation in the lines just after ``at``."""
    for line in lines[at:at + _LAST_ERROR_SPAN]:
        if "[Proxy Service " in line and (m := _NCCL_PROXY.search(line)) is not None:
            return int(m.group(1))
    return None


#: torch/multiprocessing/spawn.py ``ProcessContext.join``: the parent re-raises a spawned process's
#: exception as ``ProcessRaisedException`` whose message is ``"\n\n-- Process %d terminated with the
#: following error:\n"`` and that process's own traceback; ``%d`` is the index ``mp.spawn`` passed the
#: process (``fn(i, *args)``), the rank of a one-node DDP job.
SPAWN_REPORT_KEY = "terminated with the following error"
_SPAWN_REPORT = re.compile(r"-- Process (\d+) terminated with the following error")
#: Lines above the root indicator line searched for the spawn report (the child's traceback between).
_SPAWN_SPAN = 400


def spawn_report(lines: Sequence[str], lo: int, hi: int) -> int | None:
    """The process index of the last ``torch.multiprocessing.spawn`` report in ``lines[lo:hi]``."""
    for i in reversed(find_keys(lines, (SPAWN_REPORT_KEY,), lo, hi)):
        if (m := _SPAWN_REPORT.search(lines[i])) is not None:
            return int(m.group(1))
    return None


def failing_host(lines: Sequence[str], floor: int, failing: str | None = None) -> str | None:
    """The host a scheduler line names for the failed attempt (Slurm cancel/srun error; for a
    ``failing`` line behind srun's ``--label`` task prefix, the exit line of that task), else the
    node Ray marked dead, else the one host its start-up lines name for every rank (a single-node job)."""
    task = ranks.srun_task(failing) if failing is not None else None
    found = find_keys(lines, ("CANCELLED", "srun: error"), floor)
    if task is not None and (host := ranks.task_host(lines, found, task)) is not None:
        return host
    for i in reversed(found):
        node = ranks.origin_of(lines[i]).node
        if node:
            return node
    if (dead := ranks.dead_ray_node(lines, find_keys(lines, (ranks.DEAD_RAY_NODE_KEY,), floor))) is not None:
        return dead  # Ray gave that node up (its raylet died or stopped answering)
    if (noticed := _mpirun_host(lines, floor)) is not None:
        return noticed
    # (a program's start-up banner may come a line or two before where its attempt is taken to start)
    return ranks.announced_host(lines, find_keys(lines, ranks.HOST_KEYS, max(0, floor - _BANNER_ABOVE)))


#: Lines above an attempt's start read for the host its program's banner names.
_BANNER_ABOVE = 3


#: Open MPI's errmgr report of a process that died (help-errmgr-base.txt): "mpirun noticed that process
#: rank N with PID P on node HOST exited on signal S (NAME)." / "... exited with status/code ...".
MPIRUN_NOTICED_KEY = "mpirun noticed that process rank "


def _mpirun_host(lines: Sequence[str], floor: int) -> str | None:
    """The one host Open MPI's reports of dead processes name in the attempt (none when they name several)."""
    hosts = {ranks.origin_of(lines[i]).node for i in find_keys(lines, (MPIRUN_NOTICED_KEY,), floor)} - {None}
    return hosts.pop() if len(hosts) == 1 else None


def node_line(lines: Sequence[str], node: str, primary: Sequence[int], floor: int) -> int | None:
    """The index of the line an operator checks ``node`` against when no indicator line (``primary``) names it:
    the first line of the attempt (from ``floor``) after the root error that names it (a scheduler's or
    launcher's report), else the last before it (a banner, a start-up line); None when an indicator line names
    it or no line does."""
    if any(node in lines[i] for i in primary):
        return None
    at = primary[0] if primary else len(lines)
    found = find_keys(lines, (node,), floor)
    return next((i for i in found if i >= at), found[-1] if found else None)
