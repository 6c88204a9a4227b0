"""Phase rules of round 10 (issue 23, item 4), on excerpts written by hand in the shapes libraries
print (Megatron-LM's iteration line, DeepSpeed ZeRO-3's trace-cache notice, Hydra's error report,
wandb's run summary, the Hugging Face/TRL trainers' loops)."""

from __future__ import annotations

import pytest

from gpulens.diagnosis.classifier import Classifier
from gpulens.diagnosis.logread import diagnose_text
from gpulens.diagnosis.logread.phase import last_step


@pytest.fixture(scope="module")
def rules() -> Classifier:
    return Classifier(model=None, cache_dir=None)


def _megatron(k: int, stamp: bool = True) -> str:
    head = f" [2025-03-02 10:{k % 60:02d}:11]" if stamp else ""
    return (f"{head} iteration {k:8d}/{500000:8d} | consumed samples: {k * 512:12d} | elapsed time per iteration (ms): "
            f"2411.0 | learning rate: 3.000000E-04 | global batch size:   512 | lm loss: 2.{k % 10}41E+00 | "
            "loss scale: 1.0 | grad norm: 0.312 | number of skipped iterations:   0 | number of nan iterations:   0 |")


@pytest.mark.parametrize("stamp", [True, False])
def test_megatron_iteration_lines_are_steps(rules: Classifier, stamp: bool) -> None:
    lines = ["> building train, validation, and test datasets ...", "[after dataloaders are built] datetime: 2025-03-02 ",
             *[_megatron(k, stamp) for k in range(10, 130, 10)],
             "[rank5]: Traceback (most recent call last):",
             '[rank5]:   File "/srv/Megatron-LM/pretrain_gpt.py", line 271, in <module>',
             "[rank5]:     pretrain(",
             '[rank5]:   File "/srv/Megatron-LM/megatron/training/training.py", line 1101, in train_step',
             "[rank5]:     losses_reduced = forward_backward_func(",
             "[rank5]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB. GPU 5 has a total "
             "capacity of 79.10 GiB of which 1.20 GiB is free."]
    assert last_step(lines, len(lines) - 6) == "120"
    w = diagnose_text("\n".join(lines), rules)
    assert (w.phase, w.step) == ("training", "120")
    # a validation line names an iteration without the counter's "/total |": not a step
    assert last_step([" validation loss at iteration 120 | lm loss value: 2.31E+00 |"], 1) is None
