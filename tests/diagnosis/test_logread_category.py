"""Whole-log category decisions (issue 23, item 3): the exception that ended the process
decides, read through launcher prefixes, scheduler lines and tracker copies of stdout. Each
log here is a small excerpt written by hand in the format of a real one."""

from __future__ import annotations

import pytest

from gpulens.diagnosis import logs
from gpulens.diagnosis.classifier import Classifier, default_classifier
from gpulens.diagnosis.logread import diagnose_text
from gpulens.diagnosis.rules import match_rules


@pytest.fixture(scope="module")
def clf() -> Classifier:
    return default_classifier()


_TORCHRUN_TAIL = """\
E0301 10:00:05.100000 1111 torch/distributed/elastic/multiprocessing/api.py:833] failed (exitcode: 1) local_rank: 0 (pid: 2001) of binary: /opt/env/bin/python3
Traceback (most recent call last):
  File "/opt/env/bin/torchrun", line 8, in <module>
    sys.exit(main())
  File "/opt/env/lib/python3.10/site-packages/torch/distributed/launcher/api.py", line 264, in launch_agent
    raise ChildFailedError(
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2024-03-01_10:00:05
  host      : node07.cluster.example.edu
  rank      : 1 (local_rank: 1)
  exitcode  : 1 (pid: 2002)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2024-03-01_10:00:05
  host      : node07.cluster.example.edu
  rank      : 0 (local_rank: 0)
  exitcode  : 1 (pid: 2001)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
============================================================
"""


def _rank_traceback(rank: int, code: str, exc: str) -> str:
    return (f"[rank{rank}]: Traceback (most recent call last):\n"
            f'[rank{rank}]:   File "/home/u/proj/train.py", line 210, in <module>\n'
            f"[rank{rank}]:     main()\n"
            f'[rank{rank}]:   File "/home/u/proj/train.py", line 150, in main\n'
            f"[rank{rank}]:     {code}\n"
            f"[rank{rank}]: {exc}\n")


def test_rank_prefix_keeps_the_traceback_indentation() -> None:
    # "[rank0]:   File ..." is a frame and "[rank0]:     code" its code line: stripping the
    # prefix with the indentation made the code line look like the exception line
    assert logs.normalize_line('[rank0]:   File "/a/train.py", line 3, in main') == '  File "/a/train.py", line 3, in main'
    assert logs.normalize_line("[rank0]:     print(f\"{row['text']}\")") == "    print(f\"{row['text']}\")"
    assert logs.normalize_line("[rank0]: KeyError: 'text'") == "KeyError: 'text'"
    view = logs.analyze(_rank_traceback(0, "print(f\"sample: {row['text']}\")", "KeyError: 'text'"))
    assert view.exception_lines == ["KeyError: 'text'"]


def test_rank_tracebacks_above_torchrun_summary_are_the_cause(clf: Classifier) -> None:
    text = ("Loading dataset\n" + _rank_traceback(0, "print(f\"sample: {row['text']}\")", "KeyError: 'text'")
            + _rank_traceback(1, "print(f\"sample: {row['text']}\")", "KeyError: 'text'") + _TORCHRUN_TAIL)
    d = diagnose_text(text, clf).diagnosis
    assert (d.category, d.origin) == ("semantic_error", "user"), d


def test_scheduler_oom_line_is_seen_beside_the_root_rank(clf: Classifier) -> None:
    # the root-cause table names node07.cluster.example.edu, Slurm's line says slurmstepd-node07:
    # the job-level line must still reach the classifier
    exc = "RuntimeError: One of the subprocesses has abruptly died during map operation."
    text = ("Map (num_proc=32):  40%|####      | 400/1000 [00:10<00:15, 40.0 examples/s]\n"
            + _rank_traceback(0, "ds = ds.map(tokenize, num_proc=32)", exc)
            + _rank_traceback(1, "ds = ds.map(tokenize, num_proc=32)", exc) + _TORCHRUN_TAIL
            + "slurmstepd-node07: error: Detected 3 oom_kill events in StepId=4242.batch. "
              "Some of the step tasks have been OOM Killed.\n")
    d = diagnose_text(text, clf).diagnosis
    assert d.category == "cpu_oom", d


@pytest.mark.parametrize("tail,frame", [
    ("bdb.BdbQuit", "    if self.quitting: raise BdbQuit"),
    ("EOFError: EOF when reading a line", "    answer = input('Save the results? (y/n)')"),
])
def test_interactive_prompt_in_a_batch_job(clf: Classifier, tail: str, frame: str) -> None:
    text = ("Epoch 3/3: 100%|##########| 500/500 [02:00<00:00, 4.1it/s]\n"
            "test accuracy: 0.91\n"
            "Traceback (most recent call last):\n"
            '  File "/home/u/proj/eval.py", line 88, in <module>\n'
            "    main()\n"
            '  File "/home/u/proj/eval.py", line 80, in main\n'
            f"{frame}\n{tail}\n")
    d = diagnose_text(text, clf).diagnosis
    assert (d.category, d.method, d.rule_id) == ("semantic_error", "rule", "python-breakpoint-no-tty"), d


def test_bare_exception_name_ends_a_traceback() -> None:
    view = logs.analyze('Traceback (most recent call last):\n  File "/a/x.py", line 1, in f\n'
                        "    raise BdbQuit\nbdb.BdbQuit\n")
    assert view.exception_lines == ["bdb.BdbQuit"] and not view.truncated


def test_aten_dimension_check_is_a_shape_error() -> None:
    got = {m.rule.id for m in match_rules("RuntimeError: batch1 must be a 3D tensor")}
    assert "aten-shape-checks" in got


def test_headless_traceback_exception_is_not_overruled(clf: Classifier) -> None:
    # a tracker's copy of stdout (wandb output.log) loses the "Traceback" header: the last
    # exception line still ended the process, and the model never overrules its rule
    text = ("{'loss': 0.41, 'learning_rate': 1e-05, 'epoch': 0.99}\n\n\n"
            '  File "/home/u/proj/reward.py", line 83, in <module>\n'
            "    trainer.train()\n"
            '  File "/venv/lib/python3.11/site-packages/trl/trainer/utils.py", line 668, in compute_accuracy\n'
            "    accuracy = np.array(predictions == labels, dtype=float).mean().item()\n"
            "                        ^^^^^^^^^^^^^^^^^^^^^\n"
            "ValueError: operands could not be broadcast together with shapes (9000,2) (9000,)\n")
    d = diagnose_text(text, clf).diagnosis
    assert (d.category, d.method, d.rule_id) == ("semantic_error", "rule", "python-logic-exception"), d


def test_writing_into_a_missing_directory_is_the_job_s_own_error(clf: Classifier) -> None:
    # the same ENOENT message as a missing input file, but raised by open(..., "w+b") under
    # savefig: an output directory the job did not create (user), not missing data
    text = ("Accuracy on test data: 0.57\n"
            "Traceback (most recent call last):\n"
            '  File "/home/u/proj/finetune.py", line 200, in <module>\n'
            '    plt.savefig("plots/lora/loss.png")\n'
            '  File "/env/lib/python3.10/site-packages/matplotlib/pyplot.py", line 1228, in savefig\n'
            "    res = fig.savefig(*args, **kwargs)\n"
            '  File "/env/lib/python3.10/site-packages/PIL/Image.py", line 2410, in save\n'
            '    fp = builtins.open(filename, "w+b")\n'
            "FileNotFoundError: [Errno 2] No such file or directory: 'plots/lora/loss.png'\n")
    d = diagnose_text(text, clf).diagnosis
    assert (d.category, d.origin, d.rule_id) == ("semantic_error", "user", "output-dir-missing"), d
    reading = (text.replace('plt.savefig("plots/lora/loss.png")', 'img = Image.open("plots/lora/loss.png")')
               .replace("matplotlib/pyplot.py\", line 1228, in savefig", "PIL/Image.py\", line 3100, in open")
               .replace("res = fig.savefig(*args, **kwargs)", "fp = _open(filename)")
               .replace('fp = builtins.open(filename, "w+b")', 'fp = builtins.open(filename, "rb")'))
    d = diagnose_text(reading, clf).diagnosis
    assert d.category == "incorrect_input", d


def test_time_limit_after_the_tasks_exited_is_not_the_cause(clf: Classifier) -> None:
    # every task already exited 1 on a Python error; the allocation then ran out its time
    text = ("[rank0]: Traceback (most recent call last):\n"
            '[rank0]:   File "/home/u/vlstm/main.py", line 40, in <module>\n'
            "[rank0]:     out = model(x)\n"
            "[rank0]: RuntimeError: Input type (torch.cuda.FloatTensor) and weight type (torch.FloatTensor) "
            "should be the same\n"
            "srun: error: gpu-04: tasks 0-3: Exited with exit code 1\n")
    killed = text + "slurmstepd-gpu-04: error: *** JOB 9001 ON gpu-04 CANCELLED AT 2025-10-27T05:28:04 DUE TO TIME LIMIT ***\n"
    assert diagnose_text(killed, clf).diagnosis.category == "semantic_error"
    # without the tasks' exit first, the time limit is what ended the job
    running = ("Epoch 3:  40%|####      | 400/1000 [10:00<15:00, 0.66it/s, loss=0.31]\n" * 3
               + "slurmstepd-gpu-04: error: *** JOB 9001 ON gpu-04 CANCELLED AT 2025-10-27T05:28:04 DUE TO TIME LIMIT ***\n")
    assert diagnose_text(running, clf).diagnosis.category == "preempted"
    # the usual order of a time limit: the step is cancelled first, then srun reports the tasks
    # that the signal ended (143 = SIGTERM), then the job line
    limit = ("Epoch 3:  40%|####      | 400/1000 [10:00<15:00, 0.66it/s, loss=0.31]\n" * 3
             + "slurmstepd-gpu-04: error: *** STEP 9001.0 ON gpu-04 CANCELLED AT 2025-10-27T05:28:04 DUE TO TIME LIMIT ***\n"
             + "srun: error: gpu-04: task 0: Exited with exit code 143\n"
             + "slurmstepd-gpu-04: error: *** JOB 9001 ON gpu-04 CANCELLED AT 2025-10-27T05:28:04 DUE TO TIME LIMIT ***\n")
    assert diagnose_text(limit, clf).diagnosis.category == "preempted"


