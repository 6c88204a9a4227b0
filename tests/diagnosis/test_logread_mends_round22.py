"""Round 22 mends of the logread split (review42): each name imported from the module that owns it,
phase modules below completion, one meaning per name."""
from __future__ import annotations

import ast

from tests.diagnosis.logread_structure import LOGREAD as _LOGREAD
from tests.diagnosis.logread_structure import module_file


def _imported_modules(stem: str) -> set[str]:
    """The logread modules a module imports (top level and inside functions)."""
    tree = ast.parse(module_file(stem).read_text())
    froms = [n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module
             and n.module.startswith("gpulens.diagnosis.logread")]
    return {n.module.rsplit(".", 1)[-1] for n in froms} | {a.name for n in froms for a in n.names}


def test_phase_modules_do_not_import_completion() -> None:
    phase = [f"phase.{p.stem}" for p in (_LOGREAD / "phase").glob("*.py")]
    assert phase and all("completion" not in _imported_modules(m) for m in phase), phase


def test_printed_before_lives_with_the_step_lines() -> None:
    from gpulens.diagnosis.logread import steplines
    from gpulens.diagnosis.logread.end import completion

    assert "printed_before" in steplines.__all__ and "printed_before" not in completion.__all__
    log = ["epoch 1 acc 0.5", "step 9", "epoch 2 acc 0.6", "step 19"]
    assert steplines.printed_before(log, 0, 3, "epoch 3 acc 0.7")  # same shape, numbers masked
    assert not steplines.printed_before(log, 0, 3, "final test acc 0.7")
    assert not steplines.printed_before(log, 0, 3, "123")  # nothing but numbers: no key to look for


def test_renamed_modules_and_one_meaning_for_went_on() -> None:
    from gpulens.diagnosis.logread.end import after_error
    from gpulens.diagnosis.logread.indicators import aftermath

    for old, new in (("signal_ends", "handler_stops"), ("phase_runs", "phase.program"), ("goes_on", "after_error")):
        assert not list(_LOGREAD.rglob(f"{old}.py")) and module_file(new).is_file()
    assert "went_on" in after_error.__all__ and "went_on" not in aftermath.__all__
    # a caught error, ordinary output after it, then a kill (the kill ended the run, not the error)
    log = ["ValueError: bad row 3", *[f"epoch 1 step {k} loss 0.4" for k in range(12)],
           "slurmstepd: error: *** JOB 7 ON node3 CANCELLED AT 2025-03-01T10:00:00 DUE TO TIME LIMIT ***"]
    norm = [ln.strip() for ln in log]
    assert aftermath.killed_after_going_on(log, 0, [0, len(log) - 1], norm.__getitem__, lambda i: True)


def test_no_late_imports_where_no_cycle_needs_one() -> None:
    for stem in ("attempts", "whole"):
        tree = ast.parse(module_file(stem).read_text())
        late = [n.lineno for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)
                for n in ast.walk(f) if isinstance(n, ast.Import | ast.ImportFrom)]
        assert late == [], (stem, late)


def test_spawn_read_defined_once_and_evaluate_exports_what_scripts_use() -> None:
    from gpulens.diagnosis.logread import evaluate
    from gpulens.diagnosis.logread.cause import earlier
    from gpulens.diagnosis.logread.indicators import origins

    assert earlier.SPAWN_READ is origins.SPAWN_READ == "original_trace = pickle.load("  # torch/multiprocessing/spawn.py
    assert {"figures", "macro_f1", "choose_thresholds", "reliability"} <= set(evaluate.__all__)
    assert evaluate.macro_f1([("oom", "oom"), ("nccl", "oom")]) == 1 / 3


def test_public_constants_are_in_all() -> None:
    from gpulens.diagnosis.logread import ranks
    from gpulens.diagnosis.logread.end import run_end

    assert {"EARLIER_COMPLETION", "GOING_ON", "WEAK_AFTER_FAILURE"} <= set(run_end.__all__)
    assert {"PALS_DIED", "PALS_EXITED"} <= set(ranks.__all__)
