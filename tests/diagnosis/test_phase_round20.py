"""Reader round 20, phase (P1-P11 of sample_logs/whole/README.md, "Phase: rules"), on excerpts written by hand in the
formats the libraries print: a Paddle DataLoader's reader thread failing on the first batch, its worker's traceback
quoted in the message it re-raises."""

from __future__ import annotations

from gpulens.diagnosis.logread.phase import phase_of
from gpulens.diagnosis.logread.phase.steps import last_step

_LIB = "/opt/env/lib/python3.9/site-packages"


def _frame(path: str, line: int, func: str, code: str) -> list[str]:
    return [f'  File "{path}", line {line}, in {func}', f"    {code}"]


def _reader_thread(tail: list[str]) -> list[str]:
    """Python's report of an exception in Paddle's DataLoader reader thread (``threading.py``'s ``excepthook``)."""
    return ["Exception in thread Thread-2:", "Traceback (most recent call last):",
            *_frame("/opt/env/lib/python3.9/threading.py", 980, "_bootstrap_inner", "self.run()"),
            *_frame("/opt/env/lib/python3.9/threading.py", 917, "run", "self._target(*self._args, **self._kwargs)"),
            *tail]


_SETUP = ["2024-03-01 10:00:00 [INFO]\tLoading pretrained model from /data/backbone.pdparams",
          "2024-03-01 10:00:01 [INFO]\tThere are 120/120 variables loaded into Backbone.",
          "W0301 10:00:02.100000 4242 gpu_resources.cc:119] Please NOTE: device: 0, GPU Compute Capability: 8.0"]


def test_an_error_in_paddles_reader_thread_is_the_first_step() -> None:
    """P8: Paddle's ``DataLoader.__iter__`` builds the iterator, whose ``__init__`` starts the reader thread
    (``_thread_loop``); a sample that fails there, before any step is logged, fails the first step."""
    lines = [*_SETUP, *_reader_thread([
        *_frame(f"{_LIB}/paddle/io/dataloader/dataloader_iter.py", 230, "_thread_loop",
                "batch = self._dataset_fetcher.fetch(indices, self._thread_done_event)"),
        *_frame(f"{_LIB}/paddle/io/dataloader/fetcher.py", 125, "fetch", "data.append(self.dataset[idx])"),
        *_frame("/src/seg/datasets/dataset.py", 88, "__getitem__", "im = cv2.imread(path).astype('float32')"),
        "AttributeError: 'NoneType' object has no attribute 'astype'"])]
    assert phase_of(lines, len(lines) - 1, lines[-3:]) == "first_step"


def test_a_worker_traceback_quoted_in_the_reraised_message_is_not_the_head() -> None:
    """Paddle's ``_WorkerException.reraise`` raises ``exc_type("DataLoader worker({}) caught {} with message:\\n{}")``;
    a ``KeyError`` prints that message's repr, the worker's ``Traceback`` inside it: the traceback read is the
    reader thread's above it."""
    quoted = ("KeyError: 'DataLoader worker(1) caught KeyError with message:\\nTraceback (most recent call last):\\n"
              "  File \"/src/det/transforms.py\", line 40, in sample\\n    db = self.per_class[name]\\nKeyError: \\'Car\\'\\n'")
    lines = [*_SETUP, *_reader_thread([
        *_frame(f"{_LIB}/paddle/io/dataloader/dataloader_iter.py", 604, "_thread_loop", "batch = self._get_data()"),
        *_frame(f"{_LIB}/paddle/io/dataloader/dataloader_iter.py", 752, "_get_data", "batch.reraise()"),
        *_frame(f"{_LIB}/paddle/io/dataloader/worker.py", 178, "reraise", "raise self.exc_type(msg)"),
        quoted])]
    assert phase_of(lines, len(lines) - 1, lines[-3:]) == "first_step"


def test_an_error_in_a_model_built_before_the_loader_stays_startup() -> None:
    """P3: a traceback with no reader thread in it (the model's constructor) is still set-up."""
    lines = [*_SETUP, "Traceback (most recent call last):",
             *_frame("tools/train.py", 50, "<module>", "main(args)"),
             *_frame("tools/train.py", 40, "main", "model = build_model(cfg)"),
             *_frame("/src/seg/models/builder.py", 12, "build_model", "return Net(**cfg)"),
             "TypeError: Net() got an unexpected keyword argument 'depth'"]
    assert phase_of(lines, len(lines) - 1, lines[-3:]) == "startup"


