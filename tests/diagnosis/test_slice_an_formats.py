"""Formats read from the dev rows of slice `an`: a loop that breaks at its configured iteration before its
epoch bar ends, threads that die after the work's end, a debugger's backtrace after a native abort, llm.c's
two-line CUDA check, ROCm builds' CUDA-style errors, sentencepiece refusing a missing model file, and
paddle.distributed.launch reporting a worker's SIGTERM."""

from __future__ import annotations

import pytest

from gpulens.diagnosis.classifier import Classifier, default_classifier
from gpulens.diagnosis.logread import diagnose_text
from gpulens.diagnosis.logread.end.progress_end import broke_at_configured_step


@pytest.fixture(scope="module")
def clf() -> Classifier:
    return default_classifier()


def _iterations(last: int, bar_total: int, max_iterations: int) -> list[str]:
    out = [f"Namespace(exp='UAMT', max_iterations={max_iterations}, batch_size=4, base_lr=0.01)",
           "1 itertations per epoch"]
    for i in range(1, last + 1):
        out.append(f"100%|#########9| {i - 1}/{bar_total} [3:21:54<00:04,  2.30s/it]iteration {i} : loss : 0.05")
        if i % 100 == 0:
            out.append(f"save model to ../model/UAMT/iter_{i}.pth")
    return [*out, f"100%|#########9| {last - 1}/{bar_total} [3:21:56<00:04,  2.02s/it]", "GPU Epilog Script v0.30"]


def test_a_loop_that_broke_at_its_configured_iteration_ended_normally(clf: Classifier) -> None:
    lines = _iterations(600, 601, 600)
    w = diagnose_text("\n".join(lines) + "\n", clf)
    assert (w.diagnosis.category, w.diagnosis.origin) == ("none", "none")


def test_the_same_loop_stopped_short_of_its_configured_iteration_is_a_stop_mid_run(clf: Classifier) -> None:
    lines = _iterations(500, 601, 600)
    w = diagnose_text("\n".join(lines) + "\n", clf)
    assert w.diagnosis.category == "unknown" and not w.diagnosis.healthy


@pytest.mark.parametrize(("line", "expected"), [
    ("100%|#| 5999/6001 [3:21:54<00:04, 2.30s/it]iteration 6000 : loss : 0.05", True),
    ("iteration 5000 : loss : 0.05", False),                   # not the configured step
    ("Step 6000/12000 loss 0.05", False),                      # its own step counter is short
    ("Epoch 99: 24%|##| 1200/5000 loss 0.05", False),          # an epoch alone never says the loop broke
])
def test_broke_at_configured_step(line: str, expected: bool) -> None:
    assert broke_at_configured_step(line, {"epoch": {100}, "step": {6000}}) is expected


def _thread_tail(done: str) -> list[str]:
    out = [f"23-05-24 04:21:{s:02d}.875 - INFO: [epoch: 80, iter: {s * 100:,}, lr:(1.0e-07,)] l_pix: 4.5e-03"
           for s in range(1, 40)]
    out += [done, "Disabled distributed training."]
    for name in ("Thread-83", "Thread-82"):
        out += [f"Exception in thread {name}:", "Traceback (most recent call last):",
                '  File "/env/lib/python3.8/threading.py", line 932, in _bootstrap_inner',
                "    self.run()",
                '  File "/env/lib/python3.8/site-packages/paddle/fluid/dataloader/dataloader_iter.py", line 217, in '
                "_thread_loop",
                "    batch = self._dataset_fetcher.fetch(indices,",
                "AssertionError: We only support 'to_tensor()' in dynamic graph mode, please call "
                "'paddle.disable_static()' to enter dynamic graph mode."]
    return out


def test_threads_that_die_after_the_end_of_training_leave_it_normal(clf: Classifier) -> None:
    lines = _thread_tail("23-05-24 04:21:57.907 - INFO: End of training.")
    w = diagnose_text("\n".join(lines) + "\n", clf)
    assert w.diagnosis.category == "none"
    assert "threads other than the main one" in (w.diagnosis.reason or "")


def test_the_same_thread_errors_without_a_completion_message_are_a_failure(clf: Classifier) -> None:
    lines = _thread_tail("23-05-24 04:21:57.907 - INFO: Validating.")
    w = diagnose_text("\n".join(lines) + "\n", clf)
    assert w.diagnosis.category != "none" and not w.diagnosis.healthy


