"""Round 24: a traceback right above the root error's counts as its copy (README rule R5: the earliest copy,
as torch.distributed's error handler reprints a rank's traceback with its ``[rankN]:`` prefix) only when it was
raised in the same place (its innermost frame), not when two programs in a row were stopped by one message
(a job script's next program, a new launch appended to the file)."""

from __future__ import annotations

from gpulens.diagnosis.logread.whole import diagnose_text


def _tb(frame: str, code: str, exc: str, prefix: str = "", script: str = "train.py") -> list[str]:
    return [prefix + "Traceback (most recent call last):", prefix + f'  File "/w/{script}", line 3, in <module>',
            prefix + "    import model", prefix + f"  {frame}", prefix + f"    {code}", prefix + exc]


def test_two_programs_interrupted_in_different_places_are_two_runs() -> None:
    first = _tb('File "/env/lib/python3.10/site-packages/torch/_decomp/decompositions.py", line 416, in <module>',
                "def smooth_l1_loss(", "KeyboardInterrupt")
    last = _tb('File "/env/lib/python3.10/sre_parse.py", line 169, in __setitem__',
               "def __setitem__(self, index, code):", "KeyboardInterrupt", script="train_v2.py")
    w = diagnose_text("\n".join(first + last))
    assert w.indicator_lines == [len(first) + len(last)]


def test_a_rank_reprinting_its_own_traceback_is_labelled_at_the_first_copy() -> None:
    frame = 'File "/w/model.py", line 88, in forward'
    plain = _tb(frame, "assert x.shape[1] == self.dim", "AssertionError: dim 512 != 256")
    ranked = _tb(frame, "assert x.shape[1] == self.dim", "AssertionError: dim 512 != 256", "[rank0]: ")
    w = diagnose_text("\n".join(["step 1 loss 2.0"] + plain + ranked))
    assert w.indicator_lines == [1 + len(plain)]
