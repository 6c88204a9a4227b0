"""Run the user's program safely and watch it: limits, timeout, hang detection, no orphans.

The child runs in its own session and process group (``start_new_session``),
with ``RLIMIT_AS`` (CPU runs only: CUDA reserves huge address ranges),
``RLIMIT_FSIZE`` and ``RLIMIT_CORE=0``, a private ``TMPDIR``, and every process
it starts carries a tag in its environment. The watcher polls the child, the
start-up hook's marker files and (with psutil) the CPU time, RSS and I/O of the
whole process tree. It ends the run on: the requested steps (the hook exits),
the wall-clock timeout, the group using more memory than allowed, no progress
(no CPU, I/O, output or marker change) for ``hang_seconds``, or Ctrl-C. Whatever
ends the run, every process of the run (the group, the session, the tracked
descendants and any process carrying the tag) gets SIGTERM, then SIGKILL after a
grace period.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import json
import os
import resource
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

__all__ = ["RUN_TAG_ENV", "RunLimits", "RunOutcome", "kill_run", "run_process", "run_processes"]

#: Environment variable that tags every process of a dry run.
RUN_TAG_ENV = "GPULENS_VALIDATE_RUN"

_POLL = 0.05
_SAMPLE = 0.25


@dataclasses.dataclass
class RunLimits:
    timeout: float = 120.0
    memory_bytes: int | None = 8 * 1024**3  # whole tree RSS; also RLIMIT_AS per process if address_space
    address_space: bool = True
    file_size_bytes: int | None = 1024**3
    hang_seconds: float = 30.0
    kill_grace: float = 2.0
    output_tail_bytes: int = 2 * 1024**2


@dataclasses.dataclass
class RunOutcome:
    returncode: int | None
    seconds: float
    timed_out: bool = False
    hung: bool = False
    memory_exceeded: bool = False
    interrupted: bool = False
    stopped_by_hook: str | None = None  # 'steps' | 'nonfinite_loss'
    output: str = ""
    output_bytes: int = 0
    markers: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    peak_rss_bytes: int = 0
    cpu_seconds: float = 0.0
    idle_seconds: float = 0.0
    killed: int = 0  # processes the validator had to signal at the end
    leftover: list[int] = dataclasses.field(default_factory=list)  # still alive after SIGKILL


def _preexec(limits: RunLimits) -> Callable[[], None]:
    def apply() -> None:  # runs in the child between fork and exec
        def lower(which: int, value: int) -> None:
            soft, hard = resource.getrlimit(which)
            if hard != resource.RLIM_INFINITY:
                value = min(value, hard)
            resource.setrlimit(which, (value, hard))

        if limits.address_space and limits.memory_bytes:
            lower(resource.RLIMIT_AS, limits.memory_bytes)
        if limits.file_size_bytes:
            lower(resource.RLIMIT_FSIZE, limits.file_size_bytes)
        lower(resource.RLIMIT_CORE, 0)

    return apply


def run_processes(pid: int, tag: str, known: set[int] | None = None,
                  since: float | None = None) -> list[psutil.Process]:
    """Every live process of a run: its group/session, known descendants, the tagged ones.

    With ``since`` (the run's start, epoch seconds), processes created before it are not
    asked for their environment: they cannot be the run's, and reading another process's
    environment waits on its memory map (a large JVM tearing down can hold it for seconds)."""
    found: dict[int, psutil.Process] = {}
    me = os.getpid()
    for p in psutil.process_iter():
        if p.pid in (me, 0, 1):
            continue
        try:
            if os.getpgid(p.pid) == pid or os.getsid(p.pid) == pid:
                found[p.pid] = p
                continue
            if known and p.pid in known:
                found[p.pid] = p
                continue
            if since is not None and p.create_time() < since:
                continue
            if p.environ().get(RUN_TAG_ENV) == tag:
                found[p.pid] = p
        except (psutil.Error, OSError):
            continue
    return [p for p in found.values() if _alive(p)]


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _wait_gone(procs: list[psutil.Process], deadline: float) -> list[psutil.Process]:
    """Wait until every process is gone (zombies count as gone); return those still alive."""
    alive = [p for p in procs if _alive(p)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.02)
        alive = [p for p in alive if _alive(p)]
    return alive


def kill_run(
    proc: subprocess.Popen[bytes], tag: str, known: set[int], grace: float, since: float | None = None
) -> tuple[int, list[int]]:
    """SIGTERM every process of the run, SIGKILL what is left after ``grace`` s; reap the child.

    The direct child is waited for with ``Popen.wait`` (never through psutil, which
    would reap it and lose its exit status).
    """
    victims = _other_processes(proc, tag, known, since)
    child_alive = proc.poll() is None
    if child_alive:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except OSError:
            proc.terminate()
    for p in victims:
        with contextlib.suppress(psutil.Error):
            p.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace
    if child_alive:
        _wait_child(proc, grace)
    alive = _wait_gone(victims, deadline)
    # a process may have forked while we were signalling: look once more
    alive_ids = {p.pid for p in alive}
    alive += [p for p in _other_processes(proc, tag, known, since) if p.pid not in alive_ids]
    _kill_all(proc, alive)
    _wait_gone(alive, time.monotonic() + max(grace, 1.0))
    proc.wait()
    leftover = [p.pid for p in _other_processes(proc, tag, known, since)]
    return len(victims) + int(child_alive), leftover


def _other_processes(proc: subprocess.Popen[bytes], tag: str, known: set[int], since: float | None) -> list[psutil.Process]:
    """The run's live processes other than the direct child."""
    return [p for p in run_processes(proc.pid, tag, known, since) if p.pid != proc.pid]


def _wait_child(proc: subprocess.Popen[bytes], grace: float) -> None:
    """Wait ``grace`` s for the direct child to exit after SIGTERM, then SIGKILL and reap it."""
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _kill_all(proc: subprocess.Popen[bytes], alive: list[psutil.Process]) -> None:
    """SIGKILL the processes still alive and the child's process group."""
    for p in alive:
        with contextlib.suppress(psutil.Error):
            p.kill()
    with contextlib.suppress(OSError):
        os.killpg(proc.pid, signal.SIGKILL)


class _Tail:
    """Reads the child's merged stdout/stderr; keeps the last bytes; echoes live."""

    def __init__(self, fd: int, keep: int, echo: Callable[[bytes], None] | None) -> None:
        self.fd = fd
        self.keep = keep
        self.echo = echo
        self.chunks: collections.deque[bytes] = collections.deque()
        self.size = 0
        self.total = 0
        self.thread = threading.Thread(target=self._run, name="gpulens-validate-output", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while True:
            try:
                data = os.read(self.fd, 65536)
            except OSError:
                break
            if not data:
                break
            self.total += len(data)
            self.chunks.append(data)
            self.size += len(data)
            while self.size - len(self.chunks[0]) >= self.keep:
                self.size -= len(self.chunks.popleft())
            if self.echo is not None:
                try:
                    self.echo(data)
                except Exception:
                    self.echo = None

    def text(self) -> str:
        data = b"".join(self.chunks)
        if len(data) > self.keep:
            data = data[-self.keep :]
        return data.decode("utf-8", "replace")


def _read_markers(marker_dir: Path, cache: dict[str, tuple[float, dict[str, Any]]]) -> bool:
    """Refresh ``cache`` from the marker files; True when any changed."""
    changed = False
    try:
        names = [n for n in os.listdir(marker_dir) if n.endswith(".json")]
    except OSError:
        return False
    for name in names:
        path = marker_dir / name
        try:
            mtime = path.stat().st_mtime_ns
        except OSError:
            continue
        old = cache.get(name)
        if old is not None and old[0] == mtime:
            continue
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        cache[name] = (mtime, data)
        changed = True
    return changed


def _spawn(command: list[str], cwd: Path, env: dict[str, str], limits: RunLimits) -> tuple[subprocess.Popen[bytes], int]:
    """Start the child in its own session with its limits; return it and the read end of its output."""
    read_fd, write_fd = os.pipe()
    try:
        proc = subprocess.Popen(
            command,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=write_fd,
            stderr=write_fd,
            start_new_session=True,
            preexec_fn=_preexec(limits),
            close_fds=True,
        )
    except BaseException:
        os.close(read_fd)
        os.close(write_fd)
        raise
    os.close(write_fd)
    return proc, read_fd


def _created(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time() - 0.05
    except psutil.Error:
        return None


class _TreeWatch:
    """CPU time, RSS and I/O of the run's process tree; when it last made progress."""

    def __init__(self, pid: int, started: float) -> None:
        self.pid = pid
        self.known: set[int] = {pid}
        #: the run's start in epoch seconds (its child's creation, a clock tick early)
        self.since = _created(pid)
        self.tracked: dict[int, psutil.Process] = {}
        self.cpu_done = 0.0  # CPU time of tracked processes that have exited
        self.last_cpu: dict[int, float] = {}
        self.last_progress = started
        self.last_total_cpu = 0.0
        self.last_output = 0
        self.last_io = 0
        self.next_sample = started

    def _discover(self) -> None:
        try:
            root = psutil.Process(self.pid)
            current = [root, *root.children(recursive=True)]
        except psutil.Error:
            current = []
        for p in current:
            if p.pid not in self.tracked:
                self.tracked[p.pid] = p
                self.known.add(p.pid)

    def _measure(self) -> tuple[int, float, int, bool]:
        """(RSS, CPU seconds, I/O bytes, any process in disk-wait) over the tree."""
        rss = io = 0
        disk_wait = False
        for pid, p in list(self.tracked.items()):
            try:
                with p.oneshot():
                    t = p.cpu_times()
                    self.last_cpu[pid] = t.user + t.system + t.children_user + t.children_system
                    rss += p.memory_info().rss
                    disk_wait = disk_wait or p.status() == psutil.STATUS_DISK_SLEEP
                    try:
                        c = p.io_counters()
                        io += c.read_chars + c.write_chars
                    except (psutil.Error, AttributeError):
                        pass
            except psutil.Error:
                self.cpu_done += self.last_cpu.pop(pid, 0.0)
                del self.tracked[pid]
        return rss, self.cpu_done + sum(self.last_cpu.values()), io, disk_wait

    def sample(self, now: float, output_total: int, limits: RunLimits, outcome: RunOutcome) -> bool:
        """Sample the tree (every ``_SAMPLE`` s); True when a memory or hang limit ends the run."""
        if now < self.next_sample:
            return False
        self.next_sample = now + _SAMPLE
        self._discover()
        rss, cpu, io, disk_wait = self._measure()
        outcome.peak_rss_bytes = max(outcome.peak_rss_bytes, rss)
        outcome.cpu_seconds = cpu
        if cpu - self.last_total_cpu >= 0.05 or io != self.last_io or output_total != self.last_output or disk_wait:
            self.last_progress = now
            self.last_total_cpu = cpu
            self.last_io = io
            self.last_output = output_total
        if limits.memory_bytes and rss > limits.memory_bytes:
            outcome.memory_exceeded = True
            return True
        outcome.idle_seconds = now - self.last_progress
        if limits.hang_seconds > 0 and now - self.last_progress >= limits.hang_seconds:
            outcome.hung = True
            return True
        return False


def _stopped_by_hook(markers: dict[str, tuple[float, dict[str, Any]]]) -> str | None:
    stopped = [m for _, m in markers.values() if m.get("stopped")]
    return str(stopped[0]["stopped"]) if stopped else None


def _watch(
    proc: subprocess.Popen[bytes],
    tail: _Tail,
    limits: RunLimits,
    marker_dir: Path,
    markers: dict[str, tuple[float, dict[str, Any]]],
    tree: _TreeWatch,
    outcome: RunOutcome,
    clock: Callable[[], float],
    started: float,
) -> None:
    """Poll until the child exits or one of the run's ends is reached."""
    stop_seen_at: float | None = None
    while True:
        now = clock()
        rc = proc.poll()
        if _read_markers(marker_dir, markers):
            tree.last_progress = now
        if rc is not None:
            outcome.returncode = rc
            return
        stopped = _stopped_by_hook(markers)
        if stopped:
            outcome.stopped_by_hook = stopped
            if stop_seen_at is None:
                stop_seen_at = now
            elif now - stop_seen_at > 1.0:  # a worker stopped; its launcher lingers
                return
        if now - started > limits.timeout:
            outcome.timed_out = True
            return
        if tree.sample(now, tail.total, limits, outcome):
            return
        time.sleep(_POLL)


def _finish(
    proc: subprocess.Popen[bytes],
    tag: str,
    tree: _TreeWatch,
    tail: _Tail,
    read_fd: int,
    limits: RunLimits,
    marker_dir: Path,
    markers: dict[str, tuple[float, dict[str, Any]]],
    outcome: RunOutcome,
) -> None:
    """Kill what is left of the run, collect the output and the last markers."""
    outcome.killed, outcome.leftover = kill_run(proc, tag, tree.known, limits.kill_grace, tree.since)
    if outcome.returncode is None:
        outcome.returncode = proc.returncode
    tail.thread.join(timeout=2.0)
    if not tail.thread.is_alive():  # else a process we could not kill still holds the pipe
        os.close(read_fd)
    _read_markers(marker_dir, markers)
    outcome.markers = [m for _, m in markers.values()]
    if outcome.stopped_by_hook is None:
        outcome.stopped_by_hook = _stopped_by_hook(markers)
    outcome.output = tail.text()
    outcome.output_bytes = tail.total


def run_process(
    command: list[str],
    *,
    cwd: Path,
    env: dict[str, str],
    limits: RunLimits,
    marker_dir: Path,
    tag: str,
    echo: Callable[[bytes], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> RunOutcome:
    """Run ``command`` under ``limits`` until it exits or is stopped; always leave nothing behind."""
    env = {**env, RUN_TAG_ENV: tag}
    started = clock()
    proc, read_fd = _spawn(command, cwd, env, limits)
    tail = _Tail(read_fd, limits.output_tail_bytes, echo)
    outcome = RunOutcome(returncode=None, seconds=0.0)
    markers: dict[str, tuple[float, dict[str, Any]]] = {}
    tree = _TreeWatch(proc.pid, started)
    try:
        _watch(proc, tail, limits, marker_dir, markers, tree, outcome, clock, started)
    except KeyboardInterrupt:
        outcome.interrupted = True
        raise
    finally:
        _finish(proc, tag, tree, tail, read_fd, limits, marker_dir, markers, outcome)
        outcome.seconds = clock() - started
    return outcome
