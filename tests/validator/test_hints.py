"""Categories and fix hints that follow the evidence, with the validator's context (input, flag)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from gpulens.config import ValidateConfig
from gpulens.validator import JobSpec, validate
from gpulens.validator.hints import FIX_HINTS, HintContext, fix_hint, path_origin
from gpulens.vocab import CATEGORIES
from tests.conftest import require_module
from tests.validator.conftest import JOBS

WRITABLE = "writable location"

#: (category, evidence, a phrase the hint must contain): one evidence case per fail category at least.
CASES = [
    ("syntax_error", ["train.py:3:5: SyntaxError: invalid syntax"], "file:line"),
    ("syntax_error", ["train.py:4:1: IndentationError: unindent does not match"], "indentation"),
    ("import_error", ["train.py:9: import apex: ModuleNotFoundError: No module named 'apex'"], "Install the missing module"),
    ("import_error", ["ImportError: cannot import name 'soft_unicode' from 'markupsafe'"], "another version"),
    ("incorrect_input", ["FileNotFoundError: [Errno 2] No such file or directory: 'data/train.bin'"], "does not exist"),
    ("incorrect_input", ["declared input /d/a.csv is empty (0 bytes)"], "empty"),
    ("incorrect_input", ["blacklist: /d/a.csv: corrupt shard"], "blacklisted"),
    ("incorrect_input", ["BadGzipFile: Not a gzipped file", "raised while reading declared input /d/a.gz"], "decoded"),
    ("incorrect_input", ["_pickle.UnpicklingError: Weights only load failed", "raised while reading data/x.pt"], "weights_only"),
    ("semantic_error", ["RuntimeError: mat1 and mat2 shapes cannot be multiplied (4x3 and 5x2)"], "shapes"),
    ("semantic_error", ["IndexError: invalid index of a 0-dim tensor. Use `tensor.item()`"], "tensor.item()"),
    ("semantic_error", ["RuntimeError: Legacy autograd function with non-static forward method is deprecated."], "static forward"),
    ("semantic_error", ["ValueError: something else"], "program error"),
    ("model_diverged", ["loss = nan after 1 training step(s)", "losses: 2.3, nan"], "learning rate"),
    ("cpu_oom", ["the job's processes used more than 2.5 GiB of memory (the validator's limit)"], "memory_limit_bytes"),
    ("cpu_oom", ["killed by SIGKILL (not by the validator): most likely the kernel's OOM killer"], "host memory"),
    ("gpu_oom", ["torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"], "batch size"),
    ("checkpoint_error", ["PermissionError: [Errno 13] Permission denied: 'ckpt/model.pt'"], WRITABLE),
    ("checkpoint_error", ["_pickle.UnpicklingError: Weights only load failed ... Unsupported global"], "weights_only"),
    ("checkpoint_error", ["FileNotFoundError: [Errno 2] No such file or directory: 'ckpt/last.pt'", "raised while reading ckpt/last.pt"], "resume"),
    ("checkpoint_error", ["RuntimeError: PytorchStreamReader failed reading zip archive: failed finding central directory"], "corrupt"),
    ("permission_error", ["PermissionError: [Errno 13] Permission denied: '/shared/x'"], "permissions"),
    ("cuda_error", ["RuntimeError: CUDA error: an illegal memory access was encountered"], "CUDA_LAUNCH_BLOCKING"),
    ("cuda_error", ["RuntimeError: CUDA error: no kernel image is available for execution on the device"], "architecture"),
    ("cuda_env_error", ["AssertionError: Torch not compiled with CUDA enabled"], "CUDA build of torch"),
    ("cuda_env_error", ["RuntimeError: The NVIDIA driver on your system is too old (found version 10020)"], "driver"),
    ("cuda_env_error", ["RuntimeError: No CUDA GPUs are available"], "request a GPU"),
    ("gpu_hardware", ["NVRM: Xid 79, GPU has fallen off the bus"], "faulty"),
    ("comm_error", ["RuntimeError: The server socket has failed to listen on any local network address. port: 29500, Address already in use"], "--standalone"),
    ("comm_error", ["Watchdog caught collective operation timeout"], "timed out"),
    ("preempted", ["slurmstepd: *** JOB 12 CANCELLED DUE TO PREEMPTION ***"], "validate again"),
    ("storage_error", ["OSError: [Errno 28] No space left on device"], "full"),
    ("storage_error", ["OSError: [Errno 27] File too large"], "file_size_limit_bytes"),
    ("crash", ["Segmentation fault (core dumped)"], "native code"),
    ("unknown", ["something odd"], "evidence"),
]  # fmt: skip


def test_every_fail_category_has_a_hint_and_an_evidence_case() -> None:
    assert set(FIX_HINTS) == set(CATEGORIES)
    assert {c for c, _, _ in CASES} == set(CATEGORIES)


@pytest.mark.parametrize(("category", "evidence", "phrase"), CASES, ids=[f"{c}-{i}" for i, (c, _, _) in enumerate(CASES)])
def test_fix_hint_follows_the_evidence(category: str, evidence: list[str], phrase: str) -> None:
    hint = fix_hint(category, evidence)
    assert phrase.lower() in hint.lower(), hint
    reading = any("weights only" in e.lower() or "while reading" in e for e in evidence)
    if reading:  # reading a file never gets the hint about writing one
        assert WRITABLE not in hint


def test_the_import_hint_names_the_module() -> None:
    hint = fix_hint("import_error", ["train.py:7: import matplotlib.pyplot: ModuleNotFoundError: not found by python"])
    assert hint.endswith("Module: matplotlib.")


def test_the_hint_names_the_path_and_where_it_comes_from() -> None:
    ctx = HintContext(args=["--dataset=shakespeare_char", "--out", "ckpt"], inputs=["data/a.csv"], output_dir="ckpt")
    missing = ["FileNotFoundError: [Errno 2] No such file or directory: 'data/shakespeare_char/train.bin'"]
    hint = fix_hint("incorrect_input", missing, ctx)
    assert "data/shakespeare_char/train.bin" in hint and "--dataset=shakespeare_char" in hint
    assert path_origin("data/a.csv", ctx) == "declared input data/a.csv"
    assert path_origin("ckpt/model.pt", ctx) == "under the output directory ckpt"
    assert path_origin("x/other.bin", HintContext(args=["--data", "x/other.bin"])) == "given by --data x/other.bin"
    assert path_origin("x/other.bin", HintContext(where="train.py:12")) == "named in the program at train.py:12"


# --- real dry runs: the category and the hint from what the process did ------------------------


def _job(tmp_path: Path, *args: str) -> JobSpec:
    job = tmp_path / "job"
    job.mkdir(exist_ok=True)
    (job / "train.py").write_text((JOBS / "file_errors.py").read_text())
    return JobSpec([sys.executable, "train.py", *args], workdir=job, output_dir="out")


def test_failed_assert_exists_on_a_data_path_is_incorrect_input(tmp_path: Path, config: ValidateConfig) -> None:
    result = validate(_job(tmp_path, "--mode", "assert_exists", "--data", "data/train.csv"), config, None, record=False)
    assert (result.verdict, result.category, result.origin) == ("fail", "incorrect_input", "data"), result
    assert any("assert os.path.exists(args.data)" in e for e in result.evidence), result.evidence
    assert result.fix and "data/train.csv" in result.fix and "--data data/train.csv" in result.fix


@pytest.mark.torch
@pytest.mark.parametrize(
    ("args", "category", "phrase"),
    [
        (["--mode", "load_data", "--data", "data/train.pt"], "incorrect_input", "given by --data data/train.pt"),
        (["--mode", "resume", "--resume", "runs/last.pt"], "checkpoint_error", "resume"),
        (["--mode", "weights_only", "--data", "data/train.pt"], "incorrect_input", "weights_only=False"),
        (["--mode", "save", "--out", "out"], "checkpoint_error", WRITABLE),
    ],
    ids=["torch.load-missing-data", "torch.load-missing-checkpoint", "unpickling-while-reading", "torch.save-missing-dir"],
)
def test_file_errors_get_the_category_and_hint_of_what_failed(
    tmp_path: Path, config: ValidateConfig, args: list[str], category: str, phrase: str
) -> None:
    require_module("torch")
    result = validate(_job(tmp_path, *args), config, None, record=False)
    assert (result.verdict, result.category) == ("fail", category), result
    assert result.fix and phrase in result.fix, result.fix
    if args[1] != "save":
        assert WRITABLE not in result.fix
        assert any("while reading" in e for e in result.evidence), result.evidence


def test_no_gpu_on_a_cpu_dry_run_is_inconclusive_not_the_jobs_fault(tmp_path: Path, config: ValidateConfig) -> None:
    (tmp_path / "train.py").write_text(
        "import os\n"
        "assert os.environ['CUDA_VISIBLE_DEVICES'] == ''  # the validator hid the GPUs: CPU dry run\n"
        "raise RuntimeError('No CUDA GPUs are available')  # what a CUDA build of torch says then\n"
    )
    result = validate(JobSpec([sys.executable, "train.py"], workdir=tmp_path), config, None, record=False)
    assert (result.verdict, result.category) == ("inconclusive", None), result
    assert result.reason and "needs a GPU" in result.reason


@pytest.mark.torch
def test_cpu_only_torch_in_the_jobs_environment_is_a_real_cuda_env_error(tmp_path: Path, config: ValidateConfig) -> None:
    require_module("torch")
    (tmp_path / "train.py").write_text("import torch\n\nx = torch.zeros(1, device='cuda')\n")
    result = validate(JobSpec([sys.executable, "train.py"], workdir=tmp_path), config, None, record=False)
    assert (result.verdict, result.category, result.origin) == ("fail", "cuda_env_error", "user"), result
    assert result.fix and "CUDA build of torch" in result.fix


def test_classifier_errors_are_kept_per_call_not_per_module() -> None:
    from gpulens.validator import core

    errors: list[str] = []
    diag = core.classify_output("Traceback (most recent call last):\nValueError: bad\n", errors)
    assert diag is not None and errors == []
    assert not any(isinstance(v, list) and "ERRORS" in k for k, v in vars(core).items())


def test_refine_leaves_a_missing_program_to_the_classifier() -> None:
    from gpulens.validator.refine import refine

    exc = {  # as the start-up hook records it: subprocess.run(["nvidia-smi"]) without the binary
        "type": "builtins.FileNotFoundError",
        "message": "[Errno 2] No such file or directory: 'nvidia-smi'",
        "frames": [
            ["/job/train.py", 3, "<module>", "subprocess.run(['nvidia-smi'])"],
            ["/usr/lib/python3.11/subprocess.py", 1950, "_execute_child", "raise child_exception_type(errno_num, err_msg, err_filename)"],
        ],
    }
    assert refine("unknown", exc, HintContext()) is None
    exc["frames"] = exc["frames"][:1]
    exc["frames"][0][3] = "x = np.load('data/x.npy')"
    exc["message"] = "[Errno 2] No such file or directory: 'data/x.npy'"
    found = refine("checkpoint_error", exc, HintContext(args=["--data", "data/x.npy"]))
    assert found is not None and (found.category, found.origin) == ("incorrect_input", "data")
    assert any("given by --data data/x.npy" in e for e in found.evidence)


def test_without_a_validator_rule_the_diagnosis_hint_names_the_evidence() -> None:
    """The validator reuses the diagnosis' evidence-specific hints (issue 12, item 6)."""
    oom = ["torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
           "total capacity of 15.77 GiB of which 1.19 GiB is free."]
    hint = fix_hint("gpu_oom", oom, HintContext(args=[], inputs=[], output_dir=None, workdir="."))
    assert "2.00 GiB" in hint and hint != FIX_HINTS["gpu_oom"]
    missing = ["ModuleNotFoundError: No module named 'tensorboard'"]
    assert "tensorboard" in fix_hint("import_error", missing)
