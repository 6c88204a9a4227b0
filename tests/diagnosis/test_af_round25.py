"""Reader round 25, slice af: excerpts written by hand in the formats the libraries print (never pasted
from a log). Each test names the library source of its format."""

from __future__ import annotations

from gpulens.diagnosis.logread.whole import diagnose_text


def _text(lines: list[str]) -> str:
    return "\n".join(lines) + "\n"


# CPython 3.11+ traceback (Lib/traceback.py: frame, source line, caret line) of a torch.save statement whose
# argument is built through torch/nn/modules/module.py Module.__getattr__ ("'{type}' object has no attribute
# '{name}'"): README C3 (saving model state that fails is checkpoint_error) and P6 (checkpoint_save).
_SAVE_ARG = [
    "epoch 30 | train loss 0.41 | val acc 0.83",
    "epoch 31 | train loss 0.40 | val acc 0.84",
    "Training done, writing the encoder weights",
    "Traceback (most recent call last):",
    '  File "/home/u/proj/run.py", line 120, in <module>',
    "    finish(net, args)",
    '  File "/home/u/proj/run.py", line 95, in finish',
    "    torch.save(net.backbone.encoder.state_dict(), args.out)",
    "               ^^^^^^^^^^^^^^^^^^^^",
    '  File "/opt/conda/lib/python3.11/site-packages/torch/nn/modules/module.py", line 1709, in __getattr__',
    "    raise AttributeError(f\"'{type(self).__name__}' object has no attribute '{name}'\")",
    "AttributeError: 'ConvBackbone' object has no attribute 'encoder'",
]


def test_an_error_building_a_torch_save_argument_is_a_failed_model_save() -> None:
    got = diagnose_text(_text(_SAVE_ARG))
    assert got.diagnosis.category == "checkpoint_error"
    assert got.phase == "checkpoint_save"
    assert got.indicator_lines == [len(_SAVE_ARG)]


def test_the_same_attribute_error_outside_a_save_stays_a_code_error() -> None:
    lines = [*_SAVE_ARG[:7], "    feats = net.backbone.encoder(x)", *_SAVE_ARG[8:]]
    got = diagnose_text(_text(lines))
    assert got.diagnosis.category == "semantic_error"
    assert got.phase != "checkpoint_save"
