"""Round 21 refactor (r21-refB): the traceback helpers' one home (logread.tracebacks) and the modules split
out of rootline. Hand-written excerpts in CPython's traceback format (Lib/traceback.py)."""
from __future__ import annotations

from gpulens.diagnosis.logread import tracebacks
from tests.diagnosis.logread_structure import assert_part, assert_unique, defined

_CHAIN = [
    "step 10 loss 0.5",
    "Traceback (most recent call last):",
    '  File "train.py", line 3, in <module>',
    "    load()",
    "KeyError: 'w'",
    "",
    "During handling of the above exception, another exception occurred:",
    "",
    "[rank1]: Traceback (most recent call last):",
    '[rank1]:   File "train.py", line 5, in <module>',
    "[rank1]:     raise RuntimeError('no weights')",
    "[rank1]: RuntimeError: no weights",
]


def test_head_tests_read_the_head_behind_a_prefix_and_sacreds() -> None:
    assert tracebacks.has_head("[rank1]: Traceback (most recent call last):")
    assert tracebacks.has_head("  0%|   | 0/9 [00:00<?, ?it/s]Traceback (most recent call last):")
    assert not tracebacks.has_head("Stack (most recent call first):")
    assert tracebacks.starts_head("Traceback (most recent call last):")
    assert not tracebacks.starts_head("Traceback (most recent calls WITHOUT Sacred internals):")
    assert tracebacks.starts_head("Traceback (most recent calls WITHOUT Sacred internals):", sacred=True)
    assert tracebacks.chained("The above exception was the direct cause of the following exception:")
    assert not tracebacks.chained("Exception in thread Thread-1:")


def test_walker_finds_the_head_through_prefixed_frames_and_the_chain_start() -> None:
    last = len(_CHAIN) - 1
    assert tracebacks.traceback_head(_CHAIN, last) == 8
    assert tracebacks.python_head(_CHAIN, last) == 8
    assert tracebacks.python_head(_CHAIN, 4) == 1
    assert tracebacks.chain_start(_CHAIN, 8, 0) == 1  # the chain's first traceback
    assert tracebacks.chain_start(_CHAIN, 8, 5) == 8  # not above the floor
    assert tracebacks.python_head(["Exception in thread T:", "ValueError: x"], 1) is None
    assert tracebacks.unprefixed("(Trainer pid=42, ip=10.0.0.1)     x = 1") == "    x = 1"
    assert tracebacks.norm_body("[rank1]: RuntimeError: no weights") == "RuntimeError: no weights"


def test_inside_chain_and_thread_died() -> None:
    middle = [*_CHAIN[:5], "", _CHAIN[6], "", *_CHAIN[8:], "", _CHAIN[6], "", "Traceback (most recent call last):",
              '  File "x.py", line 1, in <module>', "OSError: disk"]
    assert tracebacks.inside_chain(middle, 11)
    assert not tracebacks.inside_chain(middle, len(middle) - 1)
    thread = ["Exception in thread Reader:", "Traceback (most recent call last):", '  File "r.py", line 2, in run',
              "    read()", "OSError: gone"]
    assert tracebacks.thread_died(thread, 4)
    assert not tracebacks.thread_died(thread[1:], 3)


def test_own_frame_code_skips_the_library_frames() -> None:
    tb = ["Traceback (most recent call last):", '  File "/job/train.py", line 9, in <module>',
          "    batch = next(it)", '  File "/venv/lib/python3.11/site-packages/torch/utils/data/dataloader.py", '
          "line 7, in __next__", "    raise StopIteration", "StopIteration"]
    assert tracebacks.own_frame_code(tb, 5) == 2
    assert tracebacks.own_frame_code(tb[:3] + ["ValueError: x"], 3) is None  # last frame is the job's own


def test_rooterror_owns_the_root_error_test() -> None:
    from gpulens.diagnosis.logread.indicators import rooterror, rootline

    assert "is_root_error" not in rootline.__all__  # callers import it from rooterror
    assert rooterror.is_root_error("RuntimeError: CUDA error: an illegal memory access was encountered")
    assert not rooterror.is_root_error("Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9)")
    assert not rooterror.is_root_error("async-timeout==4.0.3")  # a pip freeze line
    assert not rooterror.is_root_error('  File "train.py", line 3, in <module>')


