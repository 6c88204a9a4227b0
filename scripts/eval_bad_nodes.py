"""Bad-node flags and origin accuracy on simulated clusters (docs/diagnosis.md, issue 17).

For each cluster: ``simulate`` into a fresh data directory, ``diagnose --all``
(exactly as the CLI does), then ``nodes flag``; it prints one JSON line per cluster
with the planted and flagged nodes, recall, precision and the origin accuracy
against ``sim_truth``. The network never sees ``sim_truth`` (it learns from the
synthetic history and operator labels only), so the accuracy is out of sample.

    .venv/bin/python -m scripts.eval_bad_nodes --root /tmp/eval               # the four of the issue
    .venv/bin/python -m scripts.eval_bad_nodes --root /tmp/eval --cluster 64x2:0
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from gpulens.config import DiagnoseConfig
from gpulens.diagnosis import nodes as nd
from gpulens.diagnosis.jobs import diagnose_all
from gpulens.ingest.simulate import simulate
from gpulens.store import Store

DEFAULT_CLUSTERS = ("256x7:1", "256x7:2", "256x7:3", "1024x7:1")


def origin_accuracy(store: Store) -> tuple[float, int, dict[str, Any]]:
    """Share of diagnosed failed attempts whose origin equals sim_truth's, and the confusions."""
    con = store.connect()
    try:
        rows = con.execute(
            "SELECT t.origin AS truth, f.origin AS got, count(*) AS n FROM sim_truth t "
            "JOIN failures f USING (job_id, attempt) GROUP BY ALL ORDER BY n DESC"
        ).fetchall()
    finally:
        con.close()
    total = sum(r[2] for r in rows)
    right = sum(r[2] for r in rows if r[0] == r[1])
    wrong = {f"{t}->{g}": n for t, g, n in rows if t != g}
    return (right / total if total else 1.0), total, wrong


def evaluate(root: Path, gpus: int, days: float, seed: int) -> dict[str, Any]:
    store = Store.open(root / f"g{gpus}-d{days:g}-s{seed}")
    t0 = time.perf_counter()
    summary = simulate(store, gpus=gpus, days=days, seed=seed, force=True)
    t_sim = time.perf_counter() - t0
    cfg = DiagnoseConfig()
    t1 = time.perf_counter()
    diagnose_all(store, config=cfg)  # the CLI's `diagnose --all`
    t_diag = time.perf_counter() - t1
    acc, n, wrong = origin_accuracy(store)
    t2 = time.perf_counter()
    nd.flag_nodes(store, config=cfg)
    t_flag = time.perf_counter() - t2
    con = store.connect()
    try:
        flagged = nd.flagged_nodes(con)
        tests = nd.node_evidence(con, cfg)
    finally:
        con.close()
    planted = set(summary.bad_nodes)
    healthy_q = min((t.q_value for t in tests if t.node not in planted), default=1.0)
    got = set(flagged["node"])
    return {
        "cluster": f"{gpus} GPUs x {days:g} days, seed {seed}",
        "nodes": summary.nodes,
        "failed_attempts": n,
        "planted": sorted(planted),
        "flagged": sorted(got),
        "recall": len(planted & got) / len(planted) if planted else 1.0,
        "precision": len(planted & got) / len(got) if got else 1.0,
        "origin_accuracy": round(acc, 4),
        "origin_confusions": wrong,
        "confidence": {r["node"]: round(float(r["confidence"]), 4) for r in flagged.to_dict("records")},
        "planted_max_q": max((t.q_value for t in tests if t.node in planted), default=None),
        "healthy_min_q": healthy_q,
        "seconds": {"simulate": round(t_sim, 1), "diagnose_all": round(t_diag, 1), "flag": round(t_flag, 1)},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, required=True, help="Directory for the data directories.")
    ap.add_argument("--cluster", action="append", default=None,
                    help="GPUSxDAYS:SEED, repeatable (default: the four of the issue).")
    args = ap.parse_args(argv)
    ok = True
    for spec in args.cluster or DEFAULT_CLUSTERS:
        size, seed = spec.split(":")
        gpus, days = size.split("x")
        res = evaluate(args.root, int(gpus), float(days), int(seed))
        print(json.dumps(res), flush=True)
        ok &= res["recall"] == 1.0 and res["precision"] >= 0.9 and res["origin_accuracy"] >= 0.95
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
