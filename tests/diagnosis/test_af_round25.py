"""Reader round 25, slice af: excerpts written by hand in the formats the libraries print (never pasted
from a log). Each test names the library source of its format."""

from __future__ import annotations

from gpulens.diagnosis.logread.whole import diagnose_text


def _text(lines: list[str]) -> str:
    return "\n".join(lines) + "\n"


# CPython 3.11+ traceback (Lib/traceback.py: frame, source line, caret line) of a torch.save statement whose
# argument is built through torch/nn/modules/module.py Module.__getattr__ ("'{type}' object has no attribute
# '{name}'"): README C3 (saving model state that fails is checkpoint_error) and P6 (checkpoint_save).
_SAVE_ARG = [
    "epoch 30 | train loss 0.41 | val acc 0.83",
    "epoch 31 | train loss 0.40 | val acc 0.84",
    "Training done, writing the encoder weights",
    "Traceback (most recent call last):",
    '  File "/home/u/proj/run.py", line 120, in <module>',
    "    finish(net, args)",
    '  File "/home/u/proj/run.py", line 95, in finish',
    "    torch.save(net.backbone.encoder.state_dict(), args.out)",
    "               ^^^^^^^^^^^^^^^^^^^^",
    '  File "/opt/conda/lib/python3.11/site-packages/torch/nn/modules/module.py", line 1709, in __getattr__',
    "    raise AttributeError(f\"'{type(self).__name__}' object has no attribute '{name}'\")",
    "AttributeError: 'ConvBackbone' object has no attribute 'encoder'",
]


def test_an_error_building_a_torch_save_argument_is_a_failed_model_save() -> None:
    got = diagnose_text(_text(_SAVE_ARG))
    assert got.diagnosis.category == "checkpoint_error"
    assert got.phase == "checkpoint_save"
    assert got.indicator_lines == [len(_SAVE_ARG)]


def test_the_same_attribute_error_outside_a_save_stays_a_code_error() -> None:
    lines = [*_SAVE_ARG[:7], "    feats = net.backbone.encoder(x)", *_SAVE_ARG[8:]]
    got = diagnose_text(_text(lines))
    assert got.diagnosis.category == "semantic_error"
    assert got.phase != "checkpoint_save"


# pydicom 2.x pixel_data_handlers/numpy_handler.py get_pixeldata, reached from Dataset.pixel_array: a DICOM file
# without a pixel data element, after many good ones (README C4: one record lacks a field the others have; C5 data).
_DICOM = [
    "Files to process: 5000",
    "  0%|          | 0/5000 [00:00<?, ?it/s]",
    " 31%|###       | 1550/5000 [20:11<44:02,  1.31it/s]",
    "Traceback (most recent call last):",
    '  File "/srv/deid/run.py", line 44, in <module>',
    "    scrub(ds)",
    '  File "/srv/deid/run.py", line 21, in scrub',
    "    img = ds.pixel_array",
    '  File "/srv/venv/lib/python3.10/site-packages/pydicom/dataset.py", line 1955, in pixel_array',
    "    self.convert_pixel_data()",
    '  File "/srv/venv/lib/python3.10/site-packages/pydicom/pixel_data_handlers/numpy_handler.py", line 174, in get_pixeldata',
    "    raise AttributeError(",
    "AttributeError: Unable to convert the pixel data: one of Pixel Data, Float Pixel Data or Double Float Pixel Data"
    " must be present in the dataset",
]


def test_a_dicom_file_without_pixel_data_is_incorrect_input() -> None:
    got = diagnose_text(_text(_DICOM))
    assert (got.diagnosis.category, got.diagnosis.origin) == ("incorrect_input", "data")
    assert got.indicator_lines == [len(_DICOM)]


