"""A tiny hand-built cluster for dashboard tests (used when the simulator is not available).

4 nodes x 4 GPUs, 2 vcs, 3 users, 10 jobs over 6 hours, per-minute GPU samples,
metric curves, diagnosed failures with log files, a blacklist, flagged nodes,
anomaly scores and validations. Deterministic.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import pyarrow as pa

from gpulens.diagnosis.logread import diagnose_path
from gpulens.store import Store, arrow_schema

__all__ = ["START", "build_small_store"]

START = datetime(2026, 11, 20, 0, 0)
HOURS = 6
NODES = ["node-a", "node-b", "node-c", "node-d"]
GPUS_PER_NODE = 4

# job_id, user, vc, status, [(node, gpu)], start offset (min), duration (min), util %
JOBS = [
    ("job-001", "alice", "vc-a", "passed", [("node-a", 0)], 0, 300, 85.0),
    ("job-002", "alice", "vc-a", "passed", [("node-a", 1), ("node-a", 2)], 10, 240, 75.0),
    ("job-003", "bob", "vc-b", "failed", [("node-b", 0)], 20, 60, 60.0),
    ("job-004", "bob", "vc-b", "passed", [("node-b", 1), ("node-c", 1)], 30, 200, 45.0),
    ("job-005", "carol", "vc-a", "killed", [("node-c", 0)], 40, 100, 30.0),
    ("job-006", "carol", "vc-b", "failed", [("node-d", 0), ("node-d", 1)], 200, 45, 50.0),
    ("job-007", "alice", "vc-a", "passed",
     [("node-a", 3), ("node-b", 3), ("node-c", 3), ("node-d", 3)], 60, 180, 40.0),
    ("job-008", "bob", "vc-b", "passed", [("node-b", 2), ("node-b", 0)], 120, 200, 80.0),
    ("job-009", "alice", "vc-b", "failed", [("node-c", 2)], 250, 30, 70.0),
    ("job-010", "carol", "vc-a", "passed", [("node-d", 2)], 150, 150, 90.0),
]

LOG_FAIL = """\
2026-11-20 00:20:01 INFO starting training
epoch 1 step 100 loss 2.31
epoch 1 step 200 loss 2.05
Traceback (most recent call last):
  File "train.py", line 88, in <module>
    main()
  File "train.py", line 80, in main
    out = model(batch)
RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 24.00 GiB total capacity)
"""

LOG_INPUT = """\
2026-11-20 03:20:00 INFO loading /data/shared/imagenet-bad/train-00017.tar
Traceback (most recent call last):
  File "train.py", line 40, in <module>
    ds = load("/data/shared/imagenet-bad/train-00017.tar")
OSError: image file is truncated (/data/shared/imagenet-bad/train-00017.tar)
"""


def _ts(minute: int) -> datetime:
    return START + timedelta(minutes=minute)


def _table(kind: str, cols: dict[str, list[object]]) -> pa.Table:
    """Columns of the kind's schema; columns not given (added later to samples.py) are NULL."""
    schema = arrow_schema(kind)
    n = max(len(v) for v in cols.values())
    return pa.table({f.name: cols.get(f.name) or [None] * n for f in schema}, schema=schema)