def test_markers_own_the_roots_that_state_no_error() -> None:
    from gpulens.diagnosis.logread.indicators import markers, rootline

    assert "is_report_head" in markers.__all__ and "is_report_head" not in rootline.__all__
    assert markers.is_report_head("Exception in thread Thread-3:")
    assert markers.is_report_head("epoch 2 step 40 loss: nan")
    assert not markers.is_report_head("epoch 2 step 40 loss: 0.41")
    metrics = [f"step {k} loss: {v}" for k, v in enumerate(["0.9", "0.8", "nan", "nan", "nan"])]
    assert markers.diverged_root(metrics, len(metrics) - 1, ["step 4 loss: nan"]) == [2]  # the streak's first
    pdb = ["> /app/train.py(67)reward()", "-> reward = 0.0", "bdb.BdbQuit"]
    assert markers.breakpoint_prompt(pdb, 2) == [0]


def test_origins_own_the_first_failing_rank_and_the_echo_lines() -> None:
    from gpulens.diagnosis.logread import ranks
    from gpulens.diagnosis.logread.indicators import origins, rootline

    assert {"first_origin", "secondary_lines"} <= set(origins.__all__) and rootline.__all__ == ["RULE_MAX_LINES", "pick_lines"]
    log = ["[rank1]: RuntimeError: CUDA error: out of memory",
           "[rank0]: [E ProcessGroupNCCL.cpp:616] Watchdog caught collective operation timeout",
           "[rank0]: RuntimeError: bad shape"]
    norm = [ln.strip() for ln in log]
    assert origins.first_origin(log, [0, 1, 2], 0, norm.__getitem__).rank == 1
    assert origins.secondary_lines(log, [0, 1, 2], [0], ranks.Origin(1), norm.__getitem__) == [1, 2]
    assert origins.same_origin(ranks.Origin(None, "gpu016.cluster.edu"), ranks.Origin(None, "gpu016"))


def test_verdicts_own_the_launchers_reports() -> None:
    from gpulens.diagnosis.logread.indicators import rootline, verdicts

    assert "verdict_lines" in verdicts.__all__ and "verdict_lines" not in rootline.__all__
    log = ["[rank0]: ValueError: x", "E0101 00:00:00.1 9 api.py:1] failed (exitcode: 1) local_rank: 0 (pid: 9)",
           "Root Cause (first observed failure):", "[0]:", "  time      : 2024-01-01_00:00:00", "  rank      : 0 (local_rank: 0)",
           "srun: error: gpu1: task 0: Exited with exit code 1"]
    assert verdicts.verdict_lines(log, 0) == [1, 5, 6]  # the table's rank row for its header
    assert verdicts.is_launcher_verdict("  exitcode  : 1 (pid: 42)")
    assert not verdicts.is_launcher_verdict("RuntimeError: CUDA out of memory")


def test_records_own_the_warning_level_test() -> None:
    from gpulens.diagnosis.logread import records

    head = "W0113 22:44:54.202000 3923616 torch/_dynamo/convert_frame.py:1125] "
    assert records.warning_head(head + "ValueError: x") == len(head)
    assert records.warning_head("WARNING 08-25 18:56:06 [core.py:700] ValueError: x") == 37
    assert records.warning_head("E0113 22:44:54.202000 3923616 api.py:874] ValueError: x") is None
    assert records.warning_head("ERROR 08-25 18:56:06 [core.py:700] ValueError: x") is None
    assert records.logger_head("ERROR 08-25 18:56:06 [core.py:700]   File \"x.py\", line 1") is not None
    assert records.names_level("2024-01-01 10:00:00 - trainer - ERROR - step failed")
    assert not records.names_level("step 3 loss 0.1")
    assert records.tf_notice(": W tensorflow/core/framework/op_kernel.cc:1763] OP_REQUIRES failed")
    assert records.glog_info("I0519 00:50:42.634950 139913184905024 xla_bridge.py:863] Unable to initialize")
    assert not records.glog_info("E0519 00:50:42.634950 139913184905024 xla_bridge.py:863] Failed")


