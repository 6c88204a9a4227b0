"""Fixtures shared by the diagnosis tests."""

from __future__ import annotations

import pytest

from gpulens.diagnosis.classifier import Classifier


@pytest.fixture(scope="module")
def rules() -> Classifier:
    """The signature rules alone (no statistical model, nothing cached): what the reader decides by itself."""
    return Classifier(model=None, cache_dir=None)