def _thread_traceback(name: str) -> str:
    return (f"Exception in thread {name}:\n"
            "Traceback (most recent call last):\n"
            '  File "/opt/env/lib/python3.9/threading.py", line 980, in _bootstrap_inner\n'
            "    self.run()\n"
            '  File "/home/u/sim/envs/worker.py", line 52, in run\n'
            "    self.detector = load_detector(self.weights)\n"
            "RuntimeError: PytorchStreamReader failed reading zip archive: failed finding central directory\n")


@pytest.mark.parametrize("why", ["DUE TO PREEMPTION", "DUE TO TIME LIMIT"])
def test_a_thread_s_exception_days_before_the_kill_did_not_end_the_process(clf: Classifier, why: str) -> None:
    # Python's threading.excepthook prints "Exception in thread NAME:" above the traceback of an
    # exception that ended a thread other than the main one: that thread ended, the process went
    # on (here for two days without printing) until the scheduler ended the job
    kill = (f"slurmstepd: error: *** STEP 4242.0 ON gpu07 CANCELLED AT 2024-03-24T19:23:21 ***\n"
            f"slurmstepd: error: *** JOB 4242 ON gpu07 CANCELLED AT 2024-03-24T19:28:37 {why} ***\n")
    # two threads dying at once interleave their headers
    both = ("Exception in thread Exception in thread Thread-2Thread-4:\n:\n"
            "Traceback (most recent call last):\n"
            '  File "/opt/env/lib/python3.9/threading.py", line 980, in _bootstrap_inner\n'
            + _thread_traceback("Thread-5").split("\n", 1)[1])
    for threads in (_thread_traceback("Thread-3"), both):
        d = diagnose_text("[Sim] loading scene 12\n" + threads + "UserWarning: box bound precision lowered\n" + kill,
                          clf).diagnosis
        assert (d.category, d.origin) == ("preempted", "infrastructure"), d
    # the same exception in the main thread ended the process: the kill afterwards is not the cause
    main = _thread_traceback("Thread-3").split("\n", 1)[1]
    d = diagnose_text("[Sim] loading scene 12\n" + main + kill, clf).diagnosis
    assert d.category == "checkpoint_error", d


@pytest.mark.parametrize("signal,category", [("Segmentation fault", "crash"), ("Aborted", "crash"),
                                              ("Exited with exit code 1", "semantic_error")])
def test_what_srun_ends_after_a_task_failed_is_not_the_cause(clf: Classifier, signal: str, category: str) -> None:
    # srun reports the task that died first (strsignal() of its signal, or its exit code), then
    # kills the rest of the step ("srun: Terminating job step"): slurmstepd's cancel line and the
    # other tasks' "Terminated" are srun's own doing
    own = {"crash": "0: Fatal Python error: Segmentation fault\n" if signal != "Aborted" else
           "0: terminate called after throwing an instance of 'std::runtime_error'\n",
           "semantic_error": "0: Traceback (most recent call last):\n"
                             '0:   File "/home/u/mpi_test.py", line 31, in <module>\n'
                             "0:     dist.broadcast(t, 0)\n"
                             "0: TypeError: broadcast() missing 1 required positional argument: 'src'\n"}[category]
    log = ("0: rank 0 on cuda:0 local result 3.0\n1: rank 1 on cuda:1 local result 3.0\n" + own
           + f"srun: error: nid0042: task 0: {signal}\n"
           + "srun: Terminating job step 77001.0\n"
           + "0: slurmstepd: error: *** STEP 77001.0 ON nid0042 CANCELLED AT 2020-01-31T09:07:17 ***\n"
           + "srun: error: nid0042: task 1: Terminated\n"
           + "srun: Force Terminated job step 77001.0\n")
    d = diagnose_text(log, clf).diagnosis
    assert d.category == category, d


def test_a_sigterm_nothing_in_the_log_attributes_has_no_known_sender(clf: Classifier) -> None:
    steps = [f"Epoch: [1]  [{k:4d}/7393]  eta: 2:10:03  lr: 0.000100  loss: 1.{k % 97:03d}" for k in range(3000, 3900, 10)]
    stop = ["WARNING:torch.distributed.elastic.agent.server.api:Received 15 death signal, shutting down workers",
            "WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 4121 closing signal SIGTERM",
            "torch.distributed.elastic.multiprocessing.api.SignalException: Process 4100 got signal: 15"]
    d = diagnose_text("\n".join(steps + stop), clf).diagnosis
    assert (d.category, d.origin) == ("preempted", "unknown"), d
    # a Slurm job (its environment echoed by the job script) is no sender: scancel names no one
    # (README "Origin: rules", O3)
    slurm = ["SLURM_JOB_ID=881234 SLURM_NODELIST=gpu[07-08]"]
    d = diagnose_text("\n".join(slurm + steps + stop), clf).diagnosis
    assert (d.category, d.origin) == ("preempted", "unknown"), d
    # a line that names the platform's decision (a preemption) does
    evicted = ["Warning  Preempting  pod/train-0  Preempted by default/priority-job on node gpu-07"]
    d = diagnose_text("\n".join(steps + evicted + stop), clf).diagnosis
    assert (d.category, d.origin) == ("preempted", "infrastructure"), d


@pytest.mark.parametrize("timeout", [
    "[rank1]:[E405 03:51:41.285624929 ProcessGroupNCCL.cpp:688] [Rank 1] Watchdog caught collective operation "
    "timeout: WorkNCCL(SeqNum=404, OpType=_ALLGATHER_BASE, NumelIn=1140480, NumelOut=2280960, Timeout(ms)=600000) "
    "ran for 600053 milliseconds before timing out.",
    "torch.distributed.DistStoreError: Socket Timeout",
    "RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 1800000ms for "
    "recv operation to complete",
])
def test_a_timeout_waiting_for_a_peer_alone_names_no_origin(clf: Classifier, timeout: str) -> None:
    # a collective or a rendezvous that timed out says a peer did not arrive, not why
    steps = [f"{{'loss': 0.{90 - k}, 'grad_norm': 1.1, 'epoch': 0.01}}" for k in range(30)]
    d = diagnose_text("\n".join([*steps, timeout]), clf).diagnosis
    assert (d.category, d.origin) == ("comm_error", "unknown"), d
    # a communication failure that names its cause keeps its origin
    d = diagnose_text("\n".join([*steps, "torch.distributed.DistBackendError: NCCL error in: "
                                 "../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, unhandled system error "
                                 "(run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5"]), clf).diagnosis
    assert (d.category, d.origin) == ("comm_error", "infrastructure"), d


@pytest.mark.parametrize(("program", "origin"), [("./simplex", "user"), ("../build/solver --n 64", "user"),
                                               ("python3 train.py --epochs 10", "framework")])
def test_a_native_crash_of_the_job_s_own_program_is_the_user_s(clf: Classifier, program: str, origin: str) -> None:
    # glibc's heap check names the process by its argv[0]; bash's job-control line names the command
    argv0 = program.split()[0] if program.startswith(".") else "python3"
    log = "\n".join(["nvcc warning : The 'compute_35' architectures are deprecated", "iteration 120 objective 4.51",
                     f"*** Error in `{argv0}': corrupted size vs. prev_size: 0x00000000006ba7b0 ***",
                     "======= Backtrace: =========", "/lib64/libc.so.6(+0x7f474)[0x2aaaab0f2474]",
                     f"/var/spool/torque/mom_priv/jobs/1108.sched.SC: line 26: 158958 Aborted                 "
                     f"(core dumped) {program} > myoutput.log"])
    d = diagnose_text(log, clf).diagnosis
    assert (d.category, d.origin) == ("crash", origin), d


@pytest.mark.parametrize(("exc", "origin"), [
    ("RuntimeError: PytorchStreamReader failed reading zip archive: failed finding central directory", "unknown"),
    ("_pickle.UnpicklingError: invalid load key, '\\x00'.", "unknown"),
    # a checkpoint of another architecture is the job's own mix-up
    ("RuntimeError: Error(s) in loading state_dict for ViltForQuestionAnswering:\n\tMissing key(s) in state_dict: "
     "\"classifier.0.weight\".", "user"),
])
def test_a_damaged_checkpoint_does_not_say_who_damaged_it(clf: Classifier, exc: str, origin: str) -> None:
    log = "\n".join(["======= inference start =======", "inference done", "======= inference start =======",
                     "Traceback (most recent call last):", '  File "/home/u/vqa/predict.py", line 41, in <module>',
                     "    model.load_state_dict(torch.load(path, map_location=device))",
                     '  File "/opt/env/lib/python3.10/site-packages/torch/serialization.py", line 1004, in load',
                     "    with _open_zipfile_reader(opened_file) as opened_zipfile:", exc])
    d = diagnose_text(log, clf).diagnosis
    assert (d.category, d.origin) == ("checkpoint_error", origin), d


