"""find_keys on a log's KeyedLines (the byte index: per-key bytes.find, and the one-pass
two-byte table for many keys over a long range) finds exactly the lines the plain
per-key str.find scan finds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpulens.diagnosis import keyscan, logs
from gpulens.diagnosis.keyscan import KeyedLines, find_keys, scan_lines
from gpulens.diagnosis.logread.lines import ERROR_KEYS, KILL_KEYS, PROGRESS_KEYS
from gpulens.diagnosis.logread.source import text_source

# Written for these tests: keys at a line's start and end, overlapping keys ("rror" in
# "ERROR"? no: in "error"; "ailed" and "FAILED"), case, a key split across two lines, non-ASCII
# text before a key (bytes and characters differ), a tqdm line with many updates.
_LOG = """\
Error at start
ends with rror
  File "train.py", line 12, in <module>
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
Step 10/100 loss=2.31 it/s
Epoch 1: 100%|\u2588\u2588\u2588\u2588| 921/921 [00:10<00:00, 3.1it/s]\r 5/9 [00:01<00:01, 3.2it/s]
r\u00e9sum\u00e9 \u2014 caf\u00e9 FAILED (exit code 1)
warning: ERRO
R split over two lines
\U0001F600 emoji then Killed
slurmstepd: error: *** JOB 1234 ON gpu07 CANCELLED AT 2024-01-01T00:00:00 DUE TO TIME LIMIT ***
TERM_RUNLIMIT: job killed after reaching LSF run time limit.
oom-kill and oom_kill
nothing here at all
xitxitxit
assertion ssert
SIG
SIGTERM received
iterations iter Iter
/it it/ it/s s/it
death signalled, defined signal
srun: forcing job termination
State: FAILED
ERROR
cut short: Segmentatio Tracebac CANCELLE xceptio erminate Interrup core dumpe death signa srun: forcin
more: egmentation raceback ANCELLED ception rminated nterrupt ore dumped eath signal run: forcing
"""

_FAMILIES = [
    ERROR_KEYS, KILL_KEYS, PROGRESS_KEYS, ("rror",), ("ERROR", "rror"), ("xit",), ("CANCELLED AT", "Sender: LSF System"),
    ("caf\u00e9 FAILED",),  # not ASCII: searched line by line
    ("ERRO\nR split",),  # holds a newline: matches across lines, as the joined scan does
    ("R",), ("",),  # one character, empty
    ("it/", "/it", "s/it", "it/s", "oom", "OOM", "ill", "led"),
]


def _reference(lines: list[str], keys: tuple[str, ...], start: int, stop: int) -> list[int]:
    return scan_lines(lines, keys, start, stop)


def _check(lines: list[str]) -> None:
    keyed = KeyedLines(lines)
    n = len(lines)
    ranges = [(0, n), (1, n), (0, n - 1), (n // 3, 2 * n // 3), (5, 6), (0, 1), (n - 1, n), (n - 7, n + 10)]
    for keys in _FAMILIES:
        for start, stop in ranges:
            want = _reference(lines, tuple(keys), start, stop)
            assert find_keys(keyed, keys, start, stop) == want, (keys[:3], start, stop)
            assert logs.find_keys(keyed, list(keys), start, stop) == want


def test_short_log_same_lines_as_the_plain_scan() -> None:
    _check(_LOG.split("\n"))


def test_long_log_one_pass_table_same_lines_as_the_plain_scan() -> None:
    # about 60 KB: ranges over many keys take the one-pass table, the others bytes.find
    lines = []
    for i in range(120):
        for ln in _LOG.split("\n"):
            lines.append(ln if i % 3 else ln.lower())  # case differs from copy to copy
        lines.append(f"step {i} " + "x" * (i % 7))
    assert len("\n".join(lines)) > 50_000
    keyscan._TABLES.clear()
    _check(lines)
    assert tuple(ERROR_KEYS) in keyscan._TABLES  # the one-pass table was used


def test_hand_written_answers() -> None:
    lines = _LOG.split("\n")
    keyed = KeyedLines(lines)
    # "rror" at a line's end, inside "error"; not in "Error"? yes: "Error" holds "rror"
    assert find_keys(keyed, ("rror",)) == [0, 1, 3, 10]
    assert find_keys(keyed, ("ERROR",)) == [23]
    assert find_keys(keyed, ("xit",)) == [6, 14]  # "(exit code 1)", overlapping "xitxitxit" once
    assert find_keys(keyed, ("Killed", "CANCELLED")) == [9, 10]  # after an emoji (4 bytes in UTF-8)
    assert find_keys(keyed, ("ERRO\nR split",)) == [7]  # across two lines, like the joined scan
    assert find_keys(keyed, ("caf\u00e9",)) == [6]
    assert find_keys(keyed, ("SIG",), 0, 16) == []  # the stop is exclusive
    assert find_keys(keyed, ("SIG",), 16) == [16, 17]
    assert find_keys(keyed, ERROR_KEYS) == scan_lines(lines, ERROR_KEYS, 0, len(lines))


def test_a_change_to_the_lines_is_seen() -> None:
    keyed = KeyedLines(["a", "b Traceback", "c"])
    assert find_keys(keyed, ("Traceback",)) == [1]
    keyed.append("d Traceback")
    assert find_keys(keyed, ("Traceback",)) == [1, 3]
    keyed[0] = "Traceback"
    assert find_keys(keyed, ("Traceback",)) == [0, 1, 3]
    del keyed[1]
    assert find_keys(keyed, ("Traceback",)) == [0, 2]
    keyed += ["Traceback again"]
    keyed.insert(0, "x")
    keyed.pop()
    assert find_keys(keyed, ("Traceback",)) == [1, 3]
    keyed.sort()
    assert find_keys(keyed, ("Traceback",)) == scan_lines(list(keyed), ("Traceback",), 0, len(keyed))


def test_lone_surrogate_and_nul_free_lines() -> None:
    lines = ["ok", "bad \ud800 Error", "Error"]
    keyed = KeyedLines(lines)
    assert find_keys(keyed, ("Error",)) == [1, 2]
    assert find_keys(keyed, ERROR_KEYS) == scan_lines(lines, ERROR_KEYS, 0, 3)


def test_whole_log_source_lines_are_keyed() -> None:
    src = text_source("one\ntwo Error\nthree\n")
    assert isinstance(src.lines, KeyedLines)
    assert find_keys(src.lines, ("Error",)) == [1]
    assert find_keys(list(src.lines), ("Error",)) == [1]  # a plain list: the plain scan


def test_file_bytes_kept_only_when_they_are_the_lines_bytes(tmp_path: Path) -> None:
    from gpulens.diagnosis.logread.source import read_whole

    body = "start\nr\u00e9sum\u00e9 Error here\n\nKilled\n"
    cases = {
        "final_newline.log": body.encode(),
        "no_final_newline.log": body.rstrip("\n").encode(),
        "two_final_newlines.log": (body + "\n").encode(),
        "invalid_utf8.log": b"start\n\xff\xfe Error\nKilled\n",
        "nul_run.log": b"start\n\x00\x00\x00 Error\nKilled\n" + b"ok line\n" * 40,
        "crlf.log": body.replace("\n", "\r\n").encode(),
    }
    keys = (*ERROR_KEYS, "r\u00e9sum\u00e9", "\ufffd", "\r")
    for name, data in cases.items():
        path = tmp_path / name
        path.write_bytes(data)
        src = read_whole(path)
        lines = list(src.lines)
        want = ("\n".join(lines) + "\n" + "\x00" * 7).encode("utf-8", "surrogatepass")
        assert isinstance(src.lines, KeyedLines)
        assert src.lines.byte_index().data == want, name
        for start in range(len(lines)):
            assert find_keys(src.lines, keys, start) == scan_lines(lines, keys, start, len(lines)), name


def test_progress_key_test_is_any_of_the_keys() -> None:
    # lines._has_progress_key spells out PROGRESS_KEYS (speed): the same answer on each key
    # alone, each key inside a line, near misses, and the lines of the excerpt above
    from gpulens.diagnosis.logread.lines import _has_progress_key

    near = ["ste", "STEP", "epo", "ITER", "LOSS", "BATCH", "it", "/i t", "", "train 5/9 [00:01"]
    texts = [*PROGRESS_KEYS, *(f"x {k} y" for k in PROGRESS_KEYS), *near, *_LOG.splitlines()]
    for t in texts:
        assert _has_progress_key(t) == any(k in t for k in PROGRESS_KEYS), t
    assert all(_has_progress_key(k) for k in PROGRESS_KEYS) and not any(_has_progress_key(t) for t in near)


def test_shared_pass_over_the_log_same_lines_as_the_plain_scan() -> None:
    # the first whole-range table scan of a log finds the candidates of every family known then
    # (one pass); each family keeps its own among them, per range. A first log knows only some
    # families (the others scan their ranges themselves), a second one all of them.
    lines = []
    for i in range(150):
        for ln in _LOG.split("\n"):
            lines.append(ln.upper() if i % 4 == 1 else ln)
        lines.append(f"Iter {i} loss " + "y" * (i % 5))
    keyscan._TABLES.clear()
    _check(lines)
    _check(list(lines))
    keyed = KeyedLines(lines)
    find_keys(keyed, ERROR_KEYS)
    cand = keyed.byte_index().cand
    assert cand is not None and keyscan._table(tuple(KILL_KEYS)) in cand[0]
    n = len(lines)
    for start, stop in [(0, n), (3, 40), (n // 2, n), (n - 2, n)]:
        assert find_keys(keyed, KILL_KEYS, start, stop) == _reference(lines, tuple(KILL_KEYS), start, stop)


def test_contains_any_is_any_in() -> None:
    # guarded.contains_any compiles the literals into one `or` chain: the answer of any(k in t)
    # on every line of the excerpt, on each literal alone, with quotes, backslashes and non-ASCII
    # literals, and for no literal at all
    from gpulens.diagnosis.guarded import Guarded, contains_any

    families = [*_FAMILIES, ("it's", 'say "hi"', "a\\b", "caf\u00e9", "\u2588\u2588"), ("Killed",)]
    texts = [*_LOG.splitlines(), "it's", 'say "hi" now', "a\\b", "CAF\u00c9 caf\u00e9", "", "\\"]
    for keys in families:
        has = contains_any(keys)
        for t in [*texts, *keys]:
            assert has(t) is any(k in t for k in keys), (keys[:3], t)
    assert contains_any(())("anything") is False
    guard = Guarded(r"FAILED \(exit code (\d+)\)", ("FAILED",))
    got = guard.search("r\u00e9sum\u00e9 FAILED (exit code 1)")
    assert got is not None and got.group(1) == "1" and guard.search("failed (exit code 1)") is None


def test_completion_key_test_is_any_of_the_keys() -> None:
    from gpulens.diagnosis.logread.end.completion_messages import (
        COMPLETION_KEYS,
        _has_completion_key,
        completion_strength,
    )

    lines = [*_LOG.splitlines(), "Training completed. Do not forget to share your model", "done.", "Finishe"]
    for t in [*lines, *COMPLETION_KEYS]:
        assert _has_completion_key(t) == any(k in t for k in COMPLETION_KEYS), t
    assert completion_strength("Training completed. Do not forget to share your model") == 0.95
    assert completion_strength("done.") == 0.8 and completion_strength("Finishe") == 0.0


def test_progress_line_with_an_error_word_is_not_progress() -> None:
    # is_progress's error-word test is a Guarded now (literal prefilter): the same answers
    from gpulens.diagnosis.logread.lines import is_progress

    assert is_progress("Epoch 3: 45%| 450/1000 [00:10<00:12, 44.2it/s, loss=0.123]")
    assert is_progress("step 120 loss 2.31 (2 batches failed validation)")  # "failed" alone is no error word
    for word in ("Error", "error", "ERROR", "Exception", "FATAL", "failed to", "Failed:", "failed with", "FAILED",
                 "Killed", "Traceback", "CANCELLED"):
        assert not is_progress(f"step 120 loss 2.31 {word} x"), word


def test_progress_marks_tested_one_by_one_answer_as_the_alternation() -> None:
    # is_progress tests the words, the rates and the bar count one by one: the answer of the
    # single alternation they were, on every line of the sample logs and on hand-written lines
    import re

    from gpulens.diagnosis.logread import lines as lm

    whole = re.compile(r"\b(?:step|epoch|iter(?:ation)?|loss|batch|Epoch|Step|Iter)\b|it/s|s/it|\d+/\d+ \["
                       r"|(?<!\w)[dgDG]_loss(?:\s*[:=]\s*|\s+)[-+]?\d")
    root = Path(__file__).resolve().parents[2] / "sample_logs"
    texts = [ln[-400:] for p in sorted(root.rglob("*.log"))[::4] for ln in p.read_text(errors="replace").splitlines()]
    texts += ["5/9 [00:01", "5/9[", "a/9 [", "substep 3", "Iteration 4", "iters 5", "9.1s/it", "3 it/s", "loss:"]
    for t in texts:
        split = ("it/s" in t or "s/it" in t or lm._PROGRESS_WORD.search(t) is not None
                 or (" [" in t and lm._PROGRESS_BAR.search(t) is not None))
        assert split == (whole.search(t) is not None), t
    assert lm.is_progress("Batch 5/9 [00:01<00:01]") and not lm.is_progress("Batch 5/9 done")  # the bar's count
    assert not lm.is_progress("substep 3 of the recipe")


def test_progress_word_found_without_the_regex_answers_as_the_pattern() -> None:
    # lines._progress_word finds _PROGRESS_WORD's words with str.find and tests the word boundaries
    # itself (\\w: isalnum() or "_", non-ASCII letters and digits too): the same answers
    from gpulens.diagnosis.logread import lines as lm

    root = Path(__file__).resolve().parents[2] / "sample_logs"
    texts = [ln[-400:] for p in sorted(root.rglob("*.log"))[::4] for ln in p.read_text(errors="replace").splitlines()]
    texts += ["step", "steps", "global_step 4", "step_4", "4step", "[step 4]", "Step", "STEP 4", "epoch:3", "Epochs 3",
              "iteration 9", "iterations 9", "iter", "Iteration 9", "Iter 9", "iter_9", "iterationx", "iteration_",
              "\u00e9step", "step\u00e9", "step\u0663", "\u2167step", "loss=2.1", "lossy", "batch", "batches 4",
              "minibatch 4", "x stepstep step", "stepiteration iteration", "iterstep", "", "s", "\u2588\u2588 Step 4/9",
              "d_loss: 0.91, g_loss: 2.97", "D_loss=0.3", "g_loss 1.5", "g_loss0: 2.56", "GPU0/D_loss/G/dense", "xd_loss: 1"]
    for t in texts:
        assert lm._progress_word(t) == (lm._PROGRESS_WORD.search(t) is not None), t
    assert lm._progress_word("Epoch 3/10") and not lm._progress_word("substeps 3")


def test_setting_line_prefilter_answers_as_the_pattern() -> None:
    # steplines._is_setting rules lines out by _SETTING's literals (case-folded) before the search, and
    # searches a line without a newline word by word: the same answers, non-ASCII lines and the
    # characters that re's (?i) takes for an ASCII letter (the long s of "lo\u017fs", the Kelvin sign) too
    from gpulens.diagnosis.logread import steplines

    root = Path(__file__).resolve().parents[2] / "sample_logs"
    texts = [ln[-400:] for p in sorted(root.rglob("*.log"))[::4] for ln in p.read_text(errors="replace").splitlines()]
    texts += ["Iterations PER EPOCH: 1108", "Total optimization steps = 500", "Starting iteration-wise training",
              "Invalidate trace cache @ step 56836", "Tokens / micro-batch / rank: 32 x 2048", "BATCH-SIZE 64",
              "Loading model from ckpt/d20 with step 21400", "Resumed at STEP 9", "step 9 loss 2.1 batch size 4",
              "\u00e9tape 9 total", "step 9 of 100", "\u2588\u2588 12/50 [00:03<00:09] total 4", "lo\u017fs 2.1 total 4",
              "\u2588 lo\u017fs 2.1 total 4", "\u2588 Total 4", "\u2588 loss 2.1 total 4", "\u2588 batch\u212aSIZE 4",
              "\u2588 max_len 9 \u0130", "total\nloss", "loss\ntotal", "\u2588 total\nloss", "per\ngpu 4",
              "\u00e9total 4", "\u00e9 total 4", "loading shards \u2588\u2588 step 4", "restored ckpt at step\u00e9 4"]
    for t in texts:
        assert steplines._is_setting(t) == (steplines._SETTING.search(t) is not None), t
    assert steplines._is_setting("Total optimization steps = 500") and not steplines._is_setting("step 9 of 100")


def test_a_one_off_family_neither_enters_the_shared_pass_of_later_logs_nor_evicts_the_constant_ones() -> None:
    # a family keyed by one file's first line is scanned in one log only: the shared first pass
    # of later logs leaves it out (its union, and the cache of it, stay the same), and a full
    # table cache drops such families before the reader's constant ones; answers unchanged
    lines = _LOG.splitlines() * 40
    for k in range(3):
        keyed = KeyedLines(lines)
        one_off = (*KILL_KEYS, f"banner of file {k}")
        assert find_keys(keyed, one_off, 0) == _reference(lines, one_off, 0, len(lines))
        assert find_keys(keyed, ERROR_KEYS, 0) == _reference(lines, tuple(ERROR_KEYS), 0, len(lines))
    shared = keyscan._table(tuple(ERROR_KEYS))
    assert shared.logs >= 3 and keyscan._table(one_off).logs == 1
    cand = keyed.byte_index().cand
    assert cand is not None and shared in cand[0]
    for k in range(keyscan._TABLE_CACHE):
        keyscan._table((f"family {k}", "xy"))
    assert keyscan._TABLES.get(tuple(ERROR_KEYS)) is shared  # kept; the one-off families went


def test_few_candidates_compared_in_python_answer_as_numpy() -> None:
    # _confirm hands fewer than _FEW candidates to _confirm_few (bytes.startswith per key): the
    # same lines as the numpy comparison, on every family and range of the long excerpt
    import numpy as np

    lines = [ln if i % 2 else ln.upper() for i in range(30) for ln in _LOG.split("\n")]
    index = KeyedLines(lines).byte_index()
    most = 0
    for keys in [ERROR_KEYS, KILL_KEYS, PROGRESS_KEYS, ("it/", "/it", "s/it", "it/s", "oom", "OOM", "ill", "led"),
                 ("Segmentation fault", "srun: forcing job termination", "xit")]:
        tab = keyscan._table(keyscan._split(keys)[0])
        for b0, b1 in [(0, index.size), (0, 300), (200, 1500), (index.size - 400, index.size)]:
            q, v = index._pairs_at(tab.pairs, b0, b1)
            for cut in (q.size, 7, 1):
                qq, vv = q[:cut], v[:cut]
                if not qq.size:
                    continue  # (the callers confirm candidates only)
                assert index._confirm_few(tab, qq.tolist(), vv.tolist()) == _numpy_confirm(index, tab, qq, vv)
            most = max(most, q.size)
            assert np.all(tab.pairs[v])
    assert most > keyscan._FEW  # the whole candidates of some: more than _confirm_few takes


def _numpy_confirm(index: Any, tab: Any, q: Any, v: Any) -> list[int]:
    few, keyscan._FEW = keyscan._FEW, 0
    try:
        return index._confirm(tab, q, v)
    finally:
        keyscan._FEW = few



def test_a_question_asked_again_is_answered_from_the_logs_memo() -> None:
    # the same lines, as a copy: changing an answer changes nothing; a change to the lines drops it
    lines = _LOG.splitlines() * 20
    keyed = KeyedLines(lines)
    for keys in (ERROR_KEYS, ("Killed",), ("caf\u00e9 FAILED", "xit")):
        want = _reference(lines, tuple(keys), 3, len(lines) - 2)
        got = find_keys(keyed, keys, 3, len(lines) - 2)
        assert got == want
        got.append(-1)
        assert find_keys(keyed, keys, 3, len(lines) - 2) == want
    assert len(keyed.byte_index().memo) == 3
    keyed[0] = "Killed"
    assert find_keys(keyed, ("Killed",), 0, 1) == [0]


def test_a_family_of_few_keys_asked_in_two_logs_joins_the_shared_pass() -> None:
    # one or two keys were searched per key (bytes.find) over their range; a family asked for in
    # a second log gets a table, which the shared pass of later logs covers: same lines
    lines = _LOG.splitlines() * 60
    few = ("Tracking run with wandb version", "srun: forcing")
    keyscan._TABLES.clear()
    keyscan._FEW_KEYS.clear()
    want = _reference(lines, few, 0, len(lines))
    for k in range(4):
        keyed = KeyedLines([f"log {k}", *lines])
        assert find_keys(keyed, ERROR_KEYS, 0) == _reference(list(keyed), tuple(ERROR_KEYS), 0, len(keyed))
        assert find_keys(keyed, few, 1) == [i + 1 for i in want]
        for start, stop in [(0, 5), (len(keyed) // 2, len(keyed)), (30, 31)]:
            assert find_keys(keyed, few, start, stop) == _reference(list(keyed), few, start, stop)
    tab = keyscan._TABLES.get(few)
    cand = keyed.byte_index().cand
    assert tab is not None and cand is not None and tab in cand[0]
