"""The phase a failed run was in, and its last step: one package of the log reader.

:mod:`~gpulens.diagnosis.logread.phase.decide` applies the decision order (P1-P11 of
sample_logs/whole/README.md); each other module reads one kind of evidence for it (the failing traceback and its
frames, the steps printed, a checkpoint's save or load, an evaluation, the program's start and end, teardown).
"""

from gpulens.diagnosis.logread.phase.decide import PHASES, UNKNOWN, phase_of

__all__ = ["PHASES", "UNKNOWN", "phase_of"]
