"""Leave-project-out evaluation of the whole logs' error contexts (``sample_logs/contexts/``).

5 folds grouped by project (``StratifiedGroupKFold``, stratified by category, seed 0). In each fold
the SVM is trained on the generated logs, every real excerpt and the contexts of the other folds
(``with contexts``), or on the generated logs and excerpts alone (``excerpts only``, the model of
before); the held-out contexts are then classified by the SVM alone (its top class) and by rules +
SVM as the whole-log reader calls them (``keep_final``). Prints one table (markdown).

    .venv/bin/python -m scripts.eval_contexts
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Sequence

from gpulens.diagnosis import logs
from gpulens.diagnosis.classifier import Classifier
from gpulens.diagnosis.corpus import (
    CORPUS_DIR,
    CorpusEntry,
    load_context_corpus,
    load_corpus,
    load_real_corpus,
)
from gpulens.diagnosis.logread.evaluate import macro_f1
from gpulens.diagnosis.svm import SvmModel, bound_text

__all__ = ["main"]

FOLDS = 5
SEED = 0


def _score(name: str, y: Sequence[str], pred: Sequence[str]) -> str:
    right = sum(a == b for a, b in zip(y, pred, strict=True))
    unk = sum(p == "unknown" for p in pred)
    return f"| {name} | {len(y)} | {macro_f1(list(zip(y, pred, strict=True))):.3f} | {right}/{len(y)} | {unk} |"


def main() -> int:
    from sklearn.model_selection import StratifiedGroupKFold

    ctx = load_context_corpus(CORPUS_DIR)
    base = load_corpus(CORPUS_DIR) + load_real_corpus(CORPUS_DIR)
    read = {e.file: logs.analyze(bound_text(logs.read_log(CORPUS_DIR / e.file).text)) for e in base + ctx}
    texts = [(CORPUS_DIR / e.file).read_text(encoding="utf-8") for e in ctx]
    y = [e.category for e in ctx]
    rules = Classifier(model=None, cache_dir=None).rules

    def fit(entries: list[CorpusEntry]) -> SvmModel:
        return SvmModel().fit([read[e.file] for e in entries], [e.category for e in entries],
                              groups=[e.family for e in entries])

    before = fit(base)
    preds: dict[str, list[str]] = {k: [""] * len(ctx) for k in ("svm0", "comb0", "svm1", "comb1", "rules")}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        folds = list(StratifiedGroupKFold(FOLDS, shuffle=True, random_state=SEED).split(y, y, [e.project for e in ctx]))
    for train, test in folds:
        after = fit(base + [ctx[i] for i in train])
        for tag, model in (("0", before), ("1", after)):
            clf = Classifier(rules=rules, model=model, cache_dir=None)
            proba = model.predict_proba([read[ctx[i].file] for i in test])
            for i, p in zip(test, proba, strict=True):
                preds["svm" + tag][i] = max(p.items(), key=lambda kv: kv[1])[0]
                preds["comb" + tag][i] = clf.classify_text(texts[i], keep_final=True).category
        norules = Classifier(rules=rules, model=None, cache_dir=None)
        for i in test:
            preds["rules"][i] = norules.classify_text(texts[i], keep_final=True).category
    print(f"{len(ctx)} contexts from {len({e.project.lower() for e in ctx})} projects, {FOLDS} folds grouped by project")
    print("| classifier | contexts | macro-F1 | right | `unknown` |")
    print("| --- | ---: | ---: | ---: | ---: |")
    print(_score("rules only", y, preds["rules"]))
    print(_score("SVM only, excerpts only", y, preds["svm0"]))
    print(_score("SVM only, excerpts + other folds' contexts", y, preds["svm1"]))
    print(_score("rules + SVM, excerpts only", y, preds["comb0"]))
    print(_score("rules + SVM, excerpts + other folds' contexts", y, preds["comb1"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
