"""The root error of multi-rank whole logs as an operator finds it (issue 23, items 3-4): the
first rank that printed a real error (not torchrun's table when a rank printed its traceback
first), Open MPI's "first process to do so" with its host, one Ray worker's traceback among
several on a node, symptoms (NCCL timeouts, SIGTERMs, exit-code rows) never the root, and the
launcher's verdict lines among the indicator lines. The excerpts are written by hand in the
shapes these launchers print."""

from __future__ import annotations

import pytest

from gpulens.diagnosis.classifier import Classifier
from gpulens.diagnosis.logread import diagnose_text
from gpulens.diagnosis.logread.indicators.rooterror import is_root_error
from gpulens.diagnosis.logread.indicators.verdicts import verdict_lines
from gpulens.diagnosis.logread.lines import ends_own_process
from gpulens.diagnosis.logread.ranks import (
    Origin,
    mpirun_first,
    origin_of,
    strip_prefix,
    table_hosts,
)


def _rank_traceback(rank: int, error: str) -> list[str]:
    return [f"[rank{rank}]: Traceback (most recent call last):",
            f'[rank{rank}]:   File "/srv/job/train.py", line 41, in <module>',
            f"[rank{rank}]:     out = model(batch)",
            f"[rank{rank}]: {error}"]


_TORCHRUN_TAIL = [
    "W0312 08:00:09.100000 900 torch/distributed/elastic/multiprocessing/api.py:897] Sending process 901 closing signal SIGTERM",
    "E0312 08:00:10.200000 900 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: 1) local_rank: 2 (pid: 903) of binary: /usr/bin/python3",
    "Traceback (most recent call last):",
    '  File "/usr/local/bin/torchrun", line 8, in <module>',
    "    raise ChildFailedError(",
    "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
    "============================================================",
    "train.py FAILED",
    "------------------------------------------------------------",
    "Failures:",
    "[1]:",
    "  time      : 2025-03-12_08:00:09",
    "  host      : node-a3",
    "  rank      : 5 (local_rank: 5)",
    "  exitcode  : 1 (pid: 906)",
    "------------------------------------------------------------",
    "Root Cause (first observed failure):",
    "[0]:",
    "  time      : 2025-03-12_08:00:09",
    "  host      : node-a3",
    "  rank      : 2 (local_rank: 2)",
    "  exitcode  : 1 (pid: 903)",
    "============================================================",
]


def _torchrun_log() -> list[str]:
    head = [f"[rank{r}]: step 10/500 loss 3.21" for r in range(4)]
    err = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU {0} has a total capacity of 79.15 GiB"
    body = _rank_traceback(5, err.format(5)) + _rank_traceback(2, err.format(2))
    return head + body + _TORCHRUN_TAIL


def test_the_first_rank_to_print_the_error_beats_torchruns_table(rules: Classifier) -> None:
    lines = _torchrun_log()
    w = diagnose_text("\n".join(lines), rules)
    assert w.diagnosis.category == "gpu_oom"
    assert (w.first_rank, w.first_node) == (5, "node-a3")  # the table's host for rank 5
    got = [lines[n - 1] for n in w.indicator_lines]
    assert got[0].startswith("[rank5]: torch.OutOfMemoryError") and not any(x.startswith("[rank2]: torch") for x in got)
    # R8: rank 5 printed its error, so none of torchrun's verdict lines (ChildFailedError, its
    # Root Cause table, "failed (exitcode") and nothing of the SIGTERM it sent
    assert len(got) == 1
    assert not any("ChildFailedError" in x or "rank      :" in x or "Root Cause" in x or "failed (exitcode" in x
                   for x in got)
    assert w.secondary_lines >= 2


def test_timestamps_order_interleaved_ranks(rules: Classifier) -> None:
    lines = [
        "[rank1]:[E312 08:00:05.500 ProcessGroupNCCL.cpp:607] [Rank 1] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=9, OpType=ALLREDUCE) ran for 600000 milliseconds before timing out.",
        "2025-03-12 08:00:07,100 [rank: 3] ERROR torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
        "2025-03-12 08:00:02,900 [rank: 0] ERROR RuntimeError: CUDA error: an illegal memory access was encountered",
    ]
    w = diagnose_text("\n".join(lines), rules)
    assert w.first_rank == 0  # earliest real error by its timestamp; the NCCL timeout is a symptom


def test_open_mpi_names_the_first_process_and_its_binding_names_the_host(rules: Classifier) -> None:
    lines = [f"[gpn{1 + r // 4:02d}.hpc.local:{4000 + r // 4}] MCW rank {r} bound to socket 0[core {r % 4}[hwt 0]]: [B/./././.]"
             for r in range(8)]
    for _ in range(3):
        lines += ["Traceback (most recent call last):", '  File "infer.py", line 3, in <module>',
                  "ModuleNotFoundError: No module named 'tracks.io'"]
    lines += [
        "--------------------------------------------------------------------------",
        "mpirun detected that one or more processes exited with non-zero status, thus causing",
        "the job to be terminated. The first process to do so was:",
        "",
        "  Process name: [[5120,1],6]",
        "  Exit code:    1",
        "--------------------------------------------------------------------------",
    ]
    w = diagnose_text("\n".join(lines), rules)
    assert w.diagnosis.category == "import_error"
    assert (w.first_rank, w.first_node) == (6, "gpn02.hpc.local")
    got = [lines[n - 1] for n in w.indicator_lines]
    assert got[0].startswith("ModuleNotFoundError") and sum(x.startswith("ModuleNotFoundError") for x in got) == 1
    # R8: the failing process printed its error, so mpirun's verdict block is not an indicator line
    assert not any("mpirun detected" in x or "Process name" in x for x in got)


def test_one_ray_workers_traceback_among_several_on_a_node(rules: Classifier) -> None:
    def worker(pid: int) -> list[str]:
        return [f"Unhandled error: ray::Worker.update_actor() (pid={pid}, ip=10.1.2.3, actor_id=ab{pid})",
                '  File "/srv/worker.py", line 88, in update_actor',
                "    loss.backward()",
                f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB. GPU 0 has a total capacity "
                f"of 39.00 GiB of which 1.{pid % 10} GiB is free."]
    lines = ["step 0 started"] + worker(7001) + worker(7002) + worker(7003)
    w = diagnose_text("\n".join(lines), rules)
    assert w.diagnosis.category == "gpu_oom" and w.first_node == "10.1.2.3"
    # the first worker's OOM (README rules R2, R4: not its Ray header; the node is read from it); the
    # others' are the same failure again (R5)
    assert w.indicator_lines == [5]


def test_a_ray_driver_wrapper_is_not_the_root_the_task_s_own_exception_is(rules: Classifier) -> None:
    # the driver re-raises a task's error as RayTaskError(X) naming the driver's actor; the
    # nested RayTaskError names the task that failed, and its own exception follows below it
    lines = ["(Runner pid=500) step 40 | loss 0.31", "Traceback (most recent call last):",
             '  File "/srv/main.py", line 12, in main', "    ray.get(runner.run.remote(cfg))",
             "ray.exceptions.RayTaskError(OSError): ray::Runner.run() (pid=500, ip=10.0.0.5, actor_id=aa01)",
             '  File "/srv/trainer.py", line 80, in fit', "    self.workers.save_checkpoint(path)",
             "ray.exceptions.RayTaskError(OSError): ray::Worker.save_checkpoint() (pid=612, ip=10.0.0.5, actor_id=bb02)",
             '  File "/srv/worker.py", line 33, in save_checkpoint', "    torch.save(state, path)",
             "OSError: [Errno 28] No space left on device"]
    assert not is_root_error(lines[4]) and not is_root_error(lines[7])
    w = diagnose_text("\n".join(lines), rules)
    assert w.first_node == "10.0.0.5" and 11 in w.indicator_lines and 5 not in w.indicator_lines


def test_the_same_error_of_several_processes_is_shown_once(rules: Classifier) -> None:
    # data-loader workers each fail on their own temporary file: one failure, one line
    lines = ["epoch 3 step 120 loss 0.52"] + [
        f"OSError: [Errno 28] No space left on device: '/tmp/pymp-{name}'" for name in ("ab12cd", "x9y8zq", "kk01mm")]
    w = diagnose_text("\n".join(lines), rules)
    assert w.indicator_lines == [2]


def test_srun_task_under_torchrun_is_not_the_rank(rules: Classifier) -> None:
    lines = _rank_traceback(1, "my_tool.Stop") + _rank_traceback(0, "my_tool.Stop") + _TORCHRUN_TAIL + [
        "srun: error: node-a3: task 0: Exited with exit code 1"]
    w = diagnose_text("\n".join(lines), rules)
    assert w.first_rank == 2  # no rank printed an error line the reader knows: torchrun's table


