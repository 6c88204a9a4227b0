"""Rules alone on the *dev* split of the real corpus (sample_logs/real/), in sample.

    python -m gpulens.diagnosis.rules.devcheck

The rules were written while reading these logs, so the numbers are in-sample: they show that
the rules cover the formats they were written for (and catch regressions), not how well they
generalise. Only ``split=dev`` rows are opened; the hold-out projects stay unread, and the
out-of-sample evaluation is ``gpulens diagnose --evaluate``.

Each log is matched as a whole (no region finding) and answered by :func:`best_match`; no match,
or only a secondary-only rule, answers ``unknown``.
"""

from __future__ import annotations

import csv
import dataclasses
from collections import Counter
from pathlib import Path

from gpulens.diagnosis.rules import Rule, best_match, load_rules, match_rules

__all__ = ["REAL_DIR", "DevScores", "dev_rows", "main", "rules_only_scores"]

REAL_DIR = Path(__file__).resolve().parents[3] / "sample_logs" / "real"


def dev_rows(real_dir: Path = REAL_DIR) -> list[dict[str, str]]:
    """The index rows of the dev split (the hold-out rows are dropped before any file is read)."""
    with open(real_dir / "index.csv", encoding="utf-8", newline="") as fh:
        return [r for r in csv.DictReader(fh) if r["split"] == "dev"]


@dataclasses.dataclass
class DevScores:
    n: int
    correct: int
    per_class: dict[str, tuple[float, float, float, int]]  # precision, recall, F1, support
    wrong: list[tuple[str, str, str]]  # (file, label, answer)

    @property
    def accuracy(self) -> float:
        return self.correct / self.n if self.n else 0.0

    @property
    def macro_f1(self) -> float:
        return sum(f for _, _, f, _ in self.per_class.values()) / len(self.per_class) if self.per_class else 0.0


def _answer(text: str, rules: tuple[Rule, ...]) -> str:
    best = best_match(match_rules(text, rules))
    return best.rule.category if best is not None else "unknown"


def rules_only_scores(real_dir: Path = REAL_DIR, rules: tuple[Rule, ...] | None = None) -> DevScores:
    rules = rules if rules is not None else load_rules()
    pairs: list[tuple[str, str, str]] = []
    for row in dev_rows(real_dir):
        text = (real_dir / row["file"]).read_text(encoding="utf-8", errors="replace")
        pairs.append((row["file"], row["category"], _answer(text, rules)))
    tp = Counter(label for _, label, got in pairs if label == got)
    answered = Counter(got for _, _, got in pairs)
    support = Counter(label for _, label, _ in pairs)
    per_class: dict[str, tuple[float, float, float, int]] = {}
    for cat in sorted(support):
        p = tp[cat] / answered[cat] if answered[cat] else 0.0
        r = tp[cat] / support[cat]
        per_class[cat] = (p, r, 2 * p * r / (p + r) if p + r else 0.0, support[cat])
    wrong = [x for x in pairs if x[1] != x[2]]
    return DevScores(len(pairs), len(pairs) - len(wrong), per_class, wrong)


def main() -> None:
    rules = load_rules()
    scores = rules_only_scores(rules=rules)
    with_real = Counter(r.category for r in rules if r.real)
    total = Counter(r.category for r in rules)
    print(f"rules: {len(rules)}, with a real dev example: {sum(with_real.values())}")
    print(f"rules only, dev split, whole logs, IN SAMPLE: accuracy {scores.accuracy:.3f} "
          f"({scores.correct}/{scores.n}), macro-F1 {scores.macro_f1:.3f}")
    print(f"{'category':18} {'rules':>5} {'real':>5} {'P':>5} {'R':>5} {'F1':>5} {'n':>4}")
    for cat in sorted(set(total) | set(scores.per_class)):
        p, r, f, n = scores.per_class.get(cat, (0.0, 0.0, 0.0, 0))
        print(f"{cat:18} {total[cat]:5d} {with_real[cat]:5d} {p:5.2f} {r:5.2f} {f:5.2f} {n:4d}")
    for file, label, got in scores.wrong:
        print(f"  wrong: {file} labelled {label}, rules say {got}")


if __name__ == "__main__":
    main()
