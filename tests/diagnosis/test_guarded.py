"""guarded.Guarded on long texts: searched alternative by alternative first, the same match
(span and groups) as the bare pattern's search from the start."""

from __future__ import annotations

import re
from pathlib import Path

from gpulens.diagnosis.guarded import LONG_TEXT, Branches, Guarded, top_branches

from .test_logread import _guards


def test_top_branches_splits_at_the_top_level_only() -> None:
    assert top_branches(r"a[|]b|c\|d|(e|f)|[]|x]|y(?:z|w)") == ["a[|]b", r"c\|d", "(e|f)", "[]|x]", "y(?:z|w)"]
    assert top_branches(r"[^]|]x|y") == ["[^]|]x", "y"]
    assert top_branches("abc") is None  # not an alternation
    assert top_branches("(?i)error|fatal") is None  # the flag applies to both alternatives
    assert top_branches(r"(a)\1|b") is None and top_branches(r"(?P<x>a)(?P=x)|b") is None  # back-references
    assert top_branches("(?i:error)|FATAL") == ["(?i:error)", "FATAL"]  # a scoped flag stays with its own


def test_leftmost_start_is_the_patterns() -> None:
    # the earliest alternative's match, wherever it is in the pattern's order; an alternative
    # without literals (always searched) and one whose literal is elsewhere in the text
    b = Branches(re.compile(r"Killed\b|\d+ errors?|^\s*\[W |exit code [1-9]"))
    assert b.alts is not None and len(b.alts) == 4
    text = "x" * 3000 + " exit code 0 ... 3 errors ... Killed ... exit code 2"
    assert b.first_start(text) == text.index("3 errors")
    assert b.search(text).span() == re.search(b.regex.pattern, text).span()  # type: ignore[union-attr]
    assert b.first_start("Killedx exit code 0") == -1
    assert b.first_start("  [W warn") == 0


def _long_texts() -> list[str]:
    """The sample logs' lines glued into tqdm-like lines ("\\r" between updates) of 2-40 K
    characters, and each line alone padded past LONG_TEXT at its start and at its end."""
    root = Path(__file__).resolve().parents[2] / "sample_logs"
    out: list[str] = []
    for p in sorted(root.rglob("*")):
        if not p.is_file() or p.suffix == ".csv" or "whole" in p.parts:
            continue
        lines = p.read_text(errors="replace").split("\n")
        for k in range(0, len(lines), 40):
            out.append("\r".join(lines[k:k + 40]).ljust(LONG_TEXT + 1, "."))
    return out


def test_each_guard_finds_the_same_match_on_long_texts() -> None:
    guards = _guards()
    texts = _long_texts()
    assert all(len(t) > LONG_TEXT for t in texts) and len(texts) > 100
    matched = dict.fromkeys((name for name, _ in guards), 0)
    for name, g in guards:
        assert isinstance(g, Guarded)
        bare = re.compile(g.pattern)
        for text in texts:
            want, got = bare.search(text), g.search(text)
            assert (want is None) == (got is None), (name, text[:200])
            if want is not None and got is not None:
                assert (want.span(), want.groups()) == (got.span(), got.groups()), (name, text[:200])
                matched[name] += 1
        assert g._branches is not None and g._branches.alts is not None, name  # searched one by one
    assert sum(v > 0 for v in matched.values()) >= 9, matched  # not vacuous
