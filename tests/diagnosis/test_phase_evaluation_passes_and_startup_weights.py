"""Reader round 15, phase: evaluation passes and the other phase rules (P1-P11 of sample_logs/whole/README.md,
"Phase: rules"), on excerpts written by hand in the formats the libraries print."""

from __future__ import annotations

from gpulens.diagnosis.classifier import Classifier
from gpulens.diagnosis.logread import diagnose_text

_LIB = "/opt/env/lib/python3.10/site-packages"


def _frame(path: str, line: int, func: str, code: str) -> list[str]:
    return [f'  File "{path}", line {line}, in {func}', f"    {code}"]


def _nnunet_epoch(n: int, minute: int) -> list[str]:
    """One epoch of nnU-Net v1's ``NetworkTrainer.run_training`` log (``print_to_log_file`` lines)."""
    return [f"2024-05-02 10:{minute:02d}:00.100000: ", f"epoch:  {n}",
            f"2024-05-02 10:{minute:02d}:40.200000: train loss : -0.7{n}12",
            f"2024-05-02 10:{minute:02d}:45.300000: validation loss: -0.7{n}40",
            f"2024-05-02 10:{minute:02d}:45.310000: Average global foreground Dice: [0.91, 0.88, 0.93]",
            f"2024-05-02 10:{minute:02d}:45.320000: (interpret this as an estimate for the Dice of the different classes. "
            "This is not exact.)",
            f"2024-05-02 10:{minute:02d}:46.000000: lr: 0.0099", f"2024-05-02 10:{minute:02d}:46.010000: This epoch took 46.0 s",
            ""]


def test_a_kill_right_after_nnunets_validation_report_is_evaluation(rules: Classifier) -> None:
    """P4 + P9: the epoch's "train loss" then its "validation loss" and Dice report, then an outside SIGTERM:
    the validation pass is the last activity printed (nothing after its report)."""
    text = "\n".join([*_nnunet_epoch(1, 1), *_nnunet_epoch(2, 2), *_nnunet_epoch(3, 3)[:5],
                      "2024-05-02 10:03:45.320500: Terminated"])
    assert diagnose_text(text, rules).phase == "evaluation"


def test_a_kill_after_the_next_epochs_training_line_stays_training(rules: Classifier) -> None:
    """P2 + P9: the validation report was followed by the next epoch's training line: the kill is in training."""
    text = "\n".join([*_nnunet_epoch(1, 1), *_nnunet_epoch(2, 2), *_nnunet_epoch(3, 3)[:3],
                      "2024-05-02 10:03:41.000000: Terminated"])
    assert diagnose_text(text, rules).phase == "training"


def test_an_epoch_summary_with_a_training_loss_first_is_not_an_evaluation_report(rules: Classifier) -> None:
    """P2: "epoch 3 | loss 0.41 | val_acc 0.82" is the epoch's summary (a training loss before the validation
    metric): a kill after it is training, as before."""
    rows = [f"epoch {n} | loss 0.{50 - n} | val_acc 0.{70 + n}" for n in range(1, 4)]
    text = "\n".join(["Starting training", *rows, "slurmstepd: error: *** JOB 77 ON gpu-1 CANCELLED AT 2024-05-02T10:00:00 ***"])
    assert diagnose_text(text, rules).phase == "training"


