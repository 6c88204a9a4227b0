"""GPU backends: NVML (real GPUs) and a scripted fake, behind one Protocol."""

from collectors.gpu.base import (
    DeviceLost,
    FieldError,
    FieldGuard,
    FieldUnsupported,
    GpuBackend,
    GpuDevice,
    GpuProcess,
    GpuReading,
    GpuSample,
    XidEvent,
)

__all__ = [
    "DeviceLost",
    "FieldError",
    "FieldGuard",
    "FieldUnsupported",
    "GpuBackend",
    "GpuDevice",
    "GpuProcess",
    "GpuReading",
    "GpuSample",
    "XidEvent",
]
