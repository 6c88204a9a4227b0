"""Reader round 24, phase (P1-P11 of sample_logs/whole/README.md, "Phase: rules"), on excerpts written by hand in the
formats the libraries print: an inference server's access log (uvicorn under vLLM, Gin under Ollama) and vLLM's
client shutting down after its engine died."""

from __future__ import annotations

from gpulens.diagnosis.logread.phase import phase_of
from gpulens.diagnosis.logread.phase.stages import stage_title, stage_trains

_API = "\x1b[0;36m(APIServer pid=4100)\x1b[0;0m "


def _vllm_server(requests: int) -> list[str]:
    """A vLLM OpenAI-compatible server started under uvicorn, then ``requests`` chat requests answered."""
    head = [f"{_API}INFO 05-02 10:00:01 [api_server.py:1800] vLLM API server version 0.11.0",
            f"{_API}INFO 05-02 10:00:40 [launcher.py:30] Available routes are:",
            f"{_API}INFO:     Started server process [4100]",
            f"{_API}INFO:     Waiting for application startup.",
            f"{_API}INFO:     Application startup complete."]
    served = [f'{_API}INFO:     127.0.0.1:50{k:03d} - "POST /v1/chat/completions HTTP/1.1" 200 OK' for k in range(requests)]
    return [*head, *served]


def _engine_died() -> list[str]:
    """vLLM's V1 client reports its engine process gone, then uvicorn stops the server."""
    return [f"{_API}ERROR 05-02 13:00:00 [core_client.py:600] Engine core proc EngineCore_DP0 died unexpectedly, "
            "shutting down client.",
            f"{_API}ERROR 05-02 13:00:00 [async_llm.py:546] AsyncLLM output_handler failed.",
            f"{_API}ERROR 05-02 13:00:00 [async_llm.py:546] vllm.v1.engine.exceptions.EngineDeadError: EngineCore "
            "encountered an issue. See stack trace (above) for the root cause.",
            f"{_API}INFO:     Shutting down",
            f"{_API}INFO:     Waiting for application shutdown.",
            f"{_API}INFO:     Application shutdown complete."]


def test_vllm_engine_death_after_serving_is_evaluation() -> None:
    """P5: a server that answered requests is past its set-up; its engine dying is no teardown of its own (the client's
    "shutting down client" and uvicorn's "Shutting down" are reactions to it)."""
    lines = [*_vllm_server(6), *_engine_died()]
    at = len(lines) - 6
    assert phase_of(lines, at, lines[:at + 3]) == "evaluation"


def test_vllm_engine_death_before_any_request_is_startup() -> None:
    """The same death before the server answered a request: nothing shows it served (P5's set-up)."""
    lines = [*_vllm_server(0), *_engine_died()]
    at = len(lines) - 6
    assert phase_of(lines, at, lines[:at + 3]) == "startup"


def _ollama(requests: int) -> list[str]:
    """An Ollama server (Gin's access log) answering chat requests of an evaluation script."""
    head = ["time=2025-06-26T20:00:00.000Z level=INFO source=routes.go:1200 msg=\"Listening on 127.0.0.1:11434\"",
            "llama_model_loader: loaded meta data with 30 key-value pairs",
            "print_info: model type       = 4B"]
    served = [f"[GIN] 2025/06/26 - 22:{k:02d}:34 | 200 |         1m59s |       127.0.0.1 | POST     "
              "\"/v1/chat/completions\"" for k in range(requests)]
    return [*head, *served]


def test_time_limit_while_ollama_serves_is_evaluation() -> None:
    """P5/P9: a time limit while the server answers an evaluation's requests takes the serving's phase (not the
    ``training`` a whole allocation spent stepping out of sight would be)."""
    lines = [*_ollama(5), "slurmstepd: error: *** JOB 42 ON node-03 CANCELLED AT 2025-06-26T22:39:06 DUE TO TIME LIMIT ***"]
    at = len(lines) - 1
    assert phase_of(lines, at, lines) == "evaluation"


