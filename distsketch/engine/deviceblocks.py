"""PCG's block products on a device backend: the kernel block and both products on the GPU.

A PCG iteration's task (``distsketch.solvers.conjugate_gradient.pcg_block``) recomputes its
kernel block ``K_I = k(X_I, X_J)`` (b × m, at the block dtype) and returns
``K_Iᵀ (K_I V)`` (m × k, float64); the first pass returns ``K_Iᵀ Y``, ``K_Iᵀ 1``, ``Σ y`` and
``Σ y²`` instead. With a device backend (``EngineOptions(device="cuda")``: the sweep's
:attr:`~distsketch.engine.sweep.SweepData.backend`) :func:`device_block_products` fills the
block on the device (the kernels' device fill, the rows staged as the pass stages them),
converts a float32 block to float64 there and multiplies it whole: only ``V`` (m × k) goes
to the device and the m × k products come back; the iterates, the preconditioner and the
store stay on the host.

The products are those of the host's block in another summation order (one product of the
whole block against the host's cache-sized tiles), so a device fit equals the host fit to the
rounding of float64 products and the device's ``exp``: float64 blocks about 1e-10 relative
after the solve's amplification, float32 blocks about 1e-4 (tests/test_gpu_pcg.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..backends.base import dense, get_backend

__all__ = ["device_block_products"]


def device_block_products(data: Any, i: int, ref: Any, crc: int | None, V: np.ndarray | None,
                          yb: Any, *, first: bool, ws: Any) -> dict | None:
    """PCG's sums of row block ``i`` computed on the sweep's device backend, or None where
    the block is not recomputed there (the host backend, a stored or held block).

    With ``K = k(X_I, X_J)`` in float64 on the device:

        GV = Kᵀ (K V),   b = Kᵀ Y,   s = Kᵀ 1,   y1 = Σ_i y_i,   yy = Σ_i y_i²  (per column)

    Parameters
    ----------
    data : SweepData or Segments
        The sweep (block ``i`` numbered globally over segments).
    i : int
        The block.
    ref : ndarray of shape (b, d)
        Its input rows (host).
    crc : int or None
        A stored block's checksum (a stored block is not recomputed here).
    V : ndarray of shape (m, k), float64, or None
        The directions (None: no ``GV``).
    yb : array of shape (b,) or (b, t), or None
        Its targets (read on the first pass only).
    first : bool
        Also ``b``, ``s``, ``y1`` and ``yy`` (the first pass).
    ws : Workspace
        This thread's work arrays (device arrays under the backend's namespace).

    Returns
    -------
    dict or None
        ``{"GV": (m, k)}`` and on the first pass ``{"b": (m, t), "s": (m,), "y1": (t,),
        "yy": (t,)}``, host float64 arrays.
    """
    part, _ = data.locate(i)
    backend = getattr(part, "backend", "numpy")
    if (backend == "numpy" or part.held is not None or crc is not None or part.C is not None
            or part.x is None):
        return None
    be = get_backend(backend)
    xp = be.xp
    b, m = int(ref.shape[0]), part.m
    dtype = np.dtype(part.dtype)
    K = part.x.block(ref, dtype=dtype, out=ws.get("C", (b, m), dtype, xp))
    if K.dtype != np.float64:  # float32 blocks: their products in float64, on the device
        K64 = ws.get("C64", (b, m), np.float64, xp)
        xp.copyto(K64, K)
        K = K64
    out: dict = {}
    if V is not None:
        out["GV"] = be.to_numpy(K.T @ (K @ be.asarray(np.ascontiguousarray(V))))
    if first:
        Y = np.asarray(dense(yb), dtype=np.float64).reshape(b, -1)
        out["b"] = be.to_numpy(K.T @ be.asarray(np.ascontiguousarray(Y)))
        out["s"] = be.to_numpy(K.sum(axis=0))
        out["y1"] = Y.sum(axis=0)
        out["yy"] = np.einsum("ij,ij->j", Y, Y)
    return out
