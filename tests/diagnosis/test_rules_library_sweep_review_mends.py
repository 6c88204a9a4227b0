"""Review 40b of the round 18 library-sweep rules: each mend's case, in the libraries' formats (read from their
sources), not copied from a log."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from gpulens.diagnosis.classifier import Classifier, default_classifier
from gpulens.diagnosis.logread import diagnose_text
from gpulens.diagnosis.rules import load_rules, match_rules

RULES = {r.id: r for r in load_rules()}


@pytest.fixture(scope="module")
def clf() -> Classifier:
    return default_classifier()


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


def _job(*tail: str) -> str:
    return "\n".join(["Loading configuration from conf/run.yaml", "Building model: 12 layers, 768 hidden", *tail]) + "\n"


def test_a_scripts_own_no_checkpoint_line_is_not_timms_failure(clf: Classifier) -> None:
    """Item 4: "No checkpoint found at '...'" is also what scripts print before training from scratch; timm's
    rule needs the bare FileNotFoundError() timm raises after it (models/_helpers.py), so the real error wins."""
    text = _job("=> No checkpoint found at 'runs/exp1/checkpoint.pth.tar'", "Starting training from scratch",
                "Traceback (most recent call last):", '  File "/home/u/proj/train.py", line 88, in <module>',
                "    ds = CsvDataset('data/train.csv')", '  File "/home/u/proj/data.py", line 12, in __init__',
                "    self.rows = pd.read_csv(path)",
                "FileNotFoundError: [Errno 2] No such file or directory: 'data/train.csv'")
    d = diagnose_text(text, clf).diagnosis
    assert d.rule_id != "timm-no-checkpoint-found" and d.category == "incorrect_input", (d.rule_id, d.category)
    timm = _job("ERROR:timm.models._helpers:No checkpoint found at 'output/train/20260110-vit/last.pth.tar'",
                "Traceback (most recent call last):", '  File "/home/u/proj/train.py", line 88, in <module>',
                "    resume_checkpoint(model, args.resume)",
                '  File "/opt/py/site-packages/timm/models/_helpers.py", line 315, in resume_checkpoint',
                "    raise FileNotFoundError()", "FileNotFoundError")
    assert diagnose_text(timm, clf).diagnosis.rule_id == "timm-no-checkpoint-found"


def _save_failure(func: str, code: str) -> str:
    return _job("Traceback (most recent call last):", '  File "/home/u/proj/train.py", line 88, in <module>',
                "    main()", f'  File "/home/u/proj/utils/io.py", line 31, in {func}', f"    {code}",
                '  File "/opt/py/site-packages/torch/serialization.py", line 964, in save',
                "    with _open_zipfile_writer(f) as opened_zipfile:",
                "RuntimeError: Parent directory out/run3 does not exist.")


def test_torch_save_checkpoint_rule_reads_the_save_line_not_the_jobs_function_names(clf: Classifier) -> None:
    """Item 5: the checkpoint rule's context is the torch.save( source line naming model/optimizer state; a job's
    function called save_checkpoint that saves something else says nothing about the format."""
    d = diagnose_text(_save_failure("save_checkpoint", "torch.save(payload, os.path.join(out_dir, 'p.pt'))"), clf)
    assert d.diagnosis.rule_id != "r18-torch-save-checkpoint-missing-dir"
    d = diagnose_text(_save_failure("dump", "torch.save({'model': model.state_dict(), 'optimizer': opt.state_dict()}, "
                                            "path)"), clf)
    assert (d.diagnosis.rule_id, d.diagnosis.category) == ("r18-torch-save-checkpoint-missing-dir", "checkpoint_error")


@pytest.mark.parametrize(("error", "src", "dst"), [
    (["TypeError: Couldn't cast array of type string to int64"], "string", "int64"),
    (["TypeError: Couldn't cast array of type int64 to string since allow_primitive_to_str is set to False "],
     "int64", "string"),
    (["TypeError: Couldn't cast array of type", "struct<text: string, score: double>", "to",
      "{'text': Value('string'), 'score': Value('int64')}"],
     "struct<text: string, score: double>", "{'text': Value('string'), 'score': Value('int64')}"),
    (["datasets.table.CastError: Couldn't cast", "instruction: string", "to", "{'text': Value('string')}",
      "because column names don't match"], None, None),
], ids=["array-cast", "primitive-to-str", "cast-array-to-feature", "cast-table"])
def test_datasets_cast_errors_are_one_rule(error: list[str], src: str | None, dst: str | None,
                                           clf: Classifier) -> None:
    """Item 6: datasets 5.2.0 table.py's array_cast (one line, perhaps with "since allow_primitive_to_str ..."),
    cast_array_to_feature (type and feature on lines of their own) and cast_table_to_schema (CastError) are one rule;
    the allow_* clause is not part of the target type."""
    text = _job("Traceback (most recent call last):", '  File "/home/u/proj/train.py", line 88, in <module>',
                "    ds = ds.cast(features)", '  File "/opt/py/site-packages/datasets/table.py", line 2161, in '
                "cast_array_to_feature", "    raise TypeError(", *error)
    d = diagnose_text(text, clf).diagnosis
    assert (d.rule_id, d.category, d.origin) == ("datasets-cast-error", "incorrect_input", "data")
    groups = _match("datasets-cast-error", "\n".join(error)) or {}
    assert (groups.get("src"), groups.get("dst")) == (src, dst)


def test_dynamo_fake_tensor_rule_reads_both_wordings() -> None:
    """Item 12: torch 2.13's "Dynamo failed to run FX node with fake tensors" and the older run_node wording
    ("Failed running call_function ...", earlier 2.x releases) are one rule."""
    for line in ["torch._dynamo.exc.TorchRuntimeError: Dynamo failed to run FX node with fake tensors: call_function "
                 "<built-in function add>(*(FakeTensor(..., size=(2, 3)), FakeTensor(..., size=(4,))), **{}): got "
                 "RuntimeError('The size of tensor a (3) must match the size of tensor b (4) at non-singleton dimension 1')",
                 "torch._dynamo.exc.TorchRuntimeError: Failed running call_function <built-in function add>(*(FakeTensor("
                 "..., size=(2, 3)), FakeTensor(..., size=(4,))), **{}):"]:
        assert _match("r18-dynamo-fake-tensor-run-failed", line) is not None


_SIGNATURES = Path(__file__).resolve().parents[2] / "gpulens" / "diagnosis" / "rules" / "signatures.yaml"


@pytest.mark.parametrize("rule_id", ["hf-datasets-config-or-split-name", "trl-optional-package-missing",
                                     "r18-ddp-model-differs-across-ranks", "xla-ptxas-failed",
                                     "ultralytics-config-syntaxerror"])
def test_round_18_rules_capture_only_what_their_hint_uses(rule_id: str) -> None:
    """Item 13: a named group the hint does not use is a capture nobody reads (make it non-capturing)."""
    rule = RULES[rule_id]
    groups = set(rule.pattern.groupindex) | set(rule.context.groupindex if rule.context else ())
    assert groups <= set(re.findall(r"\{(\w+)", rule.hint)), rule_id


def test_ultralytics_missing_equals_sign_names_the_argument() -> None:
    """Item 13: "'x' is a valid YOLO argument but is missing an '=' sign" (ultralytics cfg/__init__.py
    parse) names an argument, not "a key of the data YAML"."""
    found = match_rules("SyntaxError: 'imgsz' is a valid YOLO argument but is missing an '=' sign to set its value, "
                        "i.e. try 'imgsz=640'", (RULES["ultralytics-config-syntaxerror"],))
    assert found and "imgsz" in found[0].hint and "a key of the data YAML" not in found[0].hint


def test_secondary_only_round_18_rules_sit_in_their_block() -> None:
    """Item 13: r18-dataloader-timeout and ray-worker-died-no-cause (category unknown, priority 10) are listed in
    the "secondary-only messages" block of signatures.yaml."""
    text = _SIGNATURES.read_text(encoding="utf-8")
    block = text.index("# ------------------------------------------------------------------ secondary-only messages")
    end = text.find("\n# ------------------------------------------------------------------ ", block + 1)
    for rid in ("r18-dataloader-timeout", "ray-worker-died-no-cause"):
        assert block < text.index(f"- id: {rid}\n") < (end if end > 0 else len(text)), rid
