"""The phase a whole log failed in and the last step it printed (issue 23, item 4), on excerpts
written by hand in the shapes trainers print: bare iteration counters, the Hugging Face Trainer's
fractional epochs, a tqdm bar the traceback was printed onto."""

from __future__ import annotations

import pytest

from gpulens.diagnosis.classifier import Classifier
from gpulens.diagnosis.logread import diagnose_text
from gpulens.diagnosis.logread.phase import phase_of
from gpulens.diagnosis.logread.phase.steps import last_step

_TB = ["Traceback (most recent call last):", '  File "/srv/train.py", line 80, in <module>', "    main()",
       '  File "/srv/train.py", line 61, in main', "    scheduler.step()",
       "TypeError: unsupported operand type(s) for -: 'int' and 'list'"]


def test_bare_iteration_counters_are_steps(rules: Classifier) -> None:
    ite = [f"ite {k}" for k in range(40)]
    assert last_step(ite, len(ite)) == "39"
    w = diagnose_text("\n".join(ite + _TB), rules)
    assert (w.phase, w.step) == ("training", "39")
    ticks = [f"tick {k}   kimg {k * 50.0:.1f}   time 1d 0{k % 10}h   sec/tick 307.0   gpumem 11.94" for k in range(20)]
    w = diagnose_text("\n".join(ticks + ["slurmstepd: error: *** JOB 12 ON node7 CANCELLED AT 2024-12-13T22:13:44 "
                                         "DUE TO TIME LIMIT ***"]), rules)
    assert (w.phase, w.step) == ("training", "19")


def test_a_fractional_hf_epoch_is_past_the_first_step(rules: Classifier) -> None:
    # one logged loss dict means logging_steps steps were done
    lines = ["***** Running training *****", "{'loss': 0.6931, 'grad_norm': 24.79, 'learning_rate': 5e-06, 'epoch': 0.04}",
             *_TB]
    assert diagnose_text("\n".join(lines), rules).phase == "training"
    lines = ["***** Running training *****", "{'loss': 0.6931, 'grad_norm': 24.79, 'learning_rate': 5e-06, 'epoch': 0.0}",
             *_TB]
    assert diagnose_text("\n".join(lines), rules).phase == "first_step"


@pytest.mark.parametrize("done, phase", [(0, "first_step"), (1, "training"), (57, "training")])
def test_a_tqdm_bar_counts_the_steps_done(rules: Classifier, done: int, phase: str) -> None:
    bar = f"  0%|          | {done}/242731 [00:18<1251:57:42, 18.57s/it]"
    lines = ["loading model", f"{bar}\r{bar}Traceback (most recent call last):",
             '  File "/srv/train.py", line 30, in train', "    trainer.train()",
             '  File "/srv/model.py", line 99, in forward', "    return self.down_proj(self.act(self.up_proj(x)))",
             "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 90.00 MiB. GPU 0 has a total capacity "
             "of 23.65 GiB of which 73.81 MiB is free."]
    w = diagnose_text("\n".join(lines), rules)
    assert w.diagnosis.category == "gpu_oom" and w.phase == phase


def test_the_story_of_a_log_that_stops_mid_run_says_so(rules: Classifier) -> None:
    lines = ["Epoch 12/30"] + [f"{k}/375 [=====>........] - ETA: 3s - loss: 0.41 - accuracy: 0.62" for k in range(10, 210, 10)]
    w = diagnose_text("\n".join(lines), rules)
    assert w.diagnosis.category == "unknown" and w.indicator_lines == [len(lines)]
    story = w.story()
    assert story.startswith("stopped mid-run, ") and "in training" in story and "failed" not in story
    assert f"(line {len(lines)})" in story


@pytest.mark.parametrize("eol", ["", "\r"])
def test_an_evaluation_announced_after_the_last_step_is_the_phase(rules: Classifier, eol: str) -> None:
    # fairseq announces its validation, the script prints its metrics, then a worker fails; a
    # CRLF log's own "\r" does not hide what its lines show
    lines = [f'[2022-06-06 10:06:00][train_inner][INFO] - {{"epoch": 18, "update": 17.{k}, "loss": "0.209"}}'
             for k in range(80, 90)]
    lines += ['[2022-06-06 10:06:13][fairseq_cli.train][INFO] - begin validation on "valid" subset',
              "[[381 167 151  76]", " [101 217  24  49]]", "SENSE:  0.4544", "SPEC:  0.4916", "AUC:  0.51", "F1:  0.47",
              "Traceback (most recent call last):", '  File "/usr/lib/python3.8/tempfile.py", line 497, in mkdtemp',
              "    _os.mkdir(file, 0o700)", "OSError: [Errno 28] No space left on device: '/tmp/pymp-2ntknau9'"]
    w = diagnose_text("\n".join(ln + eol for ln in lines), rules)
    # README C6: "No space left on device" for multiprocessing's pymp-* folder is cpu_oom (r14)
    assert w.diagnosis.category == "cpu_oom" and w.phase == "evaluation"


@pytest.mark.parametrize("note", ["Make prediction on validation set ...", "Predicting on the validation set"])
def test_a_scripts_own_prediction_pass_on_its_evaluation_split_is_evaluation(rules: Classifier, note: str) -> None:
    lines = [f"Epoch: [0][{k * 25}/492]\tTotal Loss -1.28e+01 (-1.27e+01)\tEntropy 2.93e+00" for k in range(20)]
    lines += [note, "Traceback (most recent call last):", '  File "scan.py", line 101, in main',
              "    predictions = get_predictions(p, val_dataloader, model)",
              "RuntimeError: DataLoader worker (pid(s) 13596) exited unexpectedly"]
    assert diagnose_text("\n".join(lines), rules).phase == "evaluation"
    lines[20] = "Make predictions table for the report"  # names no evaluation split: training goes on
    assert diagnose_text("\n".join(lines), rules).phase == "training"


def test_settings_and_announcements_are_no_steps_done(rules: Classifier) -> None:
    head = ["2026-01-21 12:38:34 - Main - INFO -   Iterations per epoch: 1108",
            "2026-01-21 12:38:34 - Main - INFO -   Total optimization steps = 5540",
            "Invalidate trace cache @ step 56836: expected module 842, but got module 422",
            "2026-01-21 12:38:34 - Main - INFO - Starting iteration-wise training...", "waiting for batch..."]
    tail = ["Traceback (most recent call last):", '  File "train.py", line 68, in training_step',
            "    self.masking_model(patch_embeddings, images)", '  File "models/mask.py", line 105, in forward',
            '    assert N == self.num_patches, f"Expected {self.num_patches} patches, got {N}"',
            "AssertionError: Expected 196 patches, got 3136"]
    w = diagnose_text("\n".join(head + tail), rules)
    assert w.phase == "first_step" and w.step is None
    assert last_step(["[Rank 0] step=0, skipped=0, lr=[0.0, 0.0]"], 1) == "0"


