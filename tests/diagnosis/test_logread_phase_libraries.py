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


def _grpo_step(k: int) -> list[str]:
    bar = f"  0%|          | {k}/8000 [0{k}:12<55:53:54, 25.13s/it]"
    return ["", bar, "", "{'loss': 0.0001, 'grad_norm': 0.15, 'learning_rate': 9.99e-07, 'reward': 0.99, "
            f"'epoch': 0.0{k}}}", "", f"{bar}Invalidate trace cache @ step 0 and module {k * 761}: cache has only 0 modules"]


def test_zero3_invalidate_trace_cache_is_no_validation(rules: Classifier) -> None:
    # DeepSpeed ZeRO-3's notice (deepspeed/runtime/zero/partitioned_param_coordinator.py) between the steps
    lines = [line for k in range(1, 9) for line in _grpo_step(k)]
    lines += ["W0301 10:12:01.112000 4242 torch/distributed/elastic/agent/server/api.py:704] Received Signals.SIGTERM "
              "death signal, shutting down workers",
              "E0301 10:12:03.553000 4242 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: -15) "
              "local_rank: 3 (pid: 4300) of binary: /opt/conda/bin/python"]
    assert diagnose_text("\n".join(lines), rules).phase == "training"


def test_names_above_a_failure_without_traceback_are_not_its_phase(rules: Classifier) -> None:
    # a Ray/verl config dump and wandb's run summary name validation settings and metrics; the kill
    # and the launcher verdict after them say nothing of an evaluation going on
    dump = ["(main_task pid=7001) {'data': {'val_batch_size': None,", "(main_task pid=7001)           'val_files': 'v.parquet'},",
            "(main_task pid=7001)  'trainer': {'test_freq': 5, 'total_epochs': 15}}",
            "(main_task pid=7001) [validate_config] All configuration checks passed successfully!",
            "Error executing job with overrides: ['data.val_files=v.parquet', 'trainer.test_freq=5']",
            "Traceback (most recent call last):",
            '  File "/srv/verl/trainer/main_ppo.py", line 33, in run_ppo',
            "    ray.get(main_task.remote(config))",
            "ray.exceptions.LocalRayletDiedError: The task's local raylet died. Check raylet.out for more information."]
    assert diagnose_text("\n".join(dump), rules).phase == "startup"
    summary = ["wandb: Run history:", "wandb:   val_accuracy ▃▅▇▄▇█▇▇█████", "wandb:       val_loss ▂▂▂▂▁▂▁▁▁▁▁",
               "wandb: Run summary:", "wandb:   val_accuracy 0.49339", "wandb:       val_loss 1.27948", "",
               "run_all.sh: line 27: 1234: command not found"]
    assert diagnose_text("\n".join(summary), rules).phase != "evaluation"


def test_an_evaluation_announced_in_colour_is_read(rules: Classifier) -> None:
    lines = ["\x1b[32m2023-10-28T12:37:41 | tasks.utils: \x1b[0mLoaded checkpoint from /ckpt/best.pth",
             "\x1b[32m2023-10-28T12:37:41 | __main__: \x1b[0mStart evaluation",
             "\x1b[32m2023-10-28T12:37:41 | __main__: \x1b[0mEvaluating val split...",
             "slurmstepd: error: *** JOB 1131917 ON worker-1 CANCELLED AT 2023-10-28T12:37:46 ***"]
    assert diagnose_text("\n".join(lines), rules).phase == "evaluation"


@pytest.mark.parametrize("last, phase", [("Evaluating iter 10/10", "evaluation"), ("Evaluating iter 3/10", "evaluation"),
                                         (" validation loss at iteration 120 | lm loss value: 2.31E+00 | lm loss PPL: "
                                          "1.01E+01 |", "training")])
def test_megatron_evaluate_prints_each_iteration_before_running_it(rules: Classifier, last: str, phase: str) -> None:
    lines = [_megatron(k) for k in range(10, 130, 10)] + ["Evaluating on 5120 samples", "Evaluating iter 1/10",
                                                          last, "terminate called after throwing an instance of 'c10::Error'",
                                                          "  what():  CUDA driver error: unknown error"]
    assert diagnose_text("\n".join(lines), rules).phase == phase
