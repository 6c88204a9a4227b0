"""The origin network's JSON cache: a network learned from the code alone is learned once per
user, not once per data directory (learning it imports pgmpy and fits: 4-6 CPU-s)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from gpulens.diagnosis import origin
from gpulens.diagnosis.bn_adapter import BayesNet
from gpulens.diagnosis.origin import VARIABLES, OriginModel, cached_model


def _uniform() -> OriginModel:
    """A hand-made network (every variable a root with a uniform table): no pgmpy, no fit."""
    return OriginModel(BayesNet(states={v: list(s) for v, s in VARIABLES.items()},
                                parents={v: [] for v in VARIABLES},
                                cpts={v: np.full(len(s), 1 / len(s)) for v, s in VARIABLES.items()}))


def _counting(calls: list[int]) -> Callable[[], OriginModel]:
    def learn() -> OriginModel:
        calls.append(1)
        return _uniform()
    return learn


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    origin._MODELS.clear()  # the per-process memo: each step below reads what is on disk
    return tmp_path / "cache" / "gpulens" / "models"


def test_a_network_of_the_code_alone_is_read_by_a_new_data_directory(tmp_path: Path, cache: Path) -> None:
    calls: list[int] = []
    first = cached_model(tmp_path / "a" / "models", "", _counting(calls), shared=True)
    assert calls == [1]
    written = sorted(p.name for p in cache.iterdir())
    assert len(written) == 1 and written[0].startswith("origin-bn-") and written[0].endswith(".json")
    assert (tmp_path / "a" / "models" / written[0]).is_file()
    origin._MODELS.clear()
    again = cached_model(tmp_path / "b" / "models", "", _counting(calls), shared=True)
    assert calls == [1]  # read from the user's cache, not learned again
    assert json.dumps(again.net.to_dict()) == json.dumps(first.net.to_dict())
    assert not (tmp_path / "b" / "models").exists()


def test_a_network_of_a_stores_labels_stays_in_its_data_directory(tmp_path: Path, cache: Path) -> None:
    calls: list[int] = []
    cached_model(tmp_path / "a" / "models", "labels-0123456789abcdef", _counting(calls))
    assert calls == [1]
    assert not cache.exists()
    origin._MODELS.clear()
    cached_model(tmp_path / "b" / "models", "labels-0123456789abcdef", _counting(calls))
    assert calls == [1, 1]


def test_a_damaged_cached_network_is_learned_again_and_rewritten(tmp_path: Path, cache: Path) -> None:
    calls: list[int] = []
    cached_model(None, "", _counting(calls), shared=True)
    (path,) = cache.iterdir()
    path.write_text('{"states": {"origin": [')  # cut short, as by a full disk
    origin._MODELS.clear()
    model = cached_model(None, "", _counting(calls), shared=True)
    assert calls == [1, 1]
    assert json.loads(path.read_text()) == model.net.to_dict()
