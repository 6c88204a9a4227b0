"""Origin of a failure (user, data, framework, infrastructure) by Bayesian network.

The classifier says *what* failed (a category such as ``cuda_error``); this
module says *whose* problem it is, from the category and the job's context:

================  ==========================================================
variable          states
================  ==========================================================
origin            user, data, framework, infrastructure, unknown (the target)
category          the classifier's category (CATEGORIES)
multi_node        single, multi
exit              error (exit 1), sigkill, sigterm, sigsegv, sigabrt,
                  signal_other, other_code, zero
stage             startup, first_iteration, mid_training, checkpoint
retry             same_failure_other_node, same_failure_same_node,
                  succeeded_on_retry, different_failure, no_retry
node_health       clean, app_xid, xid_or_ecc (hardware XID or uncorrectable
                  ECC on the attempt's nodes while it ran)
node_cofailures   none, one, several (other users' jobs failing on the same
                  node in the same window)
input_cofailures  none, one, several (other jobs failing with the same input)
fault_frame       user_code, framework (crash and cuda_error only: where the
                  failing code is; :mod:`gpulens.diagnosis.frames`)
clue              what the log's own lines say about whose fault it is (CLUES):
                  a label-range assert, a data path, a driver/toolkit string, a
                  framework-internal assert, user code raising, a node resource
                  (shm, container limit), a configuration clash (port in use,
                  mismatched collectives), a build/architecture mismatch, only
                  secondary messages, or nothing telling (see :func:`clue_from_lines`)
================  ==========================================================

Structure (parents -> child)::

    origin, multi_node -> category
    origin, category   -> exit
    origin, category   -> stage
    origin             -> retry, node_health, node_cofailures, input_cofailures,
                          fault_frame, clue

Every variable except ``origin`` may be unobserved; it is then summed out.
The tables are learned by :func:`gpulens.diagnosis.bn_adapter.fit_bdeu` (BDeu prior,
every state declared) from a labeled history: by default
:func:`synthetic_history`, a generator that encodes the Philly study's findings
(Jeon et al., ATC'19, section 5): most failures come from user code and input
data; user and data failures are deterministic and repeat identically on
retries, on any node; infrastructure failures are transient, hit long-running
jobs mid-training, coincide with hardware errors and with other jobs failing on
the same node, and go away on a retry elsewhere; corrupted inputs make several
jobs that read them fail. Stores with operator labels add their own rows (see
:func:`gpulens.diagnosis.jobs.labeled_history`); the simulator's ``sim_truth`` never
does: it is what the evaluations compare with.

The answer is a posterior over origins plus, for each observed variable, how
much it moved the chosen origin: the change in log-odds of that origin when the
variable is removed from the evidence.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final

import numpy as np

if TYPE_CHECKING:  # pandas is imported where a history is drawn (a classifying process never needs it)
    import pandas as pd

from gpulens.diagnosis.bn_adapter import BayesNet, fit_bdeu
from gpulens.diagnosis.frames import FRAME_STATES
from gpulens.diagnosis.guarded import Prefiltered
from gpulens.diagnosis.types import CATEGORIES, ORIGINS
from gpulens.errors import InputError

__all__ = [
    "EDGES",
    "EVIDENCE_VARIABLES",
    "EXIT_CLASSES",
    "FRAME_CATEGORIES",
    "CLUES",
    "NODE_HEALTH",
    "RETRY_OUTCOMES",
    "STAGES",
    "TARGET",
    "VARIABLES",
    "clue_from_lines",
    "origin_from_evidence",
    "Influence",
    "OriginModel",
    "OriginResult",
    "default_model",
    "describe_evidence",
    "cached_model",
    "evidence_model",
    "synthetic_history",
]

TARGET: Final = "origin"
EXIT_CLASSES: Final[tuple[str, ...]] = (
    "error",
    "sigkill",
    "sigterm",
    "sigsegv",
    "sigabrt",
    "signal_other",
    "other_code",
    "zero",
)
STAGES: Final[tuple[str, ...]] = ("startup", "first_iteration", "mid_training", "checkpoint")
RETRY_OUTCOMES: Final[tuple[str, ...]] = (
    "same_failure_other_node",
    "same_failure_same_node",
    "succeeded_on_retry",
    "different_failure",
    "no_retry",
)
NODE_HEALTH: Final[tuple[str, ...]] = ("clean", "app_xid", "xid_or_ecc")
COUNTS: Final[tuple[str, ...]] = ("none", "one", "several")
CLUES: Final[tuple[str, ...]] = (
    "none",
    "user_code",
    "data_path",
    "label_range",
    "framework_internal",
    "driver_toolkit",
    "build_mismatch",
    "node_resource",
    "config_clash",
    "secondary_only",
)

VARIABLES: Final[dict[str, tuple[str, ...]]] = {
    "origin": ORIGINS,
    "multi_node": ("single", "multi"),
    "category": CATEGORIES,
    "exit": EXIT_CLASSES,
    "stage": STAGES,
    "retry": RETRY_OUTCOMES,
    "node_health": NODE_HEALTH,
    "node_cofailures": COUNTS,
    "input_cofailures": COUNTS,
    "fault_frame": FRAME_STATES,
    "clue": CLUES,
}
EVIDENCE_VARIABLES: Final[tuple[str, ...]] = tuple(v for v in VARIABLES if v != TARGET)

EDGES: Final[tuple[tuple[str, str], ...]] = (
    ("origin", "category"),
    ("multi_node", "category"),
    ("origin", "exit"),
    ("category", "exit"),
    ("origin", "stage"),
    ("category", "stage"),
    ("origin", "retry"),
    ("origin", "node_health"),
    ("origin", "node_cofailures"),
    ("origin", "input_cofailures"),
    ("origin", "fault_frame"),
    ("origin", "clue"),
)

_DESCRIBE: Final[dict[str, str]] = {
    "category": "classified as {}",
    "multi_node": "{} job",
    "exit": "exit status class {}",
    "stage": "failed at {}",
    "retry": "retry outcome: {}",
    "node_health": "node health during the attempt: {}",
    "node_cofailures": "other jobs failing on the same node at the same time: {}",
    "input_cofailures": "other jobs failing with the same input: {}",
    "fault_frame": "the failing frame is in {}",
    "clue": "the log's lines show: {}",
}


def describe_evidence(variable: str, state: str) -> str:
    """One human sentence for an evidence variable's state."""
    return _DESCRIBE.get(variable, variable + " = {}").format(state.replace("_", " "))


