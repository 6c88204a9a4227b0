"""Which rank, node or process printed a failure line, which one failed first (README "Origin:
rules" O1-O7; rule R5), and the lines the others printed because of it: a line's own prefix
(torchrun's ``[rankN]:``, srun's ``N:``, Ray's ``(pid=…, ip=…)`` head above an untagged block),
the earliest real error by timestamp or line order, else a collective timeout's first rank, else
the launcher's summary (torchrun's root-cause table, Open MPI's and MPICH's first process).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Sequence

from gpulens.diagnosis import logs
from gpulens.diagnosis.keyscan import find_keys
from gpulens.diagnosis.logread import ranks
from gpulens.diagnosis.logread.indicators.markers import is_report_head
from gpulens.diagnosis.logread.indicators.rooterror import is_root_error
from gpulens.diagnosis.logread.lines import is_progress
from gpulens.diagnosis.logread.tracebacks import EXCEPTION, norm_body

__all__ = ["AROUND", "COLLECTIVE_TIMEOUT", "SPAWN_READ", "Tags", "first_origin", "glued_timeouts", "interleaved", "same_origin",
           "secondary_lines", "spawn_lost"]

#: Lines above an untagged line searched for the head of its error block (Ray's "(pid=…, ip=…)").
AROUND = 80

#: A collective operation that timed out (the key message of a hang, when nothing else failed).
COLLECTIVE_TIMEOUT = re.compile(r"Watchdog caught collective operation timeout|collective operation timeout|NCCL.*timed out")


class Tags:
    """The rank/node/process of lines (:meth:`of`), each line asked once, the Ray heads near
    ``lo`` and after it found by one literal scan."""

    def __init__(self, lines: Sequence[str], lo: int) -> None:
        self.lines = lines
        self.lo = lo
        self._heads: list[int] | None = None  # found when first needed (an untagged line)
        self.memo: dict[int, ranks.Origin] = {}

    @property
    def heads(self) -> list[int]:
        if self._heads is None:
            self._heads = find_keys(self.lines, ("pid=",), max(0, self.lo - AROUND))
        return self._heads

    def of(self, i: int) -> ranks.Origin:
        """Line ``i``'s own prefix or message, else the head of the error block above it (Ray
        prints "(pid=…, ip=…)" once above an untagged traceback; a progress line between them
        ends the block)."""
        got = self.memo.get(i)
        if got is None:
            got = self.memo[i] = self._find(i)
        return got

    def _find(self, i: int) -> ranks.Origin:
        o = ranks.origin_of(self.lines[i])
        if o.rank is not None or o.node is not None:
            return o
        at = bisect.bisect_left(self.heads, i)
        for k in reversed(self.heads[max(0, at - 8):at]):
            if k < i - AROUND:
                break
            head = ranks.origin_of(self.lines[k])
            if head.proc is not None:
                return ranks.Origin() if any(is_progress(self.lines[j]) for j in range(k + 1, i)) else head
        return ranks.Origin()


def same_origin(o: ranks.Origin, first: ranks.Origin) -> bool:
    """Whether a line from ``o`` comes from the first failing rank/node/process (a line that
    names none of them counts as its)."""
    if first.rank is not None and o.rank is not None:
        return o.rank == first.rank
    if first.node is not None and o.node is not None:  # "gpu016" is "gpu016.cluster.edu"
        same = o.node.split(".")[0] == first.node.split(".")[0] if not _is_ip(o.node) else o.node == first.node
        return same and (first.proc is None or o.proc is None or o.proc == first.proc)
    return True


def _is_ip(node: str) -> bool:
    """Whether a node name is an IPv4 address (no short name to compare)."""
    return node.replace(".", "").isdigit()


def _earliest(tagged: list[tuple[int, ranks.Origin]], lines: Sequence[str]) -> ranks.Origin:
    """The origin of the earliest line: by timestamp when every line carries one of the same
    form (all with a date, or all without; text order is time order then), else in file order."""
    stamps = [ranks.timestamp_of(lines[i]) for i, _ in tagged]
    if all(stamps) and len({len(x or "") > 15 for x in stamps}) == 1:
        order = sorted(range(len(tagged)), key=lambda k: (stamps[k] or "", tagged[k][0]))
        return tagged[order[0]][1]
    return tagged[0][1]


#: The time field of a torchrun failure table entry (torch/distributed/elastic/multiprocessing/errors/__init__.py
#: ``ProcessFailure.timestamp_isoformat``: "%Y-%m-%d_%H:%M:%S").
_TABLE_TIME = re.compile(r"\btime\s*:\s*(\d{4}-\d\d-\d\d_\d\d:\d\d:\d\d)")


#: Lines below a ``Root Cause`` head that hold its first entry.
_ENTRY_ROWS = 12


def _first_observed(lines: Sequence[str], tables: Sequence[int]) -> int:
    """Which of several ``Root Cause`` tables (each node's torchrun agent prints its own) names the failure seen
    first: the earliest time its first entry gives, the first printed on a tie (README rule R5); the last table
    when they give no time (torch 1.9's table has none)."""
    times = [next((m.group(1) for ln in lines[at + 1:at + _ENTRY_ROWS] if (m := _TABLE_TIME.search(ln))), None)
             for at in tables]
    if len(tables) < 2 or not all(times):
        return tables[-1]
    first = min(range(len(tables)), key=lambda k: (times[k] or "", k))
    return tables[first]


def _launcher_origin(lines: Sequence[str], start: int) -> ranks.Origin | None:
    """The rank (and host) a launcher's summary names as the first to fail."""
    found = find_keys(lines, (*ranks.ROOT_CAUSE_HEADS, "Process name:"), start)
    tables = [i for i in found if "Root Cause" in lines[i]]
    if tables:
        at = _first_observed(lines, tables)  # torchrun prints its other failures ("Failures:") just above the root cause
        head = next((k for k in range(at - 1, max(start, at - _TABLE_ROWS) - 1, -1) if "Failures:" in lines[k]), at)
        table = ranks.root_cause_table(lines[at:at + 12], lines[head + 1:at])
        if table is not None:
            return table
    names = [i for i in found if "Process name:" in lines[i]]
    if names:
        return ranks.mpirun_first(lines, names, find_keys(lines, ("MCW rank",), 0))
    # Open MPI's "mpirun noticed that process rank 3 with PID … on node gpu07 exited on signal 9",
    # MPICH's "RANK 3 PID … RUNNING AT gpu07": the process the launcher saw end first
    for i in find_keys(lines, ("process rank ", "RUNNING AT"), start):
        got = ranks.origin_of(lines[i])
        if got.rank is not None:
            return got
    return _paddle_failed_container(lines, start)


#: paddle.distributed.launch's report of the failed container under "Container failed !!!"
#: (``launch/job/container.py`` ``Container.__str__``: "Container rank {} status {} cmd {} code {} log {}").
_PADDLE_CONTAINER = re.compile(r"^Container rank (\d+) status failed\b")


def _paddle_failed_container(lines: Sequence[str], start: int) -> ranks.Origin | None:
    """The rank of the first container paddle.distributed.launch reports as failed."""
    for i in find_keys(lines, ("Container rank ",), start):
        if (m := _PADDLE_CONTAINER.match(lines[i])) is not None:
            return ranks.Origin(int(m.group(1)))
    return None


def first_origin(lines: Sequence[str], failures: Sequence[int], start: int,
                 norm: Callable[[int], str]) -> ranks.Origin:
    """The rank/node that shows the root error first: the earliest rank-tagged real error; when
    there is none and a collective timed out, the first rank to report the timeout; else the
    launcher's summary; else the earliest tagged symptom; the host filled in from torchrun's
    table where it names that rank, or where every failed rank ran on one host; ``start``: the last launch's
    (:func:`relaunched`)."""
    region = [i for i in failures if i >= start]
    real = [i for i in region if is_root_error(norm(i)) and not spawn_lost(lines, i)]
    tags = Tags(lines, start)
    tagged = [(i, o) for i in real if (o := tags.of(i)) != ranks.Origin()]
    if tagged:
        got = _earliest(tagged, lines)
        plain = next((i for i in real if i < tagged[0][0] and tags.of(i) == ranks.Origin()), None)
        if plain is not None:  # printed plain first, then a copy behind one rank's tag (torch's excepthook)
            copies = {o.rank for i, o in tagged if ranks.strip_prefix(lines[i]).strip() == lines[plain].strip()}
            got = ranks.Origin(copies.pop()) if len(copies) == 1 and None not in copies else got
        if got.rank is None and got.node is not None:  # a node's kill: the rank its task report names there
            got = next((ranks.Origin(o.rank, got.node) for _, o in tagged if o.rank is not None and o.node is not None
                        and o.node.split(".")[0] == got.node.split(".")[0]), got)
        return _with_host(lines, start, got)
    symptoms = set(region) - set(real)
    echoes = [(i, o) for i in region if i in symptoms and (o := ranks.origin_of(lines[i])) != ranks.Origin()]
    workers = [i for i in real if not _launcher_raised(lines, i)]
    hangs = [(i, o) for i, o in echoes if not workers and COLLECTIVE_TIMEOUT.search(norm(i)) is not None]
    if hangs:
        hangs = glued_timeouts(lines, max(0, start - 1), hangs[0][0]) + hangs
    if hangs:  # nothing failed but a collective timed out: the first rank to say so
        got = _earliest(hangs, lines)
    else:
        got = _launcher_origin(lines, start) or (_earliest(echoes, lines) if echoes else ranks.Origin())
    return _with_host(lines, start, got)


#: Where a launcher's own code raises (torch elastic's agent and launch/run scripts, mp.spawn's join): a
#: traceback ending there is the launcher's, not a worker rank's.
_LAUNCHER_FRAMES = ("torch/distributed/elastic/", "torch/distributed/run.py", "torch/distributed/launch.py",
                    "torch/multiprocessing/spawn.py")


def _launcher_raised(lines: Sequence[str], i: int) -> bool:
    """Whether the traceback that error line ``i`` ends has its last frame in a launcher's code."""
    frame = next((lines[k] for k in range(i - 1, max(-1, i - 12), -1) if lines[k].lstrip().startswith('File "')), "")
    return any(f in frame for f in _LAUNCHER_FRAMES)


#: Lines after torchrun's "Failures:" / "Root Cause" header that its entries take.
_TABLE_ROWS = 40


def _with_host(lines: Sequence[str], start: int, got: ranks.Origin) -> ranks.Origin:
    """``got`` with its host filled in from torchrun's tables (that rank's row, or the one host of every row) or
    srun's task report, when it names a rank and no host."""
    if got.node is not None or got.rank is None:
        return got
    tables = find_keys(lines, ("Failures:", "Root Cause (first observed failure)"), start)
    hosts = ranks.table_hosts([ln for k in tables for ln in lines[k + 1:k + _TABLE_ROWS]])
    host = hosts.get(got.rank) or (next(iter(set(hosts.values()))) if len(set(hosts.values())) == 1 else None)
    host = host or _srun_task_host(lines, start, got.rank)
    return ranks.Origin(got.rank, host, got.proc) if host else got


def _srun_task_host(lines: Sequence[str], start: int, rank: int) -> str | None:
    """The host srun names for task ``rank`` ("srun: error: gpu12: task 2: Exited with exit code
    1") when the log's ranks are srun's tasks (``--label``'s "2: " prefixes; with torchrun's
    ``[rankN]`` tags srun's task is a node's launcher, not the rank)."""
    found = find_keys(lines, ("srun: error:", "[rank"), start)
    if any("[rank" in lines[i] for i in found):
        return None
    for i in found:
        o = ranks.origin_of(lines[i])
        if o.rank == rank and o.node:
            return o.node
    return None


#: torch.multiprocessing's ``ProcessContext.join`` reading the traceback a failed child left in its error
#: file (torch/multiprocessing/spawn.py: ``original_trace = pickle.load(fh)``); an empty file (the
#: child ended before it wrote one) raises EOFError there, in the parent.
SPAWN_READ = "original_trace = pickle.load("


def spawn_lost(lines: Sequence[str], i: int) -> bool:
    """Whether the exception line ``i`` is ``mp.spawn``'s parent failing to read a child's error file
    (README rule R8: the launcher's report on a child that already failed, not the child's error)."""
    if i < 2 or SPAWN_READ not in lines[i - 1]:
        return False
    return "spawn.py" in lines[i - 2] and EXCEPTION.match(norm_body(lines[i])) is not None


#: A rank's line printed onto a progress bar that left no newline (tqdm): "... 17.25 examples/s][rank2]:[E922 …"
_GLUED = re.compile(r"(?:/s\]|\||\]|\s)\[rank(\d+)\]:(?=.*(?:[Ww]atchdog caught collective|collective operation timeout))")


def glued_timeouts(lines: Sequence[str], lo: int, hi: int) -> list[tuple[int, ranks.Origin]]:
    """(index, origin) of the collective-timeout lines in ``lines[lo:hi]`` that a rank printed onto
    another line (a progress bar without its newline): the first timeout can hide there."""
    out = []
    for i in find_keys(lines, ("atchdog caught collective", "collective operation timeout"), lo, hi):
        m = _GLUED.search(lines[i])
        if m is not None and m.start() > 0:
            out.append((i, ranks.Origin(int(m.group(1)))))
    return out


def interleaved(lines: Sequence[str], start: int, first: ranks.Origin) -> tuple[int, int]:
    """``(a, b)``: the untagged lines in ``(a, b]`` were printed among the other ranks' lines
    after the first failing rank's first prefixed error line ``a`` (up to the last prefixed
    line ``b`` of another rank); ``(0, 0)`` when the first rank has no prefixed error line."""
    if first.rank is None:
        return 0, 0
    own = next((k for k in find_keys(lines, ("rror", "xception"), start) if ranks.prefix_rank(lines[k]) == first.rank
                and logs.is_hard_error(logs.normalize_line(lines[k]))), None)
    if own is None:
        return 0, 0
    last = next((k for k in range(len(lines) - 1, own, -1) if (r := ranks.prefix_rank(lines[k])) is not None
                 and r != first.rank), None)
    return (own, last) if last is not None else (0, 0)


def secondary_lines(lines: Sequence[str], failures: Sequence[int], primary: Sequence[int], first: ranks.Origin,
                    norm: Callable[[int], str]) -> list[int]:
    """The failure lines after the root error that other ranks, processes or the launcher
    printed because of it (their own errors and symptoms such as timeouts, SIGTERMs, exit
    summaries); the first failing process's own later lines are not."""
    if not primary:
        return []
    at = next((i for i in primary if not is_report_head(lines[i])), primary[0])  # a root marker is no error line
    tags = Tags(lines, at)
    return [i for i in failures if i > at and i not in primary
            and (not is_root_error(norm(i)) or not same_origin(tags.of(i), first))]
