"""`make bench`: run every benchmarks/bench_*.py (or those named on the command line).

Each module exposes ``main(argv: list[str]) -> None`` and prints its own results;
record them in benchmarks/RESULTS.md with the machine, the date and the command.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
import time
from pathlib import Path

import gpulens


def main(argv: list[str]) -> int:
    names = sorted(
        m.name for m in pkgutil.iter_modules([str(Path(__file__).parent)]) if m.name.startswith("bench_")
    )
    wanted = [a for a in argv if not a.startswith("-")]
    if wanted:
        names = [n for n in names if any(w in n for w in wanted)]
    # which checkout's code runs: ``python -m`` puts the working directory first on sys.path, so a side-by-side run
    # of another checkout (PYTHONPATH=<checkout>) must also be started from inside it
    print(f"=== gpulens from {Path(gpulens.__file__).resolve().parent.parent}", flush=True)
    for name in names:
        print(f"=== {name}", flush=True)
        t0 = time.perf_counter()
        importlib.import_module(f"benchmarks.{name}").main([a for a in argv if a.startswith("-")])
        print(f"=== {name} done in {time.perf_counter() - t0:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
