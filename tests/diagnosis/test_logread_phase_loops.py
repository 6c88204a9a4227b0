"""Phase rules of round 9 (issue 23, item 4), on excerpts written by hand in the shapes trainers
and loggers print: a completion line that one epoch prints with more steps after it, logger lines
whose counter sits at their head before dozens of meters, error-rate metrics on training lines."""

from __future__ import annotations

from gpulens.diagnosis.classifier import Classifier
from gpulens.diagnosis.logread import diagnose_text

_OOM = ["Traceback (most recent call last):", '  File "/srv/main.py", line 210, in <module>', "    train_engine(cfg)",
        '  File "/srv/engine.py", line 88, in train_one_epoch', "    outputs = model(frames)",
        '  File "/srv/models/detr.py", line 140, in forward', "    hs = self.transformer(src)",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.20 GiB. GPU 0 has a total capacity of "
        "23.65 GiB of which 600.00 MiB is free."]


def _meters(k: int) -> str:
    """A DETR-style training line: the counter first, then every auxiliary loss and ``class_error``."""
    aux = "; ".join(f"loss_ce_{j} = 0.03{j} (0.03{j}); class_error_{j} = 0.0000 (0.0000); loss_bbox_{j} = 0.003 (0.003)"
                    for j in range(6))
    return f"[Metrics] [Epoch: 4] [{k}/80] [eta: 0:01:10] loss = 7.{k} (7.{k}); {aux}; lr = 0.0001 (0.0001);"


def test_steps_after_an_epochs_completion_line_are_not_a_shutdown(rules: Classifier) -> None:
    lines = [_meters(k) for k in (0, 20, 40, 60)] + ["[SUCCESS] Finish training epoch 3.", "[INFO] Start training epoch 4."]
    lines += [_meters(k) for k in (0, 20, 40)] + _OOM
    w = diagnose_text("\n".join(lines), rules)
    assert w.diagnosis.category == "gpu_oom" and w.phase == "training"
    # the same completion line with nothing after it but one summary line: the run had ended
    end = [_meters(k) for k in (0, 20, 40, 60)] + ["Training finished.", "Best epoch: 3, loss = 7.2",
                                                   "Traceback (most recent call last):",
                                                   '  File "/srv/main.py", line 230, in <module>',
                                                   "    report(best)", "KeyError: 'val_acc'"]
    assert diagnose_text("\n".join(end), rules).phase == "shutdown"


def test_an_evaluation_after_steps_past_a_done_line_is_evaluation(rules: Classifier) -> None:
    # "Done." of a set-up stage, then an epoch of steps, then the first evaluation batch
    lines = ["Reinitializing last layer ...", "Done.",
             *[f"Epoch: [1][{k}/110] Elapsed 1m 7s (remain 9m 14s) Loss: 0.{k + 1} Grad: 2.1  LR: 0.000002"
               for k in (0, 50, 100, 109)],
             "EVAL: [0/7] Elapsed 0m 7s (remain 0m 47s) Loss: 0.1289(0.1289)", *_OOM]
    assert diagnose_text("\n".join(lines), rules).phase == "evaluation"


def test_a_long_logger_line_is_read_by_its_head(rules: Classifier) -> None:
    meters = " || ".join(f"meter_{j}: {j}.{j}e-01/{j}.5e-02" for j in range(30))
    lines = [f"2026-06-29 20:12:{k:02d},520 seg INFO: Iters: {k * 20}/20000 || Lr: 0.0193 || Task Loss: 1.04{k} || {meters}"
             for k in range(1, 8)]
    lines += ["W0629 20:13:05.746000 2979 torch/distributed/elastic/agent/server/api.py:723] Received 15 death signal, "
              "shutting down workers", "Terminated"]
    assert diagnose_text("\n".join(lines), rules).phase == "training"