_GGML_ABORT = [
    "load_tensors: offloaded 48/49 layers to GPU",
    "load_tensors:        ROCm0 model buffer size =  7981.97 MiB",
    ".....:0:rocdevice.cpp            :3587: 1012355198 us:  Callback: Queue 0x7cb113a00000 aborting with error : "
    "HSA_STATUS_ERROR_EXCEPTION: An HSAIL operation resulted in a hardware exception. code: 0x1016",
    "Kernel Name: __amd_rocclr_copyBuffer",
    " ROCm error: unspecified launch failure",
    "/home/u/llama.cpp/ggml/src/ggml-cuda/ggml-cuda.cu:97: ROCm error",
    "  current device: -1, in function ggml_backend_cuda_buffer_set_tensor at ggml-cuda.cu:632",
    *[f"[New LWP {24819 + k}]" for k in range(12)],
    "[Thread debugging using libthread_db enabled]",
    'Using host libthread_db library "/lib/x86_64-linux-gnu/libthread_db.so.1".',
    "0x00007cb26daea42f in __GI___wait4 (pid=24843, stat_loc=0x0, options=0, usage=0x0) at wait4.c:30",
    "30\t../sysdeps/unix/sysv/linux/wait4.c: No such file or directory.",
    "#0  0x00007cb26daea42f in __GI___wait4 (pid=24843, stat_loc=0x0, options=0, usage=0x0) at wait4.c:30",
    "#1  0x00007cb27292e266 in ggml_print_backtrace () from /home/u/llama.cpp/build/bin/libggml-base.so.0",
    "#2  0x00007cb272943d19 in ggml_abort () from /home/u/llama.cpp/build/bin/libggml-base.so.0",
    "#3  0x0000000000581b4f in main ()",
    "[Inferior 1 (process 24816) detached]",
]


def test_a_debuggers_backtrace_after_a_native_abort_is_no_output_of_the_job(clf: Classifier) -> None:
    head = [f"llama_model_loader: - kv {k:3d}: general.name str = DeepSeek" for k in range(30)]
    w = diagnose_text("\n".join(head + _GGML_ABORT) + "\n", clf)
    assert not w.diagnosis.healthy
    assert w.indicator_lines and w.indicator_lines[0] == len(head) + 3


@pytest.mark.parametrize(("message", "category"), [
    ("RuntimeError: HIP error: an illegal memory access was encountered", "cuda_error"),
    ("RuntimeError: HIP error: unspecified launch failure", "cuda_error"),
    ("RuntimeError: HIP error: misaligned address", "cuda_error"),
])
def test_rocm_builds_report_the_cuda_faults_in_their_own_words(clf: Classifier, message: str, category: str) -> None:
    lines = ["epoch 1 step 10 loss 2.1", "Traceback (most recent call last):",
             '  File "train.py", line 9, in <module>', "    loss.backward()", message]
    assert diagnose_text("\n".join(lines) + "\n", clf).diagnosis.category == category


def test_llmc_cuda_check_reads_its_two_lines_as_one_message(clf: Classifier) -> None:
    lines = ["allocating 19806 MiB for activations", "device memory usage: 22198 MiB / 40338 MiB",
             "[CUDA ERROR] at file train_gpt2.cu:754:", "misaligned address"]
    w = diagnose_text("\n".join(lines) + "\n", clf)
    assert (w.diagnosis.category, w.diagnosis.origin) == ("cuda_error", "user")
    assert w.indicator_lines[0] == 3


def test_sentencepiece_refusing_a_missing_model_file_is_a_checkpoint_error(clf: Classifier) -> None:
    lines = ["Traceback (most recent call last):",
             '  File "/env/lib/python3.12/site-packages/transformers/models/llama/tokenization_llama.py", line 198, '
             "in get_spm_processor",
             "    tokenizer.Load(self.vocab_file)",
             '  File "/env/lib/python3.12/site-packages/sentencepiece/__init__.py", line 316, in LoadFromFile',
             "    return _sentencepiece.SentencePieceProcessor_LoadFromFile(self, arg)",
             "TypeError: not a string"]
    d = diagnose_text("\n".join(lines) + "\n", clf).diagnosis
    assert (d.category, d.origin) == ("checkpoint_error", "user")
    elsewhere = [*lines[:3], '  File "train.py", line 40, in main', "    name = prefix + cfg.name", lines[-1]]
    assert diagnose_text("\n".join(elsewhere) + "\n", clf).diagnosis.category == "semantic_error"


def test_paddle_launch_reporting_a_sigterm_is_preempted(clf: Classifier) -> None:
    lines = ["LAUNCH INFO 2025-06-13 17:49:22,888 Watching Pod: wnfrei, replicas 1, status running",
             "LAUNCH INFO 2025-06-16 10:11:25,793 Pod failed",
             "LAUNCH ERROR 2025-06-16 10:11:25,795 Container failed !!!",
             "Container rank 0 status failed cmd ['python', '-u', 'worker.py'] code -15 log log/workerlog.0",
             "LAUNCH INFO 2025-06-16 10:11:25,795 ------------------------- ERROR LOG DETAIL -------------------------",
             "LAUNCH INFO 2025-06-16 10:11:25,796 Exit code -15"]
    assert diagnose_text("\n".join(lines) + "\n", clf).diagnosis.category == "preempted"


def test_tab_separated_metric_rows_after_an_error_are_the_job_going_on() -> None:
    # gdb's note on a frame's source ("30\tin ../sysdeps/.../wait4.c") is no output of the job; a job's own
    # tab-separated metric rows are
    from gpulens.diagnosis.logread.end.after_error import went_on

    rows = [f"{e}\t0.{e:03d}\t0.{90 + e % 9}" for e in range(1, 31)]
    assert went_on(["ValueError: bad row skipped", *rows], 0)
    gdb = [f"{e}\tin ../sysdeps/unix/sysv/linux/wait4.c" for e in range(1, 31)]
    assert not went_on(["ValueError: bad row skipped", *gdb], 0)