@pytest.mark.parametrize("line, root", [
    ("RuntimeError: CUDA error: an illegal memory access was encountered", True),
    ("[E ProcessGroupNCCL.cpp:607] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9)", False),
    ("W0312 08:00:09.100000 900 api.py:897] Sending process 901 closing signal SIGTERM", False),
    ("torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ", False),
    ("  exitcode  : -6 (pid: 3622282)", False),
    ("E0312 08:00:10.2 900 api.py:869] failed (exitcode: -6) local_rank: 1 (pid: 903) of binary: /usr/bin/python3", False),
    ("srun: error: node-a3: task 0: Exited with exit code 1", False),
    ("ConnectionResetError: [Errno 104] Connection reset by peer", False),
    ('  File "/srv/job/train.py", line 41, in <module>', False),
    # NCCL's own failures in this process (ncclSystemError: a socket, malloc or shm call failed;
    # ncclUnhandledCudaError) are its errors; a remote error or a watchdog's copy is another's
    ("torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1691, "
     "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.19.3", True),
    ("torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, remote "
     "process exited or there was a network error, NCCL version 2.21.5", False),
    # the watchdog's report of what it caught: a CUDA error on this rank is the root; a timeout is a
    # symptom (the collective's other ranks); torch's advice lines under a CUDA error are not errors
    ("[E ProcessGroupNCCL.cpp:916] [Rank 0] NCCL watchdog thread terminated with exception: CUDA error: unknown "
     "error", True),
    ("[PG ID 0 PG GUID 0 Rank 1] Process group watchdog thread terminated with exception: [Rank 1] Watchdog caught "
     "collective operation timeout: WorkNCCL(SeqNum=9)", False),
    ("CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be "
     "incorrect.", False),
    ("For debugging consider passing CUDA_LAUNCH_BLOCKING=1.", False),
    ("Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.", False),
    # a line logged at a DEBUG/TRACE level is a trace, whatever words it holds (UCX's, Python's)
    ("0: [1580511823.093576] [cgpu17:53890:1]         rcache.c:545  UCX  DEBUG failed to register region "
     "0x2aad4c00f130: Input/output error", False),
    ("DEBUG:urllib3.connectionpool:Failed to establish a new connection: [Errno 111] Connection refused", False),
    # pip's notice of conflicts among what it installed (it then says "Successfully installed")
    ("ERROR: pip's dependency resolver does not currently take into account all the packages that are installed. "
     "This behaviour is the source of the following dependency conflicts.", False),
    ("0: [1580511823.093583] [cgpu17:53890:1]        ucp_mm.c:110  UCX  ERROR failed to register address "
     "0x2aab4bc00000 length 131072 on md[6]=ib/mlx5_0: Input/output error", True),
])
def test_symptoms_are_never_the_root(line: str, root: bool) -> None:
    assert is_root_error(line) is root


def test_a_cuda_error_the_nccl_watchdog_caught_is_shown_by_its_first_line_once(rules: Classifier) -> None:
    # the watchdog logs the CUDA fault it caught (onto the bar tqdm left without a newline), torch's
    # advice lines follow, then C++ aborts with the same message under "what():": README rules R3
    # (the message's first line), R6 (terminate called adds nothing when the error is named)
    bar = "\r{:3d}%|█████████▊| {}/2631 [5:02:33<05:08,  6.70s/it]"
    lines = [bar.format(98, k) for k in range(2580, 2585)]
    lines[-1] += "[E ProcessGroupNCCL.cpp:916] [Rank 0] NCCL watchdog thread terminated with exception: CUDA error: unknown error"
    advice = ["CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below "
              "might be incorrect.", "For debugging consider passing CUDA_LAUNCH_BLOCKING=1.",
              "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.", "",
              "Exception raised from c10_cuda_check_implementation at ../c10/cuda/CUDAException.cpp:44 (most recent "
              "call first):",
              "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x57 (0x14b6c1c31617 in libc10.so)", ""]
    lines += advice + ["terminate called after throwing an instance of 'std::runtime_error'",
                       "  what():  [Rank 0] NCCL watchdog thread terminated with exception: CUDA error: unknown error"]
    lines += advice
    assert diagnose_text("\n".join(lines), rules).indicator_lines == [5]


def test_an_error_torch_logs_in_c_plus_plus_before_throwing_it_is_shown_at_its_log_line(rules: Classifier) -> None:
    # ProcessGroupGloo logs the failed barrier (LOG(ERROR), glog header) and throws the same
    # message, which Python prints under the rank's traceback: README rule R9, the earliest copy
    msg = ("Rank 8 successfully reached monitoredBarrier, but received errors while waiting for send/recv from "
           "rank 0. Please check rank 0 logs for faulty rank.")
    lines = ["[rank8]: step 40 loss 1.92", "[rank15]: step 40 loss 1.95",
             f"[rank8]:[E813 07:25:21.532210515 ProcessGroupGloo.cpp:143] {msg}",
             f"[rank15]:[E813 07:25:21.532252353 ProcessGroupGloo.cpp:143] {msg.replace('Rank 8', 'Rank 15')}",
             *_rank_traceback(8, f"RuntimeError: {msg}"),
             "[rank8]: Original exception:",
             "[rank8]: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [10.0.0.54]:61356"]
    assert diagnose_text("\n".join(lines), rules).indicator_lines == [3]
    # a C++ log line that says something else is not the exception's copy
    lines[2] = "[rank8]:[E813 07:25:21.532210515 ProcessGroupGloo.cpp:143] Connection to rank 0 was lost"
    assert diagnose_text("\n".join(lines), rules).indicator_lines == [8]


def test_a_transport_s_debug_trace_is_not_the_error_its_error_line_is(rules: Classifier) -> None:
    # srun -l, two MPI ranks; UCX traces at DEBUG level a failure its caller then reports at ERROR
    # level: README rule R2, the trace is not an error line
    ucx = "0: [1580511823.0935{}] [cgpu17:53890:1] {:>16}  UCX  {} {}"
    lines = ["0: MPI rank 0 size 2 device cuda:0", "1: MPI rank 1 size 2 device cuda:1",
             "0: local result: tensor(114.2847, device='cuda:0')", "1: local result: tensor(308.4093, device='cuda:1')",
             ucx.format(76, "rcache.c:545", "DEBUG", "failed to register region 0x2aad4c00f130: Input/output error"),
             ucx.format(83, "ucp_mm.c:110", "ERROR", "failed to register address 0x2aab4bc00000 length 131072 on "
                        "md[6]=ib/mlx5_0: Input/output error"),
             "0: [cgpu17:53890] pml_ucx.c:775  Error: ucx send failed: Input/output error",
             "0: [cgpu17:53890] *** An error occurred in MPI_Bcast",
             "0: [cgpu17:53890] *** MPI_ERRORS_ARE_FATAL (processes in this communicator will now abort,",
             "srun: error: cgpu17: task 0: Exited with exit code 16"]
    got = diagnose_text("\n".join(lines), rules).indicator_lines
    assert got and got[0] == 6 and 5 not in got


def test_a_shell_s_abort_report_comes_with_glibc_s_reason_above_it(rules: Classifier) -> None:
    # a C program corrupts its heap; glibc reports it with a backtrace and the memory map, then
    # aborts, and the job script's shell says so: README rule R6, the kill line and the one that
    # says why (not the backtrace or the map between them)
    lines = ['main.cu(193): warning: variable "k_d" was declared but never referenced', "",
             "*** Error in `./simplex': corrupted size vs. prev_size: 0x00000000006ba7b0 ***",
             "======= Backtrace: =========", "/lib64/libc.so.6(+0x80c37)[0x2aaab0d63c37]",
             "./simplex[0x4030f1]", "======= Memory map: ========",
             *[f"2aaad{k}000000-2aaad{k}021000 rw-p 00000000 00:00 0 " for k in range(4)],
             "/var/spool/torque/mom_priv/jobs/11086.sched.SC: line 26: 158958 Aborted                 (core dumped) "
             "./simplex > myoutput.log"]
    assert diagnose_text("\n".join(lines), rules).indicator_lines == [3, len(lines)]
    # newer glibc prints the message alone
    lines[2] = "free(): invalid pointer"
    assert diagnose_text("\n".join(lines), rules).indicator_lines == [3, len(lines)]


def test_pip_s_conflict_notice_is_not_the_error_that_ended_the_job(rules: Classifier) -> None:
    # the job script installs packages (pip reports conflicts, then "Successfully installed") and
    # then srun fails to start the training step: README rule R3, the error that ended it
    lines = ["Installing collected packages: xmltodict, typer-slim, huggingface-hub", "",
             "ERROR: pip's dependency resolver does not currently take into account all the packages that are "
             "installed. This behaviour is the source of the following dependency conflicts.",
             "transformers 4.52.3 requires huggingface-hub<1.0,>=0.30.0, but you have huggingface-hub 1.1.1 which is "
             "incompatible.",
             "Successfully installed huggingface-hub-1.1.1 typer-slim-0.20.0 xmltodict-1.0.2",
             "Setup complete. Ready to run GRPO.", "CUDA_VISIBLE_DEVICES: 0,1,2,3,4,5,6,7 (using 7 for training)",
             "srun: error: Unable to create step for job 25649503: Invalid generic resource (gres) specification"]
    assert diagnose_text("\n".join(lines), rules).indicator_lines == [len(lines)]


