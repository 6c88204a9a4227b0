"""Round 23: whole.py's end-of-run scan lives in run_end.py, the attempt's terminal failure lines in
terminal.py and the first failing rank/node helpers in failing.py (review42 item 6); whole.py keeps the decision's order and the answer's assembly."""

from __future__ import annotations

from gpulens.diagnosis.logread.end import run_end, terminal
from gpulens.diagnosis.logread.lineprefix import ray_free
from tests.diagnosis.logread_structure import assert_part, assert_unique, defined

_PARTS = ("failing", "run_end", "terminal", "whole")


def test_parts_say_their_job_and_whole_no_longer_scans_the_end() -> None:
    for name in ("failing", "run_end", "terminal"):
        assert_part(name)
    assert_unique(_PARTS)
    moved = {"_frontier", "_completion_after", "_trained_after", "_ended_by", "_failures", "_rank_failures",
             "_at_exit", "_AT_EXIT", "_ray_free", "_NormCache", "_first_origin", "_same", "_failing_rank", "_failing_host", "GOING_ON", "SCAN_LINES", "EARLIER_COMPLETION", "WEAK_AFTER_FAILURE"}
    assert not moved & set(defined("whole"))


def _steps(n: int, start: int = 1) -> list[str]:
    return [f"Epoch 1: step {k}/100 loss=0.5" for k in range(start, start + n)]


def test_frontier_leaves_fewer_than_going_on_progress_lines_after_it() -> None:
    lines = _steps(5) + ["RuntimeError: CUDA out of memory."]
    at = run_end.frontier(lines, 0)
    assert at == 5 - run_end.GOING_ON + 1  # after the first of the last GOING_ON progress lines
    assert sum(1 for ln in lines[at:] if "step" in ln) == run_end.GOING_ON - 1
    assert run_end.frontier(["no progress here", "at all"], 0) == 0


def test_completion_after_the_last_failure_and_training_after_it() -> None:
    lines = _steps(3) + ["ValueError: bad shape", "Training finished."]
    assert run_end.completion_after(lines, 0, []) is not None
    later = ["Training finished.", *_steps(4, 50)]
    assert run_end.trained_after(later, 0, len(later))
    assert not run_end.trained_after(later, 0, 1)


def test_terminal_failures_none_when_training_went_on() -> None:
    went_on = ["RuntimeError: CUDA out of memory.", *_steps(6)]
    assert terminal.terminal_failures(went_on, 0, run_end.frontier(went_on, 0), []) == []
    ended = [*_steps(6), "RuntimeError: CUDA out of memory."]
    assert terminal.terminal_failures(ended, 0, run_end.frontier(ended, 0), []) == [6]


def test_ray_free_strips_one_lines_prefix() -> None:
    assert ray_free("(TrainWorker pid=731, ip=10.1.2.3) RuntimeError: boom") == "RuntimeError: boom"


def test_any_line_is_from_an_unnamed_origin_and_the_cache_normalises_from_start() -> None:
    from gpulens.diagnosis.logread import ranks
    from gpulens.diagnosis.logread.indicators import failing

    assert failing.from_origin("any line", ranks.Origin())
    cache = failing.NormCache(["a", "  b  "], 1)
    assert cache.get(1) == "b" and cache.get(0) == ""


def test_lines_hub_split_each_part_one_job_and_lines_exports_only_its_own() -> None:
    """review42 item 9: lines.py held caught reports, a dead driver, bars, launches and prefixes beside its
    line tests; each now has a module, and lines.__all__ names only what lines defines (no forwards)."""
    from gpulens.diagnosis.logread import lines

    parts = ("bars", "caught", "drivers", "launches", "lineprefix")
    for name in parts:
        assert_part(name)
    assert_unique((*parts, "lines"))
    own = set(defined("lines"))
    assert set(lines.__all__) <= own, set(lines.__all__) - own
    moved = {"handled_blocks", "drop_caught", "driver_report", "dead_driver", "BarText", "bar_update", "text_on_bar",
             "spawned_child", "launch_banner", "TORCHRUN_BANNER", "prefix_free", "process_key"}
    assert not moved & own


def test_one_bar_update_pattern() -> None:
    """review42 item 8: timeouts read a bar's count with a looser pattern of its own; it asks bars now."""
    from gpulens.diagnosis.logread.bars import bar_updates

    assert "_BAR_COUNT" not in defined("timeouts")
    shown = "Map:  40%|####      | 40/100 [00:09<00:13, 4.4it/s]\rMap: 100%|##########| 100/100 [00:20<00:00, 5.0it/s]"
    assert [(m.group(1), m.group(2)) for m in bar_updates(shown)] == [("40", "100"), ("100", "100")]
