"""Phase rules of reader round 11 (r11-phase), on excerpts written by hand in the shapes libraries print."""

from __future__ import annotations

import pytest

from gpulens.diagnosis.classifier import Classifier
from gpulens.diagnosis.logread import diagnose_text


def _nanogpt_iter(k: int) -> str:
    """nanoGPT ``train.py``'s per-iteration line."""
    return f"iter {k}: loss 3.{k % 97:02d}1, time 412.50ms, mfu 31.20%"


def _nanogpt_eval(k: int) -> list[str]:
    """nanoGPT's evaluation every ``eval_interval`` iterations, then its checkpoint save."""
    return [f"step {k}: train loss 3.4102, val loss 3.5120", "saving checkpoint to out-shakespeare"]


def test_save_announced_then_steps_is_not_the_phase_of_a_later_kill(rules: Classifier) -> None:
    """A checkpoint saved, then an iteration, then a kill with no traceback: the save was done."""
    lines = [*[_nanogpt_iter(k) for k in range(2900, 3000, 10)], *_nanogpt_eval(3000),
             _nanogpt_iter(3000),
             "slurmstepd: error: *** JOB 5512 ON gpu07 CANCELLED AT 2026-03-30T06:18:42 ***"]
    w = diagnose_text("\n".join(lines), rules)
    assert w.phase == "training"


def test_save_announced_just_before_a_kill_is_checkpoint_save(rules: Classifier) -> None:
    """The same save with nothing printed after it: the kill came while writing it."""
    lines = [*[_nanogpt_iter(k) for k in range(2900, 3000, 10)], *_nanogpt_eval(3000),
             "slurmstepd: error: *** JOB 5512 ON gpu07 CANCELLED AT 2026-03-30T06:18:42 ***"]
    w = diagnose_text("\n".join(lines), rules)
    assert w.phase == "checkpoint_save"


def _attribute_error(entry: str, func: str) -> list[str]:
    return ["Traceback (most recent call last):",
            f'  File "{entry}", line 271, in <module>',
            "    trainer.train()",
            f'  File "{entry}", line 134, in {func}',
            "    reward = self.best * self.scale",
            "AttributeError: 'Agent' object has no attribute 'scale'"]


@pytest.mark.parametrize("banner", ["INFO::----step{k}----", "===== Epoch {k}/40 =====",
                                    "[2025-02-01 10:00:00] ********** ITERATION {k} **********"])
def test_step_banners_count_steps(rules: Classifier, banner: str) -> None:
    """A custom loop's banner per step or epoch (a number between rules) counts as its progress."""
    lines = ["Using device: cuda"]
    for k in range(3, 8):
        lines += [banner.format(k=k), f"reward: 0.{k}1", f"entropy: 2.{k}"]
    lines += ["load 2000 samples.", *_attribute_error("run.py", "train")]
    w = diagnose_text("\n".join(lines), rules)
    assert (w.phase, w.step) == ("training", "7")


def test_a_numbered_instruction_between_rules_is_not_a_banner(rules: Classifier) -> None:
    lines = ["Using device: cuda", "--- step 4: compute the loss ---", *_attribute_error("run.py", "train")]
    w = diagnose_text("\n".join(lines), rules)
    assert w.step is None


@pytest.mark.parametrize("saved", ["\x1b[34m\x1b[1mwandb\x1b[0m: Adding directory to artifact (./out/checkpoints/checkpoint-{k})"
                                   "... Done. 0.1s",
                                   "[INFO|trainer.py:3478] 2025-01-05 10:00:00,001 >> Saving model checkpoint to "
                                   "out/checkpoint-{k}"])
