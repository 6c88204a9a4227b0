"""Which rank and which host printed a line: launcher prefixes and the messages that name them.

Prefixes: ``[rank3]:`` / ``[default3]:`` (torchrun), ``3:`` (srun ``--label``),
``[1,3]<stderr>:`` (Open MPI ``--tag-output``; ``[3]<stderr>:`` horovodrun's Gloo launcher), ``gpu07: `` (deepspeed/pdsh),
``(pid=123, ip=10.0.0.7)`` / ``(RayTrainWorker pid=1, ip=…)`` (Ray). Messages: NCCL's
``[Rank 3]``, Lightning's ``[rank: 3]`` and "DeadLock detected from rank: 3", torch.distributed.checkpoint's
"CheckpointException ranks:dict_keys([3])" (a failed rank another printed), ``Process 3 terminated``, torchrun's root-cause table
(``rank : 3``, ``host : gpu07``), ``srun: error: gpu07: task 3: …``, DeepSpeed's report of the local rank that failed
(``'--local_rank=3'] exits with return code``), Slurm's
``*** JOB 12 ON gpu07 CANCELLED``, Open MPI's "mpirun noticed that process rank 3 with PID … on
node gpu07 exited on signal 9" and MPICH's "RANK 3 PID … RUNNING AT gpu07". Launcher summaries: torchrun's ``Root Cause (first observed
failure)`` table, Open MPI's "The first process to do so was: Process name: [[4370,1],11]" with
its ``--report-bindings`` lines (``[host:pid] MCW rank 11 bound to …``) for the host.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Sequence
from typing import NamedTuple

from gpulens.diagnosis.guarded import remembered_text

__all__ = ["DEAD_RAY_NODE_KEY", "HOST_KEYS", "PALS_DIED", "PALS_EXITED", "RANK_KEYS", "RAY_HEAD", "RAY_PREFIX", "ROOT_CAUSE_HEADS", "Origin", "announced_host", "announced_rank", "dead_ray_node", "launcher_text", "mpirun_first", "origin_of", "prefix_rank", "root_cause_table", "srun_task",
           "strip_prefix", "table_hosts", "task_host", "timestamp_of"]


@dataclasses.dataclass(frozen=True)
class Origin:
    """Where a line came from (either may be unknown)."""

    rank: int | None = None
    node: str | None = None
    #: the process (Ray's ``pid=``), where a node runs several that print
    proc: str | None = None


class _Rule(NamedTuple):
    """A pattern naming a rank, a node or both (``kind``), and a literal every match of it holds
    (``need``: checked before the search of an unanchored, slow pattern; None for an anchored one)."""

    rx: re.Pattern[str]
    kind: str
    need: str | None = None


_PREFIXES: tuple[_Rule, ...] = (
    _Rule(re.compile(r"^\s*\[(?:rank|default)(\d+)\]\s*:"), "rank"),
    _Rule(re.compile(r"^\s*\[(?:\d+,)?(\d+)\]<std(?:out|err)>:"), "rank"),
    _Rule(re.compile(r"^\s*(\d{1,4}):\s"), "rank"),
    _Rule(re.compile(r"\((?:[\w.]+\s+)?pid=(\d+),\s*ip=([\d.]+)[,)]"), "proc+node", "pid="),
    _Rule(re.compile(r"^slurmstepd-([\w.-]+): "), "node"),
    _Rule(re.compile(r"^(?!slurmstepd-)([A-Za-z][\w-]*\d[\w-]*|(?:\d{1,3}\.){3}\d{1,3}):\s"), "node"),
)
#: HPE Cray PALS ``mpiexec`` (Cray MPICH on Polaris/Aurora) on a rank that ended badly: "x3102c0s25b0n0.hsn.cm.
#: polaris.alcf.anl.gov: rank 277 died from signal 6 and dumped core", "x3106c0s25b1n0: rank 3 exited with code
#: 255" (pmodels/mpich issues #7569, #7605); the first such line names the rank that ended first.
_PALS_END = re.compile(r"^\s*([A-Za-z][\w-]*\d[\w.-]*): rank (\d+) (?:died from signal \d+(?: and dumped core)?|exited with code \d+)\s*$")
#: ... of a rank that failed: not one stopped by SIGTERM ("rank 0 died from signal 15": PALS stopping the others
#: once one rank ended, or the scheduler ending the job).
_PALS_FAILED = re.compile(_PALS_END.pattern.replace(r"died from signal \d+", r"died from signal (?!15\b)\d+"))
#: The launcher and MPI reports below without a ``need`` are anchored, or open with a literal (``re`` scans for it).
_MESSAGES: tuple[_Rule, ...] = (
    # ProcessGroupNCCL's log prefix (torch 2.3: "[PG 0 Rank 3] ", 2.4: "[PG 0 (default_pg) Rank 3] ", 2.5+:
    # "[PG ID 0 PG GUID 0(default_pg) Rank 3] "): the rank within that process group, the global rank
    # in the default group (PG 0); a subgroup's line ("[PG ID 2 PG GUID 5(tp) Rank 1]") names no
    # global rank, nor does the "[Rank 1]" of its messages
    _Rule(re.compile(r"\[PG (?:ID 0 PG GUID 0|0)(?: ?\(default_pg\))? Rank (\d+)\]"), "rank", "[PG "),
    _Rule(re.compile(r"\[PG [^\]]{1,80} Rank \d+\]"), "group", "[PG "),
    _Rule(re.compile(r"\[Rank (\d+)\]"), "group_rank"),
    _Rule(re.compile(r"\[rank:?\s*(\d+)\]"), "rank"),
    _Rule(re.compile(r"\b[Pp]rocess (\d+) terminated with"), "rank", "rocess "),
    _Rule(re.compile(r"\bglobal_rank[=:\s]+(\d+)"), "rank", "global_rank"),
    # Lightning's DDP strategy when one process raised and the others may hang (``DDPStrategy.reconciliate_processes``,
    # lightning/pytorch/strategies/ddp.py; pytorch_lightning 1.x plugins/training_type/ddp.py): raise
    # DeadlockDetectedException(f"DeadLock detected from rank: {self.global_rank} \n {trace}"), the process that raised
    _Rule(re.compile(r"DeadLock detected from rank: (\d+)"), "rank"),
    # torch.distributed.checkpoint's report of the ranks whose save/load failed, printed by the rank that gathered
    # them (torch/distributed/checkpoint/api.py ``CheckpointException.__str__``: f"CheckpointException
    # ranks:{self._failures.keys()}", then f"Traceback (most recent call last): (RANK {rank})" above each failed
    # rank's own traceback): the rank that failed, not the one whose prefix the line carries
    _Rule(re.compile(r"CheckpointException ranks:dict_keys\(\[(\d+)"), "failed_rank"),
    # (the head's text is tracebacks.TRACEBACK's, written out here: tracebacks reads ranks' prefixes)
    _Rule(re.compile(r"Traceback \(most recent call last\): \(RANK (\d+)\)"), "failed_rank"),
    # srun's report of a task that ended badly ("srun: error: gpu07: task 3: Exited with exit code 1"); not of
    # the tasks srun itself then stops ("srun: error: gpu08: task 4: Terminated", after "srun: Terminating
    # StepId=..." once one task failed: src/srun/srun_job.c / step_launch.c, --kill-on-bad-exit)
    _Rule(re.compile(r"srun: error: ([\w.-]+): tasks? (\d+(?:[-,]\d+)*)(?![\d,-]*: Terminated\s*$)"), "node+rank"),
    # Open MPI: "mpirun noticed that process rank 3 with PID 41234 on node gpu07 exited on signal 9
    # (Killed)." / "mpirun has exited due to process rank 3 with PID 0 on node gpu07 exiting improperly";
    # MPICH / Intel MPI's "BAD TERMINATION" box: "=   RANK 3 PID 1234 RUNNING AT gpu07"
    _Rule(re.compile(r"process rank (\d+) with PID \d+ on node ([\w.-]+)"), "rank+node", "process rank "),
    _Rule(re.compile(r"\bRANK (\d+) PID \d+ RUNNING AT ([\w.-]+)"), "rank+node", "RUNNING AT"),
    # the process that called MPI_Abort on the world communicator: Open MPI's help text "MPI_ABORT was invoked on
    # rank 3 in communicator MPI_COMM_WORLD" (help-mpi-api.txt, [mpi-abort]), MPICH's "application called
    # MPI_Abort(MPI_COMM_WORLD, 1) - process 3" (src/mpi/init/abort.c; another communicator's rank is not global)
    _Rule(re.compile(r"MPI_ABORT was invoked on rank (\d+) in communicator MPI_COMM_WORLD"), "rank"),
    _Rule(re.compile(r"called MPI_Abort\(MPI_COMM_WORLD, -?\d+\) - process (\d+)"), "rank"),
    # MPICH / Intel MPI's abort of a process, "Abort(1094543) on node 3 (rank 3 in comm 0): Fatal error in PMPI_Init"
    # (its world rank after "on node"); Cray MPICH's "MPICH ERROR [Rank 3] [job id 12.0] [Fri Feb  9 07:12:51 2024]
    # [nid000009] - Abort(590863) (rank 3 in comm 0): ..." (the host in the last bracket)
    _Rule(re.compile(r"\bAbort\(-?\d+\) on node (\d+) \(rank \d+ in comm \d+\)"), "rank", "Abort("),
    _Rule(re.compile(r"MPICH ERROR \[Rank (\d+)\] \[job id [^\]]*\] \[[^\]]*\] (?:\[[^\]]*\] )?\[(?!unknown\])([\w.-]+)\] - "),
          "rank+node"),
    # horovodrun's Gloo launcher on a rank that failed (horovod/runner/gloo_run.py ``_exec_command``): "Process 3
    # exit with status code 1."
    _Rule(re.compile(r"^\s*Process (\d+) exit with status code -?\d+\.?\s*$"), "rank"),
    _Rule(re.compile(r"\*\*\* (?:JOB|STEP) [\d.]+ ON ([\w.-]+) CANCELLED"), "node"),
    _Rule(_PALS_FAILED, "node+rank"),
    # DeepSpeed's launcher when a process failed: "[launch.py:321:sigkill_handler] ['/usr/bin/python',
    # '-u', 'train.py', '--local_rank=N', ...] exits with return code = 1". The list is ``cmd``, the
    # variable its spawn loop left behind (deepspeed/launcher/launch.py ``sigkill_handler`` logs
    # f"{cmd} exits with return code = {last_return_code}"): the LAST process started, whichever
    # failed. It names the failed rank only when the node ran one process (local_rank 0); torch
    # elastic's "failed (exitcode: 1) local_rank: 0" is left to its Root Cause table
    _Rule(re.compile(r"'--local_rank=(0)'[^\]]*\] exits with return code"), "local", "exits with return code"),
    # NCCL's own lines: "gpu07:41234:41290 [3] NCCL WARN NET/IB : Got completion ..." (host:pid:tid [device];
    # src/debug.cc), also behind a launcher's prefix ("[rank3]:gpu07:...", srun's "3: gpu07:...")
    _Rule(re.compile(r"^(?:\s*\d{1,4}:\s*|\s*(?:\[[\w,]+\](?:<std(?:out|err)>)?:\s?)+)?\s*([A-Za-z][\w.-]*):\d+:\d+ \[\d+\] NCCL "),
          "node", " NCCL "),
    # Slurm naming a failed node: "srun: error: Node failure on gpu07", "Task launch for StepId=12.0
    # failed on node gpu07: ..."
    _Rule(re.compile(r"Node failure on ([\w.-]+)"), "node", "Node failure on "),
    # a parallel shell on a host whose command failed: pdsh (DeepSpeed's multi-node runner) "pdsh@gpu01: gpu07: ssh
    # exited with exit code 1" (its "%p: %S: %s exited with exit code %d" error, %p its own "pdsh@host", %S the
    # target), ClusterShell's "clush: gpu07: exited with exit code 1" (ClusterShell CLI, tests/CLIClushTest.py)
    _Rule(re.compile(r"^\s*(?:pdsh@[\w.-]+: ([\w.-]+): \w+|clush: ([\w.-]+):) exited with exit code -?\d+"), "shell_node"),
    # Open MPI's reports from inside a process, each line behind "[host:pid] " (HOSTFORMAT): its signal handler's
    # "[gpu07:41234] *** Process received signal ***", "[gpu07:41234] Signal: Segmentation fault (11)"
    # (opal/util/stacktrace.c), its fatal error handler's "[gpu07:41234] *** An error occurred in MPI_Bcast"
    _Rule(re.compile(r"\[([A-Za-z][\w.-]*):\d+\] \*\*\* "), "node", "] *** "),
    _Rule(re.compile(r"\[([A-Za-z][\w.-]*):\d+\] Signal(?: code)?: "), "node", "] Signal"),
    # Ray's raylet on a worker it lost: its memory monitor's "Memory on the node (IP: 10.0.0.7, ID: 90ef...) where
    # the task (...) was running was 32.62GB / 33.28GB" (ray.exceptions.OutOfMemoryError), and "A worker died or
    # was killed while executing a task by an unexpected system error. ... Worker IP address: 10.0.0.7, Worker
    # port: ..." (both from src/ray/raylet/node_manager.cc)
    _Rule(re.compile(r"Memory on the node \(IP: ([\w.:-]+)[,)]"), "node", "Memory on the node"),
    _Rule(re.compile(r"Worker IP address: ([\w.:-]+?),"), "node", "Worker IP address"),
    # ... its periodic report of the workers it lost on a node: "1 Workers (tasks / actors) killed due to memory
    # pressure (OOM), 0 Workers crashed due to other reasons at node (ID: 9a3f..., IP: 10.0.0.7) over the last time
    # period." (node_manager.cc); the raylet's own lines as the driver prints them, "(raylet, ip=10.0.0.7) ..."
    # (python/ray/_private/worker.py ``print_worker_logs``: f"({pid}, ip={ip})" with the component for the pid)
    _Rule(re.compile(r"at node \(ID: \w+, IP: ([\w.:-]+)\)"), "node"),
    _Rule(re.compile(r"^(?:\x1b\[[\d;]*m)?\(raylet, ip=([\d.]+)\)"), "node"),
    _Rule(re.compile(r"failed on node ([\w.-]+)"), "node", "failed on node "),
)
_TIMESTAMP = re.compile(r"(\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?|\b\d\d:\d\d:\d\d\.\d{3,})")


_ALL = (*_PREFIXES, *_MESSAGES)


#: A global ``[rankN]:`` tag behind the prefixes a launcher stacks before it: srun's ``--label``
#: task (``9: [default3]:[rank39]:``), pdsh's host (``192.168.5.2: [rank20]:``, ``localhost:
#: [rank0]:``), torchrun's local ``[defaultN]:`` and a doubled tag (``[rank7]:[rank7]:``).
_STACKED = re.compile(r"^\s*(?:\d{1,4}:\s+|(?P<host>localhost|[A-Za-z][\w.-]*\d[\w.-]*|(?:\d{1,3}\.){3}\d{1,3}):\s+)?"
                      r"(?:\[default\d+\]:\s*)?(?:\[rank(?P<rank>\d+)\]:\s?)+")
#: Characters at the start of a line a stacked prefix takes at most.
_STACK_SPAN = 80


def _stacked(line: str) -> re.Match[str] | None:
    """The match of a stacked prefix ending in a global ``[rankN]:`` tag, if the line has one."""
    if "[rank" not in line[:_STACK_SPAN]:
        return None
    return _STACKED.match(line)


_RANK_PREFIXES = tuple(rule.rx for rule in _PREFIXES if rule.kind == "rank")
#: srun's ``--label`` task before torchrun's ``[defaultN]:`` (``9: [default3]: ...``): srun started one
#: torchrun agent per node (task 9 is a node), whose tail prefix names the worker's local rank
#: (``[{role}{local_rank}]:``); the global rank is not on the line.
_AGENT_TASK = re.compile(r"^\s*\d{1,4}:\s*\[default\d+\]:")


@functools.lru_cache(maxsize=8192)
def origin_of(line: str) -> Origin:
    """The rank and host a raw log line names (prefix first, then the message). Cached: the
    reader asks again for the same lines (each candidate against the first failing rank), and the
    answer is an immutable :class:`Origin` that depends on the line alone."""
    named, agent = _prefix_named(line)
    for rx, kind, need in _ALL:
        if agent and rx in _RANK_PREFIXES:
            continue  # srun's task is a node's torchrun agent, [defaultN] its local rank: no global rank
        if need is not None and need not in line:
            continue  # a literal every match holds is absent: the search cannot match
        m = rx.search(line)
        if m is not None:
            named.take(kind, m)
    return named.origin()


@dataclasses.dataclass
class _Named:
    """What a line's prefixes and message name, gathered by :func:`origin_of` (the first
    rank and node found stay)."""

    rank: int | None = None
    node: str | None = None
    proc: str | None = None
    local: int | None = None  # a local rank
    group: bool = False  # a subgroup's line: its rank is not the global one
    failed: int | None = None  # the rank a report of another rank's failure names

    def take(self, kind: str, m: re.Match[str]) -> None:
        """Keep what the match of a pattern of ``kind`` (:class:`_Rule`) names."""
        if kind == "rank" and self.rank is None:
            self.rank = int(m.group(1))
        elif kind == "group":
            self.group = self.rank is None  # a subgroup's ProcessGroupNCCL line
        elif kind == "group_rank" and self.rank is None and not self.group:
            self.rank = int(m.group(1))
        elif kind == "node" and self.node is None and not _is_level(m.group(1)):
            self.node = m.group(1)
        elif kind == "shell_node" and self.node is None:
            self.node = m.group(1) or m.group(2)
        elif kind == "node+rank":  # srun's task, not a range of them ("tasks 0-3": every one failed)
            self.node = self.node or m.group(1)
            self.rank = self.rank if self.rank is not None or not m.group(2).isdigit() else int(m.group(2))
        elif kind == "rank+node":
            self.rank = self.rank if self.rank is not None else int(m.group(1))
            self.node = self.node or m.group(2)
        elif kind == "proc+node" and self.node is None:
            self.proc, self.node = m.group(1), m.group(2)
        elif kind == "local":
            self.local = int(m.group(1))
        elif kind == "failed_rank":
            self.failed = int(m.group(1))

    def origin(self) -> Origin:
        """The line's origin: its rank (a lone node's local rank is the global one), or the
        failed rank it reports (with the host only when it is that rank's)."""
        rank = self.rank
        if self.local is not None and rank is None and self.node is None:
            rank = self.local
        if self.failed is not None:  # a report of another rank's failure (its host is not the printer's)
            return Origin(self.failed, self.node if rank in (None, self.failed) else None, self.proc)
        return Origin(rank, self.node, self.proc)


def _prefix_named(line: str) -> tuple[_Named, bool]:
    """What a stacked prefix ending in a global ``[rankN]:`` tag names (its rank and host), and
    whether the line is instead a node's torchrun agent under srun (:data:`_AGENT_TASK`)."""
    if (m := _stacked(line)) is not None:  # the global rank, not srun's task nor the local rank
        host = m.group("host")
        return _Named(rank=int(m.group("rank")), node=host if host and host != "localhost" else None), False
    agent = line[:1] in " 0123456789" and "[default" in line[:_STACK_SPAN] and _AGENT_TASK.match(line) is not None
    return _Named(), agent




#: srun's ``--label`` task prefix (``1: ``, ``12: [rank7]: ...``) and its exit line for one task,
#: ``srun: error: gpu07: task 1: Exited with exit code 1`` (not a range, ``tasks 0-3``).
_SRUN_TASK = re.compile(r"^\s*(\d{1,4}):\s")
_TASK_EXIT = re.compile(r"srun: error: ([\w.-]+): task (\d+):")


def srun_task(line: str) -> int | None:
    """The srun ``--label`` task a line is prefixed with, if any."""
    m = _SRUN_TASK.match(line) if line[:1] in " 0123456789" else None
    return int(m.group(1)) if m else None


def task_host(lines: Sequence[str], keys: Sequence[int], task: int) -> str | None:
    """The host srun's exit line for ``task`` names among the lines at ``keys``."""
    for i in keys:
        m = _TASK_EXIT.search(lines[i]) if "srun: error" in lines[i] else None
        if m is not None and int(m.group(2)) == task:
            return m.group(1)
    return None


#: Ray's GCS when it gives a node up (``gcs_node_manager.cc``): "The node with node id: {id} and address: {ip} and
#: node name: {name} has been marked dead because the detector has missed too many heartbeats from it."
DEAD_RAY_NODE_KEY = "has been marked dead"
_DEAD_RAY_NODE = re.compile(r"node name: (\S+) has been marked dead")


def dead_ray_node(lines: Sequence[str], keys: Sequence[int]) -> str | None:
    """The node the first of Ray's node-death lines at ``keys`` (lines holding :data:`DEAD_RAY_NODE_KEY`) names."""
    for i in keys:
        m = _DEAD_RAY_NODE.search(lines[i])
        if m is not None:
            return m.group(1)
    return None


def prefix_rank(line: str) -> int | None:
    """The rank a launcher's prefix names (``[rank3]:``, ``3:``, ``[1,3]<stderr>:``; the global
    ``[rankN]:`` behind srun's task or pdsh's host), if any."""
    if (m := _stacked(line)) is not None:
        return int(m.group("rank"))
    if not line or line[0] not in "[ 0123456789":
        return None
    for rx in _RANK_PREFIXES:
        m = rx.search(line)
        if m:
            return int(m.group(1))
    return None


@remembered_text  # asked again about the same lines by several stages
def strip_prefix(line: str) -> str:
    """``line`` without its launcher's rank prefix (``[rank3]:``, ``3:``, ``[1,3]<stderr>:``, a
    stacked ``9: [default3]:[rank39]:``)."""
    if (m := _stacked(line)) is not None:
        return line[m.end():]
    if not line or line[0] not in "[ 0123456789":
        return line
    for rx in _RANK_PREFIXES:
        m = rx.search(line)
        if m:
            rest = line[m.end():]
            return rest[1:] if rest.startswith(" ") and not m.group(0)[-1].isspace() else rest
    return line


#: Ray's prefix of a worker's or its own processes' lines, with the colour codes it prints
#: (ray/_private/worker.py print_worker_logs: "(" + the actor's or task's name, "pid=" and the pid,
#: ", ip=" and the node's address when it is another node + ") "; "(raylet) " for its daemons):
#: "(RayTrainWorker pid=4242, ip=10.0.0.5) ", "(pid=123) " (the driver's own node),
#: "\x1b[36m(TaskRunner pid=625502)\x1b[0m ", "(raylet) ". Group 1 is the pid (None for a daemon).
#: The reader's one reading of Ray's prefix (lines, tracebacks and lineprefix use it too).
RAY_PREFIX = re.compile(
    r"^(?:\x1b\[[\d;]*m)?\((?:(?:[\w.-]+[ \t]+)?pid=(\d+)(?:,[ \t]*ip=[\d.]+)?|(?:raylet|gcs_server|autoscaler|monitor)\b[^)\n]*)\)"
    r"(?:\x1b\[[\d;]*m)?[ \t]?")
#: Characters at a line's start in which Ray's prefix is looked for ("pid=" in them first: a cheap test).
RAY_HEAD = 60
#: pdsh's host before a line (DeepSpeed's multi-node runner): ``gpu07: ``, ``10.0.0.7: ``, ``localhost: ``.
_HOST_TAG = re.compile(r"(?:localhost|[A-Za-z][\w.-]*\d[\w.-]*|(?:\d{1,3}\.){3}\d{1,3}): ")


def launcher_text(line: str) -> str:
    """``line`` without every prefix a launcher put before the process's own text: Ray's worker
    tag, pdsh's host, then the rank prefixes :func:`strip_prefix` removes (``gpu07:     loss =
    model(x)`` -> ``    loss = model(x)``)."""
    if "pid=" in line[:_STACK_SPAN + 60] and (m := RAY_PREFIX.match(line)) is not None:
        line = line[m.end():]
    rest = strip_prefix(line)
    if rest is line and line[:1].isalnum() and (m := _HOST_TAG.match(line)) is not None:
        rest = line[m.end():]
    return rest


def _is_level(word: str) -> bool:
    """Words a ``word:`` prefix takes that are not hosts (levels, loggers)."""
    return word.upper() in {"INFO", "WARNING", "ERROR", "DEBUG", "CRITICAL", "FATAL", "NOTE"}


def timestamp_of(line: str) -> str | None:
    """The line's timestamp as printed (comparable as text within one log), if any."""
    m = _TIMESTAMP.search(line[:80])
    return m.group(1).replace("T", " ").replace(",", ".") if m else None


_TABLE_RANK = re.compile(r"^\W*rank\s*:\s*(\d+)")
_TABLE_HOST = re.compile(r"^\W*host\s*:\s*([\w.-]+)")
_TABLE_EXIT = re.compile(r"^\W*exitcode\s*:\s*(-?\d+)")
#: The signal torchrun's agent sends the other workers once one has failed (``exitcode : -15``,
#: "Signal 15 (SIGTERM) received by PID ..."): a worker that ended by it was stopped, it did not fail.
_STOPPED_BY_AGENT = -15


def _table_entries(lines: Sequence[str]) -> list[tuple[int | None, str | None, int | None]]:
    """(rank, host, exitcode) of each ``[N]:`` entry of a torchrun failure table section."""
    out: list[tuple[int | None, str | None, int | None]] = []
    for ln in lines:
        if _ENTRY_HEAD.search(ln):
            out.append((None, None, None))
            continue
        body = _TABLE_LEAD_ANY.sub("", ln)
        rank, host, code = out[-1] if out else (None, None, None)
        if (m := _TABLE_RANK.match(body)) is not None:
            if rank is not None:  # no "[N]:" head between two entries
                out.append((None, None, None))
                host = code = None
            rank = int(m.group(1))
        elif host is None and (m := _TABLE_HOST.match(body)):
            host = m.group(1)
        elif code is None and (m := _TABLE_EXIT.match(body)):
            code = int(m.group(1))
        else:
            continue
        if not out:
            out.append((None, None, None))
        out[-1] = (rank, host, code)
    return out


#: An entry's head, ``[0]:``, alone on its line (behind a launcher's prefix, ``3: [0]:``).
_ENTRY_HEAD = re.compile(r"(?:^|[\s:])\[\d+\]:\s*$")
#: Whatever a launcher printed before a table field (``[default0]:``, srun's ``1: ``, pdsh's ``gpu07: ``).
_TABLE_LEAD_ANY = re.compile(r"^.*?(?<!\w)(?=(?:rank|host|exitcode)\s*:)")


#: The head of torchrun's root-cause entry: "Root Cause (first observed failure):" (torch >= 1.10, its
#: entries name the host), "Root Cause:" (torch 1.9, followed by "Other Failures:", no host field).
ROOT_CAUSE_HEADS = ("Root Cause (first observed failure)", "Root Cause:")


def root_cause_table(lines: Sequence[str], others: Sequence[str] = ()) -> Origin | None:
    """The rank and host of torchrun's ``Root Cause (first observed failure)`` table, if any.
    torchrun's table::

        Failures:                                  (the other failed workers, or <NO_OTHER_FAILURES>)
        [1]:
          time      : 2025-03-12_08:00:09
          host      : node-a3
          rank      : 5 (local_rank: 5)
          exitcode  : 1 (pid: 906)
        Root Cause (first observed failure):
        [0]:
          ...
          exitcode  : -15 (pid: 903)
          traceback : Signal 15 (SIGTERM) received by PID 903

    The root cause is the failure torch observed first; when it is a worker the agent stopped
    (``exitcode : -15``) and ``others`` (the ``Failures:`` section's lines) hold one that ended by
    itself (an exit code, or another signal such as the OOM killer's -9), that one failed. torch 1.9
    prints "Root Cause:" with ``rank: 5 (local_rank: 5)`` fields and no host."""
    at = next((i for i in range(len(lines) - 1, -1, -1) if any(h in lines[i] for h in ROOT_CAUSE_HEADS)), None)
    if at is None:
        return None
    entries = _table_entries(lines[at + 1: at + 12])
    rank, node, code = entries[0] if entries else (None, None, None)
    if code == _STOPPED_BY_AGENT:
        failed = [(r, h) for r, h, c in _table_entries(others) if c is not None and c != _STOPPED_BY_AGENT
                  and r is not None]
        if failed:
            rank, node = failed[0]
    return Origin(rank, node) if rank is not None or node is not None else None


def table_hosts(lines: Sequence[str]) -> dict[int, str]:
    """rank -> host of every entry of torchrun's failure tables (``Failures:`` and ``Root Cause``)
    in ``lines``."""
    out: dict[int, str] = {}
    rank: int | None = None
    host: str | None = None
    for ln in lines:
        if "rank" not in ln and "host" not in ln:
            continue
        body = _TABLE_LEAD.sub("", ln)
        if m := _TABLE_RANK.match(body):
            rank = int(m.group(1))
        elif m := _TABLE_HOST.match(body):
            host = m.group(1)
        else:
            continue
        if rank is not None and host is not None:
            out.setdefault(rank, host)
            rank = host = None
    return out


_TABLE_LEAD = re.compile(r"^.*?\]\s*:?\s*(?=\W*(?:rank|host)\s*:)")
#: Open MPI's name of a process: ``[[4370,1],11]`` (ORTE, Open MPI <= 4: ``[[jobid,vpid],rank]``) or
#: ``[prterun-gpu07-12345@1,11]`` (PRRTE, Open MPI 5: ``[nspace@job,rank]``, the nspace naming the launching
#: host, not the process's).
#: horovodrun's Gloo launcher names the rank bare, "The first process to do so was:\nProcess name: 3\nExit code: 1"
#: (horovod/runner/gloo_run.py ``launch_gloo``).
_MPI_FIRST = re.compile(r"Process name:\s*(?:\[(?:\[\d+,\d+\],|[\w.$-]+@\d+,)(\d+)\]|(\d+)\s*$)")
_MPI_BINDING = re.compile(r"\[([\w.-]+):\d+\] MCW rank (\d+) ")


def mpirun_first(lines: Sequence[str], keys: Sequence[int], bindings: Sequence[int]) -> Origin | None:
    """The rank Open MPI names as "the first process to do so" (``Process name: [[4370,1],11]``,
    Open MPI 5's ``[prterun-gpu07-12345@1,11]``, horovodrun's ``Process name: 11``)
    at one of the indexes ``keys`` (lines holding "Process name:"), and its host from the
    ``--report-bindings`` lines at ``bindings`` ("MCW rank"), if any."""
    rank = next((int(m.group(1) or m.group(2)) for i in keys if (m := _MPI_FIRST.search(lines[i].rstrip("\r")))), None)
    if rank is None:
        return None
    for i in bindings:
        m = _MPI_BINDING.search(lines[i])
        if m and int(m.group(2)) == rank:
            return Origin(rank, m.group(1))
    return Origin(rank)


#: PALS ``mpiexec``'s words for a rank that ended badly (:data:`_PALS_END`).
PALS_DIED = " died from signal "
PALS_EXITED = " exited with code "
#: Start-up lines that name the host each rank runs on: fairseq's "initialized host gpu07 as rank
#: 1", DeepSpeed's "WORLD INFO DICT: {'gpu07': [0, 1, 2, 3]}", LSF's report "Job was executed on host(s)
#: <4*gpu07>"; and lines every process prints with its host: NCCL's ``NCCL_DEBUG`` lines
#: ("gpu07:41234:41290 [3] NCCL INFO ..."), Open MPI's ``--report-bindings`` ("[gpu07:41234] MCW rank
#: 3 bound to ..."), Slurm's own variables printed by a job script ("SLURMD_NODENAME=gpu07",
#: "SLURM_JOB_NODELIST=gpu07"; a list such as "gpu[07-08]" names several); PALS ``mpiexec``'s report of the
#: ranks that ended badly ("x3102c0s25b0n0: rank 277 died from signal 6"), the host of the failed ones; and the
#: job's host as sites' and toolkits' banners print it (:data:`_BANNER_HOST`).
HOST_KEYS = ("initialized host ", "WORLD INFO DICT:", "Job was executed on host(s) ", " NCCL INFO ", " NCCL WARN ",
             "] MCW rank ", "SLURMD_NODENAME", "SLURM_JOB_NODELIST", "SLURM_NODELIST", ":ncpus=", PALS_DIED, PALS_EXITED,
             "TaskPrologue of job ", "# Running on ", "= Node list ", "I am process ", "-ecprofile] ")
#: Banners that name the one host a job ran on: NHR@FAU's Slurm prologue and epilogue ("### Starting
#: TaskPrologue of job 3254686 on a0429 at Sat Dec 27 ..." and its job report's "= Node list          : a0429";
#: NHR@FAU documentation, "Batch system Slurm": the output file starts with the TaskPrologue and ends with
#: the job's resource report), Kaldi's ``utils/parallel/queue.pl`` and ``slurm.pl`` log header ("echo '#'
#: Running on `hostname`": "# Running on gpu07"), and the audio models of yuangongnd's AST family (AST, SSAST, PSLA,
#: CAV-MAE: ``src/run.py`` prints ``"I am process %s, running on %s: starting (%s)" % (os.getpid(), os.uname()[1],
#: time.asctime())``, the process's own host). A node list ("a[0429-0430]", "gpu07,gpu08") names several
#: hosts and matches none of them. A job script's own echo of the node list (NTNU IDUN's template "The job
#: was run on these nodes:") is the user's wording, not the site's (review 40 item 6). ECMWF's job profile, which its
#: batch system runs at every job's start on the job's (first) host and whose banner heads the job's output after the
#: submission filter's lines ("[ECMWF-INFO -ecprofile] /usr/bin/bash NON_INTERACTIVE on ac6-306 at 20251215_192224.591,
#: PID: 26561, JOBID: 39501466").
_BANNER_HOST = re.compile(r"^(?:### Starting TaskPrologue of job \d+ on ([A-Za-z][\w.-]*) at |# Running on ([A-Za-z][\w-]*\d[\w.-]*)\s*$"
                          r"|= Node list\s*: ([A-Za-z][\w.-]*)\s*$"
                          r"|\[ECMWF-INFO -ecprofile\] \S+ (?:NON_)?INTERACTIVE on ([A-Za-z][\w.-]*) at \d"
                          r"|I am process \d+, running on ([A-Za-z][\w.-]*): starting \()")
#: PBS Pro's ``exec_vnode`` chunks, as ``qstat -f`` and job epilogues print them: ``(x1000c3s5b0n0:ngpus=2:
#: ncpus=32:mem=230686720kb)+(x1000c3s6b0n0:ncpus=32)`` (one parenthesised ``vnode:resource=value...``
#: chunk per host; a ``#PBS -l select=1:ncpus=32`` request names none).
_PBS_VNODE = re.compile(r"\(([A-Za-z][\w.-]*)(?::\w+=[^:)\s]+)*:ncpus=")
_FAIRSEQ_HOST = re.compile(r"initialized host (\S+) as rank \d+")
#: LSF's job report: "Job was executed on host(s) <4*gpu-n12>, in queue <gpu>, ..." (one ``<slots*host>``
#: per host; further hosts on the lines below, each ``<8*gpu-n13>``).
_LSF_HOST = re.compile(r"<(?:\d+\*)?([\w.-]+)>")
_WORLD_HOSTS = re.compile(r"'([\w.-]+)':\s*\[")
_NCCL_HOST = re.compile(r"^\s*([A-Za-z][\w.-]*):\d+:\d+ \[\d+\] NCCL (?:INFO|WARN) ")
_SLURM_HOST = re.compile(r"\bSLURM(?:D_NODENAME|_JOB_NODELIST|_NODELIST)\s*[=:]\s*([A-Za-z][\w.-]*)\s*$")


def announced_host(lines: Sequence[str], keys: Sequence[int]) -> str | None:
    """The one host the lines at the indexes ``keys`` (lines holding one of ``HOST_KEYS``) name
    for every rank; None when they name several, or only ``localhost``."""
    hosts: set[str] = set()
    for i in keys:
        ln = lines[i]
        if "initialized host " in ln:
            hosts.update(_FAIRSEQ_HOST.findall(ln))
        elif "WORLD INFO DICT:" in ln:
            hosts.update(_WORLD_HOSTS.findall(ln.split("WORLD INFO DICT:", 1)[1]))
        elif "Job was executed on host(s) " in ln:
            hosts.update(_LSF_HOST.findall(ln.split("Job was executed on host(s) ", 1)[1].split(", in queue", 1)[0]))
            more = lines[i + 1].strip() if i + 1 < len(lines) else ""
            hosts.update(_LSF_HOST.findall(more) if more.startswith("<") else ())
        else:
            hosts.update(_other_host(ln))
        if len(hosts - {"localhost"}) > 1:
            return None
    hosts.discard("localhost")
    return next(iter(hosts)) if len(hosts) == 1 else None


def _other_host(line: str) -> tuple[str, ...]:
    """The host(s) an NCCL, Open MPI binding, Slurm variable or PBS ``exec_vnode`` line names (behind a
    launcher's prefix) or a PALS report of a rank's end names (its host is that prefix)."""
    if (pals := _PALS_END.match(line)) is not None:
        return (pals.group(1),)
    if (banner := _BANNER_HOST.match(line.rstrip("\r"))) is not None:
        return tuple(h for h in banner.groups() if h)
    text = launcher_text(line)
    if " NCCL " in text:
        m = _NCCL_HOST.match(text)
    elif "MCW rank " in text:
        m = _MPI_BINDING.search(text)
    elif "SLURM" in text:
        m = _SLURM_HOST.search(text.rstrip("\r"))  # not a list ("gpu[07-08]", "gpu07,gpu08")
    elif ":ncpus=" in text:
        return tuple(_PBS_VNODE.findall(text))
    else:
        m = None
    return (m.group(1),) if m is not None else ()


#: Start-up lines that name the process's own rank. Printed by every rank (one rank named in the
#: whole log: the log holds one process's output, a per-rank file or the only process): the Hugging
#: Face example scripts' "Process rank: 3, device: cuda:3, n_gpu: 1, distributed training: True"
#: (``logger.warning`` on each process; the local rank, -1 when not distributed), DETR's
#: ``init_distributed_mode`` "| distributed init (rank 3): env://" (DeiT, MAE, BLIP, DINO ... print it
#: before silencing the other ranks), fairseq's "distributed init (rank 3): tcp://...", timm's
#: "Training in distributed mode with multiple processes, 1 device per process.Process 3, total 8,
#: device cuda:3.". Printed to the console by rank 0 only in a shared log (so one named rank 0 of
#: several says nothing, a non-zero one is a per-rank file): Lightning's "Initializing distributed:
#: GLOBAL_RANK: 3, MEMBER: 4/8", detectron2's "Rank of current process: 3. World size: 8",
#: accelerate's state ("Process index: 3"; ``logger.info(accelerator.state)`` is main-process only
#: unless ``main_process_only=False``). And torch elastic's agent naming the workers it runs, in its
#: "[default] Rendezvous complete for workers. Result:" block (``SimpleElasticAgent._rendezvous`` in
#: ``torch/distributed/elastic/agent/server/api.py``): "  global_ranks=[3]" is an agent of one worker, rank 3;
#: "  global_ranks=[0, 1, 2, 3]" names several.
#: Also torch's own ``[rankN]:`` tag before a line (the excepthook ``torch/distributed/distributed_c10d.py`` installs,
#: ``_distributed_excepthook``: each line of an uncaught exception's report behind f"[rank{get_rank()}]: "; c10d's
#: C++ log lines, "[rank3]:[W108 10:00:00.000 ProcessGroupNCCL.cpp:1234] ..."): every process tags its own lines so,
#: and a log whose tags name one rank holds that rank's output only (a per-rank file, one rank's wandb output.log,
#: torchrun's ``--local-ranks-filter``). And PALS ``mpiexec``'s report of a rank that ended badly (:data:`_PALS_END`).
RANK_KEYS = ("Process rank: ", "distributed init (rank ", "Process index: ", "device per process", "GLOBAL_RANK: ",
             "Rank of current process: ", "global_ranks=[", "[rank", PALS_DIED, PALS_EXITED)
_STARTUP_KEYS = RANK_KEYS[:7]
#: (each line of the block behind torch's glog-style prefix where torch logs so: "I0408 09:37:01.747000 1634029
#: .../elastic/agent/server/api.py:525]   global_ranks=[0, 1]").
_AGENT_RANKS = re.compile(r"(?:^\s*|\.py:\d+\]\s+)global_ranks=\[([\d, ]*)\]\s*$")
_EVERY_RANK = re.compile(r"Process rank: (\d+)\b|[Dd]istributed init \(rank (\d+)\)|device per process\.\s*Process (\d+), total \d+")
_RANK_ZERO_CONSOLE = re.compile(r"GLOBAL_RANK: (\d+), MEMBER: \d+/(\d+)|Rank of current process: (\d+)\. World size: (\d+)"
                                r"|^\s*Process index: (\d+)\s*$")


def announced_rank(lines: Sequence[str], keys: Sequence[int]) -> int | None:
    """The one rank the lines at the indexes ``keys`` (lines holding one of ``RANK_KEYS``) name for the log's
    process (:data:`RANK_KEYS`): the first that PALS ``mpiexec`` reports failed, else the one rank the start-up
    lines and torch's ``[rankN]:`` tags name; None when they name several or none, or only a rank 0 of several by a
    format that only rank 0 prints to a shared console."""
    pals = (m for i in keys if PALS_EXITED in lines[i] or PALS_DIED in lines[i]
            if (m := _PALS_FAILED.match(lines[i].rstrip("\r"))) is not None)
    if (failed := next(pals, None)) is not None:
        return int(failed.group(2))
    every: set[int] = set()
    zero_console: set[tuple[int, int]] = set()
    for i in keys:
        if (tag := _stacked(lines[i])) is not None:
            every.add(int(tag.group("rank")))
        if len(every) > 1:
            return None  # several processes' lines
        if not any(k in lines[i] for k in _STARTUP_KEYS):
            continue
        _startup_rank(launcher_text(lines[i]).rstrip("\r"), every, zero_console)
    named = every | {r for r, _ in zero_console}
    if len(named) != 1:
        return None
    rank = next(iter(named))
    if not every and rank == 0 and any(size > 1 for _, size in zero_console):
        return None  # rank 0's console line of a larger job: the other ranks print no such line there
    return rank


def _startup_rank(text: str, every: set[int], zero_console: set[tuple[int, int]]) -> None:
    """Add the rank a start-up line names: to ``every`` (a format every rank prints), or as (rank, world
    size) to ``zero_console`` (one only rank 0 prints to a shared console)."""
    if (m := _AGENT_RANKS.search(text)) is not None:
        every.update(int(r) for r in m.group(1).split(",") if r.strip())
    elif (m := _EVERY_RANK.search(text)) is not None:
        every.add(int(next(g for g in m.groups() if g is not None)))
    elif (m := _RANK_ZERO_CONSOLE.search(text)) is not None:
        rank, size = (m.group(1), m.group(2)) if m.group(1) is not None else (m.group(3), m.group(4)) \
            if m.group(3) is not None else (m.group(5), "2")  # accelerate's state: the size is on another line
        zero_console.add((int(rank), int(size)))
