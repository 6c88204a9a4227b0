"""Indicator lines (README "Indicator lines: rules" R1-R9) of formats the reader misread in round 24,
each excerpt written by hand in the format the library or launcher prints."""

from __future__ import annotations

from gpulens.diagnosis.classifier import Classifier
from gpulens.diagnosis.logread import diagnose_text
from tests.diagnosis.test_indicator_formats import _CAUSE, _picked, _tb

#: transformers' cached_file message for a gated repo, embedding huggingface_hub's (blank line included)
_GATED = ["You are trying to access a gated repo.", "Make sure to have access to it at https://huggingface.co/org/m.",
          "401 Client Error. (Request ID: Root=1-abc)", "",
          "Cannot access gated repo for url https://huggingface.co/org/m/resolve/main/config.json.",
          "Access to model org/m is restricted. You must have access to it and be authenticated to access it."]


def test_a_logged_message_of_several_lines_heading_its_traceback_is_not_the_error(rules: Classifier) -> None:
    # logging.Formatter.format: the record's message (several lines, a blank one among them), then the
    # exc_info traceback; the chain's first and last exception lines are the error (R3, R4), not the
    # record heading it nor a later line of its message
    lines = (["2025-05-01 23:52:51,586 - INFO - Loading model: org/m",
              "2025-05-01 23:52:54,176 - ERROR - Failed to load model org/m: " + _GATED[0]] + _GATED[1:]
             + _tb("requests.exceptions.HTTPError: 401 Client Error: Unauthorized for url: "
                   "https://huggingface.co/org/m/resolve/main/config.json") + _CAUSE
             + _tb("OSError: " + _GATED[0]) + _GATED[1:])
    assert _picked(lines, rules) == [
        "requests.exceptions.HTTPError: 401 Client Error: Unauthorized for url: "
        "https://huggingface.co/org/m/resolve/main/config.json", "OSError: " + _GATED[0]]


def test_the_tab_indented_lines_of_a_state_dict_error_are_its_message(rules: Classifier) -> None:
    # torch Module.load_state_dict joins its errors with "\n\t" under "Error(s) in loading state_dict for X:";
    # the last "size mismatch" line is a later line of that message, not an error of its own (R3)
    sizes = [f"\tsize mismatch for net.{k}.conv.weight: copying a param with shape torch.Size([512, 128, 3]) "
             "from checkpoint, the shape in current model is torch.Size([128, 512, 3])." for k in range(40)]
    lines = (["[2023-12-12 22:40:48,793][solver][INFO] - Loading checkpoint model: checkpoint.th",
              "[2023-12-12 22:40:49,379][__main__][ERROR] - Some error happened"]
             + _tb("RuntimeError: Error(s) in loading state_dict for ConvTasNet:", "/env/torch/nn/modules/module.py")
             + ['\tMissing key(s) in state_dict: "net.0.conv.bias", "net.1.conv.bias".'] + sizes)
    assert _picked(lines, rules) == ["RuntimeError: Error(s) in loading state_dict for ConvTasNet:"]


def _module_tb(line: int, exc: str, inner: str = "") -> list[str]:
    frames = [f'  File "{inner}", line 33, in load', "    raise NotImplementedError"] if inner else []
    return ["Traceback (most recent call last):", f'  File "train_final.py", line {line}, in <module>',
            "    trainer.run()"] + frames + [exc]


def test_a_script_failing_again_at_another_module_statement_is_another_run(rules: Classifier) -> None:
    # each uncaught exception through the script's <module> frame ended its interpreter: a later traceback
    # through the same script's module code at another statement is a new run (R1: the last run's error only)
    lines = (_module_tb(63, "AttributeError: 'Trainer' object has no attribute 'load_checkpoint'")
             + _module_tb(64, "NotImplementedError", "/srv/amp/dataset.py")
             + ["Computing fingerprints: 100%|##########| 360/360 [00:05<00:00, 70.1it/s]"]
             + _module_tb(75, "_tkinter.TclError: no display name and no $DISPLAY environment variable"))
    assert _picked(lines, rules) == ["_tkinter.TclError: no display name and no $DISPLAY environment variable"]


