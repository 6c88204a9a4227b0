"""The whole-log reader's error context keeps the first and the last lines of a long one: it
reads only those ends (speed), and keeps exactly the lines a filter over the whole range keeps."""

from __future__ import annotations

import random

from gpulens.diagnosis.logread import ranks, whole
from gpulens.diagnosis.logread.indicators import failing
from gpulens.diagnosis.logread.lines import is_progress


def test_ends_keeps_the_first_and_last_kept_indexes_and_tests_only_near_them() -> None:
    rnd = random.Random(7)
    for n in (0, 1, 5, 29, 30, 31, 200):
        for density in (0.0, 0.3, 1.0):
            flags = [rnd.random() < density for _ in range(n)]
            asked: list[int] = []

            def kept(k: int, flags: list[bool] = flags, asked: list[int] = asked) -> bool:
                asked.append(k)
                return flags[k]

            every = [k for k in range(2, n) if flags[k]]
            want = every if len(every) <= 30 else every[:10] + every[-20:]
            assert whole._ends(kept, 2, n, 10, 20) == want
            assert len(asked) == len(set(asked))  # each index tested once at most
            if len(every) > 30:  # the middle kept lines were never tested
                assert not set(every[31:-20]) & set(asked)


def test_a_long_error_context_keeps_its_first_third_and_last_two_thirds() -> None:
    # 3000 error lines between progress lines of two ranks: the context is rank 1's lines without
    # progress, the first 400 and the last 800 of them, with the rank prefix taken off
    lines = ["[rank0]: step 1/10 loss=1.0"]
    for i in range(3000):
        lines.append(f"[rank1]: ValueError: bad value {i}")
        lines.append(f"[rank1]: Epoch 1:  {i % 100}%|###| {i}/3000 [00:01<00:02, 3.00it/s]")
        lines.append(f"[rank0]: RuntimeError: peer failed {i}")
    first = ranks.Origin(rank=1)
    got = whole._context(lines, 0, first)
    every = [ranks.strip_prefix(ln) for ln in lines if not is_progress(ln) and failing.from_origin(ln, first)]
    assert len(every) == 3000
    assert got == every[:400] + every[-800:]
    assert got[0] == "ValueError: bad value 0" and got[-1] == "ValueError: bad value 2999"


def test_a_read_log_keeps_its_bytes_for_the_key_scans_only_when_they_are_its_lines(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # NUL runs are dropped, undecodable bytes become U+FFFD: the key scans then read the lines
    # (not the file's bytes), and find every key on the line that holds it either way
    from gpulens.diagnosis.keyscan import find_keys, scan_lines
    from gpulens.diagnosis.logread.source import read_whole

    body = "".join(f"step {i} loss 2.0 lr 0.001 grad_norm 1.5\n" for i in range(20)) + "RuntimeError: boom\n"
    cases = {"ascii.log": body.encode(), "wide.log": ("\u2588" * 3 + " " + body).encode(),
             "nul.log": b"\x00" * 40 + body.encode() + b"\x00" * 9 + b"Killed\n",
             "bad.log": b"\xff\xfe x\n" + body.encode() + b"Killed\n",
             "fffd.log": "\ufffd ok\n".encode() + body.encode() + b"Killed\n"}
    keys = ("RuntimeError", "Killed", "loss", "ok", "boom", "Error", "step")
    for name, data in cases.items():
        path = tmp_path / name
        path.write_bytes(data)
        src = read_whole(path)
        assert src.reason is None, name
        lines = src.lines
        assert not any("\x00" in ln for ln in lines)
        assert find_keys(lines, keys) == scan_lines(list(lines), keys, 0, len(lines)), name
        assert lines[find_keys(lines, ("RuntimeError",))[0]] == "RuntimeError: boom", name
