"""Reader round 25, phase (P1 of sample_logs/whole/README.md, "Phase: rules"): the frames of the traceback that
ended the process outrank an activity announced before it. Excerpts written by hand in the format transformers'
Trainer prints (trainer.py: ``_inner_training_loop`` -> ``training_step``; ``evaluation_loop`` logs
"***** Running Evaluation *****")."""

from __future__ import annotations

from gpulens.diagnosis.logread.phase import phase_of


def _trainer_steps_then_eval_announced() -> list[str]:
    """A Trainer run: steps logged, an evaluation announced, then a traceback inside ``training_step``."""
    steps = [f"{{'loss': {2.0 - k / 10:.2f}, 'learning_rate': 5e-05, 'epoch': {k / 10:.1f}}}" for k in range(1, 6)]
    announced = ["***** Running Evaluation *****", "  Num examples = 500", "  Batch size = 8"]
    tb = ["Traceback (most recent call last):",
          '  File "/job/train.py", line 90, in <module>',
          "    trainer.train()",
          '  File "/env/lib/python3.10/site-packages/transformers/trainer.py", line 1885, in train',
          "    return inner_training_loop(",
          '  File "/env/lib/python3.10/site-packages/transformers/trainer.py", line 2216, in _inner_training_loop',
          "    tr_loss_step = self.training_step(model, inputs)",
          '  File "/env/lib/python3.10/site-packages/transformers/trainer.py", line 3250, in training_step',
          "    self.accelerator.backward(loss)",
          '  File "/env/lib/python3.10/site-packages/torch/autograd/__init__.py", line 251, in backward',
          "    Variable._execution_engine.run_backward(",
          "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."]
    return [*steps, *announced, *tb]


def test_training_step_frames_outrank_announced_evaluation() -> None:
    """P1: the root traceback runs in ``training_step``'s backward; an evaluation announced above it (its loop
    returned, training resumed) does not make the failure the evaluation's."""
    lines = _trainer_steps_then_eval_announced()
    at = len(lines) - 1
    assert phase_of(lines, at, lines[at - 3:]) == "training"