def test_a_torchrun_kill_after_a_validation_summary_and_warnings_is_evaluation(rules: Classifier) -> None:
    """P4 + P9: a logging summary "Overall validation pixAcc: .., mIoU: ..", a torch warning, then torchrun's
    agent reacting to SIGTERM ("Received 15 death signal", not the job's activity, P1): evaluation."""
    text = "\n".join([
        "2024-05-02 10:00:00,001 seg INFO: Epoch: 3/120 || Iters: 90/100 || Lr: 0.009 || Loss: 0.4121",
        "2024-05-02 10:00:10,001 seg INFO: Start validation, Total sample: 500",
        "2024-05-02 10:01:00,001 seg INFO: Sample: 499, Validation pixAcc: 0.795, mIoU: 0.219",
        "2024-05-02 10:01:00,101 seg INFO: Overall validation pixAcc: 79.470, mIoU: 22.479",
        f"{_LIB}/torch/distributed/distributed_c10d.py:4807: UserWarning: No device id is provided via "
        "`init_process_group` or `barrier `. Using the current device set by the user.",
        "  warnings.warn(  # warn only once",
        "W0502 10:01:01.000000 4242 torch/distributed/elastic/agent/server/api.py:723] Received 15 death signal, "
        "shutting down workers",
        "W0502 10:01:01.001000 4242 torch/distributed/elastic/multiprocessing/api.py:900] Sending process 4243 "
        "closing signal SIGTERM",
        "Terminated"])
    assert diagnose_text(text, rules).phase == "evaluation"


def test_a_glog_abort_in_caffes_test_pass_is_evaluation(rules: Classifier) -> None:
    """P4: Caffe's ``Solver::TestAll`` logs "Iteration N, Testing net (#k)" before it runs the test net
    (``test_initialization`` at iteration 0 too); a glog ``Check failed`` after it is in that pass. glog writes to
    stderr, the script's own indented dump of the loaded weights to stdout without a final newline: the two glued."""
    dump = [f'  layer "conv{k}":, parameter[0] mean=0.00{k}, std=0.02{k}' for k in range(1, 5)]
    text = "\n".join([
        "I0501 10:00:00.000002 4242 caffe.cpp:239] Starting Optimization",
        "I0501 10:00:00.000003 4242 solver.cpp:293] Solving AgeNet",
        "I0501 10:00:00.000004 4242 solver.cpp:294] Learning Rate Policy: step",
        *dump[:-1],
        f"{dump[-1]}I0501 10:00:00.000005 4242 solver.cpp:337] Iteration 0, Testing net (#0)",
        "F0501 10:00:00.000006 4242 net.cpp:703] Check failed: target_blobs[j]->shape() == source_blob->shape() "
        "Cannot share param 0 weights from layer 'fc_final'; shape mismatch.",
        "*** Check failure stack trace: ***",
        "    @     0x7f1c2b3c4daa  (unknown)",
        "Aborted (core dumped)"])
    assert diagnose_text(text, rules).phase == "evaluation"


def test_a_glog_abort_after_caffes_next_training_iteration_is_training(rules: Classifier) -> None:
    """P2: the test pass reported its outputs and training went on ("Iteration 100, loss = ..."): training."""
    text = "\n".join([
        "I0501 10:00:00.000005 4242 solver.cpp:337] Iteration 0, Testing net (#0)",
        "I0501 10:00:01.000000 4242 solver.cpp:404]     Test net output #0: accuracy = 0.12",
        "I0501 10:00:02.000000 4242 solver.cpp:218] Iteration 0 (0 iter/s, 1.2s/100 iters), loss = 4.61",
        "I0501 10:00:09.000000 4242 solver.cpp:218] Iteration 100 (14.2 iter/s, 7.0s/100 iters), loss = 3.21",
        "I0501 10:00:16.000000 4242 solver.cpp:218] Iteration 200 (14.2 iter/s, 7.0s/100 iters), loss = 2.95",
        "F0501 10:00:17.000000 4242 math_functions.cu:79] Check failed: error == cudaSuccess (2 vs. 0)  out of memory",
        "*** Check failure stack trace: ***",
        "Aborted (core dumped)"])
    assert diagnose_text(text, rules).phase == "training"


