"""The signature rules: every rule's example line and real (dev-split) log match it, the rules
classify their examples to their category, hints render from the evidence, and the literal
prefilter never hides a match.

Only ``split=dev`` logs of sample_logs/real/ are read here: the hold-out projects stay unseen.
"""

from __future__ import annotations

import csv
import re
from collections import Counter
from pathlib import Path

import pytest

from gpulens.diagnosis.classifier import Classifier
from gpulens.diagnosis.hints import hint_for
from gpulens.diagnosis.rules import (
    CATEGORY_HINTS,
    MISSING_GROUP,
    _parse,
    best_match,
    load_rules,
    match_rules,
    render_hint,
    required_literals,
)
from gpulens.diagnosis.types import CATEGORIES, ORIGINS
from gpulens.errors import InputError

RULES = load_rules()
SAMPLE_LOGS = Path(__file__).resolve().parents[2] / "sample_logs"
REAL = SAMPLE_LOGS / "real"
#: Rules for formats absent from the dev split must say so in `source`.
NO_REAL_REASON = re.compile(r"format only|run here|no dev|dev-split log|dev split", re.IGNORECASE)


def _dev_rows() -> dict[str, dict[str, str]]:
    with open(REAL / "index.csv", encoding="utf-8", newline="") as fh:
        return {r["file"]: r for r in csv.DictReader(fh) if r["split"] == "dev"}


DEV = _dev_rows()


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")


def test_rules_load_and_are_valid() -> None:
    assert len(RULES) >= 200
    assert len({r.id for r in RULES}) == len(RULES)
    for r in RULES:
        assert r.category in CATEGORIES and r.origin in ORIGINS
        assert r.hint, f"{r.id} has no hint"
        assert "|}" not in r.hint, f"{r.id}: an empty fallback leaves a gap in the sentence"
        assert r.secondary == (r.category == "unknown")
        if r.secondary:
            assert r.priority <= 10, f"{r.id}: a secondary-only rule must lose to any root cause"
    assert {r.category for r in RULES} == set(CATEGORIES)


def test_at_least_200_rules_carry_a_real_example_and_the_others_say_why() -> None:
    with_real = [r for r in RULES if r.real]
    assert len(with_real) >= 200, len(with_real)
    for r in RULES:
        if not r.real:
            assert NO_REAL_REASON.search(r.source), f"{r.id}: no real example and no reason in source"
    per_cat = Counter(r.category for r in with_real)
    assert all(per_cat[c] >= 5 for c in CATEGORIES), per_cat


@pytest.mark.parametrize("rule", RULES, ids=[r.id for r in RULES])
def test_example_matches_its_rule_and_category(rule) -> None:  # type: ignore[no-untyped-def]
    matched = match_rules(rule.example, RULES)
    assert rule.id in {m.rule.id for m in matched}, f"{rule.id} does not match its own example"
    best = best_match(matched)
    assert best is not None and best.rule.category == rule.category, (
        f"{rule.id}: the rules answer {best.rule.id if best else None} on its example")
    d = Classifier(model=None, cache_dir=None).classify_text(rule.example)
    assert d.category == rule.category, f"{rule.id}: example classified as {d.category} ({d.rule_id})"


@pytest.mark.parametrize("rule", [r for r in RULES if r.real], ids=[r.id for r in RULES if r.real])
def test_real_example_is_a_dev_log_of_the_category_that_the_rule_matches(rule) -> None:  # type: ignore[no-untyped-def]
    row = DEV.get(rule.real)
    assert row is not None, f"{rule.id}: {rule.real} is not a dev-split row of sample_logs/real/index.csv"
    assert row["category"] == rule.category, f"{rule.id}: {rule.real} is labelled {row['category']}"
    text = _text(REAL / rule.real)
    assert rule.id in {m.rule.id for m in match_rules(text, RULES)}, f"{rule.id} does not match {rule.real}"


