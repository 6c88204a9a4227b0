"""Reading whole job logs: exact line numbers in bounded memory, healthy or failed, the
failure-indicating lines, ranks and nodes, phases and steps, appended attempts."""

from __future__ import annotations

from gpulens.diagnosis.logread.whole import (
    WholeDiagnosis,
    diagnose_file,
    diagnose_path,
    diagnose_source,
    diagnose_text,
)

__all__ = ["WholeDiagnosis", "diagnose_file", "diagnose_path", "diagnose_source", "diagnose_text"]
