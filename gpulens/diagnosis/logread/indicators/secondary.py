"""What the other ranks printed after the root error, in a few words: which ranks (or nodes) printed the same
error as the first, timed out waiting in a collective or lost a peer's connection, and whether the rest were
stopped by a signal; issue 23's story: "ranks 0-2 and 4-7 then timed out in NCCL (secondary)".
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from gpulens.diagnosis import logs
from gpulens.diagnosis.logread import ranks
from gpulens.diagnosis.logread.cause.timeouts import wait_kind
from gpulens.diagnosis.logread.lines import is_scheduler_kill
from gpulens.diagnosis.logread.signals import names_a_signal
from gpulens.diagnosis.logread.tracebacks import EXCEPTION
from gpulens.diagnosis.rules import Rule, match_rules

__all__ = ["KINDS", "Secondary", "error_key", "kind_of", "rank_span", "summarize"]

#: What a secondary line says, in the story's words.
KINDS = {"same": "printed the same error", "timeout": "timed out waiting in a collective",
         "lost_peer": "lost a peer's connection", "signal": "were stopped by a signal", "error": "printed other errors"}
#: Secondary lines read for their kind (the first ones; a long tail repeats them).
_READ = 200
#: The kinds that are a rank's own error (a launcher's summaries and its stop signals are not).
_OWN = ("same", "timeout", "lost_peer")


@dataclasses.dataclass(frozen=True)
class Secondary:
    """The secondary lines of a failed attempt: how many; per kind of a rank's own error (a key of :data:`KINDS`
    in :data:`_OWN`), the ranks other than the first failing one that printed it (or, where no line names a
    rank, the nodes); whether a launcher or the scheduler stopped processes by a signal."""

    count: int = 0
    groups: tuple[tuple[str, tuple[int, ...]], ...] = ()
    node_groups: tuple[tuple[str, tuple[str, ...]], ...] = ()
    stopped: bool = False

    @property
    def ranks(self) -> tuple[int, ...]:
        return tuple(sorted({r for _, rs in self.groups for r in rs}))

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(sorted({n for _, ns in self.node_groups for n in ns}))

    @property
    def kind(self) -> str | None:
        """The kind most other ranks (or nodes) show; ``signal`` when they show none but were stopped."""
        groups = self.groups or self.node_groups
        if groups:
            return max(groups, key=lambda g: len(g[1]))[0]
        return "signal" if self.stopped else None


def error_key(line: str, rules: tuple[Rule, ...]) -> tuple[str | None, Rule | None]:
    """A line's exception name (``torch.OutOfMemoryError``) and the best rule that matches it."""
    return _key(_norm(line), rules)


def _norm(line: str) -> str:
    return ranks.strip_prefix(logs.normalize_line(line)).strip()


def _key(norm: str, rules: tuple[Rule, ...]) -> tuple[str | None, Rule | None]:
    m = EXCEPTION.match(norm)
    best = match_rules(norm, rules)
    return (m.group(0) if m else None), (best[0].rule if best else None)


def kind_of(line: str, rules: tuple[Rule, ...], root: tuple[str | None, Rule | None] = (None, None)) -> str:
    """The kind (a key of :data:`KINDS`) of one secondary line; ``root``: the :func:`error_key` of the first
    failing rank's error line, whose exception or rule a line of the same error shares."""
    norm = _norm(line)
    name, rule = _key(norm, rules)
    if (name is not None and name == root[0]) or (rule is not None and root[1] is not None and rule.id == root[1].id):
        return "same"
    waited = wait_kind(rule.id if rule is not None else None, norm)
    if waited is not None:
        return waited
    if (rule is not None and rule.category == "preempted") or names_a_signal(norm):
        return "signal"
    return "error"


def summarize(lines: Sequence[str], secondary: Sequence[int], first: ranks.Origin, rules: tuple[Rule, ...],
              root: str = "") -> Secondary:
    """The :class:`Secondary` of the lines ``secondary`` (indexes into ``lines``), ``first`` the first failing
    rank and node (left out), ``root`` the first failing rank's error line. Each other rank (node) is counted
    once, under the first of its own errors' kinds in :data:`_OWN` order; a line that names no other rank or
    node only tells whether processes were stopped by a signal. A line's kind is read once per text (ranks
    print the same message)."""
    if not secondary:
        return Secondary()
    key = error_key(root, rules) if root else (None, None)
    by_rank: dict[int, str] = {}
    by_node: dict[str, str] = {}
    seen: dict[str, str] = {}
    stopped = False
    for i in secondary[:_READ]:
        o = ranks.origin_of(lines[i])
        other_rank = o.rank is not None and o.rank != first.rank
        other_node = o.rank is None and bool(o.node) and o.node != first.node
        if not (other_rank or other_node):
            stopped = stopped or _stop_line(lines[i])
            continue
        text = ranks.strip_prefix(lines[i])
        kind = seen[text] if text in seen else seen.setdefault(text, kind_of(lines[i], rules, key))
        stopped |= kind == "signal"
        if kind in _OWN and other_rank and o.rank is not None:
            by_rank[o.rank] = min(by_rank.get(o.rank, kind), kind, key=_OWN.index)
        elif kind in _OWN and other_node and o.node:
            by_node[o.node] = min(by_node.get(o.node, kind), kind, key=_OWN.index)
    return Secondary(len(secondary), _grouped(by_rank), _grouped(by_node) if not by_rank else (), stopped)


def _stop_line(line: str) -> bool:
    """Whether a line that names no other rank says processes were stopped: a signal, a scheduler's kill."""
    norm = logs.normalize_line(line)
    return names_a_signal(norm) or is_scheduler_kill(norm)


def _grouped(kinds: dict[Any, str]) -> tuple[tuple[str, tuple[Any, ...]], ...]:
    return tuple((k, tuple(sorted(x for x, got in kinds.items() if got == k))) for k in _OWN if k in kinds.values())


def rank_span(numbers: Sequence[int]) -> str:
    """Ranks as runs: ``[0, 1, 2, 4, 5, 6, 7]`` -> "0-2 and 4-7", ``[1, 3, 5]`` -> "1, 3 and 5"."""
    runs: list[list[int]] = []
    for n in sorted(numbers):
        if runs and n == runs[-1][-1] + 1:
            runs[-1].append(n)
        else:
            runs.append([n])
    parts = [f"{r[0]}" if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs]
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
