"""Round 26: the story says which other ranks printed what after the root error (issue 23's "ranks 0-2 and
4-7 then timed out in NCCL (secondary)"), not only how many lines they printed."""
from __future__ import annotations

from gpulens.diagnosis.classifier import Classifier
from gpulens.diagnosis.logread.indicators.secondary import KINDS, rank_span
from gpulens.diagnosis.logread.whole import diagnose_text

_OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 2 has a total capacity of "
        "79.15 GiB of which 1.02 GiB is free.")
_WATCHDOG = ("[E ProcessGroupNCCL.cpp:475] [Rank {r}] Watchdog caught collective operation timeout: "
             "WorkNCCL(SeqNum=4402, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600073 "
             "milliseconds before timing out.")


def _log() -> str:
    lines = [f"[rank{r}]: step 12400 loss 1.93" for r in range(8)]
    lines += ["[rank2]: Traceback (most recent call last):", '[rank2]:   File "train.py", line 88, in <module>',
              "[rank2]:     loss.backward()", f"[rank2]: {_OOM}", f"[rank3]: {_OOM}"]
    lines += [f"[rank{r}]:{_WATCHDOG.format(r=r)}" for r in (0, 1, 4, 5, 6, 7)]
    lines += ["W0312 15:20:02.721000 3066 torch/distributed/elastic/multiprocessing/api.py:897] Sending process 3068 "
              "closing signal SIGTERM"]
    return "\n".join(lines) + "\n"


def test_the_story_names_the_other_ranks_and_what_they_printed(rules: Classifier) -> None:
    w = diagnose_text(_log(), rules)
    assert w.first_rank == 2 and w.diagnosis.category == "gpu_oom"
    assert dict(w.secondary.groups) == {"same": (3,), "timeout": (0, 1, 4, 5, 6, 7)}
    assert w.secondary.ranks == (0, 1, 3, 4, 5, 6, 7) and w.secondary.kind == "timeout" and w.secondary.stopped
    story = w.story()
    assert ("then rank 3 printed the same error, ranks 0-1 and 4-7 timed out waiting in a collective; "
            "the rest were stopped by a signal") in story
    out = w.to_dict()
    assert out["secondary_ranks"] == [0, 1, 3, 4, 5, 6, 7] and out["secondary_kind"] == "timeout"


def test_without_another_ranks_own_error_the_count_stays(rules: Classifier) -> None:
    text = "\n".join(["step 1 loss 2.0", "Traceback (most recent call last):", '  File "t.py", line 3, in <module>',
                      f"{_OOM}", "srun: error: gpu07: task 0: Exited with exit code 1"]) + "\n"
    w = diagnose_text(text, rules)
    assert w.secondary.groups == () and "later error line(s) from other ranks or launchers" in w.story()


def test_rank_span() -> None:
    assert rank_span([0, 1, 2, 4, 5, 6, 7]) == "0-2 and 4-7"
    assert rank_span([5, 1, 3]) == "1, 3 and 5"
    assert rank_span([4]) == "4"
    assert set(KINDS) == {"same", "timeout", "lost_peer", "signal", "error"}