def test_health_checks_are_no_served_request() -> None:
    """A model list or health check runs no model: the server's work has not begun."""
    lines = [*_vllm_server(0), f'{_API}INFO:     127.0.0.1:50000 - "GET /v1/models HTTP/1.1" 200 OK',
             f'{_API}INFO:     127.0.0.1:50001 - "GET /health HTTP/1.1" 200 OK', *_engine_died()]
    at = len(lines) - 6
    assert phase_of(lines, at, lines[:at + 3]) == "startup"


def _logged(level: str, msg: str) -> str:
    """A record of ``logging``'s ``"%(asctime)s - %(levelname)s - %(message)s"`` format."""
    return f"2026-03-01 09:00:12,501 - {level} - {msg}"


def test_nested_handlers_logging_before_the_traceback_read_the_reported_one() -> None:
    """P1/P7: an earlier attempt's traceback (ended) above, then nested handlers each log their error (the inner one's
    "loading failed", the outer one's "training failed") before the outer ``logger.exception`` prints the traceback of
    the failure: that traceback's frames (``torch.load``) name the activity, not the earlier attempt's."""
    earlier = ["Traceback (most recent call last):",
               '  File "/src/distill.py", line 400, in main',
               "    scaler.unscale_(optimizer)",
               "ValueError: Attempting to unscale FP16 gradients."]
    relaunch = [_logged("INFO", "args: Namespace(teacher_path='./teacher.pt')"), _logged("INFO", "loading teacher ...")]
    failure = [_logged("ERROR", "loading the teacher failed: [Errno 2] No such file or directory: './teacher.pt'"),
               _logged("ERROR", "training failed: [Errno 2] No such file or directory: './teacher.pt'"),
               "Traceback (most recent call last):",
               '  File "/src/distill.py", line 340, in main',
               "    teacher = load_teacher(args)",
               '  File "/src/distill.py", line 160, in load_teacher',
               "    state = torch.load(args.teacher_path, map_location=device)",
               '  File "/opt/env/lib/python3.10/site-packages/torch/serialization.py", line 1484, in load',
               '    with _open_file_like(f, "rb") as opened_file:',
               "FileNotFoundError: [Errno 2] No such file or directory: './teacher.pt'"]
    lines = [*earlier, *relaunch, *failure]
    at = len(earlier) + len(relaunch)
    assert phase_of(lines, at, lines[:at + 3], len(earlier)) == "checkpoint_load"
    assert phase_of(lines, at, lines[:at + 3]) == "checkpoint_load"  # the relaunch not told apart: the same


def test_dpo_reference_trainer_eval_bar_is_evaluation() -> None:
    """P4: the DPO reference trainer (and HALOs) evaluates before its first step, "Running evaluation after 0 train
    examples" then its ``Computing eval metrics`` bar; the other processes' set-up lines and the spawner's own traceback
    printed after the bar do not hide it (a bar at 0/32 there is no training step)."""
    others = [ln for p in (1, 2, 3) for ln in (f"{p} initializing distributed", f"Creating trainer on process {p} with world size 4",
                                              *["world_size: 1"] * 8, f"Loaded model on rank {p}")]
    spawn = ["Error executing job with overrides: ['loss=kto', 'model=llama7b']",
             "Traceback (most recent call last):",
             '  File "/src/train.py", line 229, in main',
             "    mp.spawn(worker_main, nprocs=world_size, args=(world_size, config), join=True)",
             "torch.multiprocessing.spawn.ProcessRaisedException: ",
             "",
             "-- Process 3 terminated with the following error:"]
    inner = ["Traceback (most recent call last):",
             '  File "/opt/env/lib/python3.10/site-packages/torch/multiprocessing/spawn.py", line 74, in _wrap',
             "    fn(i, *args)",
             '  File "/src/train.py", line 85, in worker_main',
             "    trainer.train()",
             '  File "/src/trainers.py", line 370, in train',
             "    all_eval_metrics[k].extend(v)",
             "TypeError: 'float' object is not iterable"]
    lines = ["starting 4 processes for FSDP training", "Loaded model on rank 0", "Using RMSprop optimizer with learning rate 2e-05",
             "Running evaluation after 0 train examples",
             "Computing eval metrics:   0%|          | 0/32 [00:03<?, ?it/s]", *others, *spawn, *inner]
    at = len(lines) - 1
    assert phase_of(lines, at, lines[at - 40:]) == "evaluation"