def test_a_long_configuration_dump_is_no_step(rules: Classifier) -> None:
    dump = ("task=detect, mode=train, model=yolov8n.yaml, epochs=100, patience=50, batch=16, imgsz=640, "
            + ", ".join(f"opt_{j}={j}.5" for j in range(60)))
    lines = ["Ultralytics YOLOv8.0.6 Python-3.9.13 torch-2.0.0 CUDA:0", dump, "Traceback (most recent call last):",
             '  File "/srv/yolo/engine/model.py", line 189, in train', "    self.trainer = self.TrainerClass(overrides=overrides)",
             '  File "/srv/yolo/engine/trainer.py", line 126, in __init__', "    self.data = check_dataset_yaml(self.data)",
             "AssertionError: File not found: data/signs.yaml"]
    assert diagnose_text("\n".join(lines), rules).phase == "startup"


def test_an_import_failure_at_module_level_is_startup_whatever_ran_before(rules: Classifier) -> None:
    # another run's bars in the same nohup file, then a script whose imports fail
    bars = [f"Round {k}: {p}%|#####     | {p * 4}/400 [00:{p:02d}<00:10, 3.1it/s, loss=0.5{k}]" for k, p in enumerate((20, 60, 100))]
    tb = ["Traceback (most recent call last):", '  File "/srv/exp/run_mnist.py", line 7, in <module>',
          "    from utils.plots import draw", '  File "<frozen importlib._bootstrap>", line 1176, in _find_and_load',
          '  File "/srv/exp/utils/plots.py", line 3, in <module>', "    import seaborn as sns",
          "ModuleNotFoundError: No module named 'seaborn'"]
    w = diagnose_text("\n".join(bars + tb), rules)
    assert w.diagnosis.category == "import_error" and (w.phase, w.step) == ("startup", None)
    # an import done inside the training loop is not the program's start-up
    late = ["Traceback (most recent call last):", '  File "/srv/exp/run_mnist.py", line 70, in <module>', "    main()",
            '  File "/srv/exp/run_mnist.py", line 51, in main', "    from utils.plots import draw",
            "ModuleNotFoundError: No module named 'seaborn'"]
    assert diagnose_text("\n".join(bars + late), rules).phase != "startup"


_DP = ["Traceback (most recent call last):", '  File "/srv/train.py", line 301, in <module>', "    train(args)",
       '  File "/srv/train.py", line 240, in train', "    out = model(clips, captions)",
       '  File "/srv/lib/torch/nn/parallel/data_parallel.py", line 152, in forward',
       "    replicas = self.replicate(self.module, self.device_ids[:len(inputs)])",
       "RuntimeError: all tensors must be on devices[0]"]


def test_a_new_training_stage_announced_after_the_last_step_is_its_first_step(rules: Classifier) -> None:
    pre = [f"iter {k:06d}/000283 | nll loss: 9.{k % 97:02d} | 0.27s per loop" for k in range(10, 290, 10)]
    lines = pre + ["epoch 0010/0010 done (pretrain), loss: 9.173986", "saved pretrained decoder to models/ep0010.ckpt",
                   "start training", *_DP]
    assert diagnose_text("\n".join(lines), rules).phase == "first_step"
    banner = pre + ["=== Beginning sequential adaptation ... ===", "    Number of training epochs: 1500", *_DP]
    assert diagnose_text("\n".join(banner), rules).phase == "first_step"
    # an epoch of the same loop announced is no new stage
    epoch = pre + ["[INFO] Start training epoch 10.", *_DP]
    assert diagnose_text("\n".join(epoch), rules).phase == "training"


def _tb(funcs: list[str]) -> list[str]:
    out = ["Traceback (most recent call last):"]
    for f in funcs:
        out += [f'  File "/srv/lib/train/trainer.py", line 82, in {f}', "    output = self.network(batch)"]
    return out + ["RuntimeError: Given groups=1, weight of size [64, 128, 3], expected input[0, 2, 2] to have 128 "
                  "channels, but got 2 channels instead"]


