"""Round 23: the process ``torch.multiprocessing.spawn`` reports (``-- Process N terminated with the
following error:``) names the first failing rank when no line of the root traceback carries a rank prefix
(torch/multiprocessing/spawn.py ``ProcessContext.join``)."""

from __future__ import annotations

from gpulens.diagnosis.logread.indicators.failing import spawn_report
from gpulens.diagnosis.logread.whole import diagnose_text

_SPAWNED = """\
Creating trainer on process 0 with world size 4
Creating trainer on process 2 with world size 4
Epoch 1: step 10 loss=2.3
Traceback (most recent call last):
  File "/home/u/proj/train.py", line 229, in main
    mp.spawn(worker_main, nprocs=world_size, args=(world_size,), join=True)
  File "/opt/env/lib/python3.10/site-packages/torch/multiprocessing/spawn.py", line 163, in join
    raise ProcessRaisedException(msg, error_index, failed_process.pid)
torch.multiprocessing.spawn.ProcessRaisedException:{sp}

-- Process {n} terminated with the following error:
Traceback (most recent call last):
  File "/opt/env/lib/python3.10/site-packages/torch/multiprocessing/spawn.py", line 74, in _wrap
    fn(i, *args)
  File "/home/u/proj/train.py", line 85, in worker_main
    trainer.train()
  File "/home/u/proj/trainers.py", line 370, in train
    metrics[k].extend(v)
TypeError: 'float' object is not iterable
"""


def test_the_spawned_process_that_raised_is_the_first_failing_rank() -> None:
    for n in (0, 3):
        w = diagnose_text(_SPAWNED.format(n=n, sp=" "))
        assert w.diagnosis.category != "none"
        assert w.first_rank == n


def test_spawn_report_reads_only_its_window() -> None:
    lines = _SPAWNED.format(n=5, sp=" ").splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.startswith("-- Process"))
    assert spawn_report(lines, 0, len(lines)) == 5
    assert spawn_report(lines, at + 1, len(lines)) is None
    assert spawn_report(["process 1 terminated with exit code 1"], 0, 1) is None  # ProcessExitedException: its own line


_MPIRUN = """\
[1,2]<stderr>:step 310 loss 2.1
[1,2]<stderr>:RuntimeError: DataLoader worker (pid 41006) is killed by signal: Killed.
--------------------------------------------------------------------------
mpirun noticed that process rank {a} with PID 0 on node {h1} exited on signal 9 (Killed).
--------------------------------------------------------------------------
mpirun noticed that process rank 3 with PID 0 on node {h2} exited on signal 9 (Killed).
"""


def test_the_one_host_open_mpi_reports_dead_processes_on_is_the_node() -> None:
    w = diagnose_text(_MPIRUN.format(a=1, h1="gaudi07", h2="gaudi07"))
    assert w.first_rank == 2 and w.first_node == "gaudi07"
    assert diagnose_text(_MPIRUN.format(a=1, h1="gaudi07", h2="gaudi08")).first_node is None  # several hosts: not known


def _table(host: str, rank: int, time: str) -> list[str]:
    return ["torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ", "=" * 60, "train.py FAILED",
            "-" * 60, "Failures:", "  <NO_OTHER_FAILURES>", "-" * 60, "Root Cause (first observed failure):", "[0]:",
            f"  time      : {time}", f"  host      : {host}", f"  rank      : {rank} (local_rank: 0)",
            "  exitcode  : 1 (pid: 51220)", "  error_file: <N/A>",
            "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html", "=" * 60]


def test_of_several_agents_root_cause_tables_the_earliest_time_then_the_first_printed() -> None:
    err = ["Traceback (most recent call last):", '  File "train.py", line 9, in <module>', "    import tiktoken",
           "ModuleNotFoundError: No module named 'tiktoken'"]
    tied = err + _table("nid07", 4, "2026-04-06_22:23:35") + _table("nid06", 0, "2026-04-06_22:23:35")
    w = diagnose_text("\n".join(tied))
    assert (w.first_rank, w.first_node) == (4, "nid07")
    later_first = err + _table("nid07", 4, "2026-04-06_22:23:39") + _table("nid06", 0, "2026-04-06_22:23:35")
    w = diagnose_text("\n".join(later_first))
    assert (w.first_rank, w.first_node) == (0, "nid06")
