"""Honest evaluation of the log classifier (``gpulens diagnose --evaluate``).

The headline is **leave-project-out on real logs**: ``sample_logs/real/`` holds logs users
posted in public issue trackers, each tagged with its project. Folds are
``StratifiedGroupKFold`` grouped by project (every log of a project is on the same side),
stratified by category, seed fixed. For each fold the SVM is retrained on the other folds'
real logs plus every generated log; rules are fixed data. Reported per class and per origin:
rules only, SVM only, and the combined classifier, with the confusion matrix.

Caveat on the rules: they were written while looking at the real corpus's ``dev`` split, so on
dev logs "rules" are in-sample. The ``holdout`` split (projects chosen by hash, never looked at
to write rules) is therefore reported on its own too: SVM trained on dev real logs + generated
logs, rules as shipped, tested on holdout logs only. That is the clean out-of-sample number.

Generated logs (``sample_logs/*/``, produced here) are reported separately (folds grouped by
generator family, SVM trained on the other families plus all real logs); the hand-written
hold-out fixtures likewise. The only in-sample figure (trained and tested on the same logs) is
labelled as such.
"""

from __future__ import annotations

import csv
import dataclasses
import warnings
from collections.abc import Callable, Sequence
from datetime import date
from pathlib import Path

from gpulens.diagnosis import logs
from gpulens.diagnosis.classifier import Classifier, _finish, _Pick
from gpulens.diagnosis.corpus import CORPUS_DIR, CorpusEntry, load_corpus, load_real_corpus
from gpulens.diagnosis.svm import SvmModel, bound_text
from gpulens.diagnosis.types import CATEGORIES, DEFAULT_ORIGIN, ORIGINS, Diagnosis
from gpulens.errors import InputError

__all__ = ["EvalResult", "HOLDOUT_DIR", "Run", "evaluate", "render_markdown", "SECTIONS_START", "with_later_sections", "write_report"]

HOLDOUT_DIR = Path(__file__).resolve().parents[2] / "tests" / "diagnosis" / "fixtures" / "holdout"
FOLDS = 5
SEED = 0


@dataclasses.dataclass
class Run:
    """Predictions of one classifier variant on one set of logs."""

    name: str
    y_true: list[str]
    y_pred: list[str]
    o_true: list[str] = dataclasses.field(default_factory=list)
    o_pred: list[str] = dataclasses.field(default_factory=list)

    def macro_f1(self) -> float:
        from sklearn.metrics import f1_score

        if not self.y_true:
            return 0.0
        labels = sorted(set(self.y_true))
        return float(f1_score(self.y_true, self.y_pred, labels=labels, average="macro", zero_division=0))

    def accuracy(self) -> float:
        return sum(a == b for a, b in zip(self.y_true, self.y_pred, strict=True)) / max(1, len(self.y_true))

    def origin_accuracy(self) -> float | None:
        if not self.o_true:
            return None
        return sum(a == b for a, b in zip(self.o_true, self.o_pred, strict=True)) / len(self.o_true)

    def abstained(self) -> int:
        return sum(p == "unknown" for p in self.y_pred)

    def subset(self, keep: Sequence[bool], name: str | None = None) -> Run:
        pick = [i for i, k in enumerate(keep) if k]
        return Run(name or self.name, [self.y_true[i] for i in pick], [self.y_pred[i] for i in pick],
                   [self.o_true[i] for i in pick] if self.o_true else [],
                   [self.o_pred[i] for i in pick] if self.o_pred else [])


@dataclasses.dataclass
class EvalResult:
    n_real: int
    n_projects: int
    n_generated: int
    folds: int
    seed: int
    lpo: list[Run]  # rules only, SVM only, combined (leave-project-out, all real logs)
    holdout: list[Run]  # rules only, SVM only, combined (train dev + generated, test holdout)
    generated: list[Run]  # rules only, SVM only, combined (generated logs, family folds)
    handwritten: Run | None
    in_sample: Run  # combined, trained on every log, tested on the real logs (in-sample)
    real: list[CorpusEntry]
    misses: list[tuple[str, str, str]]  # file, true, predicted (leave-project-out, combined)


