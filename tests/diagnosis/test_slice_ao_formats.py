"""Formats read from the dev rows of slice `ao`: OmegaConf resolving an interpolation is no evaluation, and a
progress bar with a message printed onto its last refresh still counts the steps it shows."""

from __future__ import annotations

from gpulens.diagnosis.logread.bars import bar_under_text
from gpulens.diagnosis.logread.phase.frames import in_eval
from gpulens.diagnosis.logread.steplines import step_in, step_progress

_RESOLVER = [
    "Traceback (most recent call last):",
    '  File "/env/lib/python3.11/site-packages/hydra/_internal/core_plugins/basic_sweeper.py", line 1, in setup',
    '  File "/env/lib/python3.11/site-packages/omegaconf/base.py", line 694, in _evaluate_custom_resolver',
    "    return resolver(",
    '  File "/env/lib/python3.11/site-packages/hydra/core/hydra_config.py", line 31, in get',
    '    raise ValueError("HydraConfig was not set")',
    "omegaconf.errors.InterpolationResolutionError: ValueError raised while resolving interpolation",
]


def test_omegaconf_resolving_an_interpolation_is_no_evaluation() -> None:
    assert not in_eval(_RESOLVER)
    evaluating = [*_RESOLVER[:2], '  File "/job/run.py", line 9, in evaluate_model', *_RESOLVER[2:]]
    assert in_eval(evaluating)


_GLUED = ("steps:   0%|          | 218/60000 [01:30<6:51:39,  2.42it/s, avr_loss=0.166]\r"
          "steps:   0%|          | 219/60000 [01:30<6:51:32,  2.42it/s, avr_loss=0.165]"
          "['python', 'sdxl_train_network.py', '--save_model_as', 'safetensors', '--save_every_n_epochs', '5', "
          + ", ".join(f"'--option_{k}', '{k}'" for k in range(40)) + "]")  # a wrapper's whole command list


def test_a_bar_with_a_message_printed_onto_it_is_still_progress() -> None:
    assert bar_under_text(_GLUED) == "steps:   0%|          | 219/60000 [01:30<6:51:32,  2.42it/s, avr_loss=0.165]"
    assert step_progress(_GLUED)
    assert step_in(_GLUED) == "219"
    assert bar_under_text("steps:   0%|          | 219/60000 [01:30<6:51:32,  2.42it/s]") is None  # nothing printed onto it
