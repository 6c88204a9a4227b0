"""Healthy or failed for whole logs without a failure line (issue 23, item 1): positive evidence
of a normal end (the last counter at its end, a final results block, a job script's epilogue),
and a log that stops mid-run with no error and no completion, which is not healthy. Each excerpt
is small, realistic and written for the test."""

from __future__ import annotations

import pytest

from gpulens.diagnosis.classifier import Classifier, default_classifier
from gpulens.diagnosis.logread import diagnose_text


@pytest.fixture(scope="module")
def clf() -> Classifier:
    return default_classifier()


def _keras(last_epoch: int, epochs: int, last_batch: int) -> list[str]:
    out = ["Found 12000 images belonging to 10 classes.", "Model: \"sequential\"", "Total params: 1,204,362"]
    for e in range(1, last_epoch + 1):
        out.append(f"Epoch {e}/{epochs}")
        done = last_batch if e == last_epoch else 375
        out.append(f"{done}/375 [==============================] - 12s 32ms/step - loss: 0.{90 - e:02d} - accuracy: 0.{50 + e}")
    return out


def test_a_keras_run_whose_last_epoch_reached_its_end_is_healthy(clf: Classifier) -> None:
    w = diagnose_text("\n".join(_keras(30, 30, 375)), clf)
    assert w.diagnosis.category == "none" and w.diagnosis.origin == "none"
    assert "reached its end" in (w.diagnosis.reason or "")


def test_a_log_that_stops_mid_epoch_is_not_healthy(clf: Classifier) -> None:
    lines = _keras(12, 30, 200)
    w = diagnose_text("\n".join(lines), clf)
    d = w.diagnosis
    assert d.category == "unknown" and d.origin == "unknown"  # failed, cause not in the log
    assert "stops in the middle of the run" in (d.reason or "") and "time limit" in (d.reason or "")
    assert w.indicator_lines == [len(lines)] and w.phase == "training"


def test_a_counter_short_of_its_end_by_less_than_its_stride_is_not_a_stop(clf: Classifier) -> None:
    # printed every 5,000 iterations: 795,001 is the last print of a run that reaches 800,000
    lines = [f"INFO - run.py - 2023-07-15 13:4{k % 10}:18,779 - Iter {k * 5000 + 1}/800000 Loss: 0.94 Time: 0.007"
             for k in range(150, 160)]
    w = diagnose_text("\n".join(lines), clf)
    assert w.diagnosis.category == "none"
    cut = diagnose_text("\n".join(lines[:5]), clf)  # 770,001 of 800,000: 30,000 short, stride 5,000
    assert cut.diagnosis.category == "unknown"


def _epochs_with_validation(n: int, total: int) -> list[str]:
    out = ["Loaded 5000 training samples"]
    for e in range(1, n + 1):
        out.append(f"Epoch {e}/{total}: 100%|██████████| 157/157 [00:41<00:00,  3.80it/s, loss=0.{60 - e}]")
        out.append(f"val_loss: 0.{70 - e} val_acc: 0.{40 + e}")
    return out


def test_a_per_epoch_validation_line_at_the_end_is_no_final_result(clf: Classifier) -> None:
    w = diagnose_text("\n".join(_epochs_with_validation(7, 50)), clf)
    assert w.diagnosis.category == "unknown"  # epoch 7 of 50, its validation line repeats each epoch


def test_a_final_test_block_after_the_last_step_is_a_normal_end(clf: Classifier) -> None:
    lines = _epochs_with_validation(7, 7)[:-1] + ["Restoring best model from epoch 6", "Test accuracy: 0.874",
                                                 "Test macro-F1: 0.861"]
    w = diagnose_text("\n".join(lines), clf)
    assert w.diagnosis.category == "none"
    # no totals to compare with: the new results block is what shows the end
    lines = [*[f"epoch {e} train_loss 0.{60 - e} val_loss 0.{70 - e}" for e in range(1, 9)],
             "Evaluating on the test set", "test_acc = 0.874"]
    w = diagnose_text("\n".join(lines), clf)
    assert w.diagnosis.category == "none" and "results" in (w.diagnosis.reason or "")


@pytest.mark.parametrize("epilogue", [
    ["", "real\t83m12.402s", "user\t80m1.113s", "sys\t2m30.920s"],
    ["Thu Aug 21 05:12:44 UTC 2025"],
    ["Job finished at: 2025-08-21 05:12:44"],
])
def test_a_job_scripts_epilogue_after_the_program_is_a_normal_end(clf: Classifier, epilogue: list[str]) -> None:
    lines = ["Thu Aug 21 03:49:31 UTC 2025", "python train.py --epochs 3",
             *[f"step {i} loss {2.0 - i / 100:.2f}" for i in range(1, 40)], *epilogue]
    w = diagnose_text("\n".join(lines), clf)
    assert w.diagnosis.category == "none" and "epilogue" in (w.diagnosis.reason or "")


