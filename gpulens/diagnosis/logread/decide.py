"""The checks the whole-log reader runs on the classifier's answer for the failed attempt's error
context, gathered under one name. Each lives in a module of its own job:

- joblines: the lines the classifier sees beside the first failing rank's own;
- lineprefix: the per-line prefixes removed before it reads them;
- divergence, earlier, badrecord, heldmemory, childexit: the cause printed before or behind what
  it read (a diverged loss, an earlier stage's failure, one bad record, a GPU held elsewhere, a
  child's own error behind a launcher's report);
- timeouts, stops, damaged, kills, crashes: who a timeout, an outside stop, a damaged file, a
  bare kill or a bare crash is owed to;
- answers and diedbefore: the answers those checks give, and whether a process died first.

This module defines nothing: it keeps the names whole.py and the tests import from it."""

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

__all__ = ["DIVERGED_CONFIDENCE", "bad_record", "bare_crash", "behind_secondary", "damaged_file",
           "died_before_timeout", "diverged_before", "diverged_loss", "earlier_root",
           "held_elsewhere", "job_lines", "late_kills", "own_program_crash", "preparing_data",
           "root_rank_lines", "strip_line_prefixes", "strip_ray_prefixes", "teardown_term",
           "unattributed_kill", "unattributed_timeout", "unnamed_stop"]