def build_small_store(store: Store) -> None:
    """Fill ``store`` with the tiny cluster described in the module docstring."""
    logs = store.logs
    logs.mkdir(parents=True, exist_ok=True)
    (logs / "job-003-0.log").write_text(("progress line\n" * 200) + LOG_FAIL)
    (logs / "job-006-0.log").write_text(LOG_INPUT)
    (logs / "job-006-1.log").write_text(LOG_INPUT)
    (logs / "job-009-0.log").write_text(LOG_FAIL)

    with store.write() as con:
        for node in NODES:
            con.execute(
                "INSERT INTO nodes (node, gpus, gpu_model, gpu_memory_bytes, source, first_seen, "
                "last_seen) VALUES (?, ?, 'Tesla P40', ?, 'test', ?, ?)",
                [node, GPUS_PER_NODE, 24 * 2**30, START, _ts(HOURS * 60)],
            )
            for g in range(GPUS_PER_NODE):
                con.execute(
                    "INSERT INTO gpus (node, gpu_index, uuid, model, memory_total_bytes, price_per_hour) "
                    "VALUES (?, ?, ?, 'Tesla P40', ?, 1.1)",
                    [node, g, f"GPU-{node}-{g}", 24 * 2**30],
                )
        for job_id, user, vc, status, gpus, off, dur, _util in JOBS:
            inputs = ["/data/shared/imagenet-bad"] if job_id == "job-006" else ["/data/ok"]
            con.execute(
                "INSERT INTO jobs (job_id, \"user\", vc, name, submitted, status, requested_gpus, "
                "inputs, framework, source) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'pytorch', 'test')",
                [job_id, user, vc, job_id, _ts(off), status, len(gpus), inputs],
            )
            attempts = [(0, off, dur, status)]
            if job_id == "job-006":  # retried once
                attempts = [(0, off, 20, "failed"), (1, off + 22, dur - 22, "failed")]
            for attempt, a_off, a_dur, a_status in attempts:
                log = f"logs/{job_id}-{attempt}.log" if a_status == "failed" else None
                con.execute(
                    "INSERT INTO attempts (job_id, attempt, start_time, end_time, status, exit_code, "
                    "signal, log_path) VALUES (?, ?, ?, ?, ?, ?, NULL, ?)",
                    [job_id, attempt, _ts(a_off), _ts(a_off + a_dur), a_status,
                     1 if a_status == "failed" else 0, log],
                )
                for node, g in gpus:
                    con.execute(
                        "INSERT INTO placements (job_id, attempt, node, gpu_index, start_time, end_time) "
                        "VALUES (?, ?, ?, ?, ?, ?)",
                        [job_id, attempt, node, g, _ts(a_off), _ts(a_off + a_dur)],
                    )
            if status == "passed":
                epochs = 12
                for e in range(1, epochs + 1):
                    acc = 0.9 * (1 - 0.5 ** e)
                    con.execute("INSERT INTO job_metrics (job_id, step, metric, value) VALUES (?, ?, 'accuracy', ?)",
                                [job_id, e, acc])
                    con.execute("INSERT INTO job_metrics (job_id, step, metric, value) VALUES (?, ?, 'loss', ?)",
                                [job_id, e, 2.0 * 0.6 ** e])
        failures = [
            ("job-003", 0, "gpu_oom", "user", ["RuntimeError: CUDA out of memory."]),
            ("job-006", 0, "incorrect_input", "data", ["OSError: image file is truncated"]),
            ("job-006", 1, "incorrect_input", "data", ["OSError: image file is truncated"]),
            ("job-009", 0, "gpu_oom", "user", ["RuntimeError: CUDA out of memory."]),
        ]
        for job_id, attempt, cat, origin, ev in failures:
            read = diagnose_path(logs / f"{job_id}-{attempt}.log").as_diagnosis()  # the whole-log reader's story
            con.execute(
                "INSERT INTO failures (job_id, attempt, category, origin, confidence, evidence, "
                "origin_posterior, method, diagnosed_at, indicator_lines, story) "
                "VALUES (?, ?, ?, ?, 0.9, ?, ?, 'rule', ?, ?, ?)",
                [job_id, attempt, cat, origin, ev, json.dumps({origin: 0.9}), _ts(HOURS * 60),
                 read.indicator_lines, read.story],
            )
        con.execute(
            "INSERT INTO blacklist (input, state, reason, evidence_jobs, updated_at) VALUES ("
            "'/data/shared/imagenet-bad', 'blacklisted', 'failed 2 jobs', ['job-006', 'job-009'], ?)",
            [_ts(300)],
        )
        con.execute(
            "INSERT INTO blacklist_audit (ts, input, old_state, new_state, actor, reason) "
            "VALUES (?, '/data/shared/imagenet-bad', NULL, 'blacklisted', 'auto', 'k=2')",
            [_ts(300)],
        )
        evidence = {
            "confidence": 0.9991,
            "rate": {"infra_failures_per_1000_node_hours": 250.0, "cluster_per_1000_node_hours": 4.0,
                     "blamed_jobs_per_job": 0.5, "cluster_blamed_jobs_per_job": 0.02,
                     "hardware_events_per_day": 12.0, "cluster_hardware_events_per_day": 0.1},
            "infra_failures": [{"job_id": "job-x", "attempt": 0, "category": "gpu_hardware",
                                "start": str(_ts(200)), "end": str(_ts(230)), "nodes": 2, "share": 1.0,
                                "why": "hardware signals during the attempt"}],
            "signals": [{"ts": str(_ts(229)), "kind": "xid", "detail": "XID 79 (fell off the bus) on GPU 3"}],
        }
        con.execute(
            "INSERT INTO node_flags (node, flagged_at, reason, evidence, score, active, confidence) "
            "VALUES ('node-d', ?, 'XID 79 twice', ?, 3.5, TRUE, 0.9991)",
            [_ts(240), json.dumps(evidence)],
        )
        for h in range(HOURS):
            for i, node in enumerate(NODES):
                score = 4.0 if (node == "node-d" and h >= 3) else 0.3 * i + 0.1 * h
                con.execute("INSERT INTO node_anomaly (node, hour, score) VALUES (?, ?, ?)",
                            [node, _ts(h * 60), score])
        validations = [
            ("alice", "pass", None, None),
            ("bob", "fail", "gpu_oom", "user"),
            ("bob", "fail", "syntax_error", "user"),
            ("carol", "pass", None, None),
            ("carol", "inconclusive", None, None),
        ]
        for i, (user, verdict, cat, origin) in enumerate(validations):
            con.execute(
                "INSERT INTO validations (ts, \"user\", command, verdict, category, origin, "
                "steps_completed, seconds, peak_memory_bytes, device, requested_gpus, gpu_type, "
                "evidence) VALUES (?, ?, 'python train.py', ?, ?, ?, 2, 10.0, 1000, 'cpu', 4, "
                "'V100', [])",
                [_ts(30 * i), user, verdict, cat, origin],
            )

    # per-minute GPU samples for every GPU
    busy: dict[tuple[str, int, int], float] = {}
    for _job, _u, _v, _s, gpus, off, dur, util in JOBS:
        for node, g in gpus:
            for m in range(off, min(off + dur, HOURS * 60)):
                busy[(node, g, m)] = util
    cols: dict[str, list[object]] = {name: [] for name in arrow_schema("gpu").names}
    for node in NODES:
        for g in range(GPUS_PER_NODE):
            for m in range(HOURS * 60):
                u = busy.get((node, g, m), 0.0)
                row = {
                    "ts": _ts(m), "node": node, "gpu_index": g, "uuid": f"GPU-{node}-{g}",
                    "model": "Tesla P40", "util_gpu": u, "util_mem": u / 2,
                    "mem_used_bytes": int(u * 2**28), "mem_total_bytes": 24 * 2**30,
                    "pcie_tx_bps": u * 1e6, "pcie_rx_bps": u * 2e6, "pcie_source": "counter",
                    "pcie_replay_total": 0, "power_w": 50 + 2 * u, "energy_j": float(m * 60),
                    "temp_c": 40 + u / 4, "sm_clock_mhz": 1300.0, "mem_clock_mhz": 3615.0,
                    "ecc_corrected_total": 0, "ecc_uncorrected_total": 0,
                    "row_remap_failures": 0, "nvlink_tx_bps": 0.0, "nvlink_rx_bps": 0.0,
                    "sm_active_ratio": u / 100, "tensor_active_ratio": u / 200,
                    "xid_count": 1 if (node == "node-d" and m in (200, 230)) else 0,
                }
                for k, v in row.items():
                    cols[k].append(v)
    store.write_samples("gpu", _table("gpu", cols))

    net: dict[str, list[object]] = {name: [] for name in arrow_schema("net").names}
    for node in NODES:
        for m in range(0, HOURS * 60, 5):
            errs = (m // 60) * (5 if node == "node-d" else 0)
            row = {
                "ts": _ts(m), "node": node, "device": "ib0", "link_kind": "infiniband",
                "rx_bytes_total": m * 10**6, "tx_bytes_total": m * 10**6,
                "rx_packets_total": m * 1000, "tx_packets_total": m * 1000,
                "rx_errors_total": errs, "tx_errors_total": 0, "rx_drops_total": 0,
                "tx_drops_total": 0, "rx_bps": 1e6, "tx_bps": 1e6, "link_speed_mbps": 100000,
                "symbol_errors_total": errs, "link_downed_total": 0,
            }
            for k, v in row.items():
                net[k].append(v)
    store.write_samples("net", _table("net", net))
    xid = {
        "ts": [_ts(200), _ts(230)], "node": ["node-d", "node-d"], "gpu_index": [1, 1],
        "uuid": ["GPU-node-d-1"] * 2, "xid": [79, 79],
    }
    store.write_samples("xid", _table("xid", xid))
