"""The phase under the written phase rules P1-P11 (sample_logs/whole/README.md, "Phase: rules"), on
excerpts written by hand in the formats the libraries print."""

from __future__ import annotations

from gpulens.diagnosis.classifier import Classifier
from gpulens.diagnosis.logread import diagnose_text
from gpulens.diagnosis.logread.phase import phase_of

_LIB = "/opt/env/lib/python3.10/site-packages"


def _frame(path: str, line: int, func: str, code: str) -> list[str]:
    return [f'  File "{path}", line {line}, in {func}', f"    {code}"]


def test_a_metric_error_chained_below_lightnings_sanity_check_is_evaluation(rules: Classifier) -> None:
    """P1 + P4: the cause's traceback holds only torchmetrics' frames; the chained one below it holds
    Lightning's ``_run_sanity_check`` -> ``on_validation_epoch_end``: the sanity check is an evaluation pass."""
    cause = ["Traceback (most recent call last):",
             *_frame(f"{_LIB}/torchmetrics/metric.py", 483, "wrapped_func", "update(*args, **kwargs)"),
             *_frame(f"{_LIB}/torchmetrics/classification/stat_scores.py", 77, "_update_state", "self.tp += tp"),
             "RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!"]
    outer = ["Traceback (most recent call last):",
             *_frame("fit_gru.py", 300, "<module>", "trainer.fit(model, train_loader, val_loader)"),
             *_frame(f"{_LIB}/pytorch_lightning/trainer/trainer.py", 1023, "_run_stage", "self._run_sanity_check()"),
             *_frame(f"{_LIB}/pytorch_lightning/trainer/trainer.py", 1052, "_run_sanity_check", "val_loop.run()"),
             *_frame("fit_gru.py", 50, "on_validation_epoch_end", "f1 = self.f1(preds, target).item()"),
             *_frame(f"{_LIB}/torch/nn/modules/module.py", 1562, "_call_impl", "return forward_call(*args, **kwargs)"),
             *_frame(f"{_LIB}/torchmetrics/metric.py", 312, "forward", "self._forward_cache = self._update(*args)"),
             *_frame(f"{_LIB}/torchmetrics/metric.py", 486, "wrapped_func", "raise RuntimeError("),
             "RuntimeError: Encountered different devices in metric calculation (see stacktrace for details)."]
    text = "\n".join(["GPU available: True (cuda), used: True", *cause, "",
                      "The above exception was the direct cause of the following exception:", "", *outer])
    assert diagnose_text(text, rules).phase == "evaluation"


def test_a_missing_shard_of_a_hub_model_is_startup(rules: Classifier) -> None:
    """P7: ``from_pretrained('org/model')`` failing to find a file of the Hub repository is base weights
    read while the model is built (``startup``), not the job's own checkpoint."""
    tb = ["Traceback (most recent call last):",
          *_frame("/home/u/proj/train.py", 900, "<module>", "train(parse_args())"),
          *_frame("/home/u/proj/train.py", 700, "train", "model = AutoModelForCausalLM.from_pretrained("),
          *_frame(f"{_LIB}/transformers/modeling_utils.py", 4052, "from_pretrained",
                  "checkpoint_files, sharded_metadata = _get_resolved_checkpoint_files("),
          *_frame(f"{_LIB}/transformers/utils/hub.py", 879, "get_checkpoint_shard_files", "cached_filenames = cached_files("),
          *_frame(f"{_LIB}/transformers/utils/hub.py", 528, "cached_files", "raise OSError("),
          "OSError: acme/llm-7b does not appear to have a file named model-00002-of-00003.safetensors. "
          "Checkout 'https://huggingface.co/acme/llm-7b/tree/main' for available files."]
    text = "\n".join(["INFO Loading model: acme/llm-7b", *tb])
    assert diagnose_text(text, rules).phase == "startup"