def test_signals_own_the_stop_signal_messages() -> None:
    from gpulens.diagnosis.logread import lines, signals

    assert lines.is_stop_record is signals.is_stop_record
    assert signals.is_stop_record("WARNING:root:SIGTERM received, exiting")
    assert not signals.is_stop_record("*** SIGTERM received at time=1756174802 on cpu 91 ***")
    assert signals.stop_report("FatalError: `Process abort signal` is detected by the operating system.")
    assert not signals.sigterm_report("FatalError: `Process abort signal` is detected by the operating system.")
    assert signals.agent_death_signal("torch.distributed.elastic.agent.server.api: Received Signals.SIGTERM death signal,"
                                      " shutting down workers")
    assert signals.signal_raised("torch.distributed.elastic.multiprocessing.api.SignalException: Process 9 got signal: 15")
    assert not signals.signal_raised("RuntimeError: CUDA out of memory")
    assert signals.workers_terminated("RuntimeError: DataLoader worker (pid 4242) is killed by signal: Terminated.")
    assert any(k in "[SignalInfo: *** SIGTERM (@0x3e8) received by PID 9 (TID 0x7f) from PID 1000 ***]"
               for k in signals.TERM_REPORT_KEYS)


def test_copies_own_the_message_shape_and_the_copy_test() -> None:
    from gpulens.diagnosis.logread.indicators import copies

    a = "RuntimeError: CUDA error on device 3 writing '/tmp/a.bin'"
    b = "RuntimeError: CUDA error on device 5 writing '/tmp/b.bin'"
    assert copies.message_shape(a) == copies.message_shape(b)
    assert copies.bare_shape("[rank3]: " + a) == copies.message_shape(b)
    assert copies.restates("JaxStackTraceBeforeTransformation: ValueError: x", "ValueError: x")
    assert copies.copy_of(9, b, [(2, a)], ())
    assert not copies.copy_of(9, b, [(2, a)], (2, 9))  # two messages of one chain naming other names
    logged = "ERROR engine init failed: " + "the model's config could not be read from the hub"
    assert copies.copy_of(9, "OSError: the model's config could not be read from the hub", [(2, logged)], ())
    assert copies.what_said("what():  [Rank 0] NCCL watchdog thread terminated with exception: boom at 42",
                            {"[Rank #] NCCL watchdog thread terminated with exception: boom at #"})
    assert copies.without_digits("rank 12 port 29500 'a1'") == "rank # port # 'a#'"


def test_aborts_own_the_abort_lines_and_their_reasons() -> None:
    from gpulens.diagnosis.logread.indicators import aborts

    log = ["step 3", "free(): invalid pointer", "run.sh: line 26: 158958 Aborted (core dumped) python train.py"]
    assert aborts.abort_reason(log, [2]) == [1]
    fatal = ["F0101 00:00:00.000000 9 check.cc:12] Check failed: x == y", "*** Check failure stack trace: ***",
             "Aborted (core dumped)"]
    assert aborts.fatal_abort(fatal, [0]) == [2]
    assert aborts.abort_report("terminate called after throwing an instance of 'c10::DistBackendError'")
    assert aborts.abort_report("Error Message Summary:")
    assert not aborts.abort_report("RuntimeError: CUDA out of memory")
    assert aborts.report_frame("-" * 20) is not None


def test_runs_own_the_job_scripts_runs() -> None:
    from gpulens.diagnosis.logread.indicators import rootline, runs

    assert "relaunched" in runs.__all__ and "relaunched" not in rootline.__all__
    tb = ["Traceback (most recent call last):", '  File "train.py", line 9, in <module>', "    main()",
          "FileNotFoundError: [Errno 2] No such file or directory: 'ckpt/last.pt'"]
    assert runs.ended_uncaught(tb, 3)
    assert runs.printing(tb, 3, 0) == 0
    caught = ["Traceback (most recent call last):", '  File "train.py", line 9, in step', "    load()",
              "KeyError: 'w'", "", "During handling of the above exception, another exception occurred:"]
    assert not runs.ended_uncaught(caught, 3)  # a chain goes on below it
    log = ["ValueError: bad config", "srun: error: gpu1: task 0: Exited with exit code 1", "ValueError: bad config"]
    got = runs.split_runs(log, [0, 2], 0)
    assert got == [[0], [2]]  # srun's verdict ends the first run
    assert runs.last_run_again(log, got, log.__getitem__) is False  # the same error again: a retry
    assert runs.first_run_end([0, 2], [1]) == 1


