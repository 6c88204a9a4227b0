"""The diagnosis contract shared by the classifier, the origin model, the validator,
the analyses and the dashboard: category and origin ids, and the result type."""

from __future__ import annotations

import dataclasses

from gpulens.vocab import CATEGORIES, DEFAULT_ORIGIN, NO_FAILURE, ORIGINS

__all__ = ["CATEGORIES", "ORIGINS", "DEFAULT_ORIGIN", "Diagnosis"]

@dataclasses.dataclass
class Diagnosis:
    """Why one log (or one job attempt) failed; ``category == origin == NO_FAILURE`` ("none")
    for a log with positive evidence of a normal end."""

    category: str
    origin: str
    confidence: float
    evidence: list[str] = dataclasses.field(default_factory=list)
    method: str = "rule"  # rule | svm | bn | none
    rule_id: str | None = None
    #: input paths the failure blames (incorrect_input only: named by the failing lines)
    inputs: list[str] = dataclasses.field(default_factory=list)
    reason: str | None = None  # why the answer is 'unknown', when it is
    file: str | None = None
    #: record positions the failing lines name ("line 52"), with ``inputs``
    input_records: list[str] = dataclasses.field(default_factory=list)
    hint: str | None = None  # what to do about it, specific to the evidence
    #: what the evidence lines say about whose fault it is (gpulens.diagnosis.origin.CLUES); the
    #: origin network's ``clue`` evidence (jobs can pass it on with the job's context)
    clue: str | None = None
    #: What a whole-log diagnosis (gpulens.diagnosis.logread) read, for an operator to check:
    #: the first rank and node to show the root error, the failure-indicating line numbers
    #: (1-based, as grep -n), the phase, the last step and the one-sentence story.
    first_rank: int | None = None
    first_node: str | None = None
    indicator_lines: list[int] = dataclasses.field(default_factory=list)
    phase: str | None = None
    step: str | None = None
    story: str | None = None

    @property
    def healthy(self) -> bool:
        """Whether this is the no-failure verdict (the run ended normally)."""
        return self.category == NO_FAILURE

    def __post_init__(self) -> None:
        if self.category == NO_FAILURE or self.origin == NO_FAILURE:
            if self.category != self.origin:
                raise ValueError("the no-failure verdict has category and origin 'none' together")
            return
        if self.category not in CATEGORIES:
            raise ValueError(f"unknown category {self.category!r}")
        if self.origin not in ORIGINS:
            raise ValueError(f"unknown origin {self.origin!r}")