def test_a_native_error_record_the_program_went_on_from_is_not_the_root(rules: Classifier) -> None:
    # TensorFlow logs "failed call to cuInit" at E severity (tsl logging.cc "%s.%06d: %c %s:%d] %s") and runs on
    # the CPU: data loading, a summary and the first epoch follow; the later uncaught exception ended the run (R1)
    lines = (["2023-11-01 14:28:34.240756: E tensorflow/compiler/xla/stream_executor/cuda/cuda_driver.cc:268] "
              "failed call to cuInit: CUDA_ERROR_NO_DEVICE: no CUDA-capable device is detected", "Loading data"]
             + [f"Data Tensor {k} Shape: (736, 128, 64)" for k in range(1, 12)] + ["Start training", "Epoch 1/10"]
             + _tb("ValueError: Input 0 of layer \"model\" is incompatible with the layer: expected shape=(None, 608, 128), "
                   "found shape=(608, 128)"))
    assert _picked(lines, rules) == [lines[-1]]


#: vLLM's logger header (vllm/logger.py) and loguru's default record head (loguru/_defaults.py LOGURU_FORMAT)
_VL = "ERROR 12-01 20:56:54 [core.py:632] "
_LG = "2025-12-01 20:56:54.324 | "


def _stage(animal: str) -> list[str]:
    # one evaluation stage of a wrapper script: its start-up, the engine process's logged and printed ImportError,
    # then the main process's loguru record and traceback (loguru marks the catch point's frame "> File")
    return ([f"=== Starting {animal} evaluation ===",
             _LG + "INFO     | __main__:main:71 - Loading configuration from cfgs/olmo3_cfgs.py...",
             _LG + f"INFO     | __main__:main:82 - Loaded model: org/olmo3_{animal}",
             _LG + "INFO     | __main__:main:85 - Starting evaluation...",
             "INFO 12-01 20:56:50 [core.py:572] Waiting for init message from front-end.",
             _VL + "EngineCore failed to start.", _VL + "Traceback (most recent call last):",
             _VL + '  File "/env/numba/__init__.py", line 45, in _ensure_critical_deps', _VL + "    raise ImportError(msg)",
             _VL + "ImportError: Numba needs NumPy 2.2 or less. Got NumPy 2.3.",
             _LG + "ERROR    | __main__:main:100 - Error: Engine core initialization failed. See root cause above.",
             _LG + "ERROR    | __main__:main:101 - Full traceback:", "Traceback (most recent call last):", "",
             '  File "/srv/scripts/run_evaluation.py", line 106, in <module>', "    asyncio.run(main())",
             "    └ <function main at 0x7ec849ed5260>", "",
             '> File "/srv/scripts/run_evaluation.py", line 86, in main', "    await run()", "",
             '  File "/env/vllm/v1/engine/utils.py", line 700, in wait_for_engine_startup',
             '    raise RuntimeError("Engine core initialization failed. "', "",
             "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}",
             f"=== {animal.title()} evaluation complete ==="])


def test_a_loguru_traceback_ends_its_stage_and_the_last_stage_is_labelled(rules: Classifier) -> None:
    # the loguru-logged traceback (its "> File" catch point is a frame) ends the first stage's process: the next
    # stage's copy of the same error is another run's, not one the first run went on from (R1)
    first = _stage("dolphin")
    lines = first + _stage("owl") + ["=== ALL DONE ==="]
    found = diagnose_text("\n".join(lines), rules).indicator_lines
    assert found[:1] == [len(first) + 10]  # the owl stage's ImportError, logged by the engine process


