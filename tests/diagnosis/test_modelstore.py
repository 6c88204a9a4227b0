"""Model cache: no pickle from the data directory, a content hash checked on every load."""

from __future__ import annotations

import csv
import io
import json
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest

from gpulens.diagnosis import logs, svmcodec
from gpulens.diagnosis.classifier import Classifier
from gpulens.diagnosis.corpus import CORPUS_DIR, load_corpus
from gpulens.diagnosis.modelstore import FileModelStore, MemoryModelStore, ModelBlob
from gpulens.diagnosis.svm import BLOCK_WEIGHTS, LinearCalibrated, SvmModel, bound_text


class _Evil:
    """Unpickling this creates the marker file (what an attacker's payload would do)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[Path]]:
        return (Path.touch, (self.marker,))


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, list[logs.LogView]]:
    """One model trained and stored (3 s), copied by each test that needs files."""
    root = tmp_path_factory.mktemp("models")
    clf = Classifier(cache_dir=root)
    assert clf.model is not None, clf.model_error
    name = next(root.glob("*.npz")).name[: -len(".npz")]
    entries = load_corpus(CORPUS_DIR)
    views = [logs.analyze(bound_text(logs.read_log(CORPUS_DIR / e.file).text)) for e in entries]
    return root, name, views


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, Path]:
    """A model of a small corpus (four logs a category: 0.6 s to train, against 6 s for the
    whole one) for the tests that make the classifier train again: (models, name, corpus)."""
    corpus = tmp_path_factory.mktemp("tiny-corpus")
    with (CORPUS_DIR / "index.csv").open(newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    keep: list[dict[str, str]] = []
    for r in rows:
        if sum(k["category"] == r["category"] for k in keep) < 4:
            keep.append(r)
    with (corpus / "index.csv").open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(keep)
    for r in keep:
        (corpus / r["file"]).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(CORPUS_DIR / r["file"], corpus / r["file"])
    root = tmp_path_factory.mktemp("tiny-models")
    clf = Classifier(corpus_dir=corpus, cache_dir=root)
    assert clf.model is not None, clf.model_error
    return root, next(root.glob("*.npz")).name[: -len(".npz")], corpus


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def _rehash(root: Path, name: str) -> None:
    """What a careful attacker does: rewrite the manifest so the hashes match again."""
    import hashlib

    man = root / f"{name}.manifest.json"
    head = json.loads(man.read_text())
    for f in head["sha256"]:
        head["sha256"][f] = hashlib.sha256((root / f).read_bytes()).hexdigest()
    man.write_text(json.dumps(head))


@pytest.mark.slow
def test_loaded_model_predicts_exactly_as_trained(trained: tuple[Path, str, list[logs.LogView]],
                                                  tmp_path: Path) -> None:
    root, name, views = trained
    store = FileModelStore(root)
    blob = store.load(name)
    assert blob is not None
    assert all(not a.dtype.hasobject for a in blob.arrays.values())
    first = Classifier(cache_dir=_copy(root, tmp_path / "a"))
    fresh = svmcodec.decode(blob, list(BLOCK_WEIGHTS), SvmModel, LinearCalibrated)
    # the same weights written and read back: bit-identical probabilities and diagnoses
    again = svmcodec.decode(svmcodec.encode(fresh, list(BLOCK_WEIGHTS)), list(BLOCK_WEIGHTS),
                            SvmModel, LinearCalibrated)
    assert fresh.predict_proba(views) == again.predict_proba(views)
    assert first.model is not None
    assert first.model.predict_proba(views) == fresh.predict_proba(views)
    other = Classifier(model=again, cache_dir=None)
    assert other.classify_views(views) == first.classify_views(views)


@pytest.mark.slow
def test_codec_matches_sklearn_transform(trained: tuple[Path, str, list[logs.LogView]]) -> None:
    """The rebuilt analyzers + idf equal scikit-learn's TfidfVectorizer on every block."""
    root, name, views = trained
    sk = SvmModel().fit(views[:60], [v for v in ["a", "b", "c"] * 20])
    stored = svmcodec.decode(svmcodec.encode(sk, list(BLOCK_WEIGHTS)), list(BLOCK_WEIGHTS),
                             SvmModel, LinearCalibrated)
    docs = sk._docs(views)
    for k in BLOCK_WEIGHTS:
        ours = stored.vec[k].build_analyzer()
        theirs = sk.vec[k].build_analyzer()
        assert [ours(d) for d in docs[k]] == [theirs(d) for d in docs[k]], k
    assert sk.predict_proba(views) == stored.predict_proba(views)


