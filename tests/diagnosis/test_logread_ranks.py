"""Which rank and host failed first in a whole log (issue 23, item 4), on excerpts written by hand in
the shapes launchers print."""

from __future__ import annotations

import pytest

from gpulens.diagnosis.classifier import Classifier
from gpulens.diagnosis.logread import diagnose_text
from gpulens.diagnosis.logread.ranks import Origin, origin_of, root_cause_table


def test_deepspeeds_exit_report_names_a_rank_only_for_a_one_process_node() -> None:
    # deepspeed/launcher/launch.py logs the command of the LAST process it started, whichever failed
    ds = ("[2024-03-01 10:01:03,120] [ERROR] [launch.py:321:sigkill_handler] ['/usr/bin/python3', '-u', 'train.py', "
          "'--local_rank={n}', '--deepspeed', 'ds_config.json'] exits with return code = 1")
    assert origin_of(ds.format(n=0)) == Origin(0)
    assert origin_of(ds.format(n=3)) == Origin()  # four processes: local_rank=3 whichever of them failed
    # behind pdsh's host prefix (a multi-node run) the local rank is not the global one
    assert origin_of("gpu02: " + ds.format(n=0)) == Origin(None, "gpu02")
    # a command line echoed at start-up names no failure
    assert origin_of("cmd = python -u train.py '--local_rank=0' --deepspeed ds_config.json") == Origin()


def _deepspeed_run(procs: int) -> list[str]:
    ranks = ", ".join(str(k) for k in range(procs))
    return [f"[2024-03-01 10:00:03,000] [INFO] [launch.py:145:main] WORLD INFO DICT: {{'localhost': [{ranks}]}}",
            *(f"step {k} loss 2.{k}" for k in range(5)),
            "Traceback (most recent call last):", '  File "train.py", line 88, in <module>', "    loss = engine(batch)",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB",
            "[2024-03-01 10:01:03,000] [INFO] [launch.py:315:sigkill_handler] Killing subprocess 4567",
            "[2024-03-01 10:01:03,000] [ERROR] [launch.py:321:sigkill_handler] ['/usr/bin/python', '-u', 'train.py', "
            f"'--local_rank={procs - 1}'] exits with return code = 1"]


def test_a_single_node_deepspeed_run_names_the_rank_only_when_it_had_one_process(rules: Classifier) -> None:
    one = diagnose_text("\n".join(_deepspeed_run(1)), rules)
    assert (one.first_rank, one.phase) == (0, "training")
    four = diagnose_text("\n".join(_deepspeed_run(4)), rules)
    assert (four.first_rank, four.phase) == (None, "training")  # the report names the last process started


_LSF = ["Sender: LSF System <lsfadmin@gpu-n12>", "Subject: Job 123456: <train> in cluster <c1> Exited", "",
        "Job <train> was submitted from host <login1> by user <u> in cluster <c1> at Thu Nov 26 10:00:00 2026",
        "Job was executed on host(s) <4*gpu-n12>, in queue <gpu>, as user <u> in cluster <c1> at Thu Nov 26 10:00:01 2026",
        "</home/u> was used as the home directory.", "Started at Thu Nov 26 10:00:01 2026", "",
        "Exited with exit code 1.", "", "The output (if any) follows:", "", "epoch 3 step 400 loss 0.1",
        "Traceback (most recent call last):", '  File "train.py", line 10, in <module>', "ValueError: bad shape"]


def test_lsf_names_the_host_a_one_host_job_ran_on(rules: Classifier) -> None:
    assert diagnose_text("\n".join(_LSF), rules).first_node == "gpu-n12"
    # two hosts (the second on the next line): which one failed is not said
    two = [*_LSF[:5], "                            <4*gpu-n13>", *_LSF[5:]]
    assert diagnose_text("\n".join(two), rules).first_node is None


def test_nccl_and_slurm_lines_that_name_a_node() -> None:
    # NCCL prints "host:pid:tid [device] NCCL ..." on its own lines
    warn = "gpu07:41234:41290 [3] NCCL WARN NET/IB : Got completion from peer 10.0.0.8<44101> with error 12, opcode 0"
    assert origin_of(warn) == Origin(None, "gpu07")
    assert origin_of("srun: error: Node failure on gpu12") == Origin(None, "gpu12")
    assert origin_of("srun: error: Task launch for StepId=12.0 failed on node gpu13: Communication connection failure") \
        == Origin(None, "gpu13")
    # a metric or a time with colons is not NCCL's prefix
    assert origin_of("step:41234:41290 [3] loss 0.1") == Origin()