def test_trainer_checkpoint_folders_name_the_step(rules: Classifier, saved: str) -> None:
    """Trainer checkpoints written (or uploaded to wandb) during training name their global step."""
    lines = ["Using device: cuda"]
    for k in range(500, 3000, 500):
        lines += [f"Saved evaluation predictions to: out/pred_{k}", saved.format(k=k),
                  f"Configuration saved in out/checkpoint-{k}/config.json",
                  f"Model weights saved in out/checkpoint-{k}/model.safetensors",
                  f"tokenizer config file saved in out/checkpoint-{k}/tokenizer_config.json"]
    lines += ["Traceback (most recent call last):",
              '  File "/usr/lib/python3.10/logging/__init__.py", line 1104, in emit',
              "    self.flush()",
              "OSError: [Errno 5] Input/output error"]
    w = diagnose_text("\n".join(lines), rules)
    assert (w.phase, w.step) == ("training", "2500")


_HUB = "/opt/env/lib/python3.11/site-packages/transformers"


@pytest.mark.parametrize("message", [
    "OSError: Incorrect path_or_model_id: '/scratch/run7/checkpoint-12000/'. Please provide either the path to a "
    "local folder or the repo_id of a model on the Hub.",
    "OSError: /scratch/run7/reward_model does not appear to have a file named config.json. Checkout "
    "'https://huggingface.co//scratch/run7/reward_model/tree/None' for available files.",
    "OSError: Can't load tokenizer for '/scratch/run7/sft_out'. If you were trying to load it from "
    "'https://huggingface.co/models', make sure you don't have a local directory with the same name.",
    "huggingface_hub.errors.HFValidationError: Repo id must be in the form 'repo_name' or 'namespace/repo_name': "
    "'/scratch/run7/enc/config.json'. Use `repo_type` argument if needed.",
])
def test_from_pretrained_files_not_found_is_checkpoint_load(rules: Classifier, message: str) -> None:
    """``from_pretrained`` that cannot find a model folder's files: reading a checkpoint, not set-up."""
    lines = ["[INFO] [comm.py:668:init_distributed] Initializing TorchBackend in DeepSpeed with backend nccl",
             "Traceback (most recent call last):",
             '  File "/home/u/proj/train_rm.py", line 192, in <module>',
             "    train(args)",
             '  File "/home/u/proj/train_rm.py", line 29, in train',
             "    model = build_model(args.model_path)",
             f'  File "{_HUB}/models/auto/configuration_auto.py", line 934, in from_pretrained',
             "    config_dict, unused_kwargs = PretrainedConfig.get_config_dict(pretrained_model_name_or_path, **kwargs)",
             f'  File "{_HUB}/utils/hub.py", line 370, in cached_file',
             "    raise EnvironmentError(",
             message]
    w = diagnose_text("\n".join(lines), rules)
    assert w.phase == "checkpoint_load"


def test_a_repo_id_that_is_not_a_path_is_not_a_checkpoint(rules: Classifier) -> None:
    lines = ["Traceback (most recent call last):",
             '  File "/home/u/proj/train.py", line 12, in <module>',
             "    tok = AutoTokenizer.from_pretrained(name)",
             f'  File "{_HUB}/utils/hub.py", line 370, in cached_file',
             "    validate_repo_id(arg_value)",
             "huggingface_hub.errors.HFValidationError: Repo id must be in the form 'repo_name' or "
             "'namespace/repo_name': 'org/my/model'. Use `repo_type` argument if needed."]
    w = diagnose_text("\n".join(lines), rules)
    assert w.phase == "startup"


def test_pytorch_template_early_stop_then_a_failure_is_shutdown(rules: Classifier) -> None:
    """pytorch-template's trainer stops early; what fails after its loop is the run's shutdown."""
    lines = []
    for e in range(30, 38):
        lines += [f"    epoch          : {e}", f"    loss           : 0.28{e}", f"    val_BLEU_4     : 0.09{e}"]
    lines += ["Validation performance didn't improve for 35 epochs. Training stops.",
              "Traceback (most recent call last):",
              '  File "main_train.py", line 135, in <module>',
              "    main()",
              '  File "main_train.py", line 131, in main',
              "    trainer.train()",
              '  File "/home/u/proj/modules/trainer.py", line 99, in train',
              "    self._print_best_to_file()",
              "AttributeError: 'Trainer' object has no attribute '_print_best_to_file'"]
    w = diagnose_text("\n".join(lines), rules)
    assert w.phase == "shutdown"


