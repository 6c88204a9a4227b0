"""Phase rules of round 10 (issue 23, item 4), on excerpts written by hand in the shapes libraries
print (Megatron-LM's iteration line, DeepSpeed ZeRO-3's trace-cache notice, Hydra's error report,
wandb's run summary, the Hugging Face/TRL trainers' loops)."""

from __future__ import annotations

import pytest

from gpulens.diagnosis.classifier import Classifier
from gpulens.diagnosis.logread import diagnose_text
from gpulens.diagnosis.logread.phase.steps import last_step


def _megatron(k: int, stamp: bool = True) -> str:
    head = f" [2025-03-02 10:{k % 60:02d}:11]" if stamp else ""
    return (f"{head} iteration {k:8d}/{500000:8d} | consumed samples: {k * 512:12d} | elapsed time per iteration (ms): "
            f"2411.0 | learning rate: 3.000000E-04 | global batch size:   512 | lm loss: 2.{k % 10}41E+00 | "
            "loss scale: 1.0 | grad norm: 0.312 | number of skipped iterations:   0 | number of nan iterations:   0 |")


@pytest.mark.parametrize("stamp", [True, False])
def test_megatron_iteration_lines_are_steps(rules: Classifier, stamp: bool) -> None:
    lines = ["> building train, validation, and test datasets ...", "[after dataloaders are built] datetime: 2025-03-02 ",
             *[_megatron(k, stamp) for k in range(10, 130, 10)],
             "[rank5]: Traceback (most recent call last):",
             '[rank5]:   File "/srv/Megatron-LM/pretrain_gpt.py", line 271, in <module>',
             "[rank5]:     pretrain(",
             '[rank5]:   File "/srv/Megatron-LM/megatron/training/training.py", line 1101, in train_step',
             "[rank5]:     losses_reduced = forward_backward_func(",
             "[rank5]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB. GPU 5 has a total "
             "capacity of 79.10 GiB of which 1.20 GiB is free."]
    assert last_step(lines, len(lines) - 6) == "120"
    w = diagnose_text("\n".join(lines), rules)
    assert (w.phase, w.step) == ("training", "120")
    # a validation line names an iteration without the counter's "/total |": not a step
    assert last_step([" validation loss at iteration 120 | lm loss value: 2.31E+00 |"], 1) is None


def _grpo_step(k: int) -> list[str]:
    bar = f"  0%|          | {k}/8000 [0{k}:12<55:53:54, 25.13s/it]"
    return ["", bar, "", "{'loss': 0.0001, 'grad_norm': 0.15, 'learning_rate': 9.99e-07, 'reward': 0.99, "
            f"'epoch': 0.0{k}}}", "", f"{bar}Invalidate trace cache @ step 0 and module {k * 761}: cache has only 0 modules"]


def test_zero3_invalidate_trace_cache_is_no_validation(rules: Classifier) -> None:
    # DeepSpeed ZeRO-3's notice (deepspeed/runtime/zero/partitioned_param_coordinator.py) between the steps
    lines = [line for k in range(1, 9) for line in _grpo_step(k)]
    lines += ["W0301 10:12:01.112000 4242 torch/distributed/elastic/agent/server/api.py:704] Received Signals.SIGTERM "
              "death signal, shutting down workers",
              "E0301 10:12:03.553000 4242 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: -15) "
              "local_rank: 3 (pid: 4300) of binary: /opt/conda/bin/python"]
    assert diagnose_text("\n".join(lines), rules).phase == "training"