def test_section_rulers_do_not_split_a_log_into_attempts(clf: Classifier) -> None:
    ruler = "=" * 60
    lines = [ruler, "Reference image training", ruler, "World size: 4", "", ruler, "Initialization complete!", ruler,
             "", ruler, "Starting training...", "  Max iterations: 10000", ruler,
             "[rank3]: Traceback (most recent call last):",
             '[rank3]:   File "train.py", line 99, in main',
             "[rank3]:     loss = model(batch)",
             "[rank3]: RuntimeError: mat2 must be a matrix, got 1-D tensor"]
    w = diagnose_text("\n".join(lines), clf)
    assert w.attempts == 1 and w.diagnosis.category not in ("none",)
    assert len(lines) in w.indicator_lines


@pytest.mark.parametrize("line", [
    "| epoch 010 | done training in 5723.4 seconds", "Done training.", "INFO:tensorflow:Loss for final step: 0.0132.",
    "***** train metrics *****", "*** Best metric: 80.512 (epoch 287)", "exiting program at iteration 20000",
    "Process finished with exit code 0", "Exit Status: 0", "Exit_status=0", "State: COMPLETED (exit code 0)",
    "JobId=81723 JobState=COMPLETED Reason=None ExitCode=0:0", "Job 'raysubmit_tN2YkqeM' succeeded",
    "🏃 View run bold-fox-12 at: http://127.0.0.1:5000/#/experiments/1/runs/0b2c",
])
def test_more_completion_families_pass_their_prefilter(line: str) -> None:
    from gpulens.diagnosis.logread.end.completion_messages import (
        COMPLETION_COVER,
        COMPLETION_KEYS,
        completion_strength,
    )

    assert completion_strength(line) >= 0.95
    assert any(k in line for k in COMPLETION_KEYS) and any(c in line for c in COMPLETION_COVER)


@pytest.mark.parametrize("line", ["Exit code: 0.5 s spent in the handler", "exited with code 1", "Exit Status: 137",
                                  "State: FAILED (exit code 1)"])
def test_a_non_zero_exit_is_no_completion(line: str) -> None:
    from gpulens.diagnosis.logread.end.completion_messages import completion_strength

    assert completion_strength(line) == 0.0


def test_an_mlflow_run_link_after_a_crash_is_no_completion(clf: Classifier) -> None:
    lines = ["epoch 1 loss 0.9", "epoch 2 loss 0.8", "epoch 3 loss 0.7", "Traceback (most recent call last):",
             '  File "train.py", line 40, in <module>', "    loss.backward()",
             "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
             "🏃 View run bold-fox-12 at: http://127.0.0.1:5000/#/experiments/1/runs/0b2c"]
    w = diagnose_text("\n".join(lines), clf)
    assert w.diagnosis.category == "gpu_oom" and w.indicator_lines == [7]


def test_an_exception_python_ignored_at_exit_is_no_failure(clf: Classifier) -> None:
    lines = [*[f"Epoch {e}/5: 100%|██████████| 40/40 [00:10<00:00,  3.9it/s, loss=0.{50 - e}]" for e in range(1, 6)],
             "Test accuracy: 0.912",
             "Exception ignored in: <function _MultiProcessingDataLoaderIter.__del__ at 0x7f3a2c1d9e50>",
             "Traceback (most recent call last):",
             '  File "/opt/conda/lib/python3.10/site-packages/torch/utils/data/dataloader.py", line 1479, in __del__',
             "    self._shutdown_workers()",
             "AttributeError: '_MultiProcessingDataLoaderIter' object has no attribute '_shutdown'"]
    w = diagnose_text("\n".join(lines), clf)
    assert w.diagnosis.category == "none"
    # the same exception raised (not ignored) ends the run
    raised = lines[:6] + lines[7:]
    assert diagnose_text("\n".join(raised), clf).diagnosis.category != "none"


def _caught_then(after: int) -> list[str]:
    return (["Evaluating 40 prompts", "prompt 0: score 0.71", "Traceback (most recent call last):",
             '  File "eval.py", line 88, in score_one', "    ref = refs[item['id']]", "KeyError: 'q-0193'"]
            + [f"prompt {k}: score 0.{60 + k % 30}" for k in range(1, after + 1)])


def test_an_error_the_job_went_on_from_is_no_failure(clf: Classifier) -> None:
    w = diagnose_text("\n".join([*_caught_then(30), "mean score over 40 prompts: 0.74"]), clf)
    assert w.diagnosis.category == "none"
    short = diagnose_text("\n".join(_caught_then(3)), clf)  # three lines after it: not enough to tell
    assert short.diagnosis.category == "semantic_error" and short.indicator_lines == [6]