def test_chains_own_the_root_lines_of_a_chain() -> None:
    from gpulens.diagnosis.logread import records
    from gpulens.diagnosis.logread.indicators import chains, rootline

    assert "failure_point" in chains.__all__ and "failure_point" not in rootline.__all__
    log = ["Traceback (most recent call last):", '  File "a.py", line 1, in <module>', "KeyError: 'w'", "",
           "During handling of the above exception, another exception occurred:", "",
           "Traceback (most recent call last):", '  File "a.py", line 3, in <module>',
           "RuntimeError: no weights for the head"]
    norm = [ln.strip() for ln in log]
    assert chains.root_lines(log, [2, 8], norm.__getitem__) == [2, 8]  # the chain's first and its last
    assert chains.printed_with(log, 8, lambda i: True) == [2]  # the chain's first, above the scan's reach
    assert chains.wraps("RuntimeError: Caught ValueError in DataLoader worker process 0.")
    assert not chains.wraps("ValueError: bad shape")
    wrapped = ["RuntimeError: the worker failed:", "Traceback (most recent call last):", '  File "w.py", line 2, in f',
               "ValueError: bad shape"]
    assert chains.failure_point(wrapped, 3) == 0  # the wrapper's line: where the process was
    assert records.unlogged("ERROR 08-10 20:45:59 [registry.py:355]   File \"x.py\"") == '  File "x.py"'


def test_aftermath_owns_the_errors_the_run_did_not_end_on() -> None:
    from gpulens.diagnosis.logread.indicators import aftermath

    log = ["[rank0]: ValueError: bad batch", *[f"step {k} loss 0.5" for k in range(12)],
           "slurmstepd: error: *** JOB 42 ON gpu1 CANCELLED AT 2024-01-01T00:00:00 DUE TO TIME LIMIT ***"]
    norm = [ln.strip() for ln in log]
    assert aftermath.killed_after_going_on(log, 0, [0, len(log) - 1], norm.__getitem__, lambda i: True)  # caught: the kill ended it
    assert aftermath.ended_from_outside(log[-1])
    sig = [log[-1], "KeyboardInterrupt"]
    assert aftermath.without_aftermath([1], [0, 1], [ln.strip() for ln in sig].__getitem__) == []
    assert aftermath.logged_warning("W0113 22:44:54.202000 3923616 torch/_dynamo/convert_frame.py:1125] "
                                    "torch._dynamo.exc.TorchRuntimeError: Failed running call_function")


def test_messages_own_a_messages_lines() -> None:
    from gpulens.diagnosis.logread.indicators import messages

    assert messages.logged_frame('[rank3]:   File "train.py", line 9, in <module>')
    assert messages.logged_frame("ERROR 08-25 18:56:06 [core.py:700]     raise ValueError(x)")
    assert not messages.logged_frame("[rank3]: ValueError: x")
    assert messages.code_line("    loss.backward()")
    tf = ["tensorflow.python.framework.errors_impl.ResourceExhaustedError: 2 root error(s) found.",
          "  (0) Resource exhausted: OOM when allocating tensor", "0 successful operations."]
    assert messages.summary_part(tf, 1)
    nccl = ["[rank1]: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:3356, unhandled cuda error",
            "[rank1]: ncclUnhandledCudaError: Call to CUDA function failed.", "[rank1]: Last error:",
            "[rank1]: Cuda failure 2 'out of memory'"]
    assert messages.later_line(nccl, 3, [0], [])
    head = ["ERROR:root:training failed", "Traceback (most recent call last):", '  File "t.py", line 1, in <module>',
            "ValueError: x"]
    assert messages.not_heads(head, [0, 3]) == [3]
    hook = ["Error in sys.excepthook:", "Traceback (most recent call last):", "ImportError: gone", "",
            "Original exception was:", "Traceback (most recent call last):", "ValueError: x"]
    assert messages.hook_errors(hook, 0) == {0, 1, 2, 3, 4}


def test_records_glued_record_on_a_bar() -> None:
    from gpulens.diagnosis.logread import records

    assert records.glued_record(" 40%|####  | 40/100 [00:09<00:13, 4.4it/s]2024-04-24 15:46:03,689 - WARNING - slow")
    assert not records.glued_record(" 40%|####  | 40/100 [00:09<00:13, 4.4it/s]")


_PARTS = ("rootline", "tracebacks", "rooterror", "origins", "verdicts", "markers", "copies", "aborts", "runs", "chains",
          "aftermath", "messages", "records", "signals")


def test_each_part_says_its_job_exports_its_names_and_defines_each_name_once() -> None:
    import importlib.util

    for name in _PARTS:
        assert_part(name)
    assert_unique(_PARTS)
    lines = defined("lines")
    assert not {"_TRACEBACK", "_STOP_RECORD", "_INFO_RECORD", "_GLUED_RECORD"} & set(lines)  # one home each now
    assert importlib.util.find_spec("gpulens.diagnosis.logread.decide") is None  # decide.py removed (round 22)
