"""A simulated GPU cluster calibrated to the Philly study, for demos, tests and benchmarks.

``simulate(store, gpus=..., days=..., seed=...)`` fills the store with nodes,
GPUs, jobs, attempts, placements, metric curves, failure logs, ground truth and
per-minute GPU samples. See docs/simulate.md for the model and its parameters.
"""

from gpulens.ingest.simulate.core import SimSummary, clear_simulation, simulate
from gpulens.ingest.simulate.params import GpuModel, SimParams, planted_util

__all__ = ["GpuModel", "SimParams", "SimSummary", "clear_simulation", "planted_util", "simulate"]
