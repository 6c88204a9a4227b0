"""How the whole-log reader turns the failed attempt's error context into a category: which
lines the classifier sees beside the first failing rank's own (the scheduler's and the
kernel's, which speak for the whole job)."""

from __future__ import annotations

from gpulens.diagnosis.logread.badrecord import bad_record
from gpulens.diagnosis.logread.childexit import behind_secondary
from gpulens.diagnosis.logread.crashes import (
    bare_crash,
    own_program_crash,
)
from gpulens.diagnosis.logread.damaged import damaged_file
from gpulens.diagnosis.logread.divergence import (
    DIVERGED_CONFIDENCE,
    diverged_before,
    diverged_loss,
)
from gpulens.diagnosis.logread.earlier import earlier_root
from gpulens.diagnosis.logread.heldmemory import held_elsewhere
from gpulens.diagnosis.logread.joblines import (
    job_lines,
    late_kills,
    root_rank_lines,
)
from gpulens.diagnosis.logread.kills import (
    teardown_term,
    unattributed_kill,
)
from gpulens.diagnosis.logread.lineprefix import (
    strip_line_prefixes,
    strip_ray_prefixes,
)
from gpulens.diagnosis.logread.stops import unnamed_stop
from gpulens.diagnosis.logread.timeouts import (
    died_before_timeout,
    preparing_data,
    unattributed_timeout,
)

__all__ = ["DIVERGED_CONFIDENCE", "bare_crash", "damaged_file", "died_before_timeout", "diverged_before", "teardown_term", "diverged_loss", "behind_secondary",
           "bad_record", "earlier_root", "held_elsewhere", "job_lines", "late_kills",
           "own_program_crash", "preparing_data", "root_rank_lines", "strip_line_prefixes", "strip_ray_prefixes", "unattributed_kill",
           "unattributed_timeout", "unnamed_stop"]