def test_deepspeed_step_timers_count_steps(rules: Classifier) -> None:
    """DeepSpeed's wall-clock breakdown after each step: steps were done, the failure is not in start-up."""
    timer = ("[2025-02-18 07:59:22,045] [INFO] [logging.py:96:log_dist] [Rank 0] rank=0 time (ms) | forward: 12.{k}4 | "
             "backward: 23.69 | backward_inner: 23.65 | backward_allreduce: 0.00 | optimizer_step: 11.68")
    lines = ["[2025-02-18 07:50:01,000] [INFO] [engine.py:1000:_configure_optimizer] Using DeepSpeed Optimizer param name adam",
             "model built"]
    for k in range(4):
        lines += [timer.format(k=k), f"SCHEDULE NO ERROR {k}"]
    lines += ["terminate called after throwing an instance of 'c10::Error'",
              "  what():  CUDA error: an illegal memory access was encountered"]
    w = diagnose_text("\n".join(lines), rules)
    assert w.phase == "training"


_TORCH = "/opt/env/lib/python3.11/site-packages/torch"


def _sample_load_failure(prefix: str = "") -> list[str]:
    """A training step's DataLoader reading a sample's features with ``torch.load`` and failing."""
    return [f"{prefix}Traceback (most recent call last):",
            f'{prefix}  File "/home/u/proj/train.py", line 1075, in <module>',
            f'{prefix}  File "/home/u/proj/train.py", line 634, in train_one_epoch',
            f'{prefix}  File "{_TORCH}/utils/data/dataloader.py", line 630, in __next__',
            f'{prefix}  File "{_TORCH}/utils/data/_utils/fetch.py", line 52, in fetch',
            f'{prefix}  File "/home/u/proj/dataset.py", line 599, in __getitem__',
            f'{prefix}  File "/home/u/proj/dataset.py", line 392, in read_embedding',
            f'{prefix}  File "{_TORCH}/serialization.py", line 1065, in load',
            f'{prefix}  File "{_TORCH}/serialization.py", line 449, in __init__',
            f"{prefix}OSError: [Errno 23] Too many open files in system: '/data/train/emb/spk_0193.pt'"]


def _train_lines() -> list[str]:
    return [f"INFO: [Train] - Epoch 5, batch_idx_train: {k}, num_updates: {k}, {{'loss': 0.10{k}}}, batch size: 64"
            for k in range(17000, 17500, 100)]


def test_torch_load_of_a_sample_is_not_a_checkpoint_load(rules: Classifier) -> None:
    w = diagnose_text("\n".join([*_train_lines(), *_sample_load_failure("[rank0]: ")]), rules)
    assert w.phase == "training"


def test_torch_load_outside_a_data_set_is_a_checkpoint_load(rules: Classifier) -> None:
    lines = [*_train_lines(), "Traceback (most recent call last):",
             '  File "/home/u/proj/train.py", line 80, in <module>',
             '  File "/home/u/proj/train.py", line 41, in resume',
             f'  File "{_TORCH}/serialization.py", line 1065, in load',
             "_pickle.UnpicklingError: invalid load key, 'v'."]
    w = diagnose_text("\n".join(lines), rules)
    assert w.phase == "checkpoint_load"


def test_an_atexit_callback_failing_after_the_failure_is_not_a_shutdown(rules: Classifier) -> None:
    """Python's "Exception ignored in atexit callback" as the process exits after the failure: its aftermath."""
    lines = [*_train_lines(), *_sample_load_failure(),
             "Exception ignored in atexit callback: <function dump_compile_times at 0x155443ce3420>",
             "Traceback (most recent call last):",
             f'  File "{_TORCH}/_dynamo/utils.py", line 335, in dump_compile_times',
             "OSError: [Errno 23] Too many open files in system: '/opt/env/lib/python3.11/site-packages/tabulate/__init__.py'"]
    w = diagnose_text("\n".join(lines), rules)
    assert w.phase == "training"


