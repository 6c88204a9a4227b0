"""An uncaught exception that ends the process after a completion message (the job script's
own next statement raising once ``trainer.train()`` or ``Trainer.fit`` returned) is a failure
(README "How the labels were decided", P10, R1); only the shutdown's own errors (an exception
Python ignored in ``__del__``, NCCL's destroy_process_group warning) and a kill after the end
leave the run healthy. Each excerpt is small and written for the test."""

from __future__ import annotations

import pytest

from gpulens.diagnosis.classifier import Classifier, default_classifier
from gpulens.diagnosis.logread import diagnose_text
from gpulens.diagnosis.logread.end.uncaught import uncaught_exception


@pytest.fixture(scope="module")
def clf() -> Classifier:
    return default_classifier()


def _hf_end() -> list[str]:
    """An HF Trainer run's last records: its loss logs, the bar at its end, ``train()``'s metrics."""
    out = [f"{{'loss': 0.{80 - k}, 'grad_norm': 1.1, 'learning_rate': 2e-05, 'epoch': {k * 0.3:.1f}}}"
           for k in range(1, 11)]
    return [*out, "100%|██████████| 600/600 [10:02<00:00,  1.00s/it]",
            "{'train_runtime': 602.7, 'train_samples_per_second': 31.9, 'train_steps_per_second': 1.0, "
            "'train_loss': 0.52, 'epoch': 3.0}"]


def _lightning_end() -> list[str]:
    """A Lightning run's last epoch bars and ``Trainer.fit``'s stop line."""
    out = [f"Epoch {e}: 100%|██████████| 120/120 [00:30<00:00,  3.99it/s, v_num=7, train_loss=0.{40 - e}]"
           for e in range(8)]
    return [*out, "`Trainer.fit` stopped: `max_epochs=8` reached."]


#: wandb's sdk/lib/preinit.py ``preinit_wrapper``: ``wandb.log`` before ``wandb.init`` raises
#: ``wandb.Error`` (wandb/errors/errors.py), which the excepthook prints with its module.
_WANDB_PREINIT = ["Traceback (most recent call last):",
                  '  File "/home/me/run/finetune.py", line 97, in <module>',
                  "    wandb.log({'eval/acc': score})",
                  '  File "/env/lib/python3.11/site-packages/wandb/sdk/lib/preinit.py", line 36, in preinit_wrapper',
                  '    raise wandb.Error(f"You must call wandb.init() before {name}()")',
                  "wandb.errors.errors.Error: You must call wandb.init() before wandb.log()"]


def test_a_wandb_preinit_error_after_hf_trainers_metrics_is_a_failure(clf: Classifier) -> None:
    w = diagnose_text("\n".join([*_hf_end(), *_WANDB_PREINIT]), clf)
    assert w.diagnosis.category != "none"
    assert w.indicators == [_WANDB_PREINIT[-1]]
    assert w.phase in ("shutdown", "evaluation")


def test_a_trackio_error_after_hf_trainers_metrics_is_a_failure(clf: Classifier) -> None:
    tb = ["Traceback (most recent call last):", '  File "/home/me/run/finetune.py", line 97, in <module>',
          "    trackio.log({'eval/acc': score})", "RuntimeError: Call trackio.init() before trackio.log()"]
    w = diagnose_text("\n".join([*_hf_end(), *tb]), clf)
    assert w.diagnosis.category != "none"


def test_the_scripts_own_keyerror_after_lightnings_stop_line_is_a_failure(clf: Classifier) -> None:
    tb = ["Traceback (most recent call last):", '  File "/home/me/proj/main.py", line 61, in <module>',
          "    print(metrics['val_f1'])", "KeyError: 'val_f1'"]
    w = diagnose_text("\n".join([*_lightning_end(), *tb]), clf)
    assert w.diagnosis.category != "none"
    assert w.indicators == ["KeyError: 'val_f1'"]


def test_a_bare_exception_class_from_a_module_run_is_a_failure(clf: Classifier) -> None:
    tb = ["Traceback (most recent call last):",
          '  File "/usr/lib/python3.10/runpy.py", line 196, in _run_module_as_main',
          "    return _run_code(code, main_globals, None,", '  File "/home/me/proj/pkg/report.py", line 12, in <module>',
          "    raise Exception('no summary written')", "Exception: no summary written"]
    w = diagnose_text("\n".join([*_hf_end(), *tb]), clf)
    assert w.diagnosis.category != "none"


def test_an_exception_ignored_in_del_after_the_end_is_a_normal_end(clf: Classifier) -> None:
    ignored = ["Exception ignored in: <function _MultiProcessingDataLoaderIter.__del__ at 0x7f00c0a1b2e0>",
               "Traceback (most recent call last):",
               '  File "/env/lib/python3.11/site-packages/torch/utils/data/dataloader.py", line 1478, in __del__',
               "    self._shutdown_workers()",
               "AttributeError: 'NoneType' object has no attribute 'python_exit_status'"]
    for end in (_hf_end(), _lightning_end()):
        assert diagnose_text("\n".join([*end, *ignored]), clf).diagnosis.category == "none"


def test_ncclss_destroy_process_group_warning_after_the_end_is_a_normal_end(clf: Classifier) -> None:
    warn = ("[rank0]:[W1128 00:40:12.004310 ProcessGroupNCCL.cpp:1250] Warning: WARNING: process group has NOT been "
            "destroyed before we destruct ProcessGroupNCCL. On normal program exit, the application should call "
            "destroy_process_group to ensure that any pending NCCL operations have finished in this process.")
    assert diagnose_text("\n".join([*_hf_end(), warn]), clf).diagnosis.category == "none"


def test_a_kill_after_the_end_is_a_normal_end(clf: Classifier) -> None:
    kill = "/var/spool/slurmd/job4242/slurm_script: line 9: 51234 Killed                  python finetune.py"
    for end in (_hf_end(), _lightning_end()):
        assert diagnose_text("\n".join([*end, kill]), clf).diagnosis.category == "none"


def test_only_an_uncaught_report_from_the_top_level_after_a_completion_counts() -> None:
    printed = ["Traceback (most recent call last):",
               '  File "/home/me/run/callbacks.py", line 40, in on_train_end',
               "    wandb.log({'final': 1})", "wandb.errors.errors.Error: You must call wandb.init() before wandb.log()"]
    ended = [*_hf_end(), *printed]
    assert not uncaught_exception(ended, 0, len(ended) - 1)  # traceback.print_exc() in the callback: the run went on
    ended = [*_hf_end(), *_WANDB_PREINIT]
    assert uncaught_exception(ended, 0, len(ended) - 1)
    assert not uncaught_exception(ended, 0, len(ended) - 4)  # a code line, not the exception's
    # no completion message above it: the open traceback already says the job failed
    assert not uncaught_exception(_WANDB_PREINIT, 0, len(_WANDB_PREINIT) - 1)


def test_a_tracker_error_python_ignored_at_exit_after_the_end_is_a_normal_end(clf: Classifier) -> None:
    # CPython's "Exception ignored in: ..." (PyErr_WriteUnraisable): the process went on to its exit
    ignored = ["Exception ignored in: <function Run.__del__ at 0x7f00c0a1c040>", "Traceback (most recent call last):",
               '  File "/env/lib/python3.11/site-packages/tracker/run.py", line 88, in __del__',
               "    self.finish()", "tracker.errors.Error: run already finished"]
    assert diagnose_text("\n".join([*_hf_end(), *ignored]), clf).diagnosis.category == "none"