def test_exceptions_python_caught_do_not_decide(clf: Classifier) -> None:
    # the logging module's own error (stdout gone) and an exception ignored in __del__ are
    # printed with a traceback, but the process went on: the real error is the one above
    ignored = ("Exception ignored in: <function _MultiProcessingDataLoaderIter.__del__ at 0x7f3a2c1d5e50>\n"
               "Traceback (most recent call last):\n"
               '  File "/env/lib/python3.10/site-packages/torch/utils/data/dataloader.py", line 1479, in __del__\n'
               "    self._shutdown_workers()\n"
               "OSError: [Errno 5] Input/output error\n")
    text = ("Traceback (most recent call last):\n"
            '  File "/home/u/proj/plot.py", line 19, in calc_bins\n'
            "    acc = (labels_onehot[binned == b]).sum()\n"
            "NameError: name 'labels_onehot' is not defined\n" + ignored)
    d = diagnose_text(text, clf).diagnosis
    assert d.category == "semantic_error", d
    logging_error = ("Saved evaluation predictions to: out/eval/step_13000\n" * 3
                     + "--- Logging error ---\n"
                     "Traceback (most recent call last):\n"
                     '  File "/usr/lib/python3.10/logging/__init__.py", line 1084, in flush\n'
                     "    self.stream.flush()\n"
                     "OSError: [Errno 5] Input/output error\n"
                     "Call stack:\n"
                     '  File "/usr/lib/python3.10/threading.py", line 973, in _bootstrap\n'
                     "    self._bootstrap_inner()\n"
                     "Message: 'Parent appears to have exited, shutting down.'\n"
                     "Arguments: ()\n")
    d = diagnose_text(logging_error, clf).diagnosis
    assert d.category != "storage_error", d  # the I/O error is the logger's, not the job's storage


def test_an_exception_the_job_s_own_code_raised_is_its_own_error(clf: Classifier) -> None:
    tb = ("step 0: building model\n"
          "Traceback (most recent call last):\n"
          '  File "/home/u/proj/train.py", line 12, in <module>\n'
          "    model = build(cfg)\n"
          '  File "{where}", line 40, in build\n'
          "    raise {exc}\n"
          "{exc}\n")
    own = "/home/u/proj/models/factory.py"
    d = diagnose_text(tb.format(where=own, exc="models.factory.ConfigError: unsupported backbone: vit_h"), clf).diagnosis
    assert (d.category, d.origin, d.method) == ("semantic_error", "user", "rule"), d
    assert "own code raised models.factory.ConfigError" in (d.reason or "")
    # raised inside a library: not read as the job's own error
    lib = "/env/lib/python3.10/site-packages/timm/models/factory.py"
    d = diagnose_text(tb.format(where=lib, exc="timm.ConfigError: unsupported backbone: vit_h"), clf).diagnosis
    assert "own code raised" not in (d.reason or "")
    # an opaque RuntimeError, or one passing on another process's failure, does not tell the cause
    for exc in ("RuntimeError: Something went wrong during step 1200", "JobError: worker failed with status 3"):
        d = diagnose_text(tb.format(where=own, exc=exc), clf).diagnosis
        assert "own code raised" not in (d.reason or ""), d


def test_a_library_calling_what_its_dependency_lacks_is_an_environment_mismatch(clf: Classifier) -> None:
    text = ("Epoch 1:   0%|          | 0/500 [00:00<?, ?it/s]\n"
            "Traceback (most recent call last):\n"
            '  File "/home/u/proj/train.py", line 90, in <module>\n'
            "    for batch in loader:\n"
            '  File "/env/lib/python3.8/site-packages/datasets/features/image.py", line 189, in decode_example\n'
            "    if image.getexif().get(PIL.Image.ExifTags.Base.Orientation) is not None:\n"
            '  File "/env/lib/python3.8/site-packages/PIL/Image.py", line 76, in __getattr__\n'
            "    raise AttributeError(f\"module '{__name__}' has no attribute '{name}'\")\n"
            "AttributeError: module 'PIL.Image' has no attribute 'ExifTags'\n")
    d = diagnose_text(text, clf).diagnosis
    # README C4/C9: an API that changed between versions, failing at run time (not at import): semantic_error
    assert (d.category, d.rule_id) == ("semantic_error", "library-module-attribute-skew"), d
    # the job's own module lacking a name is its own bug
    own = ("Traceback (most recent call last):\n"
           '  File "/home/u/proj/train.py", line 12, in <module>\n'
           "    loss = helpers.focal_loss(x, y)\n"
           "AttributeError: module 'helpers' has no attribute 'focal_loss'\n")
    assert diagnose_text(own, clf).diagnosis.category == "semantic_error"


def test_root_cause_rank_traceback_printed_before_the_others(clf: Classifier) -> None:
    # rank 1 (torchrun's root cause) printed its traceback first; rank 0's follows; the
    # context must hold rank 1's own lines
    def tb(rank: int) -> str:
        return (f"[rank{rank}]: Traceback (most recent call last):\n"
                f'[rank{rank}]:   File "/home/u/proj/chat_eval.py", line 59, in run_eval\n'
                f"[rank{rank}]:     outcomes = [task.evaluate(c) for c in completions]\n"
                f'[rank{rank}]:   File "/usr/lib/python3.10/bdb.py", line 115, in dispatch_line\n'
                f"[rank{rank}]:     if self.quitting: raise BdbQuit\n"
                f"[rank{rank}]: bdb.BdbQuit\n")
    tail = (_TORCHRUN_TAIL.replace("rank      : 0 (local_rank: 0)", "rank      : 9 (local_rank: 9)")
            .replace("rank      : 1 (local_rank: 1)", "rank      : 0 (local_rank: 0)")
            .replace("rank      : 9 (local_rank: 9)", "rank      : 1 (local_rank: 1)"))
    text = ("step 00813 (100.00%) | loss: 1.02\n" * 3 + tb(1) + "(Pdb) \n" + tb(0)
            + "W0119 09:59:04.248000 492812 torch/distributed/elastic/multiprocessing/api.py:900] "
              "Sending process 492816 closing signal SIGTERM\n" + tail)
    w = diagnose_text(text, clf)
    assert w.first_rank == 1
    assert (w.diagnosis.category, w.diagnosis.rule_id) == ("semantic_error", "python-breakpoint-no-tty"), w.diagnosis


def test_nan_loss_to_the_end_explains_a_failure_whose_own_lines_do_not(clf: Classifier) -> None:
    epochs = "".join(f"2025-04-08 1{k}:32:34,921 [INFO] [Epoch {k}] Train Loss: {{loss}}, Val Loss: {{loss}}, LR: 0.0001\n"
                     for k in range(1, 6))
    end = ("2025-04-09 05:23:59,911 [INFO] Training completed. Starting evaluation...\n"
           "2025-04-09 05:25:29,465 [ERROR] Evaluation failed: Command '['python', 'evaluate.py', '--model_path', "
           "'out/model.pth']' returned non-zero exit status 1.\n")
    w = diagnose_text(epochs.format(loss="nan") + end, clf, calibrated=False)  # the confidence the reader states
    assert (w.diagnosis.category, w.diagnosis.confidence) == ("model_diverged", 0.7), w.diagnosis
    assert "Train Loss: nan" in w.diagnosis.evidence[0]
    # finite losses: the child's failure has no cause in the log
    assert diagnose_text(epochs.format(loss="0.4321") + end, clf).diagnosis.category == "unknown"


def test_a_generic_rule_on_the_terminal_exception_is_surer_in_a_whole_log(clf: Classifier) -> None:
    text = ("Traceback (most recent call last):\n"
            '  File "/home/u/proj/train.py", line 77, in <module>\n'
            "    cfg = configs[args.preset]\n"
            "KeyError: 'small-v2'\n")
    excerpt = clf.classify_text(text)
    whole = clf.classify_text(text, keep_final=True)
    assert excerpt.rule_id == whole.rule_id == "python-logic-exception"
    assert excerpt.confidence == 0.75 and whole.confidence == 0.85


def test_argparse_rejecting_the_command_line_is_a_configuration_error(clf: Classifier) -> None:
    text = ("usage: finetune.py [-h] [--model MODEL] [--lora_rank LORA_RANK]\n"
            "                   [--fp16 [FP16]] [--stage {sft,rm,ppo}]\n"
            "finetune.py: error: argument --stage: invalid choice: 'dpo' (choose from 'sft', 'rm', 'ppo')\n")
    d = diagnose_text(text, clf).diagnosis
    assert (d.category, d.rule_id) == ("semantic_error", "argparse-usage-error"), d
    assert "argparse-usage-error" not in {m.rule.id for m in match_rules(
        "srun: error: argument --gres: invalid generic resource specification")}