def test_launcher_summaries() -> None:
    assert table_hosts(_TORCHRUN_TAIL) == {5: "node-a3", 2: "node-a3"}
    bindings = ["[gpn07:11] MCW rank 3 bound to socket 0[core 3[hwt 0]]: [./././B]"]
    assert mpirun_first(["  Process name: [[77,1],3]"], [0], [0] if bindings else []) is not None
    assert mpirun_first(["  Process name: [[77,1],3]"] + bindings, [0], [1]) == Origin(3, "gpn07")
    assert mpirun_first(["  Process name: [[77,1],3]"], [0], []) == Origin(3)
    got = [_TORCHRUN_TAIL[i] for i in verdict_lines(_TORCHRUN_TAIL, 0)]
    assert "] failed (exitcode: 1) local_rank: 2" in got[0]  # torchrun's first verdict line
    assert got[1].startswith("torch.distributed.elastic.multiprocessing.errors.ChildFailedError")
    assert got[2].strip().startswith("rank      : 2") and not any(x.startswith("Root Cause") for x in got)
    assert origin_of("(Worker pid=77, ip=10.0.0.9) x") == Origin(None, "10.0.0.9", "77")
    assert strip_prefix("[rank3]: TypeError: boom") == "TypeError: boom"
    assert strip_prefix("[rank3]:   File \"x.py\", line 1") == "  File \"x.py\", line 1"
    assert strip_prefix("3: RuntimeError: boom") == "RuntimeError: boom"


def test_secondary_lines_are_other_ranks_and_launchers_not_the_failing_process_own(rules: Classifier) -> None:
    w = diagnose_text("\n".join(_torchrun_log()), rules)
    # rank 2's OOM, the SIGTERM, the launcher's raise, its two exit-code rows and (R8: rank 5
    # printed its error, so they are not indicator lines) torchrun's verdict lines
    assert w.secondary_lines == 7
    single = ["epoch 3 step 120 loss 0.41",
              "Traceback (most recent call last):", '  File "train.py", line 9, in load', "    return open(p)",
              "FileNotFoundError: [Errno 2] No such file or directory: 'data/val.json'",
              "", "During handling of the above exception, another exception occurred:", "",
              "Traceback (most recent call last):", '  File "train.py", line 30, in <module>', "    load(p)",
              "RuntimeError: could not read the validation split"]
    w = diagnose_text("\n".join(single), rules)
    assert w.indicator_lines == [5, 12] and w.secondary_lines == 0  # one process: its chain, nothing secondary


def test_a_hang_names_the_first_rank_whose_collective_timed_out(rules: Classifier) -> None:
    head = [f"[rank{r}]: step 875/2000 loss 1.02" for r in range(4)]
    hang = [f"[rank{r}]:[E922 03:32:0{k}.1 ProcessGroupNCCL.cpp:607] [Rank {r}] Watchdog caught collective operation "
            f"timeout: WorkNCCL(SeqNum=875, OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1800047 milliseconds"
            for k, r in enumerate((2, 1, 3))]
    lines = head + hang + _TORCHRUN_TAIL
    w = diagnose_text("\n".join(lines), rules)
    assert w.first_rank == 2  # nothing failed otherwise: the first rank to report the timeout, not the table's
    assert w.indicator_lines[0] == 5 and w.first_node == "node-a3"


def test_timestamps_of_different_forms_are_not_compared(rules: Classifier) -> None:
    lines = ["2025-03-12 08:00:07,100 [rank: 3] ERROR torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
             "[rank0]:[E312 08:00:02.900 ProcessGroupNCCL.cpp:1200] [Rank 0] RuntimeError: CUDA error: an illegal memory "
             "access was encountered"]
    w = diagnose_text("\n".join(lines), rules)
    assert w.first_rank == 3  # a date and a bare time of day do not order as text: file order


def test_the_error_context_starts_at_the_first_traceback_of_a_chain() -> None:
    from gpulens.diagnosis.logread.tracebacks import chain_start

    lines = ["epoch 9 step 40 loss 0.2",  # 0
             "Traceback (most recent call last):", '  File "a.py", line 3, in f', "KeyError: 'label'", "",  # 1-4
             "The above exception was the direct cause of the following exception:", "",  # 5-6
             "Traceback (most recent call last):", '  File "a.py", line 9, in <module>',  # 7-8
             "RuntimeError: could not build the batch"]  # 9
    assert chain_start(lines, 7, 0) == 1
    assert chain_start(lines, 7, 3) == 7  # not before the floor
    assert chain_start(lines, 1, 0) == 1  # not chained to anything above


def test_a_rank_s_traceback_code_lines_are_not_its_progress(rules: Classifier) -> None:
    # a script runs two torchrun stages; the first fails on rank 0 while the other ranks go on
    # printing, then the second stage fails on every rank: rank 0's traceback code lines in the
    # second stage ("step=step") are not training progress that would show it went on
    def tb(rank: int, err: str) -> list[str]:
        return [f"[rank{rank}]: Traceback (most recent call last):",
                f'[rank{rank}]:   File "/srv/chat_sft.py", line 40, in <module>',
                f'[rank{rank}]:     model, tok, meta = load_model(args.source, device, phase="train", step=step)',
                f'[rank{rank}]:   File "/srv/checkpoints.py", line 77, in load_model',
                f'[rank{rank}]:     for step in range(last_step):',
                f'[rank{rank}]:   File "/srv/checkpoints.py", line 90, in find_last_step',
                f'[rank{rank}]:     return max(int(f.split("_")[-1]) for f in os.listdir(d)) if step else 0',
                f"[rank{rank}]: {err}"]
    disk = "OSError: Not enough disk space. Needed: 153.54 MiB"
    missing = "FileNotFoundError: [Errno 2] No such file or directory: '/root/.cache/mid_checkpoints'"
    lines = [f"[rank{r}]: step 00400/00500 | loss: 2.1 | dt: 410ms" for r in range(4)]
    lines += tb(0, disk) + [f"[rank{r}]: step 00{k}/00500 | loss: 2.0 | dt: 400ms" for k in (401, 402, 403) for r in (1, 2, 3)]
    lines += [x for r in range(4) for x in tb(r, missing)]
    w = diagnose_text("\n".join(lines), rules)
    assert w.first_rank == 0 and lines[w.indicator_lines[0] - 1].endswith(disk)


@pytest.mark.parametrize("line, rank, node, rest", [
    ("9: [default3]:[rank39]: RuntimeError: boom", 39, None, "RuntimeError: boom"),  # srun --label task 9, global rank 39
    ("192.168.5.2: [rank20]: FileNotFoundError: x", 20, "192.168.5.2", "FileNotFoundError: x"),  # pdsh host
    ("localhost: [rank0]:   File \"a.py\", line 3", 0, None, '  File "a.py", line 3'),
    ("gpu07: [rank12]: KeyError: 3", 12, "gpu07", "KeyError: 3"),
    ("[rank7]:[rank7]: ValueError: doubled", 7, None, "ValueError: doubled"),  # torchtitan's doubled tag
])
def test_stacked_launcher_prefixes_name_the_global_rank(line: str, rank: int, node: str | None, rest: str) -> None:
    o = origin_of(line)
    assert (o.rank, o.node) == (rank, node)
    assert strip_prefix(line) == rest


def test_a_root_error_on_the_second_node_of_a_pdsh_job(rules: Classifier) -> None:
    # DeepSpeed's pdsh launcher prefixes every line with its host; rank 9 on the second node dies
    # while the first node goes on until its watchdog times out
    lines: list[str] = []
    for s in range(1, 6):
        lines += [f"localhost: [rank0]: iteration {s}/1000 | lm loss: 7.1{s} | elapsed (ms): 812",
                  f"192.168.5.2: [rank8]: iteration {s}/1000 | lm loss: 7.1{s}"]
    lines += ["192.168.5.2: [rank9]: Traceback (most recent call last):",
              '192.168.5.2: [rank9]:   File "/srv/pretrain_gpt.py", line 10, in <module>',
              "192.168.5.2: [rank9]:     build_index(path)",
              "192.168.5.2: [rank9]: FileNotFoundError: [Errno 2] No such file or directory: '/data/cache/doc_idx.npy'"]
    lines += [f"localhost: [rank0]: iteration {s}/1000 | lm loss: 7.0{s} | elapsed (ms): 812" for s in range(6, 10)]
    lines += ["localhost: [rank0]:[E1122 10:30:00.000 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective "
              "operation timeout: WorkNCCL(SeqNum=50, OpType=ALLREDUCE) ran for 600000 milliseconds before timing out.",
              "192.168.5.2: [2025-03-01 10:20:00,000] [ERROR] [launch.py:321:sigkill_handler] ['python', "
              "'pretrain_gpt.py'] exits with return code = 1",
              "pdsh@dgx1: 192.168.5.2: ssh exited with exit code 1"]
    w = diagnose_text("\n".join(lines), rules)
    assert (w.first_rank, w.first_node) == (9, "192.168.5.2")
    assert lines[w.indicator_lines[0] - 1].endswith("doc_idx.npy'") and w.secondary_lines >= 1


