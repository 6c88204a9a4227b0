"""The statistical model of the diagnosis: a calibrated linear SVM over features of a log's fatal part.

:class:`SvmModel` turns a :class:`gpulens.diagnosis.logs.LogView` into six TF-IDF blocks (the
focus text, the fatal lines as words and as characters, structural tokens of the last traceback,
a small lexicon of meanings, Drain3 template ids) and answers calibrated class probabilities.
:func:`train_model` fits it on the corpora of :mod:`gpulens.diagnosis.corpus`;
:func:`stored_or_trained` keeps fitted models in a :class:`gpulens.diagnosis.modelstore.ModelStore`
as arrays + JSON (:mod:`gpulens.diagnosis.svmcodec`; never pickle). The rules, and when the model
may answer or overrule them, are :mod:`gpulens.diagnosis.classifier`'s. Importing this module loads
neither scikit-learn nor drain3.
"""

from __future__ import annotations

import re
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from gpulens.diagnosis import logs, svmcodec
from gpulens.diagnosis.corpus import (
    CONTEXTS_SUBDIR,
    CorpusEntry,
    load_context_corpus,
    load_real_corpus,
)
from gpulens.diagnosis.modelstore import ModelStore
from gpulens.diagnosis.templates import TemplateSet, mask

__all__ = ["BLOCK_WEIGHTS", "CONTEXT_WEIGHT", "EXC_NAME", "MAX_TEXT_CHARS", "LinearCalibrated", "SvmModel", "bound_text",
           "stored_or_trained", "train_model"]

MAX_TEXT_CHARS = logs.HEAD_BYTES + logs.TAIL_BYTES


def bound_text(text: str) -> str:
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


#: An exception class name (dotted, ending Error/Exception/...) at the start of a line.
EXC_NAME = re.compile(r"^((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|Failure|Warning|Fault))\b")
_WRAPPED = re.compile(r"\w+Error\((\w+)\)|Caught (\w+) in DataLoader|ProcessRaisedException.*?(\w+Error)")
_LIBDIR = re.compile(r"(?:site-packages|dist-packages|lib/python\d+(?:\.\d+)?)/(.+)$")
_IDENT = re.compile(r"<\w+>|[A-Za-z_][A-Za-z0-9_]{1,40}")
_NOISE = re.compile(r"\d+%\||it/s\b|s/it\b|\bwarnings\.warn\(|UserWarning|FutureWarning|DeprecationWarning")
#: Lines of the fatal part given to the char n-grams and the message n-grams.
FATAL_LINES = 12
FATAL_CHARS = 1500


def _fatal_lines(view: logs.LogView) -> list[str]:
    """The lines that state the failure: exception lines, scheduler/kernel lines, else the last
    lines that are not progress bars or warnings."""
    out = list(view.exception_lines[-4:])
    if view.exception_lines:  # continuation lines of the last exception message
        region = [ln.strip() for ln in view.focus.splitlines()]
        last = view.exception_lines[-1].strip()
        at = max((i for i, ln in enumerate(region) if ln == last), default=-1)
        if at >= 0:
            out += [ln for ln in region[at + 1:at + 7] if ln and not _NOISE.search(ln)]
    out += [logs.normalize_line(x) for x in view.infra_lines[-6:]]
    if view.context_lines and (view.truncated or all(logs.is_weak(x) for x in view.exception_lines)):
        out = view.context_lines[-6:] + out  # the real error stands above a cut or secondary traceback
    if not out:
        tail = [ln for ln in view.focus.splitlines() if ln.strip() and not _NOISE.search(ln)]
        out = tail[-FATAL_LINES:]
    return [ln.strip()[:400] for ln in out if ln.strip()][-FATAL_LINES:]


