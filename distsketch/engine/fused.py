"""The kernel block fused with its product: ``K_Iᵀ (K_I V)`` without the float32 block in memory.

PCG's pass (``distsketch.solvers.conjugate_gradient``) recomputes each row block's kernel
``K_I = k(X_I, X_J)`` (b × m, float32) and adds ``K_Iᵀ (K_I V)`` in float64
(:func:`~distsketch.engine.sweep.gram_product`: product tiles of ``product_tile_rows(m)`` rows,
converted to float64 and added in tile order). Unfused, the whole float32 block is written
(b·m·4 bytes: 24–48 MB at b ≈ 1200, m = 5000–10 000) and read back. Fused
(:func:`fused_gram_product`), the kernel is computed just ahead of the product tiles and only
a window of its rows is kept: the result is **bitwise** the unfused one.

Why a window and not the product's own tiles. Every float32 kernel value must be the one
``gram_dot`` writes, and a BLAS product's rounding depends on its call's shape (OpenBLAS
0.3.31, SkylakeX kernels: rows of ``Aa @ Baᵀ`` computed in a sub-call of other height differ
by an ulp for small or narrow calls, and a single row takes the matrix–vector kernel). So
every kernel call is the unfused one: per span of ``chunk`` landmark columns
(:func:`~distsketch.linalg.blocks.landmark_spans`), the kernel's own row tiles
(:meth:`Kernel.fill_rows <distsketch.kernels.Kernel.fill_rows>`, ``h_s`` rows: the Gaussian's
4 MiB float64 exponent tiles), each written into a ring of its span's last tiles
(``⌈P/h_s⌉ + 1`` tiles, ``P`` the product tile's rows, so a product tile never waits on a
tile that overwrote one it needs). A product tile is copied out of the rings into the same
float64 work tile as :func:`~distsketch.engine.sweep.gram_product`'s and added in the same
order: same values, same calls, same sums. The rings hold about ``2 h_s m`` float32 values
(≈ 2·2 MiB per span of 2048 columns) instead of the ``b m`` of the block.

Measured (Intel Xeon, Sapphire Rapids class: 2 MiB L2 per core, 260 MiB L3; one thread,
one ``pcg_block`` call, b = 1200, d = 10, one column, medians of 15 alternated runs on a
shared machine): unfused 3.41 / 4.26 / 4.54 ns per kernel entry at m = 2000 / 5000 /
10 000, fused 3.45 / 3.93 / 4.24 (no gain while the block is one span; −7–8 % beyond, with
the block held in that large L3 either way), and the task's float32 work memory 21 MB
instead of 48 MB at m = 10 000. Computing the kernel in the product's own tiles instead
(5.18 ns at m = 10 000) is slower: those small kernel calls cost more than the copies.

Where it applies: a map of raw kernel columns (no projection), dense C-contiguous numpy rows
and landmarks, a kernel with :meth:`~distsketch.kernels.Kernel.fill_rows` (the Gaussian, also
:class:`~distsketch.kernels.Standardized`, for ``d ≤ 64``), float32 blocks. Elsewhere
:func:`fused_gram_product` returns None and the caller computes the block.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..kernels.sparse import tuned
from ..linalg.blocks import landmark_spans
from .features import FeatureMap
from .sweep import Segments, SweepData, product_tile_rows

__all__ = ["fused_gram_product", "fused_block_product"]


def _plan(fmap: FeatureMap, A: Any) -> list[tuple[int, int, int]] | None:
    """``[(a, c, h)]``: each landmark span ``[a, c)`` of ``fmap.block`` and its kernel's row
    tile ``h``, or None where the fusion does not apply (module notes)."""
    L = fmap.landmarks
    if (fmap.projection is not None or type(A) is not np.ndarray
            or type(L) is not np.ndarray or A.ndim != 2 or L.ndim != 2
            or not A.flags.c_contiguous or A.dtype.kind != "f"
            or A.shape[0] == 0 or L.shape[0] == 0 or A.shape[1] != L.shape[1]):
        return None
    plan = []
    for a, c in landmark_spans(L.shape[0], fmap.chunk):
        h = fmap.kernel.fill_rows(c - a, A.shape[1])
        if h is None:
            return None
        plan.append((a, c, int(h)))
    return plan


def fused_gram_product(fmap: FeatureMap, A: Any, V: np.ndarray, ws) -> np.ndarray | None:
    """``Kᵀ (K V)`` in float64 of the float32 block ``K = fmap.block(A, dtype=float32)``,
    bitwise equal to ``gram_product(K, V, ws)``, without forming ``K`` (module notes).

    Parameters
    ----------
    fmap : FeatureMap
        Raw kernel columns ``k(·, X_J)`` (no projection).
    A : ndarray of shape (b, d)
        The rows.
    V : ndarray of shape (m, k), float64
    ws : Workspace
        This thread's work arrays (the product tile is ``gram_product``'s).

    Returns
    -------
    ndarray of shape (m, k), float64, or None
        None where the fusion does not apply: compute the block and call ``gram_product``.
    """
    plan = _plan(fmap, A)
    if plan is None:
        return None
    kernel, L = fmap.kernel, fmap.landmarks
    b, m = A.shape[0], L.shape[0]
    rows = product_tile_rows(m)
    # each span's ring: whole tiles (a tile never wraps), enough for a product tile's rows
    heights = [min(b, (-(-rows // h) + 1) * h) for _, _, h in plan]
    rings = [ws.get(f"fused-ring{j}", (heights[j], c - a), np.float32)
             for j, (a, c, _) in enumerate(plan)]
    filled = [0] * len(plan)
    acc = np.zeros((m, V.shape[1]))
    buf = ws.get("tile64", (min(rows, b), m), np.float64)
    with tuned(fmap.tuning):
        for r in range(0, b, rows):
            e = min(r + rows, b)
            T = buf[: e - r]
            for j, (a, c, h) in enumerate(plan):
                ring, height = rings[j], heights[j]
                while filled[j] < e:  # gram_dot's tiles of this span, as it computes them
                    s = filled[j]
                    t = min(s + h, b)
                    kernel.fill(A[s:t], L[a:c], ring[s % height: s % height + t - s])
                    filled[j] = t
                o = r % height
                first = min(e - r, height - o)  # rows before the ring wraps
                np.copyto(T[:first, a:c], ring[o:o + first])
                if first < e - r:
                    np.copyto(T[first:, a:c], ring[: e - r - first])
            acc += T.T @ (T @ V)
    return acc


def fused_block_product(data: SweepData | Segments, i: int, ref: Any, crc: int | None,
                        V: np.ndarray, ws) -> np.ndarray | None:
    """:func:`fused_gram_product` of row block ``i`` of a sweep where its kernel block is
    recomputed (not stored, not held) in float32; None elsewhere.

    Parameters
    ----------
    data : SweepData or Segments
    i : int
        The block (numbered globally over segments).
    ref : Any
        The block's input rows (the sweep's item).
    crc : int or None
        The stored block's checksum (a stored block is not recomputed).
    V : ndarray of shape (m, k), float64
    ws : Workspace

    Returns
    -------
    ndarray of shape (m, k), float64, or None
    """
    part, _ = data.locate(i)
    if (part.held is not None or crc is not None or part.C is not None or part.x is None
            or np.dtype(part.dtype) != np.float32):
        return None
    return fused_gram_product(part.x, ref, V, ws)