def test_the_configured_last_step_reached_is_a_normal_end(clf: Classifier) -> None:
    head = ["Namespace(base_lr=0.0008, batch_size=64, max_epochs=100, max_iterations=50000, seed=2222)",
            "125 iterations per epoch. 12500 max iterations"]
    body = [f"iteration {k * 125}, epoch {k - 1} : loss : 1.3{k % 10}, lr: 0.0008" for k in range(90, 101)]
    w = diagnose_text("\n".join([*head, *body, "/scratch/run1/epoch_99.pth"]), clf)
    assert w.diagnosis.category == "none" and "configured last" in (w.diagnosis.reason or "")
    w = diagnose_text("\n".join([*head, *body[:4], "/scratch/run1/epoch_92.pth"]), clf)
    assert "configured last" not in (w.diagnosis.reason or "")  # epoch 92 of 100: nothing says it ended


# ------------------------------------------------------------------------------------ phases

_STEPS = [f"<epoch:  1, iter:   {k * 200:,}, lr:2.000e-04> G_loss: 4.9{k}e-03" for k in range(1, 8)]


def _tb(*frames: tuple[str, str, str], error: str) -> list[str]:
    out = ["Traceback (most recent call last):"]
    for path, func, code in frames:
        out += [f'  File "{path}", line 10, in {func}', f"    {code}"]
    return [*out, error]


def test_a_save_frame_decides_even_after_shards_were_loaded_at_startup(clf: Classifier) -> None:
    lines = ["Loading checkpoint shards: 100%|██████████| 2/2 [00:10<00:00,  5.01s/it]", *_STEPS,
             *_tb(("sft.py", "<module>", "model.save_pretrained(out_dir, safe_serialization=True)"),
                  ("transformers/modeling_utils.py", "save_pretrained", "safe_save_file(shard, path)"),
                  ("safetensors/torch.py", "save_file", "serialize_file(_flatten(tensors), filename)"),
                  error="safetensors_rust.SafetensorError: Error while serializing: IoError(Disk quota exceeded)")]
    assert diagnose_text("\n".join(lines), clf).phase == "checkpoint_save"
    resume = ["Loading checkpoint shards: 100%|██████████| 2/2 [00:10<00:00,  5.01s/it]", *_STEPS,
              *_tb(("train.py", "train", "self._save_resume_checkpoint(step)"),
                   ("train.py", "_save_resume_checkpoint", "accelerator.save_state(path)"),
                   error="RuntimeError: [Errno 122] Disk quota exceeded")]
    assert diagnose_text("\n".join(resume), clf).phase == "checkpoint_save"  # a save while resuming is a save


def test_a_failure_in_a_metric_function_is_evaluation(clf: Classifier) -> None:
    lines = [*_STEPS, *_tb(("main_train_psnr.py", "main", "current_psnr = util.calculate_psnr(E_img, H_img)"),
                           ("utils/utils_image.py", "calculate_psnr", "raise ValueError('bad shapes')"),
                           error="ValueError: Input images must have the same dimensions.")]
    assert diagnose_text("\n".join(lines), clf).phase == "evaluation"
    hydra = [*_STEPS, "Error executing job with overrides: ['trainer.val_before_train=False', 'data.batch=8']",
             *_tb(("main_ppo.py", "main", "run_ppo(config)"), ("ray/_private/worker.py", "get", "raise value"),
                  error="ray.exceptions.RayTaskError(ActorDiedError): The actor died unexpectedly")]
    assert diagnose_text("\n".join(hydra), clf).phase == "training"  # "val_" in an override is no evaluation


def test_startup_or_first_step_before_any_progress(clf: Classifier) -> None:
    in_step = ["Training from scratch", *_tb(("trainer.py", "fit", "self.update_actor(batch)"),
                                             ("worker.py", "update_actor", "loss.backward()"),
                                             ("torch/_tensor.py", "backward", "torch.autograd.backward(self)"),
                                             error="torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.78 GiB")]
    assert diagnose_text("\n".join(in_step), clf).phase == "first_step"
    setup = ["Training from scratch", *_tb(("train.py", "main", "model = build_model(cfg)"),
                                           ("model.py", "build_model", "feat_dim = POSE_TOTAL_DIM"),
                                           error="NameError: name 'POSE_TOTAL_DIM' is not defined")]
    assert diagnose_text("\n".join(setup), clf).phase == "startup"


def test_a_syntax_error_is_startup_whatever_was_printed_before(clf: Classifier) -> None:
    lines = [*_STEPS, '  File "training.py", line 232', '    optim="adamw_bnb_8bit"', "    ^",
             "SyntaxError: invalid syntax"]
    # the main script's own syntax error has no "Traceback" head
    assert diagnose_text("\n".join(lines), clf).phase == "startup"
    lines.insert(len(_STEPS), "Traceback (most recent call last):")
    assert diagnose_text("\n".join(lines), clf).phase == "startup"


