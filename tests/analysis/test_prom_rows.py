"""The Prometheus import's row rules on hand-made series (no server): nvidia_gpu_exporter's
mapping, steps shorter than the scrape interval, and the selector check."""

from __future__ import annotations

from datetime import datetime

import pytest

from gpulens.errors import InputError
from gpulens.ingest.importers.common import Quirks
from gpulens.ingest.importers.promapi import Series
from gpulens.ingest.importers.prometheus import PromImport, import_prometheus
from gpulens.ingest.importers.prommap import SOURCES
from gpulens.ingest.importers.promseries import NodeView, build_rows

UUID = "df6e7a7c-7314-46f8-abc4-b88b36dcf3aa"  # nvidia_gpu_exporter's METRICS.md example


def _nvsmi(name: str, pts: list[tuple[float, float]]) -> Series:
    return Series({"__name__": name, "uuid": UUID, "instance": "ws1:9835", "job": "nvidia"}, pts)


def test_nvidia_gpu_exporter_mapping() -> None:
    view = NodeView(SOURCES["nvidia_gpu_exporter"], 60_000)
    view.uuid_index[UUID] = (3, "NVIDIA GeForce RTX 2080 SUPER")  # from nvidia_smi_gpu_info
    ts = [1000.0 + 60 * i for i in range(5)]
    primary = [_nvsmi("nvidia_smi_utilization_gpu_ratio", [(t, 0.25) for t in ts])]
    stamps = [Series({k: v for k, v in primary[0].labels.items() if k != "__name__"}, [(t, t) for t in ts])]
    others = [_nvsmi("nvidia_smi_memory_used_bytes", [(t, 7.06740224e8) for t in ts]),
              _nvsmi("nvidia_smi_memory_total_bytes", [(t, 8.589934592e9) for t in ts]),
              _nvsmi("nvidia_smi_clocks_current_sm_clock_hz", [(t, 1.755e9) for t in ts]),
              _nvsmi("nvidia_smi_power_draw_watts", [(t, 28.07) for t in ts])]
    q = Quirks()
    rows = build_rows(view, primary, stamps, others, int(ts[2] * 1000), q).gpu.to_pylist()
    assert len(rows) == 3  # steps >= lo only (two steps before are for rates and freshness)
    r = rows[0]
    assert (r["node"], r["gpu_index"], r["uuid"], r["model"]) == ("ws1", 3, UUID, "NVIDIA GeForce RTX 2080 SUPER")
    assert r["util_gpu"] == 25.0 and r["mem_used_bytes"] == 706740224 and r["mem_total_bytes"] == 8589934592
    assert r["sm_clock_mhz"] == pytest.approx(1755.0) and r["power_w"] == pytest.approx(28.07)
    assert not q


def test_steps_shorter_than_the_scrape_interval_hold_the_sample() -> None:
    """Scrapes every 60 s, steps of 15 s: a sample holds for the interval, then is stale."""
    view = NodeView(SOURCES["dcgm"], 15_000)
    labels = {"gpu": "0", "UUID": "GPU-1", "Hostname": "n1", "modelName": "H100"}
    samples = [0.0, 60.0, 120.0]  # then the exporter dies at 120 s
    steps = [15.0 * i for i in range(0, 20)]  # 0 .. 285 s
    last = [max(s for s in samples if s <= t) for t in steps]
    primary = [Series({**labels, "__name__": "DCGM_FI_DEV_GPU_UTIL"}, [(t, 50.0) for t in steps])]
    stamps = [Series(labels, [(t, s) for t, s in zip(steps, last, strict=True)])]
    q = Quirks()
    rows = build_rows(view, primary, stamps, [], 0, q).gpu.to_pylist()
    kept = [(r["ts"] - datetime(1970, 1, 1)).total_seconds() for r in rows]
    assert kept == [15.0 * i for i in range(0, 12)]  # up to 165 s: younger than 60 s or a new sample
    assert q["stale_points"] == 8 and len(view.stale) == 1


def test_match_must_be_label_matchers(tmp_path: object) -> None:
    from datetime import UTC
    from pathlib import Path

    from gpulens.store import Store

    store = Store.open(Path(str(tmp_path)) / "d")
    for bad in ("up", '{job="x"} or vector(1)', 'a="b"}'):
        with pytest.raises(InputError, match="--match"):
            import_prometheus(store, PromImport("http://127.0.0.1:9", datetime(2026, 1, 1, tzinfo=UTC),
                                                datetime(2026, 1, 2, tzinfo=UTC), 60.0, "dcgm", bad))
    with pytest.raises(InputError, match="not an http"):
        import_prometheus(store, PromImport("file:///etc/passwd", datetime(2026, 1, 1, tzinfo=UTC),
                                            datetime(2026, 1, 2, tzinfo=UTC)))