def test_a_missing_file_in_a_local_model_folder_is_still_a_load(rules: Classifier) -> None:
    """P7: a local folder (here a step-numbered checkpoint the job wrote) is not a Hub repository id."""
    tb = ["Traceback (most recent call last):",
          *_frame("/home/u/proj/train.py", 700, "<module>", "model = AutoModel.from_pretrained(args.ckpt)"),
          *_frame(f"{_LIB}/transformers/modeling_utils.py", 4052, "from_pretrained",
                  "checkpoint_files, sharded_metadata = _get_resolved_checkpoint_files("),
          *_frame(f"{_LIB}/transformers/utils/hub.py", 528, "cached_files", "raise OSError("),
          "OSError: /scratch/u/out/checkpoint-500 does not appear to have a file named config.json. "
          "Checkout 'https://huggingface.co//scratch/u/out/checkpoint-500/tree/main' for available files."]
    assert diagnose_text("\n".join(tb), rules).phase == "checkpoint_load"


def test_a_dataloader_worker_dying_in_lightnings_validation_loop_is_evaluation(rules: Classifier) -> None:
    """P4 + P8: Lightning's validation pass inside ``fit`` (frames in ``loops/evaluation_loop.py``, whose functions
    are named ``run``/``__next__``) fetching a batch whose worker died: the pass's phase, evaluation."""
    cause = ["Traceback (most recent call last):",
             *_frame(f"{_LIB}/torch/utils/data/dataloader.py", 1251, "_try_get_data",
                     "data = self._data_queue.get(timeout=timeout)"),
             *_frame(f"{_LIB}/torch/utils/data/_utils/signal_handling.py", 73, "handler", "_error_if_any_worker_fails()"),
             "RuntimeError: DataLoader worker (pid 4242) is killed by signal: Segmentation fault. "]
    outer = ["Traceback (most recent call last):",
             *_frame("/srv/ocr/runners/train.py", 126, "train", "trainer.fit("),
             *_frame(f"{_LIB}/lightning/pytorch/loops/fit_loop.py", 458, "advance", "self.epoch_loop.run(self._data_fetcher)"),
             *_frame(f"{_LIB}/lightning/pytorch/loops/training_epoch_loop.py", 398, "on_advance_end", "self.val_loop.run()"),
             *_frame(f"{_LIB}/lightning/pytorch/loops/evaluation_loop.py", 138, "run",
                     "batch, batch_idx, dataloader_idx = next(data_fetcher)"),
             *_frame(f"{_LIB}/lightning/pytorch/loops/fetchers.py", 61, "__next__", "batch = next(self.iterator)"),
             *_frame(f"{_LIB}/torch/utils/data/dataloader.py", 1264, "_try_get_data", "raise RuntimeError("),
             "RuntimeError: DataLoader worker (pid(s) 4242) exited unexpectedly"]
    text = "\n".join(["Epoch 0: 100%|##########| 50/50 [00:09<00:00,  5.10it/s, v_num=3]", *cause, "",
                      "The above exception was the direct cause of the following exception:", "", *outer])
    assert diagnose_text(text, rules).phase == "evaluation"


def test_an_openclip_epoch_logged_then_a_worker_error_in_the_next_epoch_is_training(rules: Classifier) -> None:
    """P2 (b) + P8: OpenCLIP's ``Train Epoch: E [samples/N (p%)]`` line is logged after steps; a DataLoader worker's
    error on the next epoch's first batch comes after completed steps: training."""
    logged = [f"2025-01-02,10:0{k}:00 | INFO | Train Epoch: 0 [{n:>6}/65536 ({n * 100 // 65536}%)] Data (t): 0.2 "
              f"Batch (t): 0.3, 2900.1/s, 2900.1/s/gpu LR: 0.000010 Logit Scale: 14.28 Loss: 5.41 (5.47)"
              for k, n in enumerate((128, 32896, 65536))]
    tb = ["Traceback (most recent call last):",
          *_frame("/srv/open_clip/src/open_clip_train/main.py", 484, "main",
                  "train_one_epoch(model, data, loss, epoch, optimizer, scaler, scheduler, dist_model, args)"),
          *_frame("/srv/open_clip/src/open_clip_train/train.py", 85, "train_one_epoch", "for i, batch in enumerate(dataloader):"),
          *_frame(f"{_LIB}/torch/utils/data/dataloader.py", 1480, "_process_data", "data.reraise()"),
          "AssertionError: Caught AssertionError in DataLoader worker process 0."]
    text = "\n".join(["2025-01-02,10:00:00 | INFO | Start epoch 0", *logged,
                      "2025-01-02,10:03:00 | INFO | Start epoch 1", *tb])
    assert diagnose_text(text, rules).phase == "training"