def _vllm_offline() -> list[str]:
    """vLLM's offline ``LLM`` being built: its engine core's lines, then the constructor's last line."""
    core = "\x1b[1;36m(EngineCore_DP0 pid=7001)\x1b[0;0m "
    return ["INFO 07-31 15:57:37 [__init__.py:216] Automatically detected platform cuda.",
            f"{core}INFO 07-31 15:57:43 [gpu_model_runner.py:2602] Starting to load model /models/embed-2b...",
            f"{core}INFO 07-31 15:57:48 [default_loader.py:267] Loading weights took 3.82 seconds",
            f"{core}INFO 07-31 15:57:52 [gpu_worker.py:298] Available KV cache memory: 7.90 GiB",
            f"{core}INFO 07-31 15:57:52 [core.py:210] init engine (profile, create kv cache, warmup model) took 4.18 seconds",
            "INFO 07-31 15:57:54 [llm.py:306] Supported_tasks: ['embed']"]


def test_native_crash_right_after_vllm_llm_built_is_evaluation() -> None:
    """P5: a script that builds vLLM's ``LLM`` and crashes at once (a kernel compiled for its first prompts) with no
    training loop anywhere was running its prompts."""
    lines = [*_vllm_offline(), "Unsupported conversion from f16 to f16", "LLVM ERROR: Unsupported rounding mode for conversion."]
    at = len(lines) - 1
    assert phase_of(lines, at, lines) == "evaluation"


def test_vllm_llm_built_inside_a_trainer_is_not_evaluation() -> None:
    """The same engine built by a trainer (an RL job's rollout engine), the failure's frames in the trainer: not P5."""
    tb = ["Traceback (most recent call last):",
          '  File "/src/train_grpo.py", line 90, in <module>',
          "    trainer.train()",
          '  File "/opt/env/lib/python3.10/site-packages/trl/trainer/grpo_trainer.py", line 1200, in _move_model_to_vllm',
          "    llm_model.load_weights(state_dict.items())",
          "RuntimeError: CUDA error: an illegal memory access was encountered"]
    lines = [*_vllm_offline(), *tb]
    at = len(lines) - 1
    assert phase_of(lines, at, lines) != "evaluation"


def _tb(frames: list[tuple[str, str, str]], exc: str) -> list[str]:
    return ["Traceback (most recent call last):", *(ln for p, f, c in frames for ln in _frame_lines(p, f, c)), exc]


def _frame_lines(path: str, func: str, code: str) -> list[str]:
    return [f'  File "{path}", line 10, in {func}', f"    {code}"]


_PL = "/opt/env/lib/python3.10/site-packages/pytorch_lightning"


def test_lightning_logging_a_train_steps_metrics_is_training() -> None:
    """P1/P2: a logger failing in ``log_metrics`` (no evaluation: it records metrics) under Lightning's
    ``update_train_step_metrics``, which the training epoch loop calls after a completed step: ``training``, even with the
    steps' bars printed to another file."""
    from gpulens.diagnosis.logread.phase.frames import in_eval
    tb = _tb([("/src/main.py", "<module>", "trainer.fit(model, dm)"),
              (f"{_PL}/trainer/trainer.py", "_run_train", "self.fit_loop.run()"),
              (f"{_PL}/loops/fit_loop.py", "advance", "self.epoch_loop.run(self._data_fetcher)"),
              (f"{_PL}/loops/epoch/training_epoch_loop.py", "advance",
               "self.trainer._logger_connector.update_train_step_metrics()"),
              (f"{_PL}/trainer/connectors/logger_connector/logger_connector.py", "update_train_step_metrics",
               "self.log_metrics(self.metrics['log'])"),
              (f"{_PL}/loggers/csv_logs.py", "log_metrics", "self.experiment.log_metrics(metrics, step)"),
              (f"{_PL}/core/saving.py", "save_hparams_to_yaml", "raise RuntimeError(f'Missing folder: {folder}.')")],
             "RuntimeError: Missing folder: logs/version_0.")
    assert not in_eval(tb)
    lines = ["GPU available: True (cuda), used: True", *tb]
    assert phase_of(lines, len(lines) - 1, lines) == "training"


