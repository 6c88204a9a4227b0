"""guarded.Guarded on long texts: searched alternative by alternative first, the same match
(span and groups) as the bare pattern's search from the start."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import gpulens.diagnosis.rules as rules_module
from gpulens.diagnosis.guarded import LONG_TEXT, Branches, Guarded, Prefiltered, top_branches
from gpulens.diagnosis.rules import Rule, load_rules, match_rules, required_literals

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
    # matches: whether any alternative matches (the first found; not the leftmost)
    assert b.matches(text) and not b.matches("Killedx exit code 0") and b.matches("  [W warn")


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
    return out[::3]  # one in three: the bare patterns are slow on them


def test_each_guard_finds_the_same_match_on_long_texts() -> None:
    guards = _guards()
    texts = _long_texts()
    assert all(len(t) > LONG_TEXT for t in texts) and len(texts) > 50
    matched = dict.fromkeys((name for name, _ in guards), 0)
    for name, g in guards:
        assert isinstance(g, Guarded)
        bare = re.compile(g.pattern)
        for text in texts:
            want, got = bare.search(text), g.search(text)
            assert (want is None) == (got is None) == (not g.matches(text)), (name, text[:200])
            if want is not None and got is not None:
                assert (want.span(), want.groups()) == (got.span(), got.groups()), (name, text[:200])
                matched[name] += 1
    split = [name for name, g in guards if g._branches is not None and g._branches.alts is not None]
    assert len(split) >= 9, split  # searched one by one
    assert sum(v > 0 for v in matched.values()) >= 9, matched  # not vacuous


def _prefiltered() -> list[tuple[str, Prefiltered]]:
    from gpulens.diagnosis import logs, origin
    from gpulens.diagnosis.logread import attempts, lines, phase, ranks, steplines
    from gpulens.diagnosis.logread.end import completion
    from gpulens.diagnosis.logread.indicators import rootline

    return [*((f"{m.__name__}.{k}", v) for m in (logs, lines, phase, steplines, attempts, completion, rootline, ranks, origin)
              for k, v in vars(m).items() if isinstance(v, Prefiltered)),
            *((f"origin clue {name}", p) for name, p in origin._CLUE_FAST)]


def test_required_literals_as_written() -> None:
    # fold=False: the literals as the pattern writes them; none from a case-insensitive part
    assert required_literals(r"[Tt]imeout|Killed\b", fold=False) == ("imeout", "Killed")
    assert required_literals(r"[Tt]imeout|Killed\b") == ("imeout", "killed")
    assert required_literals(r"(?i:exit code) [1-9]|Killed", fold=False) is None
    assert required_literals("(?i)abc", fold=False) is None and required_literals("abc", re.I, fold=False) is None
    assert required_literals("caf\u00e9 ok", fold=False) == ("caf\u00e9 ok",)


def test_prefiltered_on_hand_written_lines() -> None:
    # an anchored alternative with no literal (a glog fatal line), a literal one, a
    # case-insensitive pattern (the literals lower-cased), a pattern with a literal-free
    # alternative that can match anywhere (no prefilter: searched as it is)
    p = Prefiltered(r"^(?:F\d{4}\s|Check failed)|Segmentation fault|\bKilled\b")
    assert p._holds is None and not p._ready  # read from the pattern at the first search, not at import
    assert p.search("") is None and p._head is not None and p._holds is not None
    for line in ("F0412 12:00:01 x.cc:3] oops", "Check failed: a == b", "x Check failed", "Segmentation fault (core)",
                 "job Killed", "OOMKilled", ""):
        assert (p.search(line) is None) == (p.regex.search(line) is None) == (not p.matches(line)), line
    q = Prefiltered(r"\b(?:step|epoch)\b|it/s", re.IGNORECASE)
    assert q.search("EPOCH 3") is not None and q.search("epochs 3") is None and q.search("12 IT/S") is not None
    bare = Prefiltered(r"\d+|x")
    assert Prefiltered(r"\d+ errors|x").search("y") is None and bare.search("7") is not None and bare._holds is None


def test_each_prefiltered_pattern_answers_as_itself_on_sample_lines() -> None:
    import re as re_

    found = _prefiltered()
    assert len(found) >= 4
    root = Path(__file__).resolve().parents[2] / "sample_logs"
    lines = [ln for p in sorted(root.rglob("*")) if p.is_file() and p.suffix != ".csv" and "whole" not in p.parts
             for ln in p.read_text(errors="replace").split("\n")]
    texts = [*lines, *_long_texts()]
    matched = dict.fromkeys((name for name, _ in found), 0)
    for name, p in found:
        bare = re_.compile(p.pattern, p.regex.flags)
        for text in texts:
            want, got = bare.search(text), p.search(text)
            assert (want is None) == (got is None) == (not p.matches(text)), (name, text[:200])
            if want is not None and got is not None:
                assert (want.span(), want.groups()) == (got.span(), got.groups()), (name, text[:200])
                matched[name] += 1
    assert all(matched.values()), matched


def _reference_matches(text: str, rules: tuple[Rule, ...]) -> list[tuple[str, str, int, dict[str, str]]]:
    """match_rules without any prefilter: every rule's whole pattern over the whole text."""
    out = []
    for rule in rules:
        last = None
        for last in rule.pattern.finditer(text):  # noqa: B007 - the last match
            pass
        ctx = rule.context.search(text) if rule.context is not None else None
        if last is None or (rule.context is not None and ctx is None):
            continue
        groups = {k: v for k, v in (ctx.groupdict() if ctx else {}).items() if v is not None}
        groups.update({k: v for k, v in last.groupdict().items() if v is not None})
        ls, le = text.rfind("\n", 0, last.start()) + 1, text.find("\n", last.end())
        out.append((rule.id, text[ls: le if le >= 0 else len(text)].strip(), last.start(), groups))
    return out


