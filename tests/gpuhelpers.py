"""Shared by the device tests: why real-CuPy tests skip here."""

from __future__ import annotations


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
