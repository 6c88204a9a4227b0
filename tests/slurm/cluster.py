"""A real single-node Slurm cluster for the tests (Debian's slurmctld, slurmd, munge).

Everything lives under one temporary directory: munged with its own key and socket,
slurmctld and slurmd in the foreground on free ports, state/spool/log directories, and
slurm.conf with ``Epilog=`` a wrapper that runs ``gpulens slurm epilog`` with this Python
and the test's data directory. Runs as root (``SlurmUser=root``, ``proctrack/linuxproc``,
``task/none``). Two fake GPUs (``/dev/null``, ``/dev/zero`` as gres device files) let jobs
ask for ``--gres=gpu:N`` so that the epilog sees ``SLURM_JOB_GPUS``.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SLURM_TOOLS = ("slurmctld", "slurmd", "sbatch", "scontrol", "munged")
DONE_STATES = {"COMPLETED", "FAILED", "TIMEOUT", "CANCELLED", "OUT_OF_MEMORY", "NODE_FAIL", "BOOT_FAIL",
               "DEADLINE", "PREEMPTED"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def find(name: str) -> str | None:
    return shutil.which(name, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")


class SlurmCluster:
    def __init__(self, root: Path, *, epilog_timeout: float = 120.0, cli_filter: bool = True) -> None:
        self.root = root
        self.data_dir = root / "data"
        self.jobs = root / "jobs"
        self.conf = root / "etc" / "slurm.conf"
        self.node = socket.gethostname().split(".")[0]
        self.epilog_timeout = epilog_timeout
        self.cli_filter = cli_filter
        self.procs: list[subprocess.Popen[bytes]] = []
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}
        self.env.pop("SLURM_JOB_ID", None)

    # ------------------------------------------------------------ set-up
    def start(self) -> SlurmCluster:
        for d in ("etc", "munge", "state", "spool", "log", "jobs", "data"):
            (self.root / d).mkdir(parents=True, exist_ok=True)
        (self.root / "munge").chmod(0o700)
        self._start_munge()
        self._write_conf()
        self._spawn([find("slurmctld") or "slurmctld", "-D", "-i", "-f", str(self.conf)], "slurmctld")
        self._spawn([find("slurmd") or "slurmd", "-D", "-f", str(self.conf), "-N", self.node], "slurmd")
        self._wait_idle(60)
        return self

    def _start_munge(self) -> None:
        key = self.root / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        self.munge_socket = self.root / "munge" / "munge.sock"
        m = self.root / "munge"
        subprocess.run(
            [find("munged") or "munged", "-f", f"--key-file={key}", f"--socket={self.munge_socket}",
             f"--pid-file={m / 'munged.pid'}", f"--log-file={m / 'munged.log'}", f"--seed-file={m / 'seed'}"],
            check=True, capture_output=True, timeout=30)
        for _ in range(100):
            if self.munge_socket.exists():
                return
            time.sleep(0.05)
        raise RuntimeError(f"munged did not start: {(m / 'munged.log').read_text()[-2000:]}")

    def _write_conf(self) -> None:
        r = self.root
        epilog = r / "etc" / "epilog.sh"
        epilog.write_text(
            "#!/bin/sh\n"
            f"PYTHONPATH={REPO} {sys.executable} -m gpulens --data-dir {self.data_dir} "
            f"slurm epilog --timeout {self.epilog_timeout:g} 2>>{r / 'log' / 'epilog.stderr'}\n"
            "exit 0\n")
        epilog.chmod(0o755)
        (r / "etc" / "gres.conf").write_text(
            f"NodeName={self.node} Name=gpu File=/dev/null\nNodeName={self.node} Name=gpu File=/dev/zero\n")
        lines = [
            "ClusterName=gpulenstest",
            f"SlurmctldHost={self.node}(127.0.0.1)",
            f"SlurmctldPort={_free_port()}",
            f"SlurmdPort={_free_port()}",
            "AuthType=auth/munge", "CredType=cred/munge", f"AuthInfo=socket={self.munge_socket}",
            "SlurmUser=root", "SlurmdUser=root",
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
            f"StateSaveLocation={r / 'state'}", f"SlurmdSpoolDir={r / 'spool'}",
            f"SlurmctldPidFile={r / 'state' / 'slurmctld.pid'}", f"SlurmdPidFile={r / 'spool' / 'slurmd.pid'}",
            f"SlurmctldLogFile={r / 'log' / 'slurmctld.log'}", f"SlurmdLogFile={r / 'log' / 'slurmd.log'}",
            "SchedulerType=sched/backfill", "SchedulerParameters=bf_interval=1",
            "SelectType=select/cons_tres", "SelectTypeParameters=CR_CPU",
            "MpiDefault=none", "ReturnToService=2",
            "JobAcctGatherType=jobacct_gather/none", "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/none", "GresTypes=gpu",
            f"Epilog={epilog}",
            "KillWait=2", "OverTimeLimit=0", "MinJobAge=600", "InactiveLimit=0",
            "SlurmctldTimeout=30", "SlurmdTimeout=30", "MessageTimeout=20",
            # 4 CPUs on a 2-core machine (config_overrides): jobs and their epilogs overlap
            "SlurmdParameters=config_overrides",
            f"NodeName={self.node} NodeAddr=127.0.0.1 CPUs=4 Gres=gpu:2 State=UNKNOWN",
            f"PartitionName=debug Nodes={self.node} Default=YES MaxTime=INFINITE State=UP",
        ]
        if self.cli_filter:
            lines.append("CliFilterPlugins=cli_filter/lua")
            lua = subprocess.run(
                [sys.executable, "-m", "gpulens", "--data-dir", str(self.data_dir), "slurm", "cli-filter",
                 "--python", f"env PYTHONPATH={REPO} {sys.executable}"],
                capture_output=True, text=True, check=True, env={**self.env, "PYTHONPATH": str(REPO)})
            (r / "etc" / "cli_filter.lua").write_text(lua.stdout)
        self.conf.write_text("\n".join(lines) + "\n")

    def _spawn(self, cmd: list[str], name: str) -> None:
        out = open(self.root / "log" / f"{name}.console", "wb")  # lives as long as the daemon
        self.procs.append(subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=self.env,
                                           start_new_session=True))

    def _wait_idle(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        state = ""
        while time.monotonic() < deadline:
            for p in self.procs:
                if p.poll() is not None:
                    raise RuntimeError(f"{p.args[0]} exited: {self.tail_logs()}")
            res = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, env=self.env)
            state = res.stdout.strip()
            if state == "idle":
                return
            time.sleep(0.3)
        raise RuntimeError(f"the node did not become idle (state {state!r}): {self.tail_logs()}")

    def tail_logs(self) -> str:
        out = []
        for f in sorted((self.root / "log").iterdir()):
            with contextlib.suppress(OSError):
                out.append(f"--- {f.name}\n" + f.read_text(errors="replace")[-1500:])
        return "\n".join(out)

    def stop(self) -> None:
        subprocess.run(["scancel", "--full", "-u", "root"], env=self.env, capture_output=True, check=False)
        for p in reversed(self.procs):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
        for p in reversed(self.procs):
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=5)
        pid_file = self.root / "munge" / "munged.pid"
        with contextlib.suppress(OSError, ValueError):
            pid = int(pid_file.read_text().strip())
            os.kill(pid, signal.SIGTERM)
            for _ in range(100):
                os.kill(pid, 0)
                time.sleep(0.05)

    # ------------------------------------------------------------ jobs
    def sbatch(self, script: Path, *args: str, extra_env: dict[str, str] | None = None,
               cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["sbatch", "--parsable", *args, str(script)], capture_output=True, text=True,
                              env={**self.env, **(extra_env or {})}, cwd=cwd or self.jobs, timeout=120)

    def submit(self, script: Path, *args: str) -> str:
        res = self.sbatch(script, *args)
        if res.returncode != 0:
            raise RuntimeError(f"sbatch {script.name} failed: {res.stderr}")
        return res.stdout.strip().split(";")[0]

    def job(self, job_id: str) -> dict[str, str]:
        res = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True,
                             env=self.env, timeout=30)
        return dict(re.findall(r"(\w+)=(\S*)", res.stdout))

    def wait(self, job_ids: list[str], timeout: float) -> dict[str, str]:
        """Wait until every job has ended and its epilog has run (it leaves COMPLETING then)."""
        deadline = time.monotonic() + timeout
        states: dict[str, str] = {}
        while time.monotonic() < deadline:
            states = {j: self.job(j).get("JobState", "") for j in job_ids}
            if all(s in DONE_STATES for s in states.values()):
                return states
            time.sleep(0.5)
        raise RuntimeError(f"jobs did not finish: {states}\n{self.tail_logs()}")

    def gpulens(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "gpulens", "--data-dir", str(self.data_dir), *args],
                              capture_output=True, text=True, timeout=timeout,
                              env={**self.env, "PYTHONPATH": str(REPO)})
