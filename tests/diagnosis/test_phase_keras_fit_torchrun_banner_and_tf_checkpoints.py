"""Reader round 17, phase (P1-P11 of sample_logs/whole/README.md, "Phase: rules"), on excerpts written by hand in the
formats the libraries and launchers print."""

from __future__ import annotations

from gpulens.diagnosis.classifier import Classifier
from gpulens.diagnosis.logread import diagnose_text
from gpulens.diagnosis.logread.phase import phase_of
from gpulens.diagnosis.logread.steplines import step_progress


def _frame(path: str, line: int, func: str, code: str) -> list[str]:
    return [f'  File "{path}", line {line}, in {func}', f"    {code}"]


def test_a_kill_after_steps_that_follow_a_validation_report_is_training() -> None:
    """P4 + P9: a script's own validation report at an epoch's end, then the next epoch's step lines (an iteration
    counter and a loss), then a bare ``Terminated``: the pass had ended, the loop stepped again."""
    lines = [f"Epoch: 7 Iter: {k} Acc: 0.5{k} Loss: 2.1{k}" for k in range(5)] + [
        "Epoch: 7 Average loss: 2.05",
        "Epoch 7 Val Acc: 0.49",
        *(f"Epoch: 8 Iter: {k} Acc: 0.6{k} Loss: 1.9{k}" for k in range(3)),
        "Terminated",
    ]
    at = len(lines) - 1
    assert phase_of(lines, at, lines[at - 5:at + 1], 0, "2") == "training"


def test_a_kill_right_after_a_validation_report_is_still_evaluation() -> None:
    """P4: nothing printed after the report but the kill: the pass is the last activity (unchanged)."""
    lines = [f"Epoch: 7 Iter: {k} Acc: 0.5{k} Loss: 2.1{k}" for k in range(5)] + [
        "Epoch: 7 Average loss: 2.05",
        "Epoch 7 Val Acc: 0.49",
        "Terminated",
    ]
    at = len(lines) - 1
    assert phase_of(lines, at, lines[at - 5:at + 1], 0, "4") == "evaluation"


def test_a_model_train_call_inside_a_validate_driver_is_the_first_step(rules: Classifier) -> None:
    """P1 + P2: the job's driver ``validate(model, args)`` runs each epoch by calling the model's ``train(data)``
    (a compiled Theano function below it); the innermost function that names an activity is ``train``, and the
    failure comes after the epoch table's header, before any epoch row: ``first_step``, not ``evaluation``."""
    text = "\n".join([
        "Compiling functions...",
        "Compiling done.",
        "training the model...",
        "dset  epoch      mcost      mtime       cerr       f1",
        "Traceback (most recent call last):",
        *_frame("src/run.py", 300, "<module>", "main()"),
        *_frame("src/run.py", 290, "main", "validator.validate(net, args)"),
        *_frame("src/run.py", 150, "validate", "mcost, pred = getattr(net, funcname)(dat)"),
        *_frame("/src/model.py", 210, "train", "cost = sum(self.train_fn(*b) for b in batches)"),
        *_frame("/src/model.py", 210, "<genexpr>", "cost = sum(self.train_fn(*b) for b in batches)"),
        *_frame("/opt/lib/python2.7/site-packages/theano/compile/function_module.py", 606, "__call__",
                "storage_map=self.fn.storage_map)"),
        "MemoryError: Error allocating 531025920 bytes of device memory (out of memory).",
        "Apply node that caused the error: GpuDot22(GpuReshape{2}.0, GpuReshape{2}.0)",
    ])
    assert diagnose_text(text, rules).phase == "first_step"


_BANNER = ["*****************************************",
           "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, to avoid your system "
           "being overloaded, please further tune the variable for optimal performance in your application as needed. ",
           "*****************************************"]
_EARLIER_LAUNCH = [
    "WARNING:torch.distributed.run:", *_BANNER,
    "Epoch: [12]  [ 390/1000]  eta: 0:05:00  lr: 0.000100  loss: 0.4100 (0.4200)  time: 0.5000  data: 0.0010",
    "Epoch: [12]  [ 400/1000]  eta: 0:04:55  lr: 0.000100  loss: 0.4000 (0.4200)  time: 0.5000  data: 0.0010",
    "Traceback (most recent call last):",
    *_frame("train.py", 409, "<module>", "main(args)"),
    *_frame("train.py", 300, "main", "train_one_epoch(model, criterion, optimizer, data_loader, device, epoch)"),
    *_frame("train.py", 57, "train_one_epoch", "scaler.scale(loss).backward()"),
    "KeyboardInterrupt",
    "WARNING:torch.distributed.elastic.agent.server.api:Received 2 death signal, shutting down workers",
]


