"""Round 11, healthy or failed: a glog/abseil fatal message ends the run; a script that logs a
caught error and prints nothing more did not end normally; errors of a tracker's threads after
its exit lines are a normal end's. Each excerpt is short and written for the test."""

from __future__ import annotations

import pytest

from gpulens.diagnosis.classifier import Classifier, default_classifier
from gpulens.diagnosis.logread import diagnose_text
from gpulens.diagnosis.logread.end.completion import end_of_attempt
from gpulens.diagnosis.logread.end.completion_messages import completion_strength
from gpulens.diagnosis.logread.end.handler_stops import check_failures


@pytest.fixture(scope="module")
def clf() -> Classifier:
    return default_classifier()


def _steps(n: int) -> list[str]:
    return [f"Epoch 1/5 step {k}/200 loss 0.{90 - k}" for k in range(1, n + 1)]


_FRAMES = ["    @     0x7f0a1b2c3d40  absl::log_internal::LogMessage::SendToLog()",
           "    @     0x7f0a1b2c3e50  absl::log_internal::LogMessageFatal::~LogMessageFatal()",
           "    @     0x7f0a1b2c4f60  tensorflow::EventMgr::PollLoop()",
           "    @     0x7f0a1b2c5a70  start_thread"]


def test_an_abseil_fatal_message_with_no_error_word_ends_the_run(clf: Classifier) -> None:
    lines = [*_steps(12), "F0000 00:00:1712345678.123456 4242 device_event_mgr.cc:226] Unexpected Event status: 1",
             "*** Check failure stack trace: ***", *_FRAMES]
    assert check_failures(lines, 0) == [12]
    w = diagnose_text("\n".join(lines), clf)
    assert w.diagnosis.category != "none"


def test_a_glog_check_failure_behind_an_srun_prefix_is_found() -> None:
    lines = ["0: I0617 14:30:40.100000 77 caffe.cpp:218] Using GPUs 0",
             "0: F0617 14:30:47.707742 77 common.cpp:66] Check mode: cannot use GPU here.",
             "0: *** Check failure stack trace: ***", *[f"0: {f}" for f in _FRAMES]]
    assert check_failures(lines, 0) == [1]


def test_a_check_failure_header_without_its_message_is_itself_the_line() -> None:
    lines = ["some output", "more output", "*** Check failure stack trace: ***", *_FRAMES]
    assert check_failures(lines, 0) == [2]


def test_a_logged_load_state_dict_error_at_the_end_is_not_a_normal_end(clf: Classifier) -> None:
    lines = [*[f"Epoch {e} saved best model | acc: 9{e}.1%" for e in range(1, 4)], "[5/6] converting to int8 ...",
             "int8 conversion failed: Error(s) in loading state_dict for QuantNet:",
             '\tMissing key(s) in state_dict: "bn1.weight", "bn1.bias", "bn1.running_mean", "layer1.0.bn1.weight".',
             '\tUnexpected key(s) in state_dict: "conv1.bn.weight", "conv1.bn.running_mean", "conv1.scale_0".']
    end = end_of_attempt(lines, 0)
    assert end is not None and end.stopped and end.index == 4
    w = diagnose_text("\n".join(lines), clf)
    assert w.diagnosis.category != "none" and w.indicator_lines == [5]


def test_a_final_results_line_still_ends_a_run_normally(clf: Classifier) -> None:
    lines = [*[f"Epoch {e} saved best model | acc: 9{e}.1%" for e in range(1, 4)], "[5/6] converting to int8 ...",
             "int8 model test accuracy: 93.85%"]
    end = end_of_attempt(lines, 0)
    assert end is None or not end.stopped
    assert diagnose_text("\n".join(lines), clf).diagnosis.category == "none"


def _wandb_exit() -> list[str]:
    return ["Testing done.", "wandb: Run summary:", "wandb:     test_acc 0.91427",
            "wandb: 🚀 View run brisk-sun-7 at: https://wandb.ai/u/p/runs/abc123",
            "wandb: Synced 6 W&B file(s), 0 media file(s), 0 artifact file(s) and 0 other file(s)",
            "wandb: Find logs at: ./wandb/run-20250331_030315-abc123/logs"]


def _thread_broken_pipe(name: str) -> list[str]:
    return [f"Exception in thread {name}:", "Traceback (most recent call last):",
            '  File "/opt/py/lib/python3.9/threading.py", line 973, in _bootstrap_inner',
            "    self.run()",
            '  File "/opt/py/site-packages/wandb/sdk/lib/sock_client.py", line 130, in _sendall_with_error_handle',
            "    sent = self._sock.send(data)",
            "BrokenPipeError: [Errno 32] Broken pipe"]


def test_a_trackers_threads_losing_their_pipe_after_its_summary_is_a_normal_end(clf: Classifier) -> None:
    lines = [*_steps(12), *_wandb_exit(), *_thread_broken_pipe("NetStatThr"), *_thread_broken_pipe("IntMsgThr")]
    w = diagnose_text("\n".join(lines), clf)
    assert w.diagnosis.category == "none"


