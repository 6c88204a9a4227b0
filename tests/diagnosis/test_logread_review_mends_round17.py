"""Round 17 mends (review 40): hand-written excerpts in the libraries' formats, one test per item."""
from __future__ import annotations

from gpulens.diagnosis.logread import signals, tracebacks
from gpulens.diagnosis.logread.indicators import runs
from gpulens.diagnosis.logread.whole import diagnose_text


def _text(lines: list[str]) -> str:
    return "\n".join(lines) + "\n"


_STEPS = [f"epoch 0 iter {i}/300 loss {3.0 - i / 100:.2f}" for i in range(1, 30)]
_OOM = ["Traceback (most recent call last):",
        '  File "/work/me/fit.py", line 88, in <module>',
        "    out = net(x)",
        "RuntimeError: CUDA out of memory. Tried to allocate 1.50 GiB (GPU 0; 31.75 GiB total capacity; "
        "29.00 GiB already allocated; 0.90 GiB free; 29.50 GiB reserved in total by PyTorch)"]
_LAUNCH_EXIT = ["Traceback (most recent call last):",
                '  File "/usr/lib/python3.9/site-packages/torch/distributed/launch.py", line 261, in <module>',
                "    main()",
                "subprocess.CalledProcessError: Command '['/usr/bin/python', '-u', 'fit.py', '--local_rank=0']' "
                "returned non-zero exit status 1."]
_STARS = "*" * 41
_BANNER = ("Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, to avoid your system "
           "being overloaded, please further tune the variable for optimal performance in your application as needed.")


def test_printed_launch_banner_at_exit_is_no_relaunch() -> None:
    """Item 1: torch.distributed.launch's banner printed (not logged) reaches the file at its exit, after the
    worker's error: the worker's OOM stays the indicator, not srun's exit line."""
    lines = _STEPS + _OOM + _LAUNCH_EXIT + [_STARS, _BANNER, _STARS, "srun: error: node3: task 0: Exited with exit code 1"]
    w = diagnose_text(_text(lines))
    assert w.diagnosis.category == "gpu_oom"
    assert any("CUDA out of memory" in t for t in w.indicators)


def test_logged_banner_still_starts_a_launch() -> None:
    """Item 1: torchrun's logged banner (header two lines above) after an earlier launch's errors starts the last launch."""
    first = ["ValueError: bad config key 'lr_sched'"]
    logged = ["WARNING:torch.distributed.run:", _STARS, _BANNER, _STARS]
    lines = _STEPS + first + logged + _STEPS + _OOM
    assert runs.relaunched(lines, 0, [len(_STEPS), len(lines) - 1]) == len(_STEPS) + 3
    printed = _STEPS + first + [_STARS, _BANNER, _STARS] + _STEPS + _OOM
    assert runs.relaunched(printed, 0, [len(_STEPS), len(printed) - 1]) == 0


def test_early_stopping_counter_is_no_completion() -> None:
    """Item 2: the patience count ("EarlyStopping counter: 2 out of 7", any capitalisation) is no early stop: a kill
    after it is no normal end."""
    for word in ("Early Stopping", "Early stopping"):
        lines = _STEPS + ["valid loss 0.8100", f"{word} counter: 2 out of 7", "Killed"]
        w = diagnose_text(_text(lines))
        assert w.diagnosis.category != "none", word


def test_zero_based_last_iteration_is_not_short() -> None:
    """Item 3: a per-step result line whose counter is one short of its end (zero-based: 0..M-1) ends the run; one
    far short of it is a stop mid-run."""
    head = ["Namespace(bs=16, ckpt='last.pt')", "Loading checkpoint last.pt"]
    last = diagnose_text(_text(head + ["Iteration 98/100 | mean IoU: 0.611", "Iteration 99/100 | mean IoU: 0.612"]))
    assert last.diagnosis.category == "none"
    short = diagnose_text(_text(head + ["Iteration 40/100 | mean IoU: 0.611", "Iteration 41/100 | mean IoU: 0.612"]))
    assert short.diagnosis.category != "none"