@pytest.mark.parametrize("bar, phase", [
    ("Evaluation  [ 570/1872]  eta: 3:12:57    time: 9.6318  data: 0.1369  max mem: 17330", "evaluation"),
    ("Validation DataLoader 0:  45%|####5     | 9/20 [00:01<00:01,  8.10it/s]", "evaluation"),
    ("Test:  [ 10/313]  eta: 0:01:00  loss: 0.41  acc1: 88.2", "evaluation"),
    # a finished evaluation says nothing about what ran after it
    ("Evaluating: 100%|##########| 20/20 [00:04<00:00,  4.90it/s]", "training"),
])
def test_an_unfinished_evaluation_bar_before_the_failure_is_the_phase(rules: Classifier, bar: str, phase: str) -> None:
    steps = [f"Epoch: [3]  [{k:4d}/1251]  eta: 0:10:00  lr: 0.0004  loss: 1.2{k % 10}  time: 0.51" for k in range(0, 1250, 50)]
    oom = ["Traceback (most recent call last):", '  File "/srv/main.py", line 90, in <module>', "    run(args)",
           '  File "/srv/engine.py", line 31, in run', "    out = model(samples)",
           "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."]
    w = diagnose_text("\n".join(steps + [bar] + oom), rules)
    assert w.diagnosis.category == "gpu_oom" and w.phase == phase


def test_a_failure_fetching_the_first_batch_is_in_the_first_step(rules: Classifier) -> None:
    lines = ["Training for 200000 kimg...", "Traceback (most recent call last):",
             '  File "/srv/train.py", line 120, in <module>', "    batch = next(loader_iter)",
             '  File "/opt/torch/utils/data/dataloader.py", line 630, in __next__', "    data = self._next_data()",
             '  File "/opt/torch/utils/data/dataloader.py", line 1344, in _next_data', "    return self._process_data(data)",
             '  File "/opt/torch/_utils.py", line 706, in reraise', "    raise exception",
             "KeyError: Caught KeyError in DataLoader worker process 0."]
    assert diagnose_text("\n".join(lines), rules).phase == "first_step"


def test_steps_of_an_earlier_program_of_the_job_script_do_not_count(rules: Classifier) -> None:
    # a speedrun script: pre-training steps, then a new program starts (wandb.init again), loads
    # the checkpoint "with step 21400", prints its batch settings, and fails before any step
    base = [f"step {k:05d}/21400 | loss: 2.{k % 10} | dt: 410ms" for k in range(21390, 21400)]
    mid = ["wandb: Tracking run with wandb version 0.21.3", "wandb: Run data is saved locally in /srv/wandb/run-2",
           "2025-10-15 05:55:56,329 - checkpoint_manager - INFO - Loading model from /ckpt/d20 with step 21400",
           "Tokens / micro-batch / rank: 32 x 2048 = 65,536", "Tokens / micro-batch: 524,288",
           "Traceback (most recent call last):", '  File "/srv/mid_train.py", line 93, in <module>',
           '    MMLU(subset="auxiliary_train", split="train")', '  File "/srv/tasks/mmlu.py", line 22, in __init__',
           "    self.ds = load_dataset(path, subset)",
           "OSError: Not enough disk space. Needed: Unknown size (download: 45.32 MiB, generated: 153.54 MiB)"]
    w = diagnose_text("\n".join(base + mid), rules)
    assert w.phase == "startup" and w.step is None
    # no new program start: the steps may be this run's, but its module level is building a data set
    # (set-up frames): the two contradict each other, no phase rather than a guess; the step stands
    w = diagnose_text("\n".join(base + mid[2:]), rules)
    assert w.phase == "unknown" and w.step == "21399"


def test_building_a_pretrained_model_is_startup_reading_its_weights_is_a_load(rules: Classifier) -> None:
    # from_pretrained fails while constructing the model (flash-attn missing): nothing was loaded yet
    built = ["Loading config.json", "Traceback (most recent call last):",
             '  File "/srv/knockout.py", line 210, in main', "    model = AutoModelForCausalLM.from_pretrained(name)",
             '  File "/venv/transformers/modeling_utils.py", line 4094, in from_pretrained',
             "    model = cls(config, *model_args, **model_kwargs)",
             '  File "/venv/transformers/modeling_utils.py", line 1587, in _flash_attn_2_can_dispatch',
             "    raise ImportError(msg)",
             "ImportError: FlashAttention2 has been toggled on, but the package flash_attn seems to be not installed."]
    assert diagnose_text("\n".join(built), rules).phase == "startup"
    read = [*built[:5], "    state_dict = load_state_dict(shard_file)",
            '  File "/venv/transformers/modeling_utils.py", line 512, in load_state_dict',
            "    with safe_open(checkpoint_file, framework='pt') as f:",
            "safetensors_rust.SafetensorError: Error while deserializing header: HeaderTooLarge"]
    assert diagnose_text("\n".join(read), rules).phase == "checkpoint_load"


def test_results_that_are_not_json_serializable_are_not_a_checkpoint_save(rules: Classifier) -> None:
    lines = [*(f"{{'loss': 0.0{k}, 'grad_norm': 0.17, 'learning_rate': 5e-06, 'epoch': 0.{k}}}" for k in range(1, 9)),
             "{'train_runtime': '6452', 'train_samples_per_second': '0.124', 'train_loss': '-0.01', 'epoch': '0.9'}",
             "Traceback (most recent call last):", '  File "/srv/run.py", line 279, in run_single_training',
             "    json.dump(summary, f)", '  File "/usr/lib/python3.10/json/encoder.py", line 179, in default',
             "    raise TypeError(f'Object of type {o.__class__.__name__} '",
             "TypeError: Object of type bool_ is not JSON serializable"]
    assert diagnose_text("\n".join(lines), rules).phase == "shutdown"


def test_a_full_disk_while_writing_a_checkpoint_is_a_save(rules: Classifier) -> None:
    lines = [*(f"step {k}00 | loss 0.{k}1 | lr 1e-4" for k in range(1, 9)),
             "Traceback (most recent call last):", '  File "/srv/train.py", line 400, in main',
             "    artifact.add_dir(str(checkpoint_dir))",
             '  File "/usr/lib/python3.12/shutil.py", line 150, in _fastcopy_sendfile',
             "    sent = os.sendfile(outfd, infd, offset, blocksize)",
             "OSError: [Errno 28] No space left on device: '/runs/a/checkpoints/040000/model.safetensors' -> '/tmp/x'"]
    assert diagnose_text("\n".join(lines), rules).phase == "checkpoint_save"
    # the same error on a scratch file is not about a checkpoint
    other = [*lines[:-1], "OSError: [Errno 28] No space left on device: '/tmp/pymp-2ntknau9/cache.lock'"]
    assert diagnose_text("\n".join(other), rules).phase == "training"


_NCCL = ["[rank0]:[E405 03:51:41.28 ProcessGroupNCCL.cpp:688] [Rank 0] Watchdog caught collective operation timeout: "
         "WorkNCCL(SeqNum=404, OpType=_ALLGATHER_BASE, NumelIn=1140480, NumelOut=2280960, Timeout(ms)=600000) ran for "
         "600011 milliseconds before timing out.",
         "terminate called after throwing an instance of 'c10::DistBackendError'"]


def test_an_eval_setting_in_a_config_dump_is_not_an_evaluation(rules: Classifier) -> None:
    bar = [f"{k * 5}%|#         | {k}/200 [00:0{k}<12:08,  3.66s/it]" for k in range(1, 8)]
    dump = ["ERROR 04-05 03:52:41 [dump_input.py:72] Dumping input data for the engine with config: "
            "{'cudagraph_capture_size': 32, 'dynamic_shapes_config': {'evaluate_guards': False}, 'eval_steps': 50}"]
    assert diagnose_text("\n".join(bar + _NCCL + dump), rules).phase == "training"
    # the word used for what the run is doing still counts
    doing = ["Evaluating on the validation set ..."]
    assert diagnose_text("\n".join(bar + doing + _NCCL), rules).phase == "evaluation"