@dataclasses.dataclass
class Influence:
    """How much one piece of evidence moved the chosen origin."""

    variable: str
    state: str
    #: logit P(origin | all evidence) - logit P(origin | all but this one).
    #: Positive: this evidence supports the chosen origin.
    delta_log_odds: float
    #: The origin whose probability this evidence raised the most.
    favours: str
    text: str


@dataclasses.dataclass
class OriginResult:
    origin: str
    probability: float
    posterior: dict[str, float]
    evidence: dict[str, str]
    influence: list[Influence]  # sorted by |delta_log_odds|, largest first

    def top_influence(self, n: int = 3) -> list[Influence]:
        return self.influence[:n]


def _logit(p: float) -> float:
    p = min(max(p, 1e-12), 1 - 1e-12)
    return math.log(p / (1 - p))


class OriginModel:
    """A fitted origin network and the queries gpulens asks it."""

    def __init__(self, net: BayesNet, *, source: str = "synthetic") -> None:
        missing = [v for v in VARIABLES if v not in net.states]
        if missing:
            raise InputError(f"Origin network lacks variable(s) {', '.join(missing)}.")
        self.net = net
        self.source = source

    @classmethod
    def learn(
        cls,
        history: pd.DataFrame,
        *,
        equivalent_sample_size: float = 10.0,
        sample_weight: np.ndarray | None = None,
        source: str = "history",
    ) -> OriginModel:
        """Fit every table of the structure from ``history`` (one column per variable)."""
        frame = history.copy()
        for var in VARIABLES:
            if var not in frame.columns:
                frame[var] = None
        net = fit_bdeu(
            EDGES,
            VARIABLES,
            frame,
            equivalent_sample_size=equivalent_sample_size,
            sample_weight=None if sample_weight is None else list(sample_weight),
        )
        return cls(net, source=source)

    @staticmethod
    def clean_evidence(evidence: Mapping[str, str | None]) -> dict[str, str]:
        """Drop unobserved (None) entries; reject unknown variables or states."""
        out: dict[str, str] = {}
        for var, state in evidence.items():
            if state is None:
                continue
            if var not in VARIABLES or var == TARGET:
                raise InputError(
                    f"{var!r} is not an evidence variable of the origin network.",
                    f"Use one of: {', '.join(EVIDENCE_VARIABLES)}.",
                )
            if state not in VARIABLES[var]:
                raise InputError(
                    f"{state!r} is not a state of {var}.",
                    f"States of {var}: {', '.join(VARIABLES[var])}.",
                )
            out[var] = state
        return out

    def posterior(self, evidence: Mapping[str, str | None]) -> dict[str, float]:
        return self.net.posterior(TARGET, self.clean_evidence(evidence))

    def infer(self, evidence: Mapping[str, str | None], *, explain: bool = True) -> OriginResult:
        """Posterior over origins and, with ``explain``, each evidence's influence."""
        ev = self.clean_evidence(evidence)
        post = self.net.posterior_array(TARGET, ev)
        best = int(np.argmax(post))
        origin = ORIGINS[best]
        influence: list[Influence] = []
        if explain:
            loo = self.net.leave_one_out(TARGET, ev)
            for var, state in ev.items():
                without = loo[var]
                delta = _logit(float(post[best])) - _logit(float(without[best]))
                lift = np.log(np.maximum(post, 1e-12)) - np.log(np.maximum(without, 1e-12))
                influence.append(
                    Influence(
                        variable=var,
                        state=state,
                        delta_log_odds=round(delta, 4),
                        favours=ORIGINS[int(np.argmax(lift))],
                        text=describe_evidence(var, state),
                    )
                )
            influence.sort(key=lambda i: -abs(i.delta_log_odds))
        return OriginResult(
            origin=origin,
            probability=float(post[best]),
            posterior={o: float(p) for o, p in zip(ORIGINS, post, strict=True)},
            evidence=ev,
            influence=influence,
        )


