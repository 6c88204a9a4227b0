"""The dry run's safety net, with small non-PyTorch programs (fast)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from gpulens.config import ValidateConfig
from gpulens.validator import JobSpec, validate

JOBS = Path(__file__).resolve().parent / "jobs"


def _alive(pids: list[int]) -> list[int]:
    out = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.NoSuchProcess:
            pass
    return out


def _session_members(sid: int) -> list[int]:
    out = []
    for p in psutil.process_iter():
        try:
            if os.getsid(p.pid) == sid and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p.pid)
        except (OSError, psutil.Error):
            pass
    return out


@pytest.mark.slow
@pytest.mark.parametrize("busy", [False, True])
def test_children_that_hang_leave_no_orphans(tmp_path: Path, busy: bool) -> None:
    cfg = ValidateConfig(backend="none", timeout=8.0 if busy else 60.0, hang_seconds=3.0, kill_grace_seconds=1.0)
    cmd = [sys.executable, str(JOBS / "spawn_hang.py"), "--pids", "pids.txt"] + (["--busy"] if busy else [])
    result = validate(JobSpec(cmd, workdir=tmp_path), cfg, None)
    pids = [int(x) for x in (tmp_path / "pids.txt").read_text().split()]
    assert len(pids) == 5  # launcher, 2 workers, 1 worker in its own session, 1 subprocess
    assert _alive(pids) == [], "orphans left behind"
    assert _session_members(pids[0]) == []
    assert result.orphans_killed >= 5
    if busy:  # still running and busy at the deadline: inconclusive
        assert result.verdict == "inconclusive" and result.timed_out
        assert result.reason is not None and "deadline" in result.reason
    else:  # nothing moved for hang_seconds: a hang, found before the deadline
        assert result.verdict == "fail" and result.hung and not result.timed_out


def test_exit_status_and_classification_of_a_plain_failure(tmp_path: Path) -> None:
    (tmp_path / "f.py").write_text("import os\nos.listdir('/definitely/not/here')\n")
    result = validate(JobSpec([sys.executable, "f.py"], workdir=tmp_path), ValidateConfig(backend="none"), None)
    assert result.verdict == "fail" and result.exit_code == 1
    assert result.category != "unknown" and result.origin in ("user", "data")
    assert any("/definitely/not/here" in line for line in result.evidence)


def test_non_python_program_succeeding_passes(tmp_path: Path) -> None:
    result = validate(JobSpec(["sh", "-c", "echo hello"], workdir=tmp_path), ValidateConfig(backend="none"), None)
    assert result.verdict == "pass" and result.steps_completed == 0
    assert "before any training step" in (result.reason or "")
    assert any("imports were not checked" in w for w in result.warnings)


def test_memory_watchdog_and_address_space_limit(tmp_path: Path) -> None:
    (tmp_path / "hog.py").write_text("x = []\nwhile True:\n    x.append(bytearray(50 * 1024 * 1024))\n")
    cfg = ValidateConfig(backend="none", memory_limit_bytes=400 * 1024**2, timeout=60)
    result = validate(JobSpec([sys.executable, "hog.py"], workdir=tmp_path), cfg, None)
    assert (result.verdict, result.category) == ("fail", "cpu_oom")


def test_file_size_limit_and_private_tmpdir(tmp_path: Path) -> None:
    (tmp_path / "big.py").write_text(
        "import os, tempfile\n"
        "assert tempfile.gettempdir().startswith(os.environ['TMPDIR']) and 'gpulens-validate-' in os.environ['TMPDIR']\n"
        "open('big.bin', 'wb').write(b'x' * (4 * 1024 * 1024))\n"
    )
    cfg = ValidateConfig(backend="none", file_size_limit_bytes=1024 * 1024, timeout=60)
    result = validate(JobSpec([sys.executable, "big.py"], workdir=tmp_path), cfg, None)
    assert result.verdict == "inconclusive" and "file" in (result.reason or "")
    assert (tmp_path / "big.bin").stat().st_size <= 1024 * 1024


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def _signal_masks(pid: int) -> str:
    """The process's ignored/blocked/caught signal masks (/proc), for a failure message."""
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    return ", ".join(ln.replace("\t", " ") for ln in status if ln.startswith(("SigIgn", "SigBlk", "SigCgt")))


@pytest.mark.slow
def test_ctrl_c_kills_the_whole_group(tmp_path: Path) -> None:
    """SIGINT to `gpulens validate` (as Ctrl-C does) ends the dry run and its children."""
    env = dict(os.environ, GPULENS_DATA_DIR=str(tmp_path / "data"), GPULENS_VALIDATE_BACKEND="none")
    cmd = [sys.executable, "-m", "gpulens", "validate", "--no-record", "--hide-output", "--",
           sys.executable, str(JOBS / "spawn_hang.py"), "--pids", str(tmp_path / "pids.txt")]
    # as from a terminal: SIGINT neither ignored nor blocked in the command, whatever earlier
    # tests left in this worker's process (both survive fork and exec)
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=_default_sigint)
    deadline = time.monotonic() + 60
    pids: list[int] = []
    while time.monotonic() < deadline:
        if (tmp_path / "pids.txt").exists():
            pids = [int(x) for x in (tmp_path / "pids.txt").read_text().split()]
            if len(pids) == 5:
                break
        time.sleep(0.1)
    assert len(pids) == 5, proc.communicate(timeout=30)
    masks = _signal_masks(proc.pid)
    proc.send_signal(signal.SIGINT)
    try:
        out, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"gpulens validate did not end within 30 s of SIGINT ({masks}); stderr: {err[-2000:]!r}")
    assert proc.returncode == 130, err
    assert _alive(pids) == []


def test_processes_older_than_the_run_are_not_asked_for_their_environment(tmp_path: Path) -> None:
    """A tagged process started before the run is not the run's (its environment is not read:
    that read can wait on another process's memory map); one started after it is."""
    from gpulens.validator.runner import RUN_TAG_ENV, run_processes

    env = dict(os.environ, **{RUN_TAG_ENV: "run-xyz"})
    sleep = [sys.executable, "-c", "import time; time.sleep(60)"]
    old = subprocess.Popen(sleep, env=env)
    time.sleep(0.3)
    new = subprocess.Popen(sleep, env=env)
    since = psutil.Process(new.pid).create_time() - 0.05  # as the runner takes it: the same clock
    try:
        # Popen returns once the exec began; the kernel fills in the new environment a moment
        # later (an empty /proc/PID/environ meanwhile, seen on a loaded machine): the runner
        # polls, so a process is found at its next look, not necessarily at the first one
        for p in (old, new):
            deadline = time.monotonic() + 10
            while not psutil.Process(p.pid).environ() and time.monotonic() < deadline:
                time.sleep(0.01)
        assert {p.pid for p in run_processes(-1, "run-xyz")} >= {old.pid, new.pid}
        found = {p.pid for p in run_processes(-1, "run-xyz", since=since)}
        assert new.pid in found and old.pid not in found
    finally:
        for p in (old, new):
            p.kill()
            p.wait()
