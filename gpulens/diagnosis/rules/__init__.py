"""Failure signature rules, kept as data in ``signatures.yaml`` (see that file for the format)."""

from __future__ import annotations

import dataclasses
import functools
import importlib
import re
from pathlib import Path
from typing import Any

import yaml

from gpulens.diagnosis.types import CATEGORIES, ORIGINS
from gpulens.errors import InputError

__all__ = ["RULES_FILE", "Rule", "RuleMatch", "load_rules", "match_rules", "required_literals"]

RULES_FILE = Path(__file__).with_name("signatures.yaml")

#: Rules whose match alone is not conclusive (the SVM may overrule them).
GENERIC_PRIORITY = 45


@dataclasses.dataclass(frozen=True)
class Rule:
    id: str
    category: str
    origin: str
    priority: int
    pattern: re.Pattern[str]
    example: str
    source: str = ""
    confidence: float = 0.95
    #: Lower-cased literals, at least one of which occurs in any text the pattern matches
    #: (derived from the pattern; None when no such set was found: the rule always runs).
    needles: tuple[str, ...] | None = None
    #: Optional second pattern that must also be found in the text (e.g. "the traceback
    #: reads a data file" for a value-conversion error).
    context: re.Pattern[str] | None = None

    @property
    def generic(self) -> bool:
        return self.priority <= GENERIC_PRIORITY


@dataclasses.dataclass(frozen=True)
class RuleMatch:
    rule: Rule
    line: str  # the (normalized) line the match is on
    position: int  # offset of the match in the text it was searched in


def _parse(raw: object, where: str) -> list[Rule]:
    if not isinstance(raw, list):
        raise InputError(f"{where} must hold a list of rules.", "See gpulens/diagnosis/rules/signatures.yaml.")
    rules: list[Rule] = []
    seen: set[str] = set()
    for i, item in enumerate(raw):
        if not isinstance(item, dict):
            raise InputError(f"{where}: rule #{i} is not a mapping.", "Each rule needs id, pattern, category.")
        rid = str(item.get("id", f"#{i}"))
        missing = [k for k in ("id", "category", "origin", "pattern", "example") if k not in item]
        if missing:
            raise InputError(f"{where}: rule {rid} lacks {', '.join(missing)}.", "Add the missing keys.")
        if rid in seen:
            raise InputError(f"{where}: rule id {rid} is used twice.", "Give every rule its own id.")
        seen.add(rid)
        if item["category"] not in CATEGORIES or item["origin"] not in ORIGINS:
            raise InputError(
                f"{where}: rule {rid} has category {item['category']!r} / origin {item['origin']!r}.",
                f"Use one of {', '.join(CATEGORIES)} and {', '.join(ORIGINS)}.",
            )
        flags = re.MULTILINE | (re.IGNORECASE if "i" in str(item.get("flags", "")) else 0)
        try:
            pattern = re.compile(str(item["pattern"]), flags)
        except re.error as exc:
            raise InputError(f"{where}: rule {rid} pattern does not compile ({exc}).",
                             "Fix the regular expression.") from exc
        context = None
        if item.get("context"):
            try:
                context = re.compile(str(item["context"]), flags)
            except re.error as exc:
                raise InputError(f"{where}: rule {rid} context does not compile ({exc}).",
                                 "Fix the regular expression.") from exc
        priority = int(item.get("priority", 50))
        default_conf = 0.95 if priority > GENERIC_PRIORITY else 0.75
        rules.append(Rule(
            id=rid, category=str(item["category"]), origin=str(item["origin"]), priority=priority,
            pattern=pattern, example=str(item["example"]), source=str(item.get("source", "")),
            confidence=float(item.get("confidence", default_conf)),
            needles=required_literals(str(item["pattern"]), flags), context=context,
        ))
    rules.sort(key=lambda r: -r.priority)
    return rules


