"""Whole-log understanding on real users' logs (sample_logs/real, dev split): truncated tracebacks,
errors printed before the stack, wrapped errors, interleaved ranks, abstention on logs that hold
only secondary messages, origin from the evidence lines and the fix hint."""

from __future__ import annotations

import csv
import dataclasses
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpulens.cli.main import cli
from gpulens.diagnosis import classify_text, logs
from gpulens.diagnosis.classifier import Classifier
from gpulens.diagnosis.types import Diagnosis

REAL = Path(__file__).resolve().parents[2] / "sample_logs" / "real"


def _split(file: str) -> str:
    with (REAL / "index.csv").open(encoding="utf-8", newline="") as fh:
        return next(r["split"] for r in csv.DictReader(fh) if r["file"] == file)


def _diag(clf: Classifier, file: str) -> tuple[logs.LogView, Diagnosis]:
    assert _split(file) == "dev", f"{file}: tests use dev-split logs only"
    view = logs.analyze((REAL / file).read_text(encoding="utf-8", errors="replace"))
    return view, clf.classify_view(view, file=file)


@pytest.mark.parametrize("file, category", [
    ("gpu_oom/tensorflow__tensorflow__4735.log", "gpu_oom"),  # TF OOM summary above a cut traceback
    ("incorrect_input/eg4000__SKU110K_CVPR19__28.log", "incorrect_input"),
    ("cuda_error/jax-ml__jax__25002.log", "cuda_error"),
    ("permission_error/av__harbor__262.log", "permission_error"),
])
def test_truncated_traceback_is_answered_from_the_error_above(rules: Classifier, file: str, category: str) -> None:
    view, d = _diag(rules, file)
    assert view.truncated
    assert d.category == category, d
    assert d.reason and "cut off" in d.reason
    assert d.confidence < 0.95  # a little less sure than a match inside the final traceback


def test_error_printed_before_the_stack(rules: Classifier) -> None:
    view, d = _diag(rules, "permission_error/wandb__wandb__1006.log")
    assert d.category == "permission_error", d
    assert any("Permission denied: '/.config'" in e for e in d.evidence)
    assert any("Permission denied" in c for c in view.context_lines)


@pytest.mark.parametrize("file, category, inner", [
    ("semantic_error/milesial__Pytorch-UNet__250.log", "semantic_error", "Caught KeyError in DataLoader worker"),
    ("semantic_error/visinf__cos-cvae__5.log", "semantic_error", "Caught KeyError in DataLoader worker"),
    ("incorrect_input/python-pillow__Pillow__5141.log", "incorrect_input", ""),
])
def test_wrapped_error(rules: Classifier, file: str, category: str, inner: str) -> None:
    _, d = _diag(rules, file)
    assert d.category == category, d
    assert any(inner in e for e in d.evidence), d.evidence


def test_interleaved_ranks(rules: Classifier) -> None:
    # srun -l and [rankN] prefixes, two ranks' tracebacks interleaved line by line
    view, d = _diag(rules, "semantic_error/NVIDIA-BioNeMo__bionemo-recipes__784.log")
    assert d.category == "semantic_error", d
    assert any("num_layers should be divisible" in e for e in d.evidence)
    # Open MPI --tag-output ("2021-03-10T13:22:37.443Z: [1,0]<stderr>:") on every line, a DataLoader
    # worker's OSError re-raised by the main process
    _, d = _diag(rules, "incorrect_input/facebookresearch__deit__76.log")
    assert d.category == "incorrect_input", d
    assert any(e.startswith("OSError: Caught OSError in DataLoader worker") for e in d.evidence), d.evidence
    # glog fatal line of one thread followed by another thread's INFO lines: found, not lost
    view, _ = _diag(rules, "crash/chuanqi305__MobileNet-SSD__180.log")
    assert "\nCheck failed: a <= b" in view.focus and not view.secondary_only


