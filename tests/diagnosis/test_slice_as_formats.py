"""Readings settled from dev rows in stop 56: a framework module's missing attribute is an API that changed between
versions (README C9: ``semantic_error``) when the job's own code calls it, an ``import_error`` only while a library is
being imported."""

from __future__ import annotations

import pytest

from gpulens.diagnosis.logread import diagnose_text

_EPOCHS = [f"epoch {k}: prepared {k * 10} samples" for k in range(3)]


def _job(*tb: str) -> str:
    return "\n".join(["+ python train.py", *_EPOCHS, "Traceback (most recent call last):", *tb])


_CALLED = ('  File "/group/p/exp001/train.py", line 246, in <module>', "    main()",
           '  File "/group/p/exp001/train.py", line 165, in main', '    scaler = torch.amp.GradScaler("cuda", enabled=True)',
           "AttributeError: module 'torch.amp' has no attribute 'GradScaler'")
_IMPORTED = ('  File "/group/p/exp001/train.py", line 3, in <module>', "    import torchvision",
             '  File "/env/lib/python3.10/site-packages/torchvision/_meta_registrations.py", line 26, in <module>',
             '    @torch.library.register_fake("torchvision::roi_align")',
             "AttributeError: module 'torch.library' has no attribute 'register_fake'")


@pytest.mark.parametrize(("tb", "category"), [(_CALLED, "semantic_error"), (_IMPORTED, "import_error")])
def test_a_framework_api_missing_is_semantic_when_called_and_an_import_error_while_imported(
        tb: tuple[str, ...], category: str) -> None:
    got = diagnose_text(_job(*tb)).diagnosis
    assert (got.category, got.origin) == (category, "user")
