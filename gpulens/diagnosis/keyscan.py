"""Which lines of a log hold one of a set of literal keys, fast, on one core.

``find_keys`` is asked for every key family the whole-log reader looks for (the error
keys, the kill keys, the progress keys, ...), each over a range of the log's lines. Scanning
a range once per key with ``str.find`` costs the range's length times the number of keys
(a family of 33 keys reads a 1 MB range 33 times); that was half the reader's CPU.

:class:`KeyedLines` is a list of lines that keeps, the first time it is scanned, its lines
joined as UTF-8 bytes and the offset of each newline (built once per log, not once per
call). A range is then scanned

* for a few keys, with ``bytes.find`` per key, each hit mapped to its line by bisection and
  the search resumed at the next line;
* for many keys, in one pass: every two-byte window of the range is looked up in a 64 K
  table that marks one two-byte piece of each key (numpy); the eight bytes around each marked
  window are compared, under a mask, with those of the keys of that piece (numpy, one key per
  piece at a time: a key of up to eight bytes is found so), and a longer key is compared in
  full where they are equal.

The first one-pass scan of a log over at least half of it finds the marked windows of every
key family known then (the union of their tables), once; each family's scan of any range of
that log then keeps, among those, the windows in its range that its own table marks (a family
first seen later scans its ranges itself). The reader asks for about ten families, each over a
range near the whole log: one pass instead of ten. A family the shared pass covers reads any
range from it, however short (a window of progress lines holds a key on every line). A family
of fewer keys, searched with ``bytes.find`` at first, gets a table once a second log asks for
it: the shared pass of the logs after covers it too (the reader asks for a few such keys, over
the whole log, several times a log). Few candidates are compared in Python (numpy's fixed cost
per call is larger), and a log keeps its answers (the reader asks some questions again).

Both give exactly the lines holding a key (the table marks a piece of every key, so every
line holding a key has a marked window; each candidate is then compared with the keys
themselves). Keys that are not ASCII, hold a newline or are shorter than two characters are
searched line by line, as before.
"""

from __future__ import annotations

import bisect
import functools
import itertools
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, SupportsIndex

if TYPE_CHECKING:
    import numpy as np

__all__ = ["KeyedLines", "find_keys", "rare_piece", "rare_window", "scan_lines"]

#: Bytes times keys below which a range is scanned per key even for many keys (numpy's fixed
#: cost per call is larger than such a scan).
_TABLE_MIN_WORK = 128 * 1024
#: Fewest keys for which the one-pass table scan is used.
_TABLE_MIN_KEYS = 4
#: Key families whose tables are kept (the reader asks for a few dozen constant ones).
_TABLE_CACHE = 64


class KeyedLines(list[str]):
    """A list of log lines whose byte index (see the module doc) is built the first time
    :func:`find_keys` scans it and dropped by any change to the list. ``joined``, when given,
    is ``"\\n".join(lines).encode()`` (the file's bytes a reader decoded without loss): the
    index then starts from it instead of joining and encoding the lines again."""

    __slots__ = ("_index", "_joined")

    def __init__(self, lines: Iterable[str] = (), joined: bytes | None = None) -> None:
        super().__init__(lines)
        self._index: _ByteIndex | None = None
        self._joined = joined

    def byte_index(self) -> _ByteIndex:
        if self._index is None:
            self._index = _ByteIndex(self, self._joined)
            self._joined = None  # the index holds its own copy
        return self._index

    def _drop(self) -> None:
        self._index = None
        self._joined = None

    # every change drops the index
    def __setitem__(self, i: Any, v: Any) -> None:
        self._drop()
        super().__setitem__(i, v)

    def __delitem__(self, i: SupportsIndex | slice) -> None:
        self._drop()
        super().__delitem__(i)

    def __iadd__(self, other: Iterable[str]) -> KeyedLines:  # type: ignore[override,misc]
        self._drop()
        super().__iadd__(other)
        return self

    def __imul__(self, n: SupportsIndex) -> KeyedLines:
        self._drop()
        super().__imul__(n)
        return self

    def append(self, v: str) -> None:
        self._drop()
        super().append(v)

    def extend(self, v: Iterable[str]) -> None:
        self._drop()
        super().extend(v)

    def insert(self, i: SupportsIndex, v: str) -> None:
        self._drop()
        super().insert(i, v)

    def pop(self, i: SupportsIndex = -1) -> str:
        self._drop()
        return super().pop(i)

    def remove(self, v: str) -> None:
        self._drop()
        super().remove(v)

    def clear(self) -> None:
        self._drop()
        super().clear()

    def sort(self, *args: Any, **kwargs: Any) -> None:
        self._drop()
        super().sort(*args, **kwargs)

    def reverse(self) -> None:
        self._drop()
        super().reverse()


