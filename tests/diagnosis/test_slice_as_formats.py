"""Readings settled from dev rows in stop 56: a framework module's missing attribute is an API that changed between
versions (README C9: ``semantic_error``) when the job's own code calls it, an ``import_error`` only while a library is
being imported."""

from __future__ import annotations

import pytest

from gpulens.diagnosis.logread import diagnose_text
from gpulens.diagnosis.logread.end.completion_messages import completion_strength

_EPOCHS = [f"epoch {k}: prepared {k * 10} samples" for k in range(3)]


def _job(*tb: str) -> str:
    return "\n".join(["+ python train.py", *_EPOCHS, "Traceback (most recent call last):", *tb])


_CALLED = ('  File "/group/p/exp001/train.py", line 246, in <module>', "    main()",
           '  File "/group/p/exp001/train.py", line 165, in main', '    scaler = torch.amp.GradScaler("cuda", enabled=True)',
           "AttributeError: module 'torch.amp' has no attribute 'GradScaler'")
_IMPORTED = ('  File "/group/p/exp001/train.py", line 3, in <module>', "    import torchvision",
             '  File "/env/lib/python3.10/site-packages/torchvision/_meta_registrations.py", line 26, in <module>',
             '    @torch.library.register_fake("torchvision::roi_align")',
             "AttributeError: module 'torch.library' has no attribute 'register_fake'")


@pytest.mark.parametrize(("tb", "category"), [(_CALLED, "semantic_error"), (_IMPORTED, "import_error")])
def test_a_framework_api_missing_is_semantic_when_called_and_an_import_error_while_imported(
        tb: tuple[str, ...], category: str) -> None:
    got = diagnose_text(_job(*tb)).diagnosis
    assert (got.category, got.origin) == (category, "user")


def _served_then_cancelled(after: list[str]) -> list[str]:
    tb = ["Traceback (most recent call last):",
          '  File "/opt/conda/lib/python3.10/site-packages/transformers/utils/hub.py", line 402, in cached_file',
          "    resolved_file = hf_hub_download(",
          "huggingface_hub.errors.HFValidationError: Repo id must be in the form 'repo_name' or 'namespace/repo_name': '/m/'",
          "", "The above exception was the direct cause of the following exception:", "",
          "Traceback (most recent call last):",
          '  File "/opt/conda/lib/python3.10/site-packages/uvicorn/protocols/http/httptools_impl.py", line 401, in run_asgi',
          "    result = await app(  # type: ignore[func-returns-value]",
          '  File "/app/rag_proxy.py", line 42, in get_tokenizer',
          "    _tokenizer = AutoTokenizer.from_pretrained(MODEL_NAME, use_fast=True)",
          "OSError: Incorrect path_or_model_id: '/m/'. Please provide either the path to a local folder or the repo_id."]
    lines = ["Thu Jan 29 03:39:27 EST 2026 STARTING SERVICE", "+ touch job.started", "+ hostname",
             "+ singularity instance start vllm"]
    for k in range(3):
        lines += [f'INFO:     10.0.0.5:5{k}068 - "POST /v1/chat/completions HTTP/1.1" 500 Internal Server Error',
                  "ERROR:    Exception in ASGI application", *tb,
                  f'INFO:     127.0.0.1:3751{k} - "GET /search?query=Hello&top_k=4 HTTP/1.1" 200 OK']
    return [*lines, "[2026-01-29T04:03:03.675] error: *** JOB 23859577 ON gpu-110 CANCELLED AT 2026-01-29T04:03:03 "
                    "DUE to SIGNAL Terminated ***", *after]


_TRAP = ["++ cleanup", "+++ date", "++ echo 'Thu Jan 29 04:03:03 EST 2026 Cleaning up singularity instances...'",
         "Thu Jan 29 04:03:03 EST 2026 Cleaning up singularity instances...", "++ singularity instance stop vllm",
         "++ singularity instance stop rag", "+ cleanup", "+ singularity instance stop vllm"]


def test_a_served_job_cancelled_then_its_trap_cleaning_up_is_one_attempt_stopped_from_outside() -> None:
    """A job script's ``trap cleanup`` traced by ``set -x`` after Slurm's cancel is the dying job, not a new attempt
    (which would end normally); a web server's per-request exception reports (uvicorn's "Exception in ASGI
    application", chained tracebacks included) are caught: the server went on, the cancel is the end."""
    got = diagnose_text("\n".join(_served_then_cancelled(_TRAP)))
    assert (got.diagnosis.category, got.diagnosis.origin, got.attempts) == ("preempted", "unknown", 1)
    assert got.first_node == "gpu-110"