def test_the_one_host_start_up_lines_announce_is_the_node(rules: Classifier) -> None:
    head = ["2022-06-06 09:17:48 | INFO | fairseq.distributed.utils | initialized host node-b7 as rank 0",
            "2022-06-06 09:17:48 | INFO | fairseq.distributed.utils | initialized host node-b7 as rank 1"]
    body = [f'[train_inner][INFO] - {{"epoch": 3, "update": 2.{k}, "loss": "0.2"}}' for k in range(10, 20)]
    tail = ["Traceback (most recent call last):", '  File "/usr/lib/python3.8/tempfile.py", line 497, in mkdtemp',
            "OSError: [Errno 28] No space left on device: '/tmp/pymp-2ntknau9'"]
    w = diagnose_text("\n".join(head + body + tail), rules)
    assert (w.first_rank, w.first_node) == (None, "node-b7")
    two = [head[0], head[1].replace("node-b7", "node-b8")]
    assert diagnose_text("\n".join(two + body + tail), rules).first_node is None  # two hosts: which one is not said
    world = ["[INFO] [launch.py:146:main] WORLD INFO DICT: {'localhost': [0, 1]}"]
    assert diagnose_text("\n".join(world + body + tail), rules).first_node is None


def test_a_timeout_printed_onto_a_progress_bar_is_the_first(rules: Classifier) -> None:
    # rank 0 hangs building a data set; rank 2's watchdog line lands on rank 0's tqdm bar (no
    # newline), before the other ranks' timeouts that start their own lines
    def timeout(rank: int) -> str:
        return (f"[rank{rank}]:[E922 03:32:06.1{rank} ProcessGroupNCCL.cpp:607] [Rank {rank}] Watchdog caught collective "
                "operation timeout: WorkNCCL(SeqNum=875, OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1800079 milliseconds")
    bar = "".join(f"\rGenerating train split: {k} examples [15:{k % 60:02d}, 17.25 examples/s]" for k in range(0, 900, 3))
    lines = ["Generating train split: 0 examples [00:00, ? examples/s]", bar + timeout(2), timeout(3), timeout(1),
             "W0922 03:32:08.993000 1397 torch/distributed/elastic/multiprocessing/api.py:858] Sending process 36 closing signal SIGTERM"]
    w = diagnose_text("\n".join(lines), rules)
    assert w.first_rank == 2 and w.indicator_lines[0] == 2


def test_nccl_s_own_cuda_failure_on_a_rank_is_the_root_and_its_last_error_is_shown(rules: Classifier) -> None:
    # a barrier fails on every rank with NCCL's "unhandled cuda error": a CUDA call of that rank
    # failed (not a peer gone); the first rank to print it failed first; its exception line is the
    # indicator line (rule R3), not NCCL's "Last error:" detail three lines below
    def rank(r: int) -> list[str]:
        return [f"[rank{r}]: Traceback (most recent call last):",
                f'[rank{r}]:   File "/srv/sft.py", line 30, in <module>',
                f"[rank{r}]:     with accelerator.main_process_first():",
                f'[rank{r}]:   File "/opt/torch/distributed/distributed_c10d.py", line 4635, in barrier',
                f"[rank{r}]:     work = group.barrier(opts=opts)",
                f"[rank{r}]: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:3356, unhandled "
                "cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.26.2",
                f"[rank{r}]: ncclUnhandledCudaError: Call to CUDA function failed.",
                f"[rank{r}]: Last error:",
                f"[rank{r}]: Cuda failure 2 'out of memory'"]
    lines = ["Preparing the dataset on the main process first"] + rank(3) + rank(0) + rank(1) + _TORCHRUN_TAIL
    w = diagnose_text("\n".join(lines), rules)
    assert w.first_rank == 3  # not torchrun's table (rank 2: the first to exit)
    got = [lines[n - 1] for n in w.indicator_lines]
    assert "DistBackendError" in got[0] and got[0].startswith("[rank3]")
    assert len(got) == 1
    assert is_root_error("torch.distributed.DistBackendError: NCCL error in: x.cpp:3356, unhandled cuda error (run with")
    # a peer that went away is a symptom of an error elsewhere
    assert not is_root_error("torch.distributed.DistBackendError: NCCL error in: x.cpp:1970, remote process exited or "
                             "there was a network error, NCCL version 2.21.5")


def test_the_ray_header_of_the_failed_task_is_shown_with_its_error(rules: Classifier) -> None:
    # Ray prints a task's error under a header naming the task, its process and node, without a
    # "Traceback" line; the embedded original error is the indicator line, not the wrapper header
    # (rule R4); the node and the phase are still read from the header and the error below it
    lines = ["(TaskRunner pid=81) step:699 - actor/loss:0.12 - critic/score:0.88",
             "(TaskRunner pid=81) step:700 - actor/loss:0.11 - critic/score:0.87",
             "(TaskRunner pid=81) step:701 - actor/loss:0.10 - critic/score:0.89",
             "Traceback (most recent call last):",
             '  File "/srv/main_ppo.py", line 40, in main',
             "    ray.get(runner.run.remote(config))",
             "ray.exceptions.RayTaskError(RuntimeError): ray::WorkerDict.save_checkpoint() (pid=412, ip=10.0.3.7, "
             "actor_id=8a01, repr=<WorkerDict object>)",
             '  File "/srv/fsdp_workers.py", line 900, in save_checkpoint',
             "    torch.save(state, path)",
             "RuntimeError: [enforce fail at inline_container.cc:815] . PytorchStreamWriter failed writing file data/7: "
             "file write failed"]
    w = diagnose_text("\n".join(lines), rules)
    assert w.indicator_lines == [10]
    assert w.first_node == "10.0.3.7" and w.phase == "checkpoint_save"


def test_the_thread_that_died_is_shown_with_its_error(rules: Classifier) -> None:
    lines = ["Using device: cuda", "Exception in thread Thread-3 (_producer):", "Traceback (most recent call last):",
             '  File "/usr/lib/python3.12/threading.py", line 1075, in _bootstrap_inner',
             "    self.run()", '  File "/srv/data.py", line 51, in _producer', "    batch = build(item)",
             "AttributeError: 'Tokenizer' object has no attribute 'image_token'"]
    w = diagnose_text("\n".join(lines), rules)
    assert w.indicator_lines == [8]  # rule R2: the "Exception in thread" header is not labelled
    assert ": AttributeError: 'Tokenizer' object" in w.story()  # the story states the error, not the header


def test_the_middle_links_of_a_raise_from_chain_are_not_shown(rules: Classifier) -> None:
    # FileNotFoundError, then while handling it a network error wrapped twice ("raise X from Y")
    # and finally requests' ConnectionError: the first error and the last one that ended the
    # process, nothing in between (README rule R4)
    def tb(frame: str, exc: str) -> list[str]:
        return ["Traceback (most recent call last):", f'  File "{frame}", line 10, in f', "    g()", exc]
    lines = (["init data pool"] + tb("/srv/pool.py", "FileNotFoundError: [Errno 2] No such file or directory: 'meta/info.json'")
             + ["", "During handling of the above exception, another exception occurred:", ""]
             + tb("/opt/urllib3/connection.py", "OSError: [Errno 101] Network is unreachable")
             + ["", "The above exception was the direct cause of the following exception:", ""]
             + tb("/opt/urllib3/connection.py", "urllib3.exceptions.NewConnectionError: Failed to establish a new connection")
             + ["", "The above exception was the direct cause of the following exception:", ""]
             + tb("/opt/urllib3/retry.py", "urllib3.exceptions.MaxRetryError: HTTPSConnectionPool(host='huggingface.co', "
                  "port=443): Max retries exceeded")
             + ["", "During handling of the above exception, another exception occurred:", ""]
             + tb("/opt/requests/adapters.py", "requests.exceptions.ConnectionError: (MaxRetryError(\"HTTPSConnectionPool("
                  "host='huggingface.co', port=443): Max retries exceeded\"))"))
    w = diagnose_text("\n".join(lines), rules)
    got = [lines[n - 1].split(":")[0] for n in w.indicator_lines]
    assert got == ["FileNotFoundError", "requests.exceptions.ConnectionError"]


def test_open_mpi_and_mpich_name_the_process_they_saw_end(rules: Classifier) -> None:
    # a rank killed without a word of its own (the kernel's OOM killer, a segfault): the MPI
    # launcher's report names its rank and node, and is the line to show
    steps = [f"[1,{r}]<stdout>:Epoch 2 batch {b} loss 0.{b}" for b in range(10, 14) for r in range(4)]
    ompi = ["--------------------------------------------------------------------------",
            "Primary job  terminated normally, but 1 process returned",
            "a non-zero exit code. Per user-direction, the job has been aborted.",
            "--------------------------------------------------------------------------",
            "--------------------------------------------------------------------------",
            "mpirun noticed that process rank 3 with PID 41234 on node gpu07 exited on signal 9 (Killed).",
            "--------------------------------------------------------------------------"]
    lines = steps + ompi
    w = diagnose_text("\n".join(lines), rules)
    assert (w.first_rank, w.first_node) == (3, "gpu07")
    assert any(lines[n - 1].startswith("mpirun noticed") for n in w.indicator_lines)
    mpich = ["===================================================================================",
             "=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES",
             "=   RANK 5 PID 1234 RUNNING AT gpu-b12",
             "=   KILLED BY SIGNAL: 11 (Segmentation fault)",
             "==================================================================================="]
    w = diagnose_text("\n".join(steps + mpich), rules)
    assert (w.first_rank, w.first_node) == (5, "gpu-b12")
    assert origin_of("srun: error: gpu07: tasks 0-3: Exited with exit code 1") == Origin(None, "gpu07")  # every task


