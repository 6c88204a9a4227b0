"""Fixtures of the dashboard tests: one small cluster per test session, AppTest runners."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gpulens.store import Store
from tests.dashboard.smallstore import build_small_store

APP = str(Path(__file__).resolve().parents[2] / "gpulens" / "dashboard" / "app.py")

#: page script -> a heading the page always shows when the store has data
PAGES = {
    "overview": "Overview",
    "jobs": "Jobs",
    "locality": "Locality",
    "early_stop": "Early stop",
    "failures": "Failures",
    "inputs_nodes": "Inputs and nodes",
    "validation": "Validation",
}


def _simulate() -> Callable[..., object] | None:
    try:
        module = importlib.import_module("gpulens.ingest.simulate")
    except ImportError:
        return None
    fn = getattr(module, "simulate", None)
    return fn if callable(fn) else None


def postprocess(store: Store) -> None:
    """What `gpulens demo` runs after simulating: diagnose, blacklist, flag and score nodes."""
    from gpulens.diagnosis import blacklist, jobs, nodes

    jobs.diagnose_all(store)
    blacklist.update_from_failures(store)
    nodes.flag_nodes(store)
    nodes.score_anomalies(store)


def fill_store(store: Store) -> str:
    """Fill ``store`` with a small cluster; return which builder made it."""
    sim = _simulate()
    if sim is not None:
        sim(store, gpus=32, days=1, seed=1)
        postprocess(store)
        return "simulate"
    build_small_store(store)
    return "hand-built"


@pytest.fixture(scope="session")
def dash_store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    """A small cluster shared (read-only) by the page tests."""
    store = Store.open(tmp_path_factory.mktemp("dash") / "data")
    fill_store(store)
    return store


@pytest.fixture(scope="session")
def hand_store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    """The hand-built cluster (known vcs, users, failed jobs with logs)."""
    store = Store.open(tmp_path_factory.mktemp("dash-hand") / "data")
    build_small_store(store)
    return store


@pytest.fixture
def use_store(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Iterator[Callable[[Store], None]]:
    """Point the dashboard at a store through the environment (as `gpulens dashboard` does)."""
    monkeypatch.delenv("GPULENS_CONFIG", raising=False)
    for var in ("GPULENS_DASHBOARD_OPERATOR_TOKEN", "GPULENS_DASHBOARD_PROMETHEUS_URL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path)  # no stray ./gpulens.toml

    def point(store: Store) -> None:
        monkeypatch.setenv("GPULENS_DATA_DIR", str(store.root))

    yield point