def test_hints_render_from_the_evidence() -> None:
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total " \
          "capacity of 79.15 GiB of which 1.23 GiB is free."
    m = next(x for x in match_rules(oom, RULES) if x.rule.id == "torch-cuda-oom")
    assert m.groups["size"] == "2.00 GiB"
    text = render_hint(m.rule, m)
    assert "2.00 GiB" in text and "79.15 GiB" in text and "1.23 GiB" in text and "batch size" in text
    assert m.hint == text
    assert len({m, m}) == 1  # matches stay hashable
    # a re.Match or a dict works too; a missing group takes the fallback, or MISSING_GROUP
    rule = m.rule
    assert render_hint(rule, rule.pattern.search(oom)) == text
    legacy = next(r for r in RULES if r.id == "torch-cuda-oom-legacy")
    partial = render_hint(legacy, {"size": "74.00 MiB", "gpu": "0", "total": "11.91 GiB"})
    assert "74.00 MiB" in partial and "most of it" in partial
    assert MISSING_GROUP in render_hint(rule, {})


@pytest.mark.parametrize("rule", RULES, ids=[r.id for r in RULES])
def test_every_hint_renders_on_its_example(rule) -> None:  # type: ignore[no-untyped-def]
    m = next(x for x in match_rules(rule.example, RULES) if x.rule.id == rule.id)
    text = render_hint(rule, m)
    assert "{" not in text and "}" not in text, f"{rule.id}: unrendered placeholder in {text!r}"


def test_hint_placeholders_must_name_groups() -> None:
    base = {"id": "x", "category": "crash", "origin": "framework", "pattern": "Boom (?P<what>\\w+)",
            "example": "Boom now"}
    assert _parse([{**base, "hint": "it went {what}"}], "f.yaml")[0].hint == "it went {what}"
    with pytest.raises(InputError, match="named group"):
        _parse([{**base, "hint": "it went {where}"}], "f.yaml")


def test_category_hints_cover_every_category() -> None:
    assert set(CATEGORY_HINTS) == set(CATEGORIES)
    assert all(len(h) > 40 for h in CATEGORY_HINTS.values())
    m = best_match(match_rules("IndexError: Target 12 is out of bounds.", RULES))
    assert m is not None
    assert hint_for("incorrect_input", match=m) == render_hint(m.rule, m) and "12" in hint_for("incorrect_input", match=m)
    assert hint_for("gpu_oom", match=m) == CATEGORY_HINTS["gpu_oom"]  # the answer did not come from that rule
    assert hint_for("crash") == CATEGORY_HINTS["crash"]


def _best_category(text: str) -> str | None:
    m = best_match(match_rules(text, RULES))
    return m.rule.category if m else None


def test_specific_beats_generic() -> None:
    # a native assertion inside the framework is a crash, not a Python logic error
    assert _best_category('RuntimeError: false INTERNAL ASSERT FAILED at "/opt/pytorch/torch/csrc/jit/'
                          'codegen/cuda/compute_at_map.cpp":898') == "crash"
    # an assertion that a data path exists is a missing input
    assert _best_category('  File "train.py", line 40, in main\n    assert os.path.exists(args.train_dir)\n'
                          "AssertionError") == "incorrect_input"
    # a device-side assert raised by an out-of-range label is the data's fault ...
    label = ("ClassNLLCriterion.cu:52: block: [0,0,0], thread: [3,0,0] Assertion `t >= 0 && t < n_classes` "
             "failed.\nRuntimeError: CUDA error: device-side assert triggered")
    assert _best_category(label) == "incorrect_input"
    # ... while an index assert elsewhere stays a CUDA error
    index = ('IndexKernel.cu:92: operator(): block: [0,0,0], thread: [1,0,0] Assertion `index >= -sizes[i] && '
             'index < sizes[i] && "index out of bounds"` failed.\nRuntimeError: CUDA error: device-side assert '
             "triggered")
    assert _best_category(index) == "cuda_error"
    # a shared-memory failure of DataLoader workers is host memory, even when it says "No space left"
    assert _best_category("RuntimeError: unable to write to file </torch_8289_606636967_0>: No space left on "
                          "device (28)") == "cpu_oom"
    # fp16 loss-scale exhaustion is divergence
    assert _best_category("Exception: Current loss scale already at minimum - cannot decrease scale anymore. "
                          "Exiting run.") == "model_diverged"