def test_srun_s_task_line_names_the_host_of_a_labelled_task(rules: Classifier) -> None:
    # srun --label: "2: " is task 2; srun's exit line for task 2 names its host, not the last
    # srun line (another task's, on another node)
    lines = [f"{t}: Epoch 1 step {k} loss 0.5" for k in range(5) for t in range(4)]
    lines += ["2: Traceback (most recent call last):", '2:   File "/srv/train.py", line 80, in <module>',
              "2:     x = batch.cuda()", "2: RuntimeError: CUDA error: an illegal memory access was encountered",
              "0: [E ProcessGroupNCCL.cpp:1537] [PG 0 Rank 0] Process group watchdog thread terminated with exception",
              "srun: error: gpu12: task 2: Exited with exit code 1", "srun: error: gpu11: task 0: Aborted (core dumped)"]
    w = diagnose_text("\n".join(lines), rules)
    assert (w.first_rank, w.first_node) == (2, "gpu12")


def test_what_fails_after_the_launcher_s_verdict_is_another_command(rules: Classifier) -> None:
    # a job script runs two torchrun stages: the first fails on rank 0 and torchrun reports it;
    # the next stage then fails because the first left nothing behind: README rule R7, the root
    # and the terminal error (the log shows the link: the missing checkpoint)
    disk = "OSError: Not enough disk space. Needed: 153.54 MiB"
    missing = "FileNotFoundError: [Errno 2] No such file or directory: '/root/.cache/mid_checkpoints'"
    lines = [f"step {k:05d}/21400 | loss: 2.1 | dt: 410ms" for k in range(21390, 21400)]
    lines += _rank_traceback(0, disk) + _TORCHRUN_TAIL + ["Loading the mid-trained model"] + _rank_traceback(0, missing)
    w = diagnose_text("\n".join(lines), rules)
    got = [lines[n - 1] for n in w.indicator_lines]
    assert len(got) == 2 and got[0].endswith(disk) and got[1].endswith(missing)
    # an unrelated error of the next command (no link shown) does not replace the run's root
    other = "ValueError: unknown plot style 'seaborn-v0_8'"
    lines = lines[:-4] + _rank_traceback(0, other)
    got = [lines[n - 1] for n in diagnose_text("\n".join(lines), rules).indicator_lines]
    assert got == [f"[rank0]: {disk}"]


def test_the_terminal_error_of_a_later_stage_is_its_first_printing_whichever_rank(rules: Classifier) -> None:
    # the first stage fails on rank 0; the next torchrun stage fails on what it left missing and
    # rank 3 prints that first: README rules R7 (root and terminal error) and R5 (the terminal
    # error once, on the earliest line that shows it, whichever rank printed it)
    disk = "OSError: Not enough disk space. Needed: 153.54 MiB"
    missing = "FileNotFoundError: [Errno 2] No such file or directory: '/root/.cache/mid_checkpoints'"
    lines = [f"step {k:05d}/21400 | loss: 2.1 | dt: 410ms" for k in range(21390, 21400)]
    lines += _rank_traceback(0, disk) + _TORCHRUN_TAIL + ["Loading the mid-trained model"]
    lines += _rank_traceback(3, missing) + _rank_traceback(0, missing) + _TORCHRUN_TAIL
    got = [lines[n - 1] for n in diagnose_text("\n".join(lines), rules).indicator_lines]
    assert got == [f"[rank0]: {disk}", f"[rank3]: {missing}"]


def test_a_job_script_that_runs_its_launch_again_is_labelled_at_its_last_run(rules: Classifier) -> None:
    # a loop in the job script relaunches torchrun and each launch fails the same way: README
    # rule R1 (only the last attempt), not R5's earliest copy (the copies are not ranks of one run)
    err = "FileNotFoundError: [Errno 2] No such file or directory: '/data/qqp/test.jsonl'"
    lines = ["Sampling with checkpoint ema_0.9999_050000.pt"]
    for _ in range(3):
        lines += _rank_traceback(0, err)[1:] + _TORCHRUN_TAIL
    w = diagnose_text("\n".join(lines), rules)
    assert w.indicator_lines == [len(lines) - len(_TORCHRUN_TAIL)]




def _launch(error: str, *, module: bool = False) -> list[str]:
    """One start of a training script that dies at its first batch with ``error``."""
    frames = (['  File "/usr/lib/python3.10/runpy.py", line 196, in _run_module_as_main',
               '    return _run_code(code, main_globals, None,'] if module else [])
    return ["/opt/env/lib/python3.10/site-packages/torchvision/models/_utils.py:208: UserWarning: The parameter "
            "'pretrained' is deprecated since 0.13",
            "  warnings.warn(",
            "Using device: cuda",
            "loading train data.......",
            "Epoch 1/15:   0%|          | 0/136 [00:00<?, ?batch/s]",
            "Traceback (most recent call last):", *frames,
            '  File "/home/u/distill/train.py", line 180, in <module>',
            "    t_feats = teacher(images)",
            '  File "/home/u/distill/models/clip.py", line 42, in forward',
            "    out = self.clip_model(x)",
            error]


_OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 16.00 MiB. GPU 0 has a total capacity "
        "of 23.69 GiB of which 19.12 MiB is free.")


@pytest.mark.parametrize("module", [False, True])
def test_a_script_started_again_after_its_uncaught_exception_is_labelled_at_its_last_start(
        rules: Classifier, module: bool) -> None:
    # the exception reached the main module (``in <module>``, or runpy's frame under ``python -m``):
    # Python printed it and the process exited; the start-up printed again is a new start of the
    # program (a job script's loop), and README rule R1 labels the last one
    lines = _launch(_OOM, module=module) + _launch(_OOM, module=module)
    assert diagnose_text("\n".join(lines), rules).indicator_lines == [len(lines)]
    # a later start that failed otherwise: its error only (R1), not the first start's
    lines = _launch(_OOM, module=module) + _launch("ModuleNotFoundError: No module named 'src'", module=module)
    assert diagnose_text("\n".join(lines), rules).indicator_lines == [len(lines)]


def test_copies_of_an_uncaught_exception_without_a_new_start_between_are_labelled_at_the_first(
        rules: Classifier) -> None:
    # two processes of one run print the same exception back to back (R5: the earliest copy): no
    # start-up printed between them
    one = _launch(_OOM)
    lines = one + one[5:]
    assert diagnose_text("\n".join(lines), rules).indicator_lines == [len(one)]
    # an exception caught inside the program (its traceback does not reach the main module) and
    # printed: the same start-up lines after it are not a new start of the program
    caught = [ln for ln in _launch(_OOM) if "in <module>" not in ln and "t_feats" not in ln]
    lines = caught + caught
    assert diagnose_text("\n".join(lines), rules).indicator_lines == [len(caught)]


def test_a_second_agent_that_dies_like_the_first_is_labelled_at_its_own_error(rules: Classifier) -> None:
    # a sweep agent's run fails (caught, the agent goes on), then the agent itself dies on an
    # uncaught exception; a second agent started later prints the same lines and dies the same
    # way: README rule R1, the last agent's error, not the first's nor its run's
    run = ["Traceback (most recent call last):",
           '  File "/opt/env/lib/python3.9/site-packages/ultralytics/yolo/cli.py", line 56, in cli',
           "    func(cfg)",
           "AssertionError: File not found: yolov8/tt100k.yaml"]
    agent = ["wandb: Synced 6 W&B file(s), 0 media file(s), 0 artifact file(s) and 0 other file(s)",
             "wandb: ERROR Error while calling W&B API: could not find agent m7p23g9l during agentHeartbeat",
             "wandb: Terminating and syncing runs. Press ctrl-c to kill.",
             "Traceback (most recent call last):",
             '  File "/opt/env/bin/wandb", line 8, in <module>',
             "    sys.exit(cli())",
             "wandb.errors.CommError: Permission denied, ask the project owner to grant you access"]
    lines = run + ["Choosing the GPU device with the most free memory..."] + agent + agent
    assert diagnose_text("\n".join(lines), rules).indicator_lines == [len(lines)]


def test_hydra_s_report_of_the_job_s_exception_ends_its_process(rules: Classifier) -> None:
    # Hydra prints the job's exception without the frames above the task function, then
    # "Set the environment variable HYDRA_FULL_ERROR=1 ..." and exits (run_and_report: sys.exit(1));
    # the sweep's agent then starts the next run, which fails otherwise: R1, the last run's error
    hydra = ["wandb: Agent Starting Run: 3fjq2 with config:", "wandb: \tlr0: 0.01",
             "Ultralytics YOLOv8.0.6 Python-3.9.13 torch-2.0.0 CUDA:0 (NVIDIA GeForce RTX 2080, 7982MiB)",
             "Error executing job with overrides: ['cfg=/tmp/train_2023.yaml']",
             "Traceback (most recent call last):",
             '  File "/opt/env/lib/python3.9/site-packages/ultralytics/yolo/cli.py", line 56, in cli',
             "    func(cfg)",
             "AssertionError: File not found: yolov8/tt100k.yaml", "",
             "Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace."]
    other = ["wandb: Agent Starting Run: 9kx1a with config:", "wandb: \tlr0: 0.02",
             "Ultralytics YOLOv8.0.6 Python-3.9.13 torch-2.0.0 CUDA:0 (NVIDIA GeForce RTX 2080, 7982MiB)",
             "Traceback (most recent call last):",
             '  File "/opt/env/bin/yolo", line 8, in <module>',
             "    sys.exit(entrypoint())",
             "KeyError: 'lr0'"]
    lines = hydra + other
    assert diagnose_text("\n".join(lines), rules).indicator_lines == [len(lines)]