def test_pydicom_3_and_a_file_that_is_not_dicom_are_incorrect_input() -> None:
    v3 = "AttributeError: The dataset has no 'Pixel Data', 'Float Pixel Data' or 'Double Float Pixel Data' element," \
         " no pixel data to decode"
    not_dicom = "pydicom.errors.InvalidDicomError: File is missing DICOM File Meta Information header or the 'DICM'" \
                " prefix is missing from the header. Use force=True to force reading."
    for last in (v3, not_dicom):
        got = diagnose_text(_text([*_DICOM[:-1], last]))
        assert got.diagnosis.category == "incorrect_input", last


# PyTorch aten/src/ATen/MapAllocator.cpp, Windows branch ("Couldn't open shared file mapping: <name>, error code:
# <N>"), in a DataLoader worker's collate (torch/storage.py _new_shared); 1455 is Win32 ERROR_COMMITMENT_LIMIT:
# README C6's exception, shared memory is host memory (cpu_oom).
_WIN_SHM = [
    "epoch 1",
    "  0%|          | 0/390 [00:00<?, ?it/s]",
    "Traceback (most recent call last):",
    '  File "C:\\work\\fit.py", line 80, in <module>',
    "    for x, y in loader:",
    '  File "C:\\conda\\envs\\t\\lib\\site-packages\\torch\\utils\\data\\dataloader.py", line 1371, in _process_data',
    "    data.reraise()",
    '  File "C:\\conda\\envs\\t\\lib\\site-packages\\torch\\_utils.py", line 694, in reraise',
    "    raise exception",
    "RuntimeError: Caught RuntimeError in DataLoader worker process 2.",
    "Original Traceback (most recent call last):",
    '  File "C:\\conda\\envs\\t\\lib\\site-packages\\torch\\utils\\data\\_utils\\collate.py", line 160, in collate_tensor_fn',
    "    storage = elem._typed_storage()._new_shared(numel, device=elem.device)",
    '  File "C:\\conda\\envs\\t\\lib\\site-packages\\torch\\storage.py", line 260, in _new_shared',
    "    return cls._new_using_filename_cpu(size)",
    "RuntimeError: Couldn't open shared file mapping: <torch_5120_7731904_3>, error code: <1455>",
]


def test_a_windows_shared_mapping_refused_for_commit_is_host_memory() -> None:
    got = diagnose_text(_text(_WIN_SHM))
    assert got.diagnosis.category == "cpu_oom"
    assert got.indicator_lines == [len(_WIN_SHM)]


def test_a_windows_shared_mapping_refused_for_another_reason_is_not_memory() -> None:
    got = diagnose_text(_text([*_WIN_SHM[:-1], _WIN_SHM[-1].replace("<1455>", "<5>")]))
    assert got.diagnosis.category != "cpu_oom"


def _epoch_fn(call: str) -> list[str]:
    """A script's one epoch function called from its training loop (CPython traceback frames), failing in its
    forward (torch.OutOfMemoryError, c10/cuda/CUDACachingAllocator.cpp)."""
    return [
        "Epoch 1/20",
        "Traceback (most recent call last):",
        '  File "/home/u/cls/main.py", line 90, in <module>',
        "    fit(model, loaders, opt)",
        '  File "/home/u/cls/main.py", line 61, in fit',
        f"    loss, acc = {call}",
        '  File "/home/u/cls/main.py", line 33, in do_epoch',
        "    out = model(x)",
        '  File "/opt/venv/lib/python3.10/site-packages/torch/nn/modules/module.py", line 1527, in _call_impl',
        "    return forward_call(*args, **kwargs)",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of"
        " 8.00 GiB of which 3.00 MiB is free.",
    ]


def test_an_epoch_function_run_over_the_validation_loader_is_evaluation() -> None:
    # P4: a script's own validation pass, whatever its function is named
    got = diagnose_text(_text(_epoch_fn("do_epoch(model, loader=valid_loader, opt=opt, grad=False)")))
    assert got.phase == "evaluation"


