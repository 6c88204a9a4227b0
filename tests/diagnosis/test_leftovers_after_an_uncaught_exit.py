"""After a traceback the interpreter printed as it exited, the same run's leftover output (lines of the
shape it printed just above the traceback: DataLoader workers' per-sample prints, a repeated warning
flushed late) neither starts a new attempt nor enters the error context the classifier reads."""

from __future__ import annotations

import pytest

from gpulens.diagnosis.classifier import Classifier, default_classifier
from gpulens.diagnosis.logread import diagnose_text
from gpulens.diagnosis.logread.attempts import attempt_starts
from gpulens.diagnosis.logread.lines import line_shape, shapes_above


@pytest.fixture(scope="module")
def clf() -> Classifier:
    return default_classifier()


def _run(steps: int) -> list[str]:
    out = ["2024-09-14 21:40:23,661   INFO  Start logging", "2024-09-14 21:40:23,662   INFO  cfg_file voxel_rcnn.yaml"]
    for i in range(steps):
        out += [f"Frame :  {4000 + 37 * i:06d}", "", f"hm_loss:{3.4 - i / 100:.4f} = 20*hm_loss_N/2", ""]
    return out


_INTERRUPT = ["Traceback (most recent call last):",
              '  File "tools/train.py", line 274, in <module>',
              "    main()",
              '  File "/data1/al/pcdet/utils/box_coder_utils.py", line 42, in encode_torch',
              "    diagonal = torch.sqrt(dxa ** 2 + dya ** 2)",
              "KeyboardInterrupt"]


def _workers_going_on(count: int) -> list[str]:
    out: list[str] = []
    for i in range(count):
        out += ["", f"Frame :  {(i * 7919) % 5000:06d}"]
    return out


def test_line_shape_masks_numbers_and_shapes_above_skip_blank_lines() -> None:
    assert line_shape("Frame :  004540") == line_shape("Frame :  000014") == "Frame :  N"
    lines = ["a 1", "", "b 0x1f", "", "", "c"]
    assert shapes_above(lines, 5, 2) == {"b N", "a N"}


def test_workers_printing_after_an_interrupt_are_no_new_attempt() -> None:
    lines = _run(40) + _INTERRUPT + _workers_going_on(300)
    assert attempt_starts(lines) == [0]


def test_a_new_launch_after_an_interrupt_is_still_an_attempt() -> None:
    lines = _run(40) + _INTERRUPT + ["", "Starting training run 2 on host gpu07"] + _run(10)
    assert len(attempt_starts(lines)) == 2


def test_an_interrupt_followed_by_hundreds_of_worker_prints_is_the_interrupt(clf: Classifier) -> None:
    w = diagnose_text("\n".join(_run(40) + _INTERRUPT + _workers_going_on(900)) + "\n", clf)
    assert (w.diagnosis.category, w.diagnosis.origin) == ("preempted", "user")
    assert w.indicator_lines == [len(_run(40)) + len(_INTERRUPT)]


def test_an_error_printed_many_times_before_and_once_after_the_exit_is_not_its_cause(clf: Classifier) -> None:
    warn = ("OpenCV(3.4.4) /io/opencv/modules/imgproc/src/resize.cpp:3784: error: (-215:Assertion failed) "
            "!ssize.empty() in function 'resize'")
    before: list[str] = ["Started Training..."]
    for i in range(12):
        before += [warn, "", f"('Image Not Available: ', u'dataset/train/_00{500 + i}_RIGHT_CC.png')"]
    tb = ["Traceback (most recent call last):", '  File "model_d/train.py", line 79, in <module>',
          "    train_y = array_target_test[j]", "IndexError: list index out of range", warn, ""]
    d = diagnose_text("\n".join(before + tb) + "\n", clf).diagnosis
    assert d.category == "semantic_error"
