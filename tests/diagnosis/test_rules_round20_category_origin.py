"""Round 20 (category and origin): Lightning's missing logger folder, a DataLoader worker stopped
by SIGTERM, and a launcher whose children could not open their script. Each excerpt is small,
written for the test in the library's format (cited in each test), not copied from a log."""

from __future__ import annotations

import pytest

from gpulens.diagnosis.classifier import Classifier, default_classifier
from gpulens.diagnosis.logread import diagnose_text


@pytest.fixture(scope="module")
def clf() -> Classifier:
    return default_classifier()


_EPOCHS = [f"Epoch 0:  {k}%|##      | {k * 4}/400 [00:{k:02d}<01:00, 6.1it/s, loss=0.{90 - k}]" for k in range(10, 40, 5)]


def _traceback(frames: list[str], error: str) -> list[str]:
    return ["Traceback (most recent call last):", *frames, error]


def test_lightning_missing_log_folder_is_a_semantic_error_of_unknown_origin(clf: Classifier) -> None:
    # pytorch_lightning/core/saving.py save_hparams_to_yaml, called by loggers/csv_logs.py ExperimentWriter.save
    frames = ['  File "/env/lib/python3.11/site-packages/pytorch_lightning/loggers/csv_logs.py", line 87, in save',
              "    save_hparams_to_yaml(hparams_file, self.hparams)",
              '  File "/env/lib/python3.11/site-packages/pytorch_lightning/core/saving.py", line 379, '
              "in save_hparams_to_yaml",
              '    raise RuntimeError(f"Missing folder: {os.path.dirname(config_yaml)}.")']
    lines = ["Sanity Checking: 0it [00:00, ?it/s]", *_EPOCHS,
             *_traceback(frames, "RuntimeError: Missing folder: runs/wave_7/log/version_2.")]
    d = diagnose_text("\n".join(lines), clf).diagnosis
    assert (d.category, d.origin) == ("semantic_error", "unknown")


def test_dataloader_worker_sigterm_is_a_stop_from_outside(clf: Classifier) -> None:
    # torch/utils/data/_utils/signal_handling.py handler -> _error_if_any_worker_fails
    # ("DataLoader worker (pid {}) is killed by signal: {}", signal.strsignal(15) == "Terminated")
    frames = ['  File "fit.py", line 88, in <module>', "    loss.backward()",
              '  File "/env/lib/python3.10/site-packages/torch/utils/data/_utils/signal_handling.py", line 66, '
              "in handler", "    _error_if_any_worker_fails()"]
    lines = [*_EPOCHS, *_traceback(frames, "RuntimeError: DataLoader worker (pid 51234) is killed by signal: Terminated. ")]
    d = diagnose_text("\n".join(lines), clf).diagnosis
    assert (d.category, d.origin) == ("preempted", "unknown")


_CANT_OPEN = "/env/bin/python3.11: can't open file '/srv/proj/run_rl.py': [Errno 2] No such file or directory"
_ARGPARSE = ["usage: run_rl.py [-h] [--lr LR] [--steps STEPS]",
             "run_rl.py: error: unrecognized arguments: --learning-rate 3e-4"]


@pytest.mark.parametrize("own", [[_CANT_OPEN] * 4, [_CANT_OPEN], _ARGPARSE, _ARGPARSE * 4],
                         ids=["cant-open-4-children", "cant-open-1-child", "argparse-1-child", "argparse-4-children"])
def test_children_that_exit_by_themselves_decide_behind_the_launcher(clf: Classifier, own: list[str]) -> None:
    # CPython Modules/main.c pymain_run_file ("%S: can't open file %R: [Errno %d] %s") or argparse's
    # ArgumentParser.error ("prog: error: ..."), one per child; torch.distributed.elastic's ChildFailedError
    # report follows (torch/distributed/elastic/multiprocessing/errors/__init__.py).
    report = ["E0101 10:00:01.000000 4242 torch/distributed/elastic/multiprocessing/api.py:869] failed "
              "(exitcode: 2) local_rank: 0 (pid: 4300) of binary: /env/bin/python3.11",
              *_traceback(['  File "/env/bin/torchrun", line 8, in <module>', "    sys.exit(main())"],
                          "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: "),
              "============================================================", "/srv/proj/run_rl.py FAILED",
              "------------------------------------------------------------", "Root Cause (first observed failure):",
              "[0]:", "  time      : 2026-01-01_10:00:01", "  host      : gpu7", "  rank      : 0 (local_rank: 0)",
              "  exitcode  : 2 (pid: 4300)", "  error_file: <N/A>",
              "============================================================"]
    d = diagnose_text("\n".join(["Launching 4 processes", *own, *report]), clf).diagnosis
    assert (d.category, d.origin) == ("semantic_error", "user")


def test_dataloader_worker_sigterm_under_a_named_time_limit_is_the_scheduler(clf: Classifier) -> None:
    # the same worker report (torch/utils/data/_utils/signal_handling.py) under slurmstepd's
    # "*** JOB N ON node CANCELLED AT time DUE TO TIME LIMIT ***": the sender is named (README O3)
    frames = ['  File "fit.py", line 88, in <module>', "    loss.backward()"]
    lines = [*_EPOCHS, *_traceback(frames, "RuntimeError: DataLoader worker (pid 51234) is killed by signal: Terminated. "),
             "slurmstepd: error: *** JOB 777 ON gpu12 CANCELLED AT 2026-01-01T10:00:00 DUE TO TIME LIMIT ***"]
    d = diagnose_text("\n".join(lines), clf).diagnosis
    assert (d.category, d.origin) == ("preempted", "infrastructure")
