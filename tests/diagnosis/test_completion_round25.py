"""Reader round 25, healthy or failed: excerpts written by hand in the formats libraries print. A library's
record of a failure it handles itself (TensorFlow's stream executor failing a device allocation that the BFC
allocator retries smaller, vLLM's engine core starting its shutdown) ends nothing; a real TensorFlow OOM
(ResourceExhaustedError) still does."""

from __future__ import annotations

from gpulens.diagnosis.logread.whole import diagnose_text


def _tf_retry(t: str, size: str, n: int) -> str:
    return (f"2021-03-04 10:00:{t}.100000: E tensorflow/stream_executor/cuda/cuda_driver.cc:806] failed to allocate "
            f"{size} ({n} bytes) from device: CUDA_ERROR_OUT_OF_MEMORY: out of memory")


_TF_RETRIES = [_tf_retry("01", "8.00G", 8589934592), _tf_retry("01", "7.20G", 7730941132),
               "2021-03-04 10:00:01.200000: W tensorflow/core/common_runtime/bfc_allocator.cc:245] Allocator (GPU_0_bfc) "
               "ran out of memory trying to allocate 1.50GiB with freed_by_count=0. The caller indicates that this is "
               "not a failure, but may mean that there could be performance gains if more memory were available."]
_SAMPLES = [f"Sampling batch {i} of 8 ..." for i in range(8)]


def test_tensorflow_allocation_retries_after_the_work_are_no_failure() -> None:
    text = "\n".join(["Loading model from ckpt/model.pb ...", *_SAMPLES, *_TF_RETRIES, *_TF_RETRIES]) + "\n"
    got = diagnose_text(text)
    assert got.diagnosis.category == "none"


def test_a_tensorflow_oom_after_the_retries_is_still_a_failure() -> None:
    oom = ["Traceback (most recent call last):", '  File "sample.py", line 40, in <module>',
           "    out = sess.run(images)",
           "tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating tensor with "
           "shape[64,512,64,64] and type float on /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc"]
    got = diagnose_text("\n".join(["Loading model ...", *_SAMPLES[:2], *_TF_RETRIES, *oom]) + "\n")
    assert got.diagnosis.category == "gpu_oom"


def test_vllm_engine_shutdown_at_the_end_is_no_failure() -> None:
    bars = [f"Processed prompts: 100%|##########| 8/8 [00:{10 + i}<00:00, 1.2it/s]" for i in range(4)]
    items = [f"[{i}/4] item {i} answered" for i in range(1, 5)]
    tail = ["(EngineCore pid=4242) INFO 06-01 10:00:00 [core.py:1150] Shutdown initiated (timeout=0)",
            "(EngineCore pid=4242) INFO 06-01 10:00:00 [core.py:1171] Shutdown complete"]
    lines = ["INFO 06-01 09:58:00 [llm.py:300] Supported tasks: ['generate']"]
    for bar, item in zip(bars, items, strict=True):
        lines += [bar, item]
    got = diagnose_text("\n".join([*lines, *tail]) + "\n")
    assert got.diagnosis.category == "none"


def _py_func_exit(final: str) -> list[str]:
    """A TF 1.x session's report of the script's own ``exit(0)`` inside a ``tf.py_func``."""
    return ["Traceback (most recent call last):",
            '  File "/env/lib/python3.6/site-packages/tensorflow/python/client/session.py", line 1334, in _do_call',
            "    return fn(*args)",
            "tensorflow.python.framework.errors_impl.UnknownError: SystemExit: 0",
            "Traceback (most recent call last):", "",
            '  File "/env/lib/python3.6/site-packages/tensorflow/python/ops/script_ops.py", line 207, in __call__',
            "    ret = func(*args)", "",
            '  File "/home/u/proj/train.py", line 263, in eval_stats', "    exit(0)", "",
            f"{final}", "", "", "\t [[node PyFunc (defined at /home/u/proj/train.py:271) ]]"]


def test_a_zero_system_exit_inside_a_tf_py_func_is_a_normal_end() -> None:
    epochs = [f"Epoch {i}/16: 100%|##########| 1024/1024 [00:10<00:00, 99.1img/s]" for i in range(1, 17)]
    got = diagnose_text("\n".join([*epochs, "accuracy 93.10 92.80", *_py_func_exit("SystemExit: 0")]) + "\n")
    assert got.diagnosis.category == "none"


def test_a_nonzero_system_exit_inside_a_tf_py_func_is_still_a_failure() -> None:
    epochs = [f"Epoch {i}/16: 100%|##########| 1024/1024 [00:10<00:00, 99.1img/s]" for i in range(1, 17)]
    lines = [*epochs, "accuracy 93.10 92.80", *_py_func_exit("SystemExit: 1")]
    lines[lines.index("tensorflow.python.framework.errors_impl.UnknownError: SystemExit: 0")] = \
        "tensorflow.python.framework.errors_impl.UnknownError: SystemExit: 1"
    got = diagnose_text("\n".join(lines) + "\n")
    assert got.diagnosis.category != "none"