def test_a_trainers_val_function_is_evaluation(rules: Classifier) -> None:
    steps = [f"eta: 0:0{9 - k}:00  epoch: 9  step: {73000 + 30 * k}  loss: 6.4{k}  lr: 0.000100  max_mem: 16175"
             for k in range(10)]
    bar = "  0%|          | 0/500 [00:00<?, ?it/s]  1%|          | 3/500 [00:02<04:39,  1.78it/s]"
    w = diagnose_text("\n".join(steps + [bar] + _tb(["<module>", "main", "train", "val", "forward"])), rules)
    assert w.phase == "evaluation"
    w = diagnose_text("\n".join(steps + _tb(["<module>", "main", "train", "clamp_max_val", "forward"])), rules)
    assert w.phase == "training"


def test_a_models_numbered_reasoning_is_no_training_step(rules: Classifier) -> None:
    ray = "\x1b[36m(main_task pid=2818891)\x1b[0m "
    lines = [f"{ray}epoch 0, step 1", f"{ray}Question: when did the war end?",
             f"{ray}Answer: let's think through it step by step.",
             *[f"{ray}**Step {k}:** {w} the search results" for k, w in enumerate(("Reading", "Ranking", "Using"), 1)],
             f"{ray}<answer> 1918 </answer>", "Traceback (most recent call last):",
             '  File "/srv/verl/workers/fsdp_workers.py", line 410, in update_actor', "    metrics = self.actor.update_policy(data)",
             '  File "/srv/verl/workers/actor/dp_actor.py", line 280, in update_policy', "    loss.backward()",
             "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.07 GiB. GPU 0 has a total capacity of 79.1 GiB"]
    w = diagnose_text("\n".join(lines), rules)
    assert (w.phase, w.step) == ("first_step", "1")


def test_a_diffusion_models_sampling_loop_is_evaluation(rules: Classifier) -> None:
    start = ["Loading model from: weights/v0.1/alex.pth", "2024-12-14-06:50:20-root-INFO: Start sampling",
             "  0%|          | 0/249 [00:02<?, ?it/s]"]
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 31.7 GiB"
    w = diagnose_text("\n".join(start + _tb(["<module>", "main", "p_sample_loop", "p_sample", "forward"])[:-1] + [oom]), rules)
    assert w.phase == "evaluation"
    # the training loss of the same model is a step of training
    w = diagnose_text("\n".join(start[:1] + _tb(["<module>", "main", "run_loop", "run_step", "p_losses", "forward"])[:-1]
                                + [oom]), rules)
    assert w.phase == "first_step"


def test_an_evaluation_that_reported_its_results_is_over(rules: Classifier) -> None:
    start = ["Training sentences: 11692", "Performance before training",
             "2023-08-04 16:33:11 - EmbeddingSimilarityEvaluator: Evaluating the model on sts-dev dataset:"]
    results = ["2023-08-04 16:33:13 - Cosine-Similarity :\tPearson: 0.3830\tSpearman: 0.4117",
               "2023-08-04 16:33:13 - Manhattan-Distance:\tPearson: 0.4093\tSpearman: 0.4134"]
    tb = _tb(["<module>", "train", "fit", "word_repetition"])[:-1] + ["ValueError: Sample larger than population or is negative"]
    assert diagnose_text("\n".join(start + results + tb), rules).phase != "evaluation"
    assert diagnose_text("\n".join(start + tb), rules).phase == "evaluation"  # announced, no result yet


def test_a_vllm_engines_loading_bar_and_profiling_forward_are_startup(rules: Classifier) -> None:
    bars = [f"Loading safetensors checkpoint shards: {p:3d}% Completed | {k}/3 [00:1{k}<00:06,  6.28s/it]"
            for k, p in ((1, 33), (2, 67), (3, 100))]
    tb = ["Traceback (most recent call last):", '  File "/srv/vllm/v1/engine/core.py", line 690, in run_engine_core',
          "    engine_core = EngineCoreProc(*args, **kwargs)", '  File "/srv/vllm/v1/engine/core.py", line 80, in __init__',
          "    self._initialize_kv_caches(vllm_config)", '  File "/srv/vllm/v1/worker/gpu_model_runner.py", line 2300, in profile_run',
          "    self._dummy_sampler_run(hidden_states)", '  File "/srv/torch/nn/modules/module.py", line 1773, in _call_impl',
          "    return forward_call(*args, **kwargs)", '  File "/srv/vllm/v1/sample/sampler.py", line 50, in forward',
          "    sampled = self.sample(logits, sampling_metadata)",
          "FileNotFoundError: [Errno 2] No such file or directory: '/usr/local/cuda-12.6/bin/nvcc'"]
    w = diagnose_text("\n".join(bars + tb), rules)
    assert (w.phase, w.step) == ("startup", None)
    # the same forward in the training loop is its first step
    loop = [ln.replace("__init__", "train_step").replace("profile_run", "run_batch") for ln in tb]
    assert diagnose_text("\n".join(bars + loop), rules).phase == "first_step"


