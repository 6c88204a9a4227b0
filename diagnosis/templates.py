"""Log templates: mask variable parts (numbers, hex ids, paths) and mine templates with Drain3.

Two log lines that differ only in a tensor size, a PID or a file name map to the
same template ("RuntimeError: mat1 and mat2 shapes cannot be multiplied (<NUM>x<NUM>
and <NUM>x<NUM>)"), so the SVM learns from message *shapes*, not from the numbers
of one corpus.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from gpulens.extras import require

__all__ = ["MASKS", "TemplateSet", "mask"]

#: (regex, replacement) applied in order; the same masks feed Drain3 and the token features.
MASKS: tuple[tuple[str, str], ...] = (
    (r"(?:[A-Za-z]:)?(?:~|\.{1,2})?/[^\s'\",:;()<>\[\]{}]+", "<PATH>"),
    (r"\b[\w.-]+\.(?:py|pt|pth|ckpt|csv|json|jsonl|npy|npz|txt|jpg|jpeg|png|JPEG|tar|gz|h5|parquet|yaml|bin)\b", "<FILE>"),
    (r"\b0x[0-9a-fA-F]+\b", "<HEX>"),
    (r"\b[0-9a-fA-F]{8,}\b", "<HEX>"),
    (r"\b\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?\b", "<TS>"),
    (r"\b(?:\d{1,3}\.){3}\d{1,3}(?::\d+)?\b", "<IP>"),
    (r"[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?", "<NUM>"),
)
_COMPILED = tuple((re.compile(p), r) for p, r in MASKS)


def mask(line: str) -> str:
    """Replace paths, hex ids, timestamps, addresses and numbers by placeholders."""
    for pattern, repl in _COMPILED:
        line = pattern.sub(repl, line)
    return line


class TemplateSet:
    """Drain3 templates mined from a set of log lines; maps new lines to template ids."""

    def __init__(self, sim_th: float = 0.5, depth: int = 4) -> None:
        drain3 = require("drain3")
        from drain3.masking import MaskingInstruction
        from drain3.template_miner_config import TemplateMinerConfig

        config = TemplateMinerConfig()
        config.masking_instructions = [MaskingInstruction(p, r.strip("<>")) for p, r in MASKS]
        config.drain_sim_th = sim_th
        config.drain_depth = depth
        config.profiling_enabled = False
        config.parametrize_numeric_tokens = True
        self.miner = drain3.TemplateMiner(config=config)

    def fit(self, lines: Iterable[str]) -> TemplateSet:
        for line in lines:
            line = line.strip()
            if line:
                self.miner.add_log_message(line[:500])
        return self

    def template_id(self, line: str) -> int | None:
        """Id of the mined template that ``line`` fits, or None."""
        line = line.strip()
        if not line:
            return None
        cluster = self.miner.match(line[:500], full_search_strategy="never")
        return None if cluster is None else int(cluster.cluster_id)

    def tokens(self, lines: Iterable[str]) -> str:
        """Space-separated template tokens ("T12 T40 ...") for the feature vectorizer."""
        ids = (self.template_id(ln) for ln in lines)
        return " ".join(f"T{i}" for i in ids if i is not None)

    def templates(self) -> dict[int, str]:
        return {int(c.cluster_id): c.get_template() for c in self.miner.drain.clusters}
