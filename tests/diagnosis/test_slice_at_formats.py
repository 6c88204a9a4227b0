"""Readings settled from dev rows in stop 57 (docs/diagnosis-evaluation.md, thirtieth pass): wandb's summary rows, a bar
refresh cut by slurmstepd's line, P5's job kind (counted items, a bar, a readiness probe), a missing Python environment,
YOLOX's logging interval, a model the work trained itself, an exit report whatever its exception is called, vLLM's
sleep-mode out-of-memory, and vLLM workers orphaned by their API server's failure."""

from __future__ import annotations

import pytest

from gpulens.diagnosis import logs
from gpulens.diagnosis.logread import diagnose_text

_RUN = ["+ python eval_agents.py", *(f"route {k}: driving score {60 + k}.0, success rate 0.{k}" for k in range(4)),
        "results from route 3: success rate 0.3, driving score 63.0", "evaluation finished"]


@pytest.mark.parametrize("row", ["wandb:                      hero/timeout 0.0", "wandb:   train/oom_count ▁▁▁▁▁▁",
                                 "wandb:     eval/errors 3"])
def test_a_wandb_summary_row_is_no_failure_line(row: str) -> None:
    assert not logs.is_hard_error(logs.normalize_line(row))


def test_a_run_whose_summary_holds_a_timeout_metric_is_healthy() -> None:
    summary = ["wandb: Run history:", "wandb:   hero/score ▁▃▅█", "wandb:   hero/timeout ▁▁▁▁", "wandb:",
               "wandb: Run summary:", "wandb:   hero/score 63.0", "wandb:   hero/timeout 0.0", "wandb:",
               "wandb: 🚀 View run silver-sun-3 at: https://wandb.ai/u/p/runs/1x2y3z"]
    got = diagnose_text("\n".join([*_RUN, *summary])).diagnosis
    assert (got.category, got.origin) == ("none", "none")


def test_a_wandb_row_whose_value_is_an_error_message_stays_a_failure_line() -> None:
    assert logs.is_hard_error(logs.normalize_line("wandb:   error CUDA error: out of memory"))


def _phase(lines: list[str]) -> str | None:
    return diagnose_text("\n".join(lines)).phase


def test_a_cancel_written_into_a_bar_refresh_cut_in_two_reads_the_bar() -> None:
    """tqdm's refresh reached the file in two writes with slurmstepd's line between them: the bar's count shows the
    loop was at 910 of 1000, not at its set-up."""
    bars = "\r".join(f" {k // 10}%|█         | {k}/1000 [00:{k // 10:02d}<04:00,  3.79it/s]" for k in range(0, 910, 7))
    cut = (f"{bars}\r 91%|█████████ | 910/1000 [04:01<00:23,slurmstepd: error: *** JOB 2918671 ON vulcan34 CANCELLED AT "
           "2024-07-19T11:01:04 DUE TO PREEMPTION ***")
    log = ["Loading checkpoint shards: 100%|██████████| 2/2 [00:03<00:00,  1.46s/it]", cut,
           "  3.79it/s]\r 91%|█████████ | 911/1000 [04:01<00:22,  4.00it/s]"]
    assert _phase(log) == "training"


def _inference(first: str) -> list[str]:
    return ["INFO:__main__:Using device: cuda", first, "INFO:__main__:Loading trained vanilla diffusion model...",
            "INFO:__main__:Running per-class softmax posterior inference with 300 samples each...",
            *(f"INFO:__main__:Processing sample {k}/300 for class 6..." for k in range(1, 138)),
            "slurmstepd: error: *** JOB 1525618 ON qgpu0208 CANCELLED AT 2025-11-21T21:06:53 ***"]


def test_an_inference_job_cancelled_while_counting_its_items_is_in_evaluation() -> None:
    """P5: a job with no training loop (a split's size and a "trained" model are no training) that counted its items
    done was past its set-up; a training word in the job's own lines keeps the old reading."""
    assert _phase(_inference("INFO:__main__:Number of classes: 164, training samples: 15240192, test samples: 3448")) \
        == "evaluation"
    assert _phase(_inference("INFO:__main__:Training the classifier head, lr 0.001")) != "evaluation"