def test_the_pytorch_tutorial_batch_loss_lines_are_steps(rules: Classifier) -> None:
    # print('EPOCH {}:'.format(n)); print('  batch {} loss: {}'.format(i + 1, last_loss)); a header naming epoch 0
    lines = ["EPOCH 1:", *(f"  batch {k} loss: 0.02{k}" for k in range(1, 40, 10)),
             "*****matrice de confusion*****train*****epoch  0", *_TB]
    w = diagnose_text("\n".join(lines), rules)
    assert w.phase == "training"
    assert last_step(["EPOCH 1:", "  batch 7 loss: 0.5"], 2) == "7"
    assert last_step(["    batch = next(loader)"], 1) is None  # a traceback's code line is no step


_NEW_PROGRAM = ["Traceback (most recent call last):", '  File "/srv/train.py", line 985, in <module>', "    main()",
                '  File "/srv/train.py", line 525, in train', "    out = make_run_dir(cfg.output_dir)",
                "FileExistsError: Run directory already exists: runs/baseline"]


def test_a_failure_after_a_finished_program_and_a_next_stage_is_that_stages(rules: Classifier) -> None:
    steps = [f"ep=00  step={k}  loss=2.{k % 10}  lr=1e-4" for k in range(14000, 14800, 50)]
    done = ["Training complete in 47.1 min  (14786 steps, 1 epochs)"]
    # the job script starts its next program, which fails before its first step
    w = diagnose_text("\n".join(steps + done + ["[04:58:12] === Stage 2: 100-step benchmark runs ===",
                                               "[04:58:12]   Running: baseline", *_NEW_PROGRAM]), rules)
    assert (w.phase, w.step) == ("startup", None)
    # the finished program itself fails after its end: its shutdown
    w = diagnose_text("\n".join(steps + done + _NEW_PROGRAM), rules)
    assert w.phase == "shutdown"


def test_a_time_limit_with_no_step_shown_is_not_startup(rules: Classifier) -> None:
    # the steps went to another file (or a format not read): the job ran for its whole allocation
    quiet = ["Using device cuda:0", "Building model PaiNN (5.2M parameters)",
             "[2023-11-29 11:05:15] torch._dynamo.convert_frame: [WARNING] WON'T CONVERT update model.py",
             "User defined signal 2", "", "-" * 60, "Sender: LSF System <lsfadmin@cluster>",
             "Subject: Job 19591965: <run_0> in cluster <dcc> Exited", "",
             "TERM_RUNLIMIT: job killed after reaching LSF run time limit.", "Exited with exit code 140."]
    assert diagnose_text("\n".join(quiet), rules).phase == "training"
    slurm = ["Loading model weights", "slurmstepd: error: *** JOB 5 ON gpu03 CANCELLED AT 2024-03-01T10:00:00 "
             "DUE TO TIME LIMIT ***"]
    assert diagnose_text("\n".join(slurm), rules).phase == "training"
    # a cancellation without the time limit (scancel at start-up) stays start-up
    cancelled = ["Loading model weights", "slurmstepd: error: *** JOB 5 ON gpu03 CANCELLED AT 2024-03-01T10:00:00 ***"]
    assert diagnose_text("\n".join(cancelled), rules).phase == "startup"


def test_a_wandb_run_history_after_the_failure_shows_steps_were_done(rules: Classifier) -> None:
    # the script logs to wandb only: no step in the log, but the history at exit has 30 points
    head = ["wandb: Tracking run with wandb version 0.12.11", "wandb: Syncing run feasible-morning-10",
            "Traceback (most recent call last):", '  File "/srv/train_encoder.py", line 197, in <module>',
            "    scaler.step(optimizer)", '  File "/venv/torch/cuda/amp/grad_scaler.py", line 338, in step',
            "    retval = self._maybe_opt_step(optimizer, optimizer_state)", "KeyboardInterrupt", "",
            "wandb: Waiting for W&B process to finish... (failed 255).", "wandb: Run history:"]
    spark = "\u2584\u2585\u2587\u2584\u2584\u2588\u2586\u2581\u2584\u2587" * 3
    w = diagnose_text("\n".join([*head, f"wandb:      loss {spark}", "wandb: Run summary:", "wandb:      loss 0.00934"]),
                      rules)
    assert w.phase == "training"
    # one logged point says nothing about how far it got
    w = diagnose_text("\n".join([*head, "wandb:      loss \u2581", "wandb: Run summary:", "wandb:      loss 0.9"]), rules)
    assert w.phase == "first_step"


def test_fetching_items_while_iterating_a_data_set_is_the_first_step(rules: Classifier) -> None:
    head = ["Training summary: 423791 samples, 211895 batches/epoch, batch size 64", "Using device: cuda",
            "Exception in thread Thread-3 (_producer):", "Traceback (most recent call last):",
            '  File "/srv/data/prefetch.py", line 110, in _producer', "    sample = next(iterator)"]
    tail = ['  File "/srv/data/datasets.py", line 93, in __getitem__', "    messages = self._messages(item)",
            "AttributeError: GemmaTokenizerFast has no attribute r1c5"]
    it = ['  File "/srv/data/prefetch.py", line 79, in sharded_item_iterator', "    yield self.dataset[idx]"]
    assert diagnose_text("\n".join(head + it + tail), rules).phase == "first_step"
    # a data set indexed while setting up (a split looked up by name) is start-up
    setup = ["Loading dataset", "Traceback (most recent call last):", '  File "/srv/train.py", line 40, in main',
             '    eval_ds = raw["validation"]', '  File "/venv/datasets/dataset_dict.py", line 70, in __getitem__',
             "    return super().__getitem__(k)", "KeyError: 'validation'"]
    assert diagnose_text("\n".join(setup), rules).phase == "startup"


def test_a_ruler_after_the_completion_is_no_next_stage(rules: Classifier) -> None:
    steps = [f"ep=00  step={k}  loss=2.{k % 10}  lr=1e-4" for k in range(14000, 14800, 50)]
    table = ["Training complete in 47.1 min  (14786 steps, 1 epochs)", "=" * 40, "final loss   2.81", "=" * 40]
    assert diagnose_text("\n".join(steps + table + _NEW_PROGRAM), rules).phase == "shutdown"


def _prefixed(prefix: str, block: list[str]) -> list[str]:
    return [prefix + ln for ln in block]


