"""A regular expression searched only on strings that hold one of its required literals.

Python's ``re`` tries every alternative of a long alternation at every position of a line
(tens of microseconds on a 200-character line); most lines a log reader looks at hold none
of the literals every match needs, which ``in`` rules out in a few hundred nanoseconds. The
answers are the pattern's own: ``literals`` must be such that every match of the pattern
contains one of them (tests/diagnosis/test_logread.py checks each guard against its
pattern on every line of the sample logs).
"""

from __future__ import annotations

import re

__all__ = ["Guarded"]


class Guarded:
    """``pattern`` behind a literal prefilter: ``search`` is ``pattern.search`` on strings
    holding one of ``literals`` and ``None`` on the others."""

    __slots__ = ("literals", "regex")

    def __init__(self, pattern: str, literals: tuple[str, ...]) -> None:
        self.regex = re.compile(pattern)
        self.literals = literals

    @property
    def pattern(self) -> str:
        return self.regex.pattern

    def search(self, text: str) -> re.Match[str] | None:
        for key in self.literals:
            if key in text:
                return self.regex.search(text)
        return None