def test_names_above_a_failure_without_traceback_are_not_its_phase(rules: Classifier) -> None:
    # a Ray/verl config dump and wandb's run summary name validation settings and metrics; the kill
    # and the launcher verdict after them say nothing of an evaluation going on
    dump = ["(main_task pid=7001) {'data': {'val_batch_size': None,", "(main_task pid=7001)           'val_files': 'v.parquet'},",
            "(main_task pid=7001)  'trainer': {'test_freq': 5, 'total_epochs': 15}}",
            "(main_task pid=7001) [validate_config] All configuration checks passed successfully!",
            "Error executing job with overrides: ['data.val_files=v.parquet', 'trainer.test_freq=5']",
            "Traceback (most recent call last):",
            '  File "/srv/verl/trainer/main_ppo.py", line 33, in run_ppo',
            "    ray.get(main_task.remote(config))",
            "ray.exceptions.LocalRayletDiedError: The task's local raylet died. Check raylet.out for more information."]
    assert diagnose_text("\n".join(dump), rules).phase == "startup"
    summary = ["wandb: Run history:", "wandb:   val_accuracy ▃▅▇▄▇█▇▇█████", "wandb:       val_loss ▂▂▂▂▁▂▁▁▁▁▁",
               "wandb: Run summary:", "wandb:   val_accuracy 0.49339", "wandb:       val_loss 1.27948", "",
               "run_all.sh: line 27: 1234: command not found"]
    assert diagnose_text("\n".join(summary), rules).phase != "evaluation"


def test_an_evaluation_announced_in_colour_is_read(rules: Classifier) -> None:
    lines = ["\x1b[32m2023-10-28T12:37:41 | tasks.utils: \x1b[0mLoaded checkpoint from /ckpt/best.pth",
             "\x1b[32m2023-10-28T12:37:41 | __main__: \x1b[0mStart evaluation",
             "\x1b[32m2023-10-28T12:37:41 | __main__: \x1b[0mEvaluating val split...",
             "slurmstepd: error: *** JOB 1131917 ON worker-1 CANCELLED AT 2023-10-28T12:37:46 ***"]
    assert diagnose_text("\n".join(lines), rules).phase == "evaluation"


@pytest.mark.parametrize("last, phase", [("Evaluating iter 10/10", "evaluation"), ("Evaluating iter 3/10", "evaluation"),
                                         (" validation loss at iteration 120 | lm loss value: 2.31E+00 | lm loss PPL: "
                                          "1.01E+01 |", "training")])
def test_megatron_evaluate_prints_each_iteration_before_running_it(rules: Classifier, last: str, phase: str) -> None:
    lines = [_megatron(k) for k in range(10, 130, 10)] + ["Evaluating on 5120 samples", "Evaluating iter 1/10",
                                                          last, "terminate called after throwing an instance of 'c10::Error'",
                                                          "  what():  CUDA driver error: unknown error"]
    assert diagnose_text("\n".join(lines), rules).phase == phase


def test_what_a_training_step_calls_is_part_of_the_step(rules: Classifier) -> None:
    # TRL's GRPO trainer scores its completions inside training_step: rewards, not an evaluation
    lines = ["***** Running training *****", "  0%|          | 0/375 [00:00<?, ?it/s]",
             "Traceback (most recent call last):",
             '  File "/srv/x_r1/grpo.py", line 300, in <module>', "    main(args)",
             '  File "/opt/py/transformers/trainer.py", line 2560, in _inner_training_loop',
             "    tr_loss_step = self.training_step(model, inputs, num_items_in_batch)",
             '  File "/opt/py/transformers/trainer.py", line 3730, in training_step', "    inputs = self._prepare_inputs(inputs)",
             '  File "/opt/py/trl/trainer/grpo_trainer.py", line 990, in _generate_and_score_completions',
             "    self._move_model_to_vllm()",
             '  File "/opt/py/vllm/distributed/utils.py", line 197, in broadcast_obj',
             "    recv_obj = pickle.loads(self.store.get(key))",
             "torch.distributed.DistStoreError: wait timeout after 300000ms, keys: /broadcast_from/0/3"]
    assert diagnose_text("\n".join(lines), rules).phase == "first_step"
    # the Trainer's evaluation between steps is still one
    lines[5:9] = ['  File "/opt/py/transformers/trainer.py", line 2630, in _maybe_log_save_evaluate',
                  "    metrics = self.evaluate(ignore_keys=ignore_keys_for_eval)",
                  '  File "/opt/py/transformers/trainer.py", line 4100, in evaluate', "    output = eval_loop(...)"]
    assert diagnose_text("\n".join(lines), rules).phase == "evaluation"


