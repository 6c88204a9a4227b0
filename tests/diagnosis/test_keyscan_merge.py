"""keyscan's shared pass (round 11, speed): the marked two-byte windows of a range, found at even
and at odd positions apart and merged, are every window the table marks, in order, with its
bytes."""

from __future__ import annotations

from gpulens.diagnosis.keyscan import KeyedLines

# Written for these tests: a short log of training output and a few failure lines.
_LINES = [
    "epoch 1 step 10 loss 2.31",
    "WARNING: something minor",
    "Traceback (most recent call last):",
    '  File "train.py", line 3, in <module>',
    "RuntimeError: CUDA error: an illegal memory access was encountered",
    "srun: error: node07: task 3: Exited with exit code 1",
    "slurmstepd: error: *** JOB 42 ON node07 CANCELLED AT 2025-01-01T00:00:00 ***",
] * 200


def test_marked_pairs_of_any_range_are_every_window_the_table_marks_in_order() -> None:
    # _pairs_at merges the marked windows at even and at odd positions: every position q in
    # [b0, b1 - 2] whose two bytes the table marks, sorted, with those bytes; ranges of odd and
    # even ends, empty and one-window ranges included
    import numpy as np

    text = "\n".join(_LINES[:40]) + "\nab\nba abab"
    keyed = KeyedLines(text.split("\n"))
    index = keyed.byte_index()
    raw = text.encode()
    pairs = np.zeros(1 << 16, dtype=bool)
    for piece in (b"ab", b"ba", b"rr", b"\nt", b"07"):
        pairs[piece[0] | piece[1] << 8] = True
    n = len(raw)
    for b0, b1 in [(0, n), (1, n), (0, n - 1), (3, 4), (3, 5), (4, 6), (7, 7), (n - 2, n), (n // 3, 2 * n // 3 + 1)]:
        want = [q for q in range(b0, b1 - 1) if pairs[raw[q] | raw[q + 1] << 8]]
        q, v = index._pairs_at(pairs, b0, b1)
        assert q.tolist() == want, (b0, b1)
        assert v.tolist() == [raw[i] | raw[i + 1] << 8 for i in want]


def test_a_family_of_table_and_line_by_line_keys_finds_each_line_once_in_order() -> None:
    # find: the table scan's lines (sorted, each once) are the answer as they are; with keys
    # searched line by line too (not ASCII, a newline), both merged, sorted, each line once
    from gpulens.diagnosis.keyscan import find_keys, scan_lines

    lines = [*_LINES, "caf\u00e9 RuntimeError", "warning: ERRO", "R split"] * 3
    keys = ("RuntimeError", "CANCELLED AT", "srun: error", "illegal memory", "caf\u00e9", "ERRO\nR split")
    keyed = KeyedLines(lines)
    n = len(lines)
    for start, stop in [(0, n), (5, n - 3), (n - 4, n), (1400, 1410)]:
        for family in (keys, keys[:4]):
            assert find_keys(keyed, family, start, stop) == scan_lines(lines, family, start, stop)