def test_a_traceback_behind_a_pdsh_or_ray_prefix_is_read_by_its_frames(rules: Classifier) -> None:
    # DeepSpeed's multi-node runner (pdsh) puts "host: " before every line, Ray "(Actor pid=N, ip=...)":
    # the frames behind them say where it failed; a frame's code naming a loss is not a progress line,
    # and a resume argument in an outer frame's code is not a checkpoint being loaded
    steps = [f"gpu0{r}: {{'loss': 1.9{k}, 'learning_rate': 2e-05, 'epoch': 0.3{k}}}" for k in range(4) for r in (1, 2)]
    frames = ["Traceback (most recent call last):", '  File "/home/u/train.py", line 210, in <module>',
              "    trainer.train(resume_from_checkpoint=args.resume)",
              '  File "/venv/transformers/trainer.py", line 1860, in _inner_training_loop',
              "    tr_loss_step = self.training_step(model, inputs)",
              '  File "/venv/transformers/trainer.py", line 2725, in training_step',
              "    loss = self.compute_loss(model, inputs)",
              "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"]
    w = diagnose_text("\n".join(steps + _prefixed("gpu02: ", frames)), rules)
    assert w.phase == "training"
    first = ["gpu01: [INFO] [launch.py:145:main] WORLD INFO DICT: {'gpu01': [0, 1], 'gpu02': [0, 1]}",
             *_prefixed("gpu02: ", ["Traceback (most recent call last):", '  File "/home/u/train.py", line 180, in main',
                                    "    loss = engine(batch)", '  File "/home/u/model.py", line 95, in forward',
                                    "    h = self.attn(x)", "torch.cuda.OutOfMemoryError: CUDA out of memory."])]
    assert diagnose_text("\n".join(first), rules).phase == "first_step"
    ray = "\x1b[36m(TaskRunner pid=4242)\x1b[0m "
    ev = [*(f"{ray}step:{k} - actor/loss:0.1" for k in range(3, 9)),
          *_prefixed(ray, ["Traceback (most recent call last):", '  File "/app/ppo.py", line 900, in fit',
                           "    val_metrics = self._validate()", '  File "/app/ppo.py", line 610, in _validate',
                           "    loss = self.critic(batch)", "ValueError: too many values to unpack (expected 2)"])]
    assert diagnose_text("\n".join(ev), rules).phase == "evaluation"


def test_the_innermost_evaluation_or_training_frame_decides(rules: Classifier) -> None:
    steps = [f"epoch 2 step {k} loss 0.{k}" for k in range(300, 340, 10)]

    def tb(*funcs: str) -> list[str]:
        out = ["Traceback (most recent call last):"]
        for k, f in enumerate(funcs):
            out += [f'  File "/srv/run.py", line {10 + k}, in {f}', "    x = step(x)"]
        return [*out, "RuntimeError: CUDA error: an illegal memory access was encountered"]

    # an outer driver named for both (TF-style train_and_evaluate) failing inside its training epoch
    assert diagnose_text("\n".join(steps + tb("<module>", "train_and_evaluate", "train_one_epoch", "forward")),
                         rules).phase == "training"
    # an evaluation called from the training loop (the Hugging Face Trainer's) is an evaluation
    assert diagnose_text("\n".join(steps + tb("<module>", "train", "_inner_training_loop", "_maybe_log_save_evaluate",
                                              "evaluate", "prediction_step", "forward")), rules).phase == "evaluation"
    # checking arguments and inferring a shape are no evaluation
    assert diagnose_text("\n".join(steps + tb("<module>", "main", "train_step", "forward", "_validate_args",
                                              "_infer_size")), rules).phase == "training"


def test_a_failure_printed_onto_a_progress_bar_is_read_from_that_bar() -> None:
    # tqdm ends no line: a scheduler's cancellation or the kernel's "Killed" lands on the bar's own line
    train = "\r".join(f"Epoch 0:   0%|          | {k}/163672 [04:5{k % 10}<20:00:29,  2.26it/s, Loss: 0.07{k}]"
                      for k in range(600, 620))
    lines = ["Loading model", "Starting training",
             train + "slurmstepd: error: *** JOB 5215 ON gpu-3 CANCELLED AT 2019-10-21T18:48:28 ***"]
    assert phase_of(lines, 2, [lines[2]]) == "training"
    assert last_step(lines, 2) == "619"
    val = "\r".join(f"Validation DataLoader 0:  {k * 5}%|#     | {k}/20 [00:0{k}<00:05,  3.1it/s]" for k in range(9))
    lines = ["Epoch 3: 100%|##########| 500/500 [02:00<00:00, 4.1it/s, loss=0.31]", val + "Killed"]
    assert phase_of(lines, 1, [lines[1]]) == "evaluation"
    # a new epoch's bar at 0 after finished epochs: the steps above say training, not the first step
    lines = ["Epoch 3: 100%|##########| 500/500 [02:00<00:00, 4.1it/s, loss=0.31]",
             "Epoch 4:   0%|          | 0/500 [00:00<?, ?it/s]Killed"]
    assert phase_of(lines, 1, [lines[1]]) == "training"


def test_a_loss_printed_alone_each_step_shows_steps_were_done(rules: Classifier) -> None:
    # print(loss.item()) / print(loss) once a step, then the launcher is told to stop
    stop = ["WARNING:torch.distributed.elastic.agent.server.api:Received 1 death signal, shutting down workers",
            "WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 4242 closing signal SIGHUP",
            "torch.distributed.elastic.multiprocessing.api.SignalException: Process 4240 got signal: 1"]
    floats = [f"0.0{6 + k % 3}{k}1{k}" for k in range(30)]
    assert diagnose_text("\n".join(["Loaded 9000 spectra", *floats, *stop]), rules).phase == "training"
    tensors = [f"tensor(0.{k}31, device='cuda:0', grad_fn=<NllLossBackward0>)" for k in range(8)]
    assert diagnose_text("\n".join(["Loaded 9000 spectra", *tensors, *stop]), rules).phase == "training"
    # a few numbers printed while setting up are no steps
    setup = ["Loaded 9000 spectra", "mean", "0.485", "std", "0.229", "Building model"]
    assert diagnose_text("\n".join([*setup, *stop]), rules).phase == "startup"


@pytest.mark.parametrize("logged", [
    "2023-06-02 11:40:12,301 - mmdet - INFO - Epoch [1][50/7330]\tlr: 1.998e-03, eta: 20:11:03, time: 0.512, loss: 1.2041",
    "06/02 11:40:12 - mmengine - INFO - Epoch(train)  [1][  50/7330]  lr: 2.0e-03  eta: 20:11:03  time: 0.51  loss: 1.20",
    "Epoch: [0]  [  50/5005]  eta: 1:02:03  lr: 0.000001  loss: 6.9001 (6.9050)  time: 0.7412  data: 0.0003  max mem: 9120",
])
def test_an_epoch_loggers_iteration_counter_says_how_far_the_epoch_got(logged: str) -> None:
    # mmcv/mmengine and timm's MetricLogger print the epoch, then the iteration within it: 50 steps
    # were done in the first epoch, so a kill after it is in training, not in the first step
    lines = ["loading annotations into memory...", "index created!", logged, "Killed"]
    assert phase_of(lines, 3, lines[1:], 0, last_step(lines, 3)) == "training"
    first = logged.replace("50/", " 1/").replace("[   1/", "[  1/")
    lines = ["loading annotations into memory...", "index created!", first, "Killed"]
    assert phase_of(lines, 3, lines[1:], 0, last_step(lines, 3)) == "first_step"


