"""A pipeline's numbered stage headers ("STAGE 1: Pre-training", "PHASE 4: Attention Analysis", "Step 3: Evaluation").

One reading of them for the phase: a header that names training starts a new loop (:mod:`.loops`), one that names an
evaluation and no training starts the stage after the training (:mod:`.evaluation`).
"""

from __future__ import annotations

import re

from gpulens.diagnosis import logs
from gpulens.diagnosis.logread import ranks
from gpulens.diagnosis.logread.steplines import HEAD, on_screen, plain

__all__ = ["STAGE_KEYS", "stage_title", "stage_trains"]


#: A pipeline's numbered stage header, alone on its line or after a logger's level field ("PHASE 4: Attention Analysis",
#: "Step 3: Evaluation Metrics — 30% Subset (467 projects)", "... | INFO | STAGE 3: Model Evaluation"): a title in
#: words, no setting's value or metric in it (not "Step 300: loss=2.31", not "Step 2: val_acc 0.81").
_STAGE_HEADER = re.compile(r"(?:^|\|\s|\]\s|-\s)\W{0,4}(?:STAGE|Stage|PHASE|Phase|STEP|Step)\s*\d{1,2}\s*[:.)-]\s*"
                           r"([A-Z][^:=|\d]*(?:\d+%?[^:=|\d.][^:=|\d]*)*)$")
#: The words a stage header starts with (a line without one is no header).
STAGE_KEYS = ("STAGE", "Stage", "PHASE", "Phase", "STEP", "Step")
#: A stage that trains, on its title ("Stage 1: Training", "PHASE 2: Next-Token Prediction Training",
#: "Stage 2: Evaluation-driven fine-tuning", "Stage 2: Transfer Learning").
_STAGE_TRAINS = re.compile(r"(?i)train|fine-?tun|learn|optimi[sz]|loss|backward|gradient")


def stage_title(line: str) -> str:
    """The title of a numbered stage header (:data:`_STAGE_HEADER`) as the line shows it (the last of a progress bar's
    ``\r`` refreshes, :func:`.steplines.on_screen`), or "" when ``line`` is none."""
    m = _STAGE_HEADER.search(plain(logs.normalize_line(ranks.launcher_text(on_screen(line)))).strip()[:HEAD])
    return m.group(1) if m is not None else ""


def stage_trains(title: str) -> bool:
    """Whether a stage's title names training (:data:`_STAGE_TRAINS`)."""
    return _STAGE_TRAINS.search(title) is not None
