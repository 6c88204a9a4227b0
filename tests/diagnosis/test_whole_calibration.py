"""Calibrated confidence of whole-log answers (issue 23, item 3): the table's arithmetic, its file
format and its faults, what the reader reports with and without it, the evaluation's out-of-sample
(leave-fold-out) calibration, and the script that writes the shipped table."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpulens.diagnosis.logread import diagnose_text
from gpulens.diagnosis.logread.calibration import (
    NO_EVIDENCE,
    PRIOR,
    Calibration,
    band_key,
    calibrates,
    fit,
    shipped,
)
from gpulens.diagnosis.logread.evaluate import (
    Case,
    _folds,
    calibrated,
    calibration_table,
    evaluate_whole,
    reliability,
)
from gpulens.diagnosis.logread.whole import WholeDiagnosis, _calibrate
from gpulens.diagnosis.types import Diagnosis
from gpulens.errors import InputError
from tests.diagnosis.test_logread import FIX, _fixture_index

_LOG = ("epoch 1 | loss 2.31\nepoch 2 | loss 2.10\nTraceback (most recent call last):\n"
        '  File "/home/u/train.py", line 88, in <module>\n    loss.backward()\n'
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
        "of 79.15 GiB of which 1.20 GiB is free.\n")


def test_a_band_is_the_source_and_the_stated_confidence_s_range() -> None:
    assert band_key("rule", 0.95) == "rule/3" and band_key("rule", 0.9) == "rule/3"
    assert band_key("rule", 0.85) == "rule/2" and band_key("svm", 0.49) == "svm/0"
    assert band_key("completion", 0.55) != band_key("rule", 0.55)


def test_the_observed_rate_pulled_towards_the_stated_confidence() -> None:
    table = fit([("rule", 0.95, k < 9) for k in range(10)])  # 9 of 10 right
    assert table.counts == {"rule/3": (9, 10)}
    assert table.confidence("rule", 0.95) == round((9 + PRIOR * 0.95) / (10 + PRIOR), 3)
    assert table.confidence("svm", 0.62) == 0.62  # a band with no logs keeps what was stated
    many = fit([("rule", 0.95, k % 10 != 0) for k in range(1000)])  # many logs: the rate itself
    assert abs(many.confidence("rule", 0.95) - 0.9) < 0.001


def test_the_table_round_trips_and_a_damaged_one_is_refused_with_the_fix(tmp_path: Path) -> None:
    table = fit([("rule", 0.95, True), ("completion", 0.55, False)], fitted_on="two logs")
    assert Calibration.from_json(table.to_json()) == table
    for text in ("{", '{"counts": {"rule/3": [1]}, "bands": [0.5, 0.7, 0.9], "prior": 2.0}',
                 '{"counts": {"rule/3": [5, 3]}, "bands": [0.5, 0.7, 0.9], "prior": 2.0}',
                 '{"counts": {}, "bands": [0.5, 0.9], "prior": 2.0}', "[]"):
        with pytest.raises(InputError) as err:
            Calibration.from_json(text, "cal.json")
        assert "cal.json" in str(err.value) and "fit_whole_calibration" in str(err.value)


def test_the_reader_reports_the_calibrated_confidence_and_can_state_its_own() -> None:
    stated = diagnose_text(_LOG, calibrated=False).diagnosis
    reported = diagnose_text(_LOG).diagnosis
    assert stated.category == reported.category == "gpu_oom"
    assert reported.confidence == shipped().confidence(stated.method, stated.confidence)
    assert shipped().counts, "the shipped table is fitted (scripts/fit_whole_calibration.py)"


def test_an_unknown_keeps_its_own_confidence() -> None:
    table = fit([("svm", 0.4, False)] * 50)  # guesses at 0.4 were always wrong
    unknown = WholeDiagnosis(Diagnosis("unknown", "unknown", 0.4, method="svm"))
    assert _calibrate(unknown, table) == unknown
    named = WholeDiagnosis(Diagnosis("gpu_oom", "user", 0.4, method="svm"))
    assert _calibrate(named, table).diagnosis.confidence == table.confidence("svm", 0.4) < 0.1


def test_a_healthy_verdict_without_positive_evidence_keeps_its_stated_confidence() -> None:
    # no failure line and no completion evidence either: "probably ended normally", never made surer by a
    # table fitted on a corpus that took no log cut off mid-run
    table = fit([("completion", 0.55, True)] * 50 + [("completion", 0.6, True)] * 50)
    quiet = WholeDiagnosis(Diagnosis("none", "none", 0.55, method="completion"))
    assert not calibrates("none", 0.55) and _calibrate(quiet, table) == quiet
    stopped = WholeDiagnosis(Diagnosis("preempted", "unknown", 0.6, method="completion"))
    assert calibrates("preempted", 0.6) and _calibrate(stopped, table).diagnosis.confidence > 0.9
    done = WholeDiagnosis(Diagnosis("none", "none", NO_EVIDENCE, method="completion"))
    assert calibrates("none", NO_EVIDENCE) and _calibrate(done, table) == done  # no logs in its band: kept
    got = diagnose_text("loading config\nhello\nworld\n").diagnosis
    assert got.category == "none" and got.confidence < NO_EVIDENCE
    assert got.confidence == diagnose_text("loading config\nhello\nworld\n", calibrated=False).diagnosis.confidence
    assert got.reason.startswith("probably ended normally")


def test_the_evaluation_leaves_healthy_verdicts_without_evidence_out_of_the_table() -> None:
    quiet = [Case({"file": f"q{k}.log", "project": f"o/q{k}", "split": "holdout", "category": "none"},
                  WholeDiagnosis(Diagnosis("none", "none", 0.55, method="completion"))) for k in range(10)]
    cases = quiet + [_case(f"o/p{k}", "holdout", True) for k in range(10)]
    th = {c.project: 0.0 for c in cases}
    assert calibration_table(cases, th).counts == {"rule/3": (10, 10)}
    got = calibrated(cases, th)
    assert all(got[c.row["file"]] == 0.55 for c in quiet)


def _case(project: str, split: str, right: bool, conf: float = 0.95) -> Case:
    row = {"file": f"{project}.log", "project": project, "split": split, "category": "gpu_oom"}
    got = WholeDiagnosis(Diagnosis("gpu_oom" if right else "cpu_oom", "user", conf, method="rule"))
    return Case(row, got)


def test_the_evaluation_calibrates_each_log_without_its_own_fold() -> None:
    cases = [_case(f"o/p{k}", "holdout", k % 3 != 0) for k in range(30)] + [_case("o/dev", "dev", True)]
    th = {c.project: 0.0 for c in cases}
    fold = _folds(c.project for c in cases)
    got = calibrated(cases, th)
    for c in cases:
        others = [x for x in cases if x.row["split"] == "holdout" and fold[x.project] != fold[c.project]]
        right = sum(1 for x in others if x.got.diagnosis.category == "gpu_oom")
        assert got[c.row["file"]] == round((right + PRIOR * 0.95) / (len(others) + PRIOR), 3)
    # dev logs (in-sample for the rules) never feed the table
    assert calibration_table(cases, th).counts == {"rule/3": (20, 30)}
    # stated 0.95, right 2 in 3: the calibrated confidences are nearer the truth
    assert reliability(cases, th, confidences=got)[1] < reliability(cases, th)[1]


def test_the_script_writes_a_table_fitted_on_the_holdout_logs(tmp_path: Path) -> None:
    from scripts.fit_whole_calibration import main

    out = tmp_path / "cal.json"
    index = _fixture_index(tmp_path)
    assert main(["--root", str(FIX), "--out", str(out), "--index-dir", str(index)]) == 0
    table = Calibration.from_json(out.read_text(encoding="utf-8"))
    ev = evaluate_whole(FIX, index_dir=index)
    named = [c for c in ev.cases if c.row["split"] == "holdout" and c.category(ev.thresholds[c.project]) != "unknown"]
    assert table.counts == calibration_table(ev.cases, ev.thresholds).counts
    assert sum(n for _, n in table.counts.values()) == len(named) > 0
    assert main(["--root", str(tmp_path / "nope"), "--out", str(out)]) == 2