def test_a_script_named_test_that_announces_training_trains(rules: Classifier) -> None:
    lines = ["[end] Initialized Actor Model [end] (duration: 4.43s)", "***** Running training (total_iters=123960) *****",
             "Traceback (most recent call last):",
             '  File "/srv/DeepSpeed-Chat/training/time/main_gen_test.py", line 580, in <module>', "    main()",
             '  File "/srv/DeepSpeed-Chat/training/time/main_gen_test.py", line 564, in main',
             "    out = trainer.generate_experience(batch['prompt'], batch['prompt_att_mask'], step)",
             '  File "/opt/py/deepspeed/model_implementations/transformers/ds_transformer.py", line 141, in forward',
             "    self.allocate_workspace(self.config.hidden_size, self.config.heads,",
             "RuntimeError: Workspace can't be allocated, not enough memory"]
    assert diagnose_text("\n".join(lines), rules).phase == "first_step"
    assert diagnose_text("\n".join(lines[:1] + lines[2:]), rules).phase == "evaluation"  # no announcement: by its name


def test_hugging_face_hub_repo_id_validation_is_no_evaluation(rules: Classifier) -> None:
    lines = ["loading model from /root/ckpt/checkpoint-260000/", "Traceback (most recent call last):",
             '  File "/srv/run_pre_training.py", line 101, in main', "    model = Model.from_pretrained(model_args.path)",
             '  File "/opt/py/transformers/utils/hub.py", line 389, in cached_file', "    resolved = hf_hub_download(",
             '  File "/opt/py/huggingface_hub/utils/_validators.py", line 158, in validate_repo_id',
             "    raise HFValidationError(",
             "huggingface_hub.utils._validators.HFValidationError: Repo id must be in the form 'repo_name' or "
             "'namespace/repo_name': '/root/ckpt/checkpoint-260000/'. Use `repo_type` argument if needed."]
    assert diagnose_text("\n".join(lines), rules).phase != "evaluation"


@pytest.mark.parametrize("tag", ["(main_task pid=7460) ", "\x1b[36m(main_task pid=7460)\x1b[0m "])
def test_a_ray_workers_wandb_exit_lines_are_no_completion(rules: Classifier, tag: str) -> None:
    # wandb prints its sync lines at any exit; behind Ray's prefix they are still no normal end
    lines = [f"{tag}Training from scratch", f"{tag}[Validation] Starting generation for 1000 samples...",
             "Validation LLM turns:   0%|          | 0/100 [00:10<?, ?it/s, active=1000/1000]",
             f"{tag}wandb: 🚀 View run ppo_test at: https://wandb.ai/u/p/runs/3u4f",
             f"{tag}wandb: Synced 5 W&B file(s), 0 media file(s), 0 artifact file(s) and 0 other file(s)",
             "Error executing job with overrides: []", "Traceback (most recent call last):",
             '  File "/srv/verl/trainer/main_ppo.py", line 33, in run_ppo', "    ray.get(main_task.remote(config))",
             "ray.exceptions.RaySystemError: System error: Failed to unpickle serialized exception"]
    assert diagnose_text("\n".join(lines), rules).phase == "evaluation"


def test_a_reported_traceback_and_a_set_up_steps_done_are_read(rules: Classifier) -> None:
    # PyG prints "Processing..." / "Done!" for a data set; Sacred reports "Failed after", then its filtered traceback
    lines = ["WARNING:train:No observers have been added to this run",
             "Downloaded 0.40 GB: 100%|##########| 413/413 [01:07<00:00,  6.13it/s]", "Processing...", "Done!",
             "ERROR:train:Failed after 0:01:32!", "Traceback (most recent calls WITHOUT Sacred internals):",
             '  File "train.py", line 67, in run_experiment', "    results = experiment.run()",
             '  File "/srv/gpn/data/split.py", line 24, in get_idx_split', "    num_nodes = dataset.data.y.size(0)",
             "AttributeError: 'NoneType' object has no attribute 'size'"]
    assert diagnose_text("\n".join(lines), rules).phase == "startup"
    # logging's logger.exception(msg): the message, then the traceback of a failure in the first step
    logged = ["***** Running training *****", "ERROR:root:training failed", "Traceback (most recent call last):",
              '  File "/srv/train.py", line 40, in train_step', "    loss = model(**batch).loss",
              '  File "/srv/model.py", line 12, in forward', "    h = self.proj(x)",
              "RuntimeError: mat1 and mat2 shapes cannot be multiplied (8x512 and 768x768)"]
    assert diagnose_text("\n".join(logged), rules).phase == "first_step"


