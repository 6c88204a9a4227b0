"""`gpulens import kubernetes` on kubectl JSON fixtures that follow the Pod/Event API schema.

tests/fixtures/kubernetes/pods.json is `kubectl get pods -A -o json` output for six
pods (a restart after OOMKilled, Error exit 1, an eviction, activeDeadlineSeconds,
a CrashLoopBackOff with exit 139 and a sidecar, a CPU-only pod); events.json is
`kubectl get events -A -o json` (a node OOM kill, an eviction, an event of a pod
no longer listed).
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest

from gpulens.errors import InputError
from gpulens.ingest.importers.kubernetes import category_of, import_kubernetes
from gpulens.ingest.importers.reconcile import merge_observed, reconcile_placements
from gpulens.store import Store
from gpulens.vocab import CATEGORIES, DEFAULT_ORIGIN, JOB_STATUSES

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "kubernetes"
PODS, EVENTS = FIX / "pods.json", FIX / "events.json"


def _q(store: Store, sql: str, *params: object) -> list[tuple[object, ...]]:
    con = store.connect()
    try:
        return [tuple(r) for r in con.execute(sql, list(params)).fetchall()]
    finally:
        con.close()


@pytest.mark.slow
def test_pods_become_jobs_attempts_and_failures(store: Store) -> None:
    res = import_kubernetes(store, [PODS, EVENTS])
    pods = json.loads(PODS.read_text())["items"]
    assert res.rows["pods"] == len(pods) == 6
    jobs = dict((str(r[0]), r[1:]) for r in _q(store, "SELECT job_id, status, requested_gpus, vc, name, source FROM jobs"))
    assert jobs["ml/train-resnet-0"] == ("passed", 4, "ml", "train-resnet", "kubernetes")
    assert jobs["ml/bert-finetune-1"][0:2] == ("failed", 2)
    assert jobs["ml/sweep-3"][0] == "killed"  # Evicted
    assert jobs["batch/nightly-eval-29410"][0] == "killed"  # DeadlineExceeded
    assert jobs["ml/crashy-0"][0:2] == ("running", 1)  # the sidecar asks for no GPU
    assert jobs["kube-system/coredns-5d78c9869d-x7kqp"][1] is None
    assert {j[0] for j in jobs.values()} <= set(JOB_STATUSES)

    atts = _q(store, "SELECT job_id, attempt, start_time, end_time, status, exit_code FROM attempts"
                     " WHERE job_id = 'ml/train-resnet-0' ORDER BY attempt")
    assert atts == [("ml/train-resnet-0", 0, datetime(2026, 1, 5, 6), datetime(2026, 1, 5, 9), "failed", 137),
                    ("ml/train-resnet-0", 1, datetime(2026, 1, 5, 9, 0, 30), datetime(2026, 1, 5, 18), "passed", 0)]
    # restartCount 3: two restarts without details, lastState, no current attempt (waiting)
    crashy = _q(store, "SELECT attempt, status, exit_code FROM attempts WHERE job_id = 'ml/crashy-0' ORDER BY 1")
    assert crashy == [(0, "failed", None), (1, "failed", None), (2, "failed", 139)]
    assert res.quirks[f"{PODS}, {EVENTS}"]["restarts_without_detail"] == 2

    fails = {(str(r[0]), int(r[1])): (r[2], r[3], r[4]) for r in
             _q(store, "SELECT job_id, attempt, category, origin, method FROM failures")}
    assert fails == {
        ("ml/train-resnet-0", 0): ("cpu_oom", "user", "kubernetes"),          # OOMKilled
        ("ml/bert-finetune-1", 0): ("cpu_oom", "user", "kubernetes"),         # Error 1 + OOMKilling event
        ("ml/sweep-3", 0): ("preempted", "infrastructure", "kubernetes"),     # Evicted
        ("batch/nightly-eval-29410", 0): ("preempted", "infrastructure", "kubernetes"),  # deadline
        ("ml/crashy-0", 2): ("crash", "framework", "kubernetes"),             # exit 139
    }
    # GPU indices are assumed until exporter labels say which GPUs the pod had
    pls = _q(store, "SELECT attempt, node, gpu_index FROM placements WHERE job_id = 'ml/train-resnet-0'"
                    " ORDER BY 1, 3")
    assert pls == [(a, "gpu-a", g) for a in (0, 1) for g in range(4)]


def test_category_mapping_uses_the_vocabulary() -> None:
    for reason in ("OOMKilled", "Evicted", "DeadlineExceeded", "Preempting", "StartError"):
        cat, _ = category_of(reason, None)
        assert cat in CATEGORIES and cat in DEFAULT_ORIGIN
    assert category_of("Error", 139)[0] == "crash"
    assert category_of("Error", 143)[0] == "preempted"
    assert category_of("Error", 1)[0] == "unknown"


@pytest.mark.slow
def test_reimport_is_idempotent_and_keeps_log_diagnoses(store: Store) -> None:
    import_kubernetes(store, [PODS])
    with store.write() as con:
        con.execute("UPDATE failures SET category = 'gpu_oom', method = 'rule'"
                    " WHERE job_id = 'ml/train-resnet-0' AND attempt = 0")
    res = import_kubernetes(store, [PODS, EVENTS])
    assert res.quirks[f"{PODS}, {EVENTS}"]["failures_kept_from_logs"] == 1
    assert _q(store, "SELECT count(*) FROM jobs") == [(6,)]
    assert _q(store, "SELECT count(*) FROM placements") == [(15,)]
    assert _q(store, "SELECT category, method FROM failures WHERE job_id = 'ml/train-resnet-0'") == \
        [("gpu_oom", "rule")]


@pytest.mark.slow
def test_observed_gpus_replace_assumed_indices(store: Store) -> None:
    # dcgm-exporter's pod mapping saw ml/train-resnet-0 on gpu-a GPUs 4-7 during attempt 1
    seen = int(datetime(2026, 1, 5, 10).timestamp() * 1000)
    with store.write() as con:
        merge_observed(con, [("ml/train-resnet-0", "gpu-a", g, f"GPU-{g}", seen, seen + 3_600_000, "k8s-pod")
                             for g in range(4, 8)])
    res = import_kubernetes(store, [PODS])
    assert res.quirks[str(PODS)]["placements_reconciled"] == 4
    pls = _q(store, "SELECT attempt, gpu_index FROM placements WHERE job_id = 'ml/train-resnet-0' ORDER BY 1, 2")
    assert pls == [(0, 0), (0, 1), (0, 2), (0, 3), (1, 4), (1, 5), (1, 6), (1, 7)]
    with store.write() as con:
        assert reconcile_placements(con)["placements_reconciled"] == 4  # again: same rows, no duplicates
    assert _q(store, "SELECT count(*) FROM placements WHERE job_id = 'ml/train-resnet-0'") == [(8,)]


@pytest.mark.parametrize("text, needle", [
    ('{"items": [{"kind": "Pod", "metadata": {}}]}', "not a Pod"),
    ('{"items": [3]}', "not an object"),
    ('{"items": [', "pods.json"),
])
def test_bad_input_names_the_file(store: Store, tmp_path: Path, text: str, needle: str) -> None:
    bad = tmp_path / "pods.json"
    bad.write_text(text)
    with pytest.raises(InputError, match=needle):
        import_kubernetes(store, [bad])
    assert _q(store, "SELECT count(*) FROM jobs") == [(0,)]
    with pytest.raises(InputError, match="does not exist"):
        import_kubernetes(store, [tmp_path / "missing.json"])


def test_failure_cost_and_node_evidence_run_on_pods(store: Store) -> None:
    from gpulens.analysis.filters import Filters
    from gpulens.analysis.goodput import failure_cost
    from gpulens.diagnosis.nodes import node_evidence

    import_kubernetes(store, [PODS, EVENTS])
    con = store.connect()
    try:
        cost = failure_cost(con, Filters(now=datetime(2026, 1, 6)))
        nodes = node_evidence(con)
    finally:
        con.close()
    by = {r.category: r.failures for r in cost.itertuples()}
    assert (by["cpu_oom"], by["preempted"], by["crash"]) == (2, 2, 1)
    assert {t.node for t in nodes} >= {"gpu-a", "gpu-b"}