def test_ppo_update_rescoring_actions_is_training() -> None:
    """P1: the PPO reference implementations' ``PPO.update`` re-scores the rollout through ``policy.evaluate(states,
    actions)`` for its loss: a training update, not an evaluation."""
    tb = _tb([("/src/train.py", "<module>", "ppo_agent.update()"),
              ("/src/ppo.py", "update", "logprobs, values, entropy = self.policy.evaluate(old_states, old_actions)"),
              ("/src/ppo.py", "evaluate", "dist = Normal(action_mean, action_std)"),
              ("/opt/env/lib/python3.10/site-packages/torch/distributions/normal.py", "__init__",
               "super().__init__(batch_shape, validate_args=validate_args)")],
             "ValueError: Expected parameter loc of distribution Normal to satisfy the constraint Real()")
    lines = [f"Iter {k} | reward {k * 0.1:.2f} | loss 0.5{k}" for k in range(1, 6)] + tb
    at = len(lines) - 1
    assert phase_of(lines, at, lines) == "training"


def test_metric_inside_a_training_forward_is_training() -> None:
    """P1: an SSIM computed inside a loss module's ``forward`` called by ``train_one_epoch`` is the step's loss (MONAI's
    ``SSIMLoss`` calls ``SSIMMetric._compute_metric``), not an evaluation."""
    from gpulens.diagnosis.logread.phase.frames import in_eval
    tb = _tb([("/src/train.py", "<module>", "run(cfg)"),
              ("/src/train.py", "train_one_epoch", "loss = criterion(pred, target)"),
              ("/opt/env/lib/python3.10/site-packages/torch/nn/modules/module.py", "_call_impl", "return forward_call(*a)"),
              ("/opt/env/lib/python3.10/site-packages/monai/losses/ssim_loss.py", "forward", "ssim = self.ssim_metric._compute_metric(x, y)"),
              ("/opt/env/lib/python3.10/site-packages/monai/metrics/regression.py", "_compute_metric", "ssim, _ = compute_ssim_and_cs(y_pred=y_pred)"),
              ("/opt/env/lib/python3.10/site-packages/monai/metrics/regression.py", "compute_ssim_and_cs", "kernel = convert_to_dst_type(kernel, y_pred)")],
             "KeyboardInterrupt")
    assert not in_eval(tb)


def test_missing_validation_split_after_training_completed_is_evaluation() -> None:
    """P10: after the Trainer's "Training completed.", the script's final evaluation looks up its split in a
    ``DatasetDict`` that has none ("KeyError: 'validation'"): the final evaluation, not the shutdown."""
    lines = ["{'loss': 1.07, 'learning_rate': 1e-06, 'epoch': 2.9}",
             "{'eval_loss': 1.08, 'eval_accuracy': 0.559, 'eval_runtime': 232.7, 'epoch': 3.0}",
             "{'train_runtime': 3214.75, 'train_samples_per_second': 0.93, 'train_loss': 1.07, 'epoch': 3.0}",
             "Training completed. Do not forget to share your model on huggingface.co/models =)",
             "Traceback (most recent call last):",
             '  File "/src/finetune.py", line 78, in <module>',
             '    small_eval = tokenized["validation"].shuffle(seed=42)',
             '  File "/opt/env/lib/python3.10/site-packages/datasets/dataset_dict.py", line 58, in __getitem__',
             "    return super().__getitem__(k)",
             "KeyError: 'validation'"]
    at = len(lines) - 1
    assert phase_of(lines, at, lines) == "evaluation"
    lines[-1] = "KeyError: 'labels'"
    assert phase_of(lines, at, lines) == "shutdown"