def test_an_early_stopping_setting_in_a_config_dump_is_no_end_of_training(rules: Classifier) -> None:
    """P10 + P3: "Early stopping patience: 20" printed with the config is a setting, not the loop's end; the failure in
    the first batch of ``_train_epoch`` after "Training..." is the first step, not a shutdown."""
    cfg = [f"2025-01-02 10:00:00,100 - pipeline - INFO -   {k}: {v}"
           for k, v in (("Epochs", 100), ("Batch size", 256), ("Early stopping patience", 20))]
    tb = ["Traceback (most recent call last):",
          *_frame("/srv/pipe/cli.py", 40, "<module>", "main()"),
          *_frame("/srv/pipe/train.py", 120, "run", "loss = self._train_epoch(loader)"),
          *_frame("/srv/pipe/train.py", 80, "_train_epoch", "B, T, C = logits.shape"),
          "ValueError: not enough values to unpack (expected 3, got 2)"]
    text = "\n".join([*cfg, "[1/3] Loading sequences...", "[2/3] Initializing model...", "[3/3] Training...", *tb])
    assert diagnose_text(text, rules).phase == "first_step"


def test_an_interrupt_landing_in_a_destructor_mid_training_takes_the_trainings_phase() -> None:
    """P9: Ctrl-C raises ``KeyboardInterrupt`` in whatever runs, here a destructor the garbage collector called
    ("Exception ignored in: <function X.__del__>") while Lightning trained: the phase is training, not shutdown."""
    bars = [f"Epoch 2: {p:>3}%|#####     | {k}/40 [00:05<00:05,  4.01it/s, v_num=1, train/loss=3.1]"
            for p, k in ((25, 10), (50, 20))]
    tb = ["Exception ignored in: <function BaseGeometry.__del__ at 0x7f00deadbeef>",
          "Traceback (most recent call last):",
          *_frame(f"{_LIB}/shapely/geometry/base.py", 209, "__del__", "self._empty(val=None)"),
          *_frame(f"{_LIB}/shapely/geometry/base.py", 250, "__setattr__", "super().__setattr__(name, value)"),
          "KeyboardInterrupt: "]
    lines = [*bars, *tb]
    assert phase_of(lines, len(lines) - 1, lines[-8:]) == "training"


def test_a_final_evaluation_announced_after_training_completed_is_evaluation(rules: Classifier) -> None:
    """P10: after the loop's end ("Early stopping triggered", "Training completed.") the final evaluation the same
    job announces ("Starting evaluation...") is ``evaluation``, not a shutdown."""
    epochs = [f"2025-04-09 0{k}:00:00,100 [INFO] [Epoch {k}] Train Loss: 0.{9 - k}1, Val Loss: 0.{9 - k}3" for k in range(1, 4)]
    text = "\n".join([*epochs, "2025-04-09 04:00:00,100 [INFO] Early stopping triggered after 3 epochs",
                      "2025-04-09 04:00:00,200 [INFO] Training completed. Starting evaluation...",
                      "2025-04-09 04:01:30,000 [ERROR] Evaluation failed: Command '['python', 'eval_open_set.py', "
                      "'--model_path', 'out/best.pt']' returned non-zero exit status 1."])
    assert diagnose_text(text, rules).phase == "evaluation"


def test_a_failure_in_a_jax_train_step_of_one_part_before_any_step_is_first_step(rules: Classifier) -> None:
    """P3: frames in the step (``train_step_node``, the jitted step of one part of an Equinox model) with no step
    logged yet: the loop has begun, the first step."""
    tb = ["Traceback (most recent call last):",
          *_frame("/srv/ncf/main.py", 301, "<module>", "trainer.train_proximal(nb_outer_steps_max=100)"),
          *_frame("/srv/ncf/trainer.py", 297, "train_proximal", "node, opt_state = train_step_node(node, batch, opt_state)"),
          *_frame("/srv/ncf/trainer.py", 227, "train_step_node", "(loss, aux), grads = eqx.filter_value_and_grad(f)(node)"),
          *_frame(f"{_LIB}/diffrax/_integrate.py", 1423, "diffeqsolve", "sol = result.error_if(sol, bad)"),
          "ValueError: zero-size array to reduction operation max which has no identity"]
    text = "\n".join(["Compiling function \"train_step\" for the model ...", *tb])
    assert diagnose_text(text, rules).phase == "first_step"