def test_a_traceback_through_torch_serialization_is_a_checkpoint_save_or_load() -> None:
    # the user's `torch.save(...)` is an indented code line; torch's own frames say what it did
    steps = ["Epoch 12/300, Iter 0/90, train loss = 1.012", "Epoch 12/300, Iter 89/90, train loss = 0.591"]
    save = ["Traceback (most recent call last):", '  File "train.py", line 301, in <module>', "    main()",
            '  File "train.py", line 188, in main', '    torch.save(state, f"{out}/ckpt_{epoch:04d}.pt")',
            '  File "/opt/conda/lib/python3.10/site-packages/torch/serialization.py", line 628, in save',
            "    _save(obj, opened_zipfile, pickle_module, pickle_protocol, _disable_byteorder_record)",
            '  File "/opt/conda/lib/python3.10/site-packages/torch/serialization.py", line 862, in _save',
            "    zip_file.write_record(name, storage, num_bytes)",
            "OSError: [Errno 5] Input/output error"]
    lines = steps + save
    assert phase_of(lines, len(lines) - 1, lines[-3:]) == "checkpoint_save"
    load = ["Traceback (most recent call last):", '  File "eval.py", line 40, in <module>',
            "    state = torch.load(args.ckpt, map_location='cpu')",
            '  File "/opt/conda/lib/python3.10/site-packages/torch/serialization.py", line 1025, in load',
            "    raise pickle.UnpicklingError(_get_wo_message(str(e))) from None",
            "_pickle.UnpicklingError: Weights only load failed."]
    assert phase_of(load, len(load) - 1, load[-2:]) == "checkpoint_load"
    # safetensors' own writer
    st = ["Traceback (most recent call last):", '  File "export.py", line 12, in <module>', "    save_file(sd, out)",
          '  File "/usr/lib/python3/site-packages/safetensors/torch.py", line 286, in save_file',
          "    serialize_file(_flatten(tensors), filename, metadata=metadata)",
          "RuntimeError: Some tensors share memory, this will lead to duplicate memory on disk and potential "
          "differences when loading them again"]
    assert phase_of(st, len(st) - 1, st[-2:]) == "checkpoint_save"


def test_an_unfinished_mmcv_task_bar_is_an_evaluation() -> None:
    # OpenMMLab's single_gpu_test prints mmcv's ProgressBar while it runs the model over the test set
    train = "2023-06-02 18:02:11,004 - mmseg - INFO - Iter [16000/16000]\tlr: 1.0e-04, eta: 0:00:00, time: 0.41, loss: 0.21"
    bar = "\r".join(f"[{'>' * k}{' ' * (30 - k)}] {k * 10}/500, 9.{k} task/s, elapsed: {k}s, ETA:    {50 - k}s"
                    for k in range(1, 16))
    lines = [train, bar, "Killed"]
    assert phase_of(lines, 2, lines[1:], 0, last_step(lines, 2)) == "evaluation"
    done = "[" + ">" * 30 + "] 500/500, 9.8 task/s, elapsed: 51s, ETA:     0s"
    lines = [train, done, "Killed"]  # a finished test pass says nothing about what came after it
    assert phase_of(lines, 2, lines[1:], 0, last_step(lines, 2)) != "evaluation"


def test_lightning_sanity_check_bar_is_an_evaluation() -> None:
    # Lightning runs num_sanity_val_steps of validation before the first training step
    bar = "\r".join(f"Sanity Checking DataLoader 0:  {k * 50}%|#####     | {k}/2 [00:0{k}<00:01,  1.2it/s]"
                    for k in range(2))
    lines = ["LOCAL_RANK: 0 - CUDA_VISIBLE_DEVICES: [0]", "  | Name  | Type | Params", bar, "Killed"]
    assert phase_of(lines, 3, lines[2:], 0, last_step(lines, 3)) == "evaluation"


def test_a_traceback_through_distributed_checkpoint_is_a_checkpoint_save_or_load() -> None:
    # torch.distributed.checkpoint (FSDP/torchtitan) writes and reads sharded checkpoints
    save = ["[rank3]: Traceback (most recent call last):", '[rank3]:   File "/w/train.py", line 510, in <module>',
            "[rank3]:     trainer.train()", '[rank3]:   File "/w/train.py", line 455, in train',
            "[rank3]:     dcp.save(state, checkpoint_id=path)",
            '[rank3]:   File "/usr/lib/python3/site-packages/torch/distributed/checkpoint/state_dict_saver.py", '
            "line 139, in save",
            "[rank3]:     return _save_state_dict(",
            '[rank3]:   File "/usr/lib/python3/site-packages/torch/distributed/checkpoint/state_dict_saver.py", '
            "line 298, in _save_state_dict",
            "[rank3]:     return distW.all_reduce(\"write\", write_data, finish_checkpoint)",
            "[rank3]: torch.distributed.checkpoint.api.CheckpointException: CheckpointException ranks:dict_keys([3])"]
    assert phase_of(save, len(save) - 1, save[-2:]) == "checkpoint_save"
    load = [ln.replace("saver", "loader").replace("_save_state_dict", "_load_state_dict").replace("dcp.save", "dcp.load")
            .replace(", in save", ", in load") for ln in save]
    assert phase_of(load, len(load) - 1, load[-2:]) == "checkpoint_load"


def test_a_bash_job_report_glued_to_a_nested_bar_is_read_from_the_bar() -> None:
    # tqdm's inner bar (position=1) ends each refresh with a cursor-up escape; bash then reports the
    # killed job with its whole command line, which names evaluation flags but is no evaluation
    cmd = ("CUDA_VISIBLE_DEVICES=${DEVICE} python3 run.py --do_train --do_eval --per_gpu_eval_batch_size 32 "
           "--evaluate_metrics bleu --validate_steps 700 " + "--opt x " * 40)
    bar = "\r".join(f"Iteration:  18%|#8        | {k}/1529 [07:3{k % 10}<26:08,  1.25s/it]\x1b[A" for k in range(270, 284))
    lines = ["Epoch:   0%|          | 0/3 [00:00<?, ?it/s]", "[INFO] Step: 280 | Loss: 3.87",
             bar + f"./train.sh: line 33: 136834 Killed                  {cmd}"]
    assert phase_of(lines, 2, lines[1:]) == "training"
    assert last_step(lines, 2) == "283"


def test_an_accuracy_function_by_its_short_name_is_an_evaluation() -> None:
    tb = ["Traceback (most recent call last):", '  File "adapt.py", line 601, in <module>', "    train_target(args)",
          '  File "adapt.py", line 378, in train_target', "    acc, _ = cal_acc(loaders['test'], net, True)",
          '  File "adapt.py", line 162, in cal_acc', "    pred[i] = label_map[int(pred[i])]", "KeyError: 14"]
    lines = ["Task: AC, Iter:150/1500; Accuracy = 74.62%", *tb]
    assert phase_of(lines, len(lines) - 1, lines[-2:]) == "evaluation"
    acc = [ln.replace("cal_acc", "acc_grad") for ln in tb]  # accumulating gradients is a training step
    lines = ["Task: AC, Iter:150/1500; loss = 1.2", *acc]
    assert phase_of(lines, len(lines) - 1, lines[-2:]) != "evaluation"


def test_a_metric_logger_line_counts_its_iteration_however_many_meters_follow(rules: Classifier) -> None:
    # torchvision's reference MetricLogger (DETR, DeiT, MAE, ...): "{header}  [{i}/{n}]  eta: ..." with
    # meters that run past the end a progress test reads
    meters = "  ".join(f"loss_bbox_{k}: 0.8{k}12 (0.8{k}43)" for k in range(40))
    steps = [f"Epoch: [1]  [{i:4d}/7393]  eta: 0:21:{i % 60:02d}  lr: 0.000100  class_error: 82.12  {meters}  "
             f"time: 0.3597  data: 0.0150  max mem: 5818" for i in range(3800, 3900, 10)]
    kill = ["WARNING:torch.distributed.elastic.agent.server.api:Received 15 death signal, shutting down workers",
            "WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 2596718 closing signal SIGTERM",
            "torch.distributed.elastic.multiprocessing.api.SignalException: Process 2596692 got signal: 15"]
    w = diagnose_text("\n".join(steps + kill), rules)
    assert (w.phase, w.step) == ("training", "3890")
    # an evaluation's MetricLogger ("Test:") is no training step: it is where the run stopped
    tests = [f"Test:  [{i:3d}/313]  eta: 0:00:{i % 60:02d}  {meters}  time: 0.1  data: 0.01  max mem: 5818"
             for i in range(10, 60, 10)]
    assert diagnose_text("\n".join(steps + tests + kill), rules).phase == "evaluation"


