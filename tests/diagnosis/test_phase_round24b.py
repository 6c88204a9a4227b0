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


def _loading_bar() -> list[str]:
    """transformers' weight-loading bar, then accelerate's offload notice."""
    return [f"Loading weights: {p}%|#####| {n}/12 [00:07<00:00, 178.30it/s]" for p, n in ((50, 6), (100, 12))] + \
        ["Some parameters are on the meta device because they were offloaded to the cpu."]


def test_forward_of_a_feature_extraction_script_is_evaluation() -> None:
    """P5: a script that extracts a model's outputs (``extract_features.py``) runs no training loop: its model's forward
    over its first input is inference, ``evaluation``, not a first training step."""
    tb = ["Traceback (most recent call last):",
          '  File "/src/scripts/extract_router_stats.py", line 73, in <module>',
          "    out = model(input_ids=ids, output_hidden_states=True)",
          '  File "/env/lib/python3.11/site-packages/torch/nn/modules/module.py", line 1787, in _call_impl',
          "    return forward_call(*args, **kwargs)",
          '  File "/env/lib/python3.11/site-packages/transformers/models/llama/modeling_llama.py", line 500, in forward',
          "    logits = self.lm_head(hidden_states[:, slice_indices, :])",
          "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 88.00 MiB."]
    lines = [*_loading_bar(), *tb]
    assert phase_of(lines, len(lines) - 1, lines) == "evaluation"
    trained = [*_loading_bar(), *(ln.replace("extract_router_stats", "train_router") for ln in tb)]
    assert phase_of(trained, len(trained) - 1, trained) == "first_step"


def test_cancelled_on_a_feature_extraction_bar_is_evaluation() -> None:
    """P5/P9: a cancellation glued to a feature extraction's bar (a model's inference over a data set) stops the
    extraction: ``evaluation``."""
    lines = ["/env/lib/python3.10/site-packages/timm/models/layers/__init__.py:48: FutureWarning: Importing from "
             "timm.models.layers is deprecated, please import via timm.layers",
             "Extracting features:  39%|###9      | 548/1406 [1:02:11<1:37:20,  6.81s/it]slurmstepd: error: *** JOB 4408 ON "
             "node40 CANCELLED AT 2026-02-08T11:28:30 ***"]
    assert phase_of(lines, 1, lines) == "evaluation"


def test_perplexity_of_a_reloaded_model_is_evaluation() -> None:
    """P4/P1: a forward inside ``compute_perplexity`` (a language model's evaluation metric) after the model was saved and
    reloaded: the frames name an evaluation, not a first training step."""
    lines = ["2025-04-30 22:42:42,417 - INFO - Saving compressed model...",
             "2025-04-30 22:44:51,365 - INFO - Reloaded compressed model and tokenizer successfully.",
             "Traceback (most recent call last):",
             '  File "/src/run_prune.py", line 341, in main',
             "    ppl = compute_perplexity(model, tokenizer, texts, device=device)",
             '  File "/src/metrics.py", line 39, in compute_perplexity',
             "    outputs = model(input_ids=chunk, labels=labels)",
             '  File "/env/lib/python3.10/site-packages/torch/nn/modules/module.py", line 1750, in _call_impl',
             "    return forward_call(*args, **kwargs)",
             "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 256.00 MiB."]
    assert phase_of(lines, len(lines) - 1, lines) == "evaluation"