def find_keys(lines: Sequence[str], keys: Sequence[str], start: int = 0, stop: int | None = None) -> list[int]:
    """Indexes ``i`` in ``[start, stop)`` of the lines holding one of ``keys``, sorted (a range
    past the end is cut to it)."""
    stop = len(lines) if stop is None else stop
    if stop <= start:
        return []
    if isinstance(lines, KeyedLines) and 0 <= start < len(lines) and keys:
        return lines.byte_index().find(keys, start, min(stop, len(lines)))
    return scan_lines(lines, keys, start, stop)


def scan_lines(lines: Sequence[str], keys: Sequence[str], start: int, stop: int) -> list[int]:
    """:func:`find_keys` without an index: each key found with ``str.find`` on the joined
    range, line numbers counted incrementally."""
    if stop <= start:
        return []
    block = "\n".join(lines[start:stop])
    starts: set[int] = set()
    for key in keys:
        pos = block.find(key)
        while pos >= 0:
            starts.add(block.rfind("\n", 0, pos) + 1)
            nxt = block.find("\n", pos)
            if nxt < 0:
                break
            pos = block.find(key, nxt + 1)
    out: list[int] = []
    line = 0
    prev = 0
    for ls in sorted(starts):
        line += block.count("\n", prev, ls)
        prev = ls
        out.append(start + line)
    return out


