"""The short story of a whole-log diagnosis an operator can check against the log."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpulens.diagnosis.logread.indicators.markers import is_report_head
from gpulens.diagnosis.logread.indicators.secondary import KINDS, rank_span
from gpulens.vocab import NO_FAILURE

if TYPE_CHECKING:
    from gpulens.diagnosis.logread.whole import WholeDiagnosis

__all__ = ["clip", "story"]

_PHASE_WORDS = {
    "startup": "during startup (before the first step)",
    "first_step": "in the first step",
    "training": "in training",
    "evaluation": "in evaluation",
    "checkpoint_save": "while saving a checkpoint",
    "checkpoint_load": "while loading a checkpoint",
    "shutdown": "at shutdown (after the run's own end)",
    "unknown": "in a phase the log does not settle",
}


#: The most of a line the story quotes.
_QUOTE = 160


def clip(text: str, limit: int = _QUOTE) -> str:
    """``text`` cut to ``limit`` characters where a reader can follow it: after its first sentence when that
    ends past a third of the limit, else at a word boundary, with "…" where words were left out."""
    if len(text) <= limit:
        return text
    head = text[:limit]
    end = head.rfind(". ")
    if end >= limit // 3:
        return head[:end + 1] + " …"
    cut = head.rfind(" ")
    return (head[:cut] if cut >= limit // 3 else head).rstrip(" ,;:") + " …"


def _who(w: WholeDiagnosis) -> str:
    node = w.first_node
    if node and w.first_node_line is not None:
        node += f" (named on line {w.first_node_line:,})"
    if w.first_rank is not None and node:
        return f"rank {w.first_rank} on {node}"
    if w.first_rank is not None:
        return f"rank {w.first_rank}"
    return node or "the job"


def _step(step: str | None) -> str:
    if not step:
        return ""
    return f"at step {int(step):,} " if step.isdigit() else f"at step {step} "


def _stopped(w: WholeDiagnosis) -> bool:
    """A log that stops mid-run with no error and no completion (decided from how it ends)."""
    d = w.diagnosis
    return d.method == "completion" and d.category == "unknown"


def _stopped_story(w: WholeDiagnosis) -> str:
    """E.g. "stopped mid-run, at step 200 in training, with no error and no completion message:
    last line 200/375 [====...] (line 41) -> unknown (killed from outside, e.g. a time limit or a
    preemption, or still running when copied)"."""
    what = clip(w.indicators[0] if w.indicators else w.diagnosis.evidence[0])
    where = f" (line {w.indicator_lines[0]:,})" if w.indicator_lines else ""
    text = (f"stopped mid-run, {_step(w.step)}{_PHASE_WORDS.get(w.phase, w.phase)}, with no error and no completion "
            f"message: last line {what}{where} -> unknown (killed from outside, e.g. a time limit or a preemption, "
            "or still running when copied)")
    return text + (f"; attempt {w.attempts} of {w.attempts} in this file" if w.attempts > 1 else "")


def _error_of(indicators: list[str]) -> str:
    """The first indicator line that states the error (not a report's header above it: Ray's
    "RayTaskError(…): ray::Task() (pid=…, ip=…)", "Exception in thread …:")."""
    return next((x for x in indicators if not is_report_head(x)), indicators[0])


def _others(w: WholeDiagnosis) -> str:
    """E.g. "then ranks 4-6 printed the same error, ranks 0-3 timed out waiting in a collective; the rest
    were stopped by a signal (25 later error lines, secondary)"; without another rank or node's
    own error, "3 later error line(s) from other ranks or launchers (secondary)"."""
    sec = w.secondary
    n = sec.count
    parts = [f"{_named('rank', len(rs), rank_span(rs))} {KINDS[k]}" for k, rs in sec.groups]
    parts += [f"{_named('node', len(ns), ', '.join(ns[:4]) + (f' and {len(ns) - 4} more' if len(ns) > 4 else ''))} "
              f"{KINDS[k]}" for k, ns in sec.node_groups]
    if not parts:
        return f"{n} later error line(s) from other ranks or launchers (secondary)"
    text = "then " + ", ".join(parts)
    text += "; the rest were stopped by a signal" if sec.stopped else ""
    return f"{text} ({n} later error line{'s' if n > 1 else ''}, secondary)"


def _named(what: str, count: int, shown: str) -> str:
    return f"{what}{'s' if count > 1 else ''} {shown}"


def story(w: WholeDiagnosis) -> str:
    """E.g. "rank 3 on gpu07 failed first, at step 12,400 in training: CUDA out of memory
    (line 20,512); 7 later error lines from other ranks or launchers (secondary)"."""
    d = w.diagnosis
    if d.category == NO_FAILURE:
        where = f" (line {w.completion[0]:,})" if w.completion else ""
        what = w.completion[1] if w.completion else ""
        return f"ended normally{', last step ' + w.step if w.step else ''}: {what}{where}".rstrip(": ")
    if not w.indicator_lines and not d.evidence:
        return f"{d.category}: {d.reason or 'no failure line found'}"
    if _stopped(w):
        return _stopped_story(w)
    verb = "failed first" if w.first_rank is not None or w.first_node else "failed"
    what = clip(_error_of(w.indicators) if w.indicators else d.evidence[0])
    lines = ", ".join(f"{n:,}" for n in w.indicator_lines[:3])
    text = f"{_who(w)} {verb}, {_step(w.step)}{_PHASE_WORDS.get(w.phase, w.phase)}: {what}"
    text += f" (line{'s' if len(w.indicator_lines) > 1 else ''} {lines})" if lines else ""
    text += f" -> {d.category}, origin {d.origin}"
    if w.secondary_lines:
        text += f"; {_others(w)}"
    if w.attempts > 1:
        text += f"; attempt {w.attempts} of {w.attempts} in this file"
    return text
