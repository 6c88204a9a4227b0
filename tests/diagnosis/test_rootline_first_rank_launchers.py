"""First failing rank (origins.first_origin) when a launcher's own error, a plain error copied behind one rank's tag, or a node-only kill comes first (round 14, written by the rank helper; excerpts hand-written in the launchers' formats)."""

from __future__ import annotations

from gpulens.diagnosis.classifier import Classifier
from gpulens.diagnosis.logread import diagnose_text

_TIMEOUT = ("[rank{r}]:[E ProcessGroupNCCL.cpp:563] [Rank {r}] Watchdog caught collective operation timeout: "
            "WorkNCCL(SeqNum=12, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600042 milliseconds "
            "before timing out.")


def test_a_launchers_own_error_does_not_hide_the_first_rank_to_time_out(rules: Classifier) -> None:
    # mp.spawn's parent fails in its join once the workers time out; the first timeout names the rank
    log = ["epoch 4 loss 0.3", _TIMEOUT.format(r=2), _TIMEOUT.format(r=1), "Traceback (most recent call last):",
           '  File "/srv/run.py", line 20, in <module>', "    mp.spawn(main, nprocs=4)",
           '  File "/opt/venv/lib/python3.10/site-packages/torch/multiprocessing/spawn.py", line 185, in join',
           "    original_trace = pickle.load(fh)", "EOFError: Ran out of input",
           "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ", "Failures:", "  <NO_OTHER_FAILURES>",
           "Root Cause (first observed failure):", "[0]:", "  time      : 2024-06-22_04:48:01", "  host      : gpu07",
           "  rank      : 0 (local_rank: 0)", "  exitcode  : 1 (pid: 626408)"]
    assert diagnose_text("\n".join(log), rules).first_rank == 2


def test_a_plain_error_copied_behind_one_ranks_tag_is_that_ranks(rules: Classifier) -> None:
    body = ["Traceback (most recent call last):", '  File "/srv/train.py", line 9, in <module>', "    save()",
            "RuntimeError: [enforce fail at inline_container.cc:626] . unexpected pos {p} vs {q}"]
    plain = [ln.format(p=900, q=800) for ln in body]
    log = ["step 500", *plain, *(f"[rank{r}]: " + ln.format(p=30, q=20) for r in (2, 3) for ln in body),
           *("[rank0]: " + ln for ln in plain)]
    assert diagnose_text("\n".join(log), rules).first_rank == 0


def test_a_node_killed_by_slurm_takes_the_rank_of_its_task_report(rules: Classifier) -> None:
    log = ["0: step 10 loss 2.1", "slurmstepd-gpu-b04: error: Detected 1 oom-kill event(s) in StepId=77.0. Some of your "
           "processes may have been killed by the cgroup out-of-memory handler.", "srun: error: gpu-b04: task 5: Out Of Memory"]
    assert diagnose_text("\n".join(log), rules).first_rank == 5