def test_a_failure_after_the_final_results_is_shutdown(clf: Classifier) -> None:
    lines = [*_STEPS, "Accuracy on the test set: 0.57",
             *_tb(("task.py", "<module>", 'plt.savefig("plots/loss.png")'),
                  ("matplotlib/figure.py", "savefig", "self.canvas.print_figure(fname)"),
                  error="FileNotFoundError: [Errno 2] No such file or directory: 'plots/loss.png'")]
    assert diagnose_text("\n".join(lines), clf).phase == "shutdown"
    # a per-epoch metric line printed all along is no final result
    periodic = [x for k in _STEPS for x in (k, "val accuracy: 0.41")]
    crash = _tb(("train.py", "train", "loss = model(x)"), ("model.py", "forward", "return self.fc(h)"),
                error="RuntimeError: mat1 and mat2 shapes cannot be multiplied (8x512 and 256x10)")
    assert diagnose_text("\n".join([*periodic, *crash]), clf).phase == "training"


def test_set_up_bars_and_warnings_are_no_training_steps(clf: Classifier) -> None:
    lines = ["Loading checkpoint shards: 100%|██████████| 4/4 [00:03<00:00,  1.10it/s]",
             "Map: 100%|██████████| 760/760 [00:00<00:00, 6451.17it/s]",
             "100%|██████████| 760/760 [00:00<00:00, 6451.17it/s]",
             "/opt/conda/lib/python3.10/site-packages/torch/optim/lr_scheduler.py:139: UserWarning: Detected call of "
             "`lr_scheduler.step()` before `optimizer.step()`.",
             "Total params: 9,409,813,744",
             *_tb(("train.py", "<module>", "train(parse_args())"), ("train.py", "train", "feat_dim = POSE_TOTAL_DIM"),
                  error="NameError: name 'POSE_TOTAL_DIM' is not defined")]
    assert diagnose_text("\n".join(lines), clf).phase == "startup"


def test_frames_without_their_traceback_head_still_tell_the_phase(clf: Classifier) -> None:
    frames = _tb(("reward_model.py", "<module>", "trainer.train()"),
                 ("transformers/trainer.py", "_maybe_log_save_evaluate", "metrics = self.evaluate()"),
                 ("transformers/trainer.py", "evaluation_loop", "metrics = self.compute_metrics(preds)"),
                 ("trl/trainer/utils.py", "compute_accuracy", "return np.array(predictions == labels)"),
                 error="ValueError: operands could not be broadcast together with shapes (9498,2) (9498,)")[1:]
    lines = [*_STEPS, "  4%|▎         | 500/14007 [02:34<1:01:57,  3.63it/s]", *frames]
    assert diagnose_text("\n".join(lines), clf).phase == "evaluation"


def test_loading_the_best_model_at_the_end_is_a_checkpoint_load(clf: Classifier) -> None:
    lines = [*_STEPS, *_tb(("task.py", "<module>", "trainer.train()"),
                           ("transformers/trainer.py", "_inner_training_loop", "self._load_best_model()"),
                           ("transformers/trainer.py", "_load_best_model", "model.load_adapter(best_dir)"),
                           error="ValueError: Can't find 'adapter_config.json' at 'out/checkpoint-126'")]
    assert diagnose_text("\n".join(lines), clf).phase == "checkpoint_load"


def test_a_timeout_on_the_first_gradient_all_reduce_is_the_first_step(clf: Classifier) -> None:
    head = ["Using 2 GPUs", "Start training, Total Epochs: 120 = Total Iterations 8000"]
    first = ("[E ProcessGroupNCCL.cpp:828] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, "
             "OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1801501 milliseconds before timing out.")
    assert diagnose_text("\n".join([*head, first]), clf).phase == "first_step"
    later = first.replace("SeqNum=1,", "SeqNum=875,")  # hundreds of collectives: set-up barriers, no step yet
    assert diagnose_text("\n".join([*head, later]), clf).phase == "startup"


def test_a_log_that_stops_short_of_its_configured_epochs_is_not_healthy(clf: Classifier) -> None:
    head = ["Namespace(batch_size=32, epochs=50, lr=0.001, model='resnet18', seed=0)", "Files already downloaded"]
    body = [f"epoch {e} train_loss 0.{80 - e} val_acc 0.{40 + e}" for e in range(1, 13)]
    w = diagnose_text("\n".join([*head, *body]), clf)
    assert w.diagnosis.category == "unknown" and "configuration" in (w.diagnosis.reason or "")
    done = [*head, *[f"epoch {e} train_loss 0.{99 - e} val_acc 0.{40 + e}" for e in range(1, 51)]]
    assert diagnose_text("\n".join(done), clf).diagnosis.category == "none"  # epoch 50 of 50


@pytest.mark.parametrize("end", [
    "Terminated", "./run.sh: line 12: 48211 Terminated              python train.py --epochs 50",
    "Hangup", "User defined signal 2", "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.",
    "srun: forcing job termination",
])
def test_a_signal_or_an_aborted_job_step_at_the_end_is_a_failure(clf: Classifier, end: str) -> None:
    body = [f"epoch {e} loss 0.{90 - e}" for e in range(1, 9)]  # no totals: nothing else says it stopped
    w = diagnose_text("\n".join([*body, end]), clf)
    assert w.diagnosis.category != "none" and w.indicator_lines == [len(body) + 1]