def test_horovodrun_gloo_prefixes_name_the_rank(rules: Classifier) -> None:
    # horovodrun's Gloo launcher tags each line "[rank]<stdout>:", Open MPI's "[job,rank]<stdout>:"
    assert origin_of("[3]<stderr>:Traceback (most recent call last):") == Origin(3)
    assert origin_of("[1,3]<stderr>:Traceback (most recent call last):") == Origin(3)
    log = [*(f"[{r}]<stdout>:Epoch 1 step {k} loss 0.{k}" for k in range(5) for r in (0, 1)),
           "[1]<stderr>:Traceback (most recent call last):", '[1]<stderr>:  File "train.py", line 40, in <module>',
           "[1]<stderr>:    loss = model(x)", "[1]<stderr>:ValueError: Expected input batch_size (31) to match target batch_size (32).",
           "[0]<stderr>:horovod.common.exceptions.HorovodInternalError: Broadcast is not supported with Join at this time."]
    w = diagnose_text("\n".join(log), rules)
    assert (w.first_rank, w.phase) == (1, "training")


_FAILURES = ["Failures:", "[1]:", "  time      : 2025-07-01_10:12:44", "  host      : gpu-b12",
             "  rank      : 6 (local_rank: 2)", "  exitcode  : 1 (pid: 70431)", "  error_file: <N/A>",
             "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html",
             "[2]:", "  time      : 2025-07-01_10:12:44", "  host      : gpu-b12", "  rank      : 7 (local_rank: 3)",
             "  exitcode  : -15 (pid: 70432)", "  error_file: <N/A>",
             "  traceback : Signal 15 (SIGTERM) received by PID 70432",
             "------------------------------------------------------------"]
_ROOT = ["Root Cause (first observed failure):", "[0]:", "  time      : 2025-07-01_10:12:43", "  host      : gpu-b11",
         "  rank      : {rank} (local_rank: 1)", "  exitcode  : {code} (pid: 70122)", "  error_file: <N/A>",
         "  traceback : {why}", "============================================================"]


def test_a_root_cause_the_agent_stopped_gives_way_to_a_worker_that_failed() -> None:
    # torchrun's agent SIGTERMs the others once one fails; when the table's "first observed"
    # entry is such a stopped worker (exitcode -15), the worker of "Failures:" that exited by
    # itself is the one that failed
    stopped = [ln.format(rank=5, code=-15, why="Signal 15 (SIGTERM) received by PID 70122") for ln in _ROOT]
    assert root_cause_table(stopped, _FAILURES) == Origin(6, "gpu-b12")
    assert root_cause_table(stopped) == Origin(5, "gpu-b11")  # no other failure shown: the table's word
    # a root cause that failed by itself (an exit code, the OOM killer's -9) stays the root cause
    for code in (1, -9):
        failed = [ln.format(rank=5, code=code, why="<N/A>") for ln in _ROOT]
        assert root_cause_table(failed, _FAILURES) == Origin(5, "gpu-b11")
    # behind srun's --label prefix
    labelled = [f"1: {ln}" for ln in stopped]
    assert root_cause_table(labelled, [f"1: {ln}" for ln in _FAILURES]) == Origin(6, "gpu-b12")


def test_srun_task_before_torchrun_local_prefix_is_no_global_rank(rules: Classifier) -> None:
    # `srun --label torchrun --nproc_per_node=4 ...`: srun's task is a node's agent, [defaultN] the
    # local rank; the rank comes from torchrun's table, not from "1:" or "[default2]"
    assert origin_of("1: [default2]: Traceback (most recent call last):") == Origin()
    assert origin_of("1: [default2]:[rank6]: ValueError: bad") == Origin(6)
    assert origin_of("[default2]: ValueError: bad") == Origin(2)  # one torchrun alone: local is global
    steps = [f"{t}: [default{r}]: step 40 loss 2.{t}{r}" for t in (0, 1) for r in range(4)]
    err = ["1: [default2]: Traceback (most recent call last):",
           '1: [default2]:   File "/work/train.py", line 77, in <module>',
           "1: [default2]:     batch = next(it)",
           "1: [default2]: ValueError: cannot reshape array of size 3071 into shape (32,32,3)",
           "1: E0701 10:12:43.900000 7712 torch/distributed/elastic/multiprocessing/api.py:869] failed "
           "(exitcode: 1) local_rank: 2 (pid: 70431) of binary: /usr/bin/python3",
           "1: torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
           "1: Failures:", "1:   <NO_OTHER_FAILURES>",
           "1: Root Cause (first observed failure):", "1: [0]:", "1:   time      : 2025-07-01_10:12:43",
           "1:   host      : gpu-b12", "1:   rank      : 6 (local_rank: 2)", "1:   exitcode  : 1 (pid: 70431)",
           "srun: error: gpu-b12: task 1: Exited with exit code 1"]
    w = diagnose_text("\n".join(steps + err), rules)
    assert (w.first_rank, w.first_node) == (6, "gpu-b12")