def test_ctrl_c_right_after_torchruns_logged_banner_is_startup() -> None:
    """P9 + P11: a screen log of several torchrun launches; the last one logs its banner (``torch/distributed/run.py``
    ``log.warning``, header "WARNING:torch.distributed.run:") and the workers' distributed init, then Ctrl-C: the
    traceback and steps above the banner are the earlier launch's, this one never reached its loop."""
    lines = [*_EARLIER_LAUNCH,
             "WARNING:torch.distributed.run:", *_BANNER,
             *(f"| distributed init (rank {r}): env://" for r in range(4)),
             "^CWARNING:torch.distributed.elastic.agent.server.api:Received 2 death signal, shutting down workers",
             "WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 101 closing signal SIGINT"]
    at = len(lines) - 2
    assert phase_of(lines, at, lines[at - 5:at + 2], 0, None) == "startup"


def test_torch_distributed_launchs_printed_banner_after_the_steps_is_no_start() -> None:
    """The older ``torch.distributed.launch`` printed its banner with ``print`` (no logging header): a file receives
    it at the launcher's exit, after its workers' steps; the kill after it still takes the steps' phase (P9)."""
    lines = ["2023-04-06 14:11:03,467 - mmdet - INFO - Epoch [2][50/2439]\tlr: 1.000e-04, eta: 3 days, time: 18.1, loss: 0.52",
             "2023-04-06 14:26:12,864 - mmdet - INFO - Epoch [2][100/2439]\tlr: 1.000e-04, eta: 3 days, time: 18.1, loss: 0.51",
             *_BANNER,
             "Killing subprocess 15914",
             "Main process received SIGTERM, exiting"]
    at = len(lines) - 1
    assert phase_of(lines, at, lines[at - 5:at + 1], 0, "100") == "training"


def _keras_fit_oom() -> list[str]:
    lib = "/home/u/.local/lib/python3.8/site-packages/tensorflow/python"
    return ["Traceback (most recent call last):",
            *_frame("grid.py", 90, "<module>", "model.train_dev()"),
            *_frame("/src/models/model.py", 305, "train_dev", "self.model.fit(seq, epochs=self.epochs, verbose=0)"),
            *_frame(f"{lib}/keras/engine/training.py", 1100, "fit", "tmp_logs = self.train_function(iterator)"),
            *_frame(f"{lib}/eager/def_function.py", 828, "__call__", "result = self._call(*args, **kwds)"),
            *_frame(f"{lib}/eager/execute.py", 60, "quick_execute", "inputs, attrs, num_outputs)"),
            "tensorflow.python.framework.errors_impl.ResourceExhaustedError:  OOM when allocating tensor with "
            "shape[2048,60000] and type float on /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc"]


def _data_bar(total: int) -> str:
    return (f"Building sequences:   0%|          | 0/{total} [00:00<?, ?it/s]"
            f"Building sequences: 100%|##########| {total}/{total} [00:09<00:00, 400.00it/s]")


def test_keras_fit_oom_after_a_data_bar_and_no_keras_line_is_the_first_step() -> None:
    """P2 + P3: tf.keras' ``Model.fit`` calls ``self.train_function(iterator)`` once per step
    (``keras/engine/training.py``); with ``verbose=0`` it prints no epoch or step line. The only bar above is the job's
    data preparation, which counts no training step: the OOM in the first call is ``first_step``."""
    lines = ["loading data", _data_bar(3707), *_keras_fit_oom()]
    at = len(lines) - 1
    assert phase_of(lines, at, lines[at - 5:at + 1], 0, "3707") == "first_step"