def _steps(n: int) -> list[str]:
    return ["Loading dataset shards: 100%|##########| 4/4", *(f"step {i}/5000 | loss {3.1 - i / 1000:.3f} | lr 2.0e-05"
                                                            for i in range(1, n + 1))]


def test_slurms_oom_kill_report_at_the_end_is_a_failure_not_a_normal_end(clf: Classifier) -> None:
    lines = [*_steps(40), "slurmstepd-gpu016: error: Detected 3 oom_kill events in StepId=2502.batch. "
             "Some of the step tasks have been OOM Killed."]
    w = diagnose_text("\n".join(lines), clf)
    assert w.diagnosis.category not in ("none", "unknown") and w.diagnosis.origin != "none"
    assert w.diagnosis.category == "cpu_oom"
    assert len(lines) in w.indicator_lines


def test_deepspeeds_negative_return_code_at_the_end_is_a_failure(clf: Classifier) -> None:
    lines = [*_steps(40), "[2025-03-02 10:01:02,003] [INFO] [launch.py:351:main] Process 81234 exits with return code = -9"]
    w = diagnose_text("\n".join(lines), clf)
    assert w.diagnosis.category != "none" and w.diagnosis.origin != "none"
    assert len(lines) in w.indicator_lines


def test_deepspeeds_zero_return_code_is_no_failure(clf: Classifier) -> None:
    lines = [*_steps(5000), "[2025-03-02 10:01:02,003] [INFO] [launch.py:351:main] Process 81234 exits with return code = 0"]
    assert diagnose_text("\n".join(lines), clf).diagnosis.category == "none"


def _ray_workers(n: int, start: int = 0) -> list[str]:
    return [f"\x1b[36m(train_task pid={4100 + k % 3})\x1b[0m Batch {start + k} of 400\tTrain loss: 0.{50 + k % 40}"
            for k in range(n)]


_DRIVER_TB = [
    "Traceback (most recent call last):",
    '  File "/home/u/proj/launch_ray.py", line 61, in <module>',
    "    ray.get(handles)",
    '  File "/opt/conda/lib/python3.10/site-packages/ray/_private/worker.py", line 2755, in get',
    "    raise value.as_instanceof_cause()",
    "ray.exceptions.RayTaskError(RuntimeError): ray::train_task() (pid=4101, ip=10.1.2.3)",
    '  File "/home/u/proj/train.py", line 88, in to_device',
    "    self.x = self.x.cuda()",
    "RuntimeError: CUDA error: out of memory",
    "For debugging consider passing CUDA_LAUNCH_BLOCKING=1",
]


def test_a_ray_driver_that_died_is_a_failure_whatever_its_workers_print_after(clf: Classifier) -> None:
    head = ["2025-03-01 10:00:00,000\tINFO worker.py:1841 -- Started a local Ray instance.", *_ray_workers(20)]
    tail = _ray_workers(40, 20) + ["\x1b[36m(train_task pid=4102)\x1b[0m \tTest accuracy: 0.8123"]
    w = diagnose_text("\n".join(head + _DRIVER_TB + tail), clf)
    d = w.diagnosis
    assert (d.category, d.origin) == ("gpu_oom", "user"), d
    assert len(head) + 9 in w.indicator_lines
    interrupted = _DRIVER_TB[:5] + ["KeyboardInterrupt"]
    d = diagnose_text("\n".join(head + interrupted + tail), clf).diagnosis
    assert d.category == "preempted", d


def test_a_driver_that_printed_on_after_its_traceback_went_on(clf: Classifier) -> None:
    # the driver caught the task's error, printed it and went on: its own lines follow the workers'
    head = ["Started a local Ray instance.", *_ray_workers(20)]
    after = _ray_workers(20, 20) + [f"sweep point {k}: mean reward {k * 1.5:.1f}" for k in range(25)] + [
        "All sweep points finished. Results saved to results/sweep.csv"]
    d = diagnose_text("\n".join(head + _DRIVER_TB + after), clf).diagnosis
    assert d.category == "none", d


def test_argparse_with_a_program_name_of_several_words_is_a_failure(clf: Classifier) -> None:
    text = ("usage: accelerate <command> [<args>] launch [-h] [--config_file CONFIG_FILE]\n"
            "                                 [--machine_rank MACHINE_RANK]\n"
            "                                 training_script ...\n"
            "Accelerate launch command: error: argument --machine_rank/--machine-rank: invalid int value: ''\n")
    d = diagnose_text(text, clf).diagnosis
    assert (d.category, d.rule_id) == ("semantic_error", "argparse-usage-error"), d
    quiet = "Epoch 3/3 done\nThe loader reported: error: none of 0 files skipped\nResults saved to out/\n"
    assert diagnose_text(quiet, clf).diagnosis.category == "none"