def test_train_override_under_module_eval_is_evaluation() -> None:
    """Item 4: nn.Module.eval() is ``return self.train(False)``: a model's own train(mode) failing under a
    test routine's model.eval() fails in evaluation; a train() called from the job's loop is training."""
    from gpulens.diagnosis.logread.phase import frames as phase_frames
    frames = ["Traceback (most recent call last):",
              '  File "/srv/job/main.py", line 31, in <module>',
              "    test(net, data)",
              '  File "/srv/job/main.py", line 12, in test',
              "    net.eval()",
              '  File "/opt/py/lib/python3.10/site-packages/torch/nn/modules/module.py", line 2419, in eval',
              "    return self.train(False)",
              '  File "/srv/job/net.py", line 40, in train',
              "    for m in self.frozen: m.freeze_bn(mode)",
              "AttributeError: 'Linear' object has no attribute 'freeze_bn'"]
    assert phase_frames.in_eval(frames)
    called = frames[:3] + ['  File "/srv/job/main.py", line 12, in test', "    train(net, data)",
                           '  File "/srv/job/main.py", line 40, in train', "    loss.backward()", frames[-1]]
    assert not phase_frames.in_eval(called)


def _tf_device(free: str) -> str:
    return ("2018-03-02 09:14:55.123456: I tensorflow/core/common_runtime/gpu/gpu_device.cc:1356] Found device 0 with "
            "properties: name: Tesla P100-PCIE-16GB major: 6 minor: 0 memoryClockRate(GHz): 1.3285 pciBusID: "
            f"0000:82:00.0 totalMemory: 15.89GiB freeMemory: {free}")


def test_own_second_tf_session_is_not_memory_held_elsewhere() -> None:
    """Item 5: TF1 prints a device line for each session; the job's own second session finds the memory its first
    one took: only the attempt's first device line says whether another process held the GPU."""
    steps = ["Epoch 1/5", *[f"{i}/200 [==>...........................] - ETA: 41s - loss: 1.{i % 10}" for i in range(1, 25)]]
    oom = ["Traceback (most recent call last):",
           '  File "fit_tf.py", line 61, in <module>',
           "    model.fit(xs, ys, epochs=5)",
           "tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating tensor with "
           "shape[128,256,28,28] and type float on /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc"]
    own = diagnose_text(_text([_tf_device("15.60GiB"), *steps, _tf_device("402.12MiB"), *steps, *oom]))
    assert own.diagnosis.category == "gpu_oom" and own.diagnosis.origin != "unknown"
    held = diagnose_text(_text([_tf_device("402.12MiB"), *steps, *oom]))
    assert held.diagnosis.category == "gpu_oom" and held.diagnosis.origin == "unknown"


def test_a_job_scripts_own_echo_of_the_node_list_names_no_node() -> None:
    """Item 6: a job script's own echo of $SLURM_JOB_NODELIST in its own words is no scheduler format."""
    lines = ["Job 5521 running on these nodes: cn12", "The job was run on these nodes: cn12",
             "Traceback (most recent call last):", '  File "prep.py", line 9, in <module>', "    open(src)",
             "FileNotFoundError: [Errno 2] No such file or directory: 'raw/part-0.csv'"]
    assert diagnose_text(_text(lines)).first_node is None


def test_launch_header_is_the_whole_line() -> None:
    """Item 7: torchrun's logging header stands alone on its line (its message starts with a newline); a line that
    only ends with such text (an echoed keystroke before it) is no header."""
    from gpulens.diagnosis.logread.launches import launch_banner
    assert launch_banner(["WARNING:torch.distributed.run:", _STARS, _BANNER], 2)
    assert launch_banner(["W0311 10:02:03.400000 811 torch/distributed/run.py:792] ", _STARS, _BANNER], 2)
    assert not launch_banner(["^ZWARNING:torch.distributed.run:", _STARS, _BANNER], 2)
    assert not launch_banner(["^CWARNING:torch.distributed.run:", _STARS, _BANNER], 2)


def test_progress_meter_is_tab_joined() -> None:
    """Item 8: ProgressMeter.display joins its meters with tabs; a " | "-joined copy is no format of it."""
    from gpulens.diagnosis.logread import steplines
    assert steplines._progress_meter("Epoch: [3][ 120/2502]\tTime  0.412 ( 0.455)\tLoss 2.1012e+00 (2.3311e+00)") == "120"
    assert steplines._progress_meter("Epoch: [3][ 120/2502] | Time  0.412 ( 0.455) | Loss 2.1012 (2.3311)") is None