def test_a_ctrl_c_while_fetching_a_validation_batch_is_evaluation(rules: Classifier) -> None:
    """P1 + P4 + P9: the job's frame stops on ``for i, vdata in enumerate(validation_loader):`` (PyTorch's
    "Training with PyTorch" tutorial's validation loop), torch's DataLoader fetching below it: the validation
    pass, though a training epoch's batches were printed above."""
    tb = ["Traceback (most recent call last):",
          *_frame("/home/u/proj/train.py", 461, "<module>", "for i, vdata in enumerate(validation_loader):"),
          *_frame(f"{_LIB}/torch/utils/data/dataloader.py", 630, "__next__", "data = self._next_data()"),
          *_frame(f"{_LIB}/torch/utils/data/dataloader.py", 674, "_next_data",
                  "data = self._dataset_fetcher.fetch(index)  # may raise StopIteration"),
          *_frame(f"{_LIB}/torch/utils/data/_utils/fetch.py", 51, "fetch",
                  "data = [self.dataset[idx] for idx in possibly_batched_index]"),
          *_frame("/home/u/proj/train.py", 147, "__getitem__", "clip = self.transform(video)"),
          "KeyboardInterrupt"]
    text = "\n".join(["EPOCH 1:", *(f"  batch {k} loss: 0.{60 - k}" for k in range(1, 6)), *tb])
    assert diagnose_text(text, rules).phase == "evaluation"


def test_a_ctrl_c_while_fetching_a_training_batch_stays_training(rules: Classifier) -> None:
    """P2 + P9: the same fetch under ``for i, data in enumerate(training_loader):`` is the training loop's."""
    tb = ["Traceback (most recent call last):",
          *_frame("/home/u/proj/train.py", 420, "<module>", "for i, data in enumerate(training_loader):"),
          *_frame(f"{_LIB}/torch/utils/data/dataloader.py", 630, "__next__", "data = self._next_data()"),
          *_frame(f"{_LIB}/torch/utils/data/dataloader.py", 674, "_next_data",
                  "data = self._dataset_fetcher.fetch(index)  # may raise StopIteration"),
          *_frame("/home/u/proj/train.py", 147, "__getitem__", "clip = self.transform(video)"),
          "KeyboardInterrupt"]
    text = "\n".join(["EPOCH 1:", *(f"  batch {k} loss: 0.{60 - k}" for k in range(1, 6)), *tb])
    assert diagnose_text(text, rules).phase == "training"


def _config_from_pretrained(path: str) -> list[str]:
    """transformers' frames of ``PretrainedConfig.from_pretrained(path)`` failing to find the folder."""
    return [*_frame(f"{_LIB}/transformers/configuration_utils.py", 541, "from_pretrained",
                    "config_dict, kwargs = cls.get_config_dict(pretrained_model_name_or_path, **kwargs)"),
            *_frame(f"{_LIB}/transformers/configuration_utils.py", 629, "_get_config_dict", "resolved_config_file = cached_file("),
            *_frame(f"{_LIB}/transformers/utils/hub.py", 469, "cached_file", "raise EnvironmentError("),
            f"OSError: Incorrect path_or_model_id: '{path}'. Please provide either the path to a local folder or the "
            "repo_id of a model on the Hub."]


def test_a_pretrained_encoder_loaded_by_a_models_constructor_is_startup(rules: Classifier) -> None:
    """P3 + P7: the model's ``__init__`` builds its speech encoder with ``Wav2Vec2BertConfig.from_pretrained`` of a
    base model's folder: building the model, base files, ``startup`` (not the job's own checkpoint)."""
    tb = ["Traceback (most recent call last):",
          *_frame("/home/u/diar/infer.py", 478, "<module>", "main(args)"),
          *_frame("/home/u/diar/infer.py", 297, "main", "model = TSVADModel(cfg=model_cfg, device=device)"),
          *_frame("/home/u/diar/model.py", 206, "__init__", "self.speech_encoder = self.create_speech_encoder(cfg)"),
          *_frame("/home/u/diar/model.py", 381, "create_speech_encoder",
                  "conf = Wav2Vec2BertConfig.from_pretrained(cfg.speech_encoder_config)"),
          *_config_from_pretrained("/data/model_hub/w2v-bert2.0/config.json")]
    text = "\n".join(["2024-05-02 10:00:00 INFO loading data from /data/test.json", *tb])
    assert diagnose_text(text, rules).phase == "startup"