@pytest.mark.parametrize("line", ["ERROR: No Python environment found",
                                  "/var/spool/slurmd/job7/slurm_script: line 5: /home/u/venv/bin/activate: No such file "
                                  "or directory"])
def test_a_missing_python_environment_is_an_import_error_of_the_user(line: str) -> None:
    """C9's environment reading: the job's environment is not there (a job script's own check, a venv's activate
    script missing), not a missing script of the job (shell-script-missing) nor a CUDA failure."""
    got = diagnose_text("\n".join(["+ nvidia-smi", "| NVIDIA A100-SXM4-40GB  On |", "Staging data: 3.2G done", line,
                                   "Run setup first: bash scripts/submit.sh --setup --gpu=a100"])).diagnosis
    assert (got.category, got.origin) == ("import_error", "user")


def _yolox(epoch_total: int, last_epoch: int) -> str:
    head = "2023-01-13 19:49:{:02d}.163 | INFO     | yolox.core.trainer:"
    lines = [head.format(0) + "before_train:130 - args: Namespace(batch_size=16, devices=2)"]
    for e in range(last_epoch - 2, last_epoch + 1):
        lines += [head.format(e) + f"after_iter:253 - epoch: {e}/{epoch_total}, iter: 10/14, mem: 4538Mb, "
                  "iter_time: 0.199s, data_time: 0.002s, total_loss: 1.2, iou_loss: 0.6, lr: 1.0e-04",
                  head.format(e) + "evaluate_and_save_model:340 - Average forward time: 2.14 ms",
                  " Average Precision  (AP) @[ IoU=0.50:0.95 | area=   all | maxDets=100 ] = 0.929",
                  head.format(e) + "save_ckpt:356 - Save weights to ./YOLOX_outputs/yolox_s"]
    return "\n".join([*lines, head.format(59) + "after_train:195 - Training of experiment is done and the best AP is "
                      "92.91"])


def test_yolox_last_epoch_logged_before_its_last_iterations_is_a_normal_end() -> None:
    """An epoch of 14 iterations logged every 10 prints 10/14 last: at epoch 20/20 the run reached its end (the inner
    count moves by its logging interval); at epoch 18/50 the closing line is printed however training ended."""
    assert diagnose_text(_yolox(20, 20)).diagnosis.category == "none"
    assert diagnose_text(_yolox(50, 18)).diagnosis.category != "none"


def _vllm_serve(requests: list[str]) -> str:
    p = "(APIServer pid=17544) "
    return "\n".join([
        "(EngineCore_DP0 pid=17709) Loading safetensors checkpoint shards: 100% Completed | 2/2 [00:01<00:00,  1.01s/it]",
        "(EngineCore_DP0 pid=17709) Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): 100%|██████████| 3/3 "
        "[00:01<00:00,  2.9it/s]",
        p + "INFO 09-29 00:29:33 [launcher.py:44] Route: /v1/chat/completions, Methods: POST",
        p + "INFO:     Started server process [17544]", p + "INFO:     Waiting for application startup.",
        p + "INFO:     Application startup complete.", *(p + r for r in requests),
        p + "WARNING 09-29 01:41:06 [launcher.py:98] port 8001 is used by process psutil.Process(pid=17544, "
            "name='vllm', status='running', started='00:28:44') launched with command:",
        p + "INFO 09-29 01:41:06 [launcher.py:101] Shutting down FastAPI HTTP server."])


def test_a_server_stopped_after_answering_a_readiness_probe_was_serving() -> None:
    """P5: a client's "GET /v1/models" reaches a server only after its start-up: stopped after it, the server was in its
    serving phase; the CUDA-graph capture bar of its start-up counts no step."""
    got = diagnose_text(_vllm_serve(['INFO:     127.0.0.1:41310 - "GET /v1/models HTTP/1.1" 200 OK']))
    assert (got.phase, got.step) == ("evaluation", None)
    assert diagnose_text(_vllm_serve([])).phase == "startup"


