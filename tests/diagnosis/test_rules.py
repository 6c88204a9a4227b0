"""Every signature rule's example matches the rule, and the classifier answers its category."""

from __future__ import annotations

from pathlib import Path

import pytest

from diagnosis.classifier import Classifier
from diagnosis.rules import _parse, load_rules, match_rules
from diagnosis.types import CATEGORIES, ORIGINS
from gpulens.errors import InputError

RULES = load_rules()


def test_rules_load_and_are_valid() -> None:
    assert len(RULES) >= 30
    assert len({r.id for r in RULES}) == len(RULES)
    for r in RULES:
        assert r.category in CATEGORIES and r.origin in ORIGINS
    covered = {r.category for r in RULES}
    assert covered == set(CATEGORIES) - {"unknown"}


@pytest.mark.parametrize("rule", RULES, ids=[r.id for r in RULES])
def test_example_matches_its_rule_and_category(rule) -> None:  # type: ignore[no-untyped-def]
    matched = match_rules(rule.example, RULES)
    assert rule.id in {m.rule.id for m in matched}, f"{rule.id} does not match its own example"
    d = Classifier(model=None, cache_dir=None).classify_text(rule.example)
    assert d.category == rule.category, f"{rule.id}: example classified as {d.category} ({d.rule_id})"


def test_rules_file_errors_are_input_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="lacks"):
        _parse([{"id": "x", "category": "crash"}], "f.yaml")
    with pytest.raises(InputError, match="category"):
        _parse([{"id": "x", "category": "nope", "origin": "user", "pattern": "a", "example": "a"}], "f.yaml")
    with pytest.raises(InputError, match="compile"):
        _parse([{"id": "x", "category": "crash", "origin": "user", "pattern": "(", "example": "a"}], "f.yaml")
    bad = tmp_path / "r.yaml"
    bad.write_text("- id: [unclosed")
    with pytest.raises(InputError):
        load_rules(bad)


def test_bare_error_words_do_not_match() -> None:
    # deprecation warnings and caught errors mention "error" without being failures
    text = ("FutureWarning: `error_bad_lines` is deprecated and will be removed\n"
            "ERROR: could not reach the metrics server (this is not fatal)\n")
    assert match_rules(text, RULES) == []
