"""Round 26: the literals kills.first_stop scans for cover every ``preempted`` rule's line (four rules were
unread: a Slurm node failure, a pod's deadline and its node's shutdown, a spot instance's interruption)."""
from __future__ import annotations

import pytest

from gpulens.diagnosis.logread.cause.kills import STOP_KEYS, _stop_rules, first_stop


def test_every_preempted_rule_example_holds_a_stop_key() -> None:
    rules = _stop_rules()
    assert len(rules) >= 20
    unread = [r.id for r in rules if not any(k in r.example for k in STOP_KEYS)]
    assert unread == []


@pytest.mark.parametrize("line", ["srun: error: Node failure on gpu07",
                                  "Warning  DeadlineExceeded  job-controller  Job was active longer than specified deadline",
                                  "message: Pod was terminated in response to imminent node shutdown."])
def test_first_stop_finds_the_stops_it_missed(line: str) -> None:
    lines = ["epoch 3 step 120 loss 0.41", "epoch 3 step 130 loss 0.40", line, "srun: error: task 0: Exited"]
    assert first_stop(lines, 0, len(lines)) == 2


def test_first_stop_ignores_words_that_only_share_a_key() -> None:
    lines = ["wall time per step 0.3 s", "Signal strength metric 0.9", "epoch 4 step 10 loss 0.3"]
    assert first_stop(lines, 0, len(lines)) is None