# --------------------------------------------------------------------------
# The labeled history the default network learns from.
# --------------------------------------------------------------------------
# Relative weights, normalised at sampling time. They follow the Philly study
# (Jeon et al., ATC'19, Table 2 and section 5): user-side reasons (CPU OOM,
# incorrect inputs, semantic and syntax errors, invalid memory access, GPU OOM,
# permission and import errors) account for most failures; infrastructure
# reasons (MPI/NCCL runtime failures, CUDA initialisation and driver mismatches,
# ECC errors, preemption, storage) are fewer; framework (AI engine) reasons sit
# in between. The exact numbers are ours; the orderings are the paper's.

_ORIGIN_PRIOR: Final = {"user": 50, "data": 18, "framework": 12, "infrastructure": 17, "unknown": 3}
_MULTI_NODE: Final = 0.2

_CATEGORY: Final[dict[str, dict[str, float]]] = {
    "user": {
        "cpu_oom": 14, "gpu_oom": 8, "syntax_error": 8, "import_error": 6, "semantic_error": 24,
        "incorrect_input": 6, "model_diverged": 4, "checkpoint_error": 5, "permission_error": 4,
        "cuda_error": 6, "crash": 5, "comm_error": 1.5, "storage_error": 1.5, "preempted": 0.3,
        "cuda_env_error": 1, "gpu_hardware": 0.2, "unknown": 4,
    },
    "data": {
        "incorrect_input": 70, "semantic_error": 8, "model_diverged": 5, "crash": 3, "cpu_oom": 3,
        "checkpoint_error": 2, "storage_error": 1, "permission_error": 1, "unknown": 4,
    },
    "framework": {
        "cuda_error": 28, "crash": 22, "checkpoint_error": 8, "comm_error": 8, "semantic_error": 7,
        "import_error": 5, "gpu_oom": 4, "cpu_oom": 3, "model_diverged": 2, "cuda_env_error": 2,
        "unknown": 7,
    },
    "infrastructure": {
        "gpu_hardware": 18, "comm_error": 16, "preempted": 14, "storage_error": 12,
        "cuda_env_error": 11, "crash": 8, "cuda_error": 5, "checkpoint_error": 5,
        "incorrect_input": 1, "permission_error": 1, "cpu_oom": 1, "unknown": 8,
    },
    "unknown": {"unknown": 60, "crash": 15, "semantic_error": 3, "cuda_error": 3, "comm_error": 3},
}
_CATEGORY_FLOOR: Final = 0.3  # every category is possible under every origin
#: multi-node jobs fail more often in communication (NCCL/MPI) for every origin
_MULTI_NODE_COMM: Final = {"user": 2.0, "data": 1.0, "framework": 4.0, "infrastructure": 4.0, "unknown": 2.0}