def test_match_rules_finds_what_the_whole_patterns_find() -> None:
    # the literal plan (rare byte pieces, then `in`) and the alternations cut to the alternatives
    # whose literals a text holds change no match: every seventh sample excerpt, each rule's
    # own example, and the excerpts with their case changed
    rules = load_rules()
    root = Path(__file__).resolve().parents[2] / "sample_logs"
    texts = [p.read_text(errors="replace") for p in sorted(root.rglob("*"))[::7]
             if p.is_file() and p.suffix != ".csv" and "whole" not in p.parts]
    texts += [r.example for r in rules] + [t.upper() for t in texts[::10]] + ["", "x", "caf\u00e9 \u2588 \U0001F600"]
    cut = 0
    for text in texts:
        got = [(m.rule.id, m.line, m.position, m.groups) for m in match_rules(text, rules)]
        assert got == _reference_matches(text, rules), text[:200]
        plan = rules_module._plan_for(rules)
        present = rules_module._present_needles(text.lower(), plan)
        assert present == {n for n in plan.needles if n in text.lower()}
        cut += sum(rules_module._pattern_for(r, plan, present) not in (None, r.pattern) for r in rules)
    assert cut > 30  # some alternations were cut: the check is not vacuous


def test_present_needles_finds_each_literal_alone_at_the_ends_and_after_wide_characters() -> None:
    # a literal is compared where its rare bytes are: one that fills the whole text, starts it,
    # ends it or follows multi-byte characters is found; one cut by a byte is not
    plan = rules_module._plan_for(load_rules())
    needles = sorted(plan.needles)
    assert any(len(n.encode()) < 4 for n in needles) and any(not n.isascii() for n in needles)
    for n in needles:
        for text in (n, n + " tail", "head " + n, "\u00e9\u4e2d\U0001F600" + n + "\u00e9"):
            assert n in rules_module._present_needles(text, plan), (n, text)
        assert n not in rules_module._present_needles(n[:-1] + "\n" + n[-1], plan)