def test_a_metric_key_is_no_missing_split() -> None:
    from gpulens.diagnosis.logread.phase.evaluation import eval_split_missing
    assert eval_split_missing("KeyError: 'validation'") and eval_split_missing("KeyError: 'validation_matched'")
    assert not eval_split_missing("KeyError: 'val_acc'") and not eval_split_missing("KeyError: 'labels'")


def _mllog(key: str, ms: int) -> str:
    """An MLPerf compliance event (``mlperf_logging.mllog``)."""
    return (f':::MLLOG {{"namespace": "", "time_ms": {ms}, "event_type": "POINT_IN_TIME", "key": "{key}", "value": null, '
            '"metadata": {"file": "./main.py", "lineno": 50}}')


def test_mlperf_warm_up_before_the_first_epoch_is_startup() -> None:
    """P3: an MLPerf benchmark may warm up (DDP's reducer rebuilding its buckets) during its untimed initialisation;
    with no ``epoch_start``/``block_start`` event logged, a failure is still the set-up's."""
    tb = ["Error executing job with overrides: ['++data.stage=/dev/shm']",
          "Traceback (most recent call last):",
          '  File "./main.py", line 212, in main',
          "    return Main(cfg).exec()",
          '  File "./main.py", line 154, in run',
          "    t0 = time.time()",
          "UnboundLocalError: local variable 'time' referenced before assignment"]
    head = [_mllog("init_start", 1000), _mllog("global_batch_size", 1001),
            "[2022-09-12 11:59:40,745][torch.nn.parallel.distributed][INFO] - Reducer buckets have been rebuilt in this iteration."]
    lines = [*head, *tb]
    assert phase_of(lines, len(lines) - 1, lines) == "startup"
    started = [*head, _mllog("run_start", 1100), _mllog("epoch_start", 1200), *tb]
    assert phase_of(started, len(started) - 1, started) != "startup"


def test_data_set_built_by_a_train_function_is_startup() -> None:
    """P8/P1: a Ray task's ``train(config)`` builds its data set first; a CUDA OOM in the data set's constructor is
    set-up, though other tasks printed their first epoch's lines above."""
    lines = ["2025-02-16 21:11:43,342\tINFO worker.py:1841 -- Started a local Ray instance.",
             "(run_task pid=1157) Starting repetition 1/1", "(run_task pid=1157) Epoch: 1",
             "(run_task pid=1153) Batch 0 of 106",
             "Traceback (most recent call last):",
             '  File "/src/run_ray.py", line 78, in <module>',
             "    ray.get(results)",
             '  File "/opt/env/lib/python3.9/site-packages/ray/_private/worker.py", line 919, in get_objects',
             "    raise value.as_instanceof_cause()",
             "ray.exceptions.RayTaskError(RuntimeError): ray::run_task() (pid=1151, ip=10.0.0.3)",
             '  File "/src/run_ray.py", line 38, in run_task',
             "    trainer.train(config)",
             '  File "/src/trainer.py", line 192, in train',
             "    train_dataset = TrajDataset(path_train, dataset_config)",
             '  File "/src/trainer.py", line 69, in __init__',
             "    self.data[key] = torch.tensor(self.data[key]).to(device)",
             "RuntimeError: CUDA error: out of memory"]
    at = len(lines) - 1
    assert phase_of(lines, at, lines) == "startup"


def test_data_set_built_inside_an_epoch_is_not_startup() -> None:
    from gpulens.diagnosis.logread.phase.startup import dataset_built
    tb = ["Traceback (most recent call last):",
          '  File "/src/train.py", line 300, in train_one_epoch',
          "    loader = DataLoader(CurriculumDataset(stage), batch_size=8)",
          '  File "/src/data.py", line 20, in __init__',
          "    self.items = load(stage)",
          "FileNotFoundError: stage_3.pkl"]
    assert not dataset_built(tb)


