"""Reader round 22, phase (P1-P11 of sample_logs/whole/README.md, "Phase: rules"), on excerpts written by hand in the
formats the libraries print: SAM 2's ``ProgressMeter`` joined by " | ", and the PyTorch tutorials' "Epoch [e/E], Step
[k/N], Loss: ..." loop line with its unbracketed kin."""

from __future__ import annotations

from gpulens.diagnosis.logread.phase import phase_of
from gpulens.diagnosis.logread.phase.steps import last_step
from gpulens.diagnosis.logread.steplines import step_in, step_progress

_LIB = "/opt/env/lib/python3.10/site-packages"


def _frame(path: str, line: int, func: str, code: str) -> list[str]:
    return [f'  File "{path}", line {line}, in {func}', f"    {code}"]


def _oom_in_step(loop: str, step: str) -> list[str]:
    """A CUDA OOM raised in the forward of a training step, through the job's own loop functions."""
    return ["Traceback (most recent call last):",
            *_frame("/src/train.py", 40, "main", "trainer.run()"),
            *_frame("/src/trainer.py", 300, loop, f"self.{step}(batch)"),
            *_frame("/src/trainer.py", 410, step, "out = self.model(batch['images'])"),
            *_frame(f"{_LIB}/torch/nn/modules/module.py", 1747, "_call_impl", "return forward_call(*args, **kwargs)"),
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."]


def _meter_line(batch: int) -> str:
    """SAM 2's ``ProgressMeter.display``: the prefix and batch counter, then dozens of meters joined by " | "."""
    losses = " | ".join(f"Losses/train_part{i}_loss: {1.5 + i / 10:.2e} ({1.7 + i / 10:.2e})" for i in range(12))
    return (f"INFO 2025-03-02 08:00:{batch:02d},100 trainer.py: 650: Train Epoch: [0][{batch:>6d}/200000] | "
            f"Batch Time: 7.21 (9.30) | Data Time: 0.04 (1.20) | Mem (GB): 18.0 (17.5) | Time Elapsed: 00d 00h 04m | "
            f"{losses}")


def test_sam2_progress_meter_joined_by_bars_counts_its_batch() -> None:
    """P2 (b): SAM 2's trainer logs its ``ProgressMeter`` line after the batch's step, its meters joined by " | "."""
    line = _meter_line(7)
    assert step_progress(line)
    assert step_in(line) == "7"


def test_a_failure_after_sam2_meter_lines_is_training() -> None:
    """Eight SAM 2 meter lines (batches 0 to 7) then an OOM in the next step's forward: steps were done, ``training``."""
    lines = ["INFO 2025-03-02 07:59:00,000 trainer.py: 332: Successfully initialized training components.",
             *(_meter_line(b) for b in range(8)), *_oom_in_step("train_epoch", "_step")]
    assert phase_of(lines, len(lines) - 1, lines[-len(_oom_in_step("train_epoch", "_step")):]) == "training"


def _epoch_batch(batch: int) -> str:
    return f"2025-02-10 13:13:52,296 - __main__ - INFO - Epoch 1, Batch {batch}/404, Loss: 0.0575, Accum: 1/1"


def test_epoch_then_batch_counter_lines_are_training() -> None:
    """P2 (b): "Epoch 1, Batch 10/404, Loss: ..." counts the batches done within epoch 1: two such lines (10, 20)
    are steps done, though the epoch number they both print is 1."""
    tb = _oom_in_step("train_epoch", "train_step")
    lines = ["2025-02-10 13:13:41,078 - __main__ - INFO - Start training", _epoch_batch(10), "some debug output",
             _epoch_batch(20), "more debug output", *tb]
    assert phase_of(lines, len(lines) - 1, tb) == "training"


def test_pytorch_tutorial_step_line_is_training() -> None:
    """P2 (b): the PyTorch tutorials' ``'Epoch [{}/{}], Step [{}/{}], Loss: {:.4f}'`` line, printed every 100 steps
    after ``optimizer.step()``: a failure after "Step [200/600]" is ``training``, though the epoch is the first."""
    tb = _oom_in_step("train", "train_step")
    lines = ["Epoch [1/5], Step [100/600], Loss: 0.2231", "Epoch [1/5], Step [200/600], Loss: 0.1187", *tb]
    assert phase_of(lines, len(lines) - 1, tb) == "training"


def _ds_init_lines() -> list[str]:
    """What ``deepspeed.initialize`` logs while it builds its engine: the step-0 progress report, then the config."""
    return ["[2024-05-01 09:00:10,100] [INFO] [logging.py:96:log_dist] [Rank 0] DeepSpeed Final Optimizer = adamw",
            "[2024-05-01 09:00:10,101] [INFO] [logging.py:96:log_dist] [Rank 0] step=0, skipped=0, lr=[2e-05], "
            "mom=[[0.9, 0.95]]",
            "[2024-05-01 09:00:10,102] [INFO] [config.py:988:print] DeepSpeedEngine configuration:",
            "[2024-05-01 09:00:10,103] [INFO] [config.py:988:print]   steps_per_print .............. 10",
            "[2024-05-01 09:00:10,104] [INFO] [config.py:988:print]   zero_optimization_stage ...... 2"]


def test_deepspeeds_step_zero_report_is_no_step() -> None:
    """``DeepSpeedEngine.__init__`` calls ``_report_progress(0)``: its "step=0, skipped=0" line is set-up, not a step."""
    assert not step_progress(_ds_init_lines()[1])
    assert step_progress("[2024-05-01 09:03:10,101] [INFO] [logging.py:96:log_dist] [Rank 0] step=10, skipped=0, "
                         "lr=[2e-05], mom=[[0.9, 0.95]]")


def test_killed_after_deepspeed_init_is_startup() -> None:
    """P3/P9: the launcher kills its workers after the engine's configuration print, no step logged: ``startup``."""
    lines = [*_ds_init_lines(),
             "[2024-05-01 09:00:12,000] [INFO] [launch.py:315:sigkill_handler] Killing subprocess 4100",
             "[2024-05-01 09:00:12,500] [INFO] [launch.py:315:sigkill_handler] Killing subprocess 4101",
             "[2024-05-01 09:00:13,000] [ERROR] [launch.py:321:sigkill_handler] ['/opt/env/bin/python', '-u', 'train.py', "
             "'--local_rank=1'] exits with return code = -9"]
    assert phase_of(lines, len(lines) - 1, lines[-3:]) == "startup"


def test_a_failure_in_the_second_epoch_is_training() -> None:
    """P2 (b): a loop that prints its epoch's number when it begins and a summary when it ends ("Epoch: 0",
    "epoch train loss: 2.31", "Epoch: 1"): the second epoch began after the first one's steps, ``training``."""
    tb = _oom_in_step("train_loop", "train_step")
    lines = ["train samples: 500", "Epoch: 0", "epoch train loss: 2.3104", "epoch val loss: 2.2871",
             "Epoch: 1", *tb]
    top = len(lines) - len(tb)
    assert phase_of(lines, len(lines) - 1, tb, step=last_step(lines, top)) == "training"


def test_one_epoch_header_alone_is_the_first_step() -> None:
    """The first epoch's header, then a failure in its first step: no epoch ended, ``first_step``."""
    tb = _oom_in_step("train_loop", "train_step")
    lines = ["train samples: 500", "Epoch: 0", *tb]
    assert phase_of(lines, len(lines) - 1, tb, step=last_step(lines, 2)) == "first_step"


def test_an_evaluation_program_failing_after_its_scores_is_evaluation() -> None:
    """P5: an evaluation script (``eval_toxicity.py``) printed its scores (sklearn-style "accuracy: 0.8123"), then
    failed writing its results file: past its set-up, ``evaluation``."""
    tb = ["Traceback (most recent call last):",
          *_frame("scripts/eval_toxicity.py", 210, "<module>", "main()"),
          *_frame("scripts/eval_toxicity.py", 204, "main", "with open(out_path, 'w') as f:"),
          "OSError: [Errno 5] Input/output error: '/results/run3/scores.json'"]
    lines = ["Loading test split: 2000 examples", "Per-group results:", "  group_a   : accuracy: 0.8123",
             "  group_b   : accuracy: 0.7710  F1=0.7522", *tb]
    assert phase_of(lines, len(lines) - 1, tb) == "evaluation"


def test_an_evaluation_program_failing_before_any_score_is_startup() -> None:
    """P5: the same script failing before it printed a score (its set-up) stays ``startup``."""
    tb = ["Traceback (most recent call last):",
          *_frame("scripts/eval_toxicity.py", 210, "<module>", "main()"),
          *_frame("scripts/eval_toxicity.py", 120, "main", "cfg = json.load(open(args.config))"),
          "FileNotFoundError: [Errno 2] No such file or directory: 'configs/eval.json'"]
    lines = ["Loading test split: 2000 examples", *tb]
    assert phase_of(lines, len(lines) - 1, tb) == "startup"
