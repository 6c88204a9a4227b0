"""Fit the calibration table of whole-log confidences on the holdout logs (issue 23, item 3).

Diagnoses every indexed whole log found under the corpus root exactly as the evaluation does (each dev
log with its fold's model, confidences as the reader states them) and writes the table of
``gpulens.diagnosis.logread.calibration`` fitted on the holdout logs' named answers::

    GPULENS_WHOLE_LOGS=/path/to/whole .venv/bin/python -m scripts.fit_whole_calibration [--out PATH]

Prints one line: where it wrote the table and what it was fitted on; a missing corpus is one line and exit 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from gpulens.diagnosis.logread.calibration import TABLE
from gpulens.diagnosis.logread.evaluate import INDEX_DIR, calibration_table, evaluate_whole
from gpulens.errors import GpulensError


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=os.environ.get("GPULENS_WHOLE_LOGS", ""), help="corpus root (GPULENS_WHOLE_LOGS)")
    ap.add_argument("--out", type=Path, default=TABLE, help="where to write the table (default: the shipped one)")
    ap.add_argument("--index-dir", type=Path, default=INDEX_DIR, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    try:
        ev = evaluate_whole(args.root or "/nonexistent", index_dir=args.index_dir)
    except GpulensError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    table = calibration_table(ev.cases, ev.thresholds)
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(table.to_json(), encoding="utf-8")
    tmp.replace(args.out)
    print(f"wrote {args.out}: fitted on {table.fitted_on}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
