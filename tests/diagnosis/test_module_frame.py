"""One reading of a traceback's module-level and top-level frames (tracebacks.module_frame, top_frame), which
the attempt splitter (attempts), the run splitter (runs) and the uncaught-exit test (uncaught) use."""

from __future__ import annotations

from gpulens.diagnosis.logread.tracebacks import frame_parts, module_frame, top_frame


def test_a_scripts_top_level_frame_names_its_file_and_line() -> None:
    assert module_frame('  File "train.py", line 63, in <module>') == ("train.py", "63")
    assert module_frame('[rank3]:   File "/w/train.py", line 7, in <module>') == ("/w/train.py", "7")
    assert module_frame('  File "train.py", line 63, in <module>\r') == ("train.py", "63")


def test_other_frames_and_lines_are_not_module_code() -> None:
    assert module_frame('  File "train.py", line 40, in main') is None
    assert module_frame("    main()") is None
    assert module_frame("Traceback (most recent call last):") is None


def test_the_top_level_is_module_code_or_runpys_main() -> None:
    assert top_frame('  File "train.py", line 63, in <module>')
    assert top_frame('  File "/usr/lib/python3.11/runpy.py", line 198, in _run_module_as_main')
    assert top_frame('[rank0]:   File "train.py", line 63, in <module>')
    assert not top_frame('  File "/usr/lib/python3.11/runpy.py", line 88, in _run_code')
    assert not top_frame('  File "train.py", line 40, in main')


def test_a_frame_names_its_file_line_and_function() -> None:
    assert frame_parts('  File "/opt/x/data.py", line 12, in __getitem__') == ("/opt/x/data.py", "12", "__getitem__")
    # loguru marks the frame that caught the exception it logs with ">"
    assert frame_parts('> File "main.py", line 86, in main') == ("main.py", "86", "main")
    assert frame_parts("    return self.data[idx]") is None
