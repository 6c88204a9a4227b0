"""Reader round 20, phase (P1-P11 of sample_logs/whole/README.md, "Phase: rules"), on excerpts written by hand in the
formats the libraries print: a Paddle DataLoader's reader thread failing on the first batch, its worker's traceback
quoted in the message it re-raises."""

from __future__ import annotations

from gpulens.diagnosis.logread.phase import phase_of

_LIB = "/opt/env/lib/python3.9/site-packages"


def _frame(path: str, line: int, func: str, code: str) -> list[str]:
    return [f'  File "{path}", line {line}, in {func}', f"    {code}"]


def _reader_thread(tail: list[str]) -> list[str]:
    """Python's report of an exception in Paddle's DataLoader reader thread (``threading.py``'s ``excepthook``)."""
    return ["Exception in thread Thread-2:", "Traceback (most recent call last):",
            *_frame("/opt/env/lib/python3.9/threading.py", 980, "_bootstrap_inner", "self.run()"),
            *_frame("/opt/env/lib/python3.9/threading.py", 917, "run", "self._target(*self._args, **self._kwargs)"),
            *tail]


_SETUP = ["2024-03-01 10:00:00 [INFO]\tLoading pretrained model from /data/backbone.pdparams",
          "2024-03-01 10:00:01 [INFO]\tThere are 120/120 variables loaded into Backbone.",
          "W0301 10:00:02.100000 4242 gpu_resources.cc:119] Please NOTE: device: 0, GPU Compute Capability: 8.0"]


def test_an_error_in_paddles_reader_thread_is_the_first_step() -> None:
    """P8: Paddle's ``DataLoader.__iter__`` builds the iterator, whose ``__init__`` starts the reader thread
    (``_thread_loop``); a sample that fails there, before any step is logged, fails the first step."""
    lines = [*_SETUP, *_reader_thread([
        *_frame(f"{_LIB}/paddle/io/dataloader/dataloader_iter.py", 230, "_thread_loop",
                "batch = self._dataset_fetcher.fetch(indices, self._thread_done_event)"),
        *_frame(f"{_LIB}/paddle/io/dataloader/fetcher.py", 125, "fetch", "data.append(self.dataset[idx])"),
        *_frame("/src/seg/datasets/dataset.py", 88, "__getitem__", "im = cv2.imread(path).astype('float32')"),
        "AttributeError: 'NoneType' object has no attribute 'astype'"])]
    assert phase_of(lines, len(lines) - 1, lines[-3:]) == "first_step"


def test_a_worker_traceback_quoted_in_the_reraised_message_is_not_the_head() -> None:
    """Paddle's ``_WorkerException.reraise`` raises ``exc_type("DataLoader worker({}) caught {} with message:\\n{}")``;
    a ``KeyError`` prints that message's repr, the worker's ``Traceback`` inside it: the traceback read is the
    reader thread's above it."""
    quoted = ("KeyError: 'DataLoader worker(1) caught KeyError with message:\\nTraceback (most recent call last):\\n"
              "  File \"/src/det/transforms.py\", line 40, in sample\\n    db = self.per_class[name]\\nKeyError: \\'Car\\'\\n'")
    lines = [*_SETUP, *_reader_thread([
        *_frame(f"{_LIB}/paddle/io/dataloader/dataloader_iter.py", 604, "_thread_loop", "batch = self._get_data()"),
        *_frame(f"{_LIB}/paddle/io/dataloader/dataloader_iter.py", 752, "_get_data", "batch.reraise()"),
        *_frame(f"{_LIB}/paddle/io/dataloader/worker.py", 178, "reraise", "raise self.exc_type(msg)"),
        quoted])]
    assert phase_of(lines, len(lines) - 1, lines[-3:]) == "first_step"


def test_an_error_in_a_model_built_before_the_loader_stays_startup() -> None:
    """P3: a traceback with no reader thread in it (the model's constructor) is still set-up."""
    lines = [*_SETUP, "Traceback (most recent call last):",
             *_frame("tools/train.py", 50, "<module>", "main(args)"),
             *_frame("tools/train.py", 40, "main", "model = build_model(cfg)"),
             *_frame("/src/seg/models/builder.py", 12, "build_model", "return Net(**cfg)"),
             "TypeError: Net() got an unexpected keyword argument 'depth'"]
    assert phase_of(lines, len(lines) - 1, lines[-3:]) == "startup"
