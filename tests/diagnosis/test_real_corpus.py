"""The real-world corpus (sample_logs/real/): complete, labelled, deduplicated, with provenance."""

from __future__ import annotations

import csv
import hashlib
from collections import Counter
from pathlib import Path

from gpulens.vocab import CATEGORIES, ORIGINS

REAL = Path(__file__).resolve().parents[2] / "sample_logs" / "real"


def _rows() -> list[dict[str, str]]:
    with open(REAL / "index.csv", encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh))


def test_every_row_names_an_existing_labelled_log_with_provenance() -> None:
    rows = _rows()
    assert len(rows) >= 600
    for r in rows:
        assert (REAL / r["file"]).is_file(), r["file"]
        assert r["category"] in CATEGORIES and r["origin"] in ORIGINS, r
        assert r["file"].startswith(r["category"] + "/"), r["file"]
        assert r["provenance"].startswith("https://github.com/"), r
        assert r["project"].count("/") == 1 and r["description"].strip(), r
        assert r["ambiguous"] in ("yes", "no") and r["split"] in ("dev", "holdout"), r


def test_each_category_has_enough_real_examples_from_many_projects() -> None:
    rows = _rows()
    per_cat = Counter(r["category"] for r in rows)
    assert set(per_cat) == set(CATEGORIES)
    assert min(per_cat.values()) >= 15, per_cat
    for cat in CATEGORIES:
        projects = {r["project"] for r in rows if r["category"] == cat}
        assert len(projects) >= 10, (cat, len(projects))


def test_no_two_logs_have_the_same_text_and_every_file_is_indexed() -> None:
    rows = _rows()
    digests = Counter(hashlib.sha256((REAL / r["file"]).read_bytes().strip()).hexdigest() for r in rows)
    assert max(digests.values()) == 1
    on_disk = {str(p.relative_to(REAL)) for p in REAL.glob("*/*") if p.is_file()}
    assert on_disk == {r["file"] for r in rows}
