"""Indicator lines and first rank/node (README "Indicator lines: rules" R1-R9, "Ranks and nodes") of
formats the reader misread in round 17, each excerpt written by hand in the format the launcher,
library or job-script template prints."""

from __future__ import annotations

from gpulens.diagnosis.classifier import Classifier
from gpulens.diagnosis.logread import diagnose_text
from tests.diagnosis.test_indicator_formats import _picked, _tb

#: torchrun's start-up warning when it starts several local workers (torch/distributed/run.py,
#: ``config_from_args``), printed once per launch before its agent's rendezvous
_BANNER = ["WARNING:torch.distributed.run:", "*****************************************",
           "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, to avoid your "
           "system being overloaded, please further tune the variable for optimal performance in your "
           "application as needed. ", "*****************************************"]
#: torch elastic's agent when it gets SIGINT (elastic/agent/server/api.py ``run``) and its workers' close
_DEATH = "WARNING:torch.distributed.elastic.agent.server.api:Received 2 death signal, shutting down workers"
_CLOSE = [f"WARNING:torch.distributed.elastic.multiprocessing.api:Sending process {p} closing signal SIGINT"
          for p in (9001, 9002)]


def test_a_relaunch_interrupted_at_start_up_is_labelled_not_the_earlier_launch(rules: Classifier) -> None:
    # a screen session: the first torchrun launch trained and was stopped with Ctrl-C (its workers'
    # KeyboardInterrupt); the second launch is interrupted during its start-up: only it counts (R1, R6)
    first = _BANNER + ["| distributed init (rank 0): env://", "| distributed init (rank 1): env://"]
    first += [f"epoch {k} step 10 loss 0.{k}" for k in range(1, 8)]
    first += _tb("KeyboardInterrupt") + _tb("KeyboardInterrupt")
    first += _tb("torch.distributed.elastic.multiprocessing.api.SignalException: Process 8000 got signal: 2",
                 "/env/torch/distributed/elastic/multiprocessing/api.py")
    second = _BANNER + ["| distributed init (rank 0): env://", "| distributed init (rank 1): env://",
                        "^C" + _DEATH, *_CLOSE]
    second += _tb("torch.distributed.elastic.multiprocessing.api.SignalException: Process 9000 got signal: 2",
                  "/env/torch/distributed/elastic/multiprocessing/api.py")
    lines = ["root@gpu-box:~/mfm# bash dist_train.sh"] + first + second
    assert _picked(lines, rules) == ["^C" + _DEATH]


def _benchmark(n: int, first: str) -> list[str]:
    """One torchrun launch of a 2-rank benchmark of prompt length ``n`` whose ranks both fail (``first``
    prints its error first), then the agent's verdict (torch/distributed/elastic/multiprocessing/api.py)."""
    err = f"RuntimeError: start (0) + length ({n}) exceeds dimension size (4096)."
    other = "1" if first == "0" else "0"
    # torch 2's logged banner: its message starts with a newline, so the header stands alone above the stars
    out = [f"W1125 03:{n % 60:02d}:11.655000 26378 site-packages/torch/distributed/run.py:803] ", *_BANNER[1:],
           f"Running benchmark with prompt length {n}"]
    for r in (first, other):
        out += _tb(err, "/srv/bench.py", prefix=f"[rank{r}]: ")
    out.append("E1125 03:19:00.100000 26378 site-packages/torch/distributed/elastic/multiprocessing/api.py:882] "
               "failed (exitcode: 1) local_rank: 0 (pid: 26400) of binary: /env/bin/python")
    return out


def test_a_sweep_of_launches_names_the_rank_that_failed_first_in_the_last(rules: Classifier) -> None:
    # a job script runs torchrun once per prompt length; every launch fails, rank 1 first in the earlier
    # launch, rank 0 first in the last: the last launch's first rank and its line (R1, R5)
    lines = ["Job 4918 on gpu001: ring-attention sweep"] + _benchmark(8192, "1") + _benchmark(16384, "0")
    lines.append("Results saved to: results/summary.csv")
    w = diagnose_text("\n".join(lines), rules)
    assert [lines[n - 1] for n in w.indicator_lines] == [
        "[rank0]: RuntimeError: start (0) + length (16384) exceeds dimension size (4096)."]
    assert w.first_rank == 0


