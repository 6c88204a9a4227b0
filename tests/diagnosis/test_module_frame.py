"""One reading of a traceback's module-level frame (tracebacks.module_frame), which the attempt splitter
(attempts) and the run splitter (runs) both use."""

from __future__ import annotations

from gpulens.diagnosis.logread.tracebacks import module_frame


def test_a_scripts_top_level_frame_names_its_file_and_line() -> None:
    assert module_frame('  File "train.py", line 63, in <module>') == ("train.py", "63")
    assert module_frame('[rank3]:   File "/w/train.py", line 7, in <module>') == ("/w/train.py", "7")
    assert module_frame('  File "train.py", line 63, in <module>\r') == ("train.py", "63")


def test_other_frames_and_lines_are_not_module_code() -> None:
    assert module_frame('  File "train.py", line 40, in main') is None
    assert module_frame("    main()") is None
    assert module_frame("Traceback (most recent call last):") is None