def test_launcher_text_drops_every_launchers_prefix_and_nothing_else() -> None:
    from gpulens.diagnosis.logread.ranks import launcher_text

    code = "    loss = model(batch)"
    for prefix in ("gpu07: ", "10.0.0.7: ", "localhost: ", "[rank3]: ", "3: ", "[1,3]<stderr>: ", "[3]<stderr>: ",
                   "9: [default3]:[rank39]: ", "(RayTrainWorker pid=123, ip=10.0.0.7) ",
                   "\x1b[36m(TaskRunner pid=625502)\x1b[0m "):
        assert launcher_text(prefix + code) == code, prefix
    # a tqdm bar's description, a logger's level or a metric name is no launcher's prefix
    for line in ("Training:   3%|3         | 5/147 [00:02<01:03,  2.24it/s]", "INFO:  step 3", "loss:   0.25"):
        assert launcher_text(line) == line


def test_a_prefixed_code_line_is_no_progress_line_but_a_bar_is() -> None:
    from gpulens.diagnosis.logread.phase.failing_traceback import _prefixed_code

    assert _prefixed_code("gpu07:     loss = model(batch)")
    assert _prefixed_code("[rank1]:     step_loss = criterion(out, y)")
    assert not _prefixed_code("[rank1]: step 10 loss 0.3")
    assert not _prefixed_code("Training:   3%|3         | 5/147 [00:02<01:03,  2.24it/s]")


def test_process_group_nccl_log_prefix_names_the_global_rank_of_the_default_group(rules: Classifier) -> None:
    # ProcessGroupNCCL's logPrefix(): torch 2.3 "[PG 0 Rank 3] ", 2.4 "[PG 0 (default_pg) Rank 3] ",
    # 2.5+ "[PG ID 0 PG GUID 0(default_pg) Rank 3] ", on glog lines without torch's [rankN]: prefix
    # and in the what() of the exception that ends the process
    assert origin_of("I0527 15:16:51.665375 58626 ProcessGroupNCCL.cpp:869] [PG 0 Rank 2] ProcessGroupNCCL "
                     "initialization options: size: 8, global rank: 2") == Origin(2)
    assert origin_of("[PG 0 (default_pg) Rank 5] Process group watchdog thread terminated with exception") == Origin(5)
    assert origin_of("  what():  [PG ID 0 PG GUID 0(default_pg) Rank 1] Process group watchdog thread terminated with "
                     "exception: [Rank 1] Watchdog caught collective operation timeout") == Origin(1)
    # a subgroup's rank (tensor-parallel group 2) is no global rank, nor its message's "[Rank 1]"
    assert origin_of("[PG ID 2 PG GUID 5(tp) Rank 1] Watchdog caught collective operation timeout: "
                     "[Rank 1] Timeout at NCCL work: 7") == Origin()
    assert origin_of("[rank6]:[E1101 10:00:00.1 ProcessGroupNCCL.cpp:632] [PG 3 Rank 1] timeout") == Origin(6)
    log = ["step 100 loss 1.20", "step 110 loss 1.18",
           "[E1120 01:13:20.892421310 ProcessGroupNCCL.cpp:632] [PG ID 0 PG GUID 0(default_pg) Rank 3] Watchdog caught "
           "collective operation timeout: WorkNCCL(SeqNum=40, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
           "Timeout(ms)=600000) ran for 600004 milliseconds before timing out.",
           "[E1120 01:13:20.993421310 ProcessGroupNCCL.cpp:632] [PG ID 0 PG GUID 0(default_pg) Rank 1] Watchdog caught "
           "collective operation timeout: WorkNCCL(SeqNum=40, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
           "Timeout(ms)=600000) ran for 600005 milliseconds before timing out.",
           "terminate called after throwing an instance of 'c10::DistBackendError'",
           "  what():  [PG ID 0 PG GUID 0(default_pg) Rank 3] Process group watchdog thread terminated with exception"]
    assert diagnose_text("\n".join(log), rules).first_rank == 3  # the first rank to report the hang