@pytest.mark.parametrize("exc,category", [
    ("RuntimeError: Expected to have finished reduction in the prior iteration before starting a new one. "
     "This error indicates that your module has parameters that were not used in producing loss.", "semantic_error"),
    ("ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
     "initializing the engine.", "gpu_oom"),
    ("ValueError: Your setup doesn't support bf16/gpu. You need torch>=1.10, using Ampere GPU with cuda>=11.0",
     "cuda_env_error"),
    ("OSError: You are trying to access a gated repo.", "permission_error"),
])
def test_common_terminal_exceptions_of_llm_jobs(clf: Classifier, exc: str, category: str) -> None:
    text = ("{'loss': 1.2034, 'grad_norm': 3.1, 'learning_rate': 2e-05, 'epoch': 0.01}\n"
            "Traceback (most recent call last):\n"
            '  File "/home/u/proj/train.py", line 200, in <module>\n    main()\n'
            '  File "/env/lib/python3.10/site-packages/lib/engine.py", line 50, in step\n    self.run()\n'
            f"{exc}\n")
    d = diagnose_text(text, clf).diagnosis
    assert (d.category, d.method) == (category, "rule"), d


def test_the_child_s_error_beats_the_launcher_s_summary(clf: Classifier) -> None:
    # accelerate's simple launcher ends with its own CalledProcessError traceback (a secondary
    # summary): the child's generic error printed above it is the answer
    text = ("Epoch 1:  10%|#         | 100/1000 [01:00<09:00, 1.6it/s, loss=0.52]\n" * 3
            + "Traceback (most recent call last):\n"
            '  File "/home/u/proj/train.py", line 120, in main\n    x = batch["pixel_values"]\n'
            "KeyError: 'pixel_values'\n"
            "Traceback (most recent call last):\n"
            '  File "/env/bin/accelerate", line 8, in <module>\n    sys.exit(main())\n'
            '  File "/env/lib/python3.10/site-packages/accelerate/commands/launch.py", line 1000, in simple_launcher\n'
            "    raise subprocess.CalledProcessError(returncode=process.returncode, cmd=cmd)\n"
            "subprocess.CalledProcessError: Command '['/env/bin/python', 'train.py']' returned non-zero exit status 1.\n")
    d = diagnose_text(text, clf).diagnosis
    assert (d.category, d.rule_id) == ("semantic_error", "python-logic-exception"), d


def test_ray_worker_prefixes_are_read_through(clf: Classifier) -> None:
    from gpulens.diagnosis.logread.lineprefix import strip_ray_prefixes

    p = "\x1b[36m(RayTrainWorker pid=4242, ip=10.0.0.5)\x1b[0m "
    assert strip_ray_prefixes([p + '  File "/home/u/proj/train.py", line 120, in train_func',
                               "\x1b[33m(raylet)\x1b[0m A worker died or was killed", "(Not a prefix) x"]) == \
        ['  File "/home/u/proj/train.py", line 120, in train_func', "A worker died or was killed", "(Not a prefix) x"]
    text = (f"{p}Epoch 1:  10%|#         | 100/1000 [01:00<09:00, 1.6it/s, loss=0.52]\n" * 3
            + f"{p}Traceback (most recent call last):\n"
            f'{p}  File "/home/u/proj/train.py", line 120, in train_func\n'
            f'{p}    x = batch["pixel_values"]\n'
            f"{p}KeyError: 'pixel_values'\n"
            "Traceback (most recent call last):\n"
            '  File "/home/u/proj/launch.py", line 30, in <module>\n    result = trainer.fit()\n'
            '  File "/env/lib/python3.10/site-packages/ray/train/base_trainer.py", line 638, in fit\n'
            "    raise TrainingFailedError\n"
            "ray.train.base_trainer.TrainingFailedError: The Ray Train run failed. Please inspect the previous "
            "error messages for a cause.\n")
    d = diagnose_text(text, clf).diagnosis
    assert d.category == "semantic_error", d


def test_a_missing_checkpoint_after_an_earlier_crash_is_its_aftermath(clf: Classifier) -> None:
    # the training step died of CUDA OOM, so the evaluation step of the same script finds no
    # checkpoint: the OOM is the cause
    oom = ("Traceback (most recent call last):\n"
           '  File "/home/u/proj/train.py", line 120, in main\n    loss.backward()\n'
           "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
           "79.15 GiB of which 1.20 GiB is free.\n")
    missing = ("Running evaluation...\n"
               "Traceback (most recent call last):\n"
               '  File "/home/u/proj/eval.py", line 20, in <module>\n    sd = torch.load(args.ckpt)\n'
               "FileNotFoundError: [Errno 2] No such file or directory: 'out/run1/model_final.pt'\n")
    prog = "Epoch 1:  10%|#         | 100/1000 [01:00<09:00, 1.6it/s, loss=0.52]\n" * 3
    d = diagnose_text(prog + oom + missing, clf).diagnosis
    assert (d.category, d.rule_id) == ("gpu_oom", "torch-cuda-oom"), d
    # alone, the missing checkpoint is the answer
    assert diagnose_text(prog + missing, clf).diagnosis.category == "checkpoint_error"


def test_a_caught_block_without_its_end_drops_no_more_than_its_traceback() -> None:
    from gpulens.diagnosis.logread.end.caught import drop_caught

    ctx = ["--- Logging error ---", "Traceback (most recent call last):",
           '  File "/usr/lib/python3.10/logging/__init__.py", line 1084, in flush', "    self.stream.flush()",
           "OSError: [Errno 5] Input/output error",
           "Traceback (most recent call last):", '  File "/home/u/proj/train.py", line 9, in <module>',
           "    main()", "KeyError: 'text'"]
    assert drop_caught(ctx) == ctx[5:]


@pytest.mark.parametrize("with_traceback", [True, False])
def test_an_abort_after_the_exception_means_the_exception_did_not_end_it(clf: Classifier, with_traceback: bool) -> None:
    from gpulens.diagnosis.classifier import _ended_it

    head = ('Traceback (most recent call last):\n  File "/home/u/proj/train.py", line 9, in step\n'
            "    out = model(x)\n") if with_traceback else ""
    exc = "ValueError: You have to specify either input_ids or inputs_embeds\n"
    abort = "Epoch 2:  89%|########9 | 1905/2142 [22:16<02:46,  1.43it/s, loss=0.487]\nAborted (core dumped)\n"
    for text, final in ((head + exc, True), (head + exc + abort, False)):
        view = logs.analyze(text)
        match = next(m for m in match_rules(view.focus) if m.rule.id == "python-logic-exception")
        assert _ended_it(view, match) is final, text


def test_a_stage_that_died_before_a_later_stage_ran_is_the_cause(clf: Classifier) -> None:
    # a job script runs base training, then mid training, each with torchrun; the first stage
    # fails on a full disk; the second stage (which ran and printed steps) finds no checkpoint
    steps = [f"step {k:05d}/00500 | loss: {3.0 - k / 300:.4f} | dt: 412.3ms" for k in range(0, 300, 20)]
    disk = ["[rank0]: Traceback (most recent call last):",
            '[rank0]:   File "/w/scripts/mid_train.py", line 41, in <module>',
            "[rank0]:     ds = load_dataset('cais/mmlu', 'all')",
            "[rank0]: OSError: Not enough disk space. Needed: Unknown size (download: 45.32 MiB, generated: 153.54 MiB)",
            "E1015 10:41:07.123000 331 torch/distributed/elastic/multiprocessing/api.py:874] failed (exitcode: 1)"]
    later = [f"[rank0]: Step {k:05d}/00600 | Training loss: {1.5 - k / 1000:.4f}" for k in range(0, 200, 20)] + [
        "[rank0]: Traceback (most recent call last):",
        '[rank0]:   File "/w/scripts/chat_sft.py", line 64, in <module>',
        "[rank0]:     model = load_model('mid', device)",
        "[rank0]: FileNotFoundError: [Errno 2] No such file or directory: '/root/.cache/run/mid_checkpoints'",
        "E1015 10:52:11.456000 912 torch/distributed/elastic/multiprocessing/api.py:874] failed (exitcode: 1)"]
    d = diagnose_text("\n".join(steps + disk + later), clf).diagnosis
    assert (d.category, d.origin) == ("storage_error", "infrastructure"), d
    assert "earlier stage" in (d.reason or "")
    assert diagnose_text("\n".join(steps + later), clf).diagnosis.category == "checkpoint_error"


@pytest.mark.parametrize("exc", [
    "RuntimeError: mat2 must be a matrix, got 1-D tensor",
    "RuntimeError: both arguments to matmul need to be at least 1D, but they are 0D and 2D",
    "RuntimeError: The expanded size of the tensor (12) must match the existing size (7) at non-singleton dimension 1.",
    "RuntimeError: einsum(): operands do not broadcast with remapped shapes (original->remapped): [2, 3]->[2, 3]",
])
def test_more_aten_shape_checks_on_every_rank_are_the_job_s_own_error(clf: Classifier, exc: str) -> None:
    tb = []
    for rank in (1, 0):
        tb += [f"[rank{rank}]: Traceback (most recent call last):",
               f'[rank{rank}]:   File "/w/proj/model.py", line 77, in forward',
               f"[rank{rank}]:     h = torch.mm(x, self.proj)", f"[rank{rank}]: {exc}"]
    tail = ["E0412 09:10:11.000000 1200 torch/distributed/elastic/multiprocessing/api.py:874] failed (exitcode: 1) "
            "local_rank: 0 (pid: 1201) of binary: /env/bin/python",
            "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: "]
    d = diagnose_text("\n".join(tb + tail), clf).diagnosis
    assert (d.category, d.origin) == ("semantic_error", "user"), d
    assert {m.rule.id for m in match_rules(exc)} == {"aten-shape-checks"}


