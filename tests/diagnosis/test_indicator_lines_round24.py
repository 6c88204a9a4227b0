"""Indicator lines (README "Indicator lines: rules" R1-R9) of formats the reader misread in round 24,
each excerpt written by hand in the format the library or launcher prints."""

from __future__ import annotations

from gpulens.diagnosis.classifier import Classifier
from tests.diagnosis.test_indicator_formats import _CAUSE, _picked, _tb

#: transformers' cached_file message for a gated repo, embedding huggingface_hub's (blank line included)
_GATED = ["You are trying to access a gated repo.", "Make sure to have access to it at https://huggingface.co/org/m.",
          "401 Client Error. (Request ID: Root=1-abc)", "",
          "Cannot access gated repo for url https://huggingface.co/org/m/resolve/main/config.json.",
          "Access to model org/m is restricted. You must have access to it and be authenticated to access it."]


def test_a_logged_message_of_several_lines_heading_its_traceback_is_not_the_error(rules: Classifier) -> None:
    # logging.Formatter.format: the record's message (several lines, a blank one among them), then the
    # exc_info traceback; the chain's first and last exception lines are the error (R3, R4), not the
    # record heading it nor a later line of its message
    lines = (["2025-05-01 23:52:51,586 - INFO - Loading model: org/m",
              "2025-05-01 23:52:54,176 - ERROR - Failed to load model org/m: " + _GATED[0]] + _GATED[1:]
             + _tb("requests.exceptions.HTTPError: 401 Client Error: Unauthorized for url: "
                   "https://huggingface.co/org/m/resolve/main/config.json") + _CAUSE
             + _tb("OSError: " + _GATED[0]) + _GATED[1:])
    assert _picked(lines, rules) == [
        "requests.exceptions.HTTPError: 401 Client Error: Unauthorized for url: "
        "https://huggingface.co/org/m/resolve/main/config.json", "OSError: " + _GATED[0]]


def test_the_tab_indented_lines_of_a_state_dict_error_are_its_message(rules: Classifier) -> None:
    # torch Module.load_state_dict joins its errors with "\n\t" under "Error(s) in loading state_dict for X:";
    # the last "size mismatch" line is a later line of that message, not an error of its own (R3)
    sizes = [f"\tsize mismatch for net.{k}.conv.weight: copying a param with shape torch.Size([512, 128, 3]) "
             "from checkpoint, the shape in current model is torch.Size([128, 512, 3])." for k in range(40)]
    lines = (["[2023-12-12 22:40:48,793][solver][INFO] - Loading checkpoint model: checkpoint.th",
              "[2023-12-12 22:40:49,379][__main__][ERROR] - Some error happened"]
             + _tb("RuntimeError: Error(s) in loading state_dict for ConvTasNet:", "/env/torch/nn/modules/module.py")
             + ['\tMissing key(s) in state_dict: "net.0.conv.bias", "net.1.conv.bias".'] + sizes)
    assert _picked(lines, rules) == ["RuntimeError: Error(s) in loading state_dict for ConvTasNet:"]


def _module_tb(line: int, exc: str, inner: str = "") -> list[str]:
    frames = [f'  File "{inner}", line 33, in load', "    raise NotImplementedError"] if inner else []
    return ["Traceback (most recent call last):", f'  File "train_final.py", line {line}, in <module>',
            "    trainer.run()"] + frames + [exc]


def test_a_script_failing_again_at_another_module_statement_is_another_run(rules: Classifier) -> None:
    # each uncaught exception through the script's <module> frame ended its interpreter: a later traceback
    # through the same script's module code at another statement is a new run (R1: the last run's error only)
    lines = (_module_tb(63, "AttributeError: 'Trainer' object has no attribute 'load_checkpoint'")
             + _module_tb(64, "NotImplementedError", "/srv/amp/dataset.py")
             + ["Computing fingerprints: 100%|##########| 360/360 [00:05<00:00, 70.1it/s]"]
             + _module_tb(75, "_tkinter.TclError: no display name and no $DISPLAY environment variable"))
    assert _picked(lines, rules) == ["_tkinter.TclError: no display name and no $DISPLAY environment variable"]


def test_a_native_error_record_the_program_went_on_from_is_not_the_root(rules: Classifier) -> None:
    # TensorFlow logs "failed call to cuInit" at E severity (tsl logging.cc "%s.%06d: %c %s:%d] %s") and runs on
    # the CPU: data loading, a summary and the first epoch follow; the later uncaught exception ended the run (R1)
    lines = (["2023-11-01 14:28:34.240756: E tensorflow/compiler/xla/stream_executor/cuda/cuda_driver.cc:268] "
              "failed call to cuInit: CUDA_ERROR_NO_DEVICE: no CUDA-capable device is detected", "Loading data"]
             + [f"Data Tensor {k} Shape: (736, 128, 64)" for k in range(1, 12)] + ["Start training", "Epoch 1/10"]
             + _tb("ValueError: Input 0 of layer \"model\" is incompatible with the layer: expected shape=(None, 608, 128), "
                   "found shape=(608, 128)"))
    assert _picked(lines, rules) == [lines[-1]]
