"""Evaluate whole-log diagnosis on the labelled whole-log corpus (``sample_logs/whole/``).

The classifier learns from the excerpt corpus and from error contexts cut from the dev-split whole
logs (``sample_logs/contexts/``, no holdout project among them). So that every whole log stays out
of sample for it, a dev log is diagnosed with a model trained without its fold's projects (the 5
folds below, grouped by project); a holdout log with the shipped model, which never saw a holdout
project. The one value chosen on whole logs, the confidence
below which a model-decided answer becomes ``unknown``, is chosen out of sample: 5 folds
grouped by project, each fold's threshold picked on the other folds' dev rows. The ``holdout`` split
(projects chosen by hash) is reported on its own and never used to choose anything.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import os
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from gpulens.diagnosis.classifier import Classifier, model_without, whole_classifier
from gpulens.diagnosis.corpus import load_context_corpus
from gpulens.diagnosis.evaluate import SECTIONS_START
from gpulens.diagnosis.logread.calibration import Calibration, calibrates, fit
from gpulens.diagnosis.logread.whole import WholeDiagnosis, diagnose_path
from gpulens.errors import InputError
from gpulens.vocab import NO_FAILURE

__all__ = ["END", "FOLDS", "FRESH_SLICES", "INDEX_DIR", "LINE_SLACK", "SOURCES", "START", "THRESHOLDS", "Case", "Figures",
           "WholeEval", "calibrated", "calibration_table", "choose_thresholds", "evaluate_whole", "figures", "load_index",
           "macro_f1", "reliability", "render_section", "source_of", "sources", "write_section"]

INDEX_DIR = Path(__file__).resolve().parents[3] / "sample_logs" / "whole"
#: Candidate confidence thresholds for model-decided answers (below: ``unknown``).
THRESHOLDS = (0.0, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6)
FOLDS = 5
#: A predicted indicator line counts when it is this close to a labelled one.
LINE_SLACK = 2


@dataclasses.dataclass
class Case:
    """One labelled log and what the diagnosis said about it."""

    row: dict[str, str]
    got: WholeDiagnosis

    @property
    def project(self) -> str:
        return self.row["project"]

    def category(self, threshold: float) -> str:
        d = self.got.diagnosis
        if d.method == "svm" and d.category not in ("unknown", NO_FAILURE) and d.confidence < threshold:
            return "unknown"
        return d.category

    def origin(self, threshold: float) -> str:
        return "unknown" if self.category(threshold) == "unknown" and self.got.diagnosis.category != "unknown" \
            else self.got.diagnosis.origin


def load_index(index_dir: Path = INDEX_DIR) -> list[dict[str, str]]:
    """Every row of ``index*.csv`` in ``index_dir``."""
    rows: list[dict[str, str]] = []
    for path in sorted(index_dir.glob("index*.csv")):
        with path.open(encoding="utf-8", newline="") as fh:
            rows += list(csv.DictReader(fh))
    return rows


def _lines(value: str) -> list[int]:
    return [int(x) for x in value.split()]


@dataclasses.dataclass
class Figures:
    """The evaluation figures of one subset, each with its counts."""

    name: str
    n: int
    normal_called_failed: tuple[int, int]  # (count, normal-end logs)
    healthy_accuracy: tuple[int, int]
    category_macro_f1: float
    category_accuracy: tuple[int, int]
    failed_category_accuracy: tuple[int, int]
    origin_accuracy: tuple[int, int]
    line_precision: tuple[int, int]
    line_recall: tuple[int, int]
    first_rank_node: tuple[int, int]
    phase_accuracy: tuple[int, int]
    unknown_answers: int

    @property
    def line_f1(self) -> float:
        p = _ratio(self.line_precision)
        r = _ratio(self.line_recall)
        return 2 * p * r / (p + r) if p + r else 0.0


def _ratio(x: tuple[int, int]) -> float:
    return x[0] / x[1] if x[1] else 0.0


def macro_f1(pairs: Sequence[tuple[str, str]]) -> float:
    labels = sorted({t for t, _ in pairs})
    f1s = []
    for c in labels:
        tp = sum(1 for t, p in pairs if t == c and p == c)
        fp = sum(1 for t, p in pairs if t != c and p == c)
        fn = sum(1 for t, p in pairs if t == c and p != c)
        f1s.append(2 * tp / (2 * tp + fp + fn) if tp else 0.0)
    return sum(f1s) / len(f1s) if f1s else 0.0


def _line_hits(cases: Sequence[Case]) -> tuple[tuple[int, int], tuple[int, int]]:
    """((predicted lines near a labelled one, predicted), (labelled lines found, labelled)) on
    the failed logs."""
    tp_p = n_p = tp_r = n_r = 0
    for c in cases:
        if c.row["ended_normally"] == "yes":
            continue
        want = _lines(c.row["indicator_lines"])
        got = c.got.indicator_lines
        n_p += len(got)
        n_r += len(want)
        tp_p += sum(1 for g in got if any(abs(g - w) <= LINE_SLACK for w in want))
        tp_r += sum(1 for w in want if any(abs(g - w) <= LINE_SLACK for g in got))
    return (tp_p, n_p), (tp_r, n_r)


def _rank_node(cases: Sequence[Case]) -> tuple[int, int]:
    """Logs whose label names a first rank or node: how many the diagnosis named right (the
    rank when labelled, else the node)."""
    right = total = 0
    for c in cases:
        rank, node = c.row["first_rank"], c.row["first_node"]
        if c.row["ended_normally"] == "yes" or not (rank or node):
            continue
        total += 1
        if rank and c.got.first_rank is not None and str(c.got.first_rank) == rank:
            right += 1
        elif not rank and node and c.got.first_node and node.split(".")[0] == c.got.first_node.split(".")[0]:
            right += 1
    return right, total


def figures(name: str, cases: Sequence[Case], thresholds: dict[str, float]) -> Figures:
    """The figures of ``cases``, each answered with its fold's threshold."""
    normal = [c for c in cases if c.row["ended_normally"] == "yes"]
    failed = [c for c in cases if c.row["ended_normally"] != "yes"]
    cat = [(c.row["category"], c.category(thresholds[c.project])) for c in cases]
    org = [(c.row["origin"], c.origin(thresholds[c.project])) for c in cases]
    precision, recall = _line_hits(cases)
    return Figures(
        name=name, n=len(cases),
        normal_called_failed=(sum(1 for c in normal if c.got.diagnosis.category != NO_FAILURE), len(normal)),
        healthy_accuracy=(sum(1 for c in cases if (c.row["ended_normally"] == "yes")
                              == (c.got.diagnosis.category == NO_FAILURE)), len(cases)),
        category_macro_f1=macro_f1(cat),
        category_accuracy=(sum(1 for t, p in cat if t == p), len(cat)),
        failed_category_accuracy=(sum(1 for c in failed if c.row["category"] == c.category(thresholds[c.project])),
                                  len(failed)),
        origin_accuracy=(sum(1 for t, p in org if t == p), len(org)),
        line_precision=precision, line_recall=recall, first_rank_node=_rank_node(cases),
        phase_accuracy=(sum(1 for c in failed if c.row["phase"] == c.got.phase), len(failed)),
        unknown_answers=sum(1 for _, p in cat if p == "unknown"),
    )


