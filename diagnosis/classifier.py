"""Classify a failure log: signature rules first, then a calibrated linear SVM.

1. :mod:`diagnosis.logs` finds the fatal region (last traceback + chained causes,
   torchrun root cause, scheduler/kernel lines).
2. The signature rules (``diagnosis/rules/signatures.yaml``) are searched in that
   region; the highest-priority match wins. A match of a *generic* rule (a bare
   ``ValueError``, a bare SIGKILL) may be overruled by a confident SVM.
3. When no rule matches, a linear SVM (``class_weight='balanced'``, sigmoid-calibrated
   probabilities) on masked word n-grams and Drain3 template ids answers; below a
   probability threshold the answer is ``unknown`` with a reason.

The SVM is trained from ``sample_logs/`` on first use and cached (pickled) under
``<data dir>/models/``; importing this module loads neither scikit-learn nor drain3.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import os
import pickle
import re
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from diagnosis import logs
from diagnosis.rules import Rule, RuleMatch, load_rules, match_rules
from diagnosis.templates import TemplateSet, mask
from diagnosis.types import CATEGORIES, DEFAULT_ORIGIN, Diagnosis

__all__ = [
    "CORPUS_DIR",
    "Classifier",
    "CorpusEntry",
    "SvmModel",
    "classify_file",
    "classify_text",
    "default_classifier",
    "family_of",
    "load_corpus",
]

MODEL_VERSION = 3
CORPUS_DIR = Path(__file__).resolve().parent.parent / "sample_logs"
#: Below this SVM probability the answer is "unknown".
SVM_MIN_PROBA = 0.40
#: An SVM answer overrules a generic rule only above this probability.
SVM_OVERRULE_PROBA = 0.60
MAX_EVIDENCE = 6
MAX_TEXT_CHARS = logs.HEAD_BYTES + logs.TAIL_BYTES


@dataclasses.dataclass(frozen=True)
class CorpusEntry:
    file: str  # relative to the corpus directory
    category: str
    origin: str
    provenance: str
    description: str

    @property
    def family(self) -> str:
        return family_of(self.file)


def family_of(file: str) -> str:
    """Generator family of a corpus file: its name without the trailing variant number."""
    stem = re.sub(r"[_-]?\d+$", "", Path(file).stem)
    return f"{Path(file).parent.name}/{stem}"


def load_corpus(corpus_dir: str | Path | None = None) -> list[CorpusEntry]:
    """Entries of ``sample_logs/index.csv`` (empty when there is no corpus)."""
    root = Path(corpus_dir) if corpus_dir else CORPUS_DIR
    index = root / "index.csv"
    if not index.is_file():
        return []
    with index.open(newline="", encoding="utf-8") as fh:
        return [
            CorpusEntry(r["file"], r["category"], r["origin"], r["provenance"], r["description"])
            for r in csv.DictReader(fh)
        ]


# --------------------------------------------------------------------------- features


def _token_text(view: logs.LogView) -> str:
    return mask(view.focus).lower()


def _region_lines(view: logs.LogView) -> list[str]:
    return [ln for ln in view.focus.splitlines() if ln.strip()][-120:]


class SvmModel:
    """Linear SVM on masked word n-grams + Drain3 template ids, with calibrated probabilities."""

    def __init__(self) -> None:
        self.templates: TemplateSet | None = None
        self.words: Any = None
        self.tpl: Any = None
        self.clf: Any = None
        self.classes: list[str] = []

    def _features(self, views: Sequence[logs.LogView]) -> Any:
        import scipy.sparse as sp

        assert self.templates is not None
        words = self.words.transform([_token_text(v) for v in views])
        tpls = self.tpl.transform([self.templates.tokens(_region_lines(v)) for v in views])
        return sp.hstack([words, tpls]).tocsr()

    def fit(self, views: Sequence[logs.LogView], labels: Sequence[str]) -> SvmModel:
        from gpulens.extras import require

        require("sklearn")
        import numpy as np
        from sklearn.calibration import CalibratedClassifierCV
        from sklearn.feature_extraction.text import TfidfVectorizer
        from sklearn.svm import LinearSVC

        self.templates = TemplateSet().fit(ln for v in views for ln in _region_lines(v))
        self.words = TfidfVectorizer(
            token_pattern=r"<?[a-z_][a-z0-9_]+>?", ngram_range=(1, 2), sublinear_tf=True,
            min_df=1, max_features=20000,
        )
        self.tpl = TfidfVectorizer(token_pattern=r"T\d+", lowercase=False, sublinear_tf=True)
        self.words.fit([_token_text(v) for v in views])
        self.tpl.fit([self.templates.tokens(_region_lines(v)) for v in views] + ["T0"])
        x = self._features(views)
        y = np.asarray(labels)
        _, counts = np.unique(y, return_counts=True)
        svm = LinearSVC(class_weight="balanced", C=1.0, max_iter=5000)
        folds = int(min(3, counts.min()))
        if folds >= 2:
            self.clf = CalibratedClassifierCV(svm, method="sigmoid", cv=folds).fit(x, y)
        else:  # too few examples of some class to calibrate: softmax of the margins
            self.clf = svm.fit(x, y)
        self.classes = [str(c) for c in self.clf.classes_]
        return self

    def predict_proba(self, views: Sequence[logs.LogView]) -> list[dict[str, float]]:
        import numpy as np

        x = self._features(views)
        if hasattr(self.clf, "predict_proba"):
            p = self.clf.predict_proba(x)
        else:
            d = self.clf.decision_function(x)
            d = np.atleast_2d(d)
            e = np.exp(3 * (d - d.max(axis=1, keepdims=True)))
            p = e / e.sum(axis=1, keepdims=True)
        return [dict(zip(self.classes, map(float, row), strict=True)) for row in p]


# --------------------------------------------------------------------------- classifier


def _default_cache_dir() -> Path | None:
    try:
        from gpulens.config import load_config

        return Path(load_config().data_dir) / "models"
    except Exception:
        from gpulens.config import default_data_dir

        return default_data_dir() / "models"


def _bound_text(text: str) -> str:
    """Head + (window around the last traceback) + tail of a very long text."""
    if len(text) <= MAX_TEXT_CHARS:
        return text
    head = text[: logs.HEAD_BYTES]
    tail_start = len(text) - logs.TAIL_BYTES
    tail = text[tail_start:]
    parts = [head]
    if "Traceback (most recent call last)" not in tail:
        at = text.rfind("Traceback (most recent call last)", logs.HEAD_BYTES, tail_start)
        if at >= 0:
            parts.append(text[max(logs.HEAD_BYTES, at - logs.WINDOW_BEFORE): min(tail_start, at + logs.WINDOW_AFTER)])
    parts.append(tail)
    return "\n[... gpulens: text not read ...]\n".join(parts)


class Classifier:
    """Rules + SVM. ``model='auto'`` trains/loads the SVM lazily; ``None`` means rules only."""

    def __init__(self, *, rules: tuple[Rule, ...] | None = None, model: SvmModel | str | None = "auto",
                 corpus_dir: str | Path | None = None, cache_dir: str | Path | None = "default") -> None:
        self.rules = rules if rules is not None else load_rules()
        self._model: SvmModel | None = model if isinstance(model, SvmModel) else None
        self._auto = model == "auto"
        self.corpus_dir = Path(corpus_dir) if corpus_dir else CORPUS_DIR
        self.cache_dir = _default_cache_dir() if cache_dir == "default" else (Path(cache_dir) if cache_dir else None)
        self._lock = threading.Lock()
        self.model_error: str | None = None

    # -- model ---------------------------------------------------------------------------

    @property
    def model(self) -> SvmModel | None:
        if self._model is None and self._auto:
            with self._lock:
                if self._model is None and self._auto:
                    self._auto = False  # try once
                    try:
                        self._model = self._load_or_train()
                    except Exception as exc:
                        self.model_error = f"{type(exc).__name__}: {exc}"
        return self._model

    def _corpus_key(self, entries: list[CorpusEntry]) -> str:
        h = hashlib.sha256(f"v{MODEL_VERSION}".encode())
        h.update((self.corpus_dir / "index.csv").read_bytes())
        for e in entries:
            try:
                h.update(f"{e.file}:{(self.corpus_dir / e.file).stat().st_size}".encode())
            except OSError:
                h.update(e.file.encode())
        for mod in (logs, __import__("diagnosis.templates").templates):
            h.update(Path(str(mod.__file__)).read_bytes())
        return h.hexdigest()[:16]

    def _load_or_train(self) -> SvmModel | None:
        entries = load_corpus(self.corpus_dir)
        if not entries:
            self.model_error = f"no corpus at {self.corpus_dir}"
            return None
        key = self._corpus_key(entries)
        path = self.cache_dir / f"diagnosis-svm-{key}.pkl" if self.cache_dir else None
        if path is not None and path.is_file():
            try:
                with path.open("rb") as fh:
                    model = pickle.load(fh)
                if isinstance(model, SvmModel):
                    return model
            except Exception:
                pass
        model = train_model(entries, self.corpus_dir)
        if path is not None:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                tmp = path.with_suffix(f".tmp{os.getpid()}")
                with tmp.open("wb") as fh:
                    pickle.dump(model, fh)
                os.replace(tmp, path)
            except OSError:
                pass  # read-only data dir: keep the model in memory
        return model

    # -- classification ------------------------------------------------------------------

    def classify_text(self, text: str, *, file: str | None = None) -> Diagnosis:
        if not text or not text.strip():
            return _unknown("empty log", file)
        text = _bound_text(text)
        view = logs.analyze(text)
        return self.classify_view(view, file=file)

    def classify_view(self, view: logs.LogView, *, file: str | None = None) -> Diagnosis:
        matches = match_rules(view.focus, self.rules)
        evidence_base = _evidence(view, matches[:1])
        if matches:
            best = _best(matches)
            rule = best.rule
            if rule.generic and self.model is not None:
                proba = self.model.predict_proba([view])[0]
                cat, p = max(proba.items(), key=lambda kv: kv[1])
                if cat != rule.category and cat != "unknown" and p >= SVM_OVERRULE_PROBA:
                    return Diagnosis(cat, DEFAULT_ORIGIN[cat], round(p, 3), evidence_base, method="svm",
                                     rule_id=None, inputs=view.inputs, file=file,
                                     reason=f"SVM overruled generic rule {rule.id}")
            return Diagnosis(rule.category, rule.origin, rule.confidence, _evidence(view, [best]),
                             method="rule", rule_id=rule.id, inputs=view.inputs, file=file)
        model = self.model
        if model is None:
            why = "no failure signature matched"
            if self.model_error:
                why += f" (SVM unavailable: {self.model_error})"
            return _unknown(why, file, evidence_base, view.inputs)
        proba = model.predict_proba([view])[0]
        cat, p = max(proba.items(), key=lambda kv: kv[1])
        if cat == "unknown" or p < SVM_MIN_PROBA:
            why = "no failure signature matched"
            if cat != "unknown":
                why += f"; best model guess {cat} at p={p:.2f} is below {SVM_MIN_PROBA}"
            d = _unknown(why, file, evidence_base, view.inputs)
            d.method = "svm"
            d.confidence = round(proba.get("unknown", 1 - p), 3)
            return d
        return Diagnosis(cat, DEFAULT_ORIGIN[cat], round(p, 3), evidence_base, method="svm",
                         inputs=view.inputs, file=file)

    def classify_file(self, path: str | os.PathLike[str]) -> Diagnosis:
        name = str(path)
        try:
            if Path(path).is_dir():
                return _unknown("is a directory, not a log file", name)
            got = logs.read_log(path)
        except FileNotFoundError:
            return _unknown("file not found", name)
        except PermissionError:
            return _unknown("permission denied reading the log", name)
        except OSError as exc:
            return _unknown(f"cannot read the log ({exc.strerror or exc})", name)
        if got.reason:
            return _unknown(got.reason, name)
        return self.classify_text(got.text, file=name)


def _best(matches: list[RuleMatch]) -> RuleMatch:
    top = max(m.rule.priority for m in matches)
    tied = [m for m in matches if m.rule.priority == top]
    return max(tied, key=lambda m: m.position)  # the latest in the log among equals


def _evidence(view: logs.LogView, matches: Iterable[RuleMatch]) -> list[str]:
    out: list[str] = []
    for line in [m.line for m in matches] + view.exception_lines[-3:] + [
        logs.normalize_line(x) for x in view.infra_lines[-4:]
    ]:
        line = line.strip()[:300]
        if line and line not in out:
            out.append(line)
    if not out:
        out = [ln.strip()[:300] for ln in view.fatal.lines[-3:] if ln.strip()]
    return out[:MAX_EVIDENCE]


def _unknown(reason: str, file: str | None, evidence: list[str] | None = None,
             inputs: list[str] | None = None) -> Diagnosis:
    return Diagnosis("unknown", "unknown", 0.0, evidence or [], method="none", reason=reason,
                     inputs=inputs or [], file=file)


def train_model(entries: Sequence[CorpusEntry], corpus_dir: str | Path) -> SvmModel:
    """Fit the SVM on corpus entries (bounded reading, like classify_file)."""
    root = Path(corpus_dir)
    views = [logs.analyze(_bound_text(logs.read_log(root / e.file).text)) for e in entries]
    return SvmModel().fit(views, [e.category for e in entries])


_DEFAULT: Classifier | None = None
_DEFAULT_LOCK = threading.Lock()


def default_classifier() -> Classifier:
    global _DEFAULT
    with _DEFAULT_LOCK:
        if _DEFAULT is None:
            _DEFAULT = Classifier()
        return _DEFAULT


def classify_text(text: str, *, file: str | None = None) -> Diagnosis:
    """Classify one log given as text."""
    return default_classifier().classify_text(text, file=file)


def classify_file(path: str | os.PathLike[str]) -> Diagnosis:
    """Classify one log file (bounded memory and time; ``unknown`` with a reason on bad input)."""
    return default_classifier().classify_file(path)


assert set(DEFAULT_ORIGIN) == set(CATEGORIES)