def test_a_constructors_from_pretrained_of_a_step_checkpoint_stays_a_load(rules: Classifier) -> None:
    """P7: a ``from_pretrained`` of a step-numbered checkpoint folder the job wrote is ``checkpoint_load``, wherever it
    is called from."""
    tb = ["Traceback (most recent call last):",
          *_frame("/home/u/proj/infer.py", 40, "<module>", "model = Wrapper(args.ckpt)"),
          *_frame("/home/u/proj/model.py", 20, "__init__", "self.config = AutoConfig.from_pretrained(path)"),
          *_config_from_pretrained("outputs/run3/checkpoint-500")]
    assert diagnose_text("\n".join(tb), rules).phase == "checkpoint_load"


def test_a_remote_code_file_missing_from_a_local_model_folder_is_startup(rules: Classifier) -> None:
    """P3 + P7: ``AutoModel.from_pretrained(path, trust_remote_code=True)`` fetches the model's own code through
    transformers' ``get_class_from_dynamic_module`` (``dynamic_module_utils.py``) to build the model class, before any
    weights are read: a file of that code missing is ``startup``."""
    tb = ["Traceback (most recent call last):",
          *_frame("/home/u/proj/train.py", 88, "<module>", "main()"),
          *_frame("/home/u/proj/train.py", 60, "main",
                  "model = AutoModelForCausalLM.from_pretrained(args.model, trust_remote_code=True)"),
          *_frame(f"{_LIB}/transformers/models/auto/auto_factory.py", 553, "from_pretrained",
                  "model_class = get_class_from_dynamic_module("),
          *_frame(f"{_LIB}/transformers/dynamic_module_utils.py", 501, "get_class_from_dynamic_module",
                  "final_module = get_cached_module_file("),
          *_frame(f"{_LIB}/transformers/dynamic_module_utils.py", 326, "get_cached_module_file",
                  "resolved_module_file = cached_file("),
          *_frame(f"{_LIB}/transformers/utils/hub.py", 456, "cached_file", "raise EnvironmentError("),
          "OSError: /models/base-7b does not appear to have a file named modeling_base.py. Checkout "
          "'https://huggingface.co//models/base-7b/tree/None' for available files."]
    assert diagnose_text("\n".join(["Loading model /models/base-7b", *tb]), rules).phase == "startup"


def test_glibcs_exception_not_rethrown_at_exit_is_shutdown(rules: Classifier) -> None:
    """P10: glibc's "FATAL: exception not rethrown" (``nptl/unwind.c``) is a thread's forced unwind swallowed by C++
    code; CPython makes daemon threads call ``pthread_exit`` while the interpreter finalizes, so it comes at exit, and
    torchrun reports the abort (exitcode -6): ``shutdown``, though training steps are the last lines above it."""
    steps = [f"[2025-02-18 07:5{k}:22,045] [INFO] [logging.py:96:log_dist] [Rank 0] step={k * 10}, skipped=0, "
             "lr=[0.0001], mom=[(0.9, 0.999)]" for k in range(1, 5)]
    text = "\n".join([*steps, "FATAL: exception not rethrown",
                      "[2025-02-18 08:00:01,000] torch.distributed.elastic.multiprocessing.api: [ERROR] failed "
                      "(exitcode: -6) local_rank: 0 (pid: 138257) of binary: /usr/bin/python"])
    assert diagnose_text(text, rules).phase == "shutdown"


def _glibc_error(frames: list[str]) -> list[str]:
    """glibc's malloc check report (``malloc_printerr``) with its backtrace, then the job script's report."""
    return ["*** Error in `./simplex': corrupted size vs. prev_size: 0x00000000006ba7b0 ***",
            "======= Backtrace: =========", "/lib64/libc.so.6(+0x80c37)[0x2aaab0d63c37]",
            "/lib64/libc.so.6(__libc_calloc+0xb4)[0x2aaab0d69214]", *frames,
            "======= Memory map: ========", "00400000-00418000 r-xp 00000000 00:2a 2138992814    /home/u/simplex",
            "/var/spool/torque/mom_priv/jobs/11084.SC: line 26: 158179 Aborted                 (core dumped) ./simplex"]


