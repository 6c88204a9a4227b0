"""Origin network: learning time and inference per job in batch (target <= 5 ms/job).

A "job" here is one failed attempt's full query: the posterior over origins
plus the influence of every observed evidence variable (one extra query per
variable), as diagnose_all computes it. Engines compared side by side:

* numpy  - exact variable elimination as one einsum per query (bn_adapter), no memo
* memo   - the same with the evidence-keyed memo diagnose_all uses in batch
* pgmpy  - pgmpy's VariableElimination, timed per query and scaled to the same
           number of queries per job

Then diagnose_all end to end on a simulated store (classification included).

Options: --jobs N (default 3000), --pgmpy-jobs N (default 150), --no-e2e.
"""

from __future__ import annotations

import argparse
import tempfile
import time

__all__ = ["main"]


def _rows(n: int, seed: int) -> list[dict[str, str | None]]:
    from gpulens.diagnosis.origin import EVIDENCE_VARIABLES, synthetic_history

    frame = synthetic_history(n, seed=seed)
    return [{v: r[v] for v in EVIDENCE_VARIABLES} for r in frame.to_dict("records")]


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(prog="bench_origin")
    ap.add_argument("--jobs", type=int, default=3000)
    ap.add_argument("--pgmpy-jobs", type=int, default=150)
    ap.add_argument("--no-e2e", action="store_true")
    args = ap.parse_args(argv)

    t = time.perf_counter()
    from gpulens.diagnosis.bn_adapter import _pgmpy

    _pgmpy()
    t_import = time.perf_counter() - t
    from gpulens.diagnosis.origin import OriginModel, synthetic_history

    t = time.perf_counter()
    hist = synthetic_history(20_000, seed=0)
    t_gen = time.perf_counter() - t
    t = time.perf_counter()
    model = OriginModel.learn(hist, equivalent_sample_size=10.0)
    t_fit = time.perf_counter() - t
    print(f"pgmpy import {t_import:.2f} s; history 20k rows {t_gen:.2f} s; BDeu fit {t_fit:.2f} s")

    jobs = _rows(args.jobs, seed=42)
    n_ev = sum(sum(v is not None for v in j.values()) for j in jobs) / len(jobs)
    print(f"{len(jobs)} jobs, {n_ev:.1f} observed evidence variables per job on average")

    net = model.net
    t = time.perf_counter()
    for j in jobs:
        net._memo.clear()
        model.infer(j)
    numpy_ms = (time.perf_counter() - t) / len(jobs) * 1e3

    net._memo.clear()
    t = time.perf_counter()
    for j in jobs:
        model.infer(j)
    memo_ms = (time.perf_counter() - t) / len(jobs) * 1e3
    distinct = len({tuple(sorted((k, v) for k, v in j.items() if v is not None)) for j in jobs})

    sub = jobs[: args.pgmpy_jobs]
    clean = [model.clean_evidence(j) for j in sub]
    net.to_pgmpy()
    from pgmpy.inference import VariableElimination

    engine = VariableElimination(net.to_pgmpy())
    t = time.perf_counter()
    for ev in clean:
        engine.query(["origin"], evidence=ev, show_progress=False)
    pg_query_ms = (time.perf_counter() - t) / len(clean) * 1e3
    # the same work per job as ours: one query, plus one per observed evidence
    # variable that is not a leaf hanging off the origin (those are divided out)
    shortcut = {v for v in net.states if net.parents[v] == ["origin"] and not net.children(v)}
    queries = sum(1 + sum(1 for v in ev if v not in shortcut) for ev in (model.clean_evidence(j) for j in jobs))
    pg_job_ms = pg_query_ms * queries / len(jobs)

    print(f"{'engine':<8} {'ms/job':>9} {'vs numpy':>9}")
    print(f"{'numpy':<8} {numpy_ms:>9.3f} {1.0:>9.2f}")
    print(f"{'memo':<8} {memo_ms:>9.3f} {memo_ms / numpy_ms:>9.2f}   ({distinct} distinct evidence sets)")
    print(f"{'pgmpy':<8} {pg_job_ms:>9.3f} {pg_job_ms / numpy_ms:>9.2f}   ({pg_query_ms:.3f} ms per query)")
    print(f"target <= 5 ms/job in batch: {'PASS' if memo_ms <= 5 and numpy_ms <= 5 else 'FAIL'}")

    if args.no_e2e:
        return
    from gpulens.diagnosis.jobs import diagnose_all
    from gpulens.ingest.simulate import simulate
    from gpulens.store import Store

    with tempfile.TemporaryDirectory() as tmp:
        store = Store.open(tmp)
        summary = simulate(store, gpus=128, days=3, seed=7)
        stages: dict[str, float] = {}
        t0 = time.perf_counter()

        def progress(stage: str, done: int, total: int) -> None:
            stages[stage] = time.perf_counter() - t0

        n = diagnose_all(store, model=model, progress=progress)
        total = time.perf_counter() - t0
        t_classify = stages.get("classify", 0.0)
        t_origin = stages.get("origin", total) - t_classify
        print(
            f"diagnose_all on a simulated store (128 GPUs, 3 days, {summary.jobs} jobs): "
            f"{n} failed attempts in {total:.2f} s; context + classification {t_classify:.2f} s, "
            f"BN {t_origin / max(n, 1) * 1e3:.2f} ms/attempt, write {total - stages.get('origin', total):.2f} s"
        )
