"""The diagnosis contract shared by the classifier, the origin model, the validator,
the analyses and the dashboard: category and origin ids, and the result type."""

from __future__ import annotations

import dataclasses
from typing import Final

__all__ = ["CATEGORIES", "ORIGINS", "DEFAULT_ORIGIN", "Diagnosis"]

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


@dataclasses.dataclass
class Diagnosis:
    """Why one log (or one job attempt) failed."""

    category: str
    origin: str
    confidence: float
    evidence: list[str] = dataclasses.field(default_factory=list)
    method: str = "rule"  # rule | svm | bn | none
    rule_id: str | None = None
    inputs: list[str] = dataclasses.field(default_factory=list)  # input paths seen in the log
    reason: str | None = None  # why the answer is 'unknown', when it is
    file: str | None = None

    def __post_init__(self) -> None:
        if self.category not in CATEGORIES:
            raise ValueError(f"unknown category {self.category!r}")
        if self.origin not in ORIGINS:
            raise ValueError(f"unknown origin {self.origin!r}")
