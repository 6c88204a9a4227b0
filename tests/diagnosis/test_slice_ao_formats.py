"""Formats read from the dev rows of slice `ao`: OmegaConf resolving an interpolation is no evaluation, a progress
bar with a message printed onto its last refresh still counts the steps it shows, a program's own evaluation after
its loop's end is evaluation, an atexit error after an interrupt is no shutdown, and mmpose's missing annotation file
is missing input, and an NCCL error that names NCCL_DEBUG=WARN is a failure line."""

from __future__ import annotations

from gpulens.diagnosis.logread import diagnose_text
from gpulens.diagnosis.logread.bars import bar_under_text
from gpulens.diagnosis.logread.lines import is_failure
from gpulens.diagnosis.logread.phase import phase_of
from gpulens.diagnosis.logread.phase.frames import in_eval, in_train_step
from gpulens.diagnosis.logread.steplines import step_in, step_progress, without_glued_kill

_RESOLVER = [
    "Traceback (most recent call last):",
    '  File "/env/lib/python3.11/site-packages/hydra/_internal/core_plugins/basic_sweeper.py", line 1, in setup',
    '  File "/env/lib/python3.11/site-packages/omegaconf/base.py", line 694, in _evaluate_custom_resolver',
    "    return resolver(",
    '  File "/env/lib/python3.11/site-packages/hydra/core/hydra_config.py", line 31, in get',
    '    raise ValueError("HydraConfig was not set")',
    "omegaconf.errors.InterpolationResolutionError: ValueError raised while resolving interpolation",
]


def test_omegaconf_resolving_an_interpolation_is_no_evaluation() -> None:
    assert not in_eval(_RESOLVER)
    evaluating = [*_RESOLVER[:2], '  File "/job/run.py", line 9, in evaluate_model', *_RESOLVER[2:]]
    assert in_eval(evaluating)


_GLUED = ("steps:   0%|          | 218/60000 [01:30<6:51:39,  2.42it/s, avr_loss=0.166]\r"
          "steps:   0%|          | 219/60000 [01:30<6:51:32,  2.42it/s, avr_loss=0.165]"
          "['python', 'sdxl_train_network.py', '--save_model_as', 'safetensors', '--save_every_n_epochs', '5', "
          + ", ".join(f"'--option_{k}', '{k}'" for k in range(40)) + "]")  # a wrapper's whole command list


def test_a_bar_with_a_message_printed_onto_it_is_still_progress() -> None:
    assert bar_under_text(_GLUED) == "steps:   0%|          | 219/60000 [01:30<6:51:32,  2.42it/s, avr_loss=0.165]"
    assert step_progress(_GLUED)
    assert step_in(_GLUED) == "219"
    assert bar_under_text("steps:   0%|          | 219/60000 [01:30<6:51:32,  2.42it/s]") is None  # nothing printed onto it


def test_the_programs_own_evaluation_after_its_loops_end_is_evaluation() -> None:
    tb = ["Traceback (most recent call last):", '  File "src/run.py", line 178, in <module>', "    evaluate(args.exp_dir)",
          '  File "src/eval.py", line 79, in evaluate', "    train_auc = sklearn.metrics.roc_auc_score(y, p)",
          "ValueError: continuous format is not supported"]
    lines = []
    for e in range(1, 31):  # AST's traintest.py: a step line, a validation pass and the epoch's time
        lines += [f"Epoch: [{e}][8/48]\tPer Sample Total Time 0.05177\tTrain Loss 0.0937", "start validation",
                  "mAP: 0.249076", "validation finished", f"epoch {e} training time: 36.709"]
    lines += ["---------------Training Finished---------------", "weighted averaged model results", "mAP: 0.154046",
              "---------------evaluate on the train, validation, test set---------------",
              "now train a audio spectrogram transformer model", "number of classes is 88", *tb]
    assert phase_of(lines, len(lines) - 1, tb) == "evaluation"
    other = [*tb[:3], '  File "src/report.py", line 9, in write_report', *tb[4:]]
    assert phase_of([*lines[:-len(tb)], *other], len(lines) - 1, other) != "evaluation"


def test_an_atexit_error_after_an_interrupt_is_its_aftermath_not_a_shutdown() -> None:
    tb = ["^CTraceback (most recent call last):", '  File "tools/run_net.py", line 44, in <module>',
          '  File "/env/lib/python3.7/multiprocessing/connection.py", line 921, in wait', "KeyboardInterrupt"]
    lines = ["Start epoch: 1", *[f"tensor([{k}, 4, 7])" for k in range(6)], *tb,
             "^CError in atexit._run_exitfuncs:", "Traceback (most recent call last):", "KeyboardInterrupt"]
    failure = len(tb) + 6
    assert phase_of(lines, failure, lines[failure - 3:]) != "shutdown"


def test_mmposes_missing_annotation_file_is_missing_input() -> None:
    w = diagnose_text("\n".join([
        "Traceback (most recent call last):", '  File "tools/train.py", line 9, in <module>',
        '  File "/env/mmpose/datasets/datasets/base/base_coco_style_dataset.py", line 199, in _load_annotations',
        "    assert exists(self.ann_file), 'Annotation file does not exist'",
        "AssertionError: Annotation file does not exist", ""]))
    assert w.diagnosis.category == "incorrect_input"
    assert w.diagnosis.rule_id == "assertion-path-does-not-exist"


