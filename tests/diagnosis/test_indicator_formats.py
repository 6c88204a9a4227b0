"""Indicator lines of the common failure formats under README rules R1-R9 ("Indicator lines:
rules"): one excerpt per format, each written by hand in the shape the tool really prints
(CPython's chained tracebacks, torchrun/elastic, Ray, multiprocessing, the C++ runtime's
``terminate``, CUDA device asserts, NCCL, Slurm, the kernel, Hydra, accelerate/DeepSpeed
launchers, Python's ``logging``)."""

from __future__ import annotations

import pytest

from gpulens.diagnosis.classifier import Classifier
from gpulens.diagnosis.logread import diagnose_text


@pytest.fixture(scope="module")
def rules() -> Classifier:
    return Classifier(model=None, cache_dir=None)


def _picked(lines: list[str], rules: Classifier) -> list[str]:
    w = diagnose_text("\n".join(lines), rules)
    return [lines[n - 1] for n in w.indicator_lines]


def _tb(exc: str, frame: str = "/srv/train.py", prefix: str = "") -> list[str]:
    return [f"{prefix}Traceback (most recent call last):", f'{prefix}  File "{frame}", line 10, in run',
            f"{prefix}    out = step(batch)", f"{prefix}{exc}"]


_STEPS = [f"epoch 1 step {k} loss 0.{k}" for k in range(40, 46)]
_DURING = ["", "During handling of the above exception, another exception occurred:", ""]
_CAUSE = ["", "The above exception was the direct cause of the following exception:", ""]


def test_during_handling_chain_first_and_last(rules: Classifier) -> None:
    # R4: the original error and the one that ended the process, nothing in between
    lines = (_STEPS + _tb("OSError: [Errno 28] No space left on device") + _DURING
             + _tb("FileNotFoundError: [Errno 2] No such file or directory: 'ckpt/step_46.tmp'") + _DURING
             + _tb("RuntimeError: could not save the checkpoint after 3 tries"))
    assert _picked(lines, rules) == ["OSError: [Errno 28] No space left on device",
                                     "RuntimeError: could not save the checkpoint after 3 tries"]


def test_direct_cause_chain_first_and_last(rules: Classifier) -> None:
    lines = (_STEPS + _tb("KeyError: 'input_ids'") + _CAUSE
             + _tb("ValueError: batch is missing a field the model needs") + _CAUSE
             + _tb("RuntimeError: collate failed for batch 12"))
    assert _picked(lines, rules) == ["KeyError: 'input_ids'", "RuntimeError: collate failed for batch 12"]


def test_a_chain_that_repeats_its_message_is_labelled_once(rules: Classifier) -> None:
    lines = _STEPS + _tb("KeyError: 'labels'") + _DURING + _tb("KeyError: 'labels'")
    assert _picked(lines, rules) == ["KeyError: 'labels'"]
    assert diagnose_text("\n".join(lines), rules).indicator_lines == [len(_STEPS) + 4]


def test_a_chain_whose_messages_repeat_ends_at_its_last_exception(rules: Classifier) -> None:
    # transformers' offline look-up: LocalEntryNotFoundError -> OSError, handled by retrying the
    # same look-up, which fails the same way: the chain's first and last lines
    a = "huggingface_hub.errors.LocalEntryNotFoundError: Cannot find the requested files in the disk cache"
    b = "OSError: We couldn't connect to 'https://huggingface.co' to load the files"
    lines = (["[INFO] loading Qwen/Qwen2.5-7B"] + _tb(a) + _CAUSE + _tb(b) + _DURING + _tb(a) + _CAUSE + _tb(b))
    w = diagnose_text("\n".join(lines), rules)
    assert w.indicator_lines == [5, len(lines)]