def test_localized_bash_error_after_the_program_exited_is_shutdown() -> None:
    """P10: the program stopped early (its bar short of its total) and exited (wandb's footer), then bash, in a Chinese
    locale ("%s: 行 %d: " is its translation of "%s: line %d: "), fails on the job script's next line: ``shutdown``."""
    from gpulens.diagnosis.logread.phase.text import shell_error
    lines = ["  0%|          | 0/500 [00:00<?, ?it/s]",
             " 11%|█         | 56/500 [1:00:35<4:51:26, 39.38s/it]\r 11%|█▏        | 57/500 [1:01:14<4:49:31, 39.21s/it]",
             "Early stopping at epoch 57",
             "wandb: Run summary:", "wandb:     train_loss 0.53598", "wandb: ",
             "wandb: Synced 6 W&B file(s), 0 media file(s), 0 artifact file(s) and 0 other file(s)",
             "wandb: Find logs at: ./wandb/run-20241022_011757-3aehvsxi/logs",
             "Successfully processed subject_9",
             "run_all.sh: 行 27: 数器：未找到命令",
             "run_all.sh: 行 28: 未预期的符号“done”附近有语法错误"]
    at = len(lines) - 2
    assert shell_error(lines[at]) and shell_error("run.sh: line 27: foo: command not found")
    assert phase_of(lines, at, lines) == "shutdown"


def test_long_iteration_count_line_is_a_step() -> None:
    """P2 (b): a loop's line that starts with its iteration's count of the total and goes on with its timings and long
    meters ("Iteration 31/208 | Iteration Elapsed 76.3 | Average: {...} | SPS 314 | Policy Update 54.1"), printed once the
    iteration's rollout and update are done: the process vanishing after it is in training."""
    from gpulens.diagnosis.logread.steplines import step_in, step_progress
    agents = ", ".join(f"'agent_{a}': tensor(0.)" for a in range(6))
    rows = [f"Iteration {k}/208 | Iteration Elapsed 76.{k} | Average: {{{agents}}} | SPS 31{k}.2 | Policy Update 54.{k}"
            for k in range(1, 6)]
    assert step_progress(rows[-1]) and step_in(rows[-1]) == "5"
    lines = ["Starting self-play", *rows,
             "/opt/env/lib/python3.10/multiprocessing/resource_tracker.py:224: UserWarning: resource_tracker: There appear "
             "to be 30 leaked shared_memory objects to clean up at shutdown",
             "  warnings.warn('resource_tracker: There appear to be %d '"]
    at = len(lines) - 2
    assert phase_of(lines, at, lines) == "training"


def test_benchmark_script_is_an_evaluation_program() -> None:
    """P5: a benchmark job (its entry script named so) has no training steps: its model's forward failing is
    ``evaluation``; a script named for training first still trains."""
    from gpulens.diagnosis.logread.phase.frames import eval_program
    tb = ["[rank0]: Traceback (most recent call last):",
          '[rank0]:   File "/src/scripts/benchmark_ring.py", line 227, in <module>',
          "[rank0]:     main()",
          '[rank0]:   File "/src/scripts/benchmark_ring.py", line 89, in run_benchmark',
          "[rank0]:     out = model.forward(ids, use_cache=True)",
          '[rank0]:   File "/src/fms/models/llama.py", line 435, in forward',
          "[rank0]:     output, cache = self._helper(x)",
          "[rank0]: RuntimeError: start (0) + length (131072) exceeds dimension size (16384)."]
    lines = ["using RingAttentionStrategy", "Benchmark: 131072 prompt tokens, 30 decode tokens", *tb]
    assert phase_of(lines, len(lines) - 1, lines) == "evaluation"
    assert eval_program(['  File "/src/bench.py", line 3, in <module>'])
    assert not eval_program(['  File "/src/train_benchmark.py", line 3, in <module>'])