def test_a_tqdm_bar_without_a_total_counts_its_iterations(rules: Classifier) -> None:
    # tqdm over an iterable with no len: "{desc}: {n}{unit} [{elapsed}, {rate}]", any unit
    from gpulens.diagnosis.logread.steplines import step_in as _step_in
    from gpulens.diagnosis.logread.steplines import step_progress as _step_progress

    assert _step_in("Training: 1187it [05:12,  3.80it/s, loss=0.31]") == "1187"
    assert _step_in("Total iterations: 8973: 316 it [16:02,  3.05s/ it]") == "316"
    assert not _step_progress("Map: 12000 examples [00:03, 3500.12 examples/s]")  # a data set's set-up
    setup = ["Map (num_proc=96):  36%|###6      | 4088/11490 [00:00<00:01, 5139.66 examples/s]"]
    bar = "\r".join(f"Total iterations: 8973: {n} it [{n // 20:02d}:{n % 60:02d},  2.91s/ it]" for n in range(317))
    oom = ["Traceback (most recent call last):", '  File "/srv/finetune.py", line 190, in train',
           "    outputs = model(**batch)",
           "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 6.13 GiB. GPU 0 has a total capacity of 79.19 GiB"]
    w = diagnose_text("\n".join([*setup, bar, *oom]), rules)  # "Map (...):" is no mAP result either
    assert (w.phase, w.step) == ("training", "316")
    first = "\r".join(["total iter: 479: 0 iter [00:00, ? iter/s]"] * 2)
    assert diagnose_text("\n".join([*setup, first, *oom]), rules).phase == "first_step"


def test_the_batches_of_an_evaluation_script_are_evaluation(rules: Classifier) -> None:
    # the entry script's name says what its loop does: an evaluation script failing in its first batch
    # fails in evaluation; a training script (its first stage word) in its first step
    def run(script: str) -> str:
        log = ["Map (num_proc=8): 100%|##########| 11490/11490 [00:01<00:00, 8692.93 examples/s]",
               "total iter: 479: 0 iter [00:00, ? iter/s]", "Traceback (most recent call last):",
               f'  File "/home/u/summ/{script}", line 189, in <module>', "    generated_ids = model.generate(",
               "AttributeError: 'DataParallel' object has no attribute 'generate'"]
        return diagnose_text("\n".join(log), rules).phase

    assert run("evaluate_bart_large_finetuned.py") == "evaluation"
    assert run("test_full_pipeline.py") == "evaluation"
    assert run("train_and_eval.py") == "first_step"
    assert run("main.py") == "first_step"


def test_mmengine_val_and_test_loops_are_evaluation(rules: Classifier) -> None:
    # mmengine's LogProcessor: "Epoch(train)  [5][ 50/625]", "Epoch(val) [5][ 50/625]", "Iter(test) [ 50/2000]",
    # after its logger's prefix
    pre = "2024/05/01 10:00:{:02d} - mmengine - INFO - "
    train = [pre.format(k) + f"Epoch(train)  [5][{k * 10:3d}/625]  lr: 2.0000e-02  eta: 0:10:00  time: 0.3  "
             f"data_time: 0.01  memory: 5818  loss: 0.{k}1" for k in range(1, 6)]
    val = [pre.format(10 + k) + f"Epoch(val) [5][{k * 10:3d}/625]    eta: 0:01:00  time: 0.1  data_time: 0.01  "
           "memory: 5818" for k in range(1, 4)]
    oom = ["Traceback (most recent call last):", '  File "tools/train.py", line 121, in <module>', "    main()",
           "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"]
    assert diagnose_text("\n".join(train + val + oom), rules).phase == "evaluation"
    assert diagnose_text("\n".join(train + oom), rules).phase == "training"
    # a finished validation ("[625/625]") and training after it: training
    done = [pre.format(20) + "Epoch(val) [5][625/625]    coco/bbox_mAP: 0.3120  data_time: 0.01  time: 0.1"]
    assert diagnose_text("\n".join(train + done + train + oom), rules).phase == "training"
    test = [pre.format(30) + "Iter(test) [ 50/2000]    eta: 0:03:00  time: 0.1  data_time: 0.01  memory: 811"]
    assert diagnose_text("\n".join(test + oom), rules).phase == "evaluation"


def test_an_evaluation_bar_behind_a_launchers_prefix_is_evaluation(rules: Classifier) -> None:
    steps = [f"[default0]:step {k} loss 0.{k}" for k in range(1, 6)]
    bar = ["[default0]:Evaluating:  45%|####5     | 9/20 [00:01<00:01,  5.02it/s]"]
    err = ["[default0]:Traceback (most recent call last):", '[default0]:  File "/srv/run.py", line 40, in <module>',
           "[default0]:    main()", "[default0]:KeyError: 'labels'"]
    assert diagnose_text("\n".join(steps + bar + err), rules).phase == "evaluation"
    ray = ["(RayTrainWorker pid=2211, ip=10.0.0.7) " + ln[len("[default0]:"):] for ln in steps + bar + err]
    assert diagnose_text("\n".join(ray), rules).phase == "evaluation"


def test_a_failure_after_the_trainers_loop_banner_with_no_step_is_in_the_first_step(rules: Classifier) -> None:
    setup = ["Map: 100%|##########| 52002/52002 [00:09<00:00, 5311.40 examples/s]"]
    banner = ["***** Running training *****", "  Num examples = 52,002", "  Num Epochs = 3",
              "  Total optimization steps = 4,875", "  Number of trainable parameters = 4,194,304"]
    kill = ["./run.sh: line 12: 81234 Killed                  python train.py --bf16"]
    assert diagnose_text("\n".join(setup + banner + kill), rules).phase == "first_step"
    assert diagnose_text("\n".join(setup + kill), rules).phase == "startup"


def test_a_rich_tracebacks_frames_are_read_like_pythons(rules: Classifier) -> None:
    top = "╭───────────────────── Traceback (most recent call last) ─────────────────────╮"
    bottom = "╰──────────────────────────────────────────────────────────────────────────────╯"

    def rich(*frames: str) -> list[str]:
        body = []
        for f in frames:
            body += [f"│ {f:<76} │", "│                                                                              │"]
        return [top, *body, bottom, "RuntimeError: expected scalar type Half but found Float"]

    started = ["Sanity check passed", "Building optimizer..."]
    w = diagnose_text("\n".join(started + rich("/srv/app/train.py:120 in main", "/srv/app/engine.py:88 in train_step",
                                                "/srv/app/model.py:41 in forward")), rules)
    assert w.phase == "first_step"  # a training step's frames, no step printed yet
    w = diagnose_text("\n".join(started + rich("/srv/app/train.py:3 in <module>")), rules)
    assert w.phase == "startup"


def _tb(*frames: tuple[str, str, str], error: str) -> list[str]:
    out = ["Traceback (most recent call last):"]
    for path, func, code in frames:
        out += [f'  File "{path}", line 10, in {func}', f"    {code}"]
    return out + [error]