def test_a_chain_printed_by_a_logger_and_again_by_python_counts_at_its_first_printing(rules: Classifier) -> None:
    # logger.exception("training failed") then raise: the same chain twice, the first printing labelled
    chain = _tb("OSError: [Errno 5] Input/output error") + _CAUSE + _tb("RuntimeError: checkpoint write failed")
    lines = _STEPS + ["2025-03-02 10:04:11,201 - ERROR - trainer - training failed"] + chain + chain
    w = diagnose_text("\n".join(lines), rules)
    first_io = len(_STEPS) + 1 + 4
    assert w.indicator_lines == [first_io, first_io + 7]


def test_multiprocessing_remote_traceback_counts_by_its_embedded_error(rules: Classifier) -> None:
    # multiprocessing.Pool re-raises a worker's error: "RemoteTraceback:" embeds the worker's
    # traceback in triple quotes, then "direct cause" of the same error in the parent
    lines = (["preprocessing 64 shards with 8 workers",
              "multiprocessing.pool.RemoteTraceback: ", '"""', "Traceback (most recent call last):",
              '  File "/usr/lib/python3.10/multiprocessing/pool.py", line 125, in worker',
              "    result = (True, func(*args, **kwds))", '  File "/srv/prep.py", line 31, in tokenize_shard',
              "    ids = tok(text)[\"input_ids\"]", "UnicodeDecodeError: 'utf-8' codec can't decode byte 0xff in position 0",
              '"""'] + _CAUSE
             + _tb("UnicodeDecodeError: 'utf-8' codec can't decode byte 0xff in position 0", "/srv/prep.py"))
    assert diagnose_text("\n".join(lines), rules).indicator_lines == [9]


def test_a_ray_actor_that_failed_to_import_counts_by_the_import_error(rules: Classifier) -> None:
    # Ray's wrapper message ends with a colon and embeds the worker's import traceback; the driver
    # then fails on the missing actor: the embedded original and the terminal error (R4, R7)
    lines = ["(main_task pid=2101) Total training steps: 560",
             "(raylet) Traceback (most recent call last):",
             '  File "python/ray/_raylet.pyx", line 2276, in ray._raylet.task_execution_handler',
             "RuntimeError: The actor with name WorkerDict failed to import on the worker. This may be because needed "
             "library dependencies are not installed in the worker environment:",
             "",
             "Traceback (most recent call last):",
             '  File "/opt/conda/lib/python3.10/site-packages/flash_attn/__init__.py", line 3, in <module>',
             "    import flash_attn_2_cuda as flash_attn_gpu",
             "ImportError: /opt/conda/lib/python3.10/site-packages/flash_attn_2_cuda.so: undefined symbol: _ZN3c105ErrorC2E",
             "",
             "Traceback (most recent call last):",
             '  File "/srv/main_ppo.py", line 25, in main',
             "    ray.get(main_task.remote(config))",
             "ray.exceptions.RayTaskError(AssertionError): ray::main_task() (pid=2101, ip=10.0.0.7)",
             '  File "/srv/ray/base.py", line 274, in _init_with_resource_pool',
             "    assert register_center_actor is not None",
             "AssertionError: failed to get register_center_actor: ab12_register_center in []"]
    assert diagnose_text("\n".join(lines), rules).indicator_lines == [9, 17]


def test_urllib3_retry_warnings_are_not_the_error(rules: Classifier) -> None:
    # urllib3 logs each retry; the error is what is raised when it gives up (R2: warnings before
    # the failure are not labelled)
    retry = ("Retrying (Retry(total={n}, connect={n}, read=5, redirect=5, status=5)) after connection broken by "
             "'ConnectTimeoutError(<urllib3.connection.HTTPSConnection object at 0x7f01>, 'Connection to api.example.org "
             "timed out. (connect timeout=10)')': /v1/auth")
    lines = ([retry.format(n=n) for n in range(3, -1, -1)] + _tb("TimeoutError: timed out", "/opt/urllib3/connection.py")
             + _CAUSE + _tb("requests.exceptions.ConnectTimeout: HTTPSConnectionPool(host='api.example.org', port=443): "
                            "Max retries exceeded with url: /v1/auth", "/srv/tracker.py"))
    assert diagnose_text("\n".join(lines), rules).indicator_lines == [8, len(lines)]