def test_documents_and_shape_prints_are_no_steps() -> None:
    """P2: an RL rollout prints retrieved documents (running text that says "step" without counting one) and debug
    prints of tensor shapes (PyTorch's ``torch.Size([180, 500])`` repr next to "batch"); neither is a step done, so a
    failure after "epoch 0, step 1" is in the first step."""
    from gpulens.diagnosis.logread.steplines import step_progress
    pre = "(main_task pid=6651) "
    doc = (pre + "The game starts on the bottom stair of a staircase. The adult holds out both fists, one holding a "
           "button. The child guesses which hand holds it. Whoever guesses correctly advances one step. The first to "
           "reach the top stair wins. It was first recorded in 1900 in a book of parlour games.")
    shape = pre + "-----[Debug]----- gen_output.batch[responses] after padding: torch.Size([180, 500])"
    assert not step_progress(doc) and not step_progress(shape)
    tb = [pre.strip() + " Traceback (most recent call last):",
          '  File "/src/verl/trainer/ppo/ray_trainer.py", line 700, in fit',
          "    final_output = generation_manager.run_llm_loop(gen_batch=gen_batch)",
          '  File "/src/search_r1/llm_agent/generation.py", line 300, in run_llm_loop',
          "    assert 1 == 0",
          "AssertionError"]
    lines = [pre + "-----[Debug]----- epoch 0, step 1", shape, shape, doc, doc, doc, *tb]
    at = len(lines) - 1
    assert phase_of(lines, at, lines) == "first_step"


def test_numbered_training_stage_after_an_earlier_stage_starts_a_new_loop() -> None:
    """P11/P2: a pipeline's numbered stage header naming training ("PHASE 2: Next-Token Prediction Training", README
    P11's "Stage 1: Training") after an earlier stage's epochs: that stage's steps do not count for the new one, whose
    first backward fails in its first step."""
    earlier = [f"Epoch {k}/10: train_loss=0.{k}1 val_loss=0.{k}3" for k in range(1, 6)]
    stage = ["=" * 70, "PHASE 2: Next-Token Prediction Training", "=" * 70, "", "Training tokens: 529,173", "Epochs: 10",
             "Building context cache (one-time computation)...", "Cache built in 646.1s", ""]
    tb = ["Traceback (most recent call last):",
          '  File "/src/experiment.py", line 363, in main',
          "    result = run_phase2(model, cache)",
          '  File "/src/trainer.py", line 210, in run_phase2',
          "    loss.backward()",
          '  File "/opt/env/lib/python3.12/site-packages/torch/_tensor.py", line 626, in backward',
          "    torch.autograd.backward(self, gradient)",
          "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.66 GiB."]
    lines = ["PHASE 1: Context Training", *earlier, *stage, *tb]
    at = len(lines) - 1
    assert phase_of(lines, at, lines) == "first_step"


def test_one_stage_header_reading_serves_loops_and_evaluation() -> None:
    """The loop reader and the evaluation reader read numbered stage headers one way (:mod:`.phase.stages`): a logged
    "Step 2: Transfer Learning" header names training (a new loop), "PHASE 4: Attention Analysis" does not, and a
    step's metric line ("Step 300: loss=2.31") is no header."""
    assert stage_trains(stage_title("2025-01-01 10:00:00 | INFO | Step 2: Transfer Learning"))
    assert stage_title("PHASE 4: Attention Analysis") == "Attention Analysis"
    assert not stage_trains("Attention Analysis")
    assert stage_title("Step 300: loss=2.31") == ""
    earlier = [f"Epoch {k}/5: train_loss=0.{k}1" for k in range(1, 6)]
    tb = ["Traceback (most recent call last):", '  File "/src/run.py", line 40, in main', "    loss.backward()",
          "RuntimeError: CUDA error: an illegal memory access was encountered"]
    lines = [*earlier, "2025-01-01 10:00:00 | INFO | Step 2: Transfer Learning", "Loading target data...", *tb]
    assert phase_of(lines, len(lines) - 1, lines) == "first_step"


def test_a_stage_header_after_a_bars_refreshes_is_read_as_the_screen_shows_it() -> None:
    """A header printed on the line of a progress bar's ``\\r`` refreshes is read as it shows (the last refresh), by the
    loop reader and the evaluation reader alike: ``stage_title`` itself takes what is on screen."""
    bar = "Epoch 5: 100%|##########| 20/20, 6.51it/s\r"
    assert stage_title(bar + "STAGE 2: Model Evaluation") == "Model Evaluation"
    assert stage_trains(stage_title(bar + "Stage 3: Fine-tuning"))
    assert stage_title(bar + "Step 300: loss=2.31") == ""
