"""Review 40b of the round 18 library-sweep rules: each mend's case, in the libraries' formats (read from their
sources), not copied from a log."""

from __future__ import annotations

import time

import pytest

from gpulens.diagnosis.rules import load_rules, match_rules

RULES = {r.id: r for r in load_rules()}


def _match(rule_id: str, text: str) -> dict[str, str] | None:
    found = match_rules(text, (RULES[rule_id],))
    return found[0].groups if found else None


@pytest.mark.parametrize(("rule_id", "tail", "group", "value"), [
    ("hf-model-revision-not-found", " v2.0 is not a valid git identifier (branch name, tag name or commit id) that "
     "exists for this model name.", "rev", "v2.0"),
    ("trl-optional-package-missing", " vLLM is not installed. Please install it with `pip install trl[vllm]`.",
     "pip", "trl[vllm]"),
])
def test_a_long_token_before_the_message_is_read_in_linear_time(rule_id: str, tail: str, group: str,
                                                                 value: str) -> None:
    """Item 3: an unbounded run at the pattern's start retried from every offset of a long token is quadratic
    (30,000 characters took seconds); the run starts at a token boundary and is bounded."""
    blob = "x" * 30_000
    t0 = time.perf_counter()
    assert _match(rule_id, f"{blob}\n{tail.strip()} {blob}\n") is not None
    assert _match(rule_id, f"{blob}{tail.strip()}\n") is None  # a 30,000-character token is no revision/package
    assert time.perf_counter() - t0 < 0.5
    assert (_match(rule_id, f"OSError:{tail}") or {}).get(group) == value
