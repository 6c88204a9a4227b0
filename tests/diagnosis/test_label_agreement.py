"""scripts/label_agreement.py: a second labeller scored against the index the way the
evaluation scores gpulens (issue 23), on small label rows written for the test."""

from __future__ import annotations

import csv
from pathlib import Path

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


# --lines: a lines-only labelling scored against a tiny index. By hand, with the 2-line slack:
#   a.log  index "120 121", lines "119":    P 1/1 (119~120), R 2/2 (120 and 121 are both within 2 of 119)
#   c.log  index "50",      lines "50 80":  P 1/2,           R 1/1
#   d.log  index "10 30",   lines "35":     P 0/1,           R 0/2 (35 is 5 from 30)
#   b.log  ends normally: not counted; z.log is not in the index: left out.
#   P = 2/4, R = 3/5, F1 = 2 * 0.5 * 0.6 / 1.1 = 6/11 = 0.545.
LINES = [{"file": "x/a.log", "indicator_lines": "119"}, {"file": "x/c.log", "indicator_lines": "50 80"},
         {"file": "x/d.log", "indicator_lines": "35"}, {"file": "x/b.log", "indicator_lines": "5"},
         {"file": "x/z.log", "indicator_lines": "1"}]


def _lines_index() -> list[dict[str, str]]:
    return [*_rows(), {**BASE, "file": "x/c.log", "project": "o/c", "indicator_lines": "50"},
            {**BASE, "file": "x/d.log", "project": "o/d", "indicator_lines": "10 30"}]


def test_a_lines_only_labelling_is_scored_on_its_lines_by_hand() -> None:
    f = la.lines_agreement(_lines_index(), LINES)
    assert f.n == 4
    assert f.line_precision == (2, 4) and f.line_recall == (3, 5)
    assert f.line_f1 == pytest.approx(6 / 11)
    # every other column is the index's own, so it agrees with itself there
    assert f.category_accuracy == (4, 4) and f.first_rank_node == (3, 3)


def _write(path: Path, rows: list[dict[str, str]]) -> Path:
    with path.open("w", encoding="utf-8", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return path


def test_the_lines_option_prints_one_row_with_f1_precision_and_recall(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    _write(tmp_path / "index_t.csv", _lines_index())
    lines = _write(tmp_path / "lines.csv", [{**r, "note": "n"} for r in LINES])
    assert la.main(["--lines", str(lines), "--index-dir", str(tmp_path)]) == 0
    rows = [x for x in capsys.readouterr().out.splitlines() if x.startswith("| lines-only")]
    assert rows == ["| lines-only labeller vs the index | 4 | 0.545 | 0.500 (2/4) | 0.600 (3/5) |"]


def test_a_lines_file_without_line_numbers_is_refused_in_one_line(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    _write(tmp_path / "index_t.csv", _lines_index())
    bad = _write(tmp_path / "lines.csv", [{"file": "x/a.log", "indicator_lines": "line 119"}])
    assert la.main(["--lines", str(bad), "--index-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "indicator_lines must be line numbers" in err[0]
    assert la.main(["--lines", str(tmp_path / "missing.csv"), "--index-dir", str(tmp_path)]) == 2
    assert "cannot be read" in capsys.readouterr().err
