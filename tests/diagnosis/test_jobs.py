"""diagnose_job / diagnose_all on hand-built stores: context gathering and the Philly logic.

The helpers at the top build stores with ``store.write()`` and
``store.write_samples('xid', ...)``; the blacklist and node tests import them.
Logs are classified by :class:`FakeClassifier`, an injected ``classify``
callable that reads a ``CATEGORY:`` header the tests write into each log.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest

from gpulens.diagnosis.jobs import (
    diagnose_all,
    diagnose_job,
    exit_class,
    format_job,
    labeled_history,
    model_for_store,
    stage_of,
)
from gpulens.diagnosis.types import DEFAULT_ORIGIN, Diagnosis
from gpulens.errors import InputError
from gpulens.store import Store, arrow_schema
from tests.conftest import require_module

T0 = datetime(2026, 11, 1, 8, 0, 0)


class FakeClassifier:
    """classify(path): reads 'CATEGORY: x' and 'INPUT: p' lines written by the tests."""

    def __init__(self) -> None:
        self.calls: list[Path] = []

    def __call__(self, path: Path) -> Diagnosis:
        self.calls.append(Path(path))
        text = Path(path).read_text()
        cat = "unknown"
        inputs: list[str] = []
        evidence: list[str] = []
        clue: str | None = None
        for line in text.splitlines():
            if line.startswith("CATEGORY: "):
                cat = line.split(": ", 1)[1].strip()
            elif line.startswith("CLUE: "):
                clue = line.split(": ", 1)[1].strip()
            elif line.startswith("INPUT: "):
                inputs.append(line.split(": ", 1)[1].strip())
            elif line.strip():
                evidence.append(line)
        return Diagnosis(cat, DEFAULT_ORIGIN[cat], 0.9 if cat != "unknown" else 0.0,
                         evidence=evidence, inputs=inputs, method="rule", file=str(path), clue=clue)


def add_job(
    store: Store,
    job_id: str,
    attempts: list[dict],
    *,
    user: str = "alice",
    inputs: list[str] | None = None,
    status: str | None = None,
) -> None:
    """One job with attempts. Each attempt dict: status, nodes, start (minutes after T0),
    minutes (run time), category (writes a log), exit_code, signal, extra (log lines)."""
    final = status or attempts[-1]["status"]
    with store.write() as con:
        con.execute(
            'INSERT INTO jobs (job_id, "user", vc, name, submitted, status, requested_gpus, inputs, source) '
            "VALUES (?, ?, 'vc1', ?, ?, ?, 1, ?, 'test')",
            [job_id, user, job_id, T0, final, inputs or []],
        )
        for i, a in enumerate(attempts):
            start = T0 + timedelta(minutes=a.get("start", 0))
            end = start + timedelta(minutes=a.get("minutes", 30))
            log_path = None
            if a.get("category") is not None:
                log = store.logs / f"{job_id}-{i}.log"
                lines = [f"CATEGORY: {a['category']}", *a.get("extra", [])]
                lines += [f"INPUT: {p}" for p in a.get("log_inputs", [])]
                log.write_text("\n".join(lines) + "\n")
                log_path = str(log.relative_to(store.root))
            con.execute(
                "INSERT INTO attempts (job_id, attempt, start_time, end_time, status, exit_code, signal, log_path)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [job_id, i, start, end, a["status"], a.get("exit_code", 1 if a["status"] == "failed" else 0),
                 a.get("signal"), log_path],
            )
            for node in a.get("nodes", ["node-a"]):
                con.execute(
                    "INSERT INTO placements VALUES (?, ?, ?, 0, ?, ?)", [job_id, i, node, start, end]
                )


def add_xids(store: Store, events: list[tuple[str, float, int]]) -> None:
    """XID events: (node, minutes after T0, xid)."""
    schema = arrow_schema("xid")
    rows = {
        "ts": [T0 + timedelta(minutes=m) for _, m, _ in events],
        "node": [n for n, _, _ in events],
        "gpu_index": [0] * len(events),
        "uuid": ["GPU-0"] * len(events),
        "xid": [x for _, _, x in events],
    }
    store.write_samples("xid", pa.table(rows, schema=schema))


def failure_rows(store: Store) -> dict[tuple[str, int], dict]:
    con = store.connect()
    try:
        df = con.execute("SELECT * FROM failures ORDER BY job_id, attempt").df()
    finally:
        con.close()
    return {(r["job_id"], int(r["attempt"])): r for r in df.to_dict("records")}


@pytest.fixture(scope="module")
def model():
    require_module("pgmpy")
    from gpulens.diagnosis.origin import default_model

    return default_model()


# ---------------------------------------------------------------- evidence helpers
def test_exit_class_covers_codes_and_signals() -> None:
    assert exit_class(1, None) == "error"
    assert exit_class(137, None) == "sigkill"
    assert exit_class(143, None) == "sigterm"
    assert exit_class(139, None) == "sigsegv"
    assert exit_class(-6, None) == "sigabrt"
    assert exit_class(None, 9) == "sigkill"
    assert exit_class(0, None) == "zero"
    assert exit_class(2, None) == "other_code"
    assert exit_class(None, None) is None


def test_stage_from_runtime_and_checkpoint_evidence() -> None:
    assert stage_of("semantic_error", 30.0) == "startup"
    assert stage_of("semantic_error", 600.0) == "first_iteration"
    assert stage_of("semantic_error", 7200.0) == "mid_training"
    assert stage_of("checkpoint_error", 7200.0) == "checkpoint"
    assert stage_of("storage_error", 7200.0, ["  torch.save(model.state_dict(), path)"]) == "checkpoint"
    assert stage_of("crash", None) is None


# ---------------------------------------------------------------- the Philly logic
@pytest.mark.slow
def test_identical_failure_on_retries_on_other_nodes_is_user_or_data(store: Store, model) -> None:
    attempts = [
        {"status": "failed", "nodes": [n], "start": 100 * i, "minutes": 12, "category": "crash",
         "exit_code": 139}
        for i, n in enumerate(["node-a", "node-b", "node-c"])
    ]
    add_job(store, "j-user", attempts)
    jd = diagnose_job(store, "j-user", classify=FakeClassifier(), model=model)
    assert [a.attempt for a in jd.attempts] == [0, 1, 2]
    for a in jd.attempts:
        assert a.context["retry"] == "same_failure_other_node"
        assert a.origin.origin in {"user", "data"}
        assert a.origin.posterior["user"] + a.origin.posterior["data"] > 0.5
        assert a.origin.posterior["infrastructure"] < 0.1
    # the retry evidence is what moved it: without it the same crash is not user/data
    alone = model.infer({"category": "crash", "exit": "sigsegv", "stage": "first_iteration"})
    with_retry = jd.attempts[0].origin
    assert with_retry.posterior["user"] + with_retry.posterior["data"] > (
        alone.posterior["user"] + alone.posterior["data"]
    )
    retry = next(i for i in with_retry.influence if i.variable == "retry")
    assert retry.delta_log_odds > 0
    rows = failure_rows(store)
    assert set(rows) == {("j-user", 0), ("j-user", 1), ("j-user", 2)}
    assert rows[("j-user", 0)]["origin"] in {"user", "data"}


@pytest.mark.slow
def test_failure_gone_on_retry_with_node_xids_is_infrastructure(store: Store, model) -> None:
    add_job(store, "j-infra", [
        {"status": "failed", "nodes": ["node-bad"], "start": 0, "minutes": 240, "category": "cuda_error"},
        {"status": "passed", "nodes": ["node-good"], "start": 300, "minutes": 600},
    ])
    add_xids(store, [("node-bad", 230, 79), ("node-bad", 235, 48)])
    jd = diagnose_job(store, "j-infra", classify=FakeClassifier(), model=model)
    assert len(jd.attempts) == 1
    a = jd.attempts[0]
    assert a.context["retry"] == "succeeded_on_retry"
    assert a.context["node_health"] == "xid_or_ecc"
    assert a.context["stage"] == "mid_training"
    assert a.origin.origin == "infrastructure"
    assert a.origin.probability > 0.5
    # cuda_error alone points at the framework; the node's XIDs and the retry flip it
    assert model.infer({"category": "cuda_error"}).origin != "infrastructure"
    assert a.origin.influence[0].variable == "node_health"
    pushes = {i.variable: i for i in a.origin.influence if i.delta_log_odds > 0}
    assert {"node_health", "retry"} <= set(pushes)
    assert pushes["retry"].favours == "infrastructure"
    category = next(i for i in a.origin.influence if i.variable == "category")
    assert category.delta_log_odds < 0  # the category alone argued for the framework
    assert any("XID 79" in n for n in a.notes)
    row = failure_rows(store)[("j-infra", 0)]
    assert row["origin"] == "infrastructure"
    assert row["category"] == "cuda_error"
    posterior = json.loads(row["origin_posterior"])
    assert set(posterior) == {"user", "data", "framework", "infrastructure", "unknown"}
    assert abs(sum(posterior.values()) - 1) < 1e-3
    assert posterior["infrastructure"] == pytest.approx(row["origin_confidence"], abs=1e-5)
    assert json.loads(row["origin_evidence"])["node_health"] == "xid_or_ecc"
    assert json.loads(row["origin_influence"])[0]["variable"] == "node_health"
    assert row["method"] == "rule+bn"


@pytest.mark.slow
def test_xids_outside_the_attempt_window_do_not_count(store: Store, model) -> None:
    add_job(store, "j", [
        {"status": "failed", "nodes": ["node-a"], "start": 0, "minutes": 30, "category": "crash"},
        {"status": "passed", "nodes": ["node-b"], "start": 60, "minutes": 30},
    ])
    add_xids(store, [("node-a", 600, 79), ("node-b", 10, 79)])  # later on a; b not used then
    a = diagnose_job(store, "j", classify=FakeClassifier(), model=model, write=False).attempts[0]
    assert a.context["node_health"] == "clean"  # node-a is monitored, nothing in the window


@pytest.mark.slow
def test_application_xids_are_not_hardware(store: Store, model) -> None:
    add_job(store, "j", [{"status": "failed", "nodes": ["node-a"], "minutes": 30, "category": "cuda_error"}])
    add_xids(store, [("node-a", 20, 13), ("node-a", 21, 31)])
    a = diagnose_job(store, "j", classify=FakeClassifier(), model=model, write=False).attempts[0]
    assert a.context["node_health"] == "app_xid"


@pytest.mark.slow
def test_co_failures_on_same_node_count_other_users_only(store: Store, model) -> None:
    add_job(store, "victim", [{"status": "failed", "nodes": ["node-x"], "start": 0, "minutes": 300,
                               "category": "crash"}], user="alice")
    for i, user in enumerate(["bob", "carol", "alice"]):
        add_job(store, f"other-{i}", [{"status": "failed", "nodes": ["node-x"], "start": 10,
                                       "minutes": 280 + i, "category": "crash"}], user=user)
    add_job(store, "syntax", [{"status": "failed", "nodes": ["node-x"], "start": 295, "minutes": 1,
                               "category": "syntax_error"}], user="dave")
    add_job(store, "far", [{"status": "failed", "nodes": ["node-x"], "start": 2000, "minutes": 5,
                            "category": "crash"}], user="erin")
    diagnose_all(store, classify=FakeClassifier(), model=model)
    jd = diagnose_job(store, "victim", classify=FakeClassifier(), model=model)
    ctx = jd.attempts[0].context
    assert ctx["node_cofailures"] == "several"  # bob and carol; not alice, syntax, or far
    assert any("other-0" in n and "other-1" in n and "other-2" not in n for n in jd.attempts[0].notes)


@pytest.mark.slow
def test_input_co_failures_point_at_data(store: Store, model) -> None:
    for i, user in enumerate(["u1", "u2", "u3"]):
        add_job(store, f"d{i}", [{"status": "failed", "nodes": [f"n{i}"], "minutes": 90,
                                  "category": "incorrect_input",
                                  "log_inputs": ["/data/shared/bad/part-0007.rec"]}],
                user=user, inputs=["/data/shared/bad", f"/home/{user}/vocab.txt"])
    assert diagnose_all(store, classify=FakeClassifier(), model=model) == 3
    rows = failure_rows(store)
    for i in range(3):
        row = rows[(f"d{i}", 0)]
        assert row["origin"] == "data"
        assert json.loads(row["origin_evidence"])["input_cofailures"] == "several"
        assert list(row["inputs"]) == ["/data/shared/bad/part-0007.rec"]


@pytest.mark.slow
def test_a_popular_input_that_passing_jobs_read_is_not_blamed(store: Store, model) -> None:
    """Jobs broken by a corrupt shard also declared a popular dataset: that dataset is not the
    suspect (other jobs passed with it), so a user failure on it has no input co-failures."""
    for i, user in enumerate(["u1", "u2", "u3"]):
        add_job(store, f"d{i}", [{"status": "failed", "nodes": [f"n{i}"], "minutes": 90,
                                  "category": "incorrect_input"}],
                user=user, inputs=["/data/popular", "/data/shared/bad-shard"])
    for i in range(3):
        add_job(store, f"ok{i}", [{"status": "passed", "nodes": ["n9"], "minutes": 90}],
                user=f"p{i}", inputs=["/data/popular"])
    add_job(store, "mine", [{"status": "failed", "nodes": ["n5"], "minutes": 9, "category": "semantic_error"}],
            user="zed", inputs=["/data/popular"])
    diagnose_all(store, classify=FakeClassifier(), model=model)
    evidence = {k: json.loads(r["origin_evidence"]) for k, r in failure_rows(store).items()}
    assert evidence[("mine", 0)]["input_cofailures"] == "none"
    assert failure_rows(store)[("mine", 0)]["origin"] == "user"
    assert all(evidence[(f"d{i}", 0)]["input_cofailures"] == "several" for i in range(3))


@pytest.mark.slow
def test_no_input_co_failure_evidence_when_the_suspect_is_private(store: Store, model) -> None:
    """A job's own file is read by nobody else: 'no other job failed on it' is no evidence."""
    add_job(store, "ok", [{"status": "passed", "nodes": ["n9"], "minutes": 90}], user="bob",
            inputs=["/data/popular"])
    add_job(store, "p", [{"status": "failed", "nodes": ["n1"], "minutes": 9, "category": "incorrect_input"}],
            inputs=["/data/popular", "/home/alice/own.rec"])
    a = diagnose_job(store, "p", classify=FakeClassifier(), model=model, write=False).attempts[0]
    assert a.context["input_cofailures"] is None
    assert a.origin.origin == "data"