def _hf_steps() -> list[str]:
    return [f"{{'loss': 0.{k}1, 'grad_norm': 1.2, 'learning_rate': 1e-05, 'epoch': 0.{k}}}" for k in range(1, 6)]


_CRASH = ["Traceback (most recent call last):", '  File "/home/u/run.py", line 10, in <module>', "    main()",
          '  File "/home/u/run.py", line 8, in main', "    go()",
          "RuntimeError: CUDA error: an illegal memory access was encountered"]


@pytest.mark.parametrize(("note", "phase"), [
    ("INFO:accelerate.accelerator:Saving current state to out/checkpoint_3", "checkpoint_save"),
    ("INFO:accelerate.accelerator:Loading states from out/checkpoint_3", "checkpoint_load"),
    ("Epoch 0, global step 100: 'val_loss' reached 0.51234 (best 0.51234), saving model to "
     "'/x/epoch=0-step=100.ckpt' as top 1", "checkpoint_save"),
    ("(TaskRunner pid=8812) validation generation end", "evaluation"),
    ("(TaskRunner pid=8812) test_gen_batch meta info: {'eos_token_id': 2, 'validate': True}", "evaluation"),
])
def test_library_announcements_name_the_phase(rules: Classifier, note: str, phase: str) -> None:
    """accelerate's save_state/load_state, Lightning's ModelCheckpoint and verl's validation, announced just before."""
    w = diagnose_text("\n".join([*_hf_steps(), note, *_CRASH]), rules)
    assert w.phase == phase


def _timm_train(epoch: int, idx: int) -> str:
    """timm ``train.py``'s training log line."""
    return (f"Train: {epoch} [{idx:>4d}/1251 ({100 * idx // 1250:>3d}%)]  Loss: 6.9{idx % 10} (6.93)  "
            "Time: 0.512s,  500.00/s  (0.512s,  500.00/s)  LR: 1.000e-04  Data: 0.010 (0.010)")


def test_timm_train_lines_are_steps(rules: Classifier) -> None:
    lines = ["Model resnet50 created, param count:25557032", *[_timm_train(3, k) for k in range(1000, 1300, 50)], *_CRASH]
    w = diagnose_text("\n".join(lines), rules)
    assert (w.phase, w.step) == ("training", "1250")


def test_mmengine_before_train_hook_starts_the_loop(rules: Classifier) -> None:
    """mmengine's CheckpointHook announces its folder as the loop starts: a failure after it is in the first step."""
    lines = ["01/01 10:00:00 - mmengine - INFO - Distributed training is not used, all SyncBatchNorm (SyncBN) layers "
             "in the model will be automatically reverted to BatchNormXd layers if they are used.",
             "01/01 10:00:00 - mmengine - INFO - Hooks will be executed in the following order:",
             "01/01 10:00:01 - mmengine - INFO - Checkpoints will be saved to /work/out/run1.", *_CRASH]
    w = diagnose_text("\n".join(lines), rules)
    assert w.phase == "first_step"


@pytest.mark.parametrize("shown", [
    ["2024-01-01:10:00:00,000 INFO     [evaluator.py:400] Running loglikelihood requests",
     "Running loglikelihood requests:  10%|█         | 100/1000 [00:10<01:30,  9.90it/s]"],
    ["Running generate_until requests:  10%|█         | 10/100 [00:10<01:30,  1.00it/s]"],
    ["Processed prompts:  50%|█████     | 50/100 [00:10<00:10,  5.00it/s, est. speed input: 500.00 toks/s, "
     "output: 100.00 toks/s]"],
    ["[01/01 10:00:00 d2.evaluation.evaluator]: Start inference on 500 batches",
     "[01/01 10:00:10 d2.evaluation.evaluator]: Inference done 11/500. Dataloading: 0.0010 s/iter. Inference: "
     "0.0500 s/iter. Eval: 0.0001 s/iter. Total: 0.0510 s/iter. ETA=0:00:25"],
    ["***** Running Prediction *****", "  Num examples = 500", "  Batch size = 8"],
])
@pytest.mark.parametrize("trained", [False, True])
def test_benchmark_and_inference_runs_are_evaluation(rules: Classifier, shown: list[str], trained: bool) -> None:
    """lm-evaluation-harness, vLLM's generate, detectron2's inference_on_dataset, the Trainer's predict."""
    lines = ["Loading model", *(_hf_steps() if trained else []), *shown, *_CRASH]
    w = diagnose_text("\n".join(lines), rules)
    assert w.phase == "evaluation"


