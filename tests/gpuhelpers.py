"""Shared by the device tests: why real-CuPy tests skip here, and their ``device`` fixture's
parameters."""

from __future__ import annotations

import pytest

from distsketch.backends.base import get_backend, register_backend


def cupy_skip_reason() -> str | None:
    """None where CuPy imports and sees a CUDA device, else the reason to skip (naming the
    extra that installs it)."""
    try:
        import cupy
    except ImportError as exc:
        return f"CuPy is not installed ({exc}); pip install 'distsketch[gpu]' on a GPU machine"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:
        return f"CuPy finds no CUDA runtime/device ({exc})"
    return None if count > 0 else "CuPy sees no CUDA device (getDeviceCount() == 0)"


#: The ``device`` fixture's parameters in the device tests: the emulated device everywhere,
#: real CuPy (marked ``gpu``) where a CUDA device is.
DEVICE_PARAMS = ["emulated", pytest.param("cupy", marks=pytest.mark.gpu)]


def pick_device(param: str, emulated):
    """``(backend, emulated)`` for a ``device`` fixture's ``param``: the module's emulated
    backend (registered again: its array types map to it, another module may have registered
    a twin), or the real ``"cuda"`` backend (skipping without CuPy and a device)."""
    if param == "emulated":
        register_backend(emulated)
        return emulated, True
    reason = cupy_skip_reason()
    if reason:
        pytest.skip(reason)
    return get_backend("cuda"), False
