"""Pre-submission validator: static checks and a dry run of a job's first training steps.

``validate(spec, config, store)`` returns a :class:`ValidationResult` (verdict
pass / fail / inconclusive, category and origin from the diagnosis classifier,
evidence, a fix hint); ``validation_summary(con)`` counts the recorded ones.
See docs/validator.md.
"""

from gpulens.validator.core import (
    EXIT_CODES,
    FIX_HINTS,
    ValidationResult,
    classify_output,
    validate,
)
from gpulens.validator.devices import GpuCandidate, pick_device, project_memory
from gpulens.validator.record import record_validation, validation_summary
from gpulens.validator.spec import JobSpec, load_job_spec

__all__ = [
    "EXIT_CODES",
    "FIX_HINTS",
    "GpuCandidate",
    "JobSpec",
    "ValidationResult",
    "classify_output",
    "load_job_spec",
    "pick_device",
    "project_memory",
    "record_validation",
    "validate",
    "validation_summary",
]
