"""The project's vocabulary, defined once: failure categories and origins, job and
attempt statuses, blacklist states and validation verdicts.

Every part (diagnosis, validator, simulator, importers, exporters, dashboard) takes
these names from here; the store's tables hold exactly these strings.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "BLACKLIST_STATES",
    "CATEGORIES",
    "DEFAULT_ORIGIN",
    "JOB_STATUSES",
    "NO_FAILURE",
    "ORIGINS",
    "VERDICTS",
]

#: Failure categories, emitted exactly as spelled here.
CATEGORIES: Final[tuple[str, ...]] = (
    "gpu_oom",
    "cpu_oom",
    "syntax_error",
    "import_error",
    "semantic_error",
    "incorrect_input",
    "model_diverged",
    "checkpoint_error",
    "permission_error",
    "cuda_error",
    "cuda_env_error",
    "gpu_hardware",
    "comm_error",
    "preempted",
    "storage_error",
    "crash",
    "unknown",
)

ORIGINS: Final[tuple[str, ...]] = ("user", "data", "framework", "infrastructure", "unknown")

#: The verdict for a run that did not fail: both its category and its origin are this string.
#: It is not a failure category (never in CATEGORIES): `unknown` means "failed, cause not
#: determinable", `none` means "no failure" (a log with positive evidence of a normal end, or an
#: attempt the scheduler recorded as passed).
NO_FAILURE: Final[str] = "none"

#: The most likely origin of each category before any job context is known
#: (the prior the Bayesian network refines with retries, node health, ...).
DEFAULT_ORIGIN: Final[dict[str, str]] = {
    "gpu_oom": "user",
    "cpu_oom": "user",
    "syntax_error": "user",
    "import_error": "user",
    "semantic_error": "user",
    "incorrect_input": "data",
    "model_diverged": "user",
    "checkpoint_error": "user",
    "permission_error": "user",
    "cuda_error": "framework",
    "cuda_env_error": "infrastructure",
    "gpu_hardware": "infrastructure",
    "comm_error": "infrastructure",
    "preempted": "infrastructure",
    "storage_error": "infrastructure",
    "crash": "framework",
    "unknown": "unknown",
}

#: Job (and attempt) statuses in the store: waiting, running, and the three ends.
JOB_STATUSES: Final[tuple[str, ...]] = ("queued", "running", "passed", "failed", "killed")

#: States of a blacklist entry (see gpulens.diagnosis.blacklist).
BLACKLIST_STATES: Final[tuple[str, ...]] = ("suspected", "blacklisted", "cleared")

#: Verdicts of the pre-submission validator.
VERDICTS: Final[tuple[str, ...]] = ("pass", "fail", "inconclusive")