def test_behind_a_launcher_s_report_the_child_s_own_error_decides(clf: Classifier) -> None:
    # no rank prefixes: one child dies of OOM while the other prints its bar a few more times;
    # the launcher then only reports that a child failed
    bar = [f" {k}%|███       | {k * 10}/1000 [01:{k:02d}<09:00,  1.6it/s]" for k in range(30, 34)]
    oom = ["Traceback (most recent call last):", '  File "/w/src/train.py", line 88, in <module>', "    main()",
           '  File "/w/src/train.py", line 70, in main', "    loss.backward()",
           "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB. GPU 1 has a total capacity of "
           "23.69 GiB of which 312.00 MiB is free."]
    more = [f"{{'loss': 0.{80 - k}, 'grad_norm': 1.2, 'learning_rate': 1e-05, 'epoch': 0.3}}" for k in range(4)]
    more += [f" {k}%|███       | {k * 10}/1000 [01:{k:02d}<09:00,  1.6it/s]" for k in range(34, 38)]
    launcher = ["Traceback (most recent call last):", '  File "/env/bin/accelerate", line 8, in <module>',
                "    sys.exit(main())",
                '  File "/env/lib/python3.10/site-packages/accelerate/commands/launch.py", line 1168, in launch_command',
                "    simple_launcher(args)",
                "subprocess.CalledProcessError: Command '['/env/bin/python', 'src/train.py']' returned non-zero "
                "exit status 1."]
    d = diagnose_text("\n".join(bar + oom + more + launcher), clf).diagnosis
    assert d.category == "gpu_oom", d
    assert "child's own error" in (d.reason or "")


@pytest.mark.parametrize(("exc", "category", "origin"), [
    ("OSError: [Errno 24] Too many open files", "storage_error", "infrastructure"),
    ("OSError: [Errno 23] Too many open files in system", "storage_error", "infrastructure"),
    ("huggingface_hub.errors.LocalEntryNotFoundError: Cannot find the requested files in the disk cache and "
     "outgoing traffic has been disabled. To enable hf.co look-ups and downloads online, set 'local_files_only' "
     "to False.", "checkpoint_error", "user"),  # README C8: a model's cache miss with the Hub offline
])
def test_errno_and_hub_messages_behind_a_torchrun_report_decide(clf: Classifier, exc: str, category: str,
                                                               origin: str) -> None:
    # the child's own exception, then torchrun's report (a secondary-only "unknown" before these rules)
    log = "\n".join([
        "[rank0]: Traceback (most recent call last):",
        '[rank0]:   File "/work/eval.py", line 212, in <module>',
        "[rank0]:     feats = extract(loader)",
        f"[rank0]: {exc}",
    ]) + "\n" + _TORCHRUN_TAIL
    d = diagnose_text(log, clf).diagnosis
    assert (d.category, d.origin, d.method) == (category, origin, "rule")


@pytest.mark.parametrize(("exc", "category"), [
    ("OSError: Can't load tokenizer for 'org/model-7b'. If you were trying to load it from "
     "'https://huggingface.co/models', make sure you don't have a local directory with the same name.",
     "checkpoint_error"),
    ("OSError: Can't load the configuration of '/scratch/run4/final'. If you were trying to load it from "
     "'https://huggingface.co/models', make sure you don't have a local directory with the same name.",
     "checkpoint_error"),
    ("RuntimeError: Cannot re-initialize CUDA in forked subprocess. To use CUDA with multiprocessing, you must "
     "use the 'spawn' start method", "semantic_error"),
])
def test_library_messages_that_name_their_cause_are_not_left_to_the_model(clf: Classifier, exc: str,
                                                                         category: str) -> None:
    log = "\n".join(["Loading config from configs/sft.yaml", "Traceback (most recent call last):",
                     '  File "/work/sft.py", line 40, in <module>', "    main()", exc])
    d = diagnose_text(log, clf).diagnosis
    assert (d.category, d.origin, d.method) == (category, "user", "rule")


@pytest.mark.parametrize(("term", "origin"), [
    ("TERM_OWNER: job killed by owner.", "user"),  # LSF names the owner (README "Origin: rules", O3)
    ("TERM_ADMIN: job killed by root or LSF administrator.", "unknown"),  # an administrator, no reason
    ("TERM_CPULIMIT: job killed after reaching LSF CPU usage limit.", "infrastructure"),
    ("TERM_WINDOW: job killed after queue run window closed.", "infrastructure"),
])
def test_lsf_exit_reasons_of_a_job_killed_from_outside(clf: Classifier, term: str, origin: str) -> None:
    # LSF's job report: the TERM_ reason, then the exit code the signal left
    log = "\n".join([*(f"Epoch 4 [{k}/500] loss: 0.{k:03d}" for k in range(100, 130)), "",
                     "------------------------------------------------------------", "", term,
                     "Exited with exit code 140.", "", "Resource usage summary:", "", "    CPU time :   3000.00 sec."])
    d = diagnose_text(log, clf).diagnosis
    assert (d.category, d.origin, d.method) == ("preempted", origin, "rule")


def test_srun_s_node_failure_is_the_scheduler_s_end_not_a_gpu_fault(clf: Classifier) -> None:
    log = "\n".join([*(f"[rank0] step {k} loss 2.{k:03d}" for k in range(200, 230)),
                     "srun: error: Node failure on gpu-a17", "srun: Job step aborted: Waiting up to 32 seconds for job step to finish."])
    d = diagnose_text(log, clf).diagnosis
    assert (d.category, d.origin, d.method) == ("preempted", "infrastructure", "rule")


@pytest.mark.parametrize(("exc", "category", "origin"), [
    # c10's CUDA_CHECK prints "CUDA error: <cudaGetErrorString>", its driver check "CUDA driver error:",
    # Triton "Triton Error [CUDA]:": any CUDA error string no more specific rule names is a CUDA error
    ("RuntimeError: Triton Error [CUDA]: invalid argument", "cuda_error", "framework"),
    ("RuntimeError: CUDA driver error: an illegal memory access was encountered", "cuda_error", "framework"),
    ("torch.AcceleratorError: CUDA error: operation not permitted when stream is capturing", "cuda_error", "framework"),
    ("RuntimeError: CUDA error: out of memory", "gpu_oom", "user"),
    # cudaErrorInvalidDeviceFunction: "not compiled for the proper device architecture", as no kernel image
    ("RuntimeError: CUDA error: invalid device function", "cuda_env_error", "user"),
    ("RuntimeError: CUDA error: initialization error", "cuda_env_error", "infrastructure"),
    ("torch.cuda.DeferredCudaCallError: CUDA call failed lazily at initialization with error: device >= 0 && "
     "device < num_gpus INTERNAL ASSERT FAILED at \"../aten/src/ATen/cuda/CUDAContext.cpp\":50, please report a "
     "bug to PyTorch. device=1, num_gpus=1", "cuda_env_error", "infrastructure"),
    ("pynvml.NVMLError_GpuIsLost: GPU is lost", "gpu_hardware", "infrastructure"),
    ("ValueError: The loss returned in `training_step` is nan or inf.", "model_diverged", "user"),
    # torch.distributions prints the constraint's repr, nested for an independent one
    ("ValueError: Expected parameter logits (Tensor of shape (8, 512)) of distribution Categorical(logits: "
     "torch.Size([8, 512])) to satisfy the constraint IndependentConstraint(Real(), 1), but found invalid values:\n"
     "tensor([[nan, nan, nan,  ..., nan, nan, nan]], device='cuda:0')", "model_diverged", "user"),
    ("ValueError: Detected nan and/or inf values in `encoder.layers.3.attn.q_proj.weight`. Check your forward "
     "pass for numerically unstable operations.", "model_diverged", "user"),
    ("deepspeed.runtime.zero.utils.ZeRORuntimeException: The checkpoint being loaded used a DP world size of 8 "
     "but the current world size is 4. Automatic adjustment of ZeRO's optimizer state partitioning with a new "
     "world size is not currently supported.", "checkpoint_error", "user"),
    ("ValueError: Expected a string path to an existing deepspeed config, or a dictionary, or a base64 encoded "
     "string. Received: configs/zero3.json", "semantic_error", "user"),  # README C2/C4: the job's own config
    # TensorFlow's label check, the counterpart of ATen's n_classes device assert
    ("tensorflow.python.framework.errors_impl.InvalidArgumentError: Graph execution error:\n\nNode: "
     "'sparse_categorical_crossentropy/SparseSoftmaxCrossEntropyWithLogits'\nReceived a label value of 10 which is "
     "outside the valid range of [0, 10).  Label values: 3 10 2", "incorrect_input", "data"),
])
def test_framework_messages_of_rare_categories_decide(clf: Classifier, exc: str, category: str, origin: str) -> None:
    log = "\n".join([*(f"step {k} loss 1.{k:03d}" for k in range(10, 40)), "Traceback (most recent call last):",
                     '  File "/work/train.py", line 88, in <module>', "    trainer.train()", exc])
    d = diagnose_text(log, clf).diagnosis
    assert (d.category, d.origin, d.method) == (category, origin, "rule"), d


