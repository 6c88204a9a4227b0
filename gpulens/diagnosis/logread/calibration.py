"""Calibrated confidence of whole-log answers (issue 23, item 3).

The reader states a confidence per rule and per decision, set by hand. Whether 0.95 means "right 95
times in 100" can only be checked on logs the rules were not written from: they were written from the
dev split's logs, where an answer stated at 0.9 or more is right 98 times in 100 and on the holdout
split 91 times in 100. A table fitted on dev logs would therefore teach the reader to trust itself
more than unseen logs deserve, so the table is fitted on **holdout** logs only: for each source of the
answer (``Diagnosis.method``: a rule, the model, the completion evidence) and band of its stated
confidence, how many of those logs got the right category. A stated confidence ``p`` becomes
``(right + PRIOR * p) / (logs + PRIOR)``: the observed rate, pulled towards ``p`` where few logs
back it (a source and band with no logs keeps ``p``).

In the evaluation (``evaluate.reliability``) each holdout log is calibrated by a table fitted on the
holdout logs of the other folds (projects grouped), so the reported calibration error is out of
sample; the shipped table (``calibration.json``, written by ``scripts/fit_whole_calibration.py``)
is fitted on every holdout log and applies to logs nobody labelled.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Iterable, Mapping
from pathlib import Path

from gpulens.errors import InputError
from gpulens.vocab import NO_FAILURE

__all__ = ["BANDS", "NO_EVIDENCE", "PRIOR", "TABLE", "Calibration", "band_key", "calibrates", "fit", "shipped"]

#: Cut points of the stated confidence's bands: below 0.5, 0.5-0.7, 0.7-0.9, 0.9 and above.
BANDS = (0.5, 0.7, 0.9)
#: Pseudo-logs at the stated confidence added to each band's count.
PRIOR = 2.0
#: The shipped table.
TABLE = Path(__file__).with_name("calibration.json")


#: Stated confidence below which a healthy verdict rests on no positive evidence: no completion message,
#: no final counter, no results after the last step; only the absence of any failure line ("probably
#: ended normally"). The corpus cannot calibrate such a verdict: it took no log cut off mid-run
#: (sample_logs/whole/README.md, "How the labels were decided"), and those are the logs it is wrong on in
#: a live loop (a job killed without a word, one still running when read). Its stated confidence is kept.
NO_EVIDENCE = 0.7


def calibrates(category: str, stated: float) -> bool:
    """Whether the table applies to an answer of ``category`` stated at ``stated``: to every named
    answer (not ``unknown``) but a healthy verdict without positive evidence (:data:`NO_EVIDENCE`)."""
    return category != "unknown" and not (category == NO_FAILURE and stated < NO_EVIDENCE)


def band_key(method: str, stated: float) -> str:
    """The table's key of an answer from ``method`` stated at ``stated``: ``"rule/3"``."""
    return f"{method}/{sum(1 for cut in BANDS if stated >= cut)}"


@dataclasses.dataclass(frozen=True)
class Calibration:
    """Per band key (:func:`band_key`): (right answers, logs) among the logs it was fitted on."""

    counts: Mapping[str, tuple[int, int]]
    fitted_on: str = ""

    def confidence(self, method: str, stated: float) -> float:
        """The calibrated confidence of an answer from ``method`` stated at ``stated``."""
        right, logs = self.counts.get(band_key(method, stated), (0, 0))
        return round((right + PRIOR * stated) / (logs + PRIOR), 3)

    def to_json(self) -> str:
        data = {"bands": list(BANDS), "prior": PRIOR, "fitted_on": self.fitted_on,
                "counts": {k: list(v) for k, v in sorted(self.counts.items())}}
        return json.dumps(data, indent=1) + "\n"

    @classmethod
    def from_json(cls, text: str, where: str = "calibration table") -> Calibration:
        """The table ``to_json`` wrote; :class:`InputError` naming ``where`` when it is not one."""
        try:
            data = json.loads(text)
            counts = {str(k): (int(v[0]), int(v[1])) for k, v in data["counts"].items()}
            same = list(data["bands"]) == list(BANDS) and float(data["prior"]) == PRIOR
        except (ValueError, KeyError, TypeError, IndexError) as exc:
            raise InputError(f"{where} is not a calibration table ({exc}).",
                             "Rewrite it with scripts/fit_whole_calibration.py.") from exc
        if not same or any(not 0 <= right <= logs for right, logs in counts.values()):
            raise InputError(f"{where} was written for other bands or holds impossible counts.",
                             "Rewrite it with scripts/fit_whole_calibration.py.")
        return cls(counts, str(data.get("fitted_on", "")))


def fit(answers: Iterable[tuple[str, float, bool]], fitted_on: str = "") -> Calibration:
    """The table of ``answers``: (method, stated confidence, category right) per log."""
    counts: dict[str, list[int]] = {}
    for method, stated, right in answers:
        c = counts.setdefault(band_key(method, stated), [0, 0])
        c[0] += int(right)
        c[1] += 1
    return Calibration({k: (v[0], v[1]) for k, v in counts.items()}, fitted_on)


@functools.cache
def shipped() -> Calibration:
    """The table shipped with gpulens (an empty one, i.e. stated confidences, if it is missing)."""
    if not TABLE.is_file():
        return Calibration({})
    return Calibration.from_json(TABLE.read_text(encoding="utf-8"), str(TABLE))