def test_an_nccl_error_that_says_run_with_nccl_debug_warn_is_a_failure_line() -> None:
    """PyTorch 2.6 and later tell the user to rerun "with NCCL_DEBUG=WARN": a setting's value, not a warning's level."""
    err = ("torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.cpp:77, "
           "invalid usage (run with NCCL_DEBUG=WARN for details), NCCL version 2.26.2")
    assert is_failure(err, "[rank1]: " + err)
    assert not is_failure("WARNING: the NCCL_DEBUG setting is ignored", "WARNING: the NCCL_DEBUG setting is ignored")
    assert not is_failure("node1:4242:4300 [0] NCCL WARN Error while creating shared memory segment")


def test_the_ast_familys_start_banner_names_the_host_of_a_relaunch_too() -> None:
    """AST's ``src/run.py`` prints its process id and host first; the second run's banner names the failing node."""
    tb = ["Traceback (most recent call last):", '  File "src/run.py", line 178, in <module>',
          "ValueError: continuous format is not supported"]
    text = "\n".join(["I am process 34920, running on gpu38: starting (Sat May 13 08:24:18 2023)",
                      "args:  Namespace(data_train='train.json', n_epochs=30)", *[f"epoch {e} loss 0.1" for e in range(3)],
                      *tb, "I am process 39691, running on gpu38: starting (Sat May 13 09:26:25 2023)",
                      "args:  Namespace(data_train='train.json', n_epochs=30)", "now train a audio spectrogram transformer model",
                      *[f"epoch {e} loss 0.1" for e in range(3)], *tb, ""])
    assert diagnose_text(text).first_node == "gpu38"


def test_nccls_proxy_service_names_the_rank_of_an_untagged_nccl_error() -> None:
    """NCCL's proxy thread names its own rank in the "Last error:" torch prints under the exception (src/proxy.cc)."""
    tb = ["Traceback (most recent call last):", '  File "pretrain_gpt.py", line 9, in <module>',
          '  File "/env/torch/distributed/distributed_c10d.py", line 1570, in broadcast',
          "    work = group.broadcast([tensor], opts)",
          "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1275, unhandled cuda error",
          "ncclUnhandledCudaError: Call to CUDA function failed.", "Last error:",
          "[Proxy Service 4] Failed to execute operation Connect from rank 4, retcode 3", ""]
    assert diagnose_text("\n".join(["git: not found"] * 3 + tb)).first_rank == 4


def test_paddle_launchs_failed_container_names_the_failing_rank() -> None:
    text = "\n".join([
        "LAUNCH INFO 2025-06-13 17:49:22,888 Watching Pod: wnfrei, replicas 1, status running",
        "LAUNCH INFO 2025-06-16 10:11:25,793 Pod failed",
        "LAUNCH ERROR 2025-06-16 10:11:25,795 Container failed !!!",
        "Container rank 0 status failed cmd ['python', '-u', 'worker.py'] code -15 log log/workerlog.0",
        "LAUNCH INFO 2025-06-16 10:11:25,795 ------------------------- ERROR LOG DETAIL -------------------------",
        "LAUNCH INFO 2025-06-16 10:11:25,796 Exit code -15", ""])
    assert diagnose_text(text).first_rank == 0


def test_hugging_face_datasets_map_is_preprocessing_not_a_step() -> None:
    """``Dataset.map`` iterates over the data set and reads each example by ``__getitem__``: set-up, not a batch (P3, P8)."""
    head = ["Traceback (most recent call last):",
            '  File "/job/src/open_r1/grpo_vllm.py", line 157, in main']
    inner = ['  File "/env/site-packages/datasets/arrow_dataset.py", line 3466, in iter_outputs',
             '  File "/env/site-packages/datasets/formatting/formatting.py", line 280, in __getitem__',
             "KeyError: 'image_path'"]
    mapping = [*head, '  File "/env/site-packages/datasets/arrow_dataset.py", line 3492, in _map_single', *inner]
    assert not in_train_step(mapping)
    looping = [*head, '  File "/env/site-packages/torch/utils/data/dataloader.py", line 631, in __next__', *inner]
    assert in_train_step(looping)


def test_icefalls_oom_scan_before_its_loop_is_no_step() -> None:
    scan = ("2025-08-26 22:40:07,757 INFO [train.py:1129] (1/3) Sanity check -- see if any of the batches in epoch 0 "
            "would cause OOM.")
    assert not step_progress(scan)
    step = "2025-08-26 22:45:07,757 INFO [train.py:1003] (1/3) Epoch 0, batch 50, loss[loss=0.93], tot_loss[loss=1.02]"
    assert step_progress(step)


def test_a_kill_printed_onto_a_keras_progress_line_is_read_apart_from_its_metrics() -> None:
    """bash's "Killed" right after a Keras Progbar's last refresh: the bar shows where the run was (training, past its
    first step); its "Validation Loss" metric is no evaluation going on."""
    bar = ("\r 45380/300000 [===>..........................] - ETA: 130:45:03 - Train Loss: -22.1312 - Validation Loss: "
           "-19.9884 - Time (s): 2.2343")
    assert without_glued_kill(bar + "Killed") == bar
    assert without_glued_kill(bar) is None
    assert without_glued_kill("the job was Killed") is None  # a word, not a report glued onto a progress line
    lines = ["Epoch 1/1", "\r    20/300000 [..............................] - ETA: 176:38:12 - Train Loss: -6.88",
             bar + "Killed", "/env/multiprocessing/resource_tracker.py:216: UserWarning: leaked semaphore objects"]
    assert phase_of(lines, 2, lines[1:]) == "training"