def test_subprocess_missing_path_may_be_the_working_directory() -> None:
    """Item 9: Popen._execute_child raises the same FileNotFoundError with cwd as its filename when chdir(cwd) failed:
    the hint names both."""
    from gpulens.diagnosis.rules import load_rules
    rule = next(r for r in load_rules() if r.id == "subprocess-program-missing")
    assert "working directory" in rule.hint and "cwd" in rule.source


def test_keras_progress_prefiltered_and_bounded() -> None:
    """Item 10: Keras' progress lines found by their literals, within a bounded look-back before the failure."""
    from gpulens.diagnosis.logread.phase import steps as phase_steps
    bar = "  7/250 [>.............................] - ETA: 52s - loss: 2.3011"
    assert phase_steps.keras_printed(["Using TensorFlow backend.", "Epoch 1/3", bar, "x"], 0, 3)
    assert phase_steps.keras_printed(["   3/120 ━━━━━━━━━━━━━━━━━━━━ 4s 36ms/step - loss: 0.71"], 0, 1)
    assert not phase_steps.keras_printed(["Epoch 1/3", bar, "reading shards", "shard 00003 of 00040 done"], 2, 4)
    far = ["Epoch 1/3", bar] + ["tokenizing row"] * (phase_steps._KERAS_LOOKBACK + 5)
    assert not phase_steps.keras_printed(far, 0, len(far))


def test_attempt_diff_reads_the_log_level() -> None:
    """Item 11: a glog/abseil INFO record that says something failed states no failure in the attempts' diff either."""
    from gpulens.diagnosis.logread import attempts
    info = ("I0203 11:22:33.445566 140000111 xla_bridge.py:889] Unable to initialize backend 'tpu': INTERNAL: Error: Failed "
            "to open libtpu.so: cannot open shared object file: No such file or directory")
    err = "ValueError: shapes (4, 3) and (5,) not aligned"
    assert attempts._interesting([info, err], 0, 2) == [err]


def test_another_nodes_deepspeed_launch_line_inside_the_traceback() -> None:
    """Item 12: DeepSpeed's per-node launcher line ("nnodes=2, num_local_procs=4, node_rank=1",
    deepspeed/launcher/launch.py main) of another node (each node's launch.py started by srun, one output file),
    falling inside the failing traceback, does not cut it."""
    from gpulens.diagnosis.logread.phase import phase_of
    ds = "[2024-05-01 10:00:07,001] [INFO] [launch.py:151:main] nnodes=2, num_local_procs=4, node_rank=1"
    lines = ["[2024-05-01 10:00:01,001] [INFO] [launch.py:151:main] nnodes=2, num_local_procs=4, node_rank=0",
             *[f"step {k} | loss {2 - k / 100:.3f}" for k in range(1, 12)],
             "Traceback (most recent call last):",
             '  File "/job/pretrain.py", line 201, in <module>',
             "    main()",
             ds,
             '  File "/job/pretrain.py", line 170, in main',
             "    engine.backward(loss)",
             '  File "/env/lib/python3.10/site-packages/deepspeed/runtime/engine.py", line 1976, in backward',
             "    self.optimizer.backward(loss)",
             "RuntimeError: Function 'MulBackward0' returned nan values in its 0th output."]
    at = len(lines) - 1
    assert phase_of(lines, at, lines[at - 5:at + 1], 0, "11") == "training"


def test_small_mends_of_item_15() -> None:
    """Item 15: a job's own folder named lib/python_utils is no library's; Paddle's SIGTERM report read by the one
    stop-report regex; completion's handler_stops is module-internal."""
    from gpulens.diagnosis.logread.end import completion
    tb = ["Traceback (most recent call last):",
          '  File "/home/ana/lib/python_utils/feed.py", line 30, in <module>',
          "    batch = next(it)",
          '  File "/opt/venv/lib/python3.11/site-packages/torch/utils/data/dataloader.py", line 701, in __next__',
          "    data = self._next_data()",
          "StopIteration"]
    assert tracebacks.own_frame_code(tb, 5) == 2
    assert signals.sigterm_report("FatalError: `Termination signal` is detected by the operating system.")
    assert not signals.sigterm_report("FatalError: `Process abort signal` is detected by the operating system.")
    assert not hasattr(completion, "handler_stops")
