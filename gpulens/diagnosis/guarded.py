"""A regular expression searched only on strings that hold one of its required literals.

Python's ``re`` tries every alternative of a long alternation at every position of a line
(tens of microseconds on a 200-character line); most lines a log reader looks at hold none
of the literals every match needs, which ``in`` rules out in a few hundred nanoseconds. The
answers are the pattern's own: ``literals`` must be such that every match of the pattern
contains one of them (tests/diagnosis/test_logread.py checks each guard against its
pattern on every line of the sample logs).

A long text (a tqdm line holding every update of its bar, 100 K characters) that holds a
literal is searched alternative by alternative first (:class:`Branches`): each alternative
of the pattern's top level alone, and only where the text holds one of that alternative's
own literals; the whole pattern then runs from the first place any of them matches (the
same match as from the start, since none matches before it), or not at all.

:class:`Prefiltered` is a guard whose literals are read from the pattern itself (each
alternative's required literals, :func:`gpulens.diagnosis.rules.required_literals`), for a
pattern that was a bare regular expression searched on every line: the same answers, no
literal list to keep in step with the pattern by hand.

:func:`remembered` keeps the answers of a pure function of one log line (or a few) for the last
lines asked about: the whole-log reader's stages ask again about the same lines.
"""

from __future__ import annotations

import ast
import functools
import inspect
import re
import types
from collections.abc import Callable, Iterable, Iterator
from typing import ParamSpec, TypeVar, cast

__all__ = ["Branches", "Guarded", "LONG_TEXT", "Prefiltered", "contains_any", "remembered", "remembered_text",
           "top_branches"]

_T = TypeVar("_T")
_P = ParamSpec("_P")
#: Answers :func:`remembered` keeps per function, and the longest line kept (a tqdm line of every
#: update of its bar is not: it bounds what the caches hold).
REMEMBERED = 1 << 13
REMEMBERED_CHARS = 512


def remembered(func: Callable[_P, _T]) -> Callable[_P, _T]:
    """``func``, a pure function of one or a few strings (a log line), with its answers for the
    last :data:`REMEMBERED` arguments of up to :data:`REMEMBERED_CHARS` characters kept (the
    same answers; the reader asks again about the same lines in several stages)."""
    plain = cast("Callable[..., _T]", func)
    cached = functools.lru_cache(maxsize=REMEMBERED)(plain)

    @functools.wraps(func)
    def one(line: str, *rest: str) -> _T:
        if len(line) > REMEMBERED_CHARS or (rest and any(len(x) > REMEMBERED_CHARS for x in rest)):
            return plain(line, *rest)
        return cached(line, *rest)

    @functools.wraps(func)
    def single(line: str) -> _T:  # a function of one line: no further arguments to test
        return plain(line) if len(line) > REMEMBERED_CHARS else cached(line)

    code = getattr(func, "__code__", None)
    one_line = code is not None and code.co_argcount == 1 and not code.co_kwonlyargcount and not code.co_flags & inspect.CO_VARARGS
    return cast("Callable[_P, _T]", single if one_line else one)


def remembered_text(func: Callable[[str], str]) -> Callable[[str], str]:
    """:func:`remembered` for a function that gives a line's text (a prefix stripped): a line it
    leaves as it was comes back as the object given (as the function's own slicing and
    ``rstrip`` give it; a caller may test ``rest is line``), not the equal one seen first."""
    cached = functools.lru_cache(maxsize=REMEMBERED)(func)

    @functools.wraps(func)
    def text(line: str) -> str:
        if len(line) > REMEMBERED_CHARS:
            return func(line)
        got = cached(line)
        return line if got == line else got

    return text


#: Texts longer than this are searched alternative by alternative first (see the module doc).
LONG_TEXT = 2000


def contains_any(literals: Iterable[str]) -> Callable[[str], bool]:
    """``lambda text: any(k in text for k in literals)``, compiled as one ``or`` chain of ``in``
    tests (``'a' in text or 'b' in text or ...``): the same answer without a generator step per
    literal, two to three times faster on a line holding none. Built from an AST of the literals
    as constants (no source text is evaluated)."""
    keys = tuple(literals)
    if not keys:
        return lambda text: False
    arg = ast.arguments(posonlyargs=[], args=[ast.arg(arg="text")], kwonlyargs=[], kw_defaults=[], defaults=[])
    tests: list[ast.expr] = [ast.Compare(left=ast.Constant(k), ops=[ast.In()], comparators=[ast.Name("text", ast.Load())])
                             for k in keys]
    body = tests[0] if len(tests) == 1 else ast.BoolOp(op=ast.Or(), values=tests)
    tree = ast.fix_missing_locations(ast.Expression(ast.Lambda(args=arg, body=body)))
    code = compile(tree, "<contains_any>", "eval")
    inner = next(c for c in code.co_consts if isinstance(c, types.CodeType))
    return types.FunctionType(inner, {}, "contains_any")


