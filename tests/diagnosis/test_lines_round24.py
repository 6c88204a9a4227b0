"""Round 24: the capitalised word "Iteration" marks a progress line as "iteration" does ("Iteration 31/208 | loss
2.1", "Iteration 7 took 3.2s"); "Iterations:" (a setting's name) does not."""

from __future__ import annotations

from gpulens.diagnosis.logread.lines import is_progress


def test_a_capitalised_iteration_is_a_progress_word() -> None:
    assert is_progress("Iteration 31/208 | lr 0.0003 | tokens/s 18200")
    assert is_progress("Iteration 7 took 3.2s")
    assert not is_progress("Iterations: 4")
    assert not is_progress("Iterationless run")