@pytest.mark.slow
def test_a_deterministic_failure_on_a_bad_node_is_not_the_node(store: Store, model) -> None:
    """XIDs while a semantic error happened: the job ran on a bad node, the node did not make the
    error. The node's state is left out of the evidence (and said so); a CUDA error keeps it."""
    add_job(store, "sem", [{"status": "failed", "nodes": ["node-bad"], "minutes": 30,
                            "category": "semantic_error"}], user="a")
    add_job(store, "cu", [{"status": "failed", "nodes": ["node-bad"], "minutes": 30,
                           "category": "cuda_error"}], user="b")
    add_xids(store, [("node-bad", 25, 79), ("node-bad", 28, 48)])
    diagnose_all(store, classify=FakeClassifier(), model=model)
    sem = diagnose_job(store, "sem", classify=FakeClassifier(), model=model, write=False).attempts[0]
    assert sem.context["node_health"] is None and sem.context["node_cofailures"] is None
    assert any(n.startswith("not counted: node_health, node_cofailures") for n in sem.notes)
    assert any("XID 79" in n for n in sem.notes)
    assert sem.origin.origin == "user"
    cu = diagnose_job(store, "cu", classify=FakeClassifier(), model=model, write=False).attempts[0]
    assert cu.context["node_health"] == "xid_or_ecc"
    assert cu.context["node_cofailures"] == "none"  # a semantic error is no node co-failure either