def test_a_launcher_verdict_only_when_the_child_printed_no_error_and_then_its_first_line(rules: Classifier) -> None:
    # R8: the child died without a word (SIGKILL): torchrun's first verdict line, one line only
    lines = [
        "step 10 loss 0.31", "step 11 loss 0.30",
        "E0312 08:00:10.200000 900 api.py:869] failed (exitcode: -9) local_rank: 1 (pid: 903) of binary: /usr/bin/python3",
        "Traceback (most recent call last):", '  File "/usr/bin/torchrun", line 8, in <module>', "    sys.exit(main())",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
        "============================================================", "train.py FAILED",
        "------------------------------------------------------------", "Root Cause (first observed failure):", "[0]:",
        "  time      : 2025-03-12_08:00:10", "  host      : node-a3", "  rank      : 1 (local_rank: 1)",
        "  exitcode  : -9 (pid: 903)",
    ]
    w = diagnose_text("\n".join(lines), rules)
    assert w.indicator_lines == [3]


def test_an_exception_reprinted_after_the_excepthook_failed_is_labelled_once(rules: Classifier) -> None:
    # R4: Python prints the exception again after "Original exception was:"; the first printing only
    lines = [
        "epoch 2 step 40 loss 0.8", "Traceback (most recent call last):", '  File "train.py", line 5, in <module>',
        "    run()", "RuntimeError: batch1 must be a 3D tensor", "",
        "Original exception was:", "Traceback (most recent call last):", '  File "train.py", line 5, in <module>',
        "    run()", "RuntimeError: batch1 must be a 3D tensor",
    ]
    w = diagnose_text("\n".join(lines), rules)
    assert w.indicator_lines == [5]


def test_other_ranks_copies_and_sruns_exit_lines_are_not_indicator_lines(rules: Classifier) -> None:
    # R5: the root error once, on the first rank to print it; R8/R6: srun's exit and step-abort
    # lines are not labelled when the failing process printed its error
    lines = [
        "0: step 30 loss 2.1", "1: step 30 loss 2.2",
        "1: Traceback (most recent call last):", '1:   File "train.py", line 40, in <module>', "1:     out = model(x)",
        "1: RuntimeError: Input type (torch.cuda.FloatTensor) and weight type (torch.FloatTensor) should be the same",
        "0: Traceback (most recent call last):", '0:   File "train.py", line 40, in <module>', "0:     out = model(x)",
        "0: RuntimeError: Input type (torch.cuda.FloatTensor) and weight type (torch.FloatTensor) should be the same",
        "srun: error: gpu-04: tasks 0-1: Exited with exit code 1",
        "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.",
    ]
    w = diagnose_text("\n".join(lines), rules)
    assert w.indicator_lines == [6]


def test_a_silent_kill_gets_torchruns_first_verdict_line_not_its_table(rules: Classifier) -> None:
    # R8: nothing of the child's own; torchrun's "failed (exitcode" names it first (the table's
    # "traceback : Signal 9" row says the same later)
    lines = [
        "Inference with localizer ...",
        "[2024-02-02 16:56:08,758] torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: -9) "
        "local_rank: 0 (pid: 76739) of binary: /usr/bin/python3",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
        "Root Cause (first observed failure):", "[0]:", "  host      : gpu", "  rank      : 0 (local_rank: 0)",
        "  exitcode  : -9 (pid: 76739)", "  error_file: <N/A>", "  traceback : Signal 9 (SIGKILL) received by PID 76739",
    ]
    w = diagnose_text("\n".join(lines), rules)
    assert w.indicator_lines == [2]


def test_a_dataloader_workers_re_raise_counts_by_its_original_error(rules: Classifier) -> None:
    # R4: "Caught X in DataLoader worker process N." wraps the worker's traceback; the original
    # exception line (with the bare assert's source line above it, R3) is what is labelled
    lines = [
        "epoch 0 step 12 loss 0.9", "Traceback (most recent call last):", '  File "train.py", line 30, in <module>',
        "    for batch in loader:", "AssertionError: Caught AssertionError in DataLoader worker process 0.",
        "Original Traceback (most recent call last):", '  File "/srv/data.py", line 77, in __getitem__',
        "    assert x.shape == (3, 64)", "AssertionError",
    ]
    w = diagnose_text("\n".join(lines), rules)
    assert 5 not in w.indicator_lines and 9 in w.indicator_lines


def test_never_more_than_three_lines_the_root_first_and_the_last_error(rules: Classifier) -> None:
    # R9: a long chain of distinct exceptions keeps its first (the root) and its last (what ended
    # the process) within three lines
    def tb(exc: str) -> list[str]:
        return ["Traceback (most recent call last):", '  File "/srv/job.py", line 10, in f', "    g()", exc]
    during = ["", "During handling of the above exception, another exception occurred:", ""]
    lines = (["start"] + tb("FileNotFoundError: [Errno 2] No such file or directory: 'meta/info.json'") + during
             + tb("OSError: [Errno 101] Network is unreachable") + during
             + tb("TimeoutError: timed out") + during
             + tb("ValueError: could not build the dataset index") + during
             + tb("RuntimeError: dataset setup failed after 3 tries"))
    w = diagnose_text("\n".join(lines), rules)
    got = [lines[n - 1] for n in w.indicator_lines]
    assert len(got) <= 3
    assert got[0].startswith("FileNotFoundError") and got[-1].startswith("RuntimeError: dataset setup failed")


def test_a_silent_child_under_srun_gets_the_earliest_verdict_not_sruns_later_exit_line(rules: Classifier) -> None:
    # R8: the first verdict line that names the failed process; srun's exit line comes later
    lines = [
        "step 200 loss 1.1",
        "E0119 09:59:04.513000 492812 api.py:874] failed (exitcode: 1) local_rank: 1 (pid: 492817) of binary: /usr/bin/python",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
        "Root Cause (first observed failure):", "[0]:", "  host      : h01", "  rank      : 1 (local_rank: 1)",
        "  exitcode  : 1 (pid: 492817)",
        "srun: error: h01: task 0: Exited with exit code 1",
    ]
    w = diagnose_text("\n".join(lines), rules)
    assert w.indicator_lines == [2]


def _chained(prefix: str, first: str, last: str) -> list[str]:
    return [f"{prefix}Traceback (most recent call last):",
            f'{prefix}  File "/srv/lib/torch/serialization.py", line 944, in save',
            f"{prefix}    _save(",
            f"{prefix}{first}",
            "",
            f"{prefix}During handling of the above exception, another exception occurred:",
            "",
            f"{prefix}Traceback (most recent call last):",
            f'{prefix}  File "/srv/job/train.py", line 212, in <module>',
            f"{prefix}    trainer.train()",
            f"{prefix}{last}"]


def test_a_chain_printed_onto_a_bar_above_the_other_ranks_progress_counts_from_its_first_exception(
        rules: Classifier) -> None:
    # rank 0's checkpoint save fails and prints the chain unprefixed onto tqdm's bar; rank 2
    # prints the same chain with its prefix; the other ranks' bars go on a little before they die
    write = "RuntimeError: [enforce fail at inline_container.cc:815] . PytorchStreamWriter failed writing file data/2: file write failed"
    pos = "RuntimeError: [enforce fail at inline_container.cc:626] . unexpected pos 170401152 vs 170401040"
    lines = [f" 41%|####      | {k}/1200 [1:53:{k % 60:02d}<2:35:46, 13.30s/it]" for k in range(480, 500)]
    lines[-1] += "Traceback (most recent call last):"
    lines += _chained("", write, pos)[1:]
    lines += _chained("[rank2]: ", write.replace("data/2", "data/1"), pos.replace("152 vs", "153 vs"))
    lines += [f" 42%|####      | 500/1200 [1:53:{k:02d}<2:34:15, 13.22s/it]" for k in range(10, 20)]
    lines += ["[2024-05-02 10:11:12,345] [INFO] [launch.py:319:sigkill_handler] Killing subprocess 7601"]
    w = diagnose_text("\n".join(lines), rules)
    got = [lines[n - 1] for n in w.indicator_lines]
    assert got == [write, pos]  # the chain's first and last (R4), the first printing's (R5)


def test_a_rank_s_traceback_printed_unprefixed_then_with_its_prefix_counts_at_its_first_printing(
        rules: Classifier) -> None:
    # Python prints the rank's traceback, then torch.distributed's error handler prints it again
    # with "[rank0]: "; the other ranks' lines follow
    disk = "OSError: Not enough disk space. Needed: Unknown size (download: 45.32 MiB, generated: 153.54 MiB)"
    lines = [f"step {k:05d}/21400 | loss: 2.1 | dt: 410ms" for k in range(21390, 21400)]
    lines += ["Traceback (most recent call last):", '  File "/srv/job/train.py", line 41, in <module>',
              '    out = model(batch)', disk]
    lines += _rank_traceback(0, disk) + _rank_traceback(3, disk) + _rank_traceback(5, disk)
    lines += [f"step {k:05d}/21400 | loss: 2.1 | dt: 410ms" for k in range(21400, 21403)]
    lines += _TORCHRUN_TAIL
    w = diagnose_text("\n".join(lines), rules)
    assert [lines[n - 1] for n in w.indicator_lines] == [disk]
    assert w.indicator_lines[0] == 14


