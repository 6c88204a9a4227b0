"""Map a process to the job it belongs to (Slurm, Kubernetes, or an environment key).

Order of evidence for a pid, first match wins:

1. ``slurm-cgroup``: ``/proc/<pid>/cgroup`` shows a Slurm job cgroup, either
   cgroup v1 ``.../slurm/uid_<U>/job_<J>/...`` or v2
   ``.../slurmstepd.scope/job_<J>/...`` (or ``job_<J>`` directly under
   ``system.slice``);
2. ``k8s``: the cgroup path names a pod, systemd form
   ``kubepods-burstable-pod<uid_with_underscores>.slice`` or cgroupfs form
   ``/kubepods/burstable/pod<uid>/...``; the job id is the pod UID;
3. ``slurm-env``: ``SLURM_JOB_ID`` in ``/proc/<pid>/environ``;
4. ``env``: the configurable key (default ``GPULENS_JOB_ID``) in the environment.

Otherwise the job is unknown (``None``, method ``none``). Reading another
user's environ needs root (or CAP_SYS_PTRACE); without it steps 3-4 just find nothing.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Iterable
from pathlib import Path

from gpulens.collectors.net import read_bytes

__all__ = ["Attribution", "JobResolver", "job_from_cgroup", "job_from_environ"]

_SLURM = re.compile(
    r"(?:/slurm[^/]*/uid_\d+|slurmstepd\.scope|/system\.slice)/job_(\d+)(?:/|$)"
)
_POD = re.compile(
    r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})(?:\.slice)?(?:/|$)"
)


@dataclasses.dataclass(frozen=True)
class Attribution:
    job_id: str | None
    method: str  # slurm-cgroup | k8s | slurm-env | env | none


NONE = Attribution(None, "none")


def job_from_cgroup(text: str) -> Attribution | None:
    """Job from the contents of a ``/proc/<pid>/cgroup`` file, or None."""
    pod: str | None = None
    for line in text.splitlines():
        path = line.split(":", 2)[-1]
        m = _SLURM.search(path)
        if m:
            return Attribution(m.group(1), "slurm-cgroup")
        if pod is None:
            p = _POD.search(path)
            if p and "kubepods" in path:
                pod = p.group(1).replace("_", "-")
    return Attribution(pod, "k8s") if pod else None


def job_from_environ(data: bytes, env_key: str) -> Attribution | None:
    """Job from the NUL-separated contents of ``/proc/<pid>/environ``, or None."""
    found: dict[bytes, str] = {}
    slurm, own = b"SLURM_JOB_ID=", env_key.encode() + b"="
    for item in data.split(b"\0"):
        if item.startswith(slurm):
            found[slurm] = item[len(slurm):].decode(errors="replace")
        elif item.startswith(own):
            found[own] = item[len(own):].decode(errors="replace")
    if found.get(slurm):
        return Attribution(found[slurm], "slurm-env")
    if found.get(own):
        return Attribution(found[own], "env")
    return None


class JobResolver:
    """Resolves pids under ``proc_root``; remembers answers while the pid stays on a GPU."""

    def __init__(self, proc_root: str | os.PathLike[str] = "/proc", *, env_key: str = "GPULENS_JOB_ID") -> None:
        self.proc_root = Path(proc_root)
        self.env_key = env_key
        self._root = str(self.proc_root)
        self._cache: dict[int, Attribution] = {}

    def resolve(self, pid: int) -> Attribution:
        cached = self._cache.get(pid)
        if cached is not None:
            return cached
        att = self._resolve(pid)
        self._cache[pid] = att
        return att

    def _resolve(self, pid: int) -> Attribution:
        base = f"{self._root}/{pid}"
        cgroup = read_bytes(f"{base}/cgroup")
        if cgroup is not None:
            att = job_from_cgroup(cgroup.decode("utf-8", errors="replace"))
            if att is not None:
                return att
        environ = read_bytes(f"{base}/environ")
        if environ is not None:
            att = job_from_environ(environ, self.env_key)
            if att is not None:
                return att
        return NONE

    def resolve_many(self, pids: Iterable[int]) -> dict[int, Attribution]:
        """Resolve every pid and forget cached pids that are no longer running on a GPU."""
        wanted = set(pids)
        for gone in [p for p in self._cache if p not in wanted]:
            del self._cache[gone]
        return {pid: self.resolve(pid) for pid in wanted}

    def clear(self) -> None:
        self._cache.clear()
