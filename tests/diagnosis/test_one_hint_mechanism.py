"""One hint mechanism (diagnosis.hints.hint_for) and one path extractor (logs.extract_inputs),
shared by the diagnosis of job logs and the validator's dry runs (issue 23, item 8)."""

from __future__ import annotations

from gpulens.diagnosis.hints import hint_for, path_in_evidence
from gpulens.diagnosis.logs import extract_inputs
from gpulens.diagnosis.rules import CATEGORY_HINTS
from gpulens.validator.hints import FIX_HINTS, HintContext, fix_hint


def test_the_path_an_error_names_comes_first() -> None:
    lines = ["loading /data/wmt16/vocab.json", "FileNotFoundError: [Errno 2] No such file or directory: 'data/train'"]
    assert extract_inputs(lines) == ["data/train", "/data/wmt16/vocab.json"]
    # any file the error names (the validator's question), not only data inputs
    assert extract_inputs(["FileNotFoundError: No such file or directory: 'nvidia-smi'"]) == []
    assert path_in_evidence(["FileNotFoundError: No such file or directory: 'nvidia-smi'"]) == "nvidia-smi"
    assert path_in_evidence(["missing path data/x.csv (declared input data/x.csv)"]) == "data/x.csv"
    assert path_in_evidence(["all good"]) is None


def test_a_source_file_is_never_named_as_the_input() -> None:
    ev = ['  File "/env/lib/python3.8/site-packages/torch/utils/data/dataset.py", line 207, in __getitem__',
          "IndexError: list index out of range"]
    assert "site-packages" not in hint_for("incorrect_input", ev)
    full = ["OSError: [Errno 28] No space left on device: '/ckpt/model.data-00000-of-00001'"]
    assert "/ckpt/model.data-00000-of-00001" in hint_for("storage_error", full)


def test_validator_and_diagnosis_share_the_mechanism() -> None:
    ev = ["RuntimeError: The server socket has failed to listen on any local network address. Address already in use"]
    assert fix_hint("comm_error", ev) == hint_for("comm_error", ev, dry_run=True) == hint_for("comm_error", ev)
    assert "--standalone" in hint_for("comm_error", ev)
    # rules about the validator's own limits and wording stay with dry runs
    limit = ["the job's processes used more than 2.5 GiB of memory (the validator's limit)"]
    assert "memory_limit_bytes" in fix_hint("cpu_oom", limit)
    assert "memory_limit_bytes" not in hint_for("cpu_oom", ["Killed: container memory limit reached"])
    assert hint_for("preempted", []) == CATEGORY_HINTS["preempted"]
    assert fix_hint("preempted", []) == FIX_HINTS["preempted"]
    ctx = HintContext(args=["--data", "data/x.npy"])
    missing = ["FileNotFoundError: [Errno 2] No such file or directory: 'data/x.npy'"]
    assert fix_hint("incorrect_input", missing, ctx).endswith("Path: data/x.npy (given by --data data/x.npy).")
