"""Round 11, first failing rank and node: launcher formats read from their sources, on excerpts written
by hand in those formats (HPE Cray PALS ``mpiexec``'s report of a rank's end, torch elastic's rendezvous
result naming the workers an agent runs)."""

from __future__ import annotations

from gpulens.diagnosis.classifier import Classifier
from gpulens.diagnosis.logread import diagnose_text
from gpulens.diagnosis.logread.ranks import (
    Origin,
    announced_host,
    announced_rank,
    mpirun_first,
    origin_of,
)


def test_pals_mpiexec_names_the_rank_and_host_that_ended() -> None:
    fqdn = "x1201c3s4b1n0.hsn.cm.example-hpc.org"
    assert origin_of(f"{fqdn}: rank 41 died from signal 11 and dumped core") == Origin(41, fqdn)
    assert origin_of("x1201c3s4b1n0: rank 7 exited with code 255") == Origin(7, "x1201c3s4b1n0")
    # a rank PALS (or the scheduler) stopped with SIGTERM did not fail
    assert origin_of(f"{fqdn}: rank 0 died from signal 15") == Origin()
    # a program's own words about a rank are not PALS's report
    assert origin_of("worker: rank 3 is ready") == Origin()
    assert origin_of("note: rank 2 exited with code 1 at step 40") == Origin()


def test_pals_report_is_the_failed_host_of_a_job_that_names_no_other(rules: Classifier) -> None:
    log = ["Global seed set to 17", *(f"epoch 0 step {k} loss 1.{k}" for k in range(4)),
           "Traceback (most recent call last):", '  File "train.py", line 51, in <module>', "    out = net(x)",
           "RuntimeError: CUDA error: uncorrectable ECC error encountered",
           "x1201c3s4b1n0.hsn.cm.example-hpc.org: rank 12 died from signal 6 and dumped core"]
    keys = [len(log) - 1]
    assert announced_host(log, keys) == "x1201c3s4b1n0.hsn.cm.example-hpc.org"
    w = diagnose_text("\n".join(log), rules)
    assert w.first_node == "x1201c3s4b1n0.hsn.cm.example-hpc.org"


def test_pals_reports_on_two_hosts_name_no_single_host() -> None:
    log = ["x1201c3s4b1n0: rank 3 exited with code 1", "x1201c3s5b0n0: rank 9 died from signal 15"]
    assert announced_host(log, [0, 1]) is None


_RDZV = ["INFO:torch.distributed.elastic.agent.server.api:[default] Rendezvous complete for workers. Result:",
         "  restart_count=0", "  master_addr=10.1.2.3", "  master_port=29500", "  group_rank={g}",
         "  group_world_size=4", "  local_ranks=[0]", "  role_ranks=[{g}]", "  global_ranks=[{g}]",
         "  role_world_sizes=[4]", "  global_world_sizes=[4]", ""]


def test_an_elastic_agent_of_one_worker_names_that_workers_rank() -> None:
    block = [ln.format(g=2) for ln in _RDZV]
    at = next(i for i, ln in enumerate(block) if "global_ranks=[" in ln)
    assert announced_rank(block, [at]) == 2
    # torch's glog-style prefix on each line of the block
    glog = "I0301 10:00:01.500000 4242 torch/distributed/elastic/agent/server/api.py:525]   global_ranks=[5]"
    assert announced_rank([glog], [0]) == 5
    # an agent of several workers names no one rank
    assert announced_rank(["  global_ranks=[0, 1, 2, 3]"], [0]) is None
    # two agents' blocks in one log (one worker each) name two ranks
    assert announced_rank(["  global_ranks=[0]", "  global_ranks=[1]"], [0, 1]) is None


def test_a_per_agent_log_of_one_worker_names_its_rank(rules: Classifier) -> None:
    log = [*(ln.format(g=3) for ln in _RDZV), *(f"iteration {k} loss 3.{k}" for k in range(4)),
           "Traceback (most recent call last):", '  File "train.py", line 77, in <module>', "    batch = next(it)",
           "RuntimeError: DataLoader worker (pid 5151) is killed by signal: Killed."]
    w = diagnose_text("\n".join(log), rules)
    assert w.first_rank == 3


def test_mpi_abort_on_the_world_communicator_names_the_rank() -> None:
    assert origin_of("MPI_ABORT was invoked on rank 6 in communicator MPI_COMM_WORLD") == Origin(6)
    assert origin_of("application called MPI_Abort(MPI_COMM_WORLD, 255) - process 14") == Origin(14)
    # a rank within another communicator is not the global rank
    assert origin_of("MPI_ABORT was invoked on rank 1 in communicator row_comm") == Origin()
    assert origin_of("application called MPI_Abort(comm=0x84000002, 1) - process 1") == Origin()


