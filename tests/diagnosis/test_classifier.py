"""Classifier: corpus labels, SVM fallback on logs the rules miss, hand-written hold-out logs."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from gpulens.diagnosis.classifier import Classifier
from gpulens.diagnosis.corpus import family_of, load_corpus
from gpulens.diagnosis.evaluate import HOLDOUT_DIR, _views
from gpulens.diagnosis.svm import SvmModel
from gpulens.diagnosis.types import CATEGORIES

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "sample_logs"


def test_corpus_index_is_consistent() -> None:
    entries = load_corpus(CORPUS)
    assert len(entries) >= 100
    for e in entries:
        assert (CORPUS / e.file).is_file(), e.file
        assert e.category in CATEGORIES
        assert e.provenance == "run-here" or e.provenance.startswith("written-from-format:")
        assert e.file.startswith(e.category + "/")
    run_here = sum(e.provenance == "run-here" for e in entries)
    assert run_here >= len(entries) / 2  # most logs come from real runs
    assert sum((CORPUS / e.file).stat().st_size for e in entries) < 5 * 1024 * 1024


def test_family_groups_variants() -> None:
    assert family_of("semantic_error/linear_shape_03.log") == "semantic_error/linear_shape"
    assert family_of("gpu_hardware/xid_79_01.log") == "gpu_hardware/xid_79"


@pytest.mark.slow
def test_rules_agree_with_corpus_labels() -> None:
    clf = Classifier(model=None, cache_dir=None)
    entries = load_corpus(CORPUS)
    wrong = [(e.file, clf.classify_file(CORPUS / e.file).category) for e in entries]
    wrong = [(f, c) for (f, c), e in zip(wrong, entries, strict=True) if c != e.category]
    assert len(wrong) <= len(entries) * 0.05, wrong


@pytest.fixture(scope="module")
def model() -> SvmModel:
    entries = load_corpus(CORPUS)
    views = _views([CORPUS / e.file for e in entries])
    return SvmModel().fit(views, [e.category for e in entries], groups=[e.family for e in entries])


@pytest.mark.slow
def test_svm_answers_when_no_rule_matches(model: SvmModel) -> None:
    # reworded so that no signature rule matches; the SVM must still find the class
    text = ("2024-01-01 INFO step 100 loss 2.1\nTraceback (most recent call last):\n"
            "  File \"train.py\", line 10, in <module>\n    batch = next(it)\n"
            "gzip.BadGzip: Not a gzipped file (b'\\x8b\\x00') while reading data/shard-00004.jsonl.gz\n")
    clf = Classifier(model=model, cache_dir=None)
    d = clf.classify_text(text)
    assert d.method in ("svm", "rule")
    assert d.category == "incorrect_input", d
    assert 0.0 <= d.confidence <= 1.0


def test_svm_probabilities_are_calibrated(model: SvmModel) -> None:
    entries = load_corpus(CORPUS)
    p = model.predict_proba(_views([CORPUS / entries[0].file]))[0]
    assert abs(sum(p.values()) - 1.0) < 1e-6
    assert set(p) <= set(CATEGORIES)


def test_hand_written_holdout(model: SvmModel) -> None:
    rows = list(csv.DictReader((HOLDOUT_DIR / "labels.csv").open()))
    assert len(rows) >= 20
    clf = Classifier(model=model, cache_dir=None)
    got = [(r["category"], clf.classify_file(HOLDOUT_DIR / r["file"]).category) for r in rows]
    correct = sum(a == b for a, b in got)
    assert correct >= len(rows) - 1, got


@pytest.mark.slow
def test_model_is_cached_on_disk(tmp_path: Path) -> None:
    clf = Classifier(cache_dir=tmp_path)
    assert clf.model is not None, clf.model_error
    cached = list(tmp_path.glob("diagnosis-svm-*.npz"))
    assert len(cached) == 1 and not list(tmp_path.glob("*.pkl"))
    again = Classifier(cache_dir=tmp_path)
    assert again.model is not None and again.model.classes == clf.model.classes


def test_import_is_fast_and_lazy() -> None:
    code = ("import sys, gpulens.diagnosis, gpulens.diagnosis.classifier; "
            "print(int('sklearn' in sys.modules), int('drain3' in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.split() == ["0", "0"]


def test_origin_follows_category() -> None:
    clf = Classifier(model=None, cache_dir=None)
    d = clf.classify_text("NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python, GPU has fallen off the bus.")
    assert (d.category, d.origin, d.method) == ("gpu_hardware", "infrastructure", "rule")
    d = clf.classify_text("FileNotFoundError: [Errno 2] No such file or directory: '/data/x.csv'")
    assert (d.category, d.origin) == ("incorrect_input", "data")
    assert d.inputs == ["/data/x.csv"]


def test_every_category_has_eight_logs() -> None:
    from collections import Counter

    counts = Counter(e.category for e in load_corpus(CORPUS))
    assert set(counts) == set(CATEGORIES)
    assert min(counts.values()) >= 8, counts


def test_fast_predictor_equals_scikit_learn(model: SvmModel) -> None:
    import numpy as np
    import scipy.sparse as sp

    views = _views([CORPUS / e.file for e in load_corpus(CORPUS)[::4]])
    x = model._features(views)
    rows = model._fast_rows(views)
    dense = sp.vstack([sp.csr_matrix((v, (np.zeros(len(i), dtype=int), i)), shape=(1, x.shape[1]))
                       for i, v in rows])
    assert abs(x - dense).max() < 1e-12
    assert model.fast is not None
    assert np.abs(model.clf.predict_proba(x) - model.fast.predict_rows(rows)).max() < 1e-9


def test_training_twice_gives_the_same_model(model: SvmModel) -> None:
    import numpy as np

    entries = load_corpus(CORPUS)
    views = _views([CORPUS / e.file for e in entries])
    again = SvmModel().fit(views, [e.category for e in entries], groups=[e.family for e in entries])
    assert model.fast is not None and again.fast is not None
    for one, other in zip(model.fast.parts, again.fast.parts, strict=True):
        assert all(np.array_equal(x, y) for x, y in zip(one, other, strict=True))  # weights, intercepts, columns, Platt a/b
    assert all(model.vec[k].vocabulary_ == again.vec[k].vocabulary_ for k in model.vec)


def test_classify_files_batch_equals_one_by_one(model: SvmModel, tmp_path: Path) -> None:
    clf = Classifier(model=model, cache_dir=None)
    paths = [CORPUS / e.file for e in load_corpus(CORPUS)[::7]] + [tmp_path / "missing.log"]
    (tmp_path / "empty.log").write_text("")
    paths.append(tmp_path / "empty.log")
    batch = clf.classify_files(paths)
    single = [clf.classify_file(p) for p in paths]
    assert [(d.file, d.category, d.method, d.reason) for d in batch] == [
        (d.file, d.category, d.method, d.reason) for d in single]


def test_value_conversion_in_a_data_reader_is_incorrect_input(model: SvmModel) -> None:
    clf = Classifier(model=model, cache_dir=None)
    for e in load_corpus(CORPUS):
        if "non_numeric_csv" in e.file:
            assert clf.classify_file(CORPUS / e.file).category == "incorrect_input", e.file
    # the same message from a computation that reads no data file is a logic bug
    logic = ("Traceback (most recent call last):\n  File \"/home/a/p/train.py\", line 40, in <module>\n"
             "    lr = float(cfg.lr_schedule)\nValueError: could not convert string to float: 'cosine'\n")
    assert Classifier(model=None, cache_dir=None).classify_text(logic).category == "semantic_error"


def test_svm_alone_on_hand_written_holdout(model: SvmModel) -> None:
    """Robustness: the model alone, as if no rule existed, on logs worded unlike the corpus."""
    rows = list(csv.DictReader((HOLDOUT_DIR / "labels.csv").open()))
    views = _views([HOLDOUT_DIR / r["file"] for r in rows])
    got = [max(p, key=lambda k: p[k]) for p in model.predict_proba(views)]
    correct = sum(g == r["category"] for g, r in zip(got, rows, strict=True))
    assert correct >= 0.7 * len(rows), list(zip(got, [r["category"] for r in rows], strict=True))


def test_mask_keeps_the_kind_of_path() -> None:
    from gpulens.diagnosis.templates import mask

    assert mask("No such file or directory: 'datasets/x/train.csv'") == "No such file or directory: '<DATA>'"
    assert mask("torch.load('/ckpt/run3/epoch_12.pt') at 0x7f3a 10.0.0.12:29500") == \
        "torch.load('<CKPT>') at <HEX> <IP>"
    assert mask('File "/home/a/train.py", line 3') == 'File "<SRC>", line <NUM>'
    assert mask("9.8it/s 23/60") == "<NUM>it/s <NUM>/<NUM>"
