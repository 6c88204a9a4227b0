"""The NVML backend. Its pure parts run everywhere; on a machine where NVML finds a GPU
the real backend is polled (on a machine without one it must refuse cleanly)."""

from __future__ import annotations

import pytest

from gpulens.collectors.gpu.base import DeviceLost, FieldError, FieldUnsupported
from gpulens.errors import BackendUnavailableError
from tests.conftest import require_module


@pytest.fixture
def nv():  # type: ignore[no-untyped-def]
    require_module("pynvml")
    import pynvml

    return pynvml


def test_translate_error(nv) -> None:  # type: ignore[no-untyped-def]
    from gpulens.collectors.gpu.nvml import translate_error

    assert isinstance(translate_error(nv, nv.NVMLError(nv.NVML_ERROR_NOT_SUPPORTED)), FieldUnsupported)
    assert isinstance(translate_error(nv, nv.NVMLError(nv.NVML_ERROR_NOT_FOUND)), FieldUnsupported)
    assert isinstance(translate_error(nv, nv.NVMLError(nv.NVML_ERROR_NO_PERMISSION)), FieldUnsupported)
    assert isinstance(translate_error(nv, nv.NVMLError(nv.NVML_ERROR_GPU_IS_LOST)), DeviceLost)
    err = translate_error(nv, nv.NVMLError(nv.NVML_ERROR_UNKNOWN))
    assert isinstance(err, FieldError) and not isinstance(err, FieldUnsupported)


def test_decode_field_values(nv) -> None:  # type: ignore[no-untyped-def]
    from gpulens.collectors.gpu.nvml import decode_field_value

    fv = nv.c_nvmlFieldValue_t()
    fv.valueType = nv.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
    fv.value.ullVal = 2**40 + 5
    assert decode_field_value(nv, fv) == 2**40 + 5
    fv.valueType = nv.NVML_VALUE_TYPE_DOUBLE
    fv.value.dVal = 3.5
    assert decode_field_value(nv, fv) == 3.5
    fv.valueType = nv.NVML_VALUE_TYPE_UNSIGNED_INT
    fv.value.uiVal = 450_000
    assert decode_field_value(nv, fv) == 450_000
    fv.valueType = nv.NVML_VALUE_TYPE_SIGNED_LONG_LONG
    fv.value.sllVal = -7
    assert decode_field_value(nv, fv) == -7
    fv.valueType = 99
    assert decode_field_value(nv, fv) is None


def test_batch_field_ids_exist_in_pynvml(nv) -> None:  # type: ignore[no-untyped-def]
    from gpulens.collectors.gpu.nvml import BATCH_FIELDS

    for attr, (const, _) in BATCH_FIELDS.items():
        assert isinstance(getattr(nv, const), int), (attr, const)


def _gpu_present(nv) -> bool:  # type: ignore[no-untyped-def]
    try:
        nv.nvmlInit()
    except nv.NVMLError:
        return False
    try:
        return int(nv.nvmlDeviceGetCount()) > 0
    finally:
        nv.nvmlShutdown()


def test_real_nvml_backend(nv) -> None:  # type: ignore[no-untyped-def]
    from gpulens.collectors.gpu.nvml import NvmlBackend

    if not _gpu_present(nv):
        with pytest.raises(BackendUnavailableError, match="NVML"):
            NvmlBackend()
        return
    backend = NvmlBackend()
    try:
        devices = backend.devices()
        assert devices and all(d.uuid.startswith(("GPU-", "MIG-")) for d in devices)
        first = backend.poll()
        second = backend.poll()
        assert len(second.samples) == len(devices)
        for s in second.samples:
            assert s.util_gpu is not None and 0 <= s.util_gpu <= 100
            assert s.mem_total_bytes and s.mem_used_bytes is not None
            assert (s.pcie_tx_bytes is not None) or (s.pcie_tx_snapshot_bps is not None) or \
                   ((s.index, "pcie_throughput") in backend.guard.unsupported)
        assert not first.lost and not second.lost
    finally:
        backend.close()