def test_a_new_jobs_output_after_a_cancel_still_starts_an_attempt() -> None:
    new_job = ["Thu Jan 30 09:00:00 EST 2026 STARTING SERVICE", "+ touch job.started", "loading model weights",
               "model ready", "Epoch 1/1: loss=0.3", "Training finished."]
    assert diagnose_text("\n".join(_served_then_cancelled(new_job))).attempts == 2


_API = "(APIServer pid=1) INFO 02-05 00:07:28 [launcher.py:46] "
_UP = [*(f"{_API}Route: /v1/{r}, Methods: POST" for r in ("chat/completions", "completions", "embeddings")),
       "(APIServer pid=1) INFO:     Started server process [1]", "(APIServer pid=1) INFO:     Waiting for application startup.",
       "(APIServer pid=1) INFO:     Application startup complete."]
_DOWN = ["(APIServer pid=1) INFO 02-05 00:11:38 [launcher.py:110] Shutting down FastAPI HTTP server.",
         "(APIServer pid=1) INFO:     Shutting down", "(APIServer pid=1) INFO:     Waiting for application shutdown.",
         "(APIServer pid=1) INFO:     Application shutdown complete."]
_WRAPPER = ["", "vLLM server started on http://localhost:8000", "", "To test the server, run:", "",
            "   curl -X POST http://localhost:8000/v1/chat/completions \\", '     -H "Content-Type: application/json" \\',
            """     -d '{"model": "m", "messages": [{"role": "user", "content": "What is AI?"}], "max_tokens": 100}'""",
            "", "To stop the server, run:", "", "   docker stop vllm-gpt-oss-20b"] * 2
_ANSWERED = ['(APIServer pid=1) INFO:     127.0.0.1:40000 - "POST /v1/chat/completions HTTP/1.1" 200 OK'] * 3


@pytest.mark.parametrize(("served", "category", "phase"), [((), "preempted", "startup"), (_ANSWERED, "none", "none")])
def test_a_servers_shutdown_is_read_above_its_wrapper_scripts_own_lines(served: tuple[str, ...], category: str,
                                                                           phase: str) -> None:
    """The job script that ran a vLLM server printed its own lines after the server's shutdown: the shutdown is still
    how the server ended, stopped from outside before any request (README O3; P5: set-up, ``startup``), or stopped
    by its client right after its last answer (a normal end)."""
    got = diagnose_text("\n".join([*_UP, *served, *_DOWN, *_WRAPPER]))
    assert (got.diagnosis.category, got.phase) == (category, phase)


def _summary(device: int) -> list[str]:
    ruler, thin = "|" + "=" * 75 + "|", "|" + "-" * 75 + "|"
    return [f"2022-10-28 06:47:56 | WARNING | fairseq.trainer | {ruler}",
            f"|                  PyTorch CUDA memory summary, device ID {device}                 |", thin,
            "|            CUDA OOMs: 1            |        cudaMalloc retries: 3         |", ruler,
            "|        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  |", thin,
            "| Allocated memory      |   36233 MB |   36233 MB |    1165 TB |    1165 TB |", thin,
            "| Oversize GPU segments |       0    |       0    |       0    |       0    |", ruler, ""]


_FAIRSEQ = [f"2022-10-28 06:4{k}:35 | INFO | train_inner | epoch 001:  {15607 + 100 * k} / 16028 loss=3.39, ppl=2.85"
            for k in range(5)] + ['2022-10-28 06:44:07 | INFO | fairseq_cli.train | begin validation on "valid" subset']
_OOM = ("2022-10-28 06:47:56 | WARNING | fairseq.trainer | OOM: Ran out of memory with exception: CUDA out of memory. "
        "Tried to allocate 3.26 GiB (GPU {}; 39.59 GiB total capacity; 26.22 GiB already allocated)")
_RETRY = "2022-10-28 06:47:56 | WARNING | fairseq.trainer | ran out of memory in validation step, retrying batch"


def test_a_log_that_ends_in_cuda_memory_summaries_after_an_oom_died_of_it() -> None:
    """fairseq prints a CUDA memory summary per device after an OOM and retries the batch; a retry that runs out again
    is re-raised, its traceback on another stream: the log ends in the summaries, and the first OOM report is the root."""
    body = [_OOM.format(0), *(r for d in range(2) for r in _summary(d)), _RETRY,
            _OOM.format(0), *(r for d in range(2) for r in _summary(d))]
    got = diagnose_text("\n".join([*_FAIRSEQ, *body]))
    assert (got.diagnosis.category, got.phase) == ("gpu_oom", "evaluation")
    assert got.indicator_lines[0] == len(_FAIRSEQ) + 1


def test_a_memory_summary_printed_after_a_finished_run_is_no_failure() -> None:
    done = [*_FAIRSEQ[:-1], "2022-10-28 06:50:00 | INFO | fairseq_cli.train | done training in 473878.3 seconds",
            *_summary(0)]
    assert diagnose_text("\n".join(done)).diagnosis.healthy