def test_an_epoch_function_given_the_training_loader_is_not_evaluation() -> None:
    for call in ("do_epoch(model, loader=train_loader, opt=opt, grad=True)", "do_epoch(model, train_dl, val_dl)"):
        assert diagnose_text(_text(_epoch_fn(call))).phase != "evaluation", call


# A Node.js pipeline runner (lib/child_process.js checkExecSyncError: new Error("Command failed: " + cmd)) reporting
# its Python stage that failed: the runner's verdict, not labelled when the stage printed its error (README R8).
_RUNNER = [
    "stage 3/4: scoring",
    "Traceback (most recent call last):",
    '  File "/srv/pipe/score.py", line 12, in <module>',
    "    table = frame[{'a', 'b'}]",
    "TypeError: Passing a set as an indexer is not supported. Use a list instead.",
    "[2025-02-03 10:11:12] Error: Command failed: python -m pipe.score -c cfg.yaml",
]


def test_a_node_runners_command_failed_is_a_verdict() -> None:
    got = diagnose_text(_text(_RUNNER))
    assert got.indicator_lines == [5]


def test_a_runners_verdict_alone_is_the_line() -> None:
    got = diagnose_text(_text([_RUNNER[0], "scoring 120 rows", _RUNNER[-1]]))
    assert got.indicator_lines == [3]


# A job script running three programs one after another (bash jobs.c notify_of_job_status for a non-interactive
# shell: "run.sh: line N:  PID Killed   command"): each report ends that program's process; only the last
# program's end is the failure (README R1).
_THREE_RUNS = [
    "== run a ==",
    "step 100 loss 3.1",
    "step 200 loss 2.9",
    "Terminated",
    "== run b ==",
    "step 0 loss 9.8",
    "./run.sh: line 4:  3865 Killed                  python3 fit.py --model b",
    "== run c ==",
    "compiling model ...",
    "./run.sh: line 5:  8004 Killed                  python3 fit.py --model c",
    "=== ALL DONE ===",
]


def test_only_the_last_programs_kill_is_the_failure() -> None:
    assert diagnose_text(_text(_THREE_RUNS)).indicator_lines == [10]


def test_a_kill_and_the_schedulers_cause_line_are_one_run() -> None:
    # slurmstepd's oom_kill count right after the shell's report: the same kill (README R6: both lines)
    lines = [*_THREE_RUNS[4:7], "slurmstepd: error: Detected 1 oom_kill event in StepId=17.batch. Some of the step"
             " tasks have been OOM Killed."]
    assert diagnose_text(_text(lines)).indicator_lines == [3, 4]


# IBM Spectrum MPI's launcher without its environment generator: it says it goes on ("Continuing to launch"), and the
# job ran until its own error (README R1: not the failure).
_SMPI = [
    "Error: SMPI environment generator script not found at:",
    "Path : /sw/env/bin/alias.pl",
    "Error: No such file or directory",
    "Warning. Failed to setup the Spectrum MPI environment.",
    "Continuing to launch. Beware, the Spectrum MPI environment may not be completely setup.",
    "building model ...",
    "Traceback (most recent call last):",
    '  File "/sw/proj/pretrain.py", line 30, in <module>',
    "    main()",
    "ValueError: num_layers (30) must be divisible by pipeline stages (4)",
]


def test_a_launcher_error_it_continues_from_is_not_the_failure() -> None:
    assert diagnose_text(_text(_SMPI)).indicator_lines == [len(_SMPI)]


# transformers' generation (generation/utils.py GenerationMixin.generate) called by an inference script with no
# training function around it: P5, a model.generate loop is evaluation.
_GENERATE = [
    "Loading checkpoint shards: 100%|##########| 4/4 [00:20<00:00,  5.00s/it]",
    "Setting `pad_token_id` to `eos_token_id`:2 for open-end generation.",
    "Traceback (most recent call last):",
    '  File "/home/u/probe/run.py", line 88, in <module>',
    "    main()",
    '  File "/home/u/probe/run.py", line 61, in main',
    "    out = model.generate(**batch, max_new_tokens=256)",
    '  File "/env/lib/python3.10/site-packages/transformers/generation/utils.py", line 1576, in generate',
    "    result = self._sample(",
    '  File "/env/lib/python3.10/site-packages/transformers/models/llama/modeling_llama.py", line 1228, in forward',
    "    logits = logits.float()",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 6.00 GiB. GPU 0 has a total capacity of 23.6 GiB",
]