@pytest.mark.slow
def test_the_logs_clue_reaches_the_network(store: Store, model) -> None:
    add_job(store, "c", [{"status": "failed", "nodes": ["n1"], "minutes": 9, "category": "crash",
                          "extra": ["CLUE: framework_internal"]}])
    a = diagnose_job(store, "c", classify=FakeClassifier(), model=model).attempts[0]
    assert a.context["clue"] == "framework_internal"
    assert a.origin.origin == "framework"
    assert json.loads(failure_rows(store)[("c", 0)]["origin_evidence"])["clue"] == "framework_internal"


@pytest.mark.slow
def test_multi_node_and_missing_log(store: Store, model) -> None:
    add_job(store, "mn", [{"status": "failed", "nodes": ["a", "b"], "minutes": 50, "category": None,
                           "exit_code": 137}])
    clf = FakeClassifier()
    a = diagnose_job(store, "mn", classify=clf, model=model).attempts[0]
    assert clf.calls == []  # no log recorded: nothing to classify
    assert a.category == "unknown"
    assert a.diagnosis.reason and "no log" in a.diagnosis.reason
    assert a.context["category"] is None  # unobserved, not 'unknown'
    assert a.context["multi_node"] == "multi"
    assert a.context["exit"] == "sigkill"
    assert "category" not in a.origin.evidence