def _views(paths: list[Path]) -> list[logs.LogView]:
    return [logs.analyze(bound_text(logs.read_log(p).text)) for p in paths]


def _svm_only(view: logs.LogView, proba: dict[str, float]) -> Diagnosis:
    """The model's top class as the answer (no rules, no threshold), origin from the evidence."""
    cat = max(proba.items(), key=lambda kv: kv[1])[0]
    d = Diagnosis(cat, DEFAULT_ORIGIN[cat], proba[cat], method="svm",
                  evidence=list(view.exception_lines[-3:]))
    return _finish(view, d, _Pick(None, [], False))


def _rules_only(clf: Classifier, view: logs.LogView) -> Diagnosis:
    return clf.classify_view(view)


class _Collect:
    def __init__(self, n: int) -> None:
        self.cat = {k: [""] * n for k in ("rules", "svm", "combined")}
        self.org = {k: [""] * n for k in ("rules", "svm", "combined")}

    def put(self, kind: str, i: int, d: Diagnosis) -> None:
        self.cat[kind][i] = d.category
        self.org[kind][i] = d.origin

    def runs(self, y: list[str], o: list[str], where: str) -> list[Run]:
        names = {"rules": "rules only", "svm": "SVM only", "combined": "rules + SVM"}
        return [Run(f"{names[k]} ({where})", y, self.cat[k], o, self.org[k]) for k in names]


def _fit(views: list[logs.LogView], entries: list[CorpusEntry]) -> SvmModel:
    return SvmModel().fit(views, [e.category for e in entries], groups=[e.family for e in entries])


def _predict(model: SvmModel | None, views: list[logs.LogView], idx: Sequence[int],
             out: _Collect, rules: Classifier) -> None:
    sub = [views[i] for i in idx]
    for i, v in zip(idx, sub, strict=True):
        out.put("rules", i, _rules_only(rules, v))
    if model is None:
        return
    clf = Classifier(rules=rules.rules, model=model, cache_dir=None)
    for i, v, d, p in zip(idx, sub, clf.classify_views(sub), model.predict_proba(sub), strict=True):
        out.put("combined", i, d)
        out.put("svm", i, _svm_only(v, p))


def _splits(y: list[str], groups: list[str], folds: int, seed: int) -> list[tuple[list[int], list[int]]]:
    from sklearn.model_selection import StratifiedGroupKFold

    with warnings.catch_warnings():  # a class with fewer groups than folds is expected
        warnings.simplefilter("ignore", UserWarning)
        cv = StratifiedGroupKFold(n_splits=folds, shuffle=True, random_state=seed)
        return [(list(a), list(b)) for a, b in cv.split(y, y, groups)]


class _Ticker:
    """Counts finished steps and reports each to ``progress(step, total)``."""

    def __init__(self, total: int, progress: Callable[[int, int], None] | None) -> None:
        self.total = total
        self.step = 0
        self.progress = progress

    def __call__(self) -> None:
        self.step += 1
        if self.progress:
            self.progress(self.step, self.total)


@dataclasses.dataclass
class _Corpus:
    """The real and generated logs with their views, and the classifier's rules."""

    real: list[CorpusEntry]
    gen: list[CorpusEntry]
    rv: list[logs.LogView]
    gv: list[logs.LogView]
    rules: Classifier

    @property
    def y(self) -> list[str]:
        return [e.category for e in self.real]

    @property
    def o(self) -> list[str]:
        return [e.origin for e in self.real]


def _load(root: Path) -> _Corpus:
    """Both corpora under ``root``, analyzed; InputError when there is no real corpus."""
    real = load_real_corpus(root)
    gen = load_corpus(root)
    if not real:
        raise InputError(f"No real-world corpus at {root}/real/index.csv.",
                         "Pass the directory that holds sample_logs (with its real/ subdirectory).")
    rv = _views([root / e.file for e in real])
    gv = _views([root / e.file for e in gen])
    return _Corpus(real, gen, rv, gv, Classifier(model=None, cache_dir=None))