def _folds(projects: Iterable[str], k: int = FOLDS) -> dict[str, int]:
    """Each project's fold (by a hash of its name: every log of a project in one fold)."""
    return {p: int(hashlib.sha256(p.lower().encode()).hexdigest()[8:16], 16) % k for p in set(projects)}


def choose_thresholds(cases: Sequence[Case]) -> dict[str, float]:
    """Per project, the threshold chosen on the dev rows of the other folds (right categories; on a
    tie the highest, the most cautious: an ``unknown`` is better than a guess that did not help).
    Not macro-F1: it counts an ``unknown`` answer as a false positive of the rare class ``unknown``
    (5 of 384 dev labels) and so prefers a wrong guess in a frequent class to no guess. Holdout
    rows get their fold's threshold but never choose one."""
    fold = _folds(c.project for c in cases)
    dev = [c for c in cases if c.row["split"] == "dev"]
    out: dict[str, float] = {}
    for f in range(FOLDS):
        train = [c for c in dev if fold[c.project] != f]
        best = max(THRESHOLDS, key=lambda t: (sum(1 for c in train if c.category(t) == c.row["category"]), t))
        out.update({p: best for p, g in fold.items() if g == f})
    return out


def _answer(c: Case, threshold: float) -> tuple[str, float, bool]:
    """(method, stated confidence, category right) of ``c``'s answer."""
    d = c.got.diagnosis
    return d.method, float(d.confidence), c.category(threshold) == c.row["category"]