def test_split_guards_find_the_same_match_on_every_sample_line() -> None:
    # Guarded(..., split=True) searches short lines alternative by alternative too
    split = [(name, g) for name, g in _guards() if isinstance(g, Guarded) and g._split]
    assert len(split) >= 3
    root = Path(__file__).resolve().parents[2] / "sample_logs"
    lines = [ln for p in sorted(root.rglob("*")) if p.is_file() and p.suffix != ".csv" and "whole" not in p.parts
             for ln in p.read_text(errors="replace").split("\n")]
    for name, g in split:
        bare = re.compile(g.pattern)
        hits = 0
        for line in [*lines, "x Warning: y", "  File \"a.py\", line 3", "Killed", "3 errors"]:
            want, got = bare.search(line), g.search(line)
            assert (want is None) == (got is None) == (not g.matches(line)), (name, line[:200])
            if want is not None and got is not None:
                assert (want.span(), want.groups()) == (got.span(), got.groups()), (name, line[:200])
                hits += 1
        assert hits, name


def test_remembered_answers_as_the_function_and_keeps_short_lines_only() -> None:
    # the answers for short lines are kept (computed once), a long line's are computed each time,
    # a second string argument is part of the key; the reader's remembered helpers answer as
    # their own bodies on every sample line, asked twice
    from gpulens.diagnosis import logs
    from gpulens.diagnosis.guarded import REMEMBERED_CHARS, remembered
    from gpulens.diagnosis.logread import lines as lines_mod
    from gpulens.diagnosis.logread import ranks

    calls: list[tuple[str, str]] = []

    def shout(line: str, raw: str = "") -> str:
        calls.append((line, raw))
        return line.upper() + raw

    g = remembered(shout)
    assert g("abc") == "ABC" and g("abc") == "ABC" and calls == [("abc", "")]
    assert g("abc", "x") == "ABCx" and g("abc", "x") == "ABCx" and len(calls) == 2
    long = "y" * (REMEMBERED_CHARS + 1)
    assert g(long) == long.upper() and g(long) == long.upper() and len(calls) == 4
    assert g("abc", long) == "ABC" + long and g("abc", long) == "ABC" + long and len(calls) == 6
    seen: list[str] = []

    def lone(line: str) -> int:  # one argument: the lighter wrapper, the same keeping
        seen.append(line)
        return len(line)

    h = remembered(lone)
    assert [h("ab"), h("ab"), h(long), h(long)] == [2, 2, len(long), len(long)] and seen == ["ab", long, long]
    root = Path(__file__).resolve().parents[2] / "sample_logs"
    sample = [ln for p in sorted(root.rglob("*")) if p.is_file() and p.suffix != ".csv" and "whole" not in p.parts
              for ln in p.read_text(errors="replace").split("\n")][:20000]
    helpers: list[Any] = [lines_mod.is_progress, logs.normalize_line, logs.is_hard_error, ranks.strip_prefix]
    for f in helpers:
        body = f.__wrapped__
        for _ in range(2):
            assert [f(ln) for ln in sample] == [body(ln) for ln in sample], f.__name__
    # a line a text helper leaves as it was comes back as the object given (callers test "rest is line")
    for f in (logs.normalize_line, ranks.strip_prefix):
        first, again = "".join(["plain ", "line"]), "".join(["plain ", "line"])
        assert first is not again and f(first) is first and f(again) is again, f.__name__
    assert ranks.launcher_text("".join(["gpu07:", "     loss = model(batch)"])) == "    loss = model(batch)"
    failure: Any = lines_mod.is_failure
    for _ in range(2):
        assert [failure(logs.normalize_line(ln), ln) for ln in sample] == \
            [failure.__wrapped__(logs.normalize_line(ln), ln) for ln in sample]