def test_an_exception_logged_then_reprinted_by_multiprocessing_counts_at_its_logged_copy(rules: Classifier) -> None:
    # vLLM's engine core logs its exception with the traceback (logger.exception), then multiprocessing's
    # _bootstrap prints "Process NAME:" and the same traceback as the process ends: the earliest copy (R9); the front
    # end's "See root cause above" is the terminal line (R7)
    core = "(EngineCore_DP0 pid=114700) "
    err = "RuntimeError: Triton Error [CUDA]: device kernel image is invalid"
    tb = [core + "Traceback (most recent call last):", core + '  File "/env/triton/compiler/compiler.py", line 408, '
          "in _init_handles", core + "    self.module = driver.active.utils.load_binary("]
    lines = (["INFO 07-31 15:52:20 [core.py:70] Initializing a V1 LLM engine with config: model='qwen3-vl'",
              core + "ERROR 07-31 15:52:26 [core.py:708] EngineCore failed to start."]
             + [ln.replace(core, core + "ERROR 07-31 15:52:26 [core.py:708] ") for ln in tb]
             + [core + "ERROR 07-31 15:52:26 [core.py:708] " + err, core + "Process EngineCore_DP0:"] + tb + [core + err,
             "[rank0]:[W731 15:52:26.202323438 ProcessGroupNCCL.cpp:1479] Warning: WARNING: destroy_process_group() was "
             "not called before program exit, which can leak resources."]
             + _tb("RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}",
                   "/env/vllm/v1/engine/utils.py"))
    assert diagnose_text("\n".join(lines), rules).indicator_lines == [6, len(lines)]


def test_lightning_passing_a_sigterm_on_is_the_cause_not_the_exceptions_it_raises(rules: Classifier) -> None:
    # Lightning's _SubprocessScriptLauncher.kill logs "pid P killing C with 15" for each rank it started, the ranks'
    # handlers log "[rank: N] Received SIGTERM: 15"; rank 0's traceback then ends with the data loader's "killed by
    # signal: Terminated", chained to a fallback PIL was handling: the signal's line is the cause (R6)
    r0 = "[rank0]: "
    lines = (["Epoch 1:   7%|7         | 66/934 [01:57<25:42,  0.56it/s, v_num=0, train/loss=1.83e+5]",
              "pid 2577814 killing 2577847 with 15", "pid 2577814 killing 2577848 with 15",
              "[rank: 1] Received SIGTERM: 15", "[rank: 2] Received SIGTERM: 15"]
             + _tb("AttributeError: '_idat' object has no attribute 'fileno'", "/env/PIL/ImageFile.py", r0)
             + ["", r0 + "During handling of the above exception, another exception occurred:", ""]
             + _tb("RuntimeError: DataLoader worker (pid 2586412) is killed by signal: Terminated. ",
                   "/env/torch/utils/data/_utils/signal_handling.py", r0))
    assert _picked(lines, rules) == ["pid 2577814 killing 2577847 with 15"]


def test_vllm_engine_dead_error_counts_by_the_clients_report_that_the_engine_died(rules: Classifier) -> None:
    # vLLM's client logs "Engine core proc X died unexpectedly" (core_client.py) when the engine process is gone,
    # then its output handler logs EngineDeadError ("See stack trace (above) for the root cause"): with no error of
    # the engine's in the log, the died line is the first that says the process ended (R6)
    api = "(APIServer pid=523647) "
    v = api + "ERROR 04-27 18:09:47 [async_llm.py:546] "
    lines = ([api + "INFO 04-27 15:11:24 [loggers.py:236] Engine 000: Avg prompt throughput: 0.0 tokens/s, Running: 0 reqs",
              api + "ERROR 04-27 18:09:47 [core_client.py:600] Engine core proc EngineCore_DP0 died unexpectedly, "
              "shutting down client.", v + "AsyncLLM output_handler failed.", v + "Traceback (most recent call last):",
              v + '  File "/env/vllm/v1/engine/async_llm.py", line 498, in output_handler',
              v + "    outputs = await engine_core.get_output_async()",
              v + "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) "
              "for the root cause.", api + "INFO:     Shutting down", api + "INFO:     Finished server process [523647]"])
    assert diagnose_text("\n".join(lines), rules).indicator_lines == [2]