def test_a_native_crash_in_glibcs_exit_handlers_is_shutdown(rules: Classifier) -> None:
    """P10: the backtrace runs through ``__cxa_finalize`` (glibc's exit path calling a library's static
    destructors, here libcublas'): the crash is at exit."""
    frames = ["/usr/local/cuda/lib64/libcublas.so.10(+0x5ae865)[0x2aaaab711865]",
              "/lib64/libc.so.6(__cxa_finalize+0x9a)[0x2aaab0d1d05a]",
              "/usr/local/cuda/lib64/libcublas.so.10(+0x28056)[0x2aaaab18b056]"]
    assert diagnose_text("\n".join(["nvcc main.cu -o simplex", *_glibc_error(frames)]), rules).phase == "shutdown"


def test_a_native_crash_elsewhere_is_not_shutdown(rules: Classifier) -> None:
    """P9: the same report without exit-handler frames says nothing of an exit (no output of the program: start-up)."""
    frames = ["/usr/local/cuda/lib64/libcublas.so.10(+0x5ae865)[0x2aaaab711865]", "./simplex[0x401a2b]",
              "/lib64/libc.so.6(__libc_start_main+0xf5)[0x2aaab0d0a445]"]
    assert diagnose_text("\n".join(["nvcc main.cu -o simplex", *_glibc_error(frames)]), rules).phase != "shutdown"


def _stderr_only(cancelled_at: str, backward: bool = True) -> str:
    """A Slurm ``.err`` of a DeepSpeed/GPT-NeoX run whose loop output went to stdout: c10d's set-up warnings (c10's
    C++ log, month unpadded), DeepSpeed's op loading, autograd warnings of the first backward, then the cancel."""
    setup = [f"[W106 12:08:5{k}.140016912 socket.cpp:752] [c10d] The client socket cannot be initialized to connect to "
             "[node-04]:12802 (errno: 97 - Address family not supported by protocol)." for k in range(4)]
    ops = ["Using /home/u/.cache/torch_extensions/py311_cu118 as PyTorch extensions root...",
           "Loading extension module fused_adam..."] * 4
    warn = [f"{_LIB}/torch/autograd/graph.py:825: UserWarning: c10d::broadcast_: an autograd kernel was not registered "
            "to the Autograd key(s) but we are trying to backprop through it.",
            "  return Variable._execution_engine.run_backward(  # Calls into the C++ engine to run the backward pass"] * 2
    end = [f"slurmstepd-node-04: error: *** JOB 3981070 ON node-04 CANCELLED AT {cancelled_at} ***"]
    return "\n".join([*setup, *ops, *(warn if backward else []), *end])


def test_a_cancel_hours_after_the_first_backward_in_a_stderr_only_file_is_training(rules: Classifier) -> None:
    """P2 (c): no loop output in the file; autograd's warning from its engine's ``run_backward`` shows a backward
    pass ran; the cancel came 3.5 h after the set-up's last timestamp: more than an hour in the loop, ``training``."""
    assert diagnose_text(_stderr_only("2025-01-06T15:37:46"), rules).phase == "training"


def test_a_cancel_minutes_after_the_first_backward_is_first_step(rules: Classifier) -> None:
    """P2 (c): the same file, cancelled 10 minutes after the loop began: ``first_step``."""
    assert diagnose_text(_stderr_only("2025-01-06T12:19:00"), rules).phase == "first_step"


def test_a_cancel_hours_later_without_a_loop_mark_stays_startup(rules: Classifier) -> None:
    """P2 (c) + P9: without any mark of the loop (no backward warning) the hours say nothing: ``startup``."""
    assert diagnose_text(_stderr_only("2025-01-06T15:37:46", backward=False), rules).phase == "startup"


