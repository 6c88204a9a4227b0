"""Evaluate the live straggler detector on simulated jobs with planted faults (docs/straggler.md).

    PYTHONPATH=. python scripts/eval_straggler.py --seeds 0 1 2 --faulty 36 --healthy-hours 340 [--json]

Each seed builds ``--faulty`` jobs with one fault each (the seven kinds in turn) and healthy jobs
worth ``--healthy-hours`` with the normal asymmetries (gpulens/ingest/simulate/live.py), runs the
detector over every 5 s tick and prints precision and recall per (job, node), the onset-to-
detection latency and false alarms per 1,000 healthy job-hours, overall and per seed.
Simulated material written by the same people as the detector: it checks consistency, not truth.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from gpulens.diagnosis.straggler_eval import evaluate, outcome_from_json, outcome_to_json, summarize


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--faulty", type=int, default=36, help="faulty jobs per seed")
    ap.add_argument("--healthy-hours", type=float, default=340.0, help="healthy job-hours per seed")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--save", metavar="FILE", help="also write every job's outcome as JSON (for --merge)")
    ap.add_argument("--merge", metavar="FILE", nargs="+",
                    help="summarize outcomes saved by earlier runs (e.g. one process per seed) instead")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    per_seed = {}
    every = []
    if args.merge:
        loaded = [outcome_from_json(r) for f in args.merge for r in json.loads(Path(f).read_text())]
        args.seeds = sorted({int(o.job.job_id[1:].split("-")[0]) for o in loaded})
    for seed in args.seeds:
        out = ([o for o in loaded if int(o.job.job_id[1:].split("-")[0]) == seed] if args.merge
               else evaluate([seed], args.faulty, args.healthy_hours))
        every += out
        per_seed[seed] = summarize(out)
        print(f"seed {seed}: {json.dumps({k: v for k, v in per_seed[seed].items() if k != 'by_kind'})}",
              file=sys.stderr, flush=True)
    if args.save:
        Path(args.save).write_text(json.dumps([outcome_to_json(o) for o in every]))
    result = {"seeds": args.seeds, "overall": summarize(every), "per_seed": per_seed,
              "seconds": round(time.perf_counter() - t0, 1)}
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    o = result["overall"]
    print(f"faulty jobs {o['faulty_jobs']}, healthy jobs {o['healthy_jobs']} ({o['healthy_job_hours']} job-hours)")
    print(f"precision {o['precision']:.3f}  recall {o['recall']:.3f}  (TP {o['true_positives']}, "
          f"FN {o['false_negatives']}, FP pairs {o['false_positive_pairs']})")
    print(f"latency median {o['median_latency_s']:.0f} s, p90 {o['p90_latency_s']:.0f} s")
    print(f"false alarms {o['healthy_false_alarms']} = "
          f"{o['false_alarms_per_1000_healthy_job_hours']:.2f} per 1,000 healthy job-hours")
    for kind, k in o["by_kind"].items():
        lat = "-" if k["median_latency_s"] is None else f"{k['median_latency_s']:.0f} s"
        print(f"  {kind:<16} {k['found']:>3}/{k['cases']:<3} found, median latency {lat}, "
              f"false pairs {k['false_pairs']}")
    print(f"({result['seconds']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
