"""Where a process was launched: a child that multiprocessing's spawn start method ran (its bootstrap
frames), and torchrun's logged banner before any of its workers ran."""

from __future__ import annotations

import re
from collections.abc import Sequence

from gpulens.diagnosis import logs
from gpulens.diagnosis.logread.ranks import strip_prefix

__all__ = ["TORCHRUN_BANNER", "launch_banner", "spawned_child"]


#: The outermost frames of a child process that multiprocessing's "spawn"/"forkserver" start
#: method runs (CPython Lib/multiprocessing/spawn.py get_command_line: ``python -c 'from
#: multiprocessing.spawn import spawn_main; spawn_main(...)'``): ``File "<string>", line 1, in
#: <module>`` then ``.../multiprocessing/spawn.py", line N, in spawn_main``.
_SPAWN_MAIN = "multiprocessing/spawn.py"
#: Lines below a traceback's header searched for that frame.
_SPAWN_REACH = 4


def spawned_child(lines: Sequence[str], head: int, exc: int) -> bool:
    """Whether the traceback headed at ``head`` (ending at ``exc``) is a spawned child's that died
    in its bootstrap (``spawn_main``): only that helper ended (a DataLoader worker, a pool's or
    a launcher's child); whether its parent went on the parent's own lines tell."""
    frames = [strip_prefix(logs.normalize_line(ln)).strip() for ln in lines[head + 1:min(exc, head + _SPAWN_REACH)]]
    return bool(frames) and frames[0].startswith('File "<string>", line 1') \
        and any(_SPAWN_MAIN in f and f.endswith("in spawn_main") for f in frames[1:])


#: torchrun's banner (``torch/distributed/run.py`` ``config_from_args``: ``log.warning("\n*****...\nSetting
#: OMP_NUM_THREADS environment variable for each process to be %s in default, ...")``), logged to stderr before its
#: agent starts any worker: its logging header stands alone two lines above ("WARNING:torch.distributed.run:",
#: "WARNING:__main__:" under ``python -m``, torch 2's "W1125 03:18:11.655000 2637899 torch/distributed/run.py:803] ").
#: The older ``torch.distributed.launch`` printed the same text with ``print`` to a block-buffered stdout, which a
#: file receives at the launcher's exit, after its workers' lines: no start there.
TORCHRUN_BANNER = "Setting OMP_NUM_THREADS environment variable for each process"
_TORCHRUN_HEADER = re.compile(r"^(?:WARNING:[\w.]+:|W\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ \S*run\.py:\d+\])\s*$")


def launch_banner(lines: Sequence[str], at: int) -> bool:
    """Whether line ``at`` is torchrun's logged banner (:data:`TORCHRUN_BANNER` with its header two lines above):
    a launch's start, printed before any of its workers ran."""
    return TORCHRUN_BANNER in lines[at] and at >= 2 and _TORCHRUN_HEADER.search(lines[at - 2].rstrip()) is not None