@pytest.mark.slow
def test_manual_labels_are_kept_and_batch_is_idempotent(store: Store, model) -> None:
    add_job(store, "a", [{"status": "failed", "nodes": ["n1"], "minutes": 5, "category": "gpu_oom"}])
    add_job(store, "b", [{"status": "failed", "nodes": ["n2"], "minutes": 5, "category": "gpu_oom"}])
    add_job(store, "ok", [{"status": "passed", "nodes": ["n3"], "minutes": 5}])
    with store.write() as con:
        con.execute("INSERT INTO failures (job_id, attempt, category, origin, method) "
                    "VALUES ('b', 0, 'semantic_error', 'user', 'manual')")
    assert diagnose_all(store, classify=FakeClassifier(), model=model) == 1
    assert diagnose_all(store, classify=FakeClassifier(), model=model) == 1
    rows = failure_rows(store)
    assert set(rows) == {("a", 0), ("b", 0)}
    assert rows[("b", 0)]["method"] == "manual"
    assert rows[("a", 0)]["category"] == "gpu_oom"


@pytest.mark.slow
def test_progress_and_format(store: Store, model) -> None:
    add_job(store, "a", [{"status": "failed", "nodes": ["n1"], "minutes": 2, "category": "syntax_error"}])
    seen: list[tuple[str, int, int]] = []
    diagnose_all(store, classify=FakeClassifier(), model=model, progress=lambda s, d, t: seen.append((s, d, t)))
    assert seen == [("classify", 1, 1), ("origin", 1, 1)]
    jd = diagnose_job(store, "a", classify=FakeClassifier(), model=model)
    text = "\n".join(format_job(jd))
    assert "syntax_error" in text and "origin user" in text
    assert jd.to_dict()["attempts"][0]["context"]["stage"] == "startup"