# --------------------------------------------------------------------------- literal prefilter
#: Shortest literal worth checking; a pattern whose alternatives can't all be pinned to
#: literals at least this long gets no prefilter.
MIN_NEEDLE = 3


def required_literals(pattern: str, flags: int = 0) -> tuple[str, ...] | None:
    """Lower-cased ASCII literals of which at least one occurs in every match of ``pattern``.

    Walks the parsed pattern: a sequence needs one of its elements (a run of literal
    characters, or a group/branch/``+``-repeat whose own requirement is known); a branch
    needs one literal of each alternative. Checking ``any(n in text.lower() for n in
    needles)`` before running the regex is then a pure speed-up: it never hides a match
    (comparisons are case-folded, so it holds for ``flags: i`` rules too). Returns None
    when no such set exists (the rule is then always searched).
    """
    try:
        parser: Any = importlib.import_module("re._parser")
        consts: Any = importlib.import_module("re._constants")
        tree = parser.parse(pattern, flags)
    except Exception:  # another Python's internals: no prefilter, same results
        return None
    found = _seq_literals(list(tree), consts)
    return tuple(dict.fromkeys(found)) if found else None


def _seq_literals(items: list[tuple[Any, Any]], c: Any) -> list[str] | None:
    candidates: list[list[str]] = []
    run: list[str] = []

    def flush() -> None:
        if run:
            candidates.append(["".join(run).lower()])
            run.clear()

    for op, av in items:
        if op is c.LITERAL and av < 128:
            run.append(chr(av))
            continue
        flush()
        sub: list[str] | None = None
        if op is c.SUBPATTERN:
            sub = _seq_literals(list(av[-1]), c)
        elif op is c.ATOMIC_GROUP:
            sub = _seq_literals(list(av), c)
        elif op is c.BRANCH:
            alts = [_seq_literals(list(b), c) for b in av[1]]
            sub = None if any(a is None for a in alts) else [x for a in alts if a for x in a]
        elif op in (c.MAX_REPEAT, c.MIN_REPEAT, c.POSSESSIVE_REPEAT) and av[0] >= 1:
            sub = _seq_literals(list(av[2]), c)
        if sub:
            candidates.append(sub)
    flush()
    good = [x for x in candidates if x and all(len(n) >= MIN_NEEDLE for n in x)]
    if not good:
        return None
    return max(good, key=lambda x: (min(len(n) for n in x), -len(x)))


@functools.lru_cache(maxsize=4)
def _load(path: str) -> tuple[Rule, ...]:
    try:
        raw = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise InputError(f"Cannot read rules file {path} ({exc}).", "Check the file exists and is YAML.") from exc
    return tuple(_parse(raw, path))


def load_rules(path: str | Path | None = None) -> tuple[Rule, ...]:
    """The rules, highest priority first (cached per file)."""
    return _load(str(path or RULES_FILE))


@functools.lru_cache(maxsize=16)
def _all_needles(rules: tuple[Rule, ...]) -> frozenset[str]:
    return frozenset(n for r in rules for n in (r.needles or ()))


def match_rules(text: str, rules: tuple[Rule, ...] | None = None) -> list[RuleMatch]:
    """Every rule that matches ``text`` (its last match), highest priority first."""
    out: list[RuleMatch] = []
    rules = rules if rules is not None else load_rules()
    low = text.lower()
    present = {n for n in _all_needles(rules) if n in low}  # each distinct literal checked once
    for rule in rules:
        if rule.needles is not None and present.isdisjoint(rule.needles):
            continue
        last = None
        for last in rule.pattern.finditer(text):  # noqa: B007 - we want the last match
            pass
        if last is None or (rule.context is not None and rule.context.search(text) is None):
            continue
        pos = last.start()
        ls = text.rfind("\n", 0, pos) + 1
        le = text.find("\n", last.end())
        out.append(RuleMatch(rule, text[ls: le if le >= 0 else len(text)].strip(), pos))
    return out