class _ByteIndex:
    """The lines joined as UTF-8 bytes and the offsets of their newlines."""

    __slots__ = ("cand", "data", "eights", "lines", "memo", "nl", "nl_list", "padded", "size")

    def __init__(self, lines: Sequence[str], joined: bytes | None = None) -> None:
        import numpy as np

        self.lines = lines
        # Eight bytes no key holds ("\n" and NULs) follow the lines, so that eight bytes can be
        # read at any position. surrogatepass: a lone surrogate (text given by a caller)
        # becomes non-ASCII bytes, which no key matches, instead of an error.
        if joined is not None:
            self.data = joined + _PAD
        else:
            self.data = "\n".join(itertools.chain(lines, (_PAD[1:].decode(),))).encode("utf-8", "surrogatepass")
        self.size = len(self.data) - len(_PAD)
        self.padded = np.frombuffer(self.data, np.uint8)
        self.nl = np.flatnonzero(self.padded == 10)[:-1]
        # the eight bytes from each position as one little-endian number (a view, no copy)
        rows = np.lib.stride_tricks.as_strided(self.padded, shape=(len(self.data) - 7, 8), strides=(1, 1),
                                               writeable=False)
        self.eights = rows.view("<u8")[:, 0]
        self.nl_list: list[int] = self.nl.tolist()
        #: (tables, q, v): every position q of the whole data whose two bytes (v) some key of
        #: the tables marks (see :meth:`_candidates`), once per log
        self.cand: tuple[frozenset[_Table], np.ndarray[Any, Any], np.ndarray[Any, Any]] | None = None
        #: the answers of :meth:`find` by (keys, slow keys, start, stop)
        self.memo: dict[tuple[tuple[str, ...], tuple[str, ...], int, int], list[int]] = {}

    def _begin(self, i: int) -> int:
        """Byte offset of line ``i``."""
        return 0 if i == 0 else self.nl_list[i - 1] + 1

    def _end(self, i: int) -> int:
        """Byte offset just after line ``i`` (its newline, or the end of the data)."""
        return self.nl_list[i] if i < len(self.nl_list) else self.size

    def find(self, keys: Sequence[str], start: int, stop: int) -> list[int]:
        fast, slow = _split(keys)
        asked = (fast, slow, start, stop)
        got = self.memo.get(asked)
        if got is not None:  # the reader asks some questions again
            return list(got)
        b0, b1 = self._begin(start), self._end(stop - 1)
        if fast and (self._shared(fast) or (len(fast) >= _TABLE_MIN_KEYS and (b1 - b0) * len(fast) >= _TABLE_MIN_WORK)):
            out = self._table_scan(fast, b0, b1)  # sorted, each line once: no set to sort
            if slow:
                out = sorted({*out, *scan_lines(self.lines, slow, start, stop)})
        else:
            found: set[int] = set()
            if fast and len(fast) < _TABLE_MIN_KEYS:
                _asked_few(fast, self)
            for key in fast:
                self._key_scan(_ascii(key), b0, b1, found)
            if slow:
                found.update(scan_lines(self.lines, slow, start, stop))
            out = sorted(found)
        if len(self.memo) >= _MEMO:
            self.memo.clear()
        self.memo[asked] = out
        return list(out)

    def _shared(self, keys: tuple[str, ...]) -> bool:
        """Whether the shared pass over this log found the candidates of ``keys`` (a short range
        then costs a look-up among them, not a search per key: a window of progress lines holds
        a key on every line)."""
        if self.cand is None:
            return False
        tab = _TABLES.get(keys)
        return tab is not None and tab in self.cand[0]

    def _key_scan(self, key: bytes, b0: int, b1: int, found: set[int]) -> None:
        data, nl = self.data, self.nl_list
        pos = data.find(key, b0, b1)
        while pos >= 0:
            line = bisect.bisect_left(nl, pos)
            found.add(line)
            if line >= len(nl):
                break
            pos = data.find(key, nl[line] + 1, b1)

    def _table_scan(self, keys: tuple[str, ...], b0: int, b1: int) -> list[int]:
        """Lines in the byte range ``[b0, b1)`` holding one of ``keys`` (see the module doc)."""
        import numpy as np

        tab = _table(keys)
        if tab.last != id(self):
            tab.last = id(self)
            tab.logs += 1
        if self.cand is None and 2 * (b1 - b0) >= self.size:
            # the families asked for in an earlier log too (a one-off family, such as one keyed by
            # this file's first line, would change the union, and its cache key, at every log)
            stable = frozenset(t for t in _TABLES.values() if t.logs >= 2)
            pairs, tables = _union(stable), stable
            if tab not in stable:
                pairs, tables = pairs | tab.pairs, stable | {tab}
            q, v = self._pairs_at(pairs, 0, self.size)
            self.cand = (tables, q, v)
        if self.cand is not None and tab in self.cand[0]:
            # the positions of [b0, b1 - 2] among the shared ones, kept where this table marks them
            _, q, v = self.cand
            i0, i1 = np.searchsorted(q, (b0, b1 - 1)).tolist()
            q, v = q[i0:i1], v[i0:i1]
            mine = tab.pairs[v]
            q, v = q[mine], v[mine]
        else:
            q, v = self._pairs_at(tab.pairs, b0, b1)
        return self._confirm(tab, q, v) if q.size else []

    def _pairs_at(self, pairs: np.ndarray[Any, Any], b0: int, b1: int
                  ) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
        """The positions q in ``[b0, b1 - 2]`` whose two bytes ``pairs`` marks, sorted, and those
        two bytes (little-endian)."""
        import numpy as np

        # two-byte windows starting at q in [b0, b1 - 2]: even q from one view, odd from the other;
        # the marked ones of each, already sorted, merged (a stable sort of two runs merges them:
        # cheaper than laying both into every other place of a mask of the range and reading it)
        parts = []
        for odd in (0, 1):
            j0 = (b0 + 1 - odd) // 2
            j1 = (b1 - odd) // 2
            if j1 <= j0:
                continue
            view = np.frombuffer(self.data, "<u2", count=(len(self.data) - odd) // 2, offset=odd)[j0:j1]
            at = np.flatnonzero(np.take(pairs, view, mode="wrap"))
            at += j0
            at *= 2
            at += odd  # the window at 2 * (j0 + i) + odd
            parts.append(at)
        if len(parts) == 2:
            q = np.concatenate(parts)
            q.sort(kind="stable")
        else:
            q = parts[0] if parts else np.zeros(0, dtype=np.intp)
        return q, self.padded[q].astype(np.uint16) | self.padded[q + 1].astype(np.uint16) << 8

    def _confirm(self, tab: _Table, q: np.ndarray[Any, Any], v: np.ndarray[Any, Any]) -> list[int]:
        """Lines holding a key among the candidate pair positions ``q`` (sorted; ``v``: their two
        bytes, a pair the table marks): the eight bytes around each compared, under a mask, with
        those of the keys of its pair, one key per pair at a time (numpy; for a key of up to
        eight bytes, the answer), then each other survivor's key compared in full. Fewer than
        :data:`_FEW` candidates: :meth:`_confirm_few`."""
        import numpy as np

        if q.size < _FEW:
            return self._confirm_few(tab, q.tolist(), v.tolist())
        slots = tab.slot[v]
        exact: list[np.ndarray[Any, Any]] = []  # positions where a whole key is
        checks: list[tuple[int, np.ndarray[Any, Any], np.ndarray[Any, Any]]] = []  # (layer, positions, slots)
        for j, (shift, mask, value, kind) in enumerate(tab.layers):
            if j:  # the pairs with a j-th key only
                on = kind[slots] != 0
                q, slots = q[on], slots[on]
                if not q.size:
                    break
            at = q - shift[slots]
            if q[0] < _PAD_READ:  # a key starting before the data: read the padding instead (no key's bytes)
                at[at < 0] = self.size
            ok = (self.eights[at] & mask[slots]) == value[slots]
            k = kind[slots]
            exact.append(q[ok & (k == 1)])
            long = np.flatnonzero(ok & (k == 2))
            if long.size:
                checks.append((j, q[long], slots[long]))
        hits = np.concatenate(exact) if len(exact) > 1 else exact[0]
        found = set(np.searchsorted(self.nl, hits).tolist())
        data = self.data
        for j, pos, sl in checks:
            for at_, line, slot in zip(pos.tolist(), np.searchsorted(self.nl, pos).tolist(), sl.tolist(), strict=True):
                if line in found:
                    continue
                if any(at_ >= o and data.startswith(key, at_ - o) for key, o in tab.long[(j, slot)]):
                    found.add(line)
        return sorted(found)


    def _confirm_few(self, tab: _Table, q: list[int], v: list[int]) -> list[int]:
        """:meth:`_confirm` for a few candidates: each key of a candidate's pair compared in full
        where its piece is (``bytes.startswith``), the candidates on a line already found
        skipped (``q`` is sorted: the lines come out sorted)."""
        data, nl, keys_at = self.data, self.nl_list, tab.keys_at
        found: list[int] = []
        end = -1  # the newline ending the last line found
        for at, pair in zip(q, v, strict=True):
            if at < end:
                continue
            for key, o in keys_at[pair]:
                if at >= o and data.startswith(key, at - o):
                    line = bisect.bisect_left(nl, at)
                    found.append(line)
                    end = nl[line] if line < len(nl) else self.size
                    break
        return found


#: Answers :meth:`_ByteIndex.find` keeps per log.
_MEMO = 256

#: Candidates below which :meth:`_ByteIndex._confirm` compares each in Python (numpy's fixed
#: cost per call is larger).
_FEW = 160

#: What follows a log's bytes in its index: bytes no key holds, enough to read eight from any position.
_PAD = b"\n\x00\x00\x00\x00\x00\x00\x00"
#: Positions below which the compared bytes of a key may start before the data.
_PAD_READ = 8

_SPLITS: dict[tuple[str, ...], tuple[tuple[str, ...], tuple[str, ...]]] = {}


def _split(keys: Sequence[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(keys the byte scans handle, keys searched line by line), kept for the families asked
    for again."""
    keys = tuple(keys)
    got = _SPLITS.get(keys)
    if got is not None:
        return got
    fast = tuple(dict.fromkeys(k for k in keys if _fast(k)))
    slow = tuple(k for k in keys if not _fast(k))
    if len(_SPLITS) >= _TABLE_CACHE:
        _SPLITS.clear()
    _SPLITS[keys] = (fast, slow)
    return fast, slow


@functools.lru_cache(maxsize=1024)
def _ascii(key: str) -> bytes:
    return key.encode("ascii")


def _fast(key: str) -> bool:
    return len(key) >= 2 and key.isascii() and "\n" not in key and "\x00" not in key


_TABLES: dict[tuple[str, ...], _Table] = {}

#: ASCII characters from the most to the least frequent in logs (roughly: blanks, digits and
#: common lower-case letters, punctuation of numbers and paths, then the rest) and the most
#: frequent English letter pairs, used to pick the rarest two-byte piece of each key (fewer
#: candidate lines; any piece gives the same answer).
_COMMON = " eta0o1i2n3s4r5h6l7d8c9u.m:-/_=,fpgwybv[]()'\"kTSEAIRCNOLPDMxBFUHGqzjWVKYXJQZ"
_RANK = {c: i for i, c in enumerate(_COMMON)}
_COMMON_PAIRS = frozenset(
    "th he in er an re on at en nd ti es or te of ed is it al ar st to nt ng se ha as ou io le ve co me de hi ri ro"
    " ic ne ea ra ce li ch ll be ma si om ur".split())


def rare_piece(key: str) -> int:
    """Offset in ``key`` (two or more characters) of a two-character piece that is rare in logs."""
    return _piece(key)


def rare_window(key: str, width: int) -> int:
    """Offset in ``key`` (``width`` or more characters) of a ``width``-character piece whose
    characters are rare in logs (the rarest by the sum of their frequency ranks, the first of
    equals)."""
    ranks = [_RANK.get(c, len(_COMMON)) for c in key]
    return max(range(len(key) - width + 1), key=lambda o: (sum(ranks[o:o + width]), -o))


#: Characters at the start of a key its piece is chosen among.
_PIECE_SPAN = 64


@functools.lru_cache(maxsize=1024)
def _piece(key: str) -> int:
    """Offset of the rarest two-character piece of ``key`` (one whose four bytes from it are
    in the key when as rare: fewer reads to compare them)."""
    def cost(o: int) -> tuple[int, int]:
        pair = key[o:o + 2]
        common = _RANK.get(pair[0], len(_COMMON)) + _RANK.get(pair[1], len(_COMMON))
        return (-common + (100 if pair.lower() in _COMMON_PAIRS else 0), 0 if o + 4 <= len(key) else 1)
    return min(range(len(key) - 1), key=cost)


class _Table:
    """What the one-pass scan looks for: ``pairs``, a 64 K table of booleans marking the
    little-endian value of each key's rarest two-byte piece, and ``slot``, each marked pair's
    number; ``layers``, the j-th key of each pair (by slot): ``shift`` (where the eight compared
    bytes start before the piece), ``mask`` and ``value`` of those bytes (the key's, up to eight),
    ``kind`` (0: no j-th key, 1: the bytes are the whole key, 2: a longer key, compared in full);
    ``long``, for (layer, slot), the longer keys (bytes) with their piece's offset in each."""

    __slots__ = ("keys_at", "last", "layers", "logs", "long", "pairs", "slot")

    def __init__(self, keys: tuple[str, ...]) -> None:
        import numpy as np

        #: the id of the index (a log's) that last scanned for these keys, and how many indexes have
        self.last = 0
        self.logs = 0

        self.pairs = np.zeros(1 << 16, dtype=bool)
        # pair -> (shift, width, value) -> [whole key?, longer keys (bytes, piece offset)]
        found: dict[int, dict[tuple[int, int, int], list[Any]]] = {}
        #: pair -> the keys (bytes) marked by it, with the pair's offset in each
        self.keys_at: dict[int, list[tuple[bytes, int]]] = {}
        for key in keys:
            o = _piece(key[:_PIECE_SPAN])  # (a long key, such as a file's first line: its start will do)
            raw = key.encode("ascii")
            pair = raw[o] | raw[o + 1] << 8
            self.pairs[pair] = True
            self.keys_at.setdefault(pair, []).append((raw, o))
            width = min(8, len(raw))
            off = min(o, len(raw) - width)  # where the compared bytes start in the key
            entry = found.setdefault(pair, {}).setdefault(
                (o - off, width, int.from_bytes(raw[off:off + width], "little")), [False, []])
            if len(raw) == width:
                entry[0] = True
            else:
                entry[1].append((raw, o))
        self.slot = np.full(1 << 16, -1, dtype=np.int32)
        self.slot[list(found)] = np.arange(len(found))
        depth = max((len(e) for e in found.values()), default=0)
        self.layers: list[tuple[np.ndarray[Any, Any], ...]] = []
        self.long: dict[tuple[int, int], list[tuple[bytes, int]]] = {}
        for j in range(depth):
            shift = np.zeros(len(found), dtype=np.int64)
            mask = np.zeros(len(found), dtype=np.uint64)
            value = np.zeros(len(found), dtype=np.uint64)
            kind = np.zeros(len(found), dtype=np.uint8)
            for slot, entries in enumerate(found.values()):
                if j >= len(entries):
                    continue
                (sh, width, val), (whole, longer) = list(entries.items())[j]
                shift[slot], mask[slot], value[slot] = sh, (1 << (8 * width)) - 1, val
                kind[slot] = 1 if whole else 2
                if not whole:
                    self.long[(j, slot)] = longer
            self.layers.append((shift, mask, value, kind))


#: Families of fewer than _TABLE_MIN_KEYS keys: [the id of the index (a log's) that last asked
#: for one, how many indexes have]. A family asked for in a second log gets a table: the shared
#: pass of the next logs finds its candidates too (a look-up then, not a search per key).
_FEW_KEYS: dict[tuple[str, ...], list[int]] = {}


def _asked_few(keys: tuple[str, ...], index: _ByteIndex) -> None:
    got = _FEW_KEYS.get(keys)
    if got is None:
        if len(_FEW_KEYS) >= 4 * _TABLE_CACHE:
            _FEW_KEYS.clear()
        got = _FEW_KEYS[keys] = [0, 0]
    if got[0] != id(index):
        got[0] = id(index)
        got[1] += 1
        if got[1] >= 2 and keys not in _TABLES:
            tab = _table(keys)
            tab.last, tab.logs = id(index), got[1]


@functools.lru_cache(maxsize=8)
def _union(tables: frozenset[_Table]) -> np.ndarray[Any, Any]:
    """The pairs any of ``tables`` marks: one pass over a log finds the candidates of every key
    family the reader scans it for (each family then keeps its own among them)."""
    import numpy as np

    out = np.zeros(1 << 16, dtype=bool)
    for tab in tables:
        out |= tab.pairs
    return out


def _table(keys: tuple[str, ...]) -> _Table:
    got = _TABLES.get(keys)
    if got is None:
        if len(_TABLES) >= _TABLE_CACHE:
            # the families of one log only go first: the reader's constant ones are kept
            for k in [k for k, t in _TABLES.items() if t.logs < 2]:
                del _TABLES[k]
            if len(_TABLES) >= _TABLE_CACHE:
                _TABLES.clear()
        got = _TABLES[keys] = _Table(keys)
    return got
