"""How far two people agree when labelling the same whole logs (issue 23): the ceiling for
the whole-log diagnosis figures.

A second labeller relabelled a random sample of the whole-log corpus blind (without the
index, its descriptions, or gpulens's answers): ``sample_logs/whole/agreement/relabel.csv``.
This scores the second labeller against the index exactly as the evaluation scores gpulens
(`gpulens.diagnosis.logread.evaluate.figures`: the same line slack, rank/node rule and
macro-F1), and, with ``--gpulens ROOT``, gpulens on the same logs beside it.

With ``--lines FILE`` it scores a lines-only labelling instead (columns ``file,indicator_lines``,
e.g. ``agreement/lines_rules.csv``, written under the indicator-line rules of
``sample_logs/whole/README.md``): the indicator-line F1, precision and recall against the index,
with the same line slack and the same code path; every other column is the index's own.

    .venv/bin/python -m scripts.label_agreement [--gpulens $GPULENS_WHOLE_LOGS]
    .venv/bin/python -m scripts.label_agreement --lines sample_logs/whole/agreement/lines_rules.csv
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections.abc import Sequence
from pathlib import Path

from gpulens.diagnosis.logread.evaluate import INDEX_DIR, Case, Figures, figures, load_index
from gpulens.diagnosis.logread.whole import WholeDiagnosis
from gpulens.diagnosis.types import Diagnosis
from gpulens.vocab import NO_FAILURE

RELABEL = INDEX_DIR / "agreement" / "relabel.csv"


def as_answer(row: dict[str, str]) -> WholeDiagnosis:
    """A second labeller's row read as if it were a diagnosis (confidence 1: no threshold)."""
    rank = row["first_rank"].strip()
    return WholeDiagnosis(
        diagnosis=Diagnosis(category=row["category"], origin=row["origin"], confidence=1.0, method="label"),
        indicator_lines=[int(x) for x in row["indicator_lines"].split()],
        first_rank=int(rank) if rank.isdigit() else None,
        first_node=row["first_node"].strip() or None,
        phase=row["phase"] or NO_FAILURE, step=row["step"] or None)


def agreement(index: Sequence[dict[str, str]], second: Sequence[dict[str, str]],
              name: str = "second labeller vs the index") -> Figures:
    """The second labeller scored against the index, on the logs both labelled."""
    by_file = {r["file"]: r for r in index}
    cases = [Case(row=by_file[r["file"]], got=as_answer(r)) for r in second if r["file"] in by_file]
    return figures(name, cases, {c.project: 0.0 for c in cases})


def lines_agreement(index: Sequence[dict[str, str]], lines: Sequence[dict[str, str]]) -> Figures:
    """A lines-only labelling (``file,indicator_lines``) scored against the index: each row
    borrows every other column from its index row, so only the indicator-line figures measure
    anything (failed logs only, as in the evaluation)."""
    by_file = {r["file"]: r for r in index}
    second = [{**by_file[r["file"]], "indicator_lines": r["indicator_lines"]} for r in lines if r["file"] in by_file]
    return agreement(index, second, name="lines-only labeller vs the index")


def _pct(x: tuple[int, int]) -> str:
    return f"{x[0] / x[1]:.3f} ({x[0]}/{x[1]})" if x[1] else "-"


def _lines_row(f: Figures) -> str:
    return f"| {f.name} | {f.n} | {f.line_f1:.3f} | {_pct(f.line_precision)} | {_pct(f.line_recall)} |"


def _read(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh))


def _read_lines(path: Path) -> tuple[list[dict[str, str]], str]:
    """The rows of a lines-only CSV, or a sentence saying what is wrong with it and the fix."""
    try:
        rows = _read(path)
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        return [], f"cannot be read ({e}); pass a CSV with columns file,indicator_lines"
    for n, r in enumerate(rows, start=2):
        if r.get("file") is None or r.get("indicator_lines") is None:
            return [], "needs the columns file,indicator_lines"
        if not all(x.isdigit() for x in r["indicator_lines"].split()):
            return [], f"line {n}: indicator_lines must be line numbers separated by spaces"
    return rows, ""


def kappa(pairs: Sequence[tuple[str, str]]) -> float:
    """Cohen's kappa of two labellers' categories (agreement beyond chance)."""
    n = len(pairs)
    if not n:
        return 0.0
    seen = sum(1 for a, b in pairs if a == b) / n
    labels = {x for p in pairs for x in p}
    chance = sum((sum(1 for a, _ in pairs if a == c) / n) * (sum(1 for _, b in pairs if b == c) / n)
                 for c in labels)
    return (seen - chance) / (1 - chance) if chance < 1 else 1.0


def _row(f: Figures) -> str:
    pct = _pct
    return (f"| {f.name} | {f.n} | {pct(f.healthy_accuracy)} | {f.category_macro_f1:.3f} | "
            f"{pct(f.category_accuracy)} | {pct(f.origin_accuracy)} | {f.line_f1:.3f} (P {pct(f.line_precision)}, "
            f"R {pct(f.line_recall)}) | "
            f"{pct(f.first_rank_node)} | {pct(f.phase_accuracy)} |")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--relabel", type=Path, default=RELABEL)
    ap.add_argument("--gpulens", metavar="ROOT", help="also diagnose the same logs under ROOT")
    ap.add_argument("--lines", metavar="FILE", type=Path,
                    help="score a lines-only CSV (file,indicator_lines) against the index instead")
    ap.add_argument("--index-dir", type=Path, default=INDEX_DIR, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    index = load_index(args.index_dir)
    if args.lines:
        lines, problem = _read_lines(args.lines)
        if problem:
            print(f"label_agreement: {args.lines}: {problem}", file=sys.stderr)
            return 2
        print("| who | logs | indicator-line F1 | precision | recall |")
        print("| --- | ---: | ---: | ---: | ---: |")
        print(_lines_row(lines_agreement(index, lines)))
        return 0
    second = _read(args.relabel)
    rows = [agreement(index, second)]
    if args.gpulens:
        from gpulens.diagnosis.logread.evaluate import evaluate_whole

        ev = evaluate_whole(args.gpulens)
        files = {r["file"] for r in second}
        rows.append(figures("gpulens vs the index", [c for c in ev.cases if c.row["file"] in files], ev.thresholds))
    by_file = {r["file"]: r for r in index}
    k = kappa([(by_file[r["file"]]["category"], r["category"]) for r in second if r["file"] in by_file])
    print("| who | logs | healthy vs failed | category macro-F1 | category accuracy | origin accuracy | "
          "indicator-line F1 | first rank/node | phase |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for f in rows:
        print(_row(f))
    print(f"\nCohen's kappa of the two labellers' categories: {k:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