def calibration_table(cases: Sequence[Case], thresholds: dict[str, float], *, skip_fold: int | None = None) -> Calibration:
    """The calibration table (:mod:`calibration`) fitted on the holdout logs' named answers
    (``unknown`` answers and healthy verdicts without positive evidence are not calibrated:
    :func:`calibration.calibrates`), without the projects of ``skip_fold``."""
    fold = _folds(c.project for c in cases)
    mine = [c for c in cases if c.row["split"] == "holdout" and fold[c.project] != skip_fold
            and _calibrated_answer(c, thresholds[c.project])]
    return fit([_answer(c, thresholds[c.project]) for c in mine],
               fitted_on=f"the named answers on {len(mine)} holdout whole logs of {len({c.project for c in mine})} projects")


def calibrated(cases: Sequence[Case], thresholds: dict[str, float]) -> dict[str, float]:
    """Per log (``file``), its answer's confidence calibrated out of sample: by a table fitted on
    the holdout logs of the other folds (a holdout log's own fold left out; dev logs, in-sample for
    the rules, by the table of their fold's complement too)."""
    fold = _folds(c.project for c in cases)
    tables = {f: calibration_table(cases, thresholds, skip_fold=f) for f in range(FOLDS)}
    return {c.row["file"]: tables[fold[c.project]].confidence(*_answer(c, thresholds[c.project])[:2])
            if _calibrated_answer(c, thresholds[c.project]) else float(c.got.diagnosis.confidence) for c in cases}


def _calibrated_answer(c: Case, threshold: float) -> bool:
    """Whether the table applies to the log's answer (:func:`calibration.calibrates`)."""
    return calibrates(c.category(threshold), float(c.got.diagnosis.confidence))


def reliability(cases: Sequence[Case], thresholds: dict[str, float], bins: int = 10,
                confidences: dict[str, float] | None = None) -> tuple[list[tuple[str, int, float, float]], float]:
    """(rows of (bin, logs, mean confidence, accuracy), expected calibration error) of the
    category answers (healthy included); ``confidences``: per log, in place of the stated one."""
    groups: dict[int, list[tuple[float, bool]]] = defaultdict(list)
    for c in cases:
        pred = c.category(thresholds[c.project])
        stated = float(c.got.diagnosis.confidence) if confidences is None else confidences[c.row["file"]]
        conf = stated if pred != "unknown" else 0.0
        groups[min(bins - 1, int(conf * bins))].append((conf, pred == c.row["category"]))
    rows = []
    ece = 0.0
    total = sum(len(g) for g in groups.values())
    for b in sorted(groups):
        g = groups[b]
        mean_conf = sum(x for x, _ in g) / len(g)
        acc = sum(1 for _, ok in g if ok) / len(g)
        ece += len(g) / total * abs(mean_conf - acc)
        rows.append((f"{b / bins:.1f}-{(b + 1) / bins:.1f}", len(g), mean_conf, acc))
    return rows, ece


#: Who decided an answer (:func:`sources`), in report order.
SOURCES = ("normal end", "rules", "model", "unknown")


def source_of(case: Case, threshold: float) -> str:
    """Who decided ``case``'s answer: ``normal end`` (the reader's completion evidence), ``model``
    (the SVM answered, or overruled a generic rule, at or above ``threshold``), ``unknown`` (no
    cause named: nothing matched, only secondary messages, or a model guess below the
    threshold), else ``rules`` (a signature rule or the reader's own decision)."""
    d = case.got.diagnosis
    if d.category == NO_FAILURE:
        return "normal end"
    if case.category(threshold) == "unknown":
        return "unknown"
    return "model" if d.method == "svm" else "rules"


def sources(cases: Sequence[Case], thresholds: dict[str, float]) -> list[tuple[str, int, int, int]]:
    """Per source of the answer (:data:`SOURCES`): (source, logs, category right, origin right)."""
    out = []
    for name in SOURCES:
        mine = [c for c in cases if source_of(c, thresholds[c.project]) == name]
        out.append((name, len(mine), sum(1 for c in mine if c.category(thresholds[c.project]) == c.row["category"]),
                    sum(1 for c in mine if c.origin(thresholds[c.project]) == c.row["origin"])))
    return out