def _yolox(epoch: int, iters: range) -> list[str]:
    head = "2023-08-27 08:{:02d}:{:02d}.292 | INFO     | yolox.core.trainer:"
    lines = [head.format(0, 0) + "before_train:130 - args: Namespace(batch_size=8, devices=1, exp_file='exps/mot20.py')",
             head.format(0, 1) + "before_train:196 - Training start..."]
    lines += [head.format(k % 60, k % 60) + f"after_iter:250 - epoch: {epoch}/80, iter: {k}/2233, mem: 20118Mb, "
              f"iter_time: 1.102s, data_time: 0.001s, total_loss: 9.{k % 10}, iou_loss: 2.8, lr: 1.5e-05" for k in iters]
    return [*lines, head.format(59, 59) + "after_train:180 - Training of experiment is done and the best AP is 0.00"]


@pytest.mark.parametrize(("epoch", "iters", "healthy"), [(1, range(10, 90, 10), False), (80, range(2190, 2240, 10), True)])
def test_yoloxs_closing_line_after_a_short_counter_is_a_stop(epoch: int, iters: range, healthy: bool) -> None:
    """YOLOX logs "Training of experiment is done" from a finally block, however training ended: after iteration 80
    of 2,233 in epoch 1 of 80 the run stopped (cause not in the log); after the last iteration of the last epoch it
    finished."""
    got = diagnose_text("\n".join(_yolox(epoch, iters)))
    assert got.diagnosis.healthy is healthy
    assert healthy or (got.diagnosis.category, got.phase) == ("unknown", "training")


def test_an_unreadable_tiktoken_vocabulary_is_the_models_damaged_tokenizer_file() -> None:
    """gpt-oss's harmony renderer loads a tiktoken encoding file when vLLM's server starts; a file that is no
    vocabulary (a download cut short or proxied) is a tokenizer file of the model that cannot be read (README C2),
    damaged the log does not show how (O5: origin unknown)."""
    got = diagnose_text(_job('  File "/venv/lib/python3.12/site-packages/vllm/entrypoints/openai/api_server.py", '
                             'line 1530, in init_app_state', "    load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS)",
                             "openai_harmony.HarmonyError: invalid tiktoken vocab file: expected token and rank, could "
                             "not split on ' ' at line 1")).diagnosis
    assert (got.category, got.origin, got.rule_id) == ("checkpoint_error", "unknown", "harmony-tiktoken-vocab-invalid")


_SITE = "/w/.venv/lib/python3.11/site-packages"
_WARMUP = ["Traceback (most recent call last):", f'  File "{_SITE}/vllm/v1/worker/gpu_worker.py", line 713, in compile',
           "    kernel_warmup(self)", f'  File "{_SITE}/vllm/model_executor/warmup/kernel_warmup.py", line 100, in kernel_warmup',
           "    from vllm.compilation.passes.fusion.allreduce_rms_fusion import (",
           f'  File "{_SITE}/vllm/compilation/passes/fusion/allreduce_rms_fusion.py", line 12, in <module>',
           "    import flashinfer.comm as _flashinfer_comm", f'  File "{_SITE}/flashinfer/comm/fd_exchange.py", line 55, in <module>',
           "    def _fd_ancillary(fd: int) -> tuple[tuple[int, int, array.array[int]]]:",
           "TypeError: type 'array.array' is not subscriptable"]
_API = ["Traceback (most recent call last):", f'  File "{_SITE}/vllm/v1/engine/utils.py", line 1137, in wait_for_engine_startup',
        "    raise RuntimeError(", "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}"]


def test_an_error_in_a_lazily_imported_librarys_module_code_is_an_import_error_behind_a_parents_report() -> None:
    """vLLM's kernel warm-up imports flashinfer inside a function (a lazy import) and flashinfer's module-level code
    raises (README C9: raised while a library is imported); the API server's "See root cause above" report printed
    after it does not hide that traceback."""
    got = diagnose_text("\n".join(["(EngineCore pid=9) INFO loading weights", *_WARMUP, *_API])).diagnosis
    assert (got.category, got.origin) == ("import_error", "user")
    assert "imported flashinfer" in (got.reason or "")


@pytest.mark.parametrize(("line", "stops"), [("  Early stopping: patience=3", False), ("early_stopping: True", False),
                                             ("Early stopping patience: 20", False),
                                             ("Early stopping: no improvement in 5 epochs", True),
                                             ("Early stopping triggered at epoch 12", True)])
def test_an_early_stopping_setting_in_the_config_banner_is_no_stop(line: str, stops: bool) -> None:
    """A script's banner prints its early-stopping setting ("Early stopping: patience=3") before training: no stop
    happened there, unlike "Early stopping triggered" (phase rule P10)."""
    assert (completion_strength(line) > 0) is stops