def test_open_mpi_5_names_the_first_failed_process_in_prrte_form(rules: Classifier) -> None:
    # PRRTE (Open MPI 5) names a process "[nspace@job,rank]", the nspace holding mpirun's own host
    from gpulens.diagnosis.logread.ranks import mpirun_first

    assert mpirun_first(["   Process name: [prterun-gpu07-12345@1,3]"], [0], []) == Origin(3)
    log = ["epoch 1 step 5 loss 0.30", "epoch 1 step 6 loss 0.29",
           "--------------------------------------------------------------------------",
           "prterun detected that one or more processes exited with non-zero status,",
           "thus causing the job to be terminated. The first process to do so was:", "",
           "   Process name: [prterun-gpu07-12345@1,3]", "   Exit code:    1",
           "--------------------------------------------------------------------------"]
    w = diagnose_text("\n".join(log), rules)
    assert (w.first_rank, w.first_node) == (3, None)  # the nspace's host is mpirun's, not rank 3's


def test_torch_1_9_child_failed_table_names_the_root_cause_rank(rules: Classifier) -> None:
    # torch 1.9's ChildFailedError: "Root Cause:" then "Other Failures:", fields "rank: 2 (local_rank: 2)",
    # no host (torch >= 1.10 prints "Root Cause (first observed failure):" with a host field)
    log = ["epoch 0 step 10 loss 2.31", "epoch 0 step 20 loss 2.11",
           "Traceback (most recent call last):", '  File "train.py", line 60, in main', "    loss = model(batch)",
           "RuntimeError: CUDA error: device-side assert triggered",
           "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 1) local_rank: 2 (pid: 4412) of "
           "binary: /usr/bin/python3",
           "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
           "***************************************", "            train.py FAILED            ",
           "=======================================", "Root Cause:", "[0]:", "  time: 2021-08-01_10:00:09",
           "  rank: 2 (local_rank: 2)", "  exitcode: 1 (pid: 4412)", "  error_file: <N/A>",
           '  msg: "Process failed with exitcode 1"', "=======================================",
           "Other Failures:", "  <NO_OTHER_FAILURES>", "***************************************"]
    assert root_cause_table(log[11:20]) == Origin(2)
    w = diagnose_text("\n".join(log), rules)
    assert (w.first_rank, w.first_node) == (2, None)


def test_nccl_mpi_and_slurm_lines_name_the_one_host_of_a_single_node_job(rules: Classifier) -> None:
    from gpulens.diagnosis.logread.ranks import announced_host

    def host(text: list[str]) -> str | None:
        return announced_host(text, list(range(len(text))))

    nccl = ["gpu07:41234:41234 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.7<0>",
            "[rank1]:gpu07:41235:41235 [1] NCCL INFO cudaDriverVersion 12040"]
    assert host(nccl) == "gpu07"
    assert host([*nccl, "gpu08:51234:51234 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.8<0>"]) is None  # two nodes
    assert host(["[gpu09:1234] MCW rank 0 bound to socket 0[core 0[hwt 0]]: [B/././.]"]) == "gpu09"
    assert host(["SLURMD_NODENAME=node33"]) == "node33"
    assert host(["SLURM_JOB_NODELIST: gpu07"]) == "gpu07"
    assert host(["SLURM_JOB_NODELIST=gpu[07-08]"]) is None and host(["SLURM_NODELIST=gpu07,gpu08"]) is None
    log = ["SLURM_JOB_NODELIST=gpu-a12", *nccl[:1], "step 10 loss 2.1", "step 20 loss 2.0",
           "Traceback (most recent call last):", '  File "train.py", line 10, in <module>', "ValueError: bad shape"]
    assert diagnose_text("\n".join(log), rules).first_node is None  # two hosts named: gpu-a12 and gpu07
    log[1] = "gpu-a12:41234:41234 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.7<0>"
    assert diagnose_text("\n".join(log), rules).first_node == "gpu-a12"


def test_a_pbs_exec_vnode_names_the_one_host_of_a_job(rules: Classifier) -> None:
    from gpulens.diagnosis.logread.ranks import announced_host

    def host(text: list[str]) -> str | None:
        return announced_host(text, list(range(len(text))))

    assert host(["exec_vnode = (c3n7:ngpus=2:ncpus=32:mem=230686720kb)"]) == "c3n7"
    assert host(["\tExecution Nodes Used: (gpu-12:ncpus=16:ngpus=4)"]) == "gpu-12"
    assert host(["exec_vnode = (c3n7:ncpus=32:ngpus=4)+(c3n8:ncpus=32:ngpus=4)"]) is None  # two hosts
    assert host(["#PBS -l select=1:ncpus=32:ngpus=2:mem=220gb"]) is None  # a request names no host
    oom = ["Traceback (most recent call last):", '  File "/srv/train.py", line 30, in <module>', "    trainer.train()",
           "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.73 GiB. GPU 1 has a total capacity of 39.39 GiB",
           "======== job epilogue ========", "\tExit Status: 1", "\tExecution Nodes Used: (x1000c3s5b0n0:ngpus=2:ncpus=32:mem=2gb)"]
    assert diagnose_text("\n".join(oom), rules).first_node == "x1000c3s5b0n0"


