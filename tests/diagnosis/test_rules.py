"""Every signature rule's example matches the rule, and the classifier answers its category."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpulens.diagnosis.classifier import Classifier
from gpulens.diagnosis.rules import _parse, load_rules, match_rules
from gpulens.diagnosis.types import CATEGORIES, ORIGINS
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


def _texts() -> list[str]:
    from gpulens.diagnosis.classifier import CORPUS_DIR, load_corpus
    from gpulens.diagnosis.evaluate import HOLDOUT_DIR, _views

    paths = [CORPUS_DIR / e.file for e in load_corpus()] + sorted(HOLDOUT_DIR.glob("*.log"))
    return [v.focus for v in _views(paths)] + [r.example for r in RULES]


def test_literal_prefilter_never_hides_a_match() -> None:
    """match_rules skips a rule when none of its required literals occurs; that must be a pure
    speed-up: the same rules match as when every pattern is searched."""
    assert all(r.needles for r in RULES)  # every shipped rule gets a prefilter
    for text in _texts():
        brute = {r.id for r in RULES
                 if r.pattern.search(text) and (r.context is None or r.context.search(text))}
        assert {m.rule.id for m in match_rules(text, RULES)} == brute


def test_required_literals() -> None:
    from gpulens.diagnosis.rules import required_literals

    assert required_literals(r"No space left on device|Disk quota exceeded") == (
        "no space left on device", "disk quota exceeded")
    assert required_literals(r"(?:foo|\d+) bar") == (" bar",)
    assert required_literals(r"\d+|ab") is None  # an alternative without a literal: always search
    assert required_literals("(") is None


def test_context_must_also_match() -> None:
    conv = next(r for r in RULES if r.id == "data-value-conversion")
    assert conv.context is not None
    ids = {m.rule.id for m in match_rules("ValueError: could not convert string to float: 'n/a'", RULES)}
    assert "data-value-conversion" not in ids and "python-logic-exception" in ids
    reading = ('  File "/home/a/p/data.py", line 9, in load\n    x = np.loadtxt(path)\n'
               "ValueError: could not convert string to float: 'n/a'")
    assert "data-value-conversion" in {m.rule.id for m in match_rules(reading, RULES)}