def test_a_wandb_footer_just_above_the_traceback_shows_the_steps_logged(rules: Classifier) -> None:
    footer = ["wandb: Waiting for W&B process to finish... (failed 1).", "wandb: Run history:",
              "wandb:   fitness \u2581\u2581\u2582\u2583\u2584\u2585\u2586\u2587\u2588", "wandb:     _step \u2581\u2582\u2583\u2584\u2585\u2586\u2588",
              "wandb:", "wandb: Synced deep-wood-1813: https://wandb.ai/me/ga/runs/2gnq1epq"]
    tb = ["Traceback (most recent call last):", '  File "/srv/ga/core_ga.py", line 268, in <module>', "    main()",
          '  File "/srv/ga/core_ga.py", line 201, in initiate_ga', "    wandb.log_artifact(table)",
          "requests.exceptions.HTTPError: 429 Client Error: Too Many Requests for url: https://api.wandb.ai/graphql"]
    start = ["wandb: Tracking run with wandb version 0.10.12", "Population initialized."]
    assert diagnose_text("\n".join(start + footer + tb), rules).phase == "training"
    assert diagnose_text("\n".join(start + tb), rules).phase != "training"


def test_a_failure_after_lightnings_model_summary_is_in_the_first_step(rules: Classifier) -> None:
    summary = ["  | Name  | Type | Params | Mode", "0 | model | GRU  | 846 K  | train", "846 K     Trainable params",
               "0         Non-trainable params", "846 K     Total params", "3.387     Total estimated model params size (MB)",
               "SLURM auto-requeueing enabled. Setting signal handlers."]
    tb = ["Traceback (most recent call last):", '  File "/srv/torchmetrics/metric.py", line 483, in wrapped_func',
          "    update(*args, **kwargs)", '  File "/srv/torchmetrics/classification/stat_scores.py", line 77, in _update_state',
          "    self.tp += tp", "RuntimeError: Expected all tensors to be on the same device, but found at least two devices, "
          "cuda:0 and cpu!"]
    assert diagnose_text("\n".join(summary + tb), rules).phase == "first_step"
    assert diagnose_text("\n".join(summary[-1:] + tb), rules).phase == "startup"


def test_a_metric_computed_under_a_constructor_is_evaluation(rules: Classifier) -> None:
    tb = ["Traceback (most recent call last):", '  File "/srv/ko/get_roc_curves_files.py", line 90, in <module>',
          "    obj = RocCurves(scores, labels)", '  File "/srv/ko/roc.py", line 20, in __init__', "    self.get_roc()",
          '  File "/srv/ko/roc.py", line 41, in get_aucROC', "    fpr, tpr, _ = roc_curve(labels, scores)",
          '  File "/srv/sklearn/metrics/_ranking.py", line 992, in roc_curve', "    fps, tps, thresholds = _binary_clf_curve(",
          "ValueError: Input contains NaN."]
    assert diagnose_text("\n".join(["is gpu 1True", *tb]), rules).phase == "evaluation"
    # a constructor building the model is start-up
    build = [ln.replace("get_aucROC", "build_layers").replace("roc_curve(labels, scores)", "nn.Linear(d, k)")
             .replace("in roc_curve", "in __init__") for ln in tb]
    assert diagnose_text("\n".join(["is gpu 1True", *build]), rules).phase == "startup"