#: Coarse meaning of words that different tools use for the same thing (a tiny hand-made
#: "embedding"): a message worded differently from every training log still lands near its class.
LEXICON: dict[str, tuple[str, ...]] = {
    "memory": ("memory", "oom", "alloc", "malloc", "mem_", "rss", "memoryerror"),
    "gpu": ("cuda", "gpu", "cudnn", "cublas", "device", "kernel", "nvidia", "nvml", "nccl"),
    "net": ("nccl", "gloo", "rendezvous", "socket", "connect", "peer", "network", "tcp", "mpi", "collective",
            "allreduce", "all_reduce", "barrier", "heartbeat", "store", "ib", "hostname", "port"),
    "timeout": ("timeout", "timed out", "deadline", "watchdog", "hang", "stuck"),
    "signal": ("signal", "sigterm", "sigkill", "sigint", "sighup", "preempt", "cancel", "evict", "terminat",
               "time limit", "requeue", "killed", "shutdown", "drain"),
    "perm": ("permission", "denied", "forbidden", "eacces", "eperm", "not permitted", "unauthorized", "access"),
    "storage": ("disk", "space", "quota", "filesystem", "file system", "nfs", "lustre", "stale", "read-only",
                "mount", "enospc", "i/o", "input/output", "device full"),
    "nan": ("nan", "inf", "diverg", "finite", "overflow", "explod", "underflow", "loss scale"),
    "ckpt": ("checkpoint", "ckpt", "state_dict", "state dict", "resume", "unpickl", "pickle", "weights",
             "load_state", "restore", "serializ"),
    "import": ("import", "module", "package", "no module", "installed", "version"),
    "syntax": ("syntax", "indent", "unexpected eof", "unterminated", "was never closed", "invalid syntax", "parse error"),
    "data": ("csv", "json", "dataset", "corrupt", "malformed", "decode", "truncated", "record", "row", "column",
             "shard", "sample", "image", "label", "annotation", "parquet", "tfrecord", "not found", "no such file"),
    "shape": ("shape", "size", "dimension", "dim ", "mismatch", "dtype", "broadcast", "expected", "match"),
    "crash": ("segmentation", "segfault", "sigsegv", "abort", "core dump", "fatal python", "bus error",
              "illegal instruction", "terminate called", "double free", "invalid pointer"),
    "driver": ("driver", "nvml", "libcuda", ".so", "shared object", "version mismatch", "too old", "compatib",
               "not compiled", "no cuda"),
    "hw": ("xid", "ecc", "nvlink", "fallen off", "off the bus", "remap", "dbe", "uncorrectable", "pcie", "lost"),
    "logic": ("attribute", "typeerror", "keyerror", "indexerror", "valueerror", "assert", "nonetype", "argument",
              "not subscriptable", "not callable", "unsupported operand"),
}


def _lexicon_tokens(text: str) -> list[str]:
    low = text.lower()
    return [f"lex_{name}" for name, words in LEXICON.items() if any(w in low for w in words)]


def _struct_tokens(view: logs.LogView) -> str:
    """Exception class names (and their modules), the library modules and functions of the
    last traceback's frames, identifiers of the failing code lines, kinds of paths named."""
    frames = view.frames[-5:]
    toks = [*_exception_tokens(view), *_frame_tokens(frames)]
    for line in view.exception_lines[-2:] + [f[2] for f in frames[-2:]]:
        for kind in ("<DATA>", "<CKPT>", "<PATH>"):
            if kind in mask(line):
                toks.append("names_" + kind.strip("<>").lower())
    if view.infra_lines:
        toks.append("has_infra")
    if not view.has_traceback:
        toks.append("no_traceback")
    return " ".join(toks)


def _exception_tokens(view: logs.LogView) -> list[str]:
    """How the log ends (truncated, no final exception, secondary only), wrapped causes, and the
    last exceptions' class names and modules."""
    toks: list[str] = []
    exc_lines = list(view.exception_lines)
    if view.truncated or not exc_lines:
        exc_lines = [x for x in view.context_lines if EXC_NAME.match(x)][-3:] + exc_lines
        toks.append("truncated" if view.truncated else "no_final_exception")
    if view.secondary_only:
        toks.append("secondary_only")
    for line in exc_lines[-3:]:  # wrapped causes: RayTaskError(KeyError), "Caught KeyError in DataLoader"
        for w in _WRAPPED.finditer(line):
            toks.append("wrapped_" + next(g for g in w.groups() if g).lower())
    names = [m.group(1) for m in map(EXC_NAME.match, exc_lines) if m]
    for k, name in enumerate(names[-4:]):
        parts = name.split(".")
        toks.append("exc_" + parts[-1].lower())
        toks += ["excmod_" + p.lower() for p in parts[:-1]]
        if k == len(names[-4:]) - 1:
            toks.append("lastexc_" + parts[-1].lower())
    if not names:
        toks.append("no_exception")
    return toks