def _hub_load(announce: str) -> str:
    return "\n".join([
        "[2026-04-17 13:47:39] [safety_warp] [INFO] Starting Phase 2: Importance Scoring",
        "[2026-04-17 13:47:52] [safety_warp] [INFO] Basis loaded: 160 (layer, type) combinations",
        f"[2026-04-17 13:47:53] [safety_warp] [INFO] {announce}",
        "Traceback (most recent call last):",
        '  File "/env/lib/python3.10/site-packages/huggingface_hub/utils/_http.py", line 402, in hf_raise_for_status',
        "    response.raise_for_status()",
        '  File "/env/lib/python3.10/site-packages/requests/models.py", line 1026, in raise_for_status',
        "    raise HTTPError(http_error_msg, response=self)",
        "requests.exceptions.HTTPError: 404 Client Error: Not Found for url: "
        "https://huggingface.co/kmseong/llama2_7-chat-Safety-FT/resolve/main/config.json", "",
        "The above exception was the direct cause of the following exception:", "",
        "Traceback (most recent call last):",
        '  File "/work/phase2.py", line 88, in load_model',
        "    model = AutoModelForCausalLM.from_pretrained(name)",
        '  File "/env/lib/python3.10/site-packages/transformers/utils/hub.py", line 470, in cached_file',
        "    raise EnvironmentError(",
        "OSError: kmseong/llama2_7-chat-Safety-FT is not a local folder and is not a valid model identifier listed on "
        "'https://huggingface.co/models'"])


def test_a_model_the_work_trained_itself_announced_before_a_hub_load_is_checkpoint_load() -> None:
    """P7: the program says the model it reads is one it trained (an earlier stage's upload): checkpoint_load; a
    pretrained model's load is start-up."""
    assert diagnose_text(_hub_load("Loading Phase 0 trained model from kmseong/llama2_7-chat-Safety-FT...")).phase \
        == "checkpoint_load"
    assert diagnose_text(_hub_load("Loading pretrained model from kmseong/llama2_7-chat-Safety-FT...")).phase \
        == "startup"


def test_vllm_sleep_mode_allocator_out_of_memory_is_a_gpu_oom() -> None:
    """vLLM's sleep-mode allocator writes "CUDA Error" with a capital E when a wake_up cannot map its memory back."""
    log = ['INFO:     127.0.0.1:40686 - "POST /sleep?level=1 HTTP/1.1" 200 OK',
           "CUDA Error: out of memory at /workspace/csrc/cumem_allocator.cpp:139",
           "(EngineCore pid=48200) ERROR 06-02 14:31:01 [core.py:1365] RuntimeError: CUDA Error: out of memory at "
           "/workspace/csrc/cumem_allocator.cpp:139",
           'INFO:     127.0.0.1:40690 - "POST /wake_up HTTP/1.1" 500 Internal Server Error']
    got = diagnose_text("\n".join(log)).diagnosis
    assert (got.category, got.method) == ("gpu_oom", "rule")


def _offline(url: str) -> list[str]:
    return ["Predicting: 100%|██████████| 29/29 [00:31<00:00,  1.08s/it]", "Traceback (most recent call last):",
            '  File "/home/u/AutoRed/scripts/train_text_generation.py", line 84, in <module>', "    main(**config)",
            '  File "/home/u/.venv/lib/python3.10/site-packages/datasets/utils/file_utils.py", line 272, in '
            "_raise_if_offline_mode_is_enabled", "    raise OfflineModeIsEnabled(",
            f"datasets.utils.file_utils.OfflineModeIsEnabled: Offline mode is enabled. Tried to reach {url}"]


def test_an_exit_report_whose_exception_is_not_named_error_is_the_failure_line() -> None:
    """The interpreter's exit report at the log's end ended the process whatever its exception is called; offline, a
    metric's loading script not cached is code to import (import_error), a data file is input (incorrect_input)."""
    got = diagnose_text("\n".join(_offline(
        "https://raw.githubusercontent.com/huggingface/datasets/2.18.0/metrics/meteor/meteor.py")))
    assert (got.diagnosis.category, got.indicator_lines) == ("import_error", [7])
    data = diagnose_text("\n".join(_offline("https://huggingface.co/datasets/squad/resolve/main/train.json")))
    assert data.diagnosis.category == "incorrect_input"


