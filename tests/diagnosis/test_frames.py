"""The origin convention's evidence: where the failing frame of a crash / CUDA error is."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpulens.diagnosis.frames import fault_frame, fault_frame_of_file
from gpulens.ingest.simulate.logs import FRAME_TEMPLATES

SITE = "/opt/conda/envs/t/lib/python3.11/site-packages"
STDLIB = "/opt/conda/envs/t/lib/python3.11"


@pytest.mark.parametrize(
    ("text", "want"),
    [
        # Python traceback: the innermost frame is listed last
        ('Traceback (most recent call last):\n  File "/home/a/train.py", line 3, in <module>\n'
         f'  File "{SITE}/torch/nn/functional.py", line 9, in linear\nRuntimeError: CUDA error: x\n', "framework"),
        (f'Traceback (most recent call last):\n  File "{SITE}/torch/run.py", line 3, in main\n'
         '  File "/home/a/ops/kernel.py", line 9, in launch\nRuntimeError: CUDA error: x\n', "user_code"),
        # standard-library frames are skipped (ctypes called from the user's file)
        ('Fatal Python error: Segmentation fault\n\nCurrent thread 0x1 (most recent call first):\n'
         f'  File "{STDLIB}/ctypes/__init__.py", line 519 in string_at\n'
         '  File "/home/a/train.py", line 22 in <module>\n\nSegmentation fault\n', "user_code"),
        # faulthandler lists the innermost first; the other threads' stacks come before
        ('Thread 0x2 (most recent call first):\n  File "/home/a/loader.py", line 1 in run\n\n'
         'Current thread 0x1 (most recent call first):\n'
         f'  File "{SITE}/torch/nn/modules/conv.py", line 456 in _conv_forward\n'
         '  File "/home/a/train.py", line 88 in forward\n\n', "framework"),
        # torchrun rank prefixes
        ('[rank1]: Traceback (most recent call last):\n[rank1]:   File "/home/a/t.py", line 5, in <module>\n'
         '[rank1]: RuntimeError: CUDA error: misaligned address\n', "user_code"),
        # a framework's internal assert wins over any frame
        ('Traceback (most recent call last):\n  File "/home/a/t.py", line 5, in <module>\n'
         'RuntimeError: t == DeviceType::CUDA INTERNAL ASSERT FAILED at "../c10/cuda/impl/CUDAGuardImpl.h":28, '
         'please report a bug to PyTorch.\n', "framework"),
        ("terminate called after throwing an instance of 'c10::Error'\n  what():  CUDA error\nAborted\n", "framework"),
        ("F1122 02:19:36.353 20776 gpu_util.cc:48] Check failed: status.ok()\n", "framework"),
        # no stack to read
        ("/job/run.sh: line 12: 4821 Segmentation fault (core dumped) python train.py\n", None),
        ("", None),
    ],
)
def test_fault_frame(text: str, want: str | None) -> None:
    assert fault_frame(text) == want


def test_the_simulators_templates_show_the_frame_they_are_filed_under(tmp_path: Path) -> None:
    for (_cat, frame), bodies in FRAME_TEMPLATES.items():
        for body in bodies:
            log = tmp_path / "x.log"
            log.write_text("INFO launcher: job j attempt 0\n" + body.replace("{user}", "u001"))
            assert fault_frame_of_file(log) == frame, body
    assert fault_frame_of_file(tmp_path / "missing.log") is None
