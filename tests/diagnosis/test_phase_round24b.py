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


def _finished_training() -> list[str]:
    """A Hugging Face Trainer run that reached its end and saved its adapter."""
    steps = [f"{{'loss': 0.27{k}, 'grad_norm': 0.31, 'learning_rate': {k}e-06, 'epoch': 0.9{k}}}" for k in range(5)]
    return [*steps, "{'train_runtime': 7423.2, 'train_samples_per_second': 4.027, 'train_steps_per_second': 0.252, "
            "'train_loss': 0.3116, 'epoch': 1.0}",
            "100%|##########| 1869/1869 [2:03:43<00:00,  3.97s/it]", "Saved adapter + tokenizer to: artifacts/student"]


def test_import_error_of_the_evaluation_program_after_training_is_evaluation() -> None:
    """P11: the job's evaluation program (``eval_*.py``) started after the training run finished fails at its import:
    the evaluation stage fails from its first line, not the job's start-up."""
    tb = ["Traceback (most recent call last):",
          '  File "/work/scripts/eval_budget.py", line 13, in <module>',
          "    from src.models import parse_answer",
          "ImportError: cannot import name 'parse_answer' from 'src.models' (/work/src/models.py)"]
    lines = [*_finished_training(), "== stage 4: scoring the student", *tb]
    assert phase_of(lines, len(lines) - 1, lines) == "evaluation"
    alone = ["== stage 4: scoring the student", *tb]  # no training ran before it: its own start-up
    assert phase_of(alone, len(alone) - 1, alone) == "startup"


def test_engine_failing_in_an_evaluation_stage_announced_after_training_is_evaluation() -> None:
    """P11: a job script announces its evaluation stage after the fine-tuning program reported its success; vLLM's engine
    core failing to start there (a subprocess's traceback, no entry script) is that stage's, ``evaluation``."""
    done = ["2025-12-01 20:55:29.066 | SUCCESS  | __main__:main:85 - Fine-tuning job completed successfully!",
            "=== Training complete ==="]
    stage = ["=== Starting evaluation ===",
             "2025-12-01 20:55:40.059 | INFO     | __main__:main:82 - Loaded model: me/finetuned",
             "INFO 12-01 20:56:50 [core.py:572] Waiting for init message from front-end."]
    tb = ["ERROR 12-01 20:56:54 [core.py:632] EngineCore failed to start.",
          "ERROR 12-01 20:56:54 [core.py:632] Traceback (most recent call last):",
          'ERROR 12-01 20:56:54 [core.py:632]   File "/env/lib/python3.11/site-packages/vllm/v1/engine/core.py", line 623, '
          "in run_engine_core",
          "ERROR 12-01 20:56:54 [core.py:632]     engine_core = EngineCoreProc(*args, **kwargs)",
          'ERROR 12-01 20:56:54 [core.py:632]   File "/env/lib/python3.11/site-packages/vllm/v1/worker/gpu_worker.py", line 33, '
          "in <module>",
          "ERROR 12-01 20:56:54 [core.py:632]     from vllm.v1.worker.gpu_model_runner import GPUModelRunner",
          "ERROR 12-01 20:56:54 [core.py:632] ImportError: Numba needs NumPy 2.2 or less. Got NumPy 2.3."]
    lines = [*_finished_training()[:-2], *done, *stage, *tb]
    assert phase_of(lines, len(lines) - 1, lines) == "evaluation"
    for header in ("=== Starting data export ===", "=== Running training and evaluation ==="):
        other = [*_finished_training()[:-2], *done, header, *stage[1:], *tb]
        assert phase_of(other, len(other) - 1, other) != "evaluation"


def _java_evaluator_fails(exc_line: bool) -> list[str]:
    """A JVM started by the training's validation (an evaluator's jar run as a subprocess) failing on the shared stderr,
    then the Python caller's traceback through the validation's scoring."""
    java = ["java.lang.UnsupportedClassVersionError: org/example/Scorer has been compiled by a more recent version of the "
            "Java Runtime (class file version 55.0), this version of the Java Runtime only recognizes class file versions "
            "up to 52.0",
            "\tat java.lang.ClassLoader.defineClass1(Native Method)",
            "\tat java.lang.ClassLoader.defineClass(ClassLoader.java:756)",
            "\tat sun.launcher.LauncherHelper.checkAndLoadMain(LauncherHelper.java:632)"]
    head = [] if exc_line else ["Error: A JNI error has occurred, please check your installation and try again"]
    tb = ["Traceback (most recent call last):",
          '  File "train.py", line 217, in <module>',
          "    metrics = trainer.train(experiment)",
          '  File "/src/parser/trainer.py", line 526, in train',
          "    val_metrics = self.model.get_metrics(reset=True)",
          '  File "/src/parser/evaluation/commands.py", line 78, in evaluate',
          "    m = re.search(regex, result_lines[line_number])",
          "IndexError: list index out of range"]
    bars = ["2022-06-07 15:41:53,154 - INFO - parser.trainer - Training",
            "loss: -2.0794 ||: 100%|##########| 1/1 [00:00<00:00, 12.93it/s]",
            "2022-06-07 15:41:53,233 - INFO - parser.trainer - Validating",
            "100%|##########| 1/1 [00:00<00:00, 133.26it/s]"]
    return [*bars, *head, *java, *tb]