# Slices collected after the reader's rules were written: their rows are the cleanest out-of-sample check.
FRESH_SLICES = (
    ("c/", "index_c.csv (collected after the reader was first written)"),
    ("d/", "index_d.csv (collected 2026-11-26, labelled blind, never read by the reader's authors)"),
    ("e/", "index_e.csv (collected 2026-11-26, multi-rank failures, labelled blind, never read by the reader's authors)"),
    ("f/", "index_f.csv (collected 2026-11-26 after round 1 of the reader's changes, labelled blind)"),
    ("g/", "index_g.csv (collected 2026-11-26 after round 2, Slurm and launcher logs, labelled blind)"),
    ("h/", "index_h.csv (collected 2026-11-26 after round 2, stdout/nohup/wandb captures, labelled blind)"),
    ("i/", "index_i.csv (collected 2026-11-26 after round 3, labelled blind)"),
    ("j/", "index_j.csv (collected 2026-11-26 after round 4, labelled blind)"),
    ("k/", "index_k.csv (collected 2026-11-26 during round 5, labelled blind)"),
    ("l/", "index_l.csv (collected 2026-11-27 during round l, multi-rank focus, labelled blind)"),
    ("m/", "index_m.csv (collected 2026-11-27 during the reader round of that night, labelled blind)"),
    ("n/", "index_n.csv (collected 2026-11-27 during reader round 7, multi-rank failures, labelled blind)"),
    ("o/", "index_o.csv (collected 2026-11-27 during reader round 7, rare failure categories, labelled blind)"),
    ("p/", "index_p.csv (collected 2026-11-27 during reader round 8, Slurm/nohup/pod logs, noisy normal ends, labelled blind)"),
    ("q/", "index_q.csv (collected 2026-11-27 during reader round 8, multi-rank failures, labelled blind)"),
    ("r/", "index_r.csv (collected 2026-11-27 during reader round 9, PBS/LSF/Slurm captures, TF/YOLO/other frameworks, labelled blind)"),
    ("s/", "index_s.csv (collected 2026-11-27 during reader round 9, multi-rank failures, labelled blind)"),
    ("t/", "index_t.csv (collected 2026-11-27 after reader round 9, failures of rare categories and phases, labelled blind)"),
    ("u/", "index_u.csv (collected 2026-11-27 during reader round 10, multi-rank failures, other phases, noisy normal ends, labelled blind)"),
    ("v/", "index_v.csv (collected 2026-11-27 during reader round 10, new owners, failures outside steady training, labelled blind)"),
    ("w/", "index_w.csv (collected 2026-11-27 after reader round 10, new owners, labelled blind)"),
    ("x/", "index_x.csv (collected 2026-11-27 after reader round 13, new owners, labelled blind)"),
    ("y/", "index_y.csv (collected 2026-11-27 after reader round 14, new owners, PaddlePaddle per-rank logs, labelled blind)"),
    ("z/", "index_z.csv (collected 2026-11-27 after reader round 16, new owners, screen/tmux/wandb captures, labelled blind)"),
    ("aa/", "index_aa.csv (collected 2026-11-28 after reader round 19, new owners, framework-written logs and RL runs, labelled blind)"),
    ("ab/", "index_ab.csv (collected 2026-11-28 after reader round 20, new owners, toolkit output folders, versioned research logs, evaluation and vLLM jobs, labelled blind)"),
    ("ac/", "index_ac.csv (collected 2026-11-28 after reader round 22, new owners, GAN/diffusion job folders and shell-redirect captures, labelled blind)"),
    ("ad/", "index_ad.csv (collected 2026-11-28 at the start of stop 44, new owners, scheduler-output, trainer- and paste-named captures, labelled blind)"),
    ("ae/", "index_ae.csv (collected 2026-11-28 during stop 44, new owners, university cluster course and research job folders, labelled blind)"),
    ("af/", "index_af.csv (collected 2026-11-28 at the start of stop 45, new owners, cluster-, cloud- and script-named captures, numbered and rotated logs, labelled blind)"),
    ("ag/", "index_ag.csv (collected 2026-11-28 in stop 48, new owners, scheduler and wrapper outputs under uncommon names, a short round, labelled blind)"),
    ("ah/", "index_ah.csv (collected 2026-11-29 in stop 49, new owners, HPC-centre, wandb-run and toolkit log folders, a short round of normal ends, labelled blind)"),
    ("ai/", "index_ai.csv (collected 2026-11-29 in stop 50, new owners, CV work_dirs, Ray/RL, wandb-run and HPC error-file angles, labelled blind)"),
    ("aj/", "index_aj.csv (collected 2026-11-29 in stop 50, new owners, 3D/medical, RL/graph, LLM serving and generative-model angles, labelled blind)"),
    ("ak/", "index_ak.csv (collected 2026-11-29 in stop 50, new owners, speech, time-series/recsys, NLP fine-tuning and multimodal angles, labelled blind)"),
    ("al/", "index_al.csv (collected 2026-11-29 in stop 51, new owners, scientific ML, robotics/driving, cloud/K8s, toolkit- and launcher-named logs, federated/SSL/remote-sensing angles, labelled blind)"),
    ("am/", "index_am.csv (collected 2026-11-29 in stop 51, new owners, image restoration, voice conversion, spiking/anomaly, video/flow/depth, face/re-ID/tracking, document AI/genomics angles, a short round, labelled blind)"),
    ("an/", "index_an.csv (collected 2026-11-29 in stop 52, new owners, PaddlePaddle, TensorFlow/JAX, compression/NAS, HPC course, continual-learning, LLM pretraining and alignment, inference-deployment, optimizer, interpretability and rented-GPU-cloud angles, labelled blind)"),
    ("ao/", "index_ao.csv (collected 2026-11-29 in stop 53, new owners, image-generation fine-tuning, neural rendering, retrieval, LLM evaluation, ROCm/container, pathology, job-wrapper, multi-node, video, audio, non-English thesis, course, pose/OCR, speedrun, neuroscience and driving-perception angles, labelled blind)"),
    ("ap/", "index_ap.csv (collected 2026-11-29 in stop 54, new owners, trajectory/lane, graph/molecule, recommender, time-series, classic RL, remote-sensing, federated/continual, vision-language, generative-from-scratch, robustness, medical-imaging, competition and speech angles, labelled blind)"),
    ("aq/", "index_aq.csv (collected 2026-11-29 in stop 54, new owners, microscopy, physics, knowledge-graph, tabular/AutoML, self-play, code-LLM, domain-NLP and human-motion angles, a short round cut by the search budget, labelled blind)"),
    ("ar/", "index_ar.csv (collected 2026-11-29 in stop 55, new owners, interatomic-potential, driving, microscopy, LLM-serving, weather/climate, protein/genomics, TTS, sweep/NAS, translation/OCR, framework-named-log and course-cluster angles, labelled blind)"),
    ("as/", "index_as.csv (collected 2026-11-29 in stop 56, new owners, robotics, model-compression, video, biosignal, retrieval, LLM-benchmark, image-restoration/anomaly and efficient-architecture angles, a short round on a session that also rebuilt the corpus, labelled blind)"),
    ("at/", "index_at.csv (collected 2026-11-29 in stop 57, new owners, speech, deep-RL/LLM-RL, graph/molecule, earth-science, 3D-vision, multi-node-HPC and LLM fine-tuning angles, a short round on a session that also rebuilt the corpus, labelled blind)"),
)