_EXIT_PYTHON: Final = {"error": 80, "other_code": 8, "sigabrt": 3, "sigkill": 3, "sigterm": 2, "zero": 2, "sigsegv": 1, "signal_other": 1}
_EXIT: Final[dict[str, dict[str, float]]] = {
    "gpu_oom": {"error": 85, "sigabrt": 5, "sigkill": 4, "other_code": 4, "sigsegv": 1, "sigterm": 1},
    "cpu_oom": {"sigkill": 75, "error": 15, "sigabrt": 3, "sigsegv": 2, "other_code": 3, "sigterm": 2},
    "cuda_error": {"error": 55, "sigabrt": 30, "sigsegv": 8, "sigkill": 3, "other_code": 3, "signal_other": 1},
    "crash": {"sigsegv": 45, "sigabrt": 30, "sigkill": 8, "signal_other": 5, "error": 7, "other_code": 5},
    "gpu_hardware": {"error": 40, "sigabrt": 20, "sigkill": 20, "sigsegv": 10, "other_code": 7, "sigterm": 3},
    "comm_error": {"error": 55, "sigabrt": 15, "sigkill": 15, "sigterm": 8, "other_code": 6, "sigsegv": 1},
    "preempted": {"sigterm": 55, "sigkill": 35, "other_code": 5, "error": 3, "zero": 2},
    "unknown": {"error": 30, "sigkill": 15, "sigterm": 10, "sigsegv": 10, "sigabrt": 10, "signal_other": 5, "other_code": 15, "zero": 5},
}
_EXIT_FLOOR: Final = 0.2
#: a node that dies takes the job down with SIGKILL/SIGTERM more often
_EXIT_ORIGIN: Final = {"infrastructure": {"sigkill": 2.0, "sigterm": 1.5}}

_STAGE: Final[dict[str, tuple[float, float, float, float]]] = {
    # startup, first_iteration, mid_training, checkpoint
    "syntax_error": (90, 8, 1, 1),
    "import_error": (88, 10, 1, 1),
    "semantic_error": (20, 50, 25, 5),
    "incorrect_input": (40, 25, 33, 2),
    "model_diverged": (2, 13, 83, 2),
    "checkpoint_error": (10, 2, 8, 80),
    "permission_error": (50, 10, 10, 30),
    "gpu_oom": (8, 67, 23, 2),
    "cpu_oom": (25, 30, 40, 5),
    "cuda_error": (10, 40, 47, 3),
    "cuda_env_error": (85, 10, 5, 0.5),
    "gpu_hardware": (10, 15, 72, 3),
    "comm_error": (30, 25, 43, 2),
    "preempted": (10, 10, 75, 5),
    "storage_error": (10, 10, 40, 40),
    "crash": (20, 30, 47, 3),
    "unknown": (25, 25, 45, 5),
}
#: user bugs surface early; corrupted records and transient faults surface late
_STAGE_ORIGIN: Final[dict[str, tuple[float, float, float, float]]] = {
    "user": (1.5, 1.3, 0.6, 1.0),
    "data": (0.6, 1.0, 1.8, 0.8),
    "framework": (1.0, 1.2, 1.0, 1.0),
    "infrastructure": (0.5, 0.7, 2.5, 1.2),
    "unknown": (1.0, 1.0, 1.0, 1.0),
}