def test_a_model_summarys_dummy_forward_is_startup(rules: Classifier) -> None:
    """P3: torchsummary's ``summary(model, input_size)`` runs the model on random input while the runner builds
    it; an error in that forward is start-up, not the first step."""
    tb = ["Traceback (most recent call last):",
          *_frame("/srv/vis/main_train.py", 9, "<module>", "main()"),
          *_frame("/srv/vis/runners/runner.py", 360, "main", "summary(model, input_size=(3, 224, 224))"),
          *_frame(f"{_LIB}/torchsummary/torchsummary.py", 72, "summary", "model(*x)"),
          *_frame(f"{_LIB}/torch/nn/modules/module.py", 1747, "_call_impl", "return forward_call(*args, **kwargs)"),
          *_frame("/srv/vis/models/vislstm.py", 210, "forward", "x = self.patch_embed(x)"),
          *_frame(f"{_LIB}/torch/nn/modules/conv.py", 549, "_conv_forward", "return F.conv2d(input, weight, bias)"),
          "RuntimeError: Input type (torch.cuda.FloatTensor) and weight type (torch.FloatTensor) should be the same"]
    assert diagnose_text("\n".join(["initialized model", *tb]), rules).phase == "startup"


def test_a_c10d_error_logged_by_each_rank_then_raised_in_a_save_is_checkpoint_save(rules: Classifier) -> None:
    """P1 + P6: c10d logs the monitored barrier's error on each rank, then each rank raises it; the traceback below the
    ranks' copies runs through ``booster.save_model`` -> ``save_sharded_model``: a save."""
    msg = "Rank {r} successfully reached monitoredBarrier, but received errors while waiting for send/recv from rank 0."
    logged = [f"[rank{r}]:[E813 07:25:21.5322{r}] ProcessGroupGloo.cpp:143] " + msg.format(r=r) for r in (8, 15)]
    tb = ["[rank8]: Traceback (most recent call last):",
          *(f"[rank8]: {x}" for x in (
              *_frame("/srv/chat/lora_finetune.py", 744, "<module>", "train(args)"),
              *_frame("/srv/chat/lora_finetune.py", 519, "train", 'booster.save_model(model, save_dir, shard=True)'),
              *_frame("/srv/colossalai/booster/booster.py", 341, "save_model", "self.checkpoint_io.save_model("),
              *_frame("/srv/colossalai/checkpoint_io/moe_checkpoint.py", 225, "save_sharded_model", "dist.barrier()"),
              *_frame(f"{_LIB}/torch/distributed/distributed_c10d.py", 3936, "barrier", "work = default_pg.barrier(opts=opts)"))),
          "[rank8]: RuntimeError: " + msg.format(r=8)]
    lines = ["Loading checkpoint shards: 100%|##########| 4/4 [00:10<00:00,  2.50s/it]", *logged, *tb]
    assert phase_of(lines, 1, logged) == "checkpoint_save"


def test_a_periodic_evaluations_results_with_the_bar_short_of_its_total_are_no_end(rules: Classifier) -> None:
    """P10 + P9: results printed while the training bar stands at 9000/30000 are a periodic evaluation's (3D Gaussian
    Splatting's "[ITER 7000] Evaluating train: L1 ... PSNR ..."); Ctrl-C in ``training`` after them is training."""
    bar = "".join(f"\rTraining progress:  {k * 100 // 30000}%|##        | {k}/30000 [03:20<10:50, 32.30it/s, Loss=0.05]"
                  for k in (8990, 9000))
    tb = ["Traceback (most recent call last):",
          *_frame("/srv/gs/train.py", 246, "<module>", "training(lp.extract(args), op.extract(args), pp.extract(args))"),
          *_frame("/srv/gs/train.py", 114, "training", "ema_loss_for_log = 0.4 * loss.item() + 0.6 * ema_loss_for_log"),
          "KeyboardInterrupt"]
    text = "\n".join([bar, "", "[ITER 7000] Evaluating train: L1 0.0340 PSNR 24.61 [20/01 12:36:39]", "",
                      "[ITER 7000] Saving Gaussians [20/01 12:36:39]", *tb])
    assert diagnose_text(text, rules).phase == "training"