@dataclasses.dataclass
class WholeEval:
    cases: list[Case]
    thresholds: dict[str, float]
    seconds: float
    megabytes: float
    missing: int

    def subsets(self) -> list[Figures]:
        c = self.cases
        return [
            figures("all logs (folds grouped by project)", c, self.thresholds),
            figures("holdout split", [x for x in c if x.row["split"] == "holdout"], self.thresholds),
            figures("dev split", [x for x in c if x.row["split"] == "dev"], self.thresholds),
            figures("not marked ambiguous", [x for x in c if x.row["ambiguous"] != "yes"], self.thresholds),
            *[figures(name, fresh, self.thresholds) for prefix, name in FRESH_SLICES
              if (fresh := [x for x in c if x.row["file"].startswith(prefix)])],
        ]


def _fold_classifiers(clf: Classifier, projects: Iterable[str]) -> dict[int, Classifier]:
    """Per fold whose projects gave error contexts to ``clf``'s model: a classifier with the same
    rules and a model trained without those projects' material."""
    if not clf.contexts or clf.model is None:
        return {}
    given = {e.project.lower() for e in load_context_corpus(clf.corpus_dir)}
    out: dict[int, Classifier] = {}
    fold = _folds(projects)
    for f in range(FOLDS):
        skip = {p.lower() for p, g in fold.items() if g == f} & given
        if skip:
            out[f] = Classifier(rules=clf.rules, model=model_without(clf, skip), cache_dir=None)
    return out