def _leave_project_out(c: _Corpus, folds: int, seed: int, tick: _Ticker) -> _Collect:
    """Step 1: every real log predicted by an SVM trained without its project's logs."""
    lpo = _Collect(len(c.real))
    for train, test in _splits(c.y, [e.project for e in c.real], folds, seed):
        model = _fit([c.rv[i] for i in train] + c.gv, [c.real[i] for i in train] + c.gen)
        _predict(model, c.rv, test, lpo, c.rules)
        tick()
    return lpo


def _dev_to_holdout(c: _Corpus, tick: _Ticker) -> list[Run]:
    """Step 2: the holdout-split logs, SVM trained on the dev logs (rules were written from dev logs only)."""
    dev = [i for i, e in enumerate(c.real) if e.split != "holdout"]
    hold = [i for i, e in enumerate(c.real) if e.split == "holdout"]
    ho = _Collect(len(c.real))
    model = _fit([c.rv[i] for i in dev] + c.gv, [c.real[i] for i in dev] + c.gen)
    _predict(model, c.rv, hold, ho, c.rules)
    tick()
    return [r.subset([e.split == "holdout" for e in c.real]) for r in ho.runs(c.y, c.o, "holdout split")]


def _generated_folds(c: _Corpus, folds: int, seed: int, tick: _Ticker) -> list[Run]:
    """Step 3: generated logs, folds grouped by generator family, SVM also trained on every real log."""
    gy = [e.category for e in c.gen]
    go = [e.origin for e in c.gen]
    gc = _Collect(len(c.gen))
    for train, test in _splits(gy, [e.family for e in c.gen], folds, seed) if c.gen else []:
        model = _fit([c.gv[i] for i in train] + c.rv, [c.gen[i] for i in train] + c.real)
        _predict(model, c.gv, test, gc, c.rules)
        tick()
    return gc.runs(gy, go, "generated logs")


def _shipped_model(c: _Corpus, holdout_dir: str | Path | None, tick: _Ticker) -> tuple[Run, Run | None]:
    """Step 4: the model trained on every log, in-sample on the real logs and on the hand-written logs."""
    full = _fit(c.rv + c.gv, c.real + c.gen)
    clf = Classifier(rules=c.rules.rules, model=full, cache_dir=None)
    ins = Run("rules + SVM, IN-SAMPLE (trained on these logs)", c.y, [d.category for d in clf.classify_views(c.rv)],
              c.o, [d.origin for d in clf.classify_views(c.rv)])
    hand = None
    hdir = Path(holdout_dir) if holdout_dir else HOLDOUT_DIR
    if (hdir / "labels.csv").is_file():
        with (hdir / "labels.csv").open(newline="") as fh:
            rows = list(csv.DictReader(fh))
        hv = _views([hdir / r["file"] for r in rows])
        hand = Run("rules + SVM (hand-written logs)", [r["category"] for r in rows],
                   [d.category for d in clf.classify_views(hv)])
    tick()
    return ins, hand


def evaluate(corpus_dir: str | Path | None = None, *, folds: int = FOLDS, seed: int = SEED,
             holdout_dir: str | Path | None = None,
             progress: Callable[[int, int], None] | None = None) -> EvalResult:
    """Leave-project-out on the real corpus, the dev -> holdout split, and the generated logs."""
    from gpulens.extras import require

    require("sklearn")
    c = _load(Path(corpus_dir) if corpus_dir else CORPUS_DIR)
    tick = _Ticker(folds * 2 + 2, progress)
    lpo = _leave_project_out(c, folds, seed, tick)
    holdout_runs = _dev_to_holdout(c, tick)
    generated = _generated_folds(c, folds, seed, tick)
    ins, hand = _shipped_model(c, holdout_dir, tick)
    y = c.y
    runs = lpo.runs(y, c.o, "leave-project-out")
    combined = runs[2]
    misses = [(e.file, y[i], combined.y_pred[i]) for i, e in enumerate(c.real) if combined.y_pred[i] != y[i]]
    return EvalResult(
        n_real=len(c.real), n_projects=len({e.project for e in c.real}), n_generated=len(c.gen), folds=folds,
        seed=seed, lpo=runs, holdout=holdout_runs, generated=generated,
        handwritten=hand, in_sample=ins, real=c.real, misses=misses,
    )


