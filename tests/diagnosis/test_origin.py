"""The origin network: pgmpy adapter, declared states, Philly logic, evidence influence."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from gpulens.diagnosis.origin import (
    EDGES,
    EVIDENCE_VARIABLES,
    VARIABLES,
    OriginModel,
    default_model,
    synthetic_history,
)
from gpulens.diagnosis.types import CATEGORIES, ORIGINS
from gpulens.errors import InputError
from tests.conftest import require_module


@pytest.fixture(scope="module")
def model() -> OriginModel:
    require_module("pgmpy")
    return default_model()


def test_history_is_deterministic_and_follows_philly_shape() -> None:
    a = synthetic_history(5000, seed=3)
    b = synthetic_history(5000, seed=3)
    pd.testing.assert_frame_equal(a, b)
    assert list(a.columns) == list(VARIABLES)
    share = a["origin"].value_counts(normalize=True)
    assert share["user"] > share["infrastructure"] and share["user"] > 0.4  # user dominates
    retry = pd.crosstab(a["origin"], a["retry"], normalize="index")
    assert retry.loc["user", "same_failure_other_node"] > retry.loc["infrastructure", "same_failure_other_node"]
    assert retry.loc["infrastructure", "succeeded_on_retry"] > retry.loc["user", "succeeded_on_retry"]
    assert a["node_health"].isna().any() and a["origin"].notna().all()
    with pytest.raises(InputError):
        synthetic_history(0)


def test_numpy_elimination_matches_pgmpy_variable_elimination(model: OriginModel) -> None:
    rng = np.random.default_rng(0)
    for _ in range(25):
        ev = {v: str(rng.choice(VARIABLES[v])) for v in EVIDENCE_VARIABLES if rng.random() < 0.6}
        ours = model.net.posterior("origin", ev)
        ref = model.net.posterior_pgmpy("origin", ev)
        assert ours == pytest.approx(ref, abs=1e-9)
    # a query on a hidden middle variable too
    ev = {"stage": "checkpoint", "exit": "sigkill"}
    assert model.net.posterior("category", ev) == pytest.approx(
        model.net.posterior_pgmpy("category", ev), abs=1e-9
    )


def test_every_state_is_declared_so_unseen_combinations_work() -> None:
    require_module("pgmpy")
    # a tiny history that never shows most categories, exits or retry outcomes
    hist = pd.DataFrame(
        {"origin": ["user", "infrastructure"] * 5, "category": ["syntax_error", "gpu_hardware"] * 5,
         "retry": ["same_failure_other_node", "succeeded_on_retry"] * 5, "multi_node": ["single"] * 10}
    )
    m = OriginModel.learn(hist, equivalent_sample_size=5.0)
    for var in VARIABLES:
        assert m.net.states[var] == list(VARIABLES[var])
    r = m.infer({"category": "model_diverged", "exit": "signal_other",
                 "stage": "checkpoint", "node_health": "app_xid", "retry": "different_failure"})
    assert abs(sum(r.posterior.values()) - 1) < 1e-9
    assert all(p > 0 for p in r.posterior.values())
    # what the history did show is learned
    assert m.infer({"category": "gpu_hardware"}).origin == "infrastructure"
    assert m.infer({"category": "syntax_error"}).origin == "user"
    # a row missing a parent of a table is left out of that table's counts only
    partial = hist.assign(multi_node=[None] * 10)
    m2 = OriginModel.learn(partial, equivalent_sample_size=5.0)
    assert m2.net.cpd("retry").loc["succeeded_on_retry", "infrastructure"] > 0.5
    assert m2.posterior({"category": "gpu_hardware"}) == pytest.approx(m2.posterior({}))  # no counts


def test_learned_tables_follow_the_structure(model: OriginModel) -> None:
    net = model.net
    assert sorted(net.edges) == sorted(EDGES)
    for var, table in net.cpts.items():
        assert table.shape == (len(VARIABLES[var]), *[len(VARIABLES[p]) for p in net.parents[var]])
        assert np.allclose(table.sum(axis=0), 1.0)
        assert (table > 0).all()  # BDeu: nothing impossible
    cpd = net.cpd("retry")
    assert cpd.loc["succeeded_on_retry", "infrastructure"] > cpd.loc["succeeded_on_retry", "user"]


def test_philly_logic_in_the_network(model: OriginModel) -> None:
    # identical failure on retries on other nodes: user or data, whatever the category suggests
    for cat in ("crash", "cuda_error", "semantic_error", "incorrect_input"):
        r = model.infer({"category": cat, "retry": "same_failure_other_node", "node_health": "clean"})
        assert r.origin in {"user", "data"}, (cat, r.posterior)
    # gone on retry while the node logged hardware XIDs: infrastructure
    for cat in ("crash", "cuda_error", "unknown", "comm_error", "checkpoint_error"):
        r = model.infer({"category": cat, "retry": "succeeded_on_retry", "node_health": "xid_or_ecc"})
        assert r.origin == "infrastructure", (cat, r.posterior)
    # the other jobs failing on that node at the same time add to it
    alone = model.posterior({"category": "crash", "retry": "succeeded_on_retry"})
    crowd = model.posterior({"category": "crash", "retry": "succeeded_on_retry", "node_cofailures": "several"})
    assert crowd["infrastructure"] > alone["infrastructure"]
    # the same input failing elsewhere points at the data
    r = model.infer({"category": "semantic_error", "input_cofailures": "several"})
    assert r.origin == "data"


def test_the_origin_convention_for_deterministic_crashes(model: OriginModel) -> None:
    # repeats identically on other nodes: the failing frame decides between user and framework
    for cat in ("crash", "cuda_error"):
        for exit_ in ("sigsegv", "error", "sigabrt"):
            base = {"category": cat, "retry": "same_failure_other_node", "node_health": "clean", "exit": exit_}
            user = model.infer({**base, "fault_frame": "user_code"})
            fw = model.infer({**base, "fault_frame": "framework"})
            assert (user.origin, fw.origin) == ("user", "framework"), (cat, exit_, user.posterior, fw.posterior)
            assert any(i.variable == "fault_frame" for i in user.influence)
    # a hardware fault still wins when the node logged XIDs and a retry passed elsewhere
    r = model.infer({"category": "cuda_error", "fault_frame": "framework", "retry": "succeeded_on_retry",
                     "node_health": "xid_or_ecc"})
    assert r.origin == "infrastructure"


def test_influence_is_the_log_odds_change_without_each_evidence(model: OriginModel) -> None:
    ev = {"category": "cuda_error", "retry": "succeeded_on_retry", "node_health": "xid_or_ecc",
          "stage": "mid_training", "multi_node": "single"}
    r = model.infer(ev)
    assert r.origin == "infrastructure"
    assert {i.variable for i in r.influence} == set(ev)
    mags = [abs(i.delta_log_odds) for i in r.influence]
    assert mags == sorted(mags, reverse=True)
    for inf in r.influence:
        rest = {k: v for k, v in ev.items() if k != inf.variable}
        p_without = model.posterior(rest)["infrastructure"]
        expected = np.log(r.probability / (1 - r.probability)) - np.log(p_without / (1 - p_without))
        assert inf.delta_log_odds == pytest.approx(expected, abs=1e-3)
    health = next(i for i in r.influence if i.variable == "node_health")
    assert health.delta_log_odds > 1 and health.favours == "infrastructure"
    assert "xid or ecc" in health.text
    assert model.infer(ev, explain=False).influence == []


def test_bad_evidence_is_rejected(model: OriginModel) -> None:
    with pytest.raises(InputError, match="not a state of category"):
        model.infer({"category": "meteor_strike"})
    with pytest.raises(InputError, match="not an evidence variable"):
        model.infer({"origin": "user"})
    r = model.infer({"category": None, "retry": "no_retry"})  # None = unobserved
    assert r.evidence == {"retry": "no_retry"}


def test_store_rows_refit_and_round_trip(model: OriginModel) -> None:
    from gpulens.diagnosis.bn_adapter import BayesNet

    clone = BayesNet.from_dict(model.net.to_dict())
    ev = {"category": "comm_error", "multi_node": "multi", "retry": "succeeded_on_retry"}
    assert clone.posterior("origin", ev) == pytest.approx(model.net.posterior("origin", ev))
    assert set(ORIGINS) == set(model.posterior({}))
    assert len(CATEGORIES) == len(model.net.states["category"])


def test_leave_one_out_shortcut_equals_recomputing(model: OriginModel) -> None:
    ev = {"category": "crash", "exit": "sigkill", "stage": "mid_training", "retry": "no_retry",
          "node_health": "clean", "node_cofailures": "one", "input_cofailures": "none", "multi_node": "multi"}
    loo = model.net.leave_one_out("origin", ev)
    for var in ev:
        rest = {k: v for k, v in ev.items() if k != var}
        model.net._memo.clear()
        assert loo[var] == pytest.approx(model.net.posterior_array("origin", rest), abs=1e-12)
