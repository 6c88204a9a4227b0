"""The honest evaluation: leave-project-out folds, dev -> holdout, the Markdown report."""

from __future__ import annotations

import csv
import shutil
from collections import defaultdict
from pathlib import Path

import pytest

from gpulens.diagnosis.corpus import load_real_corpus
from gpulens.diagnosis.evaluate import _splits, evaluate, render_markdown

ROOT = Path(__file__).resolve().parents[2] / "sample_logs"


def test_folds_never_split_a_project() -> None:
    real = load_real_corpus(ROOT)
    y = [e.category for e in real]
    projects = [e.project for e in real]
    splits = _splits(y, projects, 5, 0)
    assert len(splits) == 5
    seen: list[int] = []
    for train, test in splits:
        assert not {projects[i] for i in train} & {projects[i] for i in test}
        seen += test
    assert sorted(seen) == list(range(len(real)))  # every real log is tested exactly once
    assert splits == _splits(y, projects, 5, 0)  # seeded: reproducible


@pytest.mark.slow
def test_evaluate_on_a_small_corpus(tmp_path: Path) -> None:
    """Plumbing on 4 real logs per category (the full run is `gpulens diagnose --evaluate`)."""
    with (ROOT / "real" / "index.csv").open(encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh))
    keep: dict[str, list[dict[str, str]]] = defaultdict(list)
    for r in rows:
        if len(keep[r["category"]]) < 4 and r["project"] not in {k["project"] for k in keep[r["category"]]}:
            keep[r["category"]].append(r)
    picked = [r for rs in keep.values() for r in rs]
    dest = tmp_path / "real"
    for r in picked:
        (dest / r["file"]).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / "real" / r["file"], dest / r["file"])
    with (dest / "index.csv").open("w", encoding="utf-8", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(picked)
    res = evaluate(tmp_path, folds=2, holdout_dir=tmp_path / "none")
    rules, svm, comb = res.lpo
    assert len(comb.y_true) == len(picked) and all(comb.y_pred) and all(svm.y_pred)
    assert comb.origin_accuracy() is not None and 0.0 <= comb.macro_f1() <= 1.0
    assert len(res.holdout[2].y_true) == sum(r["split"] == "holdout" for r in picked)
    md = render_markdown(res)
    for heading in ("Headline: leave-project-out", "dev -> holdout", "Per class", "Per origin",
                    "Confusion matrix", "In-sample (for reference only)"):
        assert heading in md