_RETRY: Final[dict[str, tuple[float, ...]]] = {
    # same_failure_other_node, same_failure_same_node, succeeded_on_retry, different_failure, no_retry
    "user": (42, 12, 4, 7, 35),
    "data": (48, 12, 3, 5, 32),
    "framework": (36, 10, 12, 9, 33),  # framework bugs repeat too, mostly
    "infrastructure": (5, 14, 50, 11, 20),
    "unknown": (20, 10, 20, 15, 35),
}
_NODE_HEALTH: Final[dict[str, tuple[float, ...]]] = {
    # clean, app_xid, xid_or_ecc
    "user": (90, 8, 2),
    "data": (95, 3, 2),
    "framework": (80, 14, 6),
    "infrastructure": (50, 6, 44),
    "unknown": (85, 8, 7),
}
_NODE_COFAIL: Final[dict[str, tuple[float, ...]]] = {
    "user": (86, 11, 3),
    "data": (86, 11, 3),
    "framework": (80, 15, 5),
    "infrastructure": (45, 30, 25),
    "unknown": (75, 18, 7),
}
_INPUT_COFAIL: Final[dict[str, tuple[float, ...]]] = {
    "user": (90, 8, 2),
    "data": (30, 35, 35),
    "framework": (92, 6, 2),
    "infrastructure": (88, 9, 3),
    "unknown": (85, 10, 5),
}
#: crash / cuda_error only: the failing frame (user_code, framework). The origin
#: convention of docs/diagnosis.md: a deterministic crash in the user's own code
#: is the user's, one inside the framework (or a framework internal assert) the
#: framework's; a node fault shows framework frames more often than not.
FRAME_CATEGORIES: Final[frozenset[str]] = frozenset({"crash", "cuda_error"})
_FAULT_FRAME: Final[dict[str, tuple[float, ...]]] = {
    "user": (88, 12),
    "data": (60, 40),
    "framework": (8, 92),
    "infrastructure": (35, 65),
    "unknown": (50, 50),
}
#: share of rows where each context variable is unobserved (no telemetry, no placement, ...)

#: P(clue | origin): how often each kind of line appears in a failure of each origin. Written
#: from the meaning of the clues (a label-range assert is a data problem, a driver string an
#: infrastructure one, a framework INTERNAL ASSERT the framework's); most logs show no clue.
_CLUE: Final[dict[str, dict[str, float]]] = {
    "user": {"none": 40, "user_code": 35, "data_path": 2, "label_range": 1, "framework_internal": 1.5,
             "driver_toolkit": 1, "build_mismatch": 10, "node_resource": 0.3, "config_clash": 8,
             "secondary_only": 1},
    "data": {"none": 40, "user_code": 5, "data_path": 35, "label_range": 18, "framework_internal": 0.5,
             "driver_toolkit": 0.2, "build_mismatch": 0.2, "node_resource": 0.3, "config_clash": 0.2,
             "secondary_only": 0.5},
    "framework": {"none": 45, "user_code": 4, "data_path": 0.5, "label_range": 0.2, "framework_internal": 40,
                  "driver_toolkit": 1, "build_mismatch": 2, "node_resource": 0.3, "config_clash": 0.5,
                  "secondary_only": 1.5},
    "infrastructure": {"none": 50, "user_code": 1, "data_path": 0.5, "label_range": 0.2,
                       "framework_internal": 1, "driver_toolkit": 25, "build_mismatch": 1.5,
                       "node_resource": 20, "config_clash": 0.5, "secondary_only": 3},
    "unknown": {"none": 30, "user_code": 1, "data_path": 1, "label_range": 1, "framework_internal": 1,
                "driver_toolkit": 1, "build_mismatch": 1, "node_resource": 1, "config_clash": 1,
                "secondary_only": 60},
}

#: share of rows where each context variable is unobserved (no telemetry, no placement, ...)
_MISSING: Final = {"exit": 0.05, "stage": 0.05, "node_health": 0.25, "multi_node": 0.02, "fault_frame": 0.3,
                  "clue": 0.3}


def _norm(weights: np.ndarray) -> np.ndarray:
    return weights / weights.sum()


def _category_probs(origin: str, multi: bool) -> np.ndarray:
    table = _CATEGORY[origin]
    w = np.array([table.get(c, _CATEGORY_FLOOR) for c in CATEGORIES], dtype=float)
    if multi:
        w[CATEGORIES.index("comm_error")] *= _MULTI_NODE_COMM[origin]
    return _norm(w)