def _hf_info(line: int, text: str) -> str:
    """transformers' logger line with its default handler's format under ``log_level="info"``."""
    return f"[INFO|trainer.py:{line}] 2024-05-05 09:39:15,976 >> {text}"


def test_the_trainers_resume_counts_are_no_step_of_this_attempt() -> None:
    """P2 (counted per attempt) + P7: the Trainer's "Continuing training from epoch/global step" and "Will skip the first
    ... batches" lines name the saved state's counts; with no bar (``disable_tqdm``), an OOM in ``training_step`` is this
    attempt's first step."""
    lines = [_hf_info(2519, "***** Running training *****"),
             _hf_info(2520, "  Num examples = 4,608"),
             _hf_info(2549, "  Continuing training from checkpoint, will skip to saved global_step"),
             _hf_info(2550, "  Continuing training from epoch 3"),
             _hf_info(2551, "  Continuing training from global step 500"),
             _hf_info(2553, "  Will skip the first 3 epochs then the first 44 batches in the first epoch."),
             "Traceback (most recent call last):",
             *_frame("train.py", 90, "<module>", "trainer.train(resume_from_checkpoint=True)"),
             *_frame(f"{_LIB}/transformers/trainer.py", 1938, "train", "return inner_training_loop("),
             *_frame(f"{_LIB}/transformers/trainer.py", 2279, "_inner_training_loop",
                     "tr_loss_step = self.training_step(model, inputs)"),
             *_frame(f"{_LIB}/transformers/trainer.py", 3318, "training_step", "loss = self.compute_loss(model, inputs)"),
             "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."]
    assert phase_of(lines, len(lines) - 1, lines[-3:]) == "first_step"


def test_a_step_line_after_the_resume_counts_is_training() -> None:
    """P2: once this attempt logs a step (the bar at 1/N), the failure is in training."""
    lines = [_hf_info(2550, "  Continuing training from epoch 3"),
             _hf_info(2551, "  Continuing training from global step 500"),
             "  0%|          | 0/576 [00:00<?, ?it/s]",
             "  1%|          | 5/576 [00:09<17:10,  1.80s/it]",
             "Traceback (most recent call last):",
             *_frame(f"{_LIB}/transformers/trainer.py", 2279, "_inner_training_loop",
                     "tr_loss_step = self.training_step(model, inputs)"),
             "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."]
    assert phase_of(lines, len(lines) - 1, lines[-3:]) == "training"


_KERAS_START = ['Model: "sequential"', "Total params: 1,234,567", "Epoch 1/50"]
_KILLED = "/var/spool/slurmd/job123/slurm_script: line 12: 4242 Killed                  python train.py"


def test_keras_progbar_lines_padded_with_spaces_count_steps_done() -> None:
    """P2 (a) + P9: Keras 2's ``Progbar`` pads its count to the total's width (" 12/200 [>....] - ETA: ... - loss:
    ..."); after it, a kill is in training."""
    lines = [*_KERAS_START,
             "  1/200 [..............................] - ETA: 10:02 - loss: 2.3026",
             " 12/200 [>.............................] - ETA: 1:02 - loss: 0.6931",
             _KILLED]
    assert phase_of(lines, len(lines) - 1, lines[-1:]) == "training"


def test_a_keras_progbar_at_one_is_a_step_done() -> None:
    """P2 (a): ``ProgbarLogger.on_train_batch_end`` updates the bar with ``batch + 1``, so "1/200" is one step done."""
    lines = [*_KERAS_START, "  1/200 [..............................] - ETA: 10:02 - loss: 2.3026", _KILLED]
    assert phase_of(lines, len(lines) - 1, lines[-1:]) == "training"


def test_a_keras_epoch_header_without_a_bar_is_the_first_step() -> None:
    """P3: "Epoch 1/50" alone (no bar yet) starts the loop: a kill then is in the first step."""
    lines = [*_KERAS_START, _KILLED]
    assert phase_of(lines, len(lines) - 1, lines[-1:]) == "first_step"