def test_a_kill_after_the_loops_announcement_is_first_step(rules: Classifier) -> None:
    """P1 + P3 + P9: the program announced its training loop ("START TRAIN 0", then its first batch) and the kernel's
    OOM killer ended it before any step was logged: the kill takes the last activity's phase, ``first_step``."""
    text = "\n".join(["name: 24.b_2, param.size: torch.Size([1024])",
                      "2025-02-27 08:53:52.016434 - START TRAIN 0",
                      "[ 00|00 ] 2025-02-27 08:53:52.016472 - START BATCH 0",
                      "./scripts/run.sh: line 42:  8494 Killed                  python -m pactum.run --nnodes=8"])
    assert diagnose_text(text, rules).phase == "first_step"


def test_an_error_line_after_the_loops_announcement_stays_startup(rules: Classifier) -> None:
    """P3: an error printed without a traceback after "Starting training with ..." may be the loop's own set-up (its
    data load): only a kill takes the announcement as the last activity."""
    text = "\n".join(["2025-07-18 18:11:42,814 - INFO - Starting training with n_images=10304",
                      "2025-07-18 18:11:42,815 - INFO - Loading data from datasets/fly001.npz",
                      "2025-07-18 18:11:42,816 - ERROR - An error occurred during execution: [Errno 2] No such file or "
                      "directory: 'datasets/fly001.npz'"])
    assert diagnose_text(text, rules).phase == "startup"


_HF_TRAIN = ["***** Running training *****", "  Num examples = 1000", " 10%|█         | 50/500 [01:00<09:00,  1.2s/it]",
             "{'loss': 2.31, 'learning_rate': 4.5e-05, 'epoch': 0.1}", " 20%|██        | 100/500 [02:00<08:00,  1.2s/it]"]
_HF_EVAL = ["***** Running Evaluation *****", "  Num examples = 500", "  Batch size = 8",
            "\r  0%|          | 0/63 [00:00<?, ?it/s]\r  5%|▍         | 3/63 [00:01<00:20,  2.9it/s]"]
_TIME_LIMIT = "slurmstepd: error: *** JOB 77 ON gpu-1 CANCELLED AT 2024-05-02T10:00:00 DUE TO TIME LIMIT ***"


def test_a_time_limit_inside_the_trainers_evaluation_loop_is_evaluation(rules: Classifier) -> None:
    """P4 + P9: the Hugging Face Trainer's ``evaluation_loop`` logged "***** Running Evaluation *****" and its
    prediction bar (no description, like the training bar) runs; no metrics dict yet: the pass was going on."""
    assert diagnose_text("\n".join([*_HF_TRAIN, *_HF_EVAL, _TIME_LIMIT]), rules).phase == "evaluation"


def test_an_nccl_timeout_inside_the_trainers_evaluation_loop_is_evaluation(rules: Classifier) -> None:
    """P4: the same pass ended by ProcessGroupNCCL's watchdog (an all-gather of the predictions timing out)."""
    watchdog = ("[rank0]:[E502 10:00:00.100000 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation "
                "timeout: WorkNCCL(SeqNum=900, OpType=ALLGATHER, NumelIn=1, NumelOut=2, Timeout(ms)=600000) ran for "
                "600051 milliseconds before timing out.")
    assert diagnose_text("\n".join([*_HF_TRAIN, *_HF_EVAL, watchdog]), rules).phase == "evaluation"


def test_a_time_limit_after_the_evaluation_and_more_training_is_training(rules: Classifier) -> None:
    """P2 + P4: the pass logged its metrics and training went on (its next log dict and bar): training."""
    after = ["{'eval_loss': 2.1, 'eval_runtime': 20.1, 'epoch': 0.2}", " 30%|███       | 150/500 [03:20<07:00,  1.2s/it]",
             "{'loss': 2.01, 'learning_rate': 4e-05, 'epoch': 0.3}", " 31%|███       | 155/500 [03:26<07:00,  1.2s/it]"]
    assert diagnose_text("\n".join([*_HF_TRAIN, *_HF_EVAL, *after, _TIME_LIMIT]), rules).phase == "training"