@pytest.mark.parametrize("note, phase", [
    ("[INFO|trainer.py:2934] 2025-10-22 11:18:58,450 >> Loading model from /srv/saves/sft/run3.", "checkpoint_load"),
    ("Restoring states from the checkpoint path at /srv/ckpt/epoch=3.ckpt", "checkpoint_load"),
    (" loading checkpoint from /srv/ckpt at iteration 4000", "checkpoint_load"),
    ("[INFO|trainer.py:3901] 2025-03-01 10:00:00,000 >> Saving model checkpoint to out/checkpoint-500", "checkpoint_save"),
    ("2024-05-01 12:00:00.123 - Saving unsharded checkpoint...", "checkpoint_save"),
])
def test_a_checkpoint_announced_just_before_the_traceback_is_what_failed(rules: Classifier, note: str, phase: str) -> None:
    # the traceback's own frames name no checkpoint function (a JSON state file, an os call)
    lines = ["[INFO|trainer.py:749] >> Using auto half precision backend", note,
             "/env/lib/python3.12/site-packages/torch/utils/checkpoint.py:90: UserWarning: None of the inputs require grad",
             *_tb(("/srv/run.py", "<module>", "run_exp()"), ("/srv/run.py", "run_exp", "trainer.train(resume_from_checkpoint=ckpt)"),
                  ("/env/transformers/trainer.py", "train", "state = TrainerState.load_from_json(path)"),
                  ("/env/transformers/trainer_callback.py", "load_from_json", "with open(json_path) as f:"),
                  error="FileNotFoundError: [Errno 2] No such file or directory: '/srv/saves/sft/run3/trainer_state.json'")]
    assert diagnose_text("\n".join(lines), rules).phase == phase


def test_a_checkpoint_announcement_followed_by_steps_or_a_shard_bar_is_not_the_phase(rules: Classifier) -> None:
    tb = _tb(("/srv/train.py", "<module>", "main()"), ("/srv/train.py", "main", "loss = model(batch)"),
             ("/srv/model.py", "forward", "h = self.mlp(x)"),
             error="torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.")
    resumed = ["Loading model from /srv/ckpt/step_1000.", *[f"step {k} loss 1.{k:02d}" for k in range(1001, 1030)], *tb]
    assert diagnose_text("\n".join(resumed), rules).phase == "training"
    shards = ["Loading checkpoint shards: 100%|##########| 4/4 [00:05<00:00,  1.33s/it]", *tb]
    assert diagnose_text("\n".join(shards), rules).phase != "checkpoint_load"
    # a script's own announcement of the pretrained model it builds (no Trainer's closing period)
    pretrained = ["Loading model from meta-llama/Llama-2-7b-hf", *tb]
    assert diagnose_text("\n".join(pretrained), rules).phase != "checkpoint_load"


def test_a_traceback_through_the_trainers_constructor_is_startup(rules: Classifier) -> None:
    # DeepSpeed's engine broadcasting the model while TrainLoop(...) is being built: no step yet
    lines = ["[2025-02-16 08:39:10,001] [INFO] [launch.py:256:main] process 1978690 spawned with command: [...]",
             "Downloading: \"https://download.pytorch.org/models/vgg16-397923af.pth\"",
             *_tb(("/srv/upsample_train.py", "<module>", "main()"), ("/srv/upsample_train.py", "main", "TrainLoop("),
                  ("/srv/train_util.py", "__init__", "self.engine, self.opt, _, _ = deepspeed.initialize(args=args,"),
                  ("/env/deepspeed/__init__.py", "initialize", "engine = DeepSpeedEngine(args=args,"),
                  ("/env/deepspeed/runtime/engine.py", "__init__", "self._configure_distributed_model(model)"),
                  ("/env/deepspeed/runtime/engine.py", "_broadcast_model", "dist.broadcast(p.data, src)"),
                  error="RuntimeError: CUDA error: out of memory")]
    assert diagnose_text("\n".join(lines), rules).phase == "startup"


def test_a_constructor_called_inside_the_loop_is_not_startup(rules: Classifier) -> None:
    # a distribution built in the policy's forward, and a worker thread's traceback: no set-up
    steps = [f"Epoch: {k}, global_step={k * 102400}" for k in range(430, 440)]
    policy = _tb(("/srv/ppo.py", "<module>", "action, logp, _, value = agent.get_action_and_value(obs)"),
                 ("/srv/ppo.py", "get_action_and_value", "probs = Normal(mean, std)"),
                 ("/env/torch/distributions/normal.py", "__init__", "super().__init__(batch_shape, validate_args)"),
                 error="ValueError: Expected parameter loc (Tensor of shape (3200, 7)) of distribution Normal to "
                       "satisfy the constraint Real(), but found invalid values:")
    assert diagnose_text("\n".join(steps + policy), rules).phase == "training"
    worker = _tb(("/usr/lib/python3.8/multiprocessing/queues.py", "_feed", "obj = _ForkingPickler.dumps(obj)"),
                 ("/usr/lib/python3.8/multiprocessing/connection.py", "__init__", "address = arbitrary_address(family)"),
                 error="OSError: [Errno 28] No space left on device: '/tmp/pymp-2ntknau9'")
    assert diagnose_text("\n".join(steps + worker), rules).phase == "training"


def test_a_warning_only_a_training_step_prints_means_the_first_step_was_reached(rules: Classifier) -> None:
    tb = _tb(("/srv/train_psnr.py", "<module>", "main()"), ("/srv/train_psnr.py", "main", "print(current_epoch)"),
             error="NameError: name 'current_epoch' is not defined")
    setup = ["model built: 11.9M parameters", " |  0.000 | -0.068 |  0.070 | torch.Size([180, 180, 3, 3]) || conv.weight"]
    assert diagnose_text("\n".join(setup + tb), rules).phase == "startup"
    warned = setup + ["/env/torch/nn/modules/loss.py:128: UserWarning: Using a target size (torch.Size([200, 1, 96, 96]))"
                      " that is different to the input size (torch.Size([200, 3, 96, 96])).",
                      "  return F.l1_loss(input, target, reduction=self.reduction)"]
    assert diagnose_text("\n".join(warned + tb), rules).phase == "first_step"
    ddp = setup + ["[W reducer.cpp:1300] Warning: find_unused_parameters=True was specified in DDP constructor, but did "
                   "not find any unused parameters in the forward pass. (function operator())"]
    assert diagnose_text("\n".join(ddp + tb), rules).phase == "first_step"


def test_only_a_line_that_starts_an_evaluation_puts_the_failure_in_it(rules: Classifier) -> None:
    steps = [f"2024-01-01 10:{k:02d}:00 | epoch 3 | step {k * 100} | loss 0.{k:02d}" for k in range(10, 30)]
    tb = _tb(("/srv/main.py", "<module>", "main()"), ("/srv/main.py", "main", "trainer.run()"),
             ("/srv/trainer.py", "run", "self._log(result)"), error="AttributeError: 'Trainer' object has no attribute '_log'")
    started = steps + ['2024-01-01 10:31:00 | INFO | fairseq_cli.train | begin validation on "valid" subset']
    assert diagnose_text("\n".join(started + tb), rules).phase == "evaluation"
    reported = steps + ["2024-01-01 10:31:00 - INFO - Validation performance didn't improve for 3 epochs."]
    assert diagnose_text("\n".join(reported + tb), rules).phase != "evaluation"