def _with_step(lines: list[str]) -> str:
    """The phase of a failure on the last line, with the last step printed before it (as the whole-log reader passes)."""
    return phase_of(lines, len(lines) - 1, lines[-1:], 0, last_step(lines, len(lines) - 1))


_YOLOX = "2024-02-01 09:35:58.735 | INFO     | yolox.core.trainer:"


def test_yolox_start_train_epoch_one_then_an_error_in_the_epochs_set_up_is_the_first_step() -> None:
    """P3: YOLOX's ``before_epoch`` logs "---> start train epoch1" as the loop begins; an error in that per-epoch set-up
    (its frames name no step) is inside the loop, before the first step completed."""
    lines = [f"{_YOLOX}before_train:179 - Training start...",
             f"{_YOLOX}before_epoch:188 - ---> start train epoch1",
             "Traceback (most recent call last):",
             *_frame("tools/train.py", 140, "<module>", "main(exp, args)"),
             *_frame("tools/train.py", 120, "main", "trainer.train()"),
             *_frame("/src/yolox/core/trainer.py", 70, "train", "self.train_in_epoch()"),
             *_frame("/src/yolox/core/trainer.py", 78, "train_in_epoch", "self.before_epoch()"),
             *_frame("/src/yolox/core/trainer.py", 192, "before_epoch", "self.train_loader.close_mosaic()"),
             "AttributeError: 'DataLoader' object has no attribute 'close_mosaic'"]
    assert _with_step(lines) == "first_step"


def test_yolox_before_train_only_then_a_kill_is_startup() -> None:
    """P3: before the epoch's header, the trainer is still setting up (data loader, prefetcher)."""
    lines = [f"{_YOLOX}before_train:149 - init prefetcher, this might take one minute or less...", _KILLED]
    assert _with_step(lines) == "startup"


def test_verls_metrics_line_at_step_one_is_a_step_done() -> None:
    """P2 (b): verl's ``LocalLogger`` prints "step:1 - key:value - ..." after step 1's update: a kill then is training."""
    lines = ["\x1b[36m(main_task pid=4242)\x1b[0m step:1 - global_seqlen/min:91234 - actor/pg_loss:0.012 - "
             "actor/entropy:1.23 - critic/score/mean:0.25 - timing_s/step:95.1", _KILLED]
    assert _with_step(lines) == "training"


def test_a_plain_step_one_line_stays_the_first_step() -> None:
    """P2: a script's "step 1" line alone (printed when the step starts, for all the log says) is not read as verl's."""
    lines = ["step 1 lr 0.0001 grad_norm 3.2", _KILLED]
    assert _with_step(lines) == "first_step"


def test_mmengines_resumed_counts_are_no_step_of_this_attempt() -> None:
    """P2 (counted per attempt): mmengine's ``Runner.resume`` logs "resumed epoch: 12, iter: 3000" once the saved state is
    restored, inside ``Runner.train`` before the loop: a kill then is still set-up."""
    lines = ["01/01 10:00:00 - mmengine - INFO - Load checkpoint from work_dirs/exp/epoch_12.pth",
             "01/01 10:00:01 - mmengine - INFO - resumed epoch: 12, iter: 3000", _KILLED]
    assert _with_step(lines) == "startup"


def test_an_mmengine_step_after_the_resume_is_training() -> None:
    """P2 (b): mmengine's ``LoggerHook`` line after the resume counts this attempt's iterations."""
    lines = ["01/01 10:00:01 - mmengine - INFO - resumed epoch: 12, iter: 3000",
             "01/01 10:05:00 - mmengine - INFO - Epoch(train) [13][ 50/250]  lr: 1.0000e-04  eta: 1:00:00  time: 0.5012  "
             "data_time: 0.0100  memory: 9000  loss: 0.8123", _KILLED]
    assert _with_step(lines) == "training"


