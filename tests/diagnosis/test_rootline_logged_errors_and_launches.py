"""Indicator lines (README "Indicator lines: rules" R1-R9) of formats the reader misread in round
14, each excerpt written by hand in the format the library or logger prints."""

from __future__ import annotations

from gpulens.diagnosis.classifier import Classifier
from gpulens.diagnosis.logread import diagnose_text
from tests.diagnosis.test_indicator_formats import _picked, _tb

#: torch._logging's glog-style header (level letter, date, time, pid, file:line) under torchrun's rank prefix
_W = "[rank0]:W0301 10:11:12.345000 4242 site-packages/torch/_dynamo/convert_frame.py:1125] "


def test_a_traceback_logged_at_warning_level_is_not_the_root(rules: Classifier) -> None:
    # torch._dynamo logs a graph it failed to compile, with its traceback, at warning level and runs
    # the code uncompiled; the step then runs out of memory (R2: a warning is not the failure)
    warned = ([_W + "WON'T CONVERT forward /srv/model.py line 88", _W + "due to:", _W + "Traceback (most recent call last):",
               _W + '  File "/env/torch/_dynamo/output_graph.py", line 1465, in _call_user_compiler',
               _W + "    raise BackendCompilerFailed(self.compiler_fn, e) from e",
               _W + "torch._dynamo.exc.BackendCompilerFailed: backend='inductor' raised:",
               _W + "AssertionError: increase TRITON_MAX_BLOCK['X'] to 4096", _W])
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 40.00 GiB. GPU 0 has a total capacity of 79.14 GiB"
    lines = ["[rank0]: step 0 starting"] + warned + _tb(oom, prefix="[rank0]: ")
    assert _picked(lines, rules) == ["[rank0]: " + oom]


def _launch(t: str) -> list[str]:
    return [f"2025-01-02 10:{t},100 - INFO - Configuration setup complete",
            f"2025-01-02 10:{t},101 - INFO - Starting training with n_images=4",
            f"2025-01-02 10:{t},102 - INFO - Loading data from data/train.npz",
            f"2025-01-02 10:{t},103 - ERROR - An error occurred during execution: [Errno 2] No such file or "
            "directory: 'data/train.npz'"]


def test_a_logged_error_of_a_relaunched_script_counts_in_the_last_launch(rules: Classifier) -> None:
    # a script's top-level handler logs its error (logging's "%(asctime)s - %(levelname)s - %(message)s")
    # and exits; the job runs it three times into one file: only the last attempt is labelled (R1)
    lines = ["2025-01-02 10:00:00,000 - DEBUG - matplotlib data path: /env/mpl-data"] + _launch("00:01")
    lines += ["2025-01-02 10:01:00,000 - DEBUG - matplotlib data path: /env/mpl-data"] + _launch("01:01")
    lines += ["2025-01-02 10:02:00,000 - DEBUG - matplotlib data path: /env/mpl-data"] + _launch("02:01")
    assert _picked(lines, rules) == [lines[-1]]


def test_a_caught_exception_a_logger_printed_is_not_the_root(rules: Classifier) -> None:
    # bitsandbytes logs a failed library load with logger.error(..., exc_info=True) (axolotl's record
    # format "[asctime] [LEVEL] [name.func:line] [PID:n] message") and goes on; the config check then
    # raises its own uncaught error, the one that ended the process (R1, R3)
    record = ("[2025-01-02 10:00:01,342] [ERROR] [bitsandbytes.cextension.<module>:88] [PID:41] Could not load "
              "bitsandbytes native library: libbitsandbytes_cpu.so: cannot open shared object file")
    err = "pydantic_core._pydantic_core.ValidationError: 2 validation errors for AxolotlConfig"
    lines = (["Loading config configs/config.yml", record]
             + _tb("OSError: libbitsandbytes_cpu.so: cannot open shared object file: No such file or directory",
                   "/env/bitsandbytes/cextension.py")
             + _tb(err, "/env/axolotl/cli/config.py") + ["chat_template", "  Input should be 'alpaca' or 'chatml'"])
    assert _picked(lines, rules) == [err]


def test_a_logged_exception_raised_again_counts_at_its_first_printing(rules: Classifier) -> None:
    # logger.exception("training failed") then `raise`: the interpreter prints the same exception
    # again at exit; the logger's printing is the first (R9), it is kept
    err = "RuntimeError: shapes (4, 8) and (6, 8) do not match"
    lines = (["epoch 1 step 10 loss 0.5", "ERROR:train:training failed"] + _tb(err)
             + _tb(err, "/srv/main.py"))
    assert _picked(lines, rules) == [err]
    assert diagnose_text("\n".join(lines), rules).indicator_lines == [6]


def _top(exc: str) -> list[str]:
    return ["Traceback (most recent call last):", '  File "cifar10_deepspeed.py", line 251, in <module>',
            "    model_engine, optimizer, _, _ = deepspeed.initialize(", exc]


def test_copies_of_deepspeed_local_processes_count_at_the_first(rules: Classifier) -> None:
    # DeepSpeed's launcher starts three local processes (launch.py "num_local_procs=3"); each prints
    # its start-up and then the same config assertion: R5, the earliest copy, not a re-run (R1)
    err = ("AssertionError: Check batch related parameters. train_batch_size is not equal to "
           "micro_batch_per_gpu * gradient_acc_step * world_size 16 != 5 * 1 * 3")
    start = ["Files already downloaded and verified",
             "[2022-09-10 22:16:15,701] [WARNING] [config_utils.py:64:_process_deprecated_field] Config parameter "
             "cpu_offload is deprecated use offload_optimizer instead"]
    lines = (["[2022-09-10 22:16:06,086] [INFO] [launch.py:143:main] nnodes=1, num_local_procs=3, node_rank=0",
              "[2022-09-10 22:16:06,086] [INFO] [launch.py:156:main] dist_world_size=3"]
             + start + _top(err) + start + _top(err) + _top(err)
             + ["[2022-09-10 22:16:19,011] [INFO] [launch.py:286:sigkill_handler] Killing subprocess 4242"])
    assert diagnose_text("\n".join(lines), rules).indicator_lines == [8]