def test_secondary_messages_lose_to_any_root_cause() -> None:
    summary = ("torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n"
               "Root Cause (first observed failure):\n  error_file: <N/A>\n")
    alone = best_match(match_rules(summary, RULES))
    assert alone is not None and alone.rule.secondary and alone.rule.category == "unknown"
    with_cause = "ModuleNotFoundError: No module named 'timm'\n" + summary
    assert _best_category(with_cause) == "import_error"
    ray = ("ray.exceptions.RayActorError: The actor died unexpectedly before finishing this task.\n"
           "(3) The worker is crashed unexpectedly due to SIGSEGV or other unexpected errors.")
    assert _best_category(ray) == "unknown"  # the list of possible causes is not evidence of a segfault


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
            "ERROR: could not reach the metrics server (this is not fatal)\n"
            "Epoch 3: 100%|##########| 50/50 [00:10<00:00, loss=0.231, error_rate=0.05]\n")
    assert match_rules(text, RULES) == []


def _texts() -> list[str]:
    """Whole logs: the generated corpus, the hand-written hold-out fixtures, the real dev logs,
    and every rule's example."""
    paths = [p for p in sorted(SAMPLE_LOGS.glob("*/*.log")) if REAL not in p.parents]  # generated corpus
    paths += sorted((Path(__file__).parent / "fixtures" / "holdout").glob("*.log"))
    paths += [REAL / f for f in sorted(DEV)]
    return [_text(p) for p in paths] + [r.example for r in RULES]


@pytest.mark.slow
def test_literal_prefilter_never_hides_a_match() -> None:
    """match_rules skips a rule when none of its required literals occurs; that must be a pure
    speed-up: the same rules match as when every pattern is searched."""
    assert all(r.needles for r in RULES)  # every shipped rule gets a prefilter
    texts = _texts()
    assert len(texts) > 600
    for text in texts:
        brute = {r.id for r in RULES
                 if r.pattern.search(text) and (r.context is None or r.context.search(text))}
        assert {m.rule.id for m in match_rules(text, RULES)} == brute


def test_required_literals() -> None:
    assert required_literals(r"No space left on device|Disk quota exceeded") == (
        "no space left on device", "disk quota exceeded")
    assert required_literals(r"(?:foo|\d+) bar") == (" bar",)
    assert required_literals(r"\d+|ab") is None  # an alternative without a literal: always search
    assert required_literals("(") is None
    assert required_literals("已放弃（核心已转储）|core dumped") == ("已放弃（核心已转储）", "core dumped")
    assert required_literals("Straße") == ("stra",)  # a cased non-ASCII character ends a literal


def test_context_must_also_match() -> None:
    conv = next(r for r in RULES if r.id == "data-value-conversion")
    assert conv.context is not None
    ids = {m.rule.id for m in match_rules("ValueError: could not convert string to float: 'n/a'", RULES)}
    assert "data-value-conversion" not in ids and "python-logic-exception" in ids
    reading = ('  File "/home/a/p/data.py", line 9, in load\n    x = np.loadtxt(path)\n'
               "ValueError: could not convert string to float: 'n/a'")
    assert "data-value-conversion" in {m.rule.id for m in match_rules(reading, RULES)}


@pytest.mark.slow
def test_rules_only_on_the_dev_split_in_sample() -> None:
    """In sample (the rules were written from these logs): a regression guard, not a score."""
    from gpulens.diagnosis.rules.devcheck import rules_only_scores

    scores = rules_only_scores()
    assert scores.n == len(DEV)
    assert scores.accuracy >= 0.93, scores.wrong
    assert scores.macro_f1 >= 0.90, scores.per_class