def _attack(answer: str) -> str:
    warn = "/env/lib/python3.10/site-packages/torch/autograd/graph.py:824: UserWarning: Deterministic behavior was enabled"
    bars = "\r".join(f"  {k // 10}%|          | {k}/1000 [00:{k // 10:02d}<12:16,  1.36it/s]" for k in range(1, 331, 7))
    return "\n".join([warn, "  return Variable._execution_engine.run_backward(  # Calls into the C++ engine",
                      "2025-08-13 03:07:28,814 - INFO - Melhor score: 0.17291244864463806",
                      f"2025-08-13 03:07:29,904 - INFO - Resposta: {answer}",
                      bars + "slurmstepd: error: *** JOB 25568 ON cluster-node7 CANCELLED AT 2025-08-13T03:12:05 ***"])


def test_a_bar_of_a_job_with_no_training_loop_is_evaluation() -> None:
    """P5 on a cancel printed onto a bar: a prompt-attack job (a warning's quoted library code calls backward, a model's
    answer says "strain") has no training loop, so its bar counts its work; a job that trains keeps "training"."""
    assert diagnose_text(_attack("A new and highly contagious strain of bacteria ...")).phase == "evaluation"
    assert diagnose_text(_attack("epoch 3 train loss 0.41")).phase == "training"


def _api_server_dies(workers: list[str]) -> str:
    p = "(APIServer pid=21) "
    return "\n".join([
        "(EngineCore_DP0 pid=32) INFO 02-09 12:47:03 [core.py:272] init engine (profile, create kv cache, warmup model) "
        "took 78.45 seconds", p + "INFO 02-09 12:47:08 [api_server.py:665] Supported tasks: ['generate']", *workers,
        p + "Traceback (most recent call last):",
        p + '  File "/usr/local/lib/python3.12/dist-packages/vllm/entrypoints/openai/api_server.py", line 944, in '
            "run_server_worker", p + "    await init_app_state(engine_client, app.state, args)",
        p + '  File "/usr/local/lib/python3.12/dist-packages/openai_harmony/__init__.py", line 699, in '
            "load_harmony_encoding", p + "    inner: _PyHarmonyEncoding = _load_harmony_encoding(name)",
        p + "openai_harmony.HarmonyError: invalid tiktoken vocab file: expected token and rank, could not split on ' ' "
            "at line 1"])


def test_workers_shutting_down_because_their_parent_died_are_no_teardown() -> None:
    """vLLM's workers print "Parent process exited, terminating worker" and "WorkerProc shutting down." before the API
    server's own traceback reaches the log: a reaction to that failure in the server's set-up, not the job's shutdown."""
    orphaned = ["(Worker_TP0 pid=41) INFO 02-09 12:47:08 [multiproc_executor.py:730] Parent process exited, "
                "terminating worker",
                "(Worker_TP0 pid=41) INFO 02-09 12:47:08 [multiproc_executor.py:774] WorkerProc shutting down."]
    assert diagnose_text(_api_server_dies(orphaned)).phase == "startup"
    assert diagnose_text(_api_server_dies(orphaned[1:])).phase == "shutdown"


def _ddp_unused(rank: int) -> list[str]:
    return ["Traceback (most recent call last):", '  File "tools/train.py", line 161, in <module>', "    main()",
            '  File "/env/lib/python3.8/site-packages/torch/nn/parallel/distributed.py", line 947, in forward',
            "    if torch.is_grad_enabled() and self.reducer._rebuild_buckets():",
            "RuntimeError: Expected to have finished reduction in the prior iteration before starting a new one. This "
            "error indicates that your module has parameters that were not used in producing loss. You can enable "
            "unused parameter detection by passing the keyword argument `find_unused_parameters=True`, and by ",
            "making sure all `forward` function outputs participate in calculating loss. ",
            "If you already have done the above, then the distributed data parallel module wasn't able to locate the "
            "output tensors in the return value of your module's `forward` function. Please include the loss "
            "function and the structure of the return value of `forward` of your module when reporting this issue.",
            f"Parameter indices which did not receive grad for rank {rank}: 165 166 167 168"]


def test_the_lines_that_go_on_an_exceptions_message_are_no_progress() -> None:
    """DDP's message runs over several unindented lines, two of them with the word "loss": no step of a run that went
    on, so rank 0's copy, the first, is the failure's line (R5), not rank 1's."""
    lines = ["loading annotations into memory...", "Done (t=0.51s)", *_ddp_unused(0), *_ddp_unused(1)]
    assert diagnose_text("\n".join(lines)).indicator_lines == [8]