_STEPS = [f"step {k} | loss {2.0 - k / 100:.3f} | lr 3.0e-04" for k in range(0, 200, 10)]
_EXC = ["Traceback (most recent call last):", '  File "/work/u/pretrain.py", line 211, in <module>', "    main(cfg)",
        '  File "/work/u/pretrain.py", line 180, in main', "    batch = next(loader)",
        "KeyError: 'input_ids'"]


@pytest.mark.parametrize("tail", [["pretrain.py failed with exit code 1", "Done."],
                                  ["Stage pretrain failed with exit code 1", "All done."],
                                  ["Done."]])
def test_a_job_scripts_done_after_a_crash_is_no_normal_end(clf: Classifier, tail: list[str]) -> None:
    d = diagnose_text("\n".join(_STEPS + _EXC + tail), clf).diagnosis
    assert d.category not in ("none", "unknown") and d.origin != "none", d


def test_a_completion_after_a_non_fatal_error_line_is_a_normal_end(clf: Classifier) -> None:
    d = diagnose_text("\n".join(_STEPS + ["ERROR: could not upload checkpoint to the model hub", "Training finished."]),
                      clf).diagnosis
    assert d.category == "none", d


def test_lsfs_terminated_at_timestamp_is_no_signal(clf: Classifier) -> None:
    report = ["Sender: LSF System <lsfadmin@hpc>", "Subject: Job 4821: <python train.py> in cluster <c> Done", "",
              "Job <python train.py> was submitted from host <login1> by user <u>.",
              "Started at Fri Dec  1 03:10:02 2023", "Terminated at Fri Dec  1 04:27:09 2023",
              "Results reported at Fri Dec  1 04:27:09 2023", "", "Successfully completed.", "",
              "Resource usage summary:", "    CPU time :   4612.00 sec.", "",
              "The output (if any) follows:", "", *_STEPS, "Epoch 10/10 finished"]
    d = diagnose_text("\n".join(report), clf).diagnosis
    assert d.category == "none", d


def test_a_log_with_nul_holes_and_keras_backspaces_is_still_read(tmp_path, clf: Classifier) -> None:
    from gpulens.diagnosis.logread import diagnose_path

    bar = "".join(f"{k:3d}/375 [>.............................] - ETA: 1:02 - loss: 0.91" + "\b" * 62
                  for k in range(1, 376, 4))
    body = ["Found 12000 images belonging to 10 classes.", *[f"Epoch {e}/3\n{bar}" for e in (1, 2, 3)],
            "375/375 [==============================] - 41s 109ms/step - loss: 0.52 - accuracy: 0.83",
            "Test accuracy: 0.8312", "Training finished."]
    path = tmp_path / "slurm-77.out"
    path.write_bytes(b"job 77 on gpu03\n" + b"\x00" * 6000 + "\n".join(body).encode() + b"\n")
    w = diagnose_path(path, clf)
    assert w.diagnosis.category == "none", w.diagnosis
    assert w.completion is not None and w.completion[0] == path.read_bytes().count(b"\n")
    weights = tmp_path / "model.pt"
    weights.write_bytes(bytes(range(256)) * 40)
    assert diagnose_path(weights, clf).diagnosis.reason.startswith("binary data")


@pytest.mark.parametrize("epilogue,category", [
    (["Exit code: 1", "Done."], None),
    (["Job ID: 5521904", "State: TIMEOUT (exit code 0)", "Nodes: 1", "CPU Utilized: 11:02:31"], "preempted"),
    (["Job ID: 5521904", "State: OUT_OF_MEMORY (exit code 0)", "Memory Utilized: 63.8 GB"], "cpu_oom"),
    (["JobId=5521904 JobName=train", "   JobState=FAILED Reason=NonZeroExitCode Dependency=(null)",
      "   ExitCode=1:0"], None),
    (["Exit_status=271", "resources_used.walltime=24:00:07"], None),
])
def test_a_failing_exit_in_a_job_scripts_epilogue_is_a_failure(clf: Classifier, epilogue: list[str],
                                                                category: str | None) -> None:
    d = diagnose_text("\n".join(_STEPS[:12] + epilogue), clf).diagnosis
    assert d.category != "none", d
    if category is not None:
        assert d.category == category, d


@pytest.mark.parametrize("epilogue", [["Exit code: 0", "Done."], ["State: COMPLETED (exit code 0)"],
                                      ["   JobState=COMPLETED Reason=None", "   ExitCode=0:0"]])
def test_a_zero_exit_in_a_job_scripts_epilogue_is_a_normal_end(clf: Classifier, epilogue: list[str]) -> None:
    d = diagnose_text("\n".join(_STEPS[:12] + epilogue), clf).diagnosis
    assert d.category == "none", d