def test_vllm_s_state_dump_at_error_level_is_not_the_error_and_the_abort_after_a_timeout_adds_nothing(
        rules: Classifier) -> None:
    # two ranks hang in a collective; rank 0's watchdog takes the process down, C++ aborts,
    # and the colocated vLLM engine dumps its config at ERROR level on the way out
    lines = [f"  0%|          | {k}/200 [00:0{k}<12:08,  3.66s/it]" for k in range(0, 2)]
    lines[-1] += ("[rank0]:[E405 03:51:41.285624929 ProcessGroupNCCL.cpp:688] [Rank 0] Watchdog caught collective "
                  "operation timeout: WorkNCCL(SeqNum=404, OpType=_ALLGATHER_BASE, NumelIn=1140480, NumelOut=2280960, "
                  "Timeout(ms)=600000) ran for 600053 milliseconds before timing out.")
    lines += ["[rank1]:[E405 03:51:41.321650177 ProcessGroupNCCL.cpp:688] [Rank 1] Watchdog caught collective "
              "operation timeout: WorkNCCL(SeqNum=405, OpType=_ALLGATHER_BASE, NumelIn=1216512, NumelOut=2433024, "
              "Timeout(ms)=600000) ran for 600061 milliseconds before timing out.",
              "[rank0]:[E405 03:52:41.816364512 ProcessGroupNCCL.cpp:763] [Rank 0] To avoid data inconsistency, we are "
              "taking the entire process down.",
              "terminate called after throwing an instance of 'c10::DistBackendError'",
              "ERROR 04-05 03:52:41 [dump_input.py:72] Dumping input data for V1 LLM engine (v0.19.0) with config: "
              "model='Qwen/Qwen2.5-7B-Instruct', speculative_config=None, tokenizer='Qwen/Qwen2.5-7B-Instruct'",
              "ERROR 04-05 03:52:41 [dump_input.py:79] Dumping scheduler output for model execution: "
              "SchedulerOutput(scheduled_new_reqs=[], num_scheduled_tokens={})",
              "  what():  [PG ID 3 PG GUID 4 Rank 0] Process group watchdog thread terminated with exception: [Rank 0] "
              "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=404, OpType=_ALLGATHER_BASE)"]
    w = diagnose_text("\n".join(lines), rules)
    assert w.indicator_lines == [2]  # the first rank's timeout, printed onto the bar (R6, R2)


def test_an_exception_between_the_first_and_last_of_a_chain_is_not_labelled(rules: Classifier) -> None:
    # the launcher gets SIGHUP; its logging call fails while the signal's exception is handled,
    # and the same signal exception ends the chain (R4: the first line, nothing in between)
    signal = "torch.distributed.elastic.multiprocessing.api.SignalException: Process 47068 got signal: 1"
    lines = ["[2025-02-18 15:50:58,686] torch.distributed.elastic.multiprocessing.api: [WARNING] Sending process "
             f"{p} closing signal SIGTERM" for p in (47144, 47145)]
    lines += ["Traceback (most recent call last):",
              '  File "/usr/lib/python3/dist-packages/torch/distributed/elastic/agent/server/api.py", line 877, in _invoke_run',
              "    time.sleep(monitor_interval)",
              '  File "/usr/lib/python3/dist-packages/torch/distributed/elastic/multiprocessing/api.py", line 62, in _terminate_process_handler',
              '    raise SignalException(f"Process {os.getpid()} got signal: {sigval}", sigval=sigval)',
              signal, "", "During handling of the above exception, another exception occurred:", "",
              "Traceback (most recent call last):",
              '  File "/usr/lib/python3.8/logging/__init__.py", line 1697, in isEnabledFor',
              "    return self._cache[level]",
              "KeyError: 30", "", "During handling of the above exception, another exception occurred:", "",
              "Traceback (most recent call last):",
              '  File "/usr/lib/python3/dist-packages/torch/distributed/run.py", line 797, in run',
              "    elastic_launch(",
              '  File "/usr/lib/python3/dist-packages/torch/distributed/elastic/multiprocessing/api.py", line 62, in _terminate_process_handler',
              '    raise SignalException(f"Process {os.getpid()} got signal: {sigval}", sigval=sigval)',
              signal]
    w = diagnose_text("\n".join(lines), rules)
    assert [lines[n - 1] for n in w.indicator_lines] == [signal]
    assert w.indicator_lines == [8]


def test_a_leftover_breakpoint_in_a_batch_job_is_the_root_and_bdbquit_the_end(rules: Classifier) -> None:
    # pdb stops each rank at a breakpoint; srun gives it no input, so every rank quits the debugger
    # (README rule R7: the first prompt and the quit, not the launcher's verdict)
    lines = [f"step {k:05d}/00813 ({k * 100 / 813:.2f}%) | loss: 1.2 | dt: 410ms" for k in range(805, 814)]
    lines += ["> /srv/nanochat/scripts/chat_eval.py(59)run_generative_eval()",
              "-> outcomes = [task.evaluate(conversation, c) for c in completions]", "(Pdb) "]
    lines += _rank_traceback(1, "bdb.BdbQuit")
    lines += ["> /srv/nanochat/scripts/chat_eval.py(59)run_generative_eval()",
              "-> outcomes = [task.evaluate(conversation, c) for c in completions]", "(Pdb) "]
    lines += _rank_traceback(0, "bdb.BdbQuit") + _TORCHRUN_TAIL
    lines += ["srun: error: h01: task 0: Exited with exit code 1"]
    w = diagnose_text("\n".join(lines), rules)
    assert w.diagnosis.category != "none"
    assert [lines[n - 1] for n in w.indicator_lines] == ["(Pdb) ", "[rank1]: bdb.BdbQuit"]
    assert "bdb.BdbQuit (lines" in w.story()  # the story names the error, not the prompt


def test_a_run_that_diverged_long_before_its_error_shows_where_the_loss_went_nan(rules: Classifier) -> None:
    # the loss is NaN from epoch 3 on; early stopping ends training and the evaluation step then
    # fails; the first NaN reading is the root, the evaluation's error the terminal line (R7)
    lines = ["2025-04-08 17:20:21,877 [INFO] Using CosineAnnealingLR scheduler"]
    for e in range(1, 11):
        loss = "0.93" if e < 3 else "nan"
        lines += [f"2025-04-08 1{e % 10}:20:21,877 [INFO] Started epoch {e}",
                  f"2025-04-08 1{e % 10}:32:34,921 [INFO] [Epoch {e}] Train Loss: {loss}, Val Loss: {loss}, LR: 0.0001"]
    lines += ["2025-04-09 05:23:59,909 [INFO] Early stopping triggered after 10 epochs",
              "2025-04-09 05:23:59,911 [INFO] Training completed. Starting evaluation...",
              "2025-04-09 05:25:29,465 [ERROR] Evaluation failed: Command '['python', 'evaluate.py', '--model_path', "
              "'out/trained_model.pth']' returned non-zero exit status 1."]
    w = diagnose_text("\n".join(lines), rules)
    assert w.diagnosis.category == "model_diverged"
    assert w.indicator_lines == [7, len(lines)] and lines[6].endswith("Train Loss: nan, Val Loss: nan, LR: 0.0001")
    assert w.step == "10"  # read where the run failed, not at the root
    assert "Evaluation failed" in w.story()


def test_a_launcher_s_verdict_on_a_silent_child_is_one_line_without_its_code_line(rules: Classifier) -> None:
    # accelerate's child was SIGKILLed without a word: its CalledProcessError is the only error
    # line (R8: one verdict line), never the "raise" code line above it (R2)
    lines = ["  5%|5         | 50/1000 [01:40<31:40,  2.00s/it]",
             "Traceback (most recent call last):",
             '  File "/opt/conda/bin/accelerate", line 8, in <module>',
             "    sys.exit(main())",
             '  File "/opt/conda/lib/python3.10/site-packages/accelerate/commands/launch.py", line 703, in simple_launcher',
             "    raise subprocess.CalledProcessError(returncode=process.returncode, cmd=cmd)",
             "subprocess.CalledProcessError: Command '['/opt/conda/bin/python', 'train.py']' died with <Signals.SIGKILL: 9>."]
    w = diagnose_text("\n".join(lines), rules)
    assert w.indicator_lines == [7]


_NCCL_OOM = ["torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:3356,"
             " unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.26.2",
             "ncclUnhandledCudaError: Call to CUDA function failed.", "Last error:", "Cuda failure 2 'out of memory'"]


def _nccl_oom_log() -> list[str]:
    # torch.distributed prefixes each line of a rank's message; NCCL's detail lines ("Last error:",
    # what failed) follow its error line; other ranks print in between
    lines = [f"[rank{r}]: Preparing the dataset on the main process first" for r in range(3)]
    lines += _rank_traceback(2, _NCCL_OOM[0])[:-1]
    lines += [f"[rank2]: {_NCCL_OOM[0]}", "[rank0]: Preparing the dataset: 1 examples"]
    lines += [f"[rank2]: {x}" for x in _NCCL_OOM[1:]]
    lines += [f"[rank0]: Preparing the dataset: {k} examples" for k in range(2, 4)]
    lines += _rank_traceback(0, _NCCL_OOM[0])[:-1] + [f"[rank0]: {x}" for x in _NCCL_OOM]
    return lines + _TORCHRUN_TAIL