def test_unknown_job_is_an_input_error(store: Store) -> None:
    with pytest.raises(InputError, match="nope"):
        diagnose_job(store, "nope", classify=FakeClassifier())


@pytest.mark.slow
def test_labeled_history_from_operator_labels_refits_the_model(store: Store) -> None:
    require_module("pgmpy")
    add_job(store, "s1", [
        {"status": "failed", "nodes": ["n1"], "minutes": 200, "category": "crash"},
        {"status": "passed", "nodes": ["n2"], "start": 300},
    ])
    with store.write() as con:
        con.execute("INSERT INTO failures (job_id, attempt, category, origin, method) "
                    "VALUES ('s1', 0, 'gpu_hardware', 'infrastructure', 'manual')")
    hist = labeled_history(store)
    assert len(hist) == 1
    row = hist.iloc[0]
    assert row["origin"] == "infrastructure" and row["category"] == "gpu_hardware"
    assert row["retry"] == "succeeded_on_retry"
    m = model_for_store(store)
    assert m.source.startswith("synthetic+store(1")


@pytest.mark.slow
def test_simulator_truth_is_never_training_data(store: Store) -> None:
    """sim_truth is the answer key of the evaluations: fitting on it would make them in-sample."""
    require_module("pgmpy")
    add_job(store, "s1", [{"status": "failed", "nodes": ["n1"], "minutes": 200, "category": "crash"}])
    with store.write() as con:
        con.execute("CREATE TABLE IF NOT EXISTS sim_truth (job_id VARCHAR, attempt INTEGER, "
                    "category VARCHAR, origin VARCHAR, node_fault BOOLEAN)")
        con.execute("INSERT INTO sim_truth (job_id, attempt, category, origin, node_fault) "
                    "VALUES ('s1', 0, 'gpu_hardware', 'infrastructure', true)")
    assert labeled_history(store).empty
    assert not model_for_store(store).source.startswith("synthetic+store")


@pytest.mark.slow
def test_real_classifier_default(store: Store, model) -> None:
    """classify defaults to gpulens.diagnosis.classify_file (imported lazily)."""
    require_module("sklearn")
    add_job(store, "r", [{"status": "failed", "nodes": ["n1"], "minutes": 1, "category": "x"}])
    log = store.logs / "r-0.log"
    log.write_text(
        "Traceback (most recent call last):\n"
        '  File "/home/alice/train.py", line 3, in <module>\n'
        "    import torchvisionn\n"
        "ModuleNotFoundError: No module named 'torchvisionn'\n"
    )
    jd = diagnose_job(store, "r", model=model)
    assert jd.attempts[0].category == "import_error"
    assert jd.attempts[0].origin.origin == "user"