@pytest.mark.slow
def test_planted_pickle_at_the_old_name_never_runs(tiny: tuple[Path, str, Path], tmp_path: Path) -> None:
    _, name, corpus = tiny
    cache = tmp_path / "models"
    cache.mkdir()
    marker = tmp_path / "PWNED"
    planted = cache / f"{name}.pkl"  # the name every installation of the previous version read
    planted.write_bytes(pickle.dumps(_Evil(marker)))
    clf = Classifier(corpus_dir=corpus, cache_dir=cache)
    assert clf.model is not None, clf.model_error
    assert not marker.exists()
    assert planted.exists(), "the planted file is evidence: it is neither loaded nor overwritten"
    assert (cache / f"{name}.npz").is_file()


def test_pickle_disguised_as_npz_is_refused(trained: tuple[Path, str, list[logs.LogView]],
                                            tmp_path: Path) -> None:
    root, name, _ = trained
    cache = _copy(root, tmp_path / "models")
    marker = tmp_path / "PWNED"
    buf = io.BytesIO()
    np.savez(buf, p0_wt=np.array([_Evil(marker)], dtype=object), allow_pickle=True)
    (cache / f"{name}.npz").write_bytes(buf.getvalue())
    _rehash(cache, name)  # hashes match: only allow_pickle=False stands in the way
    lines: list[str] = []
    store = FileModelStore(cache, warn=lines.append)
    assert store.load(name) is None
    assert not marker.exists()
    assert len(lines) == 1 and f"{name}.npz" in lines[0] and "refused" in lines[0]
    assert list(cache.glob(f"{name}.npz.rejected-*")), "moved aside, not deleted"
    assert not (cache / f"{name}.npz").exists()


@pytest.mark.slow
def test_tampered_npz_is_refused_moved_aside_and_retrained(
        tiny: tuple[Path, str, Path], trained: tuple[Path, str, list[logs.LogView]], tmp_path: Path,
        capfd: pytest.CaptureFixture[str]) -> None:
    root, name, corpus = tiny
    views = trained[2]
    cache = _copy(root, tmp_path / "models")
    npz = cache / f"{name}.npz"
    data = bytearray(npz.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte in a weight matrix
    npz.write_bytes(bytes(data))
    clf = Classifier(corpus_dir=corpus, cache_dir=cache)
    assert clf.model is not None, clf.model_error
    err = capfd.readouterr().err
    assert err.count("\n") == 1 and str(npz) in err and "SHA-256" in err
    rejected = list(cache.glob(f"{name}.npz.rejected-*"))
    assert len(rejected) == 1 and rejected[0].read_bytes() == bytes(data), "evidence kept as it was"
    assert FileModelStore(cache).load(name) is not None, "a fresh, valid model was written"
    assert clf.model.predict_proba(views[:3])


def test_tampered_metadata_and_missing_manifest(trained: tuple[Path, str, list[logs.LogView]],
                                                tmp_path: Path) -> None:
    root, name, _ = trained
    cache = _copy(root, tmp_path / "m1")
    meta = cache / f"{name}.json"
    meta.write_text(meta.read_text().replace('"classes": [', '"classes": ["evil", ', 1))
    lines: list[str] = []
    assert FileModelStore(cache, warn=lines.append).load(name) is None
    assert f"{name}.json" in lines[0]
    cache2 = _copy(root, tmp_path / "m2")
    (cache2 / f"{name}.manifest.json").unlink()
    lines.clear()
    assert FileModelStore(cache2, warn=lines.append).load(name) is None
    assert "manifest.json is missing" in lines[0]


@pytest.mark.slow
def test_well_formed_model_of_another_shape_is_rejected(tiny: tuple[Path, str, Path], tmp_path: Path) -> None:
    root, name, corpus = tiny
    cache = _copy(root, tmp_path / "models")
    with np.load(cache / f"{name}.npz") as z:
        arrays = {k: z[k] for k in z.files}
    arrays["p0_wt"] = arrays["p0_wt"][:10]
    np.savez(cache / f"{name}.npz", **arrays)
    _rehash(cache, name)
    lines: list[str] = []
    store = FileModelStore(cache, warn=lines.append)
    clf = Classifier(corpus_dir=corpus, model_store=store)
    assert clf.model is not None
    assert len(lines) == 1 and "does not fit" in lines[0]
    assert store.load(name) is not None  # retrained and written again


def test_memory_store_and_readonly_fallback(tmp_path: Path) -> None:
    mem = MemoryModelStore()
    blob = ModelBlob(arrays={"x": np.arange(3)}, meta={"k": [1, 2]})
    mem.save("m", blob)
    assert mem.load("m") is blob
    mem.reject("m", "test")
    assert mem.load("m") is None
    blocked = tmp_path / "file"
    blocked.write_text("")  # a file where the directory should be: not writable
    store = FileModelStore(blocked / "models", fallback=tmp_path / "user")
    store.save("m", blob)
    got = store.load("m")
    assert got is not None and got.meta == {"k": [1, 2]} and got.arrays["x"].tolist() == [0, 1, 2]
    assert (tmp_path / "user" / "m.npz").is_file()
