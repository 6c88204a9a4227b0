"""scripts/label_agreement.py: a second labeller scored against the index the way the
evaluation scores gpulens (issue 23), on small label rows written for the test."""

from __future__ import annotations

import pytest

from scripts import label_agreement as la

BASE = {"file": "x/a.log", "project": "o/a", "split": "dev", "ended_normally": "no", "category": "gpu_oom",
        "origin": "user", "first_rank": "3", "first_node": "gpu07", "indicator_lines": "120 121",
        "phase": "training", "step": "400"}


def _rows() -> list[dict[str, str]]:
    ok = {**BASE, "file": "x/b.log", "project": "o/b", "ended_normally": "yes", "category": "none",
          "origin": "none", "first_rank": "", "first_node": "", "indicator_lines": "", "phase": "none"}
    return [dict(BASE), ok]


def test_identical_labels_agree_on_every_figure() -> None:
    f = la.agreement(_rows(), _rows())
    assert f.healthy_accuracy == (2, 2) and f.category_accuracy == (2, 2) and f.origin_accuracy == (2, 2)
    assert f.line_f1 == pytest.approx(1.0) and f.first_rank_node == (1, 1) and f.phase_accuracy == (1, 1)


def test_a_second_labeller_who_picks_other_lines_and_another_rank_is_scored_down() -> None:
    second = _rows()
    second[0].update(indicator_lines="118 140", first_rank="5", phase="evaluation", category="cuda_error")
    f = la.agreement(_rows(), second)
    assert f.line_precision == (1, 2) and f.line_recall == (1, 2)  # 118 is within 2 lines of 120, not of 121
    assert f.first_rank_node == (0, 1) and f.phase_accuracy == (0, 1) and f.category_accuracy == (1, 2)


def test_rows_the_index_does_not_hold_are_left_out() -> None:
    second = [*_rows(), {**BASE, "file": "x/unknown.log"}]
    assert la.agreement(_rows(), second).n == 2


def test_kappa_is_one_for_full_agreement_and_zero_at_chance() -> None:
    assert la.kappa([("a", "a"), ("b", "b")]) == pytest.approx(1.0)
    assert la.kappa([("a", "a"), ("a", "b"), ("b", "a"), ("b", "b")]) == pytest.approx(0.0)