def _frame_tokens(frames: Sequence[tuple[str, str, str]]) -> list[str]:
    """Per traceback frame, innermost first: library modules or user code, the function, and the
    identifiers of the code line (three innermost frames)."""
    toks: list[str] = []
    for depth, (file, func, code) in enumerate(reversed(frames)):
        m = _LIBDIR.search(file)
        if m:
            comps = [c.removesuffix(".py").lower() for c in m.group(1).split("/")[:3]]
            toks += ["lib_" + c for c in comps if c and c != "__init__"]
        else:
            toks.append("user_frame" if depth else "user_frame_last")
        toks.append("fn_" + func.strip("<>").lower())
        if depth < 3 and code:
            idents = _IDENT.findall(mask(code))
            toks += ["code_" + w.lower().strip("<>") for w in idents[:24]]
    return toks


def _lex_tokens(view: logs.LogView) -> str:
    toks = _lexicon_tokens("\n".join(_fatal_lines(view)))
    toks += ["last" + t for t in _lexicon_tokens(view.exception_lines[-1] if view.exception_lines else "")]
    return " ".join(toks) or "lex_none"


def _focus_text(view: logs.LogView) -> str:
    return mask(view.focus[-20000:]).lower()


def _fatal_text(view: logs.LogView) -> str:
    return mask("\n".join(_fatal_lines(view)))[:FATAL_CHARS].lower()


def _template_lines(view: logs.LogView) -> list[str]:
    lines = [ln for ln in view.focus.splitlines() if ln.strip() and not _NOISE.search(ln)][-40:]
    return [mask(ln) for ln in dict.fromkeys(lines + _fatal_lines(view))]


#: Weight of an error context cut from a whole log (``sample_logs/contexts/``) in training, an
#: excerpt's being 1: the contexts are what the whole-log reader hands the model, the excerpts
#: (920) outnumber them (267). Chosen on the reader's own contexts of the 265 failed dev logs, the
#: model alone, cross-fitted by project fold: weight 1 -> 191 right (macro-F1 0.588, ECE 0.077),
#: 2 -> 194 (0.593, 0.093), 3 -> 196 (0.612, 0.073), 5 -> 195 (0.607, 0.083).
CONTEXT_WEIGHT = 3.0
#: Regularization of the linear SVM.
SVM_C = 1.0  # chosen among 0.25, 0.5, 1.0 on the dev split, leave-project-out
#: Weights of the feature blocks (each block is L2-normalized TF-IDF).
BLOCK_WEIGHTS = {"focus": 0.6, "fatal": 1.0, "chars": 1.0, "struct": 1.0, "lex": 1.0, "tpl": 0.5}


class _FastTfidf:
    """``TfidfVectorizer.transform`` of one document as (column indices, values), without
    scikit-learn's per-call input validation: the fitted analyzer, vocabulary and idf
    weights, sublinear tf, L2 norm (tests check it equals scikit-learn's output)."""

    def __init__(self, vec: Any, offset: int, weight: float) -> None:
        self.analyze = vec.build_analyzer()
        self.vocab: dict[str, int] = vec.vocabulary_
        self.idf = vec.idf_ if vec.use_idf else None
        self.sublinear = bool(vec.sublinear_tf)
        self.l2 = vec.norm == "l2"
        self.offset = offset
        self.weight = weight

    def row(self, doc: str) -> tuple[Any, Any]:
        import numpy as np

        vocab = self.vocab
        seen = Counter(self.analyze(doc))  # counted in C
        known = seen.keys() & vocab.keys()  # set intersection in C: only in-vocabulary tokens are looked up
        idx = np.fromiter((vocab[t] for t in known), dtype=np.intp, count=len(known))
        val = np.fromiter((seen[t] for t in known), dtype=np.float64, count=len(known))
        if self.sublinear:
            val = np.log(val) + 1.0
        if self.idf is not None:
            val = val * self.idf[idx]
        if self.l2 and len(val):
            norm = float(np.sqrt(np.dot(val, val)))
            if norm > 0:
                val = val / norm
        return idx + self.offset, val * self.weight