def test_a_crash_before_the_trackers_summary_stays_a_failure(clf: Classifier) -> None:
    lines = [*_steps(12), "Traceback (most recent call last):", '  File "train.py", line 88, in <module>',
             "    main()", "ValueError: too many values to unpack (expected 2)", *_wandb_exit()[1:],
             *_thread_broken_pipe("NetStatThr")]
    w = diagnose_text("\n".join(lines), clf)
    assert w.diagnosis.category != "none"


def test_wandbs_header_at_init_is_no_completion(clf: Classifier) -> None:
    lines = ["wandb: Tracking run with wandb version 0.19.1",
             "wandb: 🚀 View run at https://wandb.ai/team/proj/runs/gfjb12", *_steps(12),
             "Validation DataLoader 0:  40%|████      | 8/20 [00:03<00:05,  2.31it/s]",
             "Traceback (most recent call last):",
             '  File "/opt/py/site-packages/torch/utils/data/_utils/signal_handling.py", line 73, in handler',
             "    _error_if_any_worker_fails()",
             "RuntimeError: DataLoader worker (pid 71096) is killed by signal: Segmentation fault."]
    assert completion_strength("wandb: 🚀 View run at https://wandb.ai/team/proj/runs/gfjb12") == 0
    assert completion_strength("wandb: 🚀 View run brisk-sun-7 at: https://wandb.ai/team/proj/runs/gfjb12") > 0
    w = diagnose_text("\n".join(lines), clf)
    assert w.diagnosis.category != "none"


@pytest.mark.parametrize("line", [
    "I0412 10:11:12.345000 4100 torch/distributed/elastic/agent/server/api.py:879] [default] worker group successfully "
    "finished. Waiting 300 seconds for other agents to finish.",
    "INFO:torch.distributed.elastic.agent.server.api:Local worker group finished (SUCCEEDED). Waiting 300 seconds for "
    "other agents to finish",
    "✓ Job finished (status: SUCCEEDED).",
    "Job finished (status: ManagedJobStatus.SUCCEEDED).",
])
def test_a_launchers_report_of_a_zero_exit_is_a_completion(line: str) -> None:
    assert completion_strength(line) >= 0.95


@pytest.mark.parametrize("line", [
    "[default] worker group failed. Waiting 300 seconds for other agents",
    "Job finished (status: FAILED).",
])
def test_a_launchers_report_of_a_failed_exit_is_no_completion(line: str) -> None:
    assert completion_strength(line) < 0.95


def test_torchruns_success_line_after_the_last_step_is_a_normal_end(clf: Classifier) -> None:
    lines = [*_steps(12), "I0412 10:11:12.345000 4100 torch/distributed/elastic/agent/server/api.py:879] [default] worker group "
             "successfully finished. Waiting 300 seconds for other agents to finish."]
    w = diagnose_text("\n".join(lines), clf)
    assert w.diagnosis.category == "none" and w.diagnosis.confidence >= 0.9


@pytest.mark.parametrize("last", [
    ["Test Mean Absolute Error: 0.1234", "Test Root Mean Squared Error: 0.2345"],
    ["Final Error Rate: 3.2%"],
    ["Top-1 test error: 4.12%"],
])
def test_a_metric_named_for_an_error_is_a_result_not_an_error_message(clf: Classifier, last: list[str]) -> None:
    lines = [*[f"epoch {e}: train_loss=0.{50 - e} val_acc=0.{80 + e}" for e in range(10)], *last]
    end = end_of_attempt(lines, 0)
    assert end is not None and not end.stopped
    assert diagnose_text("\n".join(lines), clf).diagnosis.category == "none"


@pytest.mark.parametrize("line", [
    "Early stopping patience: 20",
    "early_stopping_patience = 5",
    "  early stopping min_delta: 0.001",
    "EarlyStopping monitor: val_loss",
])
def test_an_early_stopping_setting_printed_with_the_config_is_no_completion(line: str) -> None:
    # the setting (Keras EarlyStopping(patience, min_delta, monitor), HF EarlyStoppingCallback(early_stopping_patience))
    # is printed before training; only the stop itself ends the run
    assert completion_strength(line) == 0.0


def test_an_early_stop_itself_is_still_a_completion() -> None:
    assert completion_strength("Early stopping triggered at epoch 14") > 0
    assert completion_strength("Epoch 00014: early stopping") > 0


def test_a_run_cut_off_after_printing_its_early_stopping_setting_is_not_healthy(rules: Classifier) -> None:
    log = ["Config:", "  lr: 0.001", "  Early stopping patience: 20", "  epochs: 100",
           *(f"Epoch {k}/100 - loss: 0.{90 - k} - val_loss: 0.{95 - k}" for k in range(1, 12)),
           "Epoch 12/100 - loss: 0.78", "Early stopping patience: 20"]
    w = diagnose_text("\n".join(log), rules)
    assert w.diagnosis.category != "none"