def test_an_error_the_pin_memory_thread_caught_counts_by_its_original(rules: Classifier) -> None:
    # the DataLoader's pin-memory thread wraps its error (torch/_utils.py ExceptionWrapper, where="in pin
    # memory thread for device N"); the main loop re-raises it with the original traceback in its message
    # (R4: the embedded original exception line, not the wrapper)
    p = "[rank1]: "
    err = p + "RuntimeError: CUDA error: invalid argument"
    lines = ([f"{p}Training [2510/100000] loss 3.21"] + _tb("RuntimeError: Caught RuntimeError in pin memory thread "
                                                             "for device 1.", "/env/torch/_utils.py", prefix=p)
             + [f"{p}Original Traceback (most recent call last):",
                f'{p}  File "/env/torch/utils/data/_utils/pin_memory.py", line 66, in pin_memory',
                f"{p}    return data.pin_memory(device)", err,
                f"{p}CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace "
                "below might be incorrect.", f"{p}For debugging consider passing CUDA_LAUNCH_BLOCKING=1"])
    assert _picked(lines, rules) == [err]


def test_a_caught_error_printed_again_after_more_work_is_not_the_root(rules: Classifier) -> None:
    # a loop catches its evaluation's error, prints it and goes on (the same message again after more
    # metrics lines); the run then dies of an uncaught exception, the one labelled (R1)
    caught = "[TRAIN]  Evaluation failed: AssertionError('No data found')"
    out: list[str] = []
    for k in range(1, 4):
        out += [f"[TRAIN]  [00{k}000]  loss_model: 2{k}.5  loss_critic: 0.{k}  fps: 11.3", "[TRAIN]  Saved model checkpoint",
                "[TRAIN]  Reading files from episodes_eval/0", caught, f"[GEN 0]  Generator loaded model checkpoint {k}"]
    err = "RuntimeError: CUDA error: device-side assert triggered"
    out += ["[TRAIN]  [004100]  loss_model: 15.4  loss_critic: 4.5  fps: 11.4", "Traceback (most recent call last):",
            '  File "train.py", line 620, in <module>', "    run(conf)", '  File "/srv/models/decoders.py", line 79, '
            "in training_step", "    y = self.model(x)", err,
            "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below "
            "might be incorrect."]
    assert _picked(out, rules) == [err]


def test_a_failure_an_info_record_reports_is_not_the_root(rules: Classifier) -> None:
    # abseil's INFO record (absl/logging get_absl_log_prefix: "I0519 00:50:42.634950 1399 xla_bridge.py:863] ")
    # of a platform JAX could not open while it looks for one; the run then fails on its own (R2, R3)
    info = ("I0519 00:50:42.634950 139913184905024 xla_bridge.py:863] Unable to initialize backend 'tpu': "
            "INTERNAL: Failed to open libtpu.so: libtpu.so: cannot open shared object file: No such file or directory")
    err = ("flax.errors.ScopeParamShapeError: Initializer expected to generate shape (1, 64, 8) but got shape "
           '(1, 16, 8) instead for parameter "pos" in "/Encoder/pos".')
    lines = [info, "I0519 00:50:51.462661 139913184905024 train.py:132] Starting training loop."]
    lines += ["Traceback (most recent call last):", '  File "/srv/main.py", line 63, in <module>', "    app.run(main)",
              '  File "/srv/embedding.py", line 74, in __call__', "    y = self.param(", err]
    assert _picked(lines, rules) == [err]


def test_a_workers_interrupt_after_the_agents_death_signal_is_not_labelled(rules: Classifier) -> None:
    # Ctrl-C: torchrun's agent says it got the signal (glog-style header, torch >= 2.4) and passes it on;
    # rank 0's KeyboardInterrupt follows from it (R6: the line that says a signal ended the run only)
    death = ("W1022 21:50:54.847000 16074 site-packages/torch/distributed/elastic/agent/server/api.py:704] "
             "Received Signals.SIGINT death signal, shutting down workers")
    lines = [f"INFO 2025-10-22 21:50:{k:02d},893 general.py: 117: Train Epoch: [0][{k}/1000] | Loss: 0.{k}"
             for k in range(30, 40)]
    lines += [death, "W1022 21:50:54.852000 16074 site-packages/torch/distributed/elastic/multiprocessing/api.py:897] "
              "Sending process 16131 closing signal SIGINT"]
    lines += _tb("KeyboardInterrupt", "/srv/heads/cubify_head.py", prefix="[rank0]: ")
    lines += _tb("torch.distributed.elastic.multiprocessing.api.SignalException: Process 16074 got signal: 2",
                 "/env/torch/distributed/elastic/multiprocessing/api.py")
    assert _picked(lines, rules) == [death]


