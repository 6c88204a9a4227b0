"""Reader round 24 (second pass), phase (P1-P11 of sample_logs/whole/README.md, "Phase: rules"), on excerpts written by
hand in the formats the libraries and scripts print."""

from __future__ import annotations

from gpulens.diagnosis.logread.phase import phase_of
from gpulens.diagnosis.logread.steplines import step_progress


def test_batch_sizes_setting_is_no_step() -> None:
    """P3: a set-up line stating batch sizes ("batch sizes auto-scaled", as "batch size: 64") counts no step done, so a
    data loader missing its file right after it is ``startup``."""
    assert not step_progress("GPU: NVIDIA A40 (49GB) - batch sizes auto-scaled")
    lines = ["Starting training: small model", "", "GPU: NVIDIA A40 (49GB) - batch sizes auto-scaled",
             "Traceback (most recent call last):",
             '  File "/src/scripts/train.py", line 202, in <module>',
             "    train_loader = make_loader(",
             '  File "/src/configs/loader.py", line 184, in make_loader',
             '    raise FileNotFoundError(f"JSONL file not found: {path}")',
             "FileNotFoundError: JSONL file not found: /data/train.jsonl"]
    at = len(lines) - 1
    assert phase_of(lines, at, lines) == "startup"