@pytest.mark.parametrize("why", ["Invalid generic resource (gres) specification",
                                 "More processors requested than permitted",
                                 "Memory required by task is not available"])
def test_srun_refusing_the_job_script_s_request_is_its_configuration_error(clf: Classifier, why: str) -> None:
    # srun's "Unable to create step for job N: %m" with a slurm_errno text about the request: the
    # step never started, whatever pip printed while the script set up its environment
    log = "\n".join(["Collecting vllm==0.7.2", "ERROR: pip's dependency resolver does not currently take into account "
                     "all the packages that are installed.", "Successfully installed vllm-0.7.2",
                     "Setup complete. Ready to run.", f"srun: error: Unable to create step for job 5150: {why}"])
    d = diagnose_text(log, clf).diagnosis
    assert (d.category, d.origin, d.method) == ("semantic_error", "user", "rule"), d
    # a step refused because the job is already ending is the cancel's aftermath, not the script's request
    late = log.replace(why, "Job/step already completing or completed")
    assert diagnose_text(late, clf).diagnosis.rule_id != "srun-request-refused"


def test_slurmstepd_that_cannot_execute_the_script_is_a_permission_error(clf: Classifier) -> None:
    log = "\n".join(["Loading modules cuda/12.1", "slurmstepd: error: execve(): run_train.sh: Permission denied",
                     "srun: error: gpu-b07: task 0: Exited with exit code 13"])
    d = diagnose_text(log, clf).diagnosis
    assert (d.category, d.method) == ("permission_error", "rule"), d


def test_an_exception_while_a_library_is_imported_is_an_environment_mismatch(clf: Classifier) -> None:
    env = "/opt/envs/seg/lib/python3.8/site-packages"
    chain = ["Traceback (most recent call last):",
             '  File "/home/u/seg/train.py", line 6, in <module>',
             "    import albumentations as A",
             f'  File "{env}/albumentations/__init__.py", line 4, in <module>',
             "    from .augmentations import *",
             '  File "<frozen importlib._bootstrap>", line 219, in _call_with_frames_removed',
             f'  File "{env}/distributed/__init__.py", line 3, in <module>',
             "    from . import config",
             f'  File "{env}/distributed/config.py", line 20, in <module>',
             "    defaults = yaml.load(f)",
             "TypeError: load() missing 1 required positional argument: 'Loader'"]
    d = diagnose_text("\n".join(["Loading config configs/seg.yaml", *chain]), clf).diagnosis
    assert (d.category, d.origin) == ("import_error", "user"), d
    assert "imported distributed" in (d.reason or "")
    # the job's own module-level code calling a library is no import: the job's own error
    own = ["Traceback (most recent call last):",
           '  File "/home/u/seg/train.py", line 30, in <module>',
           "    cfg = yaml.load(open(args.config))",
           "TypeError: load() missing 1 required positional argument: 'Loader'"]
    assert diagnose_text("\n".join(own), clf).diagnosis.category == "semantic_error"
    # a library's module-level code reached from the job's own call (not an import) is no import-time error
    called = ["Traceback (most recent call last):",
              '  File "/home/u/seg/train.py", line 30, in <module>',
              "    model = build(cfg)",
              f'  File "{env}/segmodels/factory.py", line 12, in build',
              "    return REGISTRY[cfg.name](cfg)",
              "KeyError: 'unet++'"]
    assert "imported" not in (diagnose_text("\n".join(called), clf).diagnosis.reason or "")


@pytest.mark.parametrize("exc", [
    "RuntimeError: view size is not compatible with input tensor's size and stride (at least one dimension spans "
    "across two contiguous subspaces). Use .reshape(...) instead.",
    "RuntimeError: 0D or 1D target tensor expected, multi-target not supported",
    "RuntimeError: a leaf Variable that requires grad is being used in an in-place operation.",
    "RuntimeError: grad can be implicitly created only for scalar outputs",
    "RuntimeError: Boolean value of Tensor with more than one value is ambiguous",
    "RuntimeError: indices should be either on cpu or on the same device as the indexed tensor (cpu)",
    "RuntimeError: Input and hidden tensors are not at the same device, found input tensor at cuda:0 and hidden "
    "tensor at cpu",
    "RuntimeError: module must have its parameters and buffers on device cuda:0 (device_ids[0]) but found one of "
    "them on device: cpu",
    # DataParallel's replicate/broadcast (torch/csrc/cuda/comm.cpp; torch/cuda/comm.py before it)
    "RuntimeError: All tensors must be on devices[0]: 0",
    "RuntimeError: all tensors must be on devices[0]",
    "RuntimeError: \"addmm_impl_cpu_\" not implemented for 'Half'",
    "RuntimeError: It looks like your LightningModule has parameters that were not used in producing the loss "
    "returned by training_step. If this is intentional, you must enable the detection of unused parameters in DDP.",
    "lightning.fabric.utilities.exceptions.MisconfigurationException: `configure_optimizers` must include a monitor "
    "when a `ReduceLROnPlateau` scheduler is used.",
])
def test_torch_and_lightning_checks_of_the_job_s_own_code_are_rules(clf: Classifier, exc: str) -> None:
    # PyTorch's TORCH_CHECK messages and Lightning's configuration checks name a bug in the job's
    # code: a rule decides them, not the model's guess (which abstained on most of them)
    log = "\n".join([*(f"Epoch 2: step {k}/5000 loss 1.{k:03d}" for k in range(100, 140)), "Traceback (most recent call last):",
                     '  File "/home/u/proj/train.py", line 210, in <module>', "    main()", exc])
    d = diagnose_text(log, clf).diagnosis
    assert (d.category, d.origin, d.method) == ("semantic_error", "user", "rule"), d


@pytest.mark.parametrize(("frames", "exc", "category"), [
    ((), "ValueError: The checkpoint you are trying to load has model type `qwen2_vl` but Transformers does not "
         "recognize this architecture. This could be because of an issue with the checkpoint, or because your "
         "version of Transformers is out of date.", "import_error"),
    ((), "ValueError: Tokenizer class LlamaTokenizer does not exist or is not currently imported.", "import_error"),
    # an older transformers: CONFIG_MAPPING has no such model type
    (('  File "/env/lib/python3.9/site-packages/transformers/models/auto/configuration_auto.py", line 710, in __getitem__',
      "    raise KeyError(key)"), "KeyError: 'qwen2'", "import_error"),
    ((), "ValueError: Can't find a valid checkpoint at /scratch/run3/checkpoint-2000", "checkpoint_error"),
    ((), "ValueError: Can't find a checkpoint index (pytorch_model.bin.index.json) in /scratch/run3/final.",
     "checkpoint_error"),
    ((), "ValueError: Unrecognized model in /scratch/run3/final. Should have a `model_type` key in its config.json, "
         "or contain one of the following strings in its name: albert, bart, bert", "checkpoint_error"),
    ((), "RuntimeError: Parent directory checkpoints/run7 does not exist.", "semantic_error"),
])
def test_hugging_face_and_torch_save_messages_decide(clf: Classifier, frames: tuple[str, ...], exc: str,
                                                     category: str) -> None:
    log = "\n".join(["Loading config configs/sft.yaml", "Traceback (most recent call last):",
                     '  File "/work/sft.py", line 40, in <module>', "    main()", *frames, exc])
    d = diagnose_text(log, clf).diagnosis
    assert (d.category, d.origin, d.method) == (category, "user", "rule"), d
    # the same KeyError raised by the job's own dict is its own bug
    if frames:
        own = "\n".join(["Traceback (most recent call last):", '  File "/work/sft.py", line 40, in <module>',
                         "    lr = cfg['qwen2']", exc])
        assert diagnose_text(own, clf).diagnosis.category == "semantic_error"


@pytest.mark.parametrize("prefix", [
    lambda i: f"2024-05-01 10:00:{i % 60:02d},123 - root - ERROR - ",  # a logger's fields on every line
    lambda i: "node-a17: ",  # pdsh/DeepSpeed's host prefix
    lambda i: "trainer-1  | ",  # docker compose
    lambda i: f"May 01 10:00:{i % 60:02d} gpu-07 python[4242]: ",  # journald
    lambda i: f"2024-05-01T10:00:{i % 60:02d}.123456789Z stderr F ",  # a container runtime's log file
    lambda i: "\x1b[31m",  # a colour code
])
def test_a_tool_s_prefix_on_every_traceback_line_is_read_through(clf: Classifier, prefix) -> None:  # type: ignore[no-untyped-def]
    lines = [*(f"step {k} loss 1.{k:03d}" for k in range(30)), "Traceback (most recent call last):",
             '  File "/home/u/proj/train.py", line 150, in main', "    loss = model(batch['labels'])", "KeyError: 'labels'"]
    d = diagnose_text("\n".join(prefix(i) + ln for i, ln in enumerate(lines)), clf).diagnosis
    assert (d.category, d.method) == ("semantic_error", "rule"), d