def test_a_spawned_childs_bootstrap_death_after_its_parents_error_is_not_the_root(rules: Classifier) -> None:
    # Windows' spawn pickles the process object for the child: "Can't pickle local object" ends the parent, and the
    # child, reading its pipe in spawn_main, fails "EOFError: Ran out of input" (another process's consequence: R5)
    mp = "C:\\Python312\\Lib\\multiprocessing\\"
    lines = (["E1/3:   0%|          | 0/1213 [00:00<?, ?it/s]", "Traceback (most recent call last):",
              '  File "C:\\proj\\train.py", line 900, in <module>', "    for batch in loader:",
              f'  File "{mp}reduction.py", line 60, in dump', "    ForkingPickler(file, protocol).dump(obj)",
              "AttributeError: Can't pickle local object 'final_finetune.<locals>.VideoDataset'",
              "(venv) PS C:\\proj> Using device: cuda", "Traceback (most recent call last):",
              '  File "<string>", line 1, in <module>', f'  File "{mp}spawn.py", line 122, in spawn_main',
              "    exitcode = _main(fd, parent_sentinel)", f'  File "{mp}spawn.py", line 132, in _main',
              "    self = reduction.pickle.load(from_parent)", "EOFError: Ran out of input"])
    assert _picked(lines, rules) == ["AttributeError: Can't pickle local object 'final_finetune.<locals>.VideoDataset'"]


def test_a_failed_conda_activate_the_job_script_went_on_from_is_not_the_root(rules: Classifier) -> None:
    # conda's mock activate raises "CondaError: Run 'conda init' before 'conda activate'" and the batch script goes
    # on in the base environment; the program's own uncaught exception, which names no conda command, ended it (R1)
    lines = (["", "CondaError: Run 'conda init' before 'conda activate'", "",
              "torchvision 0.24.1 requires torch==2.9.1, but you have torch 2.5.1 which is incompatible."]
             + _tb("RuntimeError: operator torchvision::nms does not exist", "/env/torch/_library/fake_impl.py"))
    assert _picked(lines, rules) == ["RuntimeError: operator torchvision::nms does not exist"]


def test_interleaved_printings_of_one_exception_line_are_one_error(rules: Classifier) -> None:
    # CPython's excepthook writes "Type", ": " and the message separately (pythonrun.c print_exception): two ranks
    # sharing stderr interleave them; the clean copy printed after is the same error (R5: the earliest printing)
    lines = (["Traceback (most recent call last):", "Traceback (most recent call last):",
              '  File "/srv/hellaswag.py", line 31, in <module>', '  File "/srv/hellaswag.py", line 31, in <module>',
              "        import tiktokenimport tiktoken", "",
              "ModuleNotFoundErrorModuleNotFoundError: : No module named 'tiktoken'No module named 'tiktoken'", "",
              "    import tiktoken", "ModuleNotFoundError: No module named 'tiktoken'"])
    assert diagnose_text("\n".join(lines), rules).indicator_lines == [7]


def test_two_processes_cuda_out_of_memory_errors_are_one_error(rules: Classifier) -> None:
    # two launches share a GPU and a nohup file: each raises torch's caching-allocator OOM, with its own figures and
    # process list; the second is a copy of the first (R5: the same error with other numbers, the earliest once)
    oom = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {} GiB. GPU 0 has a total capacity of 79.14 "
           "GiB of which {} GiB is free. {}")
    first = oom.format("4.43", "1.74", "Process 3455906 has 10.67 GiB memory in use. Process 1897572 has 66.7 GiB in use.")
    second = oom.format("4.44", "1.77", "Including non-PyTorch memory, this process has 66.7 GiB memory in use.")
    lines = (["  0%|          | 0/576 [00:00<?, ?it/s]", "Traceback (most recent call last):",
              "Traceback (most recent call last):", '  File "/srv/trainer_utils.py", line 610, in get_batch_logps',
              "    per_token_logps = torch.gather(logits.log_softmax(-1), dim=2)", first,
              '  File "/env/accelerate/utils/operations.py", line 777, in _convert_to_fp32', "    return tensor.float()",
              second, "  0%|          | 0/576 [00:08<?, ?it/s]"])
    assert _picked(lines, rules) == [first]


