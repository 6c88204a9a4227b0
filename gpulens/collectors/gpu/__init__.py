"""GPU backends: NVML (real GPUs) and a scripted fake, behind one Protocol.

:func:`open_backend` is the one factory every user of a backend (the agent, the
validator) goes through.
"""

from __future__ import annotations

from gpulens.collectors.gpu.base import (
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
    "open_backend",
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


def open_backend(
    kind: str, scenario: str | None = None, *, xid_events: bool = True, gpm: bool = True
) -> GpuBackend | None:
    """The GPU backend ``kind`` (auto | nvml | fake | none); None for ``none``.

    ``fake`` plays the JSON ``scenario`` (or a default one); ``auto`` and ``nvml`` open
    NVML. Raises :class:`~gpulens.errors.BackendUnavailableError` when the backend cannot
    start (the caller decides whether that is fatal).
    """
    if kind == "none":
        return None
    if kind == "fake":
        from gpulens.collectors.gpu.fake import FakeBackend

        return FakeBackend.from_file(scenario) if scenario else FakeBackend()
    from gpulens.collectors.gpu.nvml import NvmlBackend

    return NvmlBackend(xid_events=xid_events, gpm=gpm)