def test_a_stop_report_after_a_threads_uncaught_exception_is_teardown(rules: Classifier) -> None:
    # a data loader's reader thread dies (threading.excepthook: "Exception in thread Thread-2:" and its
    # traceback); Paddle's signal handler then reports the SIGTERM the launcher sent (paddle/fluid/platform/
    # init.cc SignalHandle): teardown, not a second cause (R6)
    err = "AttributeError: 'NoneType' object has no attribute 'astype'"
    lines = ["2022-05-14 23:18:53 [INFO]\tThere are 295/295 variables loaded into STDCNet.",
             "Exception in thread Thread-2:"] + _tb(err, "/srv/paddleseg/transforms.py")
    lines += ["", "", "--------------------------------------", "C++ Traceback (most recent call last):",
              "--------------------------------------", "0   paddle::pybind::MultiDeviceFeedReader::CheckNextStatus()", "",
              "----------------------", "Error Message Summary:", "----------------------",
              "FatalError: `Termination signal` is detected by the operating system.",
              "  [SignalInfo: *** SIGTERM (@0x3e8) received by PID 485569 (TID 0x7f5c) from PID 485480 ***]"]
    assert _picked(lines, rules) == [err]


def test_an_abort_in_teardown_after_an_uncaught_exception_is_not_labelled(rules: Classifier) -> None:
    # the script's exception ends it (its traceback from <module>); while the interpreter exits, a Paddle
    # executor's destructor throws and aborts, which Paddle's signal handler reports (SIGABRT): teardown (R6)
    err = "RuntimeError: (PreconditionNotMet) Tensor not initialized yet when Tensor::place() is called."
    lines = ["[2021-11-19 11:31:20] step 0 starting"] + ["Traceback (most recent call last):",
                                                       '  File "run_pretrain.py", line 478, in <module>',
                                                       "    do_train(args)", err]
    lines += ["terminate called after throwing an instance of 'paddle::platform::EnforceNotMet'",
              "  what():  (External) CUDA error(900), operation not permitted when stream is capturing. ", "", "",
              "--------------------------------------", "C++ Traceback (most recent call last):",
              "--------------------------------------", "0   paddle::framework::ParallelExecutor::~ParallelExecutor()", "",
              "----------------------", "Error Message Summary:", "----------------------",
              "FatalError: `Process abort signal` is detected by the operating system.",
              "  [TimeInfo: *** Aborted at 1637319086 (unix time) try \"date -d @1637319086\" if you are using GNU date ***]",
              "  [SignalInfo: *** SIGABRT (@0x1001) received by PID 4097 (TID 0x7f50) from PID 4097 ***]"]
    assert _picked(lines, rules) == [err]


def test_the_task_srun_stops_after_another_failed_is_not_the_failing_node(rules: Classifier) -> None:
    # srun's report: task 0 on n51 exited with an error, srun then terminates the step and reports the
    # task it stopped on n60 (--kill-on-bad-exit): the failing node is n51
    err = "ImportError: /env/torch/lib/libtorch_cuda.so: undefined symbol: ncclDevCommDestroy"
    lines = ["+ srun bash -c 'torchrun --nnodes=2 run_training.py'", "Traceback (most recent call last):",
             '  File "/env/bin/torchrun", line 3, in <module>', "    from torch.distributed.run import main", err,
             "srun: error: n51: task 0: Exited with exit code 1", "srun: Terminating StepId=2827381.0",
             "srun: error: n60: task 1: Terminated", "srun: Force Terminated StepId=2827381.0"]
    w = diagnose_text("\n".join(lines), rules)
    assert w.first_node == "n51"


def test_a_bare_stop_iteration_from_a_library_names_the_jobs_own_statement(rules: Classifier) -> None:
    # the DataLoader raises a bare StopIteration for an empty loader; the job's next(iter(loader)) is the
    # failing statement, the only message there is (R3: the source line of a message-less exception)
    p = "[rank0]: "
    code = f"{p}    data = next(iter(test_loader))"
    lines = [f"{p}Traceback (most recent call last):", f'{p}  File "/srv/vivid/train.py", line 206, in <module>',
             f"{p}    training_loop(run_dir=outdir)", f'{p}  File "/srv/vivid/training_loop.py", line 307, in training_loop',
             code, f"{p}           ^^^^^^^^^^^^^^^^^^^^^^^",
             f'{p}  File "/env/lib/python3.11/site-packages/torch/utils/data/dataloader.py", line 708, in __next__',
             f"{p}    data = self._next_data()", f"{p}           ^^^^^^^^^^^^^^^^^",
             f'{p}  File "/env/lib/python3.11/site-packages/torch/utils/data/dataloader.py", line 1447, in _next_data',
             f"{p}    raise StopIteration", f"{p}StopIteration"]
    assert _picked(["[rank0]: epoch 0 step 10 loss 0.5"] + lines, rules) == [code, f"{p}StopIteration"]