def test_a_completion_word_printed_while_training_went_on_is_no_normal_end(clf: Classifier) -> None:
    # pytorchtools' EarlyStopping prints its counter every epoch without improvement; the run went
    # on and the log stops mid-epoch (killed without a word)
    lines = []
    for e in range(1, 9):
        lines += [f"Epoch {e}/50: 100%|██████████| 200/200 [00:31<00:00,  6.4it/s, loss=0.{70 - e}]",
                  f"val_loss: 0.{80 - e} val_acc: 0.{40 + e}"]
        if e > 5:
            lines.append(f"EarlyStopping counter: {e - 5} out of 10")
    lines += [f"Epoch 9/50:  {k}%|███       | {k * 2}/200 [00:09<00:22,  6.4it/s, loss=0.61]" for k in (20, 30, 40)]
    d = diagnose_text("\n".join(lines), clf).diagnosis
    assert d.category == "unknown", d
    ended = lines[:-3] + ["Early stopping triggered after epoch 8. Best val_loss: 0.73"]
    assert diagnose_text("\n".join(ended), clf).diagnosis.category == "none"


def test_a_log_without_any_evidence_is_only_probably_healthy(clf: Classifier) -> None:
    lines = ["Loading tokenizer from ./tok", "Building vocabulary of 32000 tokens", "Writing shards to /scratch/u/shards",
             "shard 0 written", "shard 1 written", "shard 2 written"]
    d = diagnose_text("\n".join(lines), clf, calibrated=False).diagnosis  # the confidence the reader states
    assert d.category == "none" and d.confidence < 0.6, d
    assert (d.reason or "").startswith("probably ended normally") and "sacct" in (d.reason or "")


def test_an_earlier_stage_s_completion_is_a_less_sure_normal_end(clf: Classifier) -> None:
    first = [f"step {k} | loss {2.0 - k / 100:.3f}" for k in range(0, 100, 10)] + ["Finished Training setting A"]
    second = ["Start Training setting B"] + [f"step {k} | loss {2.5 - k / 100:.3f}" for k in range(0, 100, 10)] + [
        "Writing summary table to results/sweep.csv"]
    d = diagnose_text("\n".join(first + second), clf, calibrated=False).diagnosis  # the confidence the reader states
    assert d.category == "none" and d.confidence == 0.7 and "earlier" in (d.reason or ""), d
    from gpulens.diagnosis.logread.end.completion_messages import is_completion
    assert not is_completion("EarlyStopping counter: 3 out of 10") and is_completion("EarlyStopping: stopping at epoch 41")


def _pbs_job(job: int, body: list[str], status: str) -> list[str]:
    ruler = "-" * 39
    return [ruler, f"Begin PBS Prologue Tue Mar  4 10:0{job}:00 EST 2025", f"Job ID:     {job}.sched-torque.example.edu",
            "Job name:   segment", "End PBS Prologue", ruler, *body, status, ruler,
            f"Begin PBS Epilogue Tue Mar  4 18:0{job}:00 EST 2025", f"Job ID:     {job}.sched-torque.example.edu",
            "Rsrc Used:  cput=30:11:02,walltime=07:58:10,mem=3190444kb", "End PBS Epilogue", ruler]


def test_torque_prologues_split_jobs_appended_to_one_output_file(clf: Classifier) -> None:
    crash = ["Traceback (most recent call last):", '  File "train.py", line 41, in <module>',
             "    trainer.fit(model)", "ValueError: monitor key 'val_loss' not found in the logged metrics"]
    fixed = ["GPU available: True, used: True", *[f"Epoch {e}: 100%|##########| 120/120 loss={1 / e:.3f}"
                                                    for e in range(1, 31)], "`Trainer.fit` stopped: `max_epochs=30` reached."]
    w = diagnose_text("\n".join(_pbs_job(1, crash, "Done") + _pbs_job(2, fixed, "Done")), clf)
    assert w.attempts == 2 and w.diagnosis.category == "none"
    w = diagnose_text("\n".join(_pbs_job(1, fixed, "Done") + _pbs_job(2, crash, "Done")), clf)
    assert w.attempts == 2 and w.diagnosis.category not in ("none",)


_SETUP = ["Loading config from configs/finetune.yaml", "Using 2 GPU(s): NVIDIA A100-SXM4-40GB",
          "Seed set to 1234", "Tokenizing 48,000 examples"]