def test_python_traceback_after_a_java_stack_trace_names_the_activity() -> None:
    """P1: the failure line is the JVM's (its launcher's report or its exception line); the Python traceback printed
    after the Java stack trace is its caller's, and its frames (``evaluate``) name the activity: ``evaluation``."""
    for exc_line in (False, True):
        lines = _java_evaluator_fails(exc_line)
        assert phase_of(lines, 4, lines[:8]) == "evaluation"


def test_train_function_reading_a_batch_is_in_the_loop() -> None:
    """P3/P8: a traceback whose ``train`` frame stops on a line reading a batch's field (``batch['input_ids']``) is in the
    loop (a batch is in hand only once the loop asked its loader for one); with no step printed: ``first_step``. The same
    ``train`` frame building its optimizer is set-up."""
    head = ["Creating trainer on process 0 with world size 4", "Loaded model on rank 0",
            "Using RMSprop optimizer with learning rate 1e-06"]
    def tb(code: str) -> list[str]:
        return ["Traceback (most recent call last):",
                '  File "/src/train.py", line 85, in worker_main',
                "    trainer.train()",
                '  File "/src/trainers.py", line 1228, in train',
                f"    {code}",
                "KeyError: 'input_ids'"]
    lines = [*head, *tb("output = self.policy.generate(input_ids=batch['input_ids'], max_length=100)")]
    assert phase_of(lines, len(lines) - 1, lines) == "first_step"
    setup = [*head, *tb("self.optimizer = build(self.config['input_ids'])")]
    assert phase_of(setup, len(setup) - 1, setup) == "startup"


def test_loss_printed_as_a_libtorch_tensor_is_a_step_done() -> None:
    """P2 (b): a C++ loop printing its loss with libtorch's ``operator<<`` (the value, then "[ CPUFloatType{} ]") after
    each step; a native crash after it is ``training``, not set-up."""
    step = ["[DISPATCH] aten::matmul (num_args=2)", "[DISPATCH] aten::add (num_args=2)"]
    printed = ["Step Loss:", "10.861194610595703", "[ CUDAFloatType{} ]"]
    crash = "terminate called after throwing an instance of 'c10::Error'"
    lines = [*step, *printed, *step, *printed, *step, crash]
    assert phase_of(lines, len(lines) - 1, lines[-6:]) == "training"
    bare = [*step, "[ CUDAFloatType{} ]", *step, crash]  # a type line with no loss printed above it
    assert phase_of(bare, len(bare) - 1, bare[-6:]) == "startup"


def _no_grad_tb(outer: list[str]) -> list[str]:
    """A traceback through a job function decorated with ``@torch.no_grad()`` (torch's ``decorate_context``) down to a
    module's forward, called from ``outer`` frames."""
    return ["Traceback (most recent call last):", *outer,
            '  File "/env/lib/python3.11/site-packages/torch/utils/_contextlib.py", line 120, in decorate_context',
            "    return func(*args, **kwargs)",
            '  File "/src/clustering.py", line 526, in distance_matrix',
            "    out = self.model(images)",
            '  File "/env/lib/python3.11/site-packages/torch/nn/modules/module.py", line 1786, in _call_impl',
            "    return forward_call(*args, **kwargs)",
            "RuntimeError: DataLoader worker (pid 933394) is killed by signal: Killed."]


def test_forward_with_gradients_off_is_an_inference_pass() -> None:
    """P5: a forward inside the job's ``@torch.no_grad()`` function, called from ``main``, runs no training step: an
    embedding job's inference, ``evaluation``; the same called from a training step (a teacher's forward) is not."""
    head = ["[INFO] Computing embeddings from scratch...", "[INFO] Distance computation complete"]
    lines = [*head, *_no_grad_tb(['  File "/src/main.py", line 79, in cluster', "    d = distance_matrix(model, loader)"])]
    assert phase_of(lines, len(lines) - 1, lines) == "evaluation"
    step = [*head, *_no_grad_tb(['  File "/src/distill.py", line 79, in train_step', "    t = distance_matrix(teacher, x)"])]
    assert phase_of(step, len(step) - 1, step) == "first_step"
    rollout = [ln.replace("distance_matrix", "collect_rollouts") for ln in lines]  # an RL loop's rollout, from main
    assert phase_of(rollout, len(rollout) - 1, rollout) != "evaluation"


def test_peft_load_adapter_is_checkpoint_load() -> None:
    """P7: ``PeftModel.from_pretrained`` -> ``load_adapter`` reading the adapter an earlier stage trained (a local output
    directory) fails: ``checkpoint_load``, not the previous stage's training."""
    steps = [f"{{'loss': 0.{k}1, 'learning_rate': 1e-4, 'epoch': {k}.0}}" for k in range(1, 4)]
    tb = ["[rank1]: Traceback (most recent call last):",
          '[rank1]:   File "/src/run_lora.py", line 375, in main',
          "[rank1]:     model = PeftModel.from_pretrained(model, model_args.model_name_or_path)",
          '[rank1]:   File "/env/lib/python3.10/site-packages/peft/peft_model.py", line 378, in load_adapter',
          "[rank1]:     set_peft_model_state_dict(self, adapters_weights, adapter_name=adapter_name)",
          '[rank1]:   File "/env/lib/python3.10/site-packages/peft/utils/save_and_load.py", line 162, in set_peft_model_state_dict',
          "[rank1]:     raise NotImplementedError",
          "[rank1]: NotImplementedError"]
    lines = [*steps, "08/27/2025 17:12:58 - WARNING - __main__ - Process rank: 1, device: cuda:1", *tb]
    assert phase_of(lines, len(lines) - 1, lines) == "checkpoint_load"
