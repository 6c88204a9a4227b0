"""Round 26: the story quotes a long failure line up to a sentence's or a word's end, with an ellipsis,
not cut in the middle of a word ("... Including no (line 222)")."""
from __future__ import annotations

from gpulens.diagnosis.logread.story import clip

_OOM = ("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 512.00 MiB. GPU 1 has a total capacity "
        "of 63.42 GiB of which 336.50 MiB is free. Including non-PyTorch memory, this process has 63.09 GiB memory "
        "in use.")


def test_a_long_line_ends_at_a_sentence() -> None:
    got = clip(_OOM)
    assert got.endswith("336.50 MiB is free. …") and len(got) <= 162


def test_a_line_without_sentences_ends_at_a_word() -> None:
    text = "RuntimeError: " + " ".join(f"word{k}" for k in range(60))
    got = clip(text)
    assert got.endswith(" …") and got[:-2].split()[-1].startswith("word") and got[:-2] in text


def test_short_lines_and_unbroken_text_stay_readable() -> None:
    assert clip("ValueError: bad row 3") == "ValueError: bad row 3"
    assert clip("x" * 300) == "x" * 160 + " …"