def test_timm_resume_is_checkpoint_load(rules: Classifier) -> None:
    lines = ["Model resnet50 created, param count:25557032", "Restoring model state from checkpoint...",
             "Restoring optimizer state from checkpoint...", *_CRASH]
    w = diagnose_text("\n".join(lines), rules)
    assert w.phase == "checkpoint_load"


@pytest.mark.parametrize("note", [
    "Epoch 3: val_loss improved from 0.41234 to 0.39012, saving model to ckpt/model.keras",
    "Epoch 00003: saving model to ckpt/weights.03.h5",
    "INFO:tensorflow:Saving checkpoints for 1000 into /tmp/model/model.ckpt.",
])
def test_keras_and_tensorflow_saves_are_checkpoint_save(rules: Classifier, note: str) -> None:
    lines = [*[f"{k}00/1000 [==>....] - ETA: 1:00 - loss: 0.3{k} - accuracy: 0.9" for k in range(1, 6)], note,
             "slurmstepd: error: *** JOB 5512 ON gpu07 CANCELLED AT 2026-03-30T06:18:42 ***"]
    w = diagnose_text("\n".join(lines), rules)
    assert w.phase == "checkpoint_save"


def test_a_warm_up_backward_from_set_up_is_the_first_step(rules: Classifier) -> None:
    """A warm-up training step run from the set-up (MLPerf-style ``setup`` -> ``warmup`` -> ``backward``)."""
    lines = ["Error executing job with overrides: ['+mpi.local_size=4']",
             "Traceback (most recent call last):",
             '  File "./main.py", line 185, in main',
             "    return App(cfg).exec()",
             '  File "/srv/app/utils/app.py", line 36, in exec',
             "    self.setup()",
             '  File "./main.py", line 132, in setup',
             "    self._trainer.warmup(capture_stream=capture_stream)",
             '  File "/srv/app/trainer.py", line 271, in warmup',
             "    self.scaler_.scale(loss).backward()",
             f'  File "{_TORCH}/_tensor.py", line 396, in backward',
             "    torch.autograd.backward(self, gradient, retain_graph, create_graph, inputs=inputs)",
             f'  File "{_TORCH}/autograd/__init__.py", line 173, in backward',
             "    Variable._execution_engine.run_backward(  # Calls into the C++ engine to run the backward pass",
             "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:46, unhandled cuda error, NCCL version 2.10.3"]
    w = diagnose_text("\n".join(lines), rules)
    assert w.phase == "first_step"


def test_a_profiling_forward_from_set_up_is_still_startup(rules: Classifier) -> None:
    lines = ["Traceback (most recent call last):",
             '  File "/srv/serve.py", line 20, in <module>',
             "    llm = Engine(args)",
             '  File "/srv/engine.py", line 40, in __init__',
             "    self.profile_run()",
             '  File "/srv/engine.py", line 88, in profile_run',
             "    self.model(dummy)",
             f'  File "{_TORCH}/nn/modules/module.py", line 1736, in _call_impl',
             "    return forward_call(*args, **kwargs)",
             '  File "/srv/model.py", line 12, in forward',
             "    return self.net(x)",
             "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."]
    w = diagnose_text("\n".join(lines), rules)
    assert w.phase == "startup"