def test_an_inference_jobs_generate_is_evaluation() -> None:
    assert diagnose_text(_text(_GENERATE)).phase == "evaluation"


def test_generate_inside_a_training_step_is_not_evaluation() -> None:
    rollout = [*_GENERATE[:5], '  File "/home/u/probe/run.py", line 70, in training_step',
               "    out = model.generate(**batch, max_new_tokens=256)", *_GENERATE[7:]]
    assert diagnose_text(_text(rollout)).phase != "evaluation"


# Slurm's time limit (slurmstepd "*** JOB N ON host CANCELLED AT ... DUE TO TIME LIMIT ***") right after
# transformers read the model's shards ("Loading checkpoint shards", modeling_utils.py): P9 takes the last activity
# shown, base weights read while the model is built (P7: startup), not a checkpoint_load.
_KILLED_AT_LOAD = [
    "Loading checkpoint shards: 100%|##########| 4/4 [01:08<00:00, 17.1s/it]",
    "Special tokens have been added in the vocabulary, make sure the associated word embeddings are fine-tuned.",
    "slurmstepd: error: *** JOB 6001 ON gcn3 CANCELLED AT 2024-05-20T16:01:39 DUE TO TIME LIMIT ***",
]


def test_a_time_limit_right_after_the_base_weights_is_startup() -> None:
    assert diagnose_text(_text(_KILLED_AT_LOAD)).phase == "startup"


# A flat evaluation script (no main function: its traceback's one frame is '<module>') that printed its scores, then
# failed in its own report line: P5, past its set-up, evaluation (not an import-time failure).
_FLAT_EVAL = [
    "Loaded model: 96,082,176 params",
    "  1000/5000: acc=0.4120",
    "  2000/5000: acc=0.4090",
    "Traceback (most recent call last):",
    '  File "/home/u/eval_all.py", line 125, in <module>',
    "    print(f'ACC: {results[acc_key]:.4f}')",
    "NameError: name 'acc_key' is not defined",
]


def test_a_flat_evaluation_script_failing_after_its_scores_is_evaluation() -> None:
    assert diagnose_text(_text(_FLAT_EVAL)).phase == "evaluation"


def test_an_import_at_a_scripts_top_is_still_startup() -> None:
    lines = ["Traceback (most recent call last):", '  File "/home/u/eval_all.py", line 3, in <module>',
             "    import flash_attn", "ModuleNotFoundError: No module named 'flash_attn'"]
    assert diagnose_text(_text(lines)).phase == "startup"


# peft src/peft/utils/save_and_load.py set_peft_model_state_dict ("raise NotImplementedError" for an adapter type it
# cannot set), reached from PeftModel.from_pretrained -> load_adapter: README C5, the saved adapter does not fit.
_ADAPTER = [
    "Traceback (most recent call last):",
    '  File "/home/u/cl/run.py", line 375, in main',
    "    model = PeftModel.from_pretrained(model, args.adapter_dir)",
    '  File "/env/lib/python3.10/site-packages/peft/peft_model.py", line 378, in load_adapter',
    "    set_peft_model_state_dict(self, adapters_weights, adapter_name=adapter_name)",
    '  File "/env/lib/python3.10/site-packages/peft/utils/save_and_load.py", line 162, in set_peft_model_state_dict',
    "    raise NotImplementedError",
    "NotImplementedError",
]


def test_an_error_raised_by_a_load_function_is_a_checkpoint_error() -> None:
    got = diagnose_text(_text(_ADAPTER))
    assert got.diagnosis.category == "checkpoint_error"
    assert got.phase == "checkpoint_load"