def _exit_probs(category: str, origin: str) -> np.ndarray:
    table = _EXIT.get(category, _EXIT_PYTHON)
    w = np.array([table.get(e, _EXIT_FLOOR) for e in EXIT_CLASSES], dtype=float)
    for e, f in _EXIT_ORIGIN.get(origin, {}).items():
        w[EXIT_CLASSES.index(e)] *= f
    return _norm(w)


def _stage_probs(category: str, origin: str) -> np.ndarray:
    return _norm(np.array(_STAGE[category], dtype=float) * np.array(_STAGE_ORIGIN[origin]))


def _draw(rng: np.random.Generator, probs: np.ndarray, states: tuple[str, ...]) -> np.ndarray:
    """One draw per row of ``probs`` (rows are distributions over ``states``)."""
    cdf = np.cumsum(probs, axis=1)
    u = rng.random(len(probs)) * cdf[:, -1]
    idx = (cdf < u[:, None]).sum(axis=1)
    return np.asarray(states, dtype=object)[np.minimum(idx, len(states) - 1)]


@functools.lru_cache(maxsize=8)
def _history_cached(n: int, seed: int) -> pd.DataFrame:
    import pandas as pd

    rng = np.random.default_rng(seed)
    prior = _norm(np.array([_ORIGIN_PRIOR[o] for o in ORIGINS], dtype=float))
    o_idx = rng.choice(len(ORIGINS), size=n, p=prior)
    multi = (rng.random(n) < _MULTI_NODE).astype(int)
    cat_table = np.array([[_category_probs(o, bool(m)) for m in (0, 1)] for o in ORIGINS])
    category = _draw(rng, cat_table[o_idx, multi], CATEGORIES)
    c_idx = np.array([CATEGORIES.index(c) for c in category])
    exit_table = np.array([[_exit_probs(c, o) for o in ORIGINS] for c in CATEGORIES])
    stage_table = np.array([[_stage_probs(c, o) for o in ORIGINS] for c in CATEGORIES])

    def per_origin(table: Mapping[str, tuple[float, ...]]) -> np.ndarray:
        return np.array([_norm(np.array(table[o], dtype=float)) for o in ORIGINS])[o_idx]

    frame = pd.DataFrame(
        {
            "origin": np.asarray(ORIGINS, dtype=object)[o_idx],
            "multi_node": np.where(multi == 1, "multi", "single").astype(object),
            "category": category,
            "exit": _draw(rng, exit_table[c_idx, o_idx], EXIT_CLASSES),
            "stage": _draw(rng, stage_table[c_idx, o_idx], STAGES),
            "retry": _draw(rng, per_origin(_RETRY), RETRY_OUTCOMES),
            "node_health": _draw(rng, per_origin(_NODE_HEALTH), NODE_HEALTH),
            "node_cofailures": _draw(rng, per_origin(_NODE_COFAIL), COUNTS),
            "input_cofailures": _draw(rng, per_origin(_INPUT_COFAIL), COUNTS),
            "fault_frame": _draw(rng, per_origin(_FAULT_FRAME), FRAME_STATES),
            "clue": _draw(rng, per_origin({o: tuple(_CLUE[o][c] for c in CLUES) for o in ORIGINS}), CLUES),
        },
        dtype="object",
    )
    frame.loc[~frame["category"].isin(FRAME_CATEGORIES), "fault_frame"] = None
    for var, share in _MISSING.items():
        frame.loc[rng.random(n) < share, var] = None
    return frame


def synthetic_history(n: int = 20_000, *, seed: int = 0) -> pd.DataFrame:
    """A labeled failure history drawn from the Philly-derived tables above.

    One row per failed attempt, one column per network variable (``origin`` is
    the label); ``None`` marks an unobserved variable. Deterministic for a seed.
    """
    if n <= 0:
        raise InputError(f"History size {n} must be positive.", "Pass n >= 1.")
    return _history_cached(int(n), int(seed)).copy()


@functools.lru_cache(maxsize=4)
def _default_model(n: int, seed: int, ess: float) -> OriginModel:
    return OriginModel.learn(
        synthetic_history(n, seed=seed), equivalent_sample_size=ess, source="synthetic"
    )


def default_model(*, n: int = 20_000, seed: int = 0, equivalent_sample_size: float = 10.0) -> OriginModel:
    """The network learned from :func:`synthetic_history` (cached per process)."""
    return _default_model(int(n), int(seed), float(equivalent_sample_size))


