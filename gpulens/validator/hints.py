"""The validator's fix hints: :func:`gpulens.diagnosis.hints.hint_for` with the dry-run wording
and the validator's context (which input, which flag). Everything lives in
:mod:`gpulens.diagnosis.hints` (one hint mechanism for the diagnosis and the validator); the
names are kept here for the validator's modules.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpulens.diagnosis.hints import (
    FIX_HINTS,
    HINT_RULES,
    HintContext,
    hint_for,
    path_in_evidence,
    path_origin,
)

__all__ = ["FIX_HINTS", "HINT_RULES", "HintContext", "fix_hint", "path_in_evidence", "path_origin"]


def fix_hint(category: str, evidence: Sequence[str], context: HintContext | None = None) -> str:
    """The hint for a dry run's failure, with the path the evidence names and where it comes from."""
    return hint_for(category, evidence, dry_run=True, context=context)
