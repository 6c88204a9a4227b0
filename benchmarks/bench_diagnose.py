"""Log classification throughput on typical 500-line logs, one core.

    make bench BENCH=diagnose      (or: .venv/bin/python -m benchmarks.run diagnose)

Builds 500-line logs from every sample_logs/ entry (progress bars, warnings and
INFO lines padded before the real failure), writes them to a temp dir, then times
``classify_file`` (reading included) in this one process, after the SVM is loaded.
Target: >= 200 logs/s.
"""

from __future__ import annotations

import os
import random
import tempfile
import time
from pathlib import Path

__all__ = ["main"]


def _pad(text: str, rnd: random.Random, total: int = 500) -> str:
    lines = text.splitlines()
    filler = []
    for i in range(max(0, total - len(lines))):
        r = rnd.random()
        if r < 0.5:
            filler.append(f"Epoch {i // 100}: {i % 100:3d}%|#####     | {i * 7}/50000 [00:{i % 60:02d}<01:00, 9.{i % 10}it/s, loss={rnd.uniform(0.2, 3):.3f}]")
        elif r < 0.9:
            filler.append(f"2024-05-01 10:{i % 60:02d}:{i % 60:02d},123 INFO train: step {i * 10} loss {rnd.uniform(0.2, 3):.4f} lr 3e-4 grad_norm {rnd.uniform(0.1, 4):.2f}")
        else:
            filler.append("/opt/conda/lib/python3.10/site-packages/torch/utils/data/dataloader.py:557: UserWarning: This DataLoader will create 16 worker processes in total.")
    return "\n".join(filler + lines) + "\n"


def main(argv: list[str]) -> None:
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})  # one core
    from diagnosis.classifier import CORPUS_DIR, Classifier, load_corpus

    entries = load_corpus(CORPUS_DIR)
    rnd = random.Random(0)
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for i, e in enumerate(entries):
            p = Path(tmp) / f"{i:04d}.log"
            p.write_text(_pad((CORPUS_DIR / e.file).read_text(errors="replace"), rnd))
            paths.append(p)
        lines = sum(p.read_text().count("\n") for p in paths) / len(paths)
        full = Classifier(cache_dir=Path(tmp) / "models")
        t0 = time.perf_counter()
        _ = full.model
        train_s = time.perf_counter() - t0
        rules = Classifier(model=None, cache_dir=None)
        reps = 3
        print(f"{len(paths)} logs, {lines:.0f} lines on average; SVM trained in {train_s:.2f} s")
        results = {}
        for name, clf in (("rules only", rules), ("rules + SVM", full)):
            for p in paths[:5]:
                clf.classify_file(p)  # warm caches
            t0 = time.perf_counter()
            methods: dict[str, int] = {}
            for _ in range(reps):
                for p in paths:
                    d = clf.classify_file(p)
                    methods[d.method] = methods.get(d.method, 0) + 1
            dt = time.perf_counter() - t0
            rate = reps * len(paths) / dt
            results[name] = rate
            print(f"{name:12s}: {rate:8.1f} logs/s ({1000 / rate:.2f} ms/log) methods={methods}")
        print(f"ratio rules+SVM / rules-only throughput: {results['rules + SVM'] / results['rules only']:.2f}")
        print(f"target >= 200 logs/s: {'PASS' if results['rules + SVM'] >= 200 else 'FAIL'}")