def test_keras_fit_oom_after_keras_step_lines_is_training() -> None:
    """P2 (a): Keras' own progress (``Epoch 2/20``, ``Progbar`` lines "k/N [==>...] - ETA: ... - loss: ...") shows
    completed steps: ``training``."""
    lines = ["loading data", _data_bar(3707), "Epoch 1/20",
             "100/100 [==============================] - 12s 120ms/step - loss: 0.6931", "Epoch 2/20",
             " 12/100 [==>...........................] - ETA: 10s - loss: 0.6000", *_keras_fit_oom()]
    at = len(lines) - 1
    assert phase_of(lines, at, lines[at - 5:at + 1], 0, "12") == "training"


def _meter_line(batch: int) -> str:
    # ProgressMeter.display: prefix + "[{:Nd}/M]", then each AverageMeter's "name val (avg)", joined by tabs
    meters = "\t".join(f"train_loss_{name} 0.{batch:04d} (0.0456)" for name in ("objective", "camera", "T", "R", "FL",
                                                                               "depth", "conf", "grad", "flow", "mask"))
    return (f"Epoch: [0][{batch:>7}/1000000]\tTime  6.2167 ( 7.9205)\tData  0.0630 ( 0.7591)\tMem 17.0000 (16.8974)"
            f"\tElapsed 00d 00h 06m 12s 345ms since the start of this epoch\t{meters}")


def test_a_signal_after_long_progress_meter_lines_is_training() -> None:
    """P2 (b) + P9: ``ProgressMeter`` lines of PyTorch's ImageNet example ("Epoch: [e][ k/M]", meters after it) with a
    logging header and dozens of losses (the loss is past the line's head); at batch 39 torchrun's agent gets SIGINT:
    the loop had stepped, ``training``."""
    lines = ["INFO 2025-10-22 21:40:00,000 trainer.py: 80: Building dynamic dataloader with epoch: 0",
             *(_meter_line(k) for k in range(30, 40)),
             "W1022 21:50:54.847000 16074 site-packages/torch/distributed/elastic/agent/server/api.py:704] Received "
             "Signals.SIGINT death signal, shutting down workers",
             "W1022 21:50:54.852000 16074 site-packages/torch/distributed/elastic/multiprocessing/api.py:897] Sending "
             "process 16131 closing signal SIGINT"]
    assert len(lines[5]) > 400
    at = len(lines) - 2
    assert phase_of(lines, at, lines[at - 5:at + 2], 0, None) == "training"


def test_a_results_write_after_training_complete_and_wandbs_footer_is_shutdown(rules: Classifier) -> None:
    """P10: PyTorch's transfer-learning tutorial loop ends "Training complete in 5207m 6s" / "Best val Acc: ...";
    ``wandb.finish`` then prints its footer (a line a metric of the run history and summary, ``wandb/sdk/wandb_run.py``),
    and only then the traceback of the job writing its result file: the run's end is above the footer, ``shutdown``."""
    metrics = [f"train_batches/metric_{k}" for k in range(14)]
    text = "\n".join([
        *(f" - Batch Number {b} -> Loss: 1.2{b % 10} Accuracy: 0.4{b % 10}" for b in range(380, 415, 5)),
        "train Loss: 1.2613 Acc: 0.4753",
        "val Loss: 1.3216 Acc: 0.4169",
        "Training complete in 5207m 6s",
        "Best val Acc: 0.443178",
        "Model saved at /home/u/weights/run_12",
        "wandb: Waiting for W&B process to finish... (failed 1). Press Control-C to abort syncing.",
        "wandb: Run history:",
        *(f"wandb: {m:>30} \u2581\u2582\u2583\u2585\u2587\u2588" for m in metrics),
        "wandb: ",
        "wandb: Run summary:",
        *(f"wandb: {m:>30} 0.4{k}" for k, m in enumerate(metrics)),
        "wandb: ",
        "wandb: Synced 5 W&B file(s), 0 media file(s), 0 artifact file(s) and 0 other file(s)",
        "wandb: Find logs at: ./wandb/run-20230530_140419-yq9u5l15/logs",
        "Traceback (most recent call last):",
        *_frame("main.py", 181, "<module>", "run_experiment()"),
        *_frame("main.py", 166, "run_experiment", "with open(f_labels, 'w') as f:"),
        "FileNotFoundError: [Errno 2] No such file or directory: '/home/u/logs/test_results/ranks/ranks_train.json'",
    ])
    assert diagnose_text(text, rules).phase == "shutdown"