def evaluate_whole(root: str | os.PathLike[str], clf: Classifier | None = None, *,
                   progress: Callable[[int, int], None] | None = None, index_dir: Path = INDEX_DIR,
                   cross_fit: bool | None = None) -> WholeEval:
    """Diagnose every indexed log found under ``root`` (``GPULENS_WHOLE_LOGS``) and score it.
    ``cross_fit`` (default: when ``clf`` is the default classifier): each dev log with a model
    trained without the error contexts of its fold's projects."""
    import time

    base = Path(root)
    if not base.is_dir():
        raise InputError(f"whole-log corpus directory {base} does not exist.",
                         "Point --whole-logs (or GPULENS_WHOLE_LOGS) at the rebuilt corpus (sample_logs/whole/README.md).")
    cross_fit = clf is None if cross_fit is None else cross_fit
    clf = clf or whole_classifier()
    rows = load_index(index_dir)
    present = [r for r in rows if (base / r["file"]).is_file()]
    if not present:
        raise InputError(f"none of the {len(rows)} indexed logs is under {base}.",
                         "Rebuild the corpus as sample_logs/whole/README.md says.")
    fold = _folds(r["project"] for r in present)
    by_fold = _fold_classifiers(clf, fold) if cross_fit else {}
    cases: list[Case] = []
    size = 0
    start = time.perf_counter()
    for k, r in enumerate(present):
        size += (base / r["file"]).stat().st_size
        own = by_fold.get(fold[r["project"]], clf) if r["split"] == "dev" else clf
        cases.append(Case(r, diagnose_path(base / r["file"], own, min_confidence=0.0, calibrated=False)))
        if progress is not None:
            progress(k + 1, len(present))
    seconds = time.perf_counter() - start
    return WholeEval(cases, choose_thresholds(cases), seconds, size / 1e6, len(rows) - len(present))


def _pct(x: tuple[int, int]) -> str:
    return f"{_ratio(x):.3f} ({x[0]}/{x[1]})"


