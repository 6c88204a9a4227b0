"""Round 26: one reader of a traceback's closing exception line and one of its outermost frame, which
diedbefore, uncaught, after_error and runs each wrote out before (stop 45's note, "not mended")."""
from __future__ import annotations

import ast

from gpulens.diagnosis.logread.tracebacks import exception_line, outer_frame
from tests.diagnosis.logread_structure import module_file

_RAY = ["(TrainWorker pid=812, ip=10.0.0.4) Traceback (most recent call last):",
        '(TrainWorker pid=812, ip=10.0.0.4)   File "/app/train.py", line 40, in step',
        "(TrainWorker pid=812, ip=10.0.0.4)     loss.backward()",
        "(TrainWorker pid=812, ip=10.0.0.4) RuntimeError: CUDA error: an illegal memory access was encountered"]


def test_exception_line_behind_ray_and_rank_prefixes() -> None:
    assert exception_line(_RAY, 0, len(_RAY)) == 3  # Ray's prefix is read off too, not only a rank's
    ranked = ["[rank1]: Traceback (most recent call last):", '[rank1]:   File "t.py", line 9, in <module>',
              "[rank1]:     main()", "", "[rank1]: ValueError: bad shape"]
    assert exception_line(ranked, 0, len(ranked)) == 4
    assert exception_line(ranked, 0, 4) is None  # stop before it: none


def test_exception_line_skips_a_frame_printed_without_indentation() -> None:
    flat = ["Traceback (most recent call last):", 'File "t.py", line 9, in <module>', "KeyError: 'x'"]
    assert exception_line(flat, 0, 3) == 2


def test_outer_frame_is_the_first_frame_below_the_head() -> None:
    assert outer_frame(_RAY, 0, 3) == 1
    assert outer_frame(["Traceback (most recent call last):", "  no frame here", "OSError: x"], 0, 2) is None


def test_the_callers_no_longer_walk_a_traceback_themselves() -> None:
    for stem, func in (("diedbefore", "_closing_line"), ("uncaught", "ending_exception"),
                       ("after_error", "printed_and_went_on"), ("runs", "_outer_frame")):
        tree = ast.parse(module_file(stem).read_text())
        body = next(f for f in ast.walk(tree) if isinstance(f, ast.FunctionDef) and f.name == func)
        calls = {n.func.id for n in ast.walk(body) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
        assert calls & {"exception_line", "outer_frame"}, (stem, func)
        assert not any(isinstance(n, ast.For) for n in ast.walk(body)) or stem == "after_error", (stem, func)