def test_a_kill_in_lightnings_test_after_fit_is_evaluation(rules: Classifier) -> None:
    """P10: "`Trainer.fit` stopped: `max_epochs=3` reached." then ``trainer.test()``'s "Testing DataLoader 0:" bar short
    of its total when the time limit hits: the final test run by the job, ``evaluation`` (not its shutdown)."""
    text = "\n".join(["Epoch 2: 100%|██████████| 100/100 [00:20<00:00, 5.0it/s, v_num=1]",
                      "`Trainer.fit` stopped: `max_epochs=3` reached.",
                      "Testing DataLoader 0:  30%|███       | 3/10 [00:01<00:02, 2.5it/s]", _TIME_LIMIT])
    assert diagnose_text(text, rules).phase == "evaluation"


def test_a_kill_after_a_validation_setting_at_setup_stays_startup(rules: Classifier) -> None:
    """P3 + P9: "Validation split ratio: 0.1" printed while the data are prepared names no pass: with no training
    progress above, a kill after it is still ``startup``."""
    text = "\n".join(["Loading dataset from /data/train.csv", "Validation split ratio: 0.1",
                      "slurmstepd: error: *** JOB 77 ON gpu-1 CANCELLED AT 2024-05-02T10:00:00 ***"])
    assert diagnose_text(text, rules).phase == "startup"


def _torch_load_fails() -> list[str]:
    return [*_frame(f"{_LIB}/torch/serialization.py", 1004, "load", "with _open_zipfile_reader(opened_file) as opened_zipfile:"),
            *_frame(f"{_LIB}/torch/serialization.py", 456, "__init__", "super().__init__(torch._C.PyTorchFileReader(name_or_buffer))"),
            "RuntimeError: PytorchStreamReader failed reading zip archive: failed finding central directory"]


def test_a_corrupt_download_of_timm_pretrained_weights_is_startup(rules: Classifier) -> None:
    """P7: ``timm.create_model(..., pretrained=True)`` fetches the published weights (timm ``_builder.load_pretrained``
    -> ``torch.hub.load_state_dict_from_url``); a corrupt cached download is base weights while building the model."""
    tb = ["Traceback (most recent call last):",
          *_frame("/home/u/proj/train.py", 120, "<module>", "main()"),
          *_frame("/home/u/proj/train.py", 60, "main", "model = timm.create_model(args.model, pretrained=True)"),
          *_frame(f"{_LIB}/timm/models/_factory.py", 114, "create_model", "model = create_fn(pretrained=pretrained, **kwargs)"),
          *_frame(f"{_LIB}/timm/models/_builder.py", 418, "build_model_with_cfg", "load_pretrained("),
          *_frame(f"{_LIB}/timm/models/_builder.py", 186, "load_pretrained",
                  "state_dict = load_state_dict_from_url(pretrained_loc, map_location='cpu', progress=_DOWNLOAD_PROGRESS)"),
          *_frame(f"{_LIB}/torch/hub.py", 767, "load_state_dict_from_url", "return torch.load(cached_file, map_location=map_location)"),
          *_torch_load_fails()]
    assert diagnose_text("\n".join(tb), rules).phase == "startup"


def test_timms_own_checkpoint_path_stays_a_load(rules: Classifier) -> None:
    """P7: ``create_model(checkpoint_path=...)`` reads a checkpoint through timm's ``_helpers.load_checkpoint``, not the
    published weights: ``checkpoint_load`` as before."""
    tb = ["Traceback (most recent call last):",
          *_frame("/home/u/proj/validate.py", 60, "<module>", "model = timm.create_model(args.model, checkpoint_path=args.ckpt)"),
          *_frame(f"{_LIB}/timm/models/_factory.py", 121, "create_model", "load_checkpoint(model, checkpoint_path)"),
          *_frame(f"{_LIB}/timm/models/_helpers.py", 76, "load_checkpoint",
                  "state_dict = load_state_dict(checkpoint_path, use_ema, device=device)"),
          *_frame(f"{_LIB}/timm/models/_helpers.py", 50, "load_state_dict", "checkpoint = torch.load(checkpoint_path)"),
          *_torch_load_fails()]
    assert diagnose_text("\n".join(tb), rules).phase == "checkpoint_load"


