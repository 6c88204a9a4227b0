"""Round 26: the story cites the line that names the first failing node when no indicator line does, so an
operator can check the node as well as the error."""
from __future__ import annotations

from gpulens.diagnosis.classifier import Classifier
from gpulens.diagnosis.logread.indicators.failing import node_line
from gpulens.diagnosis.logread.whole import diagnose_text


def test_node_named_by_a_report_after_the_error_is_cited(rules: Classifier) -> None:
    text = "\n".join([
        "0: [rank0]: step 40 loss 1.2", "1: [rank1]: step 40 loss 1.3",
        "1: [rank1]: Traceback (most recent call last):", '1: [rank1]:   File "train.py", line 9, in <module>',
        "1: [rank1]: ValueError: shapes (4,3) and (2,2) not aligned",
        "srun: error: gpu-b9-5: task 1: Exited with exit code 1"]) + "\n"
    w = diagnose_text(text, rules)
    assert (w.first_rank, w.first_node) == (1, "gpu-b9-5")
    assert w.first_node_line == 6 and "rank 1 on gpu-b9-5 (named on line 6) failed first" in w.story()
    assert w.to_dict()["first_node_line"] == 6


def test_no_citation_when_an_indicator_line_names_the_node() -> None:
    lines = ["host gpu07 up", "step 3", "slurmstepd: error: *** JOB 5 ON gpu07 CANCELLED AT 2025-01-01T00:00:00 "
             "DUE TO TIME LIMIT ***"]
    assert node_line(lines, "gpu07", [2], 0) is None
    assert node_line(lines, "gpu07", [1], 0) == 2  # a report after the error comes first
    assert node_line(lines[:2], "gpu07", [1], 0) == 0  # else the last line before it (a banner)
    assert node_line(lines, "gpu99", [1], 0) is None