def top_branches(pattern: str) -> list[str] | None:
    """The alternatives of ``pattern``'s top level (``a|b(c|d)|e`` -> ``a``, ``b(c|d)``, ``e``), or
    None where they cannot be searched one by one for the same answer: a back-reference or a
    conditional group (an alternative would refer to a group of another), inline flags that apply
    to the whole pattern, or a pattern that is not an alternation."""
    if "(?P=" in pattern or "(?(" in pattern or re.search(r"\\[1-9]", pattern):
        return None
    out: list[str] = []
    depth, start, i, n = 0, 0, 0, len(pattern)
    while i < n:
        ch = pattern[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "[":  # a class: up to its unescaped "]" ("]" first, or after "^", is a member)
            i += 1
            i += pattern[i:i + 1] == "^"
            i += pattern[i:i + 1] == "]"
            while i < n and pattern[i] != "]":
                i += 2 if pattern[i] == "\\" else 1
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "|" and depth == 0:
            out.append(pattern[start:i])
            start = i + 1
        i += 1
    out.append(pattern[start:])
    if len(out) < 2 or depth != 0 or _GLOBAL_FLAGS.match(pattern):
        return None  # a leading "(?i)" applies to every alternative, not to the first only
    return out


#: Inline flags that apply to a whole pattern (only allowed at its start).
_GLOBAL_FLAGS = re.compile(r"\(\?[aiLmsux]+\)")


class Branches:
    """Where the first match of ``regex`` starts, found alternative by alternative (see the
    module doc), each skipped when the text holds none of the literals every match of it holds
    (:func:`gpulens.diagnosis.rules.required_literals`; lower-cased, and the text with them,
    when ``fold``, else as written)."""

    __slots__ = ("alts", "fold", "regex")

    def __init__(self, regex: re.Pattern[str], *, fold: bool = True) -> None:
        from gpulens.diagnosis.rules import required_literals

        self.regex = regex
        self.fold = fold = fold or bool(regex.flags & re.IGNORECASE)
        parts = top_branches(regex.pattern)
        #: (alternative, the test of its literals or None): each compiled when first searched
        self.alts: list[tuple[str | re.Pattern[str], Callable[[str], bool] | None]] | None = None
        if parts is not None:
            self.alts = [(part, contains_any(needles) if (needles := required_literals(part, regex.flags, fold=fold))
                          else None) for part in parts]

    def first_start(self, text: str) -> int:
        """Where the leftmost match of the pattern in ``text`` starts, -1 for none."""
        if self.alts is None:
            m = self.regex.search(text)
            return -1 if m is None else m.start()
        best = -1
        try:
            for alt in self._candidates(text):
                m = alt.search(text)
                if m is not None and (best < 0 or m.start() < best):
                    best = m.start()
                    if best == 0:
                        break
        except re.error:  # a part that is no pattern alone (a comment holding "|"): the whole one
            return self.first_start(text)
        return best

    def search(self, text: str) -> re.Match[str] | None:
        """``regex.search(text)`` (the same span and groups)."""
        at = self.first_start(text)
        return None if at < 0 else self.regex.search(text, at)

    def matches(self, text: str) -> bool:
        """``regex.search(text) is not None``: some alternative matches somewhere (the first
        one found will do; no leftmost match, no groups)."""
        if self.alts is None:
            return self.regex.search(text) is not None
        try:
            return any(alt.search(text) is not None for alt in self._candidates(text))
        except re.error:  # a part that is no pattern alone (a comment holding "|"): the whole one
            return self.matches(text)

    def _candidates(self, text: str) -> Iterator[re.Pattern[str]]:
        """The alternatives whose literals ``text`` holds, in order, each compiled the first time it
        is wanted; a part that does not compile alone drops the split (``alts`` None) and raises
        ``re.error`` for the caller to search the whole pattern."""
        assert self.alts is not None
        low = text.lower() if self.fold else text
        for k, (alt, holds) in enumerate(self.alts):
            if holds is not None and not holds(low):
                continue
            if isinstance(alt, str):
                try:
                    alt = re.compile(alt, self.regex.flags)
                except re.error:
                    self.alts = None
                    raise
                self.alts[k] = (alt, holds)
            yield alt


class Guarded:
    """``pattern`` behind a literal prefilter: ``search`` is ``pattern.search`` on strings
    holding one of ``literals`` and ``None`` on the others. ``split``: every such string is
    searched alternative by alternative first, as a long text is (for a long alternation that
    the lines it is asked about seldom match)."""

    __slots__ = ("_branches", "_holds", "_split", "literals", "regex")

    def __init__(self, pattern: str, literals: tuple[str, ...], *, split: bool = False) -> None:
        self.regex = re.compile(pattern)
        self.literals = literals
        self._holds = contains_any(literals)
        self._split = split
        self._branches: Branches | None = None  # built for the first long text

    @property
    def pattern(self) -> str:
        return self.regex.pattern

    def search(self, text: str) -> re.Match[str] | None:
        if not self._holds(text):
            return None
        if len(text) <= LONG_TEXT and not self._split:
            return self.regex.search(text)
        if self._branches is None:
            self._branches = Branches(self.regex)
        return self._branches.search(text)

    def matches(self, text: str) -> bool:
        """``search(text) is not None``, without finding the leftmost match of a split pattern."""
        if not self._holds(text):
            return False
        if len(text) <= LONG_TEXT and not self._split:
            return self.regex.search(text) is not None
        if self._branches is None:
            self._branches = Branches(self.regex)
        return self._branches.matches(text)


class Prefiltered:
    """``regex.search`` behind the literal prefilter its own pattern implies: on a text that
    holds none of the literals that every match of some alternative holds (as written, or
    lower-cased for a case-insensitive pattern), and that no alternative anchored at the start
    (``^...`` with no literal of its own) matches, ``None`` (the pattern cannot match);
    otherwise the alternatives are searched one by one, only those whose own literals the text
    holds (:class:`Branches`), and the pattern from the first place one matches. A pattern
    with an alternative that is neither is searched as it is."""

    __slots__ = ("_branches", "_fold", "_head", "_holds", "_ready", "regex")

    def __init__(self, pattern: str | re.Pattern[str], flags: int = 0) -> None:
        self.regex = re.compile(pattern, flags) if isinstance(pattern, str) else pattern
        self._fold = bool(self.regex.flags & re.IGNORECASE)
        self._holds: Callable[[str], bool] | None = None
        self._head: re.Pattern[str] | None = None
        self._branches: Branches | None = None
        self._ready = False  # the prefilter is read from the pattern at the first search (not at import)

    def _build(self) -> None:
        from gpulens.diagnosis.rules import required_literals

        flags = self.regex.flags
        needles: list[str] = []
        heads: list[str] = []
        holds: Callable[[str], bool] | None = None
        for part in top_branches(self.regex.pattern) or [self.regex.pattern]:
            got = required_literals(part, flags, fold=self._fold)
            if got:
                needles.extend(got)
            elif part.startswith("^") and not flags & re.MULTILINE:
                heads.append(part)
            else:
                break  # an alternative that can match anywhere without a literal: no prefilter
        else:
            holds = contains_any(dict.fromkeys(needles))
        self._holds = holds
        self._head = re.compile("|".join(heads), flags) if holds is not None and heads else None
        self._branches = Branches(self.regex, fold=self._fold) if holds is not None else None
        self._ready = True

    @property
    def pattern(self) -> str:
        return self.regex.pattern

    def search(self, text: str) -> re.Match[str] | None:
        if not self._ready:
            self._build()
        if self._holds is None or self._branches is None:
            return self.regex.search(text)
        if not self._holds(text.lower() if self._fold else text) \
                and (self._head is None or self._head.match(text) is None):
            return None
        return self._branches.search(text)

    def matches(self, text: str) -> bool:
        """``search(text) is not None``, without finding the leftmost match."""
        if not self._ready:
            self._build()
        if self._holds is None or self._branches is None:
            return self.regex.search(text) is not None
        if not self._holds(text.lower() if self._fold else text) \
                and (self._head is None or self._head.match(text) is None):
            return False
        return self._branches.matches(text)