def test_espnet2s_batch_report_counts_steps_done() -> None:
    """P2 (b): ESPnet2's ``SubReporter.log_message`` logs "1epoch:train:1-100batch: ..." every ``log_interval`` batches,
    after their steps; a kill then is in training."""
    lines = ["[gpu01] 2024-01-01 10:00:00,000 (trainer:453) INFO: 1epoch:train:1-100batch: iter_time=1.234e-04, "
             "forward_time=0.123, loss=123.456, acc=0.120, backward_time=0.100, optim_step_time=0.010, lr_0=1.000e-05, "
             "train_time=1.234", _KILLED]
    assert _with_step(lines) == "training"


def _handled_then_raised(outer: list[str], error: str) -> list[str]:
    """Python's implicit chaining (``traceback.py`` ``_context_message``): a library's traceback below its ``try``, the
    note, then the traceback of the exception raised while handling it, with the program's outer frames."""
    return ["Traceback (most recent call last):",
            *_frame(f"{_LIB}/jax/_src/lax/lax.py", 154, "broadcast_shapes", "return _broadcast_shapes_cached(*shapes)"),
            *_frame(f"{_LIB}/jax/_src/lax/lax.py", 176, "_broadcast_shapes_uncached",
                    'raise ValueError(f"Incompatible shapes for broadcasting: shapes={list(shapes)}")'),
            "ValueError: Incompatible shapes for broadcasting: shapes=[(64, 3), (64,)]", "",
            "During handling of the above exception, another exception occurred:", "",
            "Traceback (most recent call last):", *outer, error]


def test_the_outer_frames_of_an_exception_raised_while_handling_another_show_the_step() -> None:
    """P1: the first traceback holds only jax's frames; the one raised while handling it runs through the update step,
    and with no step logged the failure is the first step's."""
    lines = ["Starting training: 1000 updates", *_handled_then_raised([
        *_frame("ppo.py", 378, "<module>", "out = train_jit(rng)"),
        *_frame("ppo.py", 340, "train", "runner_state, metric = jax.lax.scan(_update_step, runner_state, None, n)"),
        *_frame("ppo.py", 317, "_update_step", "update_state, loss_info = jax.lax.scan(_update_epoch, state, None, k)"),
        *_frame("ppo.py", 171, "ppo_loss", "log_probs = dist.log_prob(traj.action)")],
        "ValueError: Incompatible shapes for broadcasting: shapes=[(64, 3), (64,)]")]
    first = next(k for k, ln in enumerate(lines) if ln.startswith("ValueError"))
    assert phase_of(lines, first, lines[first - 2:first + 1]) == "first_step"


def test_the_outer_frames_of_a_set_up_stay_startup() -> None:
    """P3: the same chaining in the model's construction is still set-up."""
    lines = _handled_then_raised([
        *_frame("ppo.py", 378, "<module>", "net = build_network(cfg)"),
        *_frame("ppo.py", 90, "build_network", "return ActorCritic(cfg.hidden)")],
        "ValueError: Incompatible shapes for broadcasting: shapes=[(64, 3), (64,)]")
    first = next(k for k, ln in enumerate(lines) if ln.startswith("ValueError"))
    assert phase_of(lines, first, lines[first - 2:first + 1]) == "startup"


_TIME_LIMIT = "slurmstepd: error: *** STEP 1809955.0 ON nid001 CANCELLED AT 2026-04-07T08:18:54 DUE TO TIME LIMIT ***"
_DEATH = ("W0407 08:18:54.022000 79282 /opt/env/lib/python3.12/site-packages/torch/distributed/elastic/agent/server/api.py:723]"
          " Received 15 death signal, shutting down workers")


def test_a_time_limit_on_the_files_first_line_is_startup() -> None:
    """P9: a stderr file whose first line is Slurm's time-limit kill holds none of the program's output: startup."""
    lines = [_TIME_LIMIT, _DEATH]
    assert phase_of(lines, 0, lines[:1]) == "startup"


def test_a_time_limit_after_the_programs_output_is_training() -> None:
    """P2 (c): the same kill after the program's own set-up lines (its steps printed elsewhere): it ran for its whole
    allocation."""
    lines = ["Loading data from /scratch/fineweb10B ...", "Model params: 124M", _TIME_LIMIT, _DEATH]
    assert phase_of(lines, 2, lines[2:3]) == "training"
