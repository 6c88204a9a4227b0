"""Failure signature rules, kept as data in ``signatures.yaml`` (see that file for the format)."""

from __future__ import annotations

import dataclasses
import functools
import re
from pathlib import Path

import yaml

from diagnosis.types import CATEGORIES, ORIGINS
from gpulens.errors import InputError

__all__ = ["RULES_FILE", "Rule", "RuleMatch", "load_rules", "match_rules"]

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
        raise InputError(f"{where} must hold a list of rules.", "See diagnosis/rules/signatures.yaml.")
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
        priority = int(item.get("priority", 50))
        default_conf = 0.95 if priority > GENERIC_PRIORITY else 0.75
        rules.append(Rule(
            id=rid, category=str(item["category"]), origin=str(item["origin"]), priority=priority,
            pattern=pattern, example=str(item["example"]), source=str(item.get("source", "")),
            confidence=float(item.get("confidence", default_conf)),
        ))
    rules.sort(key=lambda r: -r.priority)
    return rules


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


def match_rules(text: str, rules: tuple[Rule, ...] | None = None) -> list[RuleMatch]:
    """Every rule that matches ``text`` (its last match), highest priority first."""
    out: list[RuleMatch] = []
    for rule in rules if rules is not None else load_rules():
        last = None
        for last in rule.pattern.finditer(text):  # noqa: B007 - we want the last match
            pass
        if last is None:
            continue
        pos = last.start()
        ls = text.rfind("\n", 0, pos) + 1
        le = text.find("\n", last.end())
        out.append(RuleMatch(rule, text[ls: le if le >= 0 else len(text)].strip(), pos))
    return out