def test_a_native_collective_timeout_record_is_never_one_the_program_went_on_from() -> None:
    # glog's E record of a watchdog timeout is what ends the ranks, however much other output follows it (R6)
    from gpulens.diagnosis import logs
    from gpulens.diagnosis.logread.indicators.aftermath import native_error_went_on
    lines = (["E0813 07:25:21.532210 4242 ProcessGroupNCCL.cpp:1595] [PG 0 Rank 1] Watchdog caught collective "
              "operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE) ran for 600000 milliseconds before timing out."]
             + [f"step {k} loss 0.{k}" for k in range(12)] + _tb("RuntimeError: NCCL communicator was aborted"))
    norm = [logs.normalize_line(x).strip() for x in lines]
    assert not native_error_went_on(lines, 0, [0, len(lines) - 1], norm.__getitem__)
    lines[0] = "E0813 07:25:21.532210 4242 cuda_driver.cc:268] failed call to cuInit: CUDA_ERROR_NO_DEVICE"
    norm[0] = logs.normalize_line(lines[0]).strip()
    assert native_error_went_on(lines, 0, [0, len(lines) - 1], norm.__getitem__)


def test_lightning_ranks_printing_one_error_apart_are_one_run() -> None:
    # both Lightning DDP ranks log "Initializing distributed: GLOBAL_RANK: k, MEMBER: k+1/2" as they start together;
    # rank 1's debug prints between the two identical tracebacks are not a new start of the script: one run, whose
    # root error counts once at its first printing (R5), not a later run's copy (R1)
    from gpulens.diagnosis.logread.indicators.runs import split_runs
    debug = ["Loading data", "h shape: torch.Size([8, 256, 4, 4]) module name: ResnetBlockBigGANpp(",
             "h shape: torch.Size([8, 256, 8, 8]), hs[-1] shape: torch.Size([8, 256, 8, 9]) num resblock 0"]
    err = "RuntimeError: Sizes of tensors must match in dimension 2. Expected size 8 but got size 9 for tensor number 1."

    def tb(script: str) -> list[str]:
        return ["Traceback (most recent call last):", f'  File "{script}", line 96, in <module>', "    trainer.fit(model)",
                '  File "/srv/ncsnpp.py", line 357, in forward', "    h = modules[m_idx](torch.cat([h, hs.pop()], dim=1))", err]
    ranks = ["Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/2", "Initializing distributed: GLOBAL_RANK: 1, MEMBER: 2/2"]
    body = debug + tb("train.py") + debug + tb("/home/u/train.py")
    own = [len(ranks) + len(debug) + 5, len(ranks) + 2 * len(debug) + 11]
    assert split_runs(ranks + body, own, 0, anew=True) == [own]
    alone = ["GPU available: True, used: True", "GPU available: True, used: True"]  # no launcher: a second start
    assert split_runs(alone + body, own, 0, anew=True) == [[own[0]], [own[1]]]


def test_yolox_label_assignment_retried_on_the_cpu_is_not_the_root(rules: Classifier) -> None:
    # YOLOX logs its label assignment's GPU OOM at ERROR and retries the batch on the CPU (yolo_head.py get_losses);
    # the error that then ends the run is the root (R1)
    lg = "2022-01-01 21:00:15.472 | ERROR    | yolox.models.yolo_head:get_losses:325 - "
    lines = (["2022-01-01 21:00:12.449 | INFO     | yolox.core.trainer:before_epoch:188 - ---> start train epoch1",
              lg + "OOM RuntimeError is raised due to the huge memory cost during label assignment.                   "
              "         CPU mode is applied in this batch. If you want to avoid this issue, try to reduce the batch size "
              "or image size.",
              "2022-01-01 21:00:15.486 | ERROR    | yolox.core.launch:launch:98 - An error has been caught in function "
              "'launch', process 'MainProcess' (52467), thread 'MainThread' (139719584408384):"]
             + _tb("RuntimeError: CUDA error: device-side assert triggered", "/srv/yolox/models/yolo_head.py"))
    assert _picked(lines, rules) == ["RuntimeError: CUDA error: device-side assert triggered"]
