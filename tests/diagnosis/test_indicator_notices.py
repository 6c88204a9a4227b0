"""Indicator lines (README rules R2, R3, R6) around lines that look like errors but are not the one
that ended the run: the NCCL watchdog's abort of its process, pip's conflict notice, TensorFlow's
warnings and its summary of several errors. Excerpts written by hand in the shape each tool prints
(torch's ProcessGroupNCCL and faulthandler, pip 20.2's legacy resolver, TensorFlow's logging.cc and
StatusGroup)."""

from __future__ import annotations

import pytest

from gpulens.diagnosis.classifier import Classifier
from gpulens.diagnosis.logread.indicators.rooterror import is_root_error
from tests.diagnosis.test_indicator_formats import _picked

_TIMEOUT = ("[rank1]:[E1127 04:10:51.425 ProcessGroupNCCL.cpp:688] [Rank 1] Watchdog caught collective operation "
            "timeout: WorkNCCL(SeqNum=812, OpType=ALLGATHER, NumelIn=64, NumelOut=128, Timeout(ms)=600000) ran for "
            "600013 milliseconds before timing out.")


def _watchdog_abort() -> list[str]:
    return [*(f"[rank{r}]:step 40 loss 2.{r}1" for r in (0, 1)), _TIMEOUT,
            "[rank1]:[E1127 04:11:51.4 ProcessGroupNCCL.cpp:763] [Rank 1] To avoid data inconsistency, we are taking "
            "the entire process down.",
            "[rank1]:terminate called after throwing an instance of 'c10::DistBackendError'",
            "[rank1]:  what():  [PG ID 0 Rank 1] Process group watchdog thread terminated with exception: [Rank 1] "
            "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=812, OpType=ALLGATHER)",
            "[rank1]:Exception raised from checkTimeout at ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:691 "
            "(most recent call first):",
            "[rank1]:frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x9d (0x7f01 in libc10.so)",
            "[rank1]:", "[rank1]:Fatal Python error: Aborted", "[rank1]:",
            "[rank1]:Thread 0x00007f0a1c3f4740 (most recent call first):",
            '[rank1]:  File "/srv/train.py", line 88 in train_step']


def test_the_watchdog_s_timeout_is_the_cause_not_the_abort_it_causes(rules: Classifier) -> None:
    # R6: the first rank's "Watchdog caught collective operation timeout"; the terminate/abort it
    # causes ("Fatal Python error: Aborted") names no error of its own
    assert _picked(_watchdog_abort(), rules) == [_TIMEOUT]


def test_an_abort_with_no_timeout_before_it_stays_the_cause_line(rules: Classifier) -> None:
    lines = [f"step {k} loss 1.{k}" for k in range(20)] + ["Fatal Python error: Aborted", "",
                                                           "Current thread 0x00007f0a1c3f4740 (most recent call first):"]
    assert _picked(lines, rules) == ["Fatal Python error: Aborted"]


_PIP_2020 = ("ERROR: After October 2020 you may experience errors when installing or updating packages. This is "
             "because pip will change the way that it resolves dependency conflicts.")


def test_pip_s_legacy_conflict_notice_is_not_the_error(rules: Classifier) -> None:
    # pip 20.2 logs it at CRITICAL ("ERROR: ") after installing, then exits 0: R2, not the failure
    assert not is_root_error(_PIP_2020)
    lines = ["Installing collected packages: torch-scatter", _PIP_2020, "",
             "We recommend you use --use-feature=2020-resolver to test your packages with the new resolver before "
             "it becomes the default.", "",
             "torch-geometric 1.6.1 requires torch-sparse, which is not installed.",
             "Successfully installed torch-scatter-2.0.5", "Traceback (most recent call last):",
             '  File "main.py", line 3, in <module>', "    import torch_scatter",
             "OSError: /env/lib/python3.7/site-packages/torch_scatter/_version.so: undefined symbol: _ZN3c105ErrorC1E"]
    assert _picked(lines, rules) == [lines[-1]]


_TF_WARN = ("2024-02-11 09:14:18.124573: W tensorflow/core/framework/op_kernel.cc:1745] OP_REQUIRES failed at "
            "conv_ops.cc:684 : Resource exhausted: OOM when allocating tensor with shape[64,256,128,128] and type float "
            "on /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc")
_TF_OOM = "tensorflow.python.framework.errors_impl.ResourceExhaustedError: 2 root error(s) found."