def test_the_classifier_reads_the_first_rank_s_own_lines_printed_among_other_ranks(rules: Classifier) -> None:
    # the first failing rank's prefixed lines after other ranks' lines are its own: its
    # message's detail says the cause (a CUDA allocation), not the NCCL wrapper
    w = diagnose_text("\n".join(_nccl_oom_log()), rules)
    assert w.first_rank == 2 and w.diagnosis.category == "gpu_oom"


def test_a_message_over_several_lines_is_shown_by_its_first(rules: Classifier) -> None:
    # README rule R3: a message spanning several lines, its first line (here the detail line is
    # also what the classifier quotes)
    lines = _nccl_oom_log()[:-len(_TORCHRUN_TAIL)]
    lines = [x for x in lines if not x.startswith("[rank0]: Preparing")]
    w = diagnose_text("\n".join(lines), rules)
    assert [lines[n - 1] for n in w.indicator_lines] == ["[rank2]: " + _NCCL_OOM[0]]


def test_a_logger_s_message_over_several_lines_heads_the_traceback_below_it(rules: Classifier) -> None:
    # logger.exception / logger.error(..., exc_info=True): the message (NCCL's, with its detail
    # lines), then the traceback; then the uncaught re-raise: the exception line is the error (R3)
    err = ["torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.hpp:268, "
           "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5",
           "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error. ",
           "Last error:", "socketStartConnect: Connect to 10.0.3.7<41233> failed : Connection refused"]
    lines = ["2025-01-08 21:47:34,304 - worker-1 - INFO - loading the model", "2025-01-08 21:47:34,315 - worker-1 - INFO - chunk 1/1",
             "2025-01-08 21:47:34,398 - worker-1 - ERROR - inference failed: " + err[0].split(": ", 1)[1], *err[1:],
             "Traceback (most recent call last):", '  File "/srv/infer.py", line 340, in recv', "    dist.recv(shape, src=0)",
             *err, "Traceback (most recent call last):", '  File "/srv/infer.py", line 446, in <module>', "    main()", *err]
    w = diagnose_text("\n".join(lines), rules)
    assert w.indicator_lines == [lines.index(err[0]) + 1]


def test_an_error_on_nan_values_after_a_run_that_went_on_diverged_shows_where_it_diverged(rules: Classifier) -> None:
    # the loss goes nan at epoch 6 and the run goes on to its end; the final t-SNE of the
    # embeddings then fails on their NaNs: README rule R7, the first NaN reading and the error
    lines = [f"Train Epoch: {e} [{b}/9500]\tLoss: {3500 - e:.4f}\tGenLoss: {3400 - e:.4f}" for e in (4, 5) for b in (0, 1280)]
    lines += [f"Train Epoch: {e} [{b}/9500]\tLoss: nan\tGenLoss: nan" for e in (6, 7, 8) for b in (0, 1280)]
    lines += ["====> Epoch: 8 Average loss: nan", "====> Test set loss: nan", "--- 2965.7 seconds ---",
              "Traceback (most recent call last):", '  File "vae.py", line 339, in test',
              "    Z_embedded = TSNE(n_components=2).fit_transform(z)",
              "ValueError: Input contains NaN, infinity or a value too large for dtype('float32')."]
    w = diagnose_text("\n".join(lines), rules)
    assert w.indicator_lines == [5, len(lines)]
    # one NaN reading right before the error is the failing step itself, not an earlier divergence
    one = lines[:4] + ["step 7 loss: nan"] + lines[-4:]
    assert diagnose_text("\n".join(one), rules).indicator_lines == [len(one)]


def test_an_exception_that_points_at_the_root_cause_above_is_the_terminal_line(rules: Classifier) -> None:
    # vLLM's engine core process logs its own error, then the front end raises "Engine core
    # initialization failed. See root cause above.": the process-ending error whose link to the root the log shows
    # (README R7: the root, then the terminal line; every dev row with such a line labels both)
    core = "(EngineCore_0 pid=4411) ERROR 08-25 18:56:06 [core.py:700] "
    nvcc = "FileNotFoundError: [Errno 2] No such file or directory: '/usr/local/cuda-12.6/bin/nvcc'"
    lines = ["INFO 08-25 18:55:40 [__init__.py:241] Automatically detected platform cuda.",
             core + "EngineCore failed to start.", core + "Traceback (most recent call last):",
             core + '  File "/opt/vllm/v1/engine/core.py", line 691, in run_engine_core',
             core + "    engine_core = EngineCoreProc(*args, **kwargs)", core + nvcc,
             "(EngineCore_0 pid=4411) Process EngineCore_0:", "(EngineCore_0 pid=4411) Traceback (most recent call last):",
             '(EngineCore_0 pid=4411)   File "/usr/lib/python3.11/multiprocessing/process.py", line 314, in _bootstrap',
             "(EngineCore_0 pid=4411)     self.run()", "(EngineCore_0 pid=4411) " + nvcc,
             "Traceback (most recent call last):", '  File "/srv/extract.py", line 88, in <module>',
             "    llm = LLM(model=args.model)", '  File "/opt/vllm/v1/engine/utils.py", line 691, in wait_for_engine_startup',
             "    raise RuntimeError(\"Engine core initialization failed. \"",
             "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}"]
    w = diagnose_text("\n".join(lines), rules)
    got = [lines[n - 1] for n in w.indicator_lines]
    assert len(got) == 2 and got[0].endswith(nvcc) and "See root cause above" in got[1]


_USAGE = ["usage: zero_shot.py [-h] [--base_model BASE_MODEL] [--tasks TASKS [TASKS ...]]",
          "                    [--output_path OUTPUT_PATH] [--limit LIMIT]"]


def test_an_argparse_error_ends_its_process_and_what_fails_later_is_another(rules: Classifier) -> None:
    # nohup appends two launches: the first stops at argparse (it exits with status 2), the
    # second fails on its own: no link shown, the terminal error only (README R1, R7)
    argparse = "zero_shot.py: error: unrecognized arguments: --quantized_weight_yaml run_38/checkpoints.yaml"
    task = "KeyError: 'winograde'"
    lines = ["pid 119224", *_USAGE, argparse, "pid 119522", "Model loaded.", "Building the task dict",
             "Traceback (most recent call last):", '  File "/srv/zero_shot.py", line 96, in <module>',
             "    tasks = get_task_dict(args.tasks)", task]
    assert diagnose_text("\n".join(lines), rules).indicator_lines == [len(lines)]
    # the README's R7 example: the later stage names what the first left missing: both
    missing = "FileNotFoundError: [Errno 2] No such file or directory: 'results/y_pred.npy'"
    lines = lines[:-1] + [missing]
    assert diagnose_text("\n".join(lines), rules).indicator_lines == [4, len(lines)]


def test_only_argparse_s_usage_error_and_python_s_missing_script_end_their_process() -> None:
    assert ends_own_process(_USAGE + ["zero_shot.py: error: argument --limit: invalid int value: 'x'"], 2)
    assert ends_own_process(["python: can't open file '/srv/trian.py': [Errno 2] No such file or directory"], 0)
    assert not ends_own_process(_USAGE + ["srun: error: gpu12: task 0: Exited with exit code 2"], 2)
    assert not ends_own_process(["zero_shot.py: error: unrecognized arguments: --x"], 0)  # no usage block above


def test_a_dataloader_worker_s_error_is_shown_by_its_original_exception(rules: Classifier) -> None:
    # "Caught X in DataLoader worker process N." re-raises the worker's error, whose original
    # traceback follows (README R4); srun's "0: " labels; the second printing, split by
    # another process's output ("AssertionError" / ": SharedMemory ..."), is the same error
    def frames(lines: list[str]) -> list[str]:
        return [f"0: {x}" for x in lines]
    original = "AssertionError: SharedMemory objects are None."
    lines = frames(["Start epoch 1", "Traceback (most recent call last):", '  File "/srv/train.py", line 88, in train_one_epoch',
                    "    for i, batch in enumerate(dataloader):", '  File "/opt/torch/_utils.py", line 719, in reraise',
                    "    raise exception", "AssertionError: Caught AssertionError in DataLoader worker process 0.",
                    "Original Traceback (most recent call last):", '  File "/srv/mixtera/dataset.py", line 140, in __iter__',
                    "    assert self._shm is not None, \"SharedMemory objects are None.\"", original, "",
                    "Traceback (most recent call last):", '  File "/srv/train.py", line 88, in train_one_epoch',
                    "    raise exception", "AssertionError: Caught AssertionError in DataLoader worker process 0.",
                    "Original Traceback (most recent call last):", '  File "/srv/mixtera/dataset.py", line 140, in __iter__',
                    "    assert self._shm is not None", "AssertionError", ": SharedMemory objects are None."])
    lines.append("srun: error: nid005059: task 0: Exited with exit code 1")
    w = diagnose_text("\n".join(lines), rules)
    assert [lines[n - 1] for n in w.indicator_lines] == ["0: " + original]