def test_a_wandb_sweep_agents_next_run_starts_afresh(rules: Classifier) -> None:
    # the bar is the previous run's; the agent then starts a new run, cancelled before its first step
    lines = ["  6%|▌         | 3/50 [02:08<33:12, 42.39s/it]2025-02-18 02:58:32,924 - wandb.wandb_agent - INFO - "
             "Running runs: []",
             "2025-02-18 02:58:33,376 - wandb.wandb_agent - INFO - Agent received command: run",
             "2025-02-18 02:58:33,376 - wandb.wandb_agent - INFO - Agent starting run with config:", "\thidden_dim: 32",
             "2025-02-18 02:58:33,388 - wandb.wandb_agent - INFO - About to run command: /usr/bin/env python exp.py "
             "--hidden_dim=32", "2025-02-18 02:58:38,425 - wandb.wandb_agent - INFO - Running runs: ['3xxczrri']",
             "slurmstepd: error: *** JOB 14931661 ON gpu129 CANCELLED AT 2025-02-18T02:58:41 ***"]
    w = diagnose_text("\n".join(lines), rules)
    assert (w.phase, w.step) == ("startup", None)


def test_a_loading_bar_cut_short_by_another_rank_is_still_set_up(rules: Classifier) -> None:
    bar = "\rLoading checkpoint shards:  {p}%|##        | {n}/8 [00:0{n}<00:05,  1.71s/it]"
    cut = "".join(bar.format(p=25 * n // 2, n=n) for n in range(5, 9)) + "\rLoading checkpoint shards:"
    lines = [f"0: {cut}", f"1: {cut}", f"0: {cut}",
             "Packing into seq_length=15000: 100%|##########| 39531/39531 [00:01<00:00, 20211.01 examples/s]",
             "1: [rank7]: Traceback (most recent call last):",
             '1: [rank7]:   File "/srv/train.py", line 180, in train', "1: [rank7]:     loss = model(**batch).loss",
             '1: [rank7]:   File "/opt/py/transformers/models/llama/modeling_llama.py", line 600, in forward',
             "1: [rank7]:     attn = self.self_attn(hidden)",
             "1: [rank7]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 25.00 GiB. GPU 3 has a total "
             "capacity of 79.10 GiB of which 10.20 GiB is free."]
    assert diagnose_text("\n".join(lines), rules).phase == "first_step"


_KILLED = ["Traceback (most recent call last):", '  File "/srv/train.py", line 300, in <module>', "    main()",
           '  File "/opt/py/torch/_utils.py", line 88, in _rebuild', "    storage = fetch(key)",
           "OSError: [Errno 5] Input/output error"]


@pytest.mark.parametrize("note, phase", [
    ("2024-05-02 10:00:01 | INFO | fairseq.trainer | Preparing to load checkpoint checkpoints/checkpoint_last.pt",
     "checkpoint_load"),
    ("2024-05-02 10:00:01 | INFO | fairseq.checkpoint_utils | Preparing to save checkpoint for epoch 3 @ 1500 updates",
     "checkpoint_save"),
    ("[2024-05-02 10:00:01,000] [INFO] [torch_checkpoint_engine.py:21:save] [Torch] Saving /ckpt/global_step500/"
     "mp_rank_00_model_states.pt...", "checkpoint_save"),
    ("[2024-05-02 10:00:01,000] [INFO] [torch_checkpoint_engine.py:15:create] [Torch] Checkpoint global_step500 is "
     "about to be saved!", "checkpoint_save"),
    ("[2024-05-02 10:00:01,000] [INFO] [torch_checkpoint_engine.py:27:load] [Torch] Loading checkpoint from "
     "/ckpt/global_step500/mp_rank_00_model_states.pt...", "checkpoint_load"),
    ("05/02 10:00:01 - mmengine - INFO - Loads checkpoint by local backend from path: work_dirs/epoch_12.pth",
     "checkpoint_load"),
    ("2024-05-02 10:00:01,000 - mmdet - INFO - load checkpoint from local path: work_dirs/latest.pth", "checkpoint_load"),
])
def test_a_checkpoint_read_or_write_announced_just_before_the_failure(rules: Classifier, note: str, phase: str) -> None:
    steps = [f"step {k} | loss 2.{k}1 | lr 3e-4" for k in range(10, 60, 10)]
    assert diagnose_text("\n".join([*steps, note, *_KILLED]), rules).phase == phase


def test_an_ultralytics_validation_bar_is_an_evaluation(rules: Classifier) -> None:
    train = "      3/100      4.21G      1.234      2.345      1.111         32        640: 100%|##########| 938/938 [03:01<00:00,  5.17it/s]"
    val = "                 Class     Images  Instances      Box(P          R      mAP50  mAP50-95):  45%|####5     | 71/157 [00:10<00:12,  6.9it/s]"
    tail = ["Traceback (most recent call last):", '  File "/srv/train.py", line 20, in <module>', "    model.train(data='d.yaml')",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 23.65 GiB "
            "of which 1.10 GiB is free."]
    assert diagnose_text("\n".join([train, val, *tail]), rules).phase == "evaluation"
    done = val.replace("45%|####5     | 71/157", "100%|##########| 157/157")
    assert diagnose_text("\n".join([train, done, "                   all       5000      36335      0.612      0.501      0.55      0.38",
                                    *tail]), rules).phase == "training"


def test_fairseq_counts_its_updates_after_the_epoch() -> None:
    line = ("2024-05-02 10:00:00 | INFO | train_inner | epoch 001:    200 / 1000 loss=9.123, nll_loss=9.0, ppl=512, "
            "wps=1000, ups=1, wpb=1000, bsz=8, num_updates=200, lr=1e-4, gnorm=1.2, train_wall=10, wall=20")
    assert last_step([line], 1) == "200"


def test_the_node_ray_marked_dead_is_the_failing_node(rules: Classifier) -> None:
    lines = ["(main_task pid=7001) [validate_config] All configuration checks passed successfully!",
             "Traceback (most recent call last):", '  File "/srv/verl/trainer/main_ppo.py", line 33, in run_ppo',
             "    ray.get(main_task.remote(config))",
             "ray.exceptions.LocalRayletDiedError: The task's local raylet died. Check raylet.out for more information.",
             "(raylet) The node with node id: b630aa and address: 10.1.2.7 and node name: gpu-node-7 has been marked dead "
             "because the detector has missed too many heartbeats from it. This can happen when a \t(1) raylet crashes "
             "unexpectedly (OOM, etc.) "]
    w = diagnose_text("\n".join(lines), rules)
    assert (w.first_rank, w.first_node) == (None, "gpu-node-7")


def test_a_batch_shape_printed_while_setting_up_is_no_step(rules: Classifier) -> None:
    lines = ["Compiling function \"train_step\" for context ...", "Shapes of elements in a batch: (1, 1, 20, 128) (20,)",
             "batch shape: torch.Size([8, 3, 224, 224])", "Traceback (most recent call last):",
             '  File "/srv/main.py", line 301, in <module>', "    trainer.train(nb_steps=1500)",
             '  File "/srv/trainer.py", line 88, in train', "    state = build_state(cfg)",
             "ValueError: zero-size array to reduction operation max which has no identity"]
    assert diagnose_text("\n".join(lines), rules).phase == "startup"