class LinearCalibrated:
    """Exactly ``CalibratedClassifierCV(LinearSVC, method='sigmoid').predict_proba`` in a few
    numpy operations (no per-call scikit-learn validation): for each calibration fold,
    margins ``X W^T + b``, Platt sigmoids per class, row-normalized; averaged over folds."""

    def __init__(self, clf: Any, classes: list[str]) -> None:
        import numpy as np

        index = {c: i for i, c in enumerate(classes)}
        self.n = len(classes)
        self.parts: list[tuple[Any, Any, Any, Any, Any]] = []
        for cc in clf.calibrated_classifiers_:
            est = cc.estimator
            cols = np.array([index[str(c)] for c in est.classes_])
            a = np.array([cal.a_ for cal in cc.calibrators], dtype=float)
            b = np.array([cal.b_ for cal in cc.calibrators], dtype=float)
            self.parts.append((est.coef_.T.copy(), est.intercept_.copy(), cols, a, b))

    def predict_rows(self, rows: Sequence[tuple[Any, Any]]) -> Any:
        """Probabilities for feature rows given as (column indices, values)."""
        import numpy as np

        out = np.zeros((len(rows), self.n))
        for r, (idx, val) in enumerate(rows):
            for wt, icpt, cols, a, b in self.parts:
                d = val @ wt[idx] + icpt
                p = np.zeros(self.n)
                p[cols] = 1.0 / (1.0 + np.exp(a * d + b))
                s = p.sum()
                out[r] += p / s if s != 0 else 1.0 / self.n
        return out / len(self.parts)

    def predict_proba(self, x: Any) -> Any:
        import numpy as np

        total = np.zeros((x.shape[0], self.n))
        for wt, icpt, cols, a, b in self.parts:
            d = np.asarray(x @ wt) + icpt
            p = np.zeros((x.shape[0], self.n))
            p[:, cols] = 1.0 / (1.0 + np.exp(a * d + b))
            s = p.sum(axis=1, keepdims=True)
            p = np.divide(p, s, out=np.full_like(p, 1.0 / self.n), where=s != 0)
            total += p
        return total / len(self.parts)