def test_strip_line_prefixes_keeps_other_lines() -> None:
    from gpulens.diagnosis.logread.lineprefix import strip_line_prefixes
    ctx = ["w-1 | step 3", "w-1 | Traceback (most recent call last):", 'w-1 |   File "t.py", line 2, in <module>',
           "db | step 4", "w-1 | KeyError: 'x'"]
    assert strip_line_prefixes(ctx) == ["w-1 | step 3", "Traceback (most recent call last):",
                                        '  File "t.py", line 2, in <module>', "db | step 4", "KeyError: 'x'"]
    assert strip_line_prefixes(["    Traceback (most recent call last):", "    x"]) == [
        "    Traceback (most recent call last):", "    x"]  # indentation is no prefix


@pytest.mark.parametrize(("code", "exc", "category"), [
    ("    assert not torch.isnan(loss).any()", "AssertionError", "model_diverged"),
    ("    assert torch.isfinite(grad_norm), grad_norm", "AssertionError: tensor(inf, device='cuda:0')", "model_diverged"),
    ("    raise ValueError('Found NaN in gradients')", "ValueError: Found NaN in gradients", "model_diverged"),
    ("    raise FloatingPointError('gradients are Nan/Inf')", "FloatingPointError: gradients are Nan/Inf", "model_diverged"),
    # a NaN check on the inputs is no divergence
    ("    assert not np.isnan(features).any()", "AssertionError", "semantic_error"),
])
def test_a_training_loop_s_own_nan_guard_is_divergence(clf: Classifier, code: str, exc: str, category: str) -> None:
    log = "\n".join([*(f"step {k} loss 1.{k:03d}" for k in range(40)), "Traceback (most recent call last):",
                     '  File "/home/u/proj/train.py", line 88, in <module>', code, exc])
    assert diagnose_text(log, clf).diagnosis.category == category


@pytest.mark.parametrize(("exc", "category", "origin"), [
    # DeepSpeed's inference kernels (hybrid engine generation) cannot fit their workspace
    ("RuntimeError: Workspace can't be allocated, not enough memory", "gpu_oom", "user"),
    # activation checkpointing's recomputation differs from the forward (torch.utils.checkpoint)
    ("torch.utils.checkpoint.CheckpointError: torch.utils.checkpoint: Recomputed values for the following tensors "
     "have different metadata than during the forward pass.\ntensor at position 3:\n"
     "saved metadata: {'shape': torch.Size([1024]), 'dtype': torch.float16, 'device': device(type='cuda', index=1)}\n"
     "recomputed metadata: {'shape': torch.Size([0]), 'dtype': torch.float16, 'device': device(type='cuda', index=1)}",
     "semantic_error", "framework"),
    # the parser's own exception: the INI file lacks the option, raised while handling a KeyError
    ("KeyError: 'warmup_ratio'\n\nDuring handling of the above exception, another exception occurred:\n\n"
     "Traceback (most recent call last):\n  File \"/work/train.py\", line 31, in <module>\n"
     "    warm = cfg.getfloat('sched', 'warmup_ratio')\n"
     "configparser.NoOptionError: No option 'warmup_ratio' in section: 'sched'", "semantic_error", "user"),  # README C4
    # requests' raise_for_status: a tracker's server rate-limits or fails (not a 404 of the job's own URL)
    ("requests.exceptions.HTTPError: 429 Client Error: Too Many Requests for url: https://api.wandb.ai/graphql",
     "comm_error", "infrastructure"),
    ("huggingface_hub.utils._errors.HfHubHTTPError: 502 Server Error: Bad Gateway for url: "
     "https://huggingface.co/api/models/org/m-7b", "comm_error", "infrastructure"),
    # torchvision's import-time check of its wheel against torch's CUDA build
    ("RuntimeError: Detected that PyTorch and torchvision were compiled with different CUDA major versions. "
     "PyTorch has CUDA Version=12.1 and torchvision has CUDA Version=11.8. Please reinstall the torchvision that "
     "matches your PyTorch install.", "cuda_env_error", "user"),
])
def test_library_messages_read_from_their_source_decide(clf: Classifier, exc: str, category: str,
                                                        origin: str) -> None:
    log = "\n".join([*(f"step {k} loss 1.{k:03d}" for k in range(10, 40)), "Traceback (most recent call last):",
                     '  File "/work/train.py", line 88, in <module>', "    trainer.train()", exc])
    d = diagnose_text(log, clf).diagnosis
    assert (d.category, d.origin, d.method) == (category, origin, "rule"), d


@pytest.mark.parametrize("errno", ["[Errno 101] Network is unreachable", "[Errno -3] Temporary failure in name resolution"])
def test_a_hub_download_without_network_is_a_connection_failure(clf: Classifier, errno: str) -> None:
    # requests/urllib3's chain as a rank prints it when the node cannot reach the Hub
    log = "\n".join([
        "[rank3]: Traceback (most recent call last):",
        '[rank3]:   File "/env/lib/python3.11/site-packages/urllib3/connection.py", line 198, in _new_conn',
        "[rank3]:     sock = connection.create_connection(",
        f"[rank3]: OSError: {errno}",
        "[rank3]: ",
        "[rank3]: The above exception was the direct cause of the following exception:",
        "[rank3]: ",
        "[rank3]: Traceback (most recent call last):",
        '[rank3]:   File "/work/sft.py", line 40, in <module>',
        "[rank3]:     tok = AutoTokenizer.from_pretrained(args.model)",
        "[rank3]: requests.exceptions.ConnectionError: (MaxRetryError(\"HTTPSConnectionPool(host='huggingface.co', "
        "port=443): Max retries exceeded with url: /api/models/org/m-1b/tree/main (Caused by NewConnectionError("
        f"'<urllib3.connection.HTTPSConnection object at 0x7f00>: Failed to establish a new connection: {errno}'))\"))",
    ])
    d = diagnose_text(log + "\n" + _TORCHRUN_TAIL, clf).diagnosis
    assert (d.category, d.origin, d.method) == ("comm_error", "infrastructure", "rule"), d


def test_a_rank_s_traceback_code_line_behind_its_prefix_is_no_progress(clf: Classifier) -> None:
    # a tracker's copy of stdout ends with rank 0's traceback, whose code lines name the loss, and
    # the exception's own continuation lines: the run failed, it did not go on
    frames = [f'[rank0]:   File "/env/lib/python3.10/site-packages/deepspeed/runtime/engine.py", line {2100 + k}, in backward\n'
              f"[rank0]:     self._do_optimizer_backward(loss, retain_graph{k})" for k in range(6)]
    meta = [f"[rank0]: tensor at position {k}:\n"
            "[rank0]: saved metadata: {'shape': torch.Size([896]), 'dtype': torch.bfloat16}\n"
            "[rank0]: recomputed metadata: {'shape': torch.Size([0]), 'dtype': torch.bfloat16}" for k in range(12)]
    log = "\n".join([*(f"{k}%|          | {k}/375 [00:{k:02d}<10:00, 1.2s/it]" for k in range(5)),
                     "[rank0]: Traceback (most recent call last):", *frames,
                     "[rank0]: torch.utils.checkpoint.CheckpointError: torch.utils.checkpoint: Recomputed values for "
                     "the following tensors have different metadata than during the forward pass.", *meta])
    w = diagnose_text(log, clf)
    assert (w.diagnosis.category, w.diagnosis.origin) == ("semantic_error", "framework"), w.diagnosis
    assert w.indicator_lines == [7 + 2 * len(frames)]


def _watchdog(r: int) -> str:
    """NCCL's watchdog timeout on rank ``r`` and the C++ abort it ends in (ProcessGroupNCCL)."""
    what = (f"[PG ID 6 PG GUID 51 Rank {r}] Process group watchdog thread terminated with exception: [Rank {r}] "
            "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=40827, OpType=ALLREDUCE, NumelIn=4096, "
            f"NumelOut=4096, Timeout(ms)=600000) ran for 6000{r} milliseconds before timing out.")
    return "\n".join([f"[rank{r}]:[E107 08:49:59.1{r:02d}] ProcessGroupNCCL.cpp:1595] {what}",
                      "terminate called after throwing an instance of 'c10::DistBackendError'", f"  what():  {what}",
                      "Exception raised from checkTimeout at ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:618 "
                      "(most recent call first):",
                      *(f"frame #{k}: c10d::ProcessGroupNCCL::watchdogHandler() + 0x{k}33 (0x7f90 in "
                        "/env/lib/python3.11/site-packages/torch/lib/libtorch_cuda.so)" for k in range(24))])


#: Every other rank's watchdog timeout (hundreds of lines of C++ frames), then srun's line for
#: each task the abort ended.
_NCCL_TIMEOUTS = "\n".join([*(_watchdog(r) for r in range(16) if r != 12),
                            *(f"srun: error: gpu-b0{1 + t // 8}: task {t}: Aborted (core dumped)"
                              for t in range(16) if t != 12)])


@pytest.mark.parametrize(("died", "category"), [
    ("slurmstepd-gpu-b02: error: Detected 1 oom-kill event(s) in StepId=77.0. Some of your processes may have been "
     "killed by the cgroup out-of-memory handler.\nsrun: error: gpu-b02: task 12: Out Of Memory", "cpu_oom"),
    ("[rank12]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 4 has a total capacity "
     "of 79.15 GiB of which 1.02 GiB is free.", "gpu_oom"),
])
def test_a_process_that_died_before_its_peers_timed_out_is_the_cause(clf: Classifier, died: str, category: str) -> None:
    steps = "\n".join(f"[rank{r}]: iteration {k}/10000 | lm loss: 2.{k:03d}" for k in range(100, 130) for r in (0, 12))
    d = diagnose_text("\n".join([steps, died, _NCCL_TIMEOUTS]), clf).diagnosis
    assert (d.category, d.origin, d.method) == (category, "user", "rule"), d
    # the timeouts alone name no cause (origin unknown, as before)
    bare = diagnose_text("\n".join([steps, _NCCL_TIMEOUTS]), clf).diagnosis
    assert (bare.category, bare.origin) == ("comm_error", "unknown"), bare