def test_horovodrun_gloo_names_the_rank_that_failed() -> None:
    assert origin_of("Process 5 exit with status code 1.") == Origin(5)
    lines = ["RuntimeError: Horovod detected that one or more processes exited with non-zero status, thus causing "
             "the job to be terminated. The first process to do so was:", "Process name: 5", "Exit code: 1"]
    assert mpirun_first(lines, [1], []) == Origin(5)
    # Open MPI's process name still reads as before
    assert mpirun_first(["  Process name: [[4370,1],11]"], [0], []) == Origin(11)


def test_a_horovodrun_log_names_the_first_rank_to_exit(rules: Classifier) -> None:
    log = ["epoch 1 step 1 loss 2.0", "Traceback (most recent call last):", '  File "train.py", line 10, in <module>',
           "    y = model(x)", "RuntimeError: CUDA error: an illegal memory access was encountered",
           "Process 2 exit with status code 1.",
           "RuntimeError: Horovod detected that one or more processes exited with non-zero status, thus causing "
           "the job to be terminated. The first process to do so was:", "Process name: 2", "Exit code: 1"]
    assert diagnose_text("\n".join(log), rules).first_rank == 2


def test_rays_report_of_a_lost_worker_names_its_node() -> None:
    oom = ("ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory. Memory on the node "
           "(IP: 10.3.4.5, ID: 5e63aa) where the task (task ID: 1f2e, name=rollout, pid=4242, memory used=8.1GB) was "
           "running was 61.0GB / 64.0GB (0.953), which exceeds the memory usage threshold of 0.95.")
    assert origin_of(oom) == Origin(None, "10.3.4.5")
    assert origin_of("Memory on the node (IP: 10.3.4.6) was 110.41GB / 121.63GB (0.907749)") == Origin(None, "10.3.4.6")
    died = ("(raylet) A worker died or was killed while executing a task by an unexpected system error. Worker ID: "
            "ab12, Node ID: cd34, Worker IP address: 10.3.4.7, Worker port: 10011, Worker PID: 777, Worker exit type: "
            "SYSTEM_ERROR")
    assert origin_of(died) == Origin(None, "10.3.4.7")


def test_a_parallel_shell_names_the_host_whose_command_failed() -> None:
    assert origin_of("pdsh@node-a01: node-a07: ssh exited with exit code 1") == Origin(None, "node-a07")
    assert origin_of("clush: node-a07: exited with exit code 137") == Origin(None, "node-a07")
    # the launching host (pdsh@...) is not the failed one
    assert origin_of("pdsh@node-a01: node-a01: ssh exited with exit code 255").node == "node-a01"


def test_open_mpis_reports_from_inside_a_process_name_its_host() -> None:
    assert origin_of("[node-b12:40021] *** Process received signal ***") == Origin(None, "node-b12")
    assert origin_of("[node-b12:40021] Signal: Segmentation fault (11)") == Origin(None, "node-b12")
    assert origin_of("[node-b12:40021] *** An error occurred in MPI_Allreduce") == Origin(None, "node-b12")
    # behind srun's --label task and Open MPI's --tag-output rank
    assert origin_of("2: [node-b12:40021] *** Process received signal ***") == Origin(2, "node-b12")
    assert origin_of("[1,5]<stderr>:[node-b12:40021] Signal: Aborted (6)") == Origin(5, "node-b12")
    # a logger's level is no host
    assert origin_of("[WARNING:77] *** retrying") == Origin()


def test_mpich_aborts_name_the_world_rank_and_host() -> None:
    assert origin_of("Abort(1094543) on node 6 (rank 0 in comm 496): Fatal error in PMPI_Comm_split") == Origin(6)
    cray = ("MPICH ERROR [Rank 9] [job id 4411.0] [Tue Mar  4 10:20:30 2025] [nid001234] - Abort(590863) "
            "(rank 9 in comm 0): Fatal error in PMPI_Init: Other MPI error")
    assert origin_of(cray) == Origin(9, "nid001234")
    unnamed = ("MPICH ERROR [Rank 2] [job id unknown] [Tue Mar  4 10:20:30 2025] [unknown] - Abort(1) "
               "(rank 2 in comm 0): Fatal error")
    assert origin_of(unnamed) == Origin(2)


def test_an_nccl_line_behind_a_launchers_prefix_names_its_host() -> None:
    assert origin_of("[rank5]:node-c03:5511:5600 [5] NCCL WARN NET/IB : Got completion with error 12") == Origin(5, "node-c03")
    assert origin_of("[1,5]<stderr>:node-c03:5511:5600 [1] NCCL WARN Cuda failure 'out of memory'") == Origin(5, "node-c03")
    assert origin_of("[default1]:[rank9]:node-c03:5511:5600 [1] NCCL WARN x") == Origin(9, "node-c03")