def _eval_run() -> list[str]:
    bar = "".join(f"Evaluating: {k * 100 // 834:3d}%|#####     | {k}/834 [26:22<00:01,  1.83s/it]\r" for k in (1, 417, 833))
    return ["[exp1] running: python run_bench.py --model=./models/m --dataset=aircraft-102",
            "Loading checkpoint shards: 100%|##########| 7/7 [00:40<00:00,  5.70s/it]",
            bar + "Evaluating: 100%|##########| 834/834 [26:23<00:00,  1.57s/it]",
            "{'generation_failures': 0.0, 'accuracy': 0.6408640864086409}",
            "#################################"]


def test_the_job_scripts_syntax_error_after_the_programs_results_is_shutdown(rules: Classifier) -> None:
    """P10: bash reports its own error in the job script ("run_evaluate.sh: line 436: syntax error near unexpected
    token", ``parse.y``) after the evaluation program finished its bar and printed its results: the script's commands
    after the program, ``shutdown`` (the script's name, ``run_evaluate``, names no activity going on)."""
    text = "\n".join([*_eval_run(), "/home/u/proj/scripts/run_evaluate.sh: line 436: syntax error near unexpected token `('"])
    assert diagnose_text(text, rules).phase == "shutdown"


def test_a_killed_report_of_the_program_after_its_bar_is_no_script_error() -> None:
    """bash's job-control report of the child's death ("run.sh: line 141: 450336 Killed   python ...") is the
    program's end, not the script's own error: it is not read as the script failing after the program."""
    lines = [*_eval_run()[:3], "run_eval.sh: line 141: 450336 Killed                  python run_bench.py --model=./m"]
    at = len(lines) - 1
    assert phase_of(lines, at, lines[at - 3:at + 1], 0, "834") != "shutdown"


def test_the_job_scripts_error_before_any_program_output_is_startup(rules: Classifier) -> None:
    """P3: bash's own error in the script before the program printed anything: nothing ran yet, ``startup``."""
    text = "\n".join(["Job started on node gpu01", "/var/spool/slurmd/job4242/slurm_script: line 12: conda: command not found"])
    assert diagnose_text(text, rules).phase == "startup"


def test_a_failure_in_the_scripts_argument_parsing_after_an_earlier_launchs_steps_is_startup() -> None:
    """P3 + P11: a log appended over launches; the earlier one stepped, the last one fails in its own ``parse_args()``
    (reading ``LOCAL_RANK``, which torchrun sets and a plain ``python`` does not): a program parses its arguments when
    it starts, so the steps above are the earlier launch's, ``startup`` (not ``unknown``)."""
    lines = ["epoch 1 step 10 loss 0.52", "epoch 1 step 20 loss 0.48", "epoch 1 step 30 loss 0.47",
             "Traceback (most recent call last):",
             *_frame("main.py", 121, "<module>", "main()"),
             *_frame("main.py", 111, "main", "train(cfg, args.local_rank)"),
             *_frame("/src/tasks/train.py", 90, "train_one_epoch", "loss = model(batch)"),
             "RuntimeError: CUDA error: an illegal memory access was encountered",
             "Traceback (most recent call last):",
             *_frame("main.py", 123, "<module>", "main()"),
             *_frame("main.py", 81, "main", "args = parse_args()"),
             *_frame("main.py", 75, "parse_args", 'args.local_rank = int(os.environ["LOCAL_RANK"])'),
             *_frame("/opt/lib/python3.8/os.py", 675, "__getitem__", "raise KeyError(key) from None"),
             "KeyError: 'LOCAL_RANK'"]
    at = len(lines) - 1
    assert phase_of(lines, at, lines[at - 5:at + 1], 0, "30") == "startup"


def _tf_saver_traceback(method: str, call: str) -> list[str]:
    lib = "/home/u/.local/lib/python2.7/site-packages/tensorflow/python"
    return ["Traceback (most recent call last):",
            *_frame("caption.py", 25, "<module>", "sentence = utils.get_caption(feat)"),
            *_frame("/src/utils.py", 117, "get_caption", call),
            *_frame(f"{lib}/training/saver.py", 1686, method, "{self.saver_def.filename_tensor_name: save_path})"),
            *_frame(f"{lib}/client/session.py", 895, "run", "run_metadata_ptr)"),
            *_frame(f"{lib}/client/session.py", 1363, "_do_call", "raise type(e)(node_def, op, message)")]