# --------------------------------------------------------------------------
# Evidence from the log's own lines.
# --------------------------------------------------------------------------

_CLUE_PATTERNS: Final[tuple[tuple[str, re.Pattern[str]], ...]] = (
    ("label_range", re.compile(
        r"t >= 0 && t < n_classes|cur_target >= 0 && cur_target < n_classes|Target -?\d+ is out of bounds"
        r"|label(?:s)? (?:value )?(?:is )?(?:out of|outside)(?: the)? (?:range|bounds)|n_classes|num_classes.*labels?"
        r"|Received a label value of -?\d+ which is outside the valid range|IndexError: Target -?\d+"
        r"|index -?\d+ is out of bounds for dimension \d+ with size|srcIndex < srcSelectDimSize", re.IGNORECASE)),
    ("framework_internal", re.compile(
        r"INTERNAL ASSERT FAILED|please report a bug|This is (?:likely )?a bug|RET_CHECK failure|Check failed:"
        r"|\*\*\* Check failure|internal compiler error|INTERNAL: .*(?:bug|unexpected)|Internal Error|"
        r"NotImplementedError: .*(?:not implemented|supported) for|should not be reached", re.IGNORECASE)),
    ("build_mismatch", re.compile(
        r"no kernel image is available|not compatible with the current PyTorch installation|\bsm_\d+\b.*(?:not|support)"
        r"|Torch not compiled with CUDA|No CUDA GPUs are available|not compiled with CUDA|compiled for CUDA \S+ but"
        r"|does not support (?:the )?(?:GPU|compute capability)|CUBLAS_STATUS_EXECUTION_FAILED.*(?:30|RTX)"
        r"|undefined symbol|built for CUDA|CUDA \d+ (?:runtime|libraries)"
        r"|libcudart\.so\.[\d.]+: cannot open shared object file")),
    ("driver_toolkit", re.compile(
        r"driver (?:version )?(?:is )?(?:too old|insufficient)|NVIDIA driver on your system is too old"
        r"|driver/library version mismatch|cudaErrorInsufficientDriver|CUDA driver version is insufficient"
        r"|NVIDIA-SMI has failed|couldn't communicate with the NVIDIA driver|cuInit\(0\) failed|CUDA_ERROR_NO_DEVICE"
        r"|nvidia-container-cli|Failed to initialize NVML|libcuda\.so|NVRM: ", re.IGNORECASE)),
    ("node_resource", re.compile(
        r"/dev/shm|shared memory|\bshm\b|Bus error|unable to write to file </torch_|OOMKilled"
        r"|container.*memory limit|exceeded (?:its|the) memory limit|Evicted|The node was low on resource",
        re.IGNORECASE)),
    ("config_clash", re.compile(
        r"[Aa]ddress already in use|EADDRINUSE|errno: 98|Errno 98|bind(?:ing)? to .* failed|Permission denied.*port"
        r"|mismatch(?:ed)? (?:in )?collective|collective.* mismatch|Detected mismatch between collectives"
        r"|different (?:number of|sequence of) collectives|[Dd]ifferent keys", re.IGNORECASE)),
    ("data_path", re.compile(
        r"(?:No such file or directory|does not exist|not found|cannot identify image file|corrupt|truncated)"
        r".*\.(?:csv|tsv|jsonl?|txt|jpe?g|png|bmp|tiff?|wav|flac|mp3|mp4|npy|npz|h5|hdf5|parquet|arrow|tfrecords?)\b"
        r"|assert os\.path\.(?:exists|isdir|isfile)|image file is truncated|cannot identify image file"
        r"|ParserError|Error tokenizing data|UnidentifiedImageError|JSONDecodeError.*(?:line|char)", re.IGNORECASE)),
)
_USER_EXC: Final = re.compile(
    r"^(?:TypeError|ValueError|AttributeError|KeyError|IndexError|NameError|UnboundLocalError|AssertionError"
    r"|ZeroDivisionError)\b")
_LIB_FILE: Final = re.compile(r"site-packages|dist-packages|/lib/python\d|^<frozen|^<string>|\\Lib\\")


