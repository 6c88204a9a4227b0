"""gpulens analysis: where the GPU-hours go (utilization, locality, early stop,
goodput, failure cost), computed in DuckDB SQL over a store reader connection.

Every function takes ``con = store.connect()`` and an optional :class:`Filters`.
"""

from gpulens.analysis.detail import JobDetail, job_detail, node_timeline
from gpulens.analysis.early_stop import (
    EarlyStopSummary,
    early_stop,
    early_stop_summary,
    online_stop,
)
from gpulens.analysis.filters import Filters
from gpulens.analysis.goodput import STAGES, failure_cost, goodput
from gpulens.analysis.locality import locality, locality_loss
from gpulens.analysis.network import network_traffic
from gpulens.analysis.utilization import job_utilization, utilization, utilization_timeseries

__all__ = [
    "STAGES",
    "EarlyStopSummary",
    "Filters",
    "JobDetail",
    "early_stop",
    "early_stop_summary",
    "failure_cost",
    "goodput",
    "job_detail",
    "job_utilization",
    "locality",
    "locality_loss",
    "network_traffic",
    "node_timeline",
    "online_stop",
    "utilization",
    "utilization_timeseries",
]