def _vectorizers() -> dict[str, Any]:
    """A fresh TF-IDF vectorizer per feature block."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    words: dict[str, Any] = dict(token_pattern=r"<?[a-z_][a-z0-9_]+>?", ngram_range=(1, 2), sublinear_tf=True)
    return {
        "focus": TfidfVectorizer(**words, min_df=2, max_features=20000),
        "fatal": TfidfVectorizer(**words),
        "chars": TfidfVectorizer(analyzer="char_wb", ngram_range=(3, 5), sublinear_tf=True, min_df=2,
                                 max_features=30000),
        "struct": TfidfVectorizer(token_pattern=r"\S+", lowercase=False, sublinear_tf=True),
        "lex": TfidfVectorizer(token_pattern=r"\S+", lowercase=False, use_idf=False),
        "tpl": TfidfVectorizer(token_pattern=r"t\d+", lowercase=False, sublinear_tf=True),
    }


def _calibration_folds(x: Any, y: Any, groups: Sequence[str] | None, folds: int) -> Any:
    """The calibration folds: whole groups held out when there are enough groups, else stratified."""
    from sklearn.model_selection import StratifiedGroupKFold, StratifiedKFold

    cv: Any = StratifiedKFold(folds, shuffle=True, random_state=0)
    if groups is not None and len(set(groups)) >= 2 * folds:
        with warnings.catch_warnings():  # "least populated class has only 2 members": expected
            warnings.simplefilter("ignore", UserWarning)
            cv = list(StratifiedGroupKFold(folds, shuffle=True, random_state=0).split(x, y, groups))
    return cv


class SvmModel:
    """Linear SVM on five feature blocks, with calibrated probabilities.

    Blocks (TF-IDF each, weighted, concatenated): masked word 1-2-grams of the whole
    focus text; word 1-2-grams and char 3-5-grams of the *fatal lines* (exception lines,
    scheduler/kernel lines); structural tokens (exception class names and modules, the
    library modules, functions and code identifiers of the last traceback's frames, kinds
    of paths named there); Drain3 template ids of the fatal and last lines.
    ``LinearSVC(class_weight='balanced')`` in ``CalibratedClassifierCV(method='sigmoid')``;
    with ``groups`` the calibration folds hold whole generator families out, so the
    probabilities are calibrated on unseen wording rather than on near-twins.
    """

    def __init__(self) -> None:
        self.templates: TemplateSet | None = None
        self.vec: dict[str, Any] = {}
        self.clf: Any = None
        self.fast: LinearCalibrated | None = None
        self.classes: list[str] = []
        self._fast_vecs: list[tuple[str, _FastTfidf]] | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_fast_vecs"] = None  # analyzers are rebuilt from the vectorizers on first use
        if state.get("fast") is not None:
            state["clf"] = None  # the numpy predictor holds the same weights
        return state

    def _fast_rows(self, views: Sequence[logs.LogView]) -> list[tuple[Any, Any]]:
        import numpy as np

        if self._fast_vecs is None:
            offset, fast = 0, []
            for k in BLOCK_WEIGHTS:
                fast.append((k, _FastTfidf(self.vec[k], offset, BLOCK_WEIGHTS[k])))
                offset += len(self.vec[k].vocabulary_)
            self._fast_vecs = fast
        docs = self._docs(views)
        rows = []
        for i in range(len(views)):
            parts = [f.row(docs[k][i]) for k, f in self._fast_vecs]
            rows.append((np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])))
        return rows

    def _docs(self, views: Sequence[logs.LogView],
              template_lines: Sequence[list[str]] | None = None) -> dict[str, list[str]]:
        """Each block's document per view (``template_lines``: the views' template lines when
        already computed, as ``fit`` has them)."""
        assert self.templates is not None
        fatal = [_fatal_text(v) for v in views]
        tpl = template_lines if template_lines is not None else [_template_lines(v) for v in views]
        return {
            "focus": [_focus_text(v) for v in views],
            "fatal": fatal,
            "chars": fatal,
            "struct": [_struct_tokens(v) for v in views],
            "lex": [_lex_tokens(v) for v in views],
            "tpl": [self.templates.tokens(lines) for lines in tpl],
        }

    def _features(self, views: Sequence[logs.LogView]) -> Any:
        import scipy.sparse as sp

        docs = self._docs(views)
        blocks = [self.vec[k].transform(docs[k]) * BLOCK_WEIGHTS[k] for k in BLOCK_WEIGHTS]
        return sp.hstack(blocks).tocsr()

    def fit(self, views: Sequence[logs.LogView], labels: Sequence[str],
            groups: Sequence[str] | None = None, weights: Sequence[float] | None = None) -> SvmModel:
        """Learn the templates, the block vectorizers and the calibrated SVM from ``views``."""
        from gpulens.extras import require

        require("sklearn")
        tpl_lines = [_template_lines(v) for v in views]  # masked once: mining and the tpl block
        self.templates = TemplateSet().fit(ln for lines in tpl_lines for ln in lines)
        self.vec = _vectorizers()
        x = self._fit_blocks(self._docs(views, tpl_lines), len(views))
        self._fit_svm(x, labels, groups, weights)
        return self

    def _fit_blocks(self, docs: dict[str, list[str]], n: int) -> Any:
        """Fit every block's vectorizer on its documents; the weighted blocks side by side (CSR)."""
        import scipy.sparse as sp

        blocks = {}
        for k, vec in self.vec.items():
            # fit_transform: the documents are analyzed once (fit, then transform, read them twice);
            # "t0" (an empty tpl vocabulary would fail) is a row of its own, dropped
            blocks[k] = vec.fit_transform(docs[k] + (["t0"] if k == "tpl" else []))[:n]
            if hasattr(vec, "stop_words_"):
                del vec.stop_words_  # only needed for introspection; large in a pickle
        return sp.hstack([blocks[k] * BLOCK_WEIGHTS[k] for k in BLOCK_WEIGHTS]).tocsr()

    def _fit_svm(self, x: Any, labels: Sequence[str], groups: Sequence[str] | None,
                 weights: Sequence[float] | None) -> None:
        """Fit the LinearSVC, calibrated (sigmoid) when every class has at least two examples."""
        import numpy as np
        from sklearn.calibration import CalibratedClassifierCV
        from sklearn.svm import LinearSVC

        y = np.asarray(labels)
        _, counts = np.unique(y, return_counts=True)
        # random_state: liblinear's dual solver visits examples in a random order; unseeded, two
        # trainings on the same corpus gave different weights (and answers near a threshold)
        svm = LinearSVC(class_weight="balanced", C=SVM_C, max_iter=10000, random_state=0)
        folds = int(min(3, counts.min()))
        sample_weight = None if weights is None else np.asarray(weights, dtype=float)
        if folds >= 2:
            cv = _calibration_folds(x, y, groups, folds)
            self.clf = CalibratedClassifierCV(svm, method="sigmoid", cv=cv).fit(x, y, sample_weight=sample_weight)
            self.classes = [str(c) for c in self.clf.classes_]
            self.fast = LinearCalibrated(self.clf, self.classes)
        else:  # too few examples of some class to calibrate: softmax of the margins
            self.clf = svm.fit(x, y, sample_weight=sample_weight)
            self.classes = [str(c) for c in self.clf.classes_]

    def predict_proba(self, views: Sequence[logs.LogView]) -> list[dict[str, float]]:
        import numpy as np

        if self.fast is not None:
            p = self.fast.predict_rows(self._fast_rows(views))
            return [dict(zip(self.classes, map(float, row), strict=True)) for row in p]
        x = self._features(views)
        if hasattr(self.clf, "predict_proba"):
            p = self.clf.predict_proba(x)
        else:
            d = np.atleast_2d(self.clf.decision_function(x))
            e = np.exp(3 * (d - d.max(axis=1, keepdims=True)))
            p = e / e.sum(axis=1, keepdims=True)
        return [dict(zip(self.classes, map(float, row), strict=True)) for row in p]