def test_tf1_saver_restore_is_checkpoint_load() -> None:
    """P7: TF 1.x ``tf.train.Saver.restore`` (``tensorflow/python/training/saver.py``) reading the model the job trained
    fails on a variable the checkpoint lacks: ``checkpoint_load``."""
    lines = ["Using TensorFlow backend.", *_tf_saver_traceback("restore", "saver.restore(sess, model_path)"),
             "NotFoundError: Key LSTM2/basic_lstm_cell/bias not found in checkpoint"]
    at = len(lines) - 1
    assert phase_of(lines, at, lines[at - 5:at + 1]) == "checkpoint_load"


def test_tf1_saver_save_is_checkpoint_save() -> None:
    """P6: ``tf.train.Saver.save`` writing the model: ``checkpoint_save``."""
    lines = ["step 100, loss 0.41", "step 200, loss 0.37",
             *_tf_saver_traceback("save", "saver.save(sess, './ckpt/model', global_step=step)"),
             "ResourceExhaustedError: ./ckpt/model-200.data-00000-of-00001.tempstate; No space left on device"]
    at = len(lines) - 1
    assert phase_of(lines, at, lines[at - 5:at + 1], 0, "200") == "checkpoint_save"


def test_deepspeeds_launcher_line_starts_the_next_stages_program() -> None:
    """P11: a pipeline's stages each run under the DeepSpeed launcher, which logs "nnodes=1, num_local_procs=2,
    node_rank=0" (``deepspeed/launcher/launch.py`` ``main``) before spawning its workers; the steps above it are the
    previous stage's, and the next stage fails before any step of its own: ``startup``."""
    lines = ["{'loss': 0.4123, 'learning_rate': 1e-05, 'epoch': 0.5}", "{'loss': 0.3987, 'learning_rate': 5e-06, 'epoch': 1.0}",
             "{'train_runtime': 120.5, 'train_samples_per_second': 8.3, 'epoch': 1.0}",
             "[2025-08-27 17:12:55,213] [INFO] [launch.py:145:main] WORLD INFO DICT: {'localhost': [6, 7]}",
             "[2025-08-27 17:12:55,213] [INFO] [launch.py:151:main] nnodes=1, num_local_procs=2, node_rank=0",
             "[2025-08-27 17:12:55,213] [INFO] [launch.py:163:main] dist_world_size=2",
             "[rank0]: Traceback (most recent call last):",
             *(f"[rank0]: {ln}" for ln in _frame("src/run.py", 616, "<module>", "main()")),
             *(f"[rank0]: {ln}" for ln in _frame("src/run.py", 375, "main", "labels = label_map[data_args.task]")),
             "[rank0]: KeyError: 'agnews'"]
    at = len(lines) - 1
    assert phase_of(lines, at, lines[at - 5:at + 1], 0, "1.0") == "startup"


def test_a_checkpoint_loaded_at_a_step_from_a_dotted_path_is_no_step_done() -> None:
    """P2/P11: nanochat's ``checkpoint_manager.load_model`` logs "Loading model from {dir} with step {step}" (the step the
    saved state names); a cache path with a dot in it ("/root/.cache/...") does not make it a step this program did: the
    next stage fails in its set-up, before any step of its own."""
    line = ("2025-10-15 05:55:56,329 - nanochat.checkpoint_manager - INFO - Loading model from "
            "/root/.cache/nanochat/base_checkpoints/d20 with step 21400")
    assert not step_progress(line)
    lines = ["step 21399/21400 (100.00%) | loss: 2.81 | lrm: 0.05 | dt: 420.00ms | tok/sec: 1,248,000",
             "wandb: Tracking run with wandb version 0.21.3", line,
             "Traceback (most recent call last):",
             *_frame("/src/scripts/mid_train.py", 93, "<module>", 'MMLU(subset="auxiliary_train", split="train"),'),
             *_frame("/src/tasks/mmlu.py", 22, "__init__", 'self.ds = load_dataset("cais/mmlu", subset, split=split)'),
             "OSError: Not enough disk space. Needed: Unknown size (download: 45.32 MiB, generated: 153.54 MiB)"]
    at = len(lines) - 1
    assert phase_of(lines, at, lines[at - 5:at + 1], 0, "21400") == "startup"