def test_mp_spawn_failing_to_read_a_child_error_file_is_no_root(rules: Classifier) -> None:
    # torch.multiprocessing.spawn's join reads the failed child's pickled traceback
    # (spawn.py: original_trace = pickle.load(fh)); the child's file is empty, so the parent raises
    # EOFError: the launcher's report (R8); the first rank's watchdog timeout, printed onto a
    # progress line, is the key message (R6)
    timeout = ("[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=3281, OpType=ALLGATHER, "
               "NumelIn=1, NumelOut=4, Timeout(ms)=600000) ran for 600040 milliseconds before timing out.")
    lines = ([f"Epoch {k} Epoch time:  2.5 current loss tensor(-13.9, device='cuda:1')" for k in range(90, 96)]
             + ["Epoch 96 Epoch time:  2.5 current loss [rank1]:[E ProcessGroupNCCL.cpp:563] " + timeout,
                "[rank2]:[E ProcessGroupNCCL.cpp:563] " + timeout.replace("Rank 1", "Rank 2"),
                "[rank1]:[E ProcessGroupNCCL.cpp:583] [Rank 1] To avoid data inconsistency, we are taking the "
                "entire process down.",
                "Traceback (most recent call last):", '  File "/srv/run.py", line 40, in <module>',
                '    mp.spawn(run, args=(params,), nprocs=4)',
                '  File "/env/torch/multiprocessing/spawn.py", line 185, in join',
                "    original_trace = pickle.load(fh)", "EOFError: Ran out of input"])
    got = diagnose_text("\n".join(lines), rules)
    assert got.indicator_lines == [7]
    assert got.first_rank == 1


def test_an_exception_ignored_in_del_is_not_quoted_beside_the_interrupt(rules: Classifier) -> None:
    # Ctrl-C: a DataLoader iterator's __del__ reports its worker's death ("Exception ignored in:",
    # Python goes on), then the main traceback ends KeyboardInterrupt, the line that ended it (R1, R3)
    lines = ([f"Step:{k} Reward:1.05" for k in range(10, 15)]
             + ["Exception ignored in: <function _MultiProcessingDataLoaderIter.__del__ at 0x7faf60142f70>",
                "Traceback (most recent call last):",
                '  File "/env/torch/utils/data/dataloader.py", line 1327, in __del__', "    def __del__(self):",
                '  File "/env/torch/utils/data/_utils/signal_handling.py", line 66, in handler',
                "    _error_if_any_worker_fails()",
                "RuntimeError: DataLoader worker (pid 5883) is killed by signal: Interrupt: 2."]
             + ["Traceback (most recent call last):", '  File "/srv/train.py", line 458, in <module>',
                "    main(args)", '  File "/env/torch/autograd/__init__.py", line 154, in backward',
                "    Variable._execution_engine.run_backward(", "KeyboardInterrupt"])
    assert _picked(lines, rules) == ["KeyboardInterrupt"]


def test_open_mpi_signal_report_after_a_fatal_error_is_not_added(rules: Classifier) -> None:
    # UCX's fatal error names the failure; Open MPI's signal handler then reports the abort it causes
    # (opal/util/stacktrace.c: "*** Process received signal ***", "Signal: Aborted (6)"): R6, the abort
    # on an error a line above named is not labelled
    fatal = ("0: [gpu09:43722:2:43760]        rndv.c:943  Fatal: failed to unpack rendezvous remote key "
             "received from <no debug data>: Input/output error")
    lines = (["0: rank 0 local result ok", "1: rank 1 local result ok",
              "0: [1580334918.341467] [gpu09:43722:2]       ucp_rkey.c:266  UCX  ERROR failed to unpack remote key "
              "from remote md[5]: Input/output error", fatal, "0: ==== backtrace ===="]
             + [f"0:    {k}  /lib64/libucs.so.0(ucs_fatal_error_message+0xd0) [0x2aaaac0fc34d]" for k in range(12)]
             + ["0: ===================", "0: [gpu09:43722] *** Process received signal ***",
                "0: [gpu09:43722] Signal: Aborted (6)", "0: [gpu09:43722] Signal code:  (-6)"]
             + [f"0: [gpu09:43722] [{k}] /lib64/libpthread.so.0(+0x12360)[0x2aaaaaf95360]" for k in range(12)]
             + ["0: [gpu09:43722] *** End of error message ***", "srun: error: gpu09: task 0: Aborted",
                "srun: error: gpu09: task 1: Terminated"])
    assert diagnose_text("\n".join(lines), rules).indicator_lines == [3]  # the first error line (R9: within 2 of 4)


def test_a_logged_exception_before_the_launchers_child_exit_stays_the_root(rules: Classifier) -> None:
    # (a guard) the child logs its error (logger.exception) and exits 1; accelerate's launcher then raises
    # CalledProcessError (R8: the launcher's verdict): the logged exception ended the child, it is the root
    err = "KeyError: 'input_ids'"
    lines = (["epoch 1 step 10 loss 0.5", "ERROR:__main__:training failed"] + _tb(err)
             + _tb("subprocess.CalledProcessError: Command '['/usr/bin/python', 'train.py']' returned non-zero "
                   "exit status 1.", "/env/accelerate/commands/launch.py"))
    assert _picked(lines, rules) == [err]