def train_model(entries: Sequence[CorpusEntry], corpus_dir: str | Path, *, with_real: bool = True,
                with_contexts: bool = False, skip_projects: Iterable[str] = ()) -> SvmModel:
    """Fit the SVM on corpus entries plus, with ``with_real``, the real-world logs of
    ``<corpus_dir>/real/`` and, with ``with_contexts``, the whole logs' error contexts of
    ``<corpus_dir>/contexts/`` (bounded reading, like classify_file), leaving out the real logs and
    contexts of ``skip_projects`` (lower-cased names; out-of-sample evaluation)."""
    root = Path(corpus_dir)
    entries = list(entries)
    have = {e.file for e in entries}
    skip = {p.lower() for p in skip_projects}
    extra = (load_real_corpus(root) if with_real else []) + (load_context_corpus(root) if with_contexts else [])
    entries += [e for e in extra if e.file not in have and e.project.lower() not in skip]
    views = [logs.analyze(bound_text(logs.read_log(root / e.file).text)) for e in entries]
    weights = [CONTEXT_WEIGHT if e.file.startswith(CONTEXTS_SUBDIR + "/") else 1.0 for e in entries]
    return SvmModel().fit(views, [e.category for e in entries], groups=[e.family for e in entries],
                          weights=weights if any(w != 1.0 for w in weights) else None)


def stored_or_trained(store: ModelStore | None, name: str, train: Callable[[], SvmModel]) -> SvmModel:
    """The model ``name`` from ``store`` if it decodes in this version (else rejected there), or
    ``train()``'s, then stored under ``name`` (kept in memory only when the store cannot take it)."""
    blocks = list(BLOCK_WEIGHTS)
    blob = store.load(name) if store is not None else None
    if store is not None and blob is not None:
        try:
            return svmcodec.decode(blob, blocks, SvmModel, LinearCalibrated)
        except (KeyError, ValueError, TypeError, IndexError, AttributeError) as exc:
            store.reject(name, f"stored model {name} does not fit this version ({exc})")
    model = train()
    if store is not None:
        try:
            store.save(name, svmcodec.encode(model, blocks))
        except (OSError, ValueError):
            pass  # no writable cache, or a model the codec cannot store: keep it in memory
    return model