def _tf_oom() -> list[str]:
    item = ("Resource exhausted:  OOM when allocating tensor with shape[64,256,128,128] and type float on "
            "/job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc")
    return ["Epoch 1/50", "2024-02-11 09:14:08.512: I tensorflow/stream_executor/cuda/cuda_dnn.cc:369] Loaded cuDNN "
            "version 8100", _TF_WARN, "Traceback (most recent call last):", '  File "fit.py", line 61, in <module>',
            "    model.fit(ds, epochs=50)", _TF_OOM, f"  (0) {item}",
            "\t [[node model/conv2d_3/Conv2D (defined at fit.py:40) ]]",
            "Hint: If you want to see a list of allocated tensors when OOM happens, add "
            "report_tensor_allocations_upon_oom to RunOptions for current allocation info.", "",
            "\t [[div_no_nan/ReadVariableOp/_20]]", "", f"  (1) {item}",
            "\t [[node model/conv2d_3/Conv2D (defined at fit.py:40) ]]", "", "0 successful operations.",
            "0 derived errors ignored. [Op:__inference_train_function_2310]", "", "Function call stack:",
            "train_function -> train_function"]


def test_tensorflow_s_warning_before_the_failure_is_not_the_error(rules: Classifier) -> None:
    # R2: TensorFlow's W-severity log line ("%s.%06d: %c %s:%d] %s" with "IWEF") is a warning
    assert not is_root_error(": W tensorflow/core/framework/op_kernel.cc:1745] OP_REQUIRES failed at x : Resource "
                             "exhausted: OOM")
    assert is_root_error(": E tensorflow/stream_executor/cuda/cuda_driver.cc:328] failed call to cuInit: "
                         "CUDA_ERROR_NO_DEVICE")
    assert _TF_WARN not in _picked(_tf_oom(), rules)


def test_tensorflow_s_numbered_errors_are_lines_of_its_summary_message(rules: Classifier) -> None:
    # R3: "N root error(s) found." heads one message; its "(k) ..." errors are later lines of it
    assert _picked(_tf_oom(), rules) == [_TF_OOM]


_LOGGED = "2024-05-01 10:00:01,123 - __main__ - ERROR - Checkpoint directory /ckpt/run7 is not writable, aborting"
_LOGURU = ("2024-05-01 10:00:01.123 | ERROR    | __main__:main:88 - Dataset /data/train.jsonl is empty, nothing "
           "to train on")


@pytest.mark.parametrize("error", [_LOGGED, _LOGURU])
def test_an_error_a_logger_printed_without_a_traceback_beats_srun_s_verdict(error: str, rules: Classifier) -> None:
    # R3 (no traceback: the first line that states the error), R8 (srun's exit line only when the
    # process showed no error): logging's cookbook format and loguru's default put the level
    # between the timestamp and the message
    lines = [f"2024-05-01 09:{k:02d}:00,000 - __main__ - INFO - epoch 1 step {k} loss 0.{k}" for k in range(10, 30)]
    lines += [error, "srun: error: gpu07: task 0: Exited with exit code 1"]
    assert _picked(lines, rules) == [error]


def test_an_info_line_of_the_same_format_is_not_an_error() -> None:
    from gpulens.diagnosis.logread.lines import has_error_level
    assert has_error_level(_LOGGED) and has_error_level(_LOGURU)
    assert not has_error_level("2024-05-01 10:00:01,123 - __main__ - INFO - ERROR rate 0.1 on the eval set")
    assert not has_error_level("2024-05-01 10:00:01.123 | INFO     | eval:run:12 - 0 ERROR | 12 ok")


@pytest.mark.parametrize("report", ["Exit code: 1", "Error executing the epilogue: exit 1"])
def test_a_job_script_s_exit_report_is_not_an_exception_line(report: str, rules: Classifier) -> None:
    # R8: the job script's report of the exit status after the traceback is not labelled; an
    # exception line is "Type: message" or the type alone (traceback.format_exception_only), not
    # a sentence starting with "Exit" or "Error"
    lines = [f"epoch 1 step {k} loss 0.{k}" for k in range(40, 52)]
    lines += ["Traceback (most recent call last):", '  File "/srv/train.py", line 10, in <module>', "    main()",
              "ValueError: could not broadcast input array from shape (3,224,224) into shape (3,256,256)", report]
    assert _picked(lines, rules) == [lines[-2]]


def test_sacred_s_failure_message_heads_its_filtered_traceback(rules: Classifier) -> None:
    # Sacred logs "Failed after ...!" at ERROR level, then prints the traceback under its own head
    # ("Traceback (most recent calls WITHOUT Sacred internals):"): R2/R3, the exception line is the
    # error, the logger's message that heads it is not
    lines = [f"INFO:train:epoch {k} val_acc 0.{k}" for k in range(10, 30)]
    lines += ["ERROR:train:Failed after 0:04:12!", "Traceback (most recent calls WITHOUT Sacred internals):",
              '  File "train.py", line 67, in run', "    results = experiment.run()",
              '  File "/srv/gpn/data/split.py", line 24, in split', "    n = dataset.data.y.size(0)",
              "AttributeError: 'NoneType' object has no attribute 'size'", ""]
    assert _picked(lines, rules) == [lines[-2]]