def test_a_metric_tables_step_column_counts_the_steps(rules: Classifier) -> None:
    # DomainBed's print_row: a header of column names padded to 12, then one row per checkpoint
    head = "env0_in_acc   env0_out_acc  epoch         loss          step          step_time    "
    rows = [f"0.{90 + k % 9:02d}00000000  0.7600000000  {k * 0.025:.10f}  1.{k:02d}00000000  {k * 1000:<12}  1.0700000000 "
            for k in range(0, 40)]
    lines = ["device: cuda", "  0%|          | 0/1 [00:00<?, ?it/s]", head, *rows, "Killed"]
    w = diagnose_text("\n".join(lines), rules)
    assert (w.phase, w.step) == ("training", "39000")
    assert last_step(lines, 4) == "0"  # the first row (step 0) only
    # a row whose header has no step column, or another number of columns, says nothing
    other = ["name   value   count", "1.0 2.0 3.0 4.0", "Killed"]
    assert last_step(other, 2) is None


def test_a_failure_in_the_first_cuda_call_is_startup_whatever_an_earlier_launch_printed(rules: Classifier) -> None:
    earlier = [f"iteration {k} loss 0.{k:02d}" for k in range(10, 40)]
    tb = _tb(("main_pipeline.py", "<module>", "torch.cuda.set_device(cuda_id)"),
             ("/env/torch/cuda/__init__.py", "set_device", "torch._C._cuda_setDevice(device)"),
             ("/env/torch/cuda/__init__.py", "_lazy_init", "torch._C._cuda_init()"),
             error="RuntimeError: The NVIDIA driver on your system is too old (found version 11060).")
    assert diagnose_text("\n".join(earlier + ["=== seed 65 ===", "load model_architect: CLS"] + tb), rules).phase == "startup"


def test_a_traceback_inside_an_epoch_loop_is_past_startup(rules: Classifier) -> None:
    # a TF1 session stopped by hand inside train_one_epoch, which prints no step counter
    lines = ["  fc2/bn/cond_1/Switch_2 (Switch) /device:GPU:0", "",
             *_tb(("train.py", "<module>", "train()"), ("train.py", "train", "train_one_epoch(sess, ops, writer)"),
                  ("train.py", "train_one_epoch", "summary, step, _, loss_val = sess.run([...], feed_dict=feed)"),
                  ("/env/tensorflow_core/python/client/session.py", "run", "run_metadata_ptr)"),
                  error="KeyboardInterrupt")]
    assert diagnose_text("\n".join(lines), rules).phase == "first_step"


def test_set_up_frames_after_steps_contradict_each_other_and_get_no_phase(rules: Classifier) -> None:
    # an evaluation program's steps, then a trainer built at module level fails: the steps may be an
    # earlier program's (then startup) or this one's (then a later stage): no answer
    steps = [f"loss=0.0{k} (0.0{k}): : {k * 20}% {k}/5 [00:{k:02d}<00:16,  4.00s/it]" for k in range(1, 6)]
    tb = _tb(("/srv/upsample_train.py", "<module>", "main()"), ("/srv/upsample_train.py", "main", "TrainLoop("),
             ("/srv/train_util.py", "__init__", "self.engine = deepspeed.initialize(args=args)"),
             error="RuntimeError: CUDA error: out of memory")
    w = diagnose_text("\n".join([*steps, "Average PSNR: 19.145", *tb]), rules)
    assert w.phase == "unknown" and "in a phase the log does not settle" in w.story()


@pytest.mark.parametrize("start", [
    "[06/01 10:00:05 d2.engine.train_loop]: Starting training from iteration 0",
    "Starting training for 100 epochs...",
    "2024-06-01 10:00:05,123 - mmdet - INFO - workflow: [('train', 1)], max: 12 epochs",
])
def test_a_trainers_loop_start_announcement_puts_a_failure_after_it_in_the_first_step(rules: Classifier, start: str) -> None:
    tb = _tb(("tools/train.py", "<module>", "main()"), ("tools/train.py", "main", "trainer.train()"),
             ("/env/lib/custom_ops.py", "apply", "return ext.sigmoid_focal_loss(input, target)"),
             error="RuntimeError: CUDA error: an illegal memory access was encountered")
    before = ["Model built: 36.1M parameters", "Loading dataset: 118287 images"]
    assert diagnose_text("\n".join(before + tb), rules).phase == "startup"
    assert diagnose_text("\n".join([*before, start, *tb]), rules).phase == "first_step"


def test_an_evaluation_program_after_a_finished_training_fails_in_evaluation(rules: Classifier) -> None:
    done = [f"step {k:05d}/00813 ({k / 8.13:.2f}%) | loss: 1.{k % 10}" for k in range(800, 814)] + ["Training done."]
    tb = _tb(("/srv/scripts/chat_eval.py", "<module>", "results = run_chat_eval(task, model)"),
             ("/srv/scripts/chat_eval.py", "run_chat_eval", "answer = generate(batch)"),
             error="bdb.BdbQuit")
    assert diagnose_text("\n".join(done + tb), rules).phase == "evaluation"
    frames = (("/srv/scripts/mid_train.py", "<module>", "wandb_run.finish()"),
              ("/env/wandb/sdk/wandb_run.py", "finish", "self._atexit_cleanup()"))
    teardown = _tb(*frames, error="AttributeError: 'NoneType' object has no attribute 'close'")
    assert diagnose_text("\n".join(done + teardown), rules).phase == "shutdown"
    # a lost peer while finishing after "Training done." is the teardown's: a normal end
    # (completion.finished_before), so no phase
    lost = _tb(*frames, error="BrokenPipeError: [Errno 32] Broken pipe")
    assert diagnose_text("\n".join(done + lost), rules).phase == "none"


def test_an_evaluation_word_inside_another_word_names_no_evaluation(rules: Classifier) -> None:
    steps = [f"step {k} loss 0.{k:02d}" for k in range(10, 30)]
    sampler = _tb(("/srv/rl.py", "<module>", "main()"), ("/srv/rl.py", "main", "rollout = policy.act(obs)"),
                  ("/env/vllm/sample/ops/topk_topp_sampler.py", "flashinfer_sample", "return sample_from_logits(logits)"),
                  error="FileNotFoundError: [Errno 2] No such file or directory: '/usr/local/cuda-12.6/bin/nvcc'")
    assert diagnose_text("\n".join(steps + sampler), rules).phase != "evaluation"
    inference = _tb(("/srv/rl.py", "<module>", "main()"), ("/srv/rl.py", "run_inference", "out = model(x)"),
                    error="RuntimeError: CUDA error: device-side assert triggered")
    assert diagnose_text("\n".join(steps + inference), rules).phase == "evaluation"


@pytest.mark.parametrize("head, phase, step", [
    ("INFO :      [ROUND 1]", "first_step", "1"),
    ("INFO :      [ROUND 7]", "training", "7"),
    ("[Round 2/100] training...  client 1/10...  client 2/10...", "training", "2"),
])
def test_a_federated_round_counter_is_a_step(rules: Classifier, head: str, phase: str, step: str) -> None:
    lines = ["INFO :      Starting Flower simulation, config: num_rounds=100", "", head,
             *_tb(("server.py", "<module>", "server.train()"), ("server.py", "train", "self.aggregate(updates)"),
                  error="KeyboardInterrupt")]
    w = diagnose_text("\n".join(lines), rules)
    assert (w.phase, w.step) == (phase, step)
