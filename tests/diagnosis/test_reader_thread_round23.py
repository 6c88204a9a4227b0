"""Round 23: PaddlePaddle's DataLoader reads batches in a thread (dataloader_iter.py ``_thread_loop``); when the
thread raises, the main process fails on the dead queue ("Blocking queue is killed because the data reader raises
an exception") or waits in MultiDeviceFeedReader until the launcher's SIGTERM: the thread's own error decides, and
one of either reading raised there (a worker's KeyError, escaped into the message) is incorrect_input (README C4)."""

from __future__ import annotations

from gpulens.diagnosis.logread.whole import diagnose_text

_THREAD = [
    "Exception in thread Thread-2:",
    "Traceback (most recent call last):",
    '  File "/env/lib/python3.8/threading.py", line 932, in _bootstrap_inner',
    "    self.run()",
    '  File "/env/lib/python3.8/site-packages/paddle/io/dataloader/dataloader_iter.py", line 604, in _thread_loop',
    "    batch = self._get_data()",
    '  File "/env/lib/python3.8/site-packages/paddle/io/dataloader/worker.py", line 178, in reraise',
    "    raise self.exc_type(msg)",
    "KeyError: 'DataLoader worker(1) caught KeyError with message:\\nTraceback (most recent call last):\\n  File "
    '"/proj/transforms/sampling.py", line 169, in sampling\\n    annos = self.sampler_per_class[cls_name].sampling(\\n'
    "KeyError: \\'Car\\'\\n'",
]
_QUEUE = [
    "Traceback (most recent call last):",
    '  File "tools/train.py", line 260, in main',
    "    trainer.train()",
    '  File "/env/lib/python3.8/site-packages/paddle/io/dataloader/dataloader_iter.py", line 825, in __next__',
    "    self._reader.read_next_list()[0]",
    "SystemError: (Fatal) Blocking queue is killed because the data reader raises an exception.",
    "  [Hint: Expected killed_ != true, but received killed_:1 == true:1.] (at ../paddle/fluid/operators/reader/blocking_queue.h:175)",
]


def test_the_reader_threads_own_error_decides_over_the_dead_queue() -> None:
    w = diagnose_text("\n".join(["W0820 17:14:53.647717 15390 gpu_resources.cc:119] device: 0", *_THREAD, *_QUEUE]))
    assert w.diagnosis.category == "incorrect_input"
    assert "data reader thread" in (w.diagnosis.reason or "")


def test_without_the_reader_thread_nothing_changes() -> None:
    w = diagnose_text("\n".join(_QUEUE))
    assert "data reader thread" not in (w.diagnosis.reason or "")


def test_module_says_its_job() -> None:
    from tests.diagnosis.logread_structure import assert_part

    assert_part("readerthread")