#: _CLUE_PATTERNS searched only where a literal their patterns require is in the text (the same answers).
_CLUE_FAST: Final = tuple((name, Prefiltered(pattern)) for name, pattern in _CLUE_PATTERNS)


def clue_from_lines(lines: Sequence[str], *, frames: Sequence[tuple[str, str, str]] = (),
                    exception_lines: Sequence[str] = (), secondary_only: bool = False) -> str:
    """The :data:`CLUES` state the log's lines support (first matching kind wins, in the order of
    ``_CLUE_PATTERNS``; then user code raising a plain Python error; else ``none``)."""
    if secondary_only:
        return "secondary_only"
    text = "\n".join(lines)
    for name, pattern in _CLUE_FAST:
        if pattern.search(text):
            return name
    last = exception_lines[-1].strip() if exception_lines else ""
    if frames and _USER_EXC.match(last) and not _LIB_FILE.search(frames[-1][0]):
        return "user_code"
    return "none"


def _cache_dir() -> Path | None:
    try:
        from gpulens.config import load_config

        return Path(load_config().data_dir) / "models"
    except Exception:
        return None


def _code_hash() -> str:
    """Digest of the code that defines the network (this module and the pgmpy adapter)."""
    import hashlib

    from gpulens.diagnosis import bn_adapter

    h = hashlib.sha256()
    for mod_file in (__file__, bn_adapter.__file__):
        h.update(Path(str(mod_file)).read_bytes())
    return h.hexdigest()[:16]


_MODELS: dict[Path, OriginModel] = {}


def cached_model(folder: Path | None, name: str, learn: Callable[[], OriginModel], *,
                 shared: bool = False) -> OriginModel:
    """The network kept as JSON tables in ``folder/origin-bn-<code hash>[-name].json``: read when
    present (no pgmpy import, no refit), else ``learn()``-ed and written (atomically; a read-only
    folder keeps it in memory). JSON cannot run code when read, and the file name carries the
    hash of the code that defines the network, so a changed network is learned again.

    ``shared``: a network learned from the code alone (no store's labels) is also kept in, and
    read from, the per-user cache (``$XDG_CACHE_HOME/gpulens/models``), so that a new data
    directory does not learn it again (4-6 CPU-s: pgmpy and what it imports, then the fit)."""
    from gpulens.config import user_cache_dir

    stem = f"origin-bn-{_code_hash()}" + (f"-{name}" if name else "")
    paths = [d / f"{stem}.json" for d in (folder, user_cache_dir() / "models" if shared else None)
             if d is not None]
    for path in paths:
        model = _MODELS.get(path) or _read_model(path, "synthetic" if not name else f"cached {name}")
        if model is not None:
            _MODELS[path] = model
            return model
    model = learn()
    for path in paths:
        _write_model(path, model)
        _MODELS[path] = model
    return model


def _read_model(path: Path, source: str) -> OriginModel | None:
    """The network stored at ``path``, or None when there is none or it does not read (learn again)."""
    import json

    try:
        return OriginModel(BayesNet.from_dict(json.loads(path.read_text(encoding="utf-8"))), source=source)
    except (OSError, ValueError, KeyError, TypeError, InputError):
        return None


def _write_model(path: Path, model: OriginModel) -> None:
    """Write the network's tables atomically; a read-only folder keeps it in memory only."""
    import json
    import os

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(model.net.to_dict()), encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        pass


@functools.lru_cache(maxsize=1)
def evidence_model() -> OriginModel:
    """:func:`default_model`, kept as JSON tables under ``<data dir>/models/`` (keyed by the code
    that defines it) so a process that only classifies logs does not import pgmpy and refit the
    network: the first use learns and writes it, later processes read the tables."""
    return cached_model(_cache_dir(), "", default_model, shared=True)


@functools.lru_cache(maxsize=512)
def _origin_cached(category: str, clue: str) -> tuple[str, float]:
    post = evidence_model().posterior({"category": category, "clue": clue})
    best = max(post, key=lambda o: post[o])
    return best, float(post[best])


def origin_from_evidence(category: str, clue: str) -> tuple[str, float]:
    """(origin, posterior probability) from the default network given the category and the clue
    read from the log's lines (cached per pair: a log costs a dictionary lookup)."""
    if category == "unknown":
        return "unknown", 1.0
    return _origin_cached(category, clue)