def render_section(ev: WholeEval, *, date: str, command: str) -> str:
    """The whole-log section of docs/diagnosis-evaluation.md."""
    subs = ev.subsets()
    out = [
        "## Whole job logs (issue 23)", "",
        f"Generated by `{command}` on {date}. Corpus: {len(ev.cases)} whole logs "
        f"({ev.megabytes:.1f} MB) of `sample_logs/whole/index_*.csv` from "
        f"{len({c.project for c in ev.cases})} projects ({ev.missing} indexed logs missing from the corpus "
        "directory). The classifier learns from the excerpt corpus and from error contexts cut from the dev-split "
        "logs (`sample_logs/contexts/`); each dev log is diagnosed with a model trained without its fold's "
        "projects and no holdout project gave a context, so every figure is out of sample; the confidence threshold below which a model-decided answer becomes "
        "`unknown` is chosen per fold on the other folds' dev rows (5 folds grouped by project; the most right "
        "categories, the highest threshold on a tie). The reader's rules "
        "(completion messages, failure lines, prefixes, attempts) were written from the dev-split logs only; "
        "the holdout row is the check (see the notes below the section for what was seen of it).", "",
        "| subset | logs | normal end called a failure | healthy vs failed | category macro-F1 | category accuracy "
        "| origin accuracy | indicator-line F1 (P / R) | first rank/node | phase | `unknown` |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for f in subs:
        out.append(
            f"| {f.name} | {f.n} | {f.normal_called_failed[0]} of {f.normal_called_failed[1]} | {_pct(f.healthy_accuracy)} "
            f"| {f.category_macro_f1:.3f} | {_pct(f.category_accuracy)} | {_pct(f.origin_accuracy)} "
            f"| {f.line_f1:.3f} ({_pct(f.line_precision)} / {_pct(f.line_recall)}) | {_pct(f.first_rank_node)} "
            f"| {_pct(f.phase_accuracy)} | {f.unknown_answers} |")
    chosen = Counter(ev.thresholds.values())
    out += ["", "Thresholds chosen per fold (projects per value): "
            + ", ".join(f"{t:.2f} ({n})" for t, n in sorted(chosen.items())) + ".", ""]
    out += _reliability_lines(ev)
    out += ["Who decided the answers (each log with its fold's model and threshold; `unknown`: "
            "no cause named, a model guess below the threshold included):", "",
            "| split | decided by | logs | category right | origin right |", "| --- | --- | ---: | ---: | ---: |"]
    for split in ("dev", "holdout"):
        mine = [c for c in ev.cases if c.row["split"] == split]
        out += [f"| {split} | {name} | {n} | {_pct((cat, n))} | {_pct((org, n))} |"
                for name, n, cat, org in sources(mine, ev.thresholds)]
    out += [""]
    out += _misses(ev)
    out += _holdout_confusions(ev)
    return "\n".join(out) + "\n"


def _reliability_lines(ev: WholeEval) -> list[str]:
    """The reliability table of the calibrated confidences and the calibration errors before and after."""
    cal = calibrated(ev.cases, ev.thresholds)
    rows, _ = reliability(ev.cases, ev.thresholds, confidences=cal)
    out = ["Reliability of the category answers (all logs; confidence calibrated out of sample: by a table fitted "
           "on the holdout logs of the other folds, see `calibration.py`; `unknown` counted as 0):", "",
           "| confidence | logs | mean confidence | accuracy |", "| --- | ---: | ---: | ---: |"]
    out += [f"| {b} | {n} | {m:.3f} | {a:.3f} |" for b, n, m, a in rows]
    out += ["", "Expected calibration error (10 bins), confidence as the reader states it -> calibrated:", "",
            "| logs | stated | calibrated |", "| --- | ---: | ---: |"]
    for name in ("all", "holdout", "dev"):
        mine = [c for c in ev.cases if name == "all" or c.row["split"] == name]
        if mine:
            out.append(f"| {name} ({len(mine)}) | {reliability(mine, ev.thresholds)[1]:.3f} "
                       f"| {reliability(mine, ev.thresholds, confidences=cal)[1]:.3f} |")
    return out + [""]


def _wrong(ev: WholeEval, split: str) -> list[tuple[Case, str]]:
    """The logs of ``split`` whose category is wrong, each with the category answered."""
    out = []
    for c in ev.cases:
        pred = c.category(ev.thresholds[c.project])
        if c.row["split"] == split and pred != c.row["category"]:
            out.append((c, pred))
    return out


def _misses(ev: WholeEval) -> list[str]:
    """The dev logs with a wrong category, by name (the holdout's only as counts: :func:`_holdout_confusions`)."""
    out = ["Wrong category (dev split):", "", "| file | true | predicted | confidence |", "| --- | --- | --- | ---: |"]
    out += [f"| `{c.row['file']}` | {c.row['category']} | {pred} | {c.got.diagnosis.confidence:.2f} |"
            for c, pred in _wrong(ev, "dev")]
    return out + [""]


def _holdout_confusions(ev: WholeEval) -> list[str]:
    """Wrong categories of the holdout counted by (true, predicted), with no log named: a reader round is
    chosen from the dev logs, never from a holdout log (stop 46)."""
    pairs = Counter((c.row["category"], pred) for c, pred in _wrong(ev, "holdout"))
    out = ["Wrong category (holdout split, counts only; no log is named so that no round is chosen from one):", "",
           "| true | predicted | logs |", "| --- | --- | ---: |"]
    out += [f"| {t} | {p} | {n} |" for (t, p), n in sorted(pairs.items(), key=lambda x: (-x[1], x[0]))]
    return out + [""]


START = SECTIONS_START
END = "<!-- whole-log section: end -->"


def write_section(path: str | os.PathLike[str], section: str) -> None:
    """Put ``section`` into the report at ``path`` between its markers (appended the first
    time); the rest of the file is kept as it is."""
    p = Path(path)
    old = p.read_text(encoding="utf-8") if p.is_file() else ""
    block = f"{START}\n{section.rstrip()}\n{END}\n"
    if START in old and END in old:
        head, rest = old.split(START, 1)
        after = rest.split(END, 1)[1].lstrip("\n")
        new = head + block + ("\n" + after if after else "")
    else:
        new = (old.rstrip() + "\n\n" if old.strip() else "") + block
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(new, encoding="utf-8")