@pytest.mark.parametrize(("last", "category"), [
    ("/var/spool/slurmd/job4411/slurm_script: line 14: torchrun: command not found", "import_error"),
    ("run_all.sh: line 9: deepspeed: command not found", "import_error"),
    ("bash: ./scripts/train_ddp.sh: No such file or directory", "semantic_error"),
    ("python3: can't open file '/home/ana/proj/trian.py': [Errno 2] No such file or directory", "semantic_error"),
    ("=>> PBS: job killed: mem 33554432kb exceeded limit 16777216kb", "cpu_oom"),
    ("=>> PBS: job killed: vmem 70368744kb exceeded limit 67108864kb", "cpu_oom"),
    ("=>> PBS: job killed: cput 86412 exceeded limit 86400", "preempted"),
    ("=>> PBS: job killed: node 1 (cn112) requested job terminate, 'EOF' (code 1099) - received SISTER_EOF "
     "attempting to communicate with sister MOM's", "preempted"),
    ("terminate called after throwing an instance of 'std::bad_alloc'", "cpu_oom"),
    ("/bin/sh: 1: accelerate: not found", "import_error"),
    ("zsh: command not found: python", "import_error"),
    ("env: 'python3': No such file or directory", "import_error"),
    ("thread '<unnamed>' panicked at src/tokenizer/mod.rs:412:29:", None),
    ("make: *** [Makefile:31: train] Error 1", None),
    ("/var/spool/slurmd/job4411/slurm_script: line 21: syntax error near unexpected token `fi'", "syntax_error"),
    ("run_sweep.sh: line 40: syntax error: unexpected end of file", "syntax_error"),
    ("./launch.sh: 7: Syntax error: \"(\" unexpected", "syntax_error"),
])
def test_a_job_ended_by_a_line_without_an_error_word_is_no_normal_end(clf: Classifier, last: str,
                                                                       category: str | None) -> None:
    # the shell, the PBS MOM, the C++ and Rust runtimes and make say so without "error", "killed
    # by" or a traceback (None: failed, whatever the category)
    lines = [*_SETUP, last]
    w = diagnose_text("\n".join(lines), clf)
    assert w.diagnosis.category != "none" and w.indicator_lines == [len(lines)]
    after_steps = [*_SETUP, *(f"step {k} loss 1.{k:02d}" for k in range(40, 60)), last, ""]
    got = diagnose_text("\n".join(after_steps), clf).diagnosis.category
    assert got != "none"
    if category is not None:
        assert (w.diagnosis.category, got) == (category, category)


def test_a_missing_command_the_job_script_went_on_from_is_not_its_end(clf: Classifier) -> None:
    # "module: command not found" before the program starts: the program then ran to its end
    lines = ["/var/spool/slurmd/job52/slurm_script: line 3: module: command not found", *_SETUP,
             *(f"Epoch {e}/5: 100%|██████████| 40/40 [00:09<00:00, loss=0.{50 - e}]" for e in range(1, 6)),
             "val_acc: 0.91", "Test accuracy: 0.905", "Saved model to out/model.pt", "Elapsed 00:01:02"]
    assert diagnose_text("\n".join(lines), clf).diagnosis.category == "none"


_FIT_DONE = ["GPU available: True (cuda), used: True", *(f"Epoch {e}: 100%|##########| 50/50 [00:04<00:00, val_loss={1 / e:.3f}]"
                                                         for e in range(1, 21)),
             "`Trainer.fit` stopped: `max_epochs=20` reached.", "wandb: Synced 6 W&B file(s), 0 media file(s)"]


def test_hydra_s_compact_report_after_a_finished_stage_is_a_failure(clf: Classifier) -> None:
    # the next stage's instantiate error: Hydra prints the wrapped exception's repr, no traceback
    lines = [*_FIT_DONE, "[rank: 0] Global seed set to 42", "Error executing job with overrides: ['mode=sample']",
             "Error in call to target 'proj.cli.build_sampler':",
             "TypeError(\"build_sampler() got an unexpected keyword argument 'steps'\")", "full_key: sampler", "",
             "Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace."]
    w = diagnose_text("\n".join(lines), clf)
    assert (w.diagnosis.category, w.diagnosis.origin) == ("semantic_error", "user")
    assert w.indicator_lines == [1 + next(k for k, ln in enumerate(lines) if ln.startswith("TypeError("))]


def test_hydra_s_config_error_without_a_traceback_is_a_failure(clf: Classifier) -> None:
    lines = [*_SETUP, "Could not override 'trainer.max_step'.", "To append to your config use +trainer.max_step=100",
             "Key 'max_step' is not in struct", "    full_key: trainer.max_step", "    object_type=dict", "",
             "Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace."]
    assert diagnose_text("\n".join(lines), clf).diagnosis.category != "none"


def test_hydra_s_last_line_after_a_traceback_adds_no_indicator_line(clf: Classifier) -> None:
    lines = [*_SETUP, "Error executing job with overrides: []", "Traceback (most recent call last):",
             '  File "/work/proj/train.py", line 60, in main', "    out = model(batch)",
             "RuntimeError: batch1 must be a 3D tensor", "",
             "Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace."]
    w = diagnose_text("\n".join(lines), clf)
    assert w.diagnosis.category == "semantic_error"
    assert w.indicator_lines == [1 + lines.index("RuntimeError: batch1 must be a 3D tensor")]
