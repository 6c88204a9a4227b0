"""Fatal region, rank prefixes, torchrun root cause, evidence and input paths."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpulens.diagnosis import classify_text
from gpulens.diagnosis.logs import analyze, fatal_region, is_hard_error, normalize_line, read_log

CORPUS = Path(__file__).resolve().parents[2] / "sample_logs"

CHAINED = """step 10 loss 2.3
Traceback (most recent call last):
  File "data.py", line 3, in load
    return open(path).read()
FileNotFoundError: [Errno 2] No such file or directory: '/data/train/part-0001.csv'

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File "train.py", line 9, in <module>
    ds = Dataset(path)
RuntimeError: could not build the dataset
"""


def test_fatal_region_includes_chained_causes() -> None:
    region = fatal_region(CHAINED)
    assert region.start_line == 1
    assert region.lines == CHAINED.splitlines()[region.start_line:region.end_line]
    assert any("FileNotFoundError" in ln for ln in region.lines)
    assert any("RuntimeError: could not build" in ln for ln in region.lines)
    view = analyze(CHAINED)
    assert "/data/train/part-0001.csv" in view.inputs
    assert not any(p.endswith(".py") for p in view.inputs)
    assert classify_text(CHAINED).category == "incorrect_input"


def test_caught_exception_earlier_does_not_decide() -> None:
    caught = """Traceback (most recent call last):
  File "train.py", line 4, in <module>
    cfg = json.load(open('tracker.json'))
KeyError: 'tracker_url'
""" + "".join(f"step {i} loss {1 / (i + 1):.3f}\n" for i in range(200)) + (
        "slurmstepd: error: *** JOB 77 ON n1 CANCELLED AT 2024-01-01T00:00:00 DUE TO TIME LIMIT ***\n")
    d = classify_text(caught)
    assert d.category == "preempted"
    assert any("TIME LIMIT" in e for e in d.evidence)


def test_last_traceback_wins_over_earlier_one() -> None:
    text = CHAINED.replace("RuntimeError: could not build the dataset", "ValueError: x") + (
        "step 1 loss 3\n" * 2
        + "Traceback (most recent call last):\n  File \"t.py\", line 1, in <module>\n"
        "ModuleNotFoundError: No module named 'timm'\n")
    assert classify_text(text).category == "import_error"


def test_prefixes_are_stripped() -> None:
    assert normalize_line("[rank3]: RuntimeError: boom") == "RuntimeError: boom"
    assert normalize_line("2024-05-01T10:00:00.123456789Z KeyError: 'x'") == "KeyError: 'x'"
    assert normalize_line("0: ValueError: y") == "ValueError: y"
    assert normalize_line("W1122 02:19:36.353000 20776 torch/x/api.py:10] Sending") == "Sending"
    # pdsh (DeepSpeed multi-node) host prefixes: an address or localhost always, a host name before a rank tag
    assert normalize_line("10.0.0.7: [rank9]: OSError: disk full") == "OSError: disk full"
    assert normalize_line("localhost: Traceback (most recent call last):") == "Traceback (most recent call last):"
    assert normalize_line("gpu07: [rank12]: KeyError: 3") == "KeyError: 3"
    assert normalize_line("gpu07: loading shards") == "gpu07: loading shards"  # no rank tag: may be the program's


def test_torchrun_root_cause_rank_is_used() -> None:
    # rank 1 raised; rank 0 then saw the gloo connection close: the root cause is rank 1's error
    path = CORPUS / "semantic_error" / "torchrun_rank_valueerror_01.log"
    text = path.read_text() if path.is_file() else _TORCHRUN
    d = classify_text(text)
    assert d.category == "semantic_error", d
    assert any("ValueError" in e for e in d.evidence)


_TORCHRUN = """[rank1]: Traceback (most recent call last):
[rank1]:   File "/tmp/tr.py", line 7, in <module>
[rank1]: ValueError: bad value on rank 1
[rank0]: Traceback (most recent call last):
[rank0]:   File "/tmp/tr.py", line 8, in <module>
[rank0]: RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:39320.
Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/torch/distributed/run.py", line 1028, in main
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  rank      : 1 (local_rank: 1)
  exitcode  : 1 (pid: 20782)
============================================================
"""


def test_torchrun_synthetic_root_cause() -> None:
    assert classify_text(_TORCHRUN).category == "semantic_error"


def test_read_log_small_file_whole(tmp_path: Path) -> None:
    p = tmp_path / "a.log"
    p.write_text("hello\nworld\n")
    got = read_log(p)
    assert got.text == "hello\nworld\n" and not got.truncated and got.reason is None


def _corpus_texts() -> list[str]:
    from gpulens.diagnosis.corpus import load_corpus

    return [(CORPUS / e.file).read_text(errors="replace") for e in load_corpus(CORPUS)]


def test_normalize_lines_equals_normalize_line() -> None:
    from gpulens.diagnosis.logs import normalize_lines

    for text in _corpus_texts():
        lines = text.splitlines()
        assert normalize_lines(lines) == [normalize_line(x) for x in lines]


@pytest.mark.parametrize(("line", "want"), [
    # Python logging's "%(asctime)s - %(name)s - %(levelname)s - %(message)s"
    ("2024-05-01 10:00:01,123 - __main__ - ERROR - CUDA error: an illegal memory access",
     "CUDA error: an illegal memory access"),
    ("2024-05-01 10:00:01,123 - INFO - Epoch 3 done", "Epoch 3 done"),
    # loguru's "{time} | {level} | {message}"
    ("2024-05-01 10:00:01.123 | WARNING | low disk", "low disk"),
    # a dash that is the program's own text stays
    ("2024-05-01 10:00:01 -x", "-x"),
    ("model - loss 0.3", "model - loss 0.3"),
])
def test_logging_timestamp_and_logger_prefixes_are_stripped(line: str, want: str) -> None:
    from gpulens.diagnosis.logs import normalize_lines

    assert normalize_line(line) == want == normalize_lines([line])[0]


def test_lazy_normalization_finds_the_same_region() -> None:
    from gpulens.diagnosis.logs import _LazyNorm, _region, normalize_lines

    for text in _corpus_texts() + [CHAINED, _TORCHRUN]:
        lines = text.splitlines()
        assert _region(lines, _LazyNorm(lines)) == _region(lines, normalize_lines(lines))


def test_last_frames() -> None:
    view = analyze(CHAINED)
    assert [f[1] for f in view.frames] == ["<module>"]
    assert view.frames[0][2] == "ds = Dataset(path)"


@pytest.mark.parametrize("line, hard", [
    ("MeanSquaredError: 0.0123", False),  # a metric named for an error (Keras/torchmetrics class names)
    ("Error: 3.2%", False),
    ("ERROR: 0.0312", False),
    ("error - 1e-4", False),
    ("KeyError: 3", True),  # a dict's missing whole-number key is an error
    ("ValueError: 12 is not a valid Mode", True),
    ("Error: file not found", True),
])
def test_a_metric_named_for_an_error_is_not_a_failure_line(line: str, hard: bool) -> None:
    assert is_hard_error(line) is hard