def test_a_kill_during_fairseqs_tqdm_validation_bar_is_evaluation(rules: Classifier) -> None:
    """P4 + P9: fairseq's validation bar carries its progress-bar prefix "epoch 001 | valid on 'valid' subset"
    (``--log-format tqdm``), short of its total when the job is cancelled: the validation pass."""
    text = "\n".join([
        "epoch 001:  99%|█████████▉| 990/1000 [10:00<00:06, 1.6it/s, loss=9.1, ppl=500, num_updates=990, lr=1e-4]",
        "epoch 001 | valid on 'valid' subset:  30%|███       | 30/100 [00:05<00:10,  6.0it/s]",
        "slurmstepd: error: *** JOB 77 ON gpu-1 CANCELLED AT 2024-05-02T10:00:00 ***"])
    assert diagnose_text(text, rules).phase == "evaluation"


def _ds_chat(after: list[str]) -> str:
    """DeepSpeed-Chat step 1's epoch loop (``print_rank_0`` lines), its perplexity evaluation banner, then ``after``."""
    return "\n".join(["***** Running training *****", "Beginning of Epoch 1/2, Total Micro Batches 100",
                      "Epoch: 0, Step: 99, Rank: 0, loss = 1.71", "***** Evaluating perplexity, Epoch 1/2 *****", *after,
                      "slurmstepd: error: *** JOB 77 ON gpu-1 CANCELLED AT 2024-05-02T10:00:00 ***"])


def test_a_kill_after_deepspeed_chats_evaluation_banner_is_evaluation(rules: Classifier) -> None:
    """P4 + P9: "***** Evaluating perplexity, Epoch 1/2 *****" announces the evaluation (its "Epoch 1/2" is the epoch
    it belongs to, no step's count) and no result followed: the pass was going on."""
    assert diagnose_text(_ds_chat([]), rules).phase == "evaluation"


def test_a_kill_after_deepspeed_chats_evaluation_results_and_next_epoch_is_training(rules: Classifier) -> None:
    """P2: the evaluation printed its results and the next epoch logged a step: training."""
    after = ["ppl: 5.21, loss: 1.65", "Beginning of Epoch 2/2, Total Micro Batches 100", "Epoch: 1, Step: 10, Rank: 0, loss = 1.60"]
    assert diagnose_text(_ds_chat(after), rules).phase == "training"


def test_an_error_building_the_validation_metrics_dict_is_evaluation(rules: Classifier) -> None:
    """P4: the innermost frame's source line writes the tracker keys of the validation metrics ("val/loss", wandb's
    section prefix): the job is logging its evaluation's results, though the frames above are the training loop's."""
    tb = ["Traceback (most recent call last):",
          *_frame("/home/u/proj/main.py", 247, "<module>", "main()"),
          *_frame("/home/u/proj/main.py", 241, "main", "trainer.train(local_rank)"),
          *_frame("/home/u/proj/trainer.py", 263, "train", "self.log_val()"),
          *_frame("/home/u/proj/trainer.py", 963, "log_val", '"val/loss_clip": self.val_loss_clip_sum / (self.val_i + 1),'),
          "AttributeError: 'Trainer' object has no attribute 'val_loss_clip_sum'"]
    text = "\n".join([*(f">>> Epoch0 | Iter{k} | loss {0.9 - k / 100:.2f}" for k in range(5)), *tb])
    assert diagnose_text(text, rules).phase == "evaluation"


def test_an_error_building_an_epoch_summary_of_both_stays_training(rules: Classifier) -> None:
    """P2: a dict of both the training and the validation keys is the epoch's summary: as before (training)."""
    tb = ["Traceback (most recent call last):",
          *_frame("/home/u/proj/main.py", 247, "<module>", "main()"),
          *_frame("/home/u/proj/main.py", 200, "main", 'wandb_log({"train/loss": tl, "val/loss": vl / n_val})'),
          "ZeroDivisionError: division by zero"]
    text = "\n".join([*(f">>> Epoch0 | Iter{k} | loss {0.9 - k / 100:.2f}" for k in range(5)), *tb])
    assert diagnose_text(text, rules).phase == "training"
