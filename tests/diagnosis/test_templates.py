"""TemplateSet's own match (an index of each Drain3 leaf) gives Drain3's ``match`` answer."""

from __future__ import annotations

from pathlib import Path

import pytest
from drain3.drain import LogCluster

from gpulens.diagnosis.templates import TemplateSet, mask

SAMPLES = Path(__file__).resolve().parents[2] / "sample_logs"


def _masked_lines(limit: int) -> list[str]:
    """Masked lines of the excerpt corpus, up to ``limit`` (real logs: many shapes, wildcards)."""
    out: list[str] = []
    for path in sorted(SAMPLES.rglob("*.log")):
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.strip():
                out.append(mask(line))
        if len(out) >= limit:
            break
    return out[:limit]


def _drain_answer(ts: TemplateSet, line: str) -> int | None:
    line = line.strip()[:300]
    if not line:
        return None
    cluster = ts.miner.match(line, full_search_strategy="never")
    return None if cluster is None else int(cluster.cluster_id)


@pytest.fixture(scope="module")
def lines() -> list[str]:
    got = _masked_lines(6000)
    assert len(got) > 3000
    return got


def test_same_ids_as_drain_on_seen_and_unseen_lines(lines: list[str]) -> None:
    ts = TemplateSet().fit(lines[::2])  # half seen in mining, half not
    asked = [*lines, *(ln.replace("Error", "Failure") for ln in lines[:500]), "", "   ", "x"]
    got = [ts.template_id(ln) for ln in asked]
    assert got == [_drain_answer(ts, ln) for ln in asked]
    assert sum(g is not None for g in got) > len(lines) // 2  # most lines fit a template
    assert any(g is None for g in got)  # and some fit none


def test_most_wildcards_then_first_in_the_leaf() -> None:
    ts = TemplateSet().fit(["job 1 failed on node a", "job 2 failed on node b"])
    drain = ts.miner.drain
    (only,) = list(drain.clusters)
    assert only.log_template_tokens[1] == "<*>" and only.log_template_tokens[-1] == "<*>"
    leaf = drain.root_node.key_to_child_node["6"].key_to_child_node["job"]
    # two more clusters in the same leaf: one with fewer wildcards (loses), one with as many (later: loses)
    extra = [LogCluster(["job", "<*>", "failed", "on", "node", "c"], 90),
             LogCluster(["job", "7", "failed", "on", "<*>", "<*>"], 91)]
    for c in extra:
        drain.id_to_cluster[c.cluster_id] = c
        leaf.cluster_ids.append(c.cluster_id)
    for line in ("job 7 failed on node c", "job 8 failed on node c", "job 7 failed at node c", "job 7 failed on rack c"):
        ts._cache.clear()
        ts._leaves.clear()
        assert ts.template_id(line) == _drain_answer(ts, line)
    ts._cache.clear()
    assert ts.template_id("job 7 failed on node c") == only.cluster_id
    assert ts.template_id("job 7 failed on rack c") == 91
    assert ts.template_id("job 7 failed at node c") is None
