"""The key-family table cache of keyscan (round 11, speed): more constant families than the old
cache held stay built across logs (the cache was cleared whenever full: every table, and the
union of the shared pass, built again every few logs), a full cache drops the families used
longest ago, never all, and a family's log count follows each index's serial (not ``id``, which
a later log's index may reuse). Answers are the plain scan's throughout."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gpulens.diagnosis import keyscan
from gpulens.diagnosis.keyscan import KeyedLines, find_keys, scan_lines

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


def _family(k: int) -> tuple[str, ...]:
    """A constant family of the reader's size (five keys), the k-th of many."""
    return (f"marker{k:03d} one", "RuntimeError", f"fam{k:03d}x", "CANCELLED AT", f"zz{k:03d}yy")


@pytest.fixture(autouse=True)
def _fresh_tables() -> Iterator[None]:
    keyscan._TABLES.clear()
    keyscan._union.cache_clear()
    yield
    keyscan._TABLES.clear()
    keyscan._union.cache_clear()


def _log(families: list[tuple[str, ...]]) -> None:
    keyed = KeyedLines(_LINES)
    for keys in families:
        assert find_keys(keyed, keys, 0) == scan_lines(_LINES, keys, 0, len(_LINES))
        assert find_keys(keyed, keys, 700, 760) == scan_lines(_LINES, keys, 700, 760)


def test_more_constant_families_than_the_old_cache_are_built_once() -> None:
    families = [_family(k) for k in range(90)]  # more than the 64 the cache held
    for _ in range(3):
        _log(families)
    built = {keys: keyscan._TABLES[keys] for keys in families}
    misses = keyscan._union.cache_info().misses
    for _ in range(3):
        _log(families)
    assert all(keyscan._TABLES.get(keys) is tab for keys, tab in built.items())  # none built again
    assert keyscan._union.cache_info().misses == misses  # the shared pass's union neither


def test_a_full_cache_drops_the_families_used_longest_ago_not_all() -> None:
    old = [_family(k) for k in range(keyscan._TABLE_CACHE)]
    for _ in range(2):
        _log(old)  # every one constant (scanned in two logs)
    recent = old[-8:]
    _log(recent)
    _log([_family(keyscan._TABLE_CACHE)])  # one more: the cache is full
    assert all(keys in keyscan._TABLES for keys in recent)  # the last used are kept
    assert 0 < len(keyscan._TABLES) < keyscan._TABLE_CACHE  # some went, not all


def test_a_family_counts_the_logs_by_index_serial() -> None:
    keys = _family(1)
    keyed = KeyedLines(_LINES)
    find_keys(keyed, keys, 0)
    find_keys(keyed, keys, 10)  # the same log again: still one
    assert keyscan._TABLES[keys].logs == 1
    again = KeyedLines(_LINES)
    assert again.byte_index().serial > keyed.byte_index().serial
    find_keys(again, keys, 0)
    assert keyscan._TABLES[keys].logs == 2


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