@pytest.mark.parametrize("start, rank", [
    # printed by every rank: one rank named means the log holds that process's output only
    (["06/01/2024 10:00:00 - WARNING - __main__ - Process rank: 3, device: cuda:3, n_gpu: 1, distributed training: True,"
      " 16-bits training: False"], 3),
    (["| distributed init (rank 5): env://, gpu 5"], 5),
    (["Training in distributed mode with multiple processes, 1 device per process.Process 2, total 8, device cuda:2."], 2),
    (["Distributed environment: MULTI_GPU  Backend: nccl", "Num processes: 4", "Process index: 1",
      "Local process index: 1", "Device: cuda:1"], 1),
    # several ranks in one log, or a non-distributed run: none
    (["| distributed init (rank 0): env://", "| distributed init (rank 1): env://"], None),
    (["Process rank: -1, device: cuda:0, n_gpu: 1, distributed training: False, 16-bits training: True"], None),
    # rank 0's console line of an 8-process Lightning or detectron2 job: the others print theirs elsewhere
    (["Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/8"], None),
    (["[06/01 10:00:00 detectron2]: Rank of current process: 0. World size: 8"], None),
    (["[06/01 10:00:00 detectron2]: Rank of current process: 6. World size: 8"], 6),
    (["Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/1"], 0),
    (["Distributed environment: MULTI_GPU  Backend: nccl", "Num processes: 4", "Process index: 0"], None),
])
def test_the_one_rank_a_logs_start_up_names_is_its_failing_rank(rules: Classifier, start: list[str], rank: int | None) -> None:
    log = [*start, *(f"step {k} loss 2.{k}" for k in range(5)), "Traceback (most recent call last):",
           '  File "/srv/train.py", line 40, in <module>', "    loss.backward()",
           "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."]
    assert diagnose_text("\n".join(log), rules).first_rank == rank


def test_a_rank_named_by_the_failing_line_wins_over_the_announced_one(rules: Classifier) -> None:
    log = ["| distributed init (rank 0): env://", "step 1 loss 2.0", "[rank3]: Traceback (most recent call last):",
           '[rank3]:   File "/srv/train.py", line 40, in <module>', "[rank3]:     loss.backward()",
           "[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."]
    assert diagnose_text("\n".join(log), rules).first_rank == 3


def test_a_per_rank_slurm_file_with_a_node_still_names_its_rank(rules: Classifier) -> None:
    # srun --output=slurm-%j-%t.out: task 3's own file, ended by Slurm's time limit on its node
    log = ["06/01/2024 10:00:00 - WARNING - __main__ - Process rank: 3, device: cuda:3, n_gpu: 1, distributed training: "
           "True, 16-bits training: True", *(f"{{'loss': 0.{k}, 'epoch': 0.{k}}}" for k in range(1, 9)),
           "slurmstepd: error: *** STEP 4242.0 ON gpu07 CANCELLED AT 2024-06-01T22:00:00 DUE TO TIME LIMIT ***"]
    w = diagnose_text("\n".join(log), rules)
    assert (w.first_rank, w.first_node) == (3, "gpu07")


def test_the_host_of_an_srun_task_is_its_own_exit_lines(rules: Classifier) -> None:
    # two nodes, one torchrun agent each (srun --label): task 1's rank 7 fails first; task 0 exits last
    log = ["0: step 1 loss 2.31", "1: step 1 loss 2.30",
           "1: [rank7]: Traceback (most recent call last):", '1: [rank7]:   File "/srv/train.py", line 240, in main',
           "1: [rank7]:     out = model(batch)",
           "1: [rank7]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 822.00 MiB. GPU 3 has a total "
           "capacity of 39.38 GiB of which 774.12 MiB is free.",
           "srun: error: gpu-b12: task 1: Exited with exit code 1",
           "0: [rank2]: RuntimeError: NCCL communicator was aborted on rank 2.",
           "srun: error: gpu-a07: task 0: Exited with exit code 1"]
    w = diagnose_text("\n".join(log), rules)
    assert (w.first_rank, w.first_node) == (7, "gpu-b12")