# --------------------------------------------------------------------------- report


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def _table(runs: Sequence[Run]) -> list[str]:
    out = ["| classifier | logs | macro-F1 | accuracy | origin accuracy | answered `unknown` |",
           "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for r in runs:
        if not r.y_true:
            continue
        out.append(f"| {r.name} | {len(r.y_true)} | {r.macro_f1():.3f} | {r.accuracy():.3f} | "
                   f"{_fmt(r.origin_accuracy())} | {r.abstained()} |")
    return out


def _per_class(runs: Sequence[Run]) -> list[str]:
    from sklearn.metrics import precision_recall_fscore_support

    labels = [c for c in CATEGORIES if c in set(runs[0].y_true)]
    head = "| category | logs | " + " | ".join(f"{r.name.split(' (')[0]} P | R | F1" for r in runs) + " |"
    out = [head, "| --- | ---: |" + " ---: | ---: | ---: |" * len(runs)]
    stats = [precision_recall_fscore_support(r.y_true, r.y_pred, labels=labels, zero_division=0) for r in runs]
    for k, lab in enumerate(labels):
        cells = " | ".join(f"{p[k]:.2f} | {rc[k]:.2f} | {f[k]:.2f}" for p, rc, f, _ in stats)
        out.append(f"| {lab} | {stats[0][3][k]} | {cells} |")
    return out


def _per_origin(runs: Sequence[Run]) -> list[str]:
    labels = [o for o in ORIGINS if o in set(runs[0].o_true)]
    out = ["| true origin | logs | " + " | ".join(r.name.split(" (")[0] for r in runs) + " |",
           "| --- | ---: |" + " ---: |" * len(runs)]
    for lab in labels:
        idx = [i for i, t in enumerate(runs[0].o_true) if t == lab]
        cells = " | ".join(f"{sum(r.o_pred[i] == lab for i in idx) / len(idx):.2f}" for r in runs)
        out.append(f"| {lab} | {len(idx)} | {cells} |")
    return out


def _confusion(run: Run, labels: list[str]) -> list[str]:
    from sklearn.metrics import confusion_matrix

    cm = confusion_matrix(run.y_true, run.y_pred, labels=labels)
    short = [lab[:8] for lab in labels]
    out = ["| true \\ predicted | " + " | ".join(short) + " |", "| --- |" + " ---: |" * len(labels)]
    for lab, row in zip(labels, cm, strict=True):
        out.append(f"| {lab} | " + " | ".join(str(int(x)) if x else "." for x in row) + " |")
    return out


def _reading(res: EvalResult) -> str:
    rules, _, comb = res.lpo
    h_rules, _, h_comb = res.holdout
    target = comb.macro_f1() >= 0.92 and (comb.origin_accuracy() or 0) >= 0.90
    h_target = h_comb.macro_f1() >= 0.92 and (h_comb.origin_accuracy() or 0) >= 0.90
    return (
        f"Reading: leave-project-out, rules + SVM reach macro-F1 {comb.macro_f1():.3f} and origin accuracy "
        f"{_fmt(comb.origin_accuracy())} ({'meets' if target else 'below'} the issue's bar of 0.92 / 0.90), "
        f"but the rules are in-sample on the dev logs it includes. On the holdout split, out-of-sample for "
        f"rules and SVM alike, they reach {h_comb.macro_f1():.3f} / {_fmt(h_comb.origin_accuracy())} "
        f"({'meets' if h_target else 'below'} the bar): the figure to expect on new logs. The SVM adds "
        f"{100 * (comb.macro_f1() - rules.macro_f1()):+.1f} points of macro-F1 over the rules alone "
        f"leave-project-out and {100 * (h_comb.macro_f1() - h_rules.macro_f1()):+.1f} on the holdout split."
    )


def _intro(res: EvalResult) -> list[str]:
    """The title, how the report was made, and what the corpus holds."""
    return [
        "# Diagnosis classifier: honest evaluation",
        "",
        f"Generated by `gpulens diagnose --evaluate --report docs/diagnosis-evaluation.md` on "
        f"{date.today().isoformat()} (seed {res.seed}; the numbers are deterministic for a given corpus and code).",
        "",
        f"Corpus: **{res.n_real} real logs** from {res.n_projects} public projects (`sample_logs/real/`, logs users "
        f"posted in issue trackers, labelled by the root cause of the final failure) and {res.n_generated} "
        "generated logs (`sample_logs/<category>/`, produced or written here), reported separately.",
        "",
    ]


def _headline(res: EvalResult) -> list[str]:
    """Leave-project-out (with the holdout-split and unambiguous subsets) and dev -> holdout, with the reading."""
    comb = res.lpo[2]
    is_hold = [e.split == "holdout" for e in res.real]
    clear = [not e.ambiguous for e in res.real]
    return [
        "## Headline: leave-project-out on the real logs",
        "",
        f"{res.folds}-fold `StratifiedGroupKFold` grouped by project (every log of a project is on one side), "
        "stratified by category. In each fold the SVM is retrained on the other folds' real logs plus every "
        "generated log. The rules are fixed data; they were written from the real corpus's `dev` split, so on "
        "the dev logs they are in-sample (see the holdout rows and the next section for the clean number).",
        "",
        *_table([*res.lpo, comb.subset(is_hold, "rules + SVM, leave-project-out, holdout-split logs only"),
                 comb.subset(clear, "rules + SVM, leave-project-out, logs not marked ambiguous")]),
        "",
        "## Out-of-sample for the rules too: dev -> holdout",
        "",
        "Rules as shipped (written from dev logs only), SVM trained on the dev real logs plus the generated logs, "
        "tested on the holdout-split logs (projects chosen by hash, not looked at while writing rules).",
        "",
        *_table(res.holdout),
        "",
        _reading(res),
        "",
    ]


def _breakdowns(res: EvalResult) -> list[str]:
    """Per class, per origin, the confusion matrix, the generated logs and the in-sample figure."""
    comb = res.lpo[2]
    labels = [c for c in CATEGORIES if c in set(comb.y_true)]
    return [
        "## Per class (leave-project-out)",
        "",
        *_per_class(res.lpo),
        "",
        "## Per origin (leave-project-out): share of each true origin answered correctly",
        "",
        *_per_origin(res.lpo),
        "",
        "## Confusion matrix, rules + SVM (leave-project-out; rows: true, columns: predicted)",
        "",
        *_confusion(comb, labels),
        "",
        "## Generated logs (produced here; folds grouped by generator family)",
        "",
        *_table(res.generated + ([res.handwritten] if res.handwritten else [])),
        "",
        "## In-sample (for reference only)",
        "",
        *_table([res.in_sample]),
        "",
    ]


def _misses(res: EvalResult) -> list[str]:
    """The real logs the combined classifier got wrong leave-project-out, as a table (or "None.")."""
    out = ["## Misclassified real logs (leave-project-out, rules + SVM)", ""]
    if res.misses:
        out += ["| file | true | predicted |", "| --- | --- | --- |"]
        out += [f"| `{f}` | {t} | {p} |" for f, t, p in res.misses]
    else:
        out.append("None.")
    return out


def render_markdown(res: EvalResult) -> str:
    """The evaluation report as Markdown."""
    return "\n".join([*_intro(res), *_headline(res), *_breakdowns(res), *_misses(res)]) + "\n"


#: Where the report's later sections begin (the whole-log section, written by ``--whole-logs``, and the
#: hand-written notes after it): a new excerpt report replaces what comes before it and keeps the rest.
SECTIONS_START = "<!-- whole-log section: start -->"


def write_report(path: str | Path, res: EvalResult | None = None) -> EvalResult:
    """Write the excerpt report to ``path``, keeping the sections the file already holds after it."""
    res = res or evaluate()
    p = Path(path)
    old = p.read_text(encoding="utf-8") if p.is_file() else ""
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(with_later_sections(render_markdown(res), old), encoding="utf-8")
    return res


def with_later_sections(report: str, old: str) -> str:
    """``report`` followed by what ``old`` holds from :data:`SECTIONS_START` on (nothing when it has none)."""
    if SECTIONS_START not in old:
        return report
    return report.rstrip("\n") + "\n\n" + SECTIONS_START + old.split(SECTIONS_START, 1)[1]