@pytest.mark.parametrize("file", [
    "unknown/Facico__Chinese-Vicuna__113.log",  # torchrun ChildFailedError summary only
    "unknown/RUC-NLPIR__Tool-Star__10.log",  # RayActorError only
    "unknown/Unakar__Logic-RL__18.log",  # Ray "the actor is dead", possible causes listed
])
def test_secondary_only_logs_abstain(rules: Classifier, file: str) -> None:
    view, d = _diag(rules, file)
    assert view.secondary_only
    assert (d.category, d.origin) == ("unknown", "unknown")
    assert d.reason and d.reason.startswith("only secondary messages")
    assert d.hint and ("root cause" in d.hint or "originating error" in d.hint)
    assert d.clue == "secondary_only"


def test_a_hard_error_elsewhere_beats_a_secondary_final_message(rules: Classifier) -> None:
    text = (REAL / "unknown/Facico__Chinese-Vicuna__113.log").read_text(encoding="utf-8")
    head = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.1 GiB\n"
    d = rules.classify_text(head + text)
    assert d.category == "gpu_oom", d
    assert not logs.analyze(head + text).secondary_only


def test_origin_comes_from_the_evidence_lines() -> None:
    from gpulens.diagnosis.origin import clue_from_lines, origin_from_evidence

    def line(file: str, needle: str) -> str:
        return next(ln for ln in (REAL / file).read_text(encoding="utf-8").splitlines() if needle in ln)

    shm = line("cpu_oom/yufengm__Adaptive__9.log", "shared memory")
    assert clue_from_lines([shm]) == "node_resource"
    assert origin_from_evidence("cpu_oom", "node_resource")[0] == "infrastructure"
    assert origin_from_evidence("cpu_oom", "none")[0] == "user"
    port = line("comm_error/meta-pytorch__torchtune__1025.log", "ddress already in use")
    assert clue_from_lines([port]) == "config_clash"
    assert origin_from_evidence("comm_error", "config_clash")[0] == "user"
    assert origin_from_evidence("comm_error", "none")[0] == "infrastructure"
    assert clue_from_lines(["RuntimeError: t >= 0 && t < n_classes assertion failed"]) == "label_range"
    assert origin_from_evidence("incorrect_input", "label_range")[0] == "data"
    assert clue_from_lines(["x"], secondary_only=True) == "secondary_only"
    assert origin_from_evidence("semantic_error", "framework_internal")[0] == "framework"


def test_hint_is_specific_and_shown_by_diagnose(tmp_path: Path) -> None:
    log = tmp_path / "oom.log"
    log.write_text((REAL / "gpu_oom/AMAP-ML__FluxText__25.log").read_text(encoding="utf-8"))
    res = CliRunner().invoke(cli, ["diagnose", str(log), "--json"])
    assert res.exit_code == 0, res.output
    rec = json.loads(res.output)[-1]
    assert rec["category"] == "gpu_oom"
    assert "64.00 MiB" in rec["hint"] and "batch size" in rec["hint"]
    assert rec["clue"] == "none" and rec["origin"] == "user"
    human = CliRunner().invoke(cli, ["diagnose", str(log)])
    assert human.exit_code == 0 and "hint" in human.output


def test_rule_hints_are_used_when_rules_carry_them() -> None:
    from gpulens.diagnosis.hints import hint_for
    from gpulens.diagnosis.rules import load_rules

    rule = load_rules()[0]

    class WithHint:
        hint = "drain the node {x}"
        id = rule.id

    assert hint_for("gpu_hardware", ["Xid"], rule=WithHint(), match=None).startswith("drain the node")
    bare = dataclasses.replace(rule, hint="") if hasattr(rule, "hint") else rule  # a rule without a hint
    assert hint_for("gpu_hardware", ["NVRM: Xid (PCI:0000:3b:00): 79, pid=1"], rule=bare).startswith("Xid 79")


def test_a_log_without_any_error_line_is_unknown_not_a_guess() -> None:
    """A hung job's output (progress only, nothing failed on screen) must not get a category."""
    d = classify_text("loading data\nwaiting for the data server...\nepoch 1 loss 0.31\n")
    assert d.category == "unknown" and d.reason is not None and "no line" in d.reason, d