def test_died_before_timeout_reads_the_failure_lines_before_the_first_timeout(clf: Classifier) -> None:
    from gpulens.diagnosis.logread.cause.timeouts import died_before_timeout
    from gpulens.diagnosis.types import Diagnosis

    lines = ["[rank0]: iteration 120/10000 | lm loss: 2.120",
             "slurmstepd-gpu-b02: error: Detected 1 oom-kill event(s) in StepId=77.0. Some of your processes may "
             "have been killed by the cgroup out-of-memory handler.",
             *_watchdog(3).split("\n")[:3],
             "[rank7]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 7 has a total "
             "capacity of 79.15 GiB of which 1.02 GiB is free."]
    timeout = Diagnosis("comm_error", "unknown", 0.95, [lines[4]], rule_id="nccl-watchdog-timeout")
    got = died_before_timeout(timeout, lines, 0, [1, 2, 3, 4, 5], clf.rules)
    assert (got.category, got.origin, got.rule_id) == ("cpu_oom", "user", "slurm-cgroup-oom")
    assert "aftermath" in (got.reason or "") and got.evidence[0].startswith("slurmstepd")
    # a death printed only after the first timeout line (the abort's own aftermath) is not read
    assert died_before_timeout(timeout, lines, 0, [2, 3, 4, 5], clf.rules) is timeout
    # the attempt starts after the kill: an earlier attempt's kill is not this one's cause
    assert died_before_timeout(timeout, lines, 2, [1, 2, 3, 4, 5], clf.rules) is timeout
    # only a timeout is somebody else's aftermath
    other = Diagnosis("comm_error", "infrastructure", 0.95, ["x"], rule_id="nccl-error-in")
    assert died_before_timeout(other, lines, 0, [1, 2, 3, 4, 5], clf.rules) is other


def test_a_client_error_of_the_job_s_own_request_is_not_the_service_s() -> None:
    ids = {m.rule.id for m in match_rules("requests.exceptions.HTTPError: 404 Client Error: Not Found for url: "
                                          "https://example.org/data/v2/train.csv")}
    assert "http-service-refused" not in ids



_EPOCHS = [f"Epoch 3 [{k}/900] loss: 0.{k:03d} lr: 1e-4" for k in range(100, 130)]


@pytest.mark.parametrize(("end", "category", "origin"), [
    # O3: slurmstepd names a reason only for the scheduler's own decisions; a bare cancel is scancel's
    (["slurmstepd: error: *** JOB 4242 ON gpu07 CANCELLED AT 2024-03-01T10:00:00 ***"], "preempted", "unknown"),
    (["slurmstepd: error: *** JOB 4242 ON gpu07 CANCELLED AT 2024-03-01T10:00:00 DUE TO TIME LIMIT ***"],
     "preempted", "infrastructure"),
    # O3: a SIGTERM under Slurm names no sender unless a line names the decision
    (["srun: Job step aborted: Waiting up to 32 seconds for job step to finish.",
      "torch.distributed.elastic.multiprocessing.api.SignalException: Process 4242 got signal: 15"],
     "preempted", "unknown"),
    # O3: a SIGHUP is a session that ended (the user, a dropped ssh connection, kill -HUP)
    (["torch.distributed.elastic.multiprocessing.api.SignalException: Process 4242 got signal: 1"], "preempted", "unknown"),
    # O7: a bare SIGKILL: the OOM killer is likeliest, the log does not say
    (["./train.sh: line 33: 136834 Killed                  python train.py --bs 64"], "cpu_oom", "unknown"),
    (["RuntimeError: DataLoader worker (pid 20661) is killed by signal: Killed."], "cpu_oom", "unknown"),
    # O3: torchrun's first failed worker ended by a SIGTERM it did not raise, no error of its own
    (["W0330 17:38:01.940000 110 torch/distributed/elastic/multiprocessing/api.py:897] Sending process 1102494 "
      "closing signal SIGTERM",
      "E0330 17:38:08.283000 110 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: -15) "
      "local_rank: 3 (pid: 1102497) of binary: /env/bin/python"], "preempted", "unknown"),
    # O2: TCPStore::wait's own timeout, nothing else: a peer did not come, the log does not say why
    (["torch.distributed.DistStoreError: wait timeout after 300000ms, keys: /broadcast_from/0/3"], "comm_error", "unknown"),
])
def test_origin_is_the_party_the_log_shows(clf: Classifier, end: list[str], category: str, origin: str) -> None:
    d = diagnose_text("\n".join([*_EPOCHS, *end]), clf).diagnosis
    assert (d.category, d.origin) == (category, origin), d


def test_a_sigkill_with_the_kernel_s_memory_line_is_the_job_s_memory(clf: Classifier) -> None:
    from gpulens.diagnosis.logread.cause.kills import unattributed_kill
    from gpulens.diagnosis.types import Diagnosis

    killed = Diagnosis("cpu_oom", "user", 0.75, ["./train.sh: line 33: 136834 Killed   python train.py"],
                       rule_id="slurm-script-killed")
    bare = [*_EPOCHS, killed.evidence[0]]
    assert unattributed_kill(killed, bare, 0).origin == "unknown"
    dmesg = [*_EPOCHS, "[88123.4] Out of memory: Killed process 136834 (python) total-vm:92844412kB", killed.evidence[0]]
    assert unattributed_kill(killed, dmesg, 0) is killed
    # an earlier attempt's memory line does not explain this attempt's kill
    assert unattributed_kill(killed, dmesg, 31).origin == "unknown"


@pytest.mark.parametrize(("end", "origin"), [
    # O6: the shell's line and nothing of the crashed code: who crashed is not in the log
    (["run.sh: line 9:  4412 Segmentation fault      (core dumped) python train.py --cfg a.yaml"], "unknown"),
    (["E0101 12:00:00.000000 140 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: -11) "
      "local_rank: 0 (pid: 4411) of binary: /usr/bin/python3"], "unknown"),
    # the job's own build, named by the shell's line
    (["run.sh: line 9:  4412 Segmentation fault      (core dumped) ./solver --grid 512"], "user"),
    # a library's stack dump names the crashed code
    (["Fatal Python error: Segmentation fault", "", "Current thread 0x00007f3a (most recent call first):",
      '  File "/env/lib/python3.10/site-packages/torch/nn/functional.py", line 2264 in embedding',
      "run.sh: line 9:  4412 Segmentation fault      (core dumped) python train.py"], "framework"),
])
def test_a_native_crash_s_origin_is_the_code_the_log_shows_crashing(clf: Classifier, end: list[str], origin: str) -> None:
    d = diagnose_text("\n".join([*_EPOCHS, *end]), clf).diagnosis
    assert (d.category, d.origin) == ("crash", origin), d


def test_peers_that_timed_out_while_one_process_prepared_the_data_waited_for_the_job_s_own_work(clf: Classifier) -> None:
    # O2: rank 0 generates the packed split (datasets' " examples" bar) while the others sit in the
    # first all-reduce until NCCL's watchdog fires: the job's own work made them wait
    bar = ("Generating train split: 0 examples [00:00, ? examples/s]\rGenerating train split: 1 examples "
           "[15:03, 903.64s/ examples]\rGenerating train split: 9 examples [15:04, 61.20s/ examples]")
    head = ["2024-09-22 03:02:08 - INFO - datasets.builder - Generating train split"]
    d = diagnose_text("\n".join([*_EPOCHS[:3], *head, bar, _watchdog(2)]), clf).diagnosis
    assert (d.category, d.origin) == ("comm_error", "user"), d
    # the same timeout after training output names no party
    bare = diagnose_text("\n".join([*_EPOCHS, _watchdog(2)]), clf).diagnosis
    assert (bare.category, bare.origin) == ("comm_error", "unknown"), bare
    # nor after a split that had finished generating (the data was ready: the wait was for something else)
    done = "[rank0]:Generating test split: 100%|██████████| 1319/1319 [00:00<00:00, 25927.53 examples/s]"
    ready = diagnose_text("\n".join([*_EPOCHS[:3], *head, done, _watchdog(0)]), clf).diagnosis
    assert (ready.category, ready.origin) == ("comm_error", "unknown"), ready


def test_the_driver_s_unknown_error_ending_a_working_run_is_the_gpu_s(clf: Classifier) -> None:
    # O6: c10's driver-API check ("CUDA driver error: unknown error") after hours of training; README C7:
    # without an Xid or ECC line it is no hardware evidence, so cuda_error with the GPU's (infrastructure) origin
    lines = [*_EPOCHS, "terminate called after throwing an instance of 'c10::Error'",
             "  what():  CUDA driver error: unknown error",
             "Exception raised from _hasPrimaryContext at ../aten/src/ATen/cuda/detail/CUDAHooks.cpp:67 "
             "(most recent call first):"]
    d = diagnose_text("\n".join(lines), clf).diagnosis
    assert (d.category, d.origin) == ("cuda_error", "infrastructure"), d