def test_the_same_error_raised_by_the_jobs_own_function_stays_a_code_error() -> None:
    lines = [*_ADAPTER[:3], '  File "/home/u/cl/run.py", line 120, in build_head', "    raise NotImplementedError",
             "NotImplementedError"]
    assert diagnose_text(_text(lines)).diagnosis.category == "semantic_error"


# Hydra's report of an instantiate error (hydra/_internal/utils.py run_and_report, hydra/_internal/instantiate):
# its closing advice "Set the environment variable HYDRA_FULL_ERROR=1 ..." names a setting, it states no error (R2).
_HYDRA = [
    "[10:01:36.645419] INFO     Training run_small on cpu     train.py:79",
    "Error executing job with overrides: ['trainer.batch_size=100', 'device=cpu']",
    "Error in call to target 'pkg.rl.trainer.Trainer':",
    "APIUsageError('batch_size must be divisible by (num_envs / num_workers)')",
    "full_key: trainer",
    "",
    "Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.",
]


def test_hydras_advice_is_no_indicator_line() -> None:
    assert diagnose_text(_text(_HYDRA)).indicator_lines == [4]


# logging's record of a caught exception (logger.exception(f"Training failed: {e}"): Lib/logging/__init__.py writes
# the record's line, then formatException's traceback), printed right after a tqdm bar's cursor-up escape, then the
# exception re-raised and printed again: the record is the first printing (README R4, R9).
_LOGGED = [
    "  3%|3         | 40/1482 [00:20<13:15,  1.78it/s]\x1b[AERROR:__main__:Training failed: CUDA out of memory. Tried"
    " to allocate 18.25 GiB. GPU 0 has a total capacity of 39.49 GiB of which 18.01 GiB is free.",
    "Traceback (most recent call last):",
    '  File "/home/u/ft/train.py", line 305, in main',
    "    trainer.train()",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 18.25 GiB. GPU 0 has a total capacity of 39.49 GiB"
    " of which 18.01 GiB is free.",
]


def test_a_loggers_record_of_the_exception_is_its_first_printing() -> None:
    assert diagnose_text(_text(_LOGGED)).indicator_lines == [1]


def test_a_record_with_another_message_is_not_the_exceptions() -> None:
    other = ["epoch 1 step 40 ERROR:__main__:evaluation skipped: the validation split is empty", *_LOGGED[1:]]
    assert diagnose_text(_text(other)).indicator_lines == [5]


def _worker_run(split: str) -> list[str]:
    """One run of an evaluation script whose DataLoader worker failed (torch/_utils.py ExceptionWrapper.reraise:
    "Caught X in DataLoader worker process N." then the worker's "Original Traceback")."""
    return [
        f"Namespace(batch_size=128, split='{split}', workers=16)",
        "Files already downloaded and verified",
        "Building model",
        "Model evaluation",
        "Traceback (most recent call last):",
        '  File "/home/u/eval.py", line 159, in <module>',
        "    main()",
        '  File "/env/lib/python3.11/site-packages/torch/_utils.py", line 694, in reraise',
        "    raise exception",
        "TypeError: Caught TypeError in DataLoader worker process 0.",
        "Original Traceback (most recent call last):",
        '  File "/env/lib/python3.11/site-packages/torch/utils/data/_utils/collate.py", line 150, in collate',
        "    raise TypeError(default_collate_err_msg_format.format(elem_type))",
        "TypeError: default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; found <class"
        " 'NoneType'>",
        "",
    ]


def test_a_worker_error_ending_a_run_and_the_run_again_is_labelled_in_the_last_run() -> None:
    # README R1: the job script ran the program again (its start-up printed again): the last run's error
    lines = [*_worker_run("val"), *_worker_run("test")]
    assert diagnose_text(_text(lines)).indicator_lines == [29]
