"""The origin of a checkpoint that cannot be read because the file is cut short or damaged:
unknown, since what damaged it happened outside the process that reads it."""

from __future__ import annotations

import re

from gpulens.diagnosis.logread.cause.answers import reorigin
from gpulens.diagnosis.types import Diagnosis

__all__ = ["damaged_file"]


#: What PyTorch, pickle, safetensors and HDF5 say of a checkpoint file that is cut short or
#: damaged (a save interrupted by a full disk or a kill, an incomplete download or copy); and
#: transformers' cached_file when a shard that the checkpoint's own index lists is not there
#: ("... does not appear to have a file named model-00003-of-00004.safetensors": the shard
#: names come from model.safetensors.index.json, so the copy or download is incomplete).
_DAMAGED = re.compile(r"failed finding central directory|file appears to be truncated|unpickling stack underflow"
                      r"|EOFError: Ran out of input|invalid load key|Error while deserializing header"
                      r"|\(truncated file|does not appear to have a file named [\w.-]*-\d{5}-of-\d{5}\.")


def damaged_file(d: Diagnosis) -> Diagnosis:
    """Origin ``unknown`` for a checkpoint that cannot be read because the file is cut short or
    damaged: what damaged it (a full disk or a kill during the save, an interrupted copy or
    download) happened outside the process that reads it, and its log does not say."""
    if d.category != "checkpoint_error" or d.origin == "unknown" or not any(_DAMAGED.search(e) for e in d.evidence[:1]):
        return d
    why = "a damaged or truncated file does not say what damaged it"
    return reorigin(d, "unknown", why)