_CAUGHT = ["ERROR for model-b: Download failed: IO Error: No space left on device (os error 28)",
           "Traceback (most recent call last):",
           '  File "/work/bench.py", line 221, in main', "    results = generate(model_key)",
           '  File "/env/lib/python3.11/site-packages/huggingface_hub/file_download.py", line 633, in xet_get',
           "    download_files(",
           "RuntimeError: Download failed: IO Error: No space left on device (os error 28)"]
_SUMMARY = ["Saved 60 results to out/bench.json", "", "=" * 40, "BENCHMARK SUMMARY", "=" * 40,
            "  model-a: 30 outputs, avg 1200 chars", "  model-c: 30 outputs, avg 900 chars", "  model-b: SKIPPED"]
_START = ["BENCHMARK: model-a", "model-a: 30 outputs written", "BENCHMARK: model-b"]


def test_a_traceback_the_job_printed_for_a_caught_error_then_its_summary_is_a_normal_end() -> None:
    got = diagnose_text("\n".join([*_START, *_CAUGHT, *_SUMMARY]) + "\n")
    assert got.diagnosis.category == "none"


def test_a_caught_errors_traceback_with_nothing_after_it_is_a_failure() -> None:
    got = diagnose_text("\n".join([*_START, *_CAUGHT]) + "\n")
    assert got.diagnosis.category == "storage_error"


def test_an_uncaught_traceback_from_the_top_level_is_a_failure_whatever_follows() -> None:
    top = [_CAUGHT[0], _CAUGHT[1], '  File "/work/bench.py", line 300, in <module>', "    main()", *_CAUGHT[2:]]
    got = diagnose_text("\n".join([*_START, *top, *_SUMMARY]) + "\n")
    assert got.diagnosis.category == "storage_error"


def test_a_chained_traceback_is_no_print_of_a_caught_error() -> None:
    chain = [*_CAUGHT[1:], "", "During handling of the above exception, another exception occurred:", "",
             "Traceback (most recent call last):", '  File "/work/bench.py", line 230, in main', "    report(e)",
             "RuntimeError: Download failed: IO Error: No space left on device (os error 28)"]
    got = diagnose_text("\n".join([*_START, *chain, *_SUMMARY]) + "\n")
    assert got.diagnosis.category == "storage_error"


def _keras_bar(n: int) -> str:
    return f" {n}/30000 [===>..........................] - ETA: 13:45:03 - Train Loss: -2.1312 - Time (s): 2.2343"


def test_bash_killed_written_onto_a_keras_bar_is_a_bare_kill() -> None:
    bar = "\r".join(_keras_bar(n) for n in range(4530, 4539)) + "Killed"
    text = "\n".join(["Epoch 1/1", bar, "/env/lib/python3.8/multiprocessing/resource_tracker.py:216: UserWarning: "
                      "resource_tracker: There appear to be 6 leaked semaphore objects to clean up at shutdown",
                      "  warnings.warn('resource_tracker: There appear to be %d '"]) + "\n"
    got = diagnose_text(text)
    assert (got.diagnosis.category, got.diagnosis.origin) == ("cpu_oom", "unknown")
    assert got.indicator_lines == [2]


def test_bash_killed_written_onto_a_tqdm_bar_is_a_bare_kill() -> None:
    bar = "\r".join(f" 16%|#6        | {n}/10000 [27:00<2:01:33, 11.79it/s]" for n in range(1600, 1621)) + "Killed"
    got = diagnose_text("\n".join(["Using GPU id 0", bar]) + "\n")
    assert (got.diagnosis.category, got.diagnosis.origin) == ("cpu_oom", "unknown")


def test_a_bar_far_short_of_its_end_with_a_message_written_onto_it_is_a_stop() -> None:
    bar = "\r".join(f" 16%|#6        | {n}/1000000 [27:00<2:01:33, 114.79it/s]" for n in range(162000, 162810, 12))
    text = "\n".join(["Using GPU id 0", "  0%|          | 0/1000000 [00:00<?, ?it/s]/env/lib/python3.10/site-packages/"
                      "gym/utils/checker.py:241: DeprecationWarning: `np.bool8` is a deprecated alias",
                      "  if not isinstance(terminated, (bool, np.bool8)):", bar + "Error in sys.excepthook:",
                      "wandb: "]) + "\n"
    got = diagnose_text(text)
    assert got.diagnosis.category == "unknown"
    assert got.indicator_lines == [4]


def test_a_caught_errors_traceback_then_the_jobs_word_that_it_stops_is_a_failure() -> None:
    got = diagnose_text("\n".join([*_START, *_CAUGHT, "Cleaning up the cache", "Exiting.", *_SUMMARY[:1]]) + "\n")
    assert got.diagnosis.category == "storage_error"
