"""The block product: ``Σ_c k(A, L_c) F_c`` over spans of landmark columns, the hot path of
every pass and prediction (docs/design/engine.md, "The streaming pass").

Glossary
--------
A          a block of rows, (b, d)
L          landmarks: the support rows ``X_J`` of a sketch, (s', d)
F          the factor: ``R_mixᵀ`` of a realised sketch (the pass's ``C_I = k(X_I, X_J) R_mixᵀ``),
           a dense (s', r) matrix (features of new points) or the identity

Block math: numpy and scipy through the compute backend of the arrays
(:mod:`distsketch.backends`), no dask.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

from ..backends.base import backend_of
from ..sketches.base import RealizedSketch

__all__ = ["gram_dot", "landmark_spans", "pad_rows", "aligned_rows", "as_float"]

#: Row multiple of every fixed-shape tile whose equal rows must give bitwise-equal results
#: (decoding's candidate features, folded candidates and scores: exact ties between duplicate
#: candidates). A fixed call shape is not enough: BLAS computes the last rows of a product in
#: edge micro-kernels whose rounding can differ from the full ones' — OpenBLAS 0.3.31's
#: SkylakeX kernels give equal rows in the last ``c mod 16`` positions of a ``c``-row product
#: (and of a matrix-vector product) results an ulp apart, where its Haswell kernels agreed.
#: Tiles of a multiple of 64 rows keep every row in a full micro-tile.
TILE_ALIGN = 64


def aligned_rows(rows: int) -> int:
    """``rows`` rounded up to a multiple of :data:`TILE_ALIGN` (the height of a padded tile)."""
    return -(-max(1, int(rows)) // TILE_ALIGN) * TILE_ALIGN


def pad_rows(A, rows: int):
    """``A`` with zero rows appended up to ``rows`` (a fixed BLAS call shape)."""
    missing = rows - A.shape[0]
    if missing <= 0:
        return A
    if sp.issparse(A):
        return sp.vstack([A, sp.csr_array((missing, A.shape[1]), dtype=A.dtype)], format="csr")
    out = np.zeros((rows, A.shape[1]), dtype=A.dtype)
    out[: A.shape[0]] = A
    return out


def as_float(Y):
    """Candidate or query rows as a float array (sparse kept; integer and boolean rows as float64)."""
    if sp.issparse(Y):
        return Y
    Y = np.asarray(Y)
    return Y if Y.dtype.kind == "f" else Y.astype(np.float64)


def distinct_rows(A: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(first, inverse)`` of the rows of a dense 2-d array compared as bytes (``-0.0`` as
    ``+0.0``): ``first`` the position of each distinct row's first occurrence (ascending),
    ``inverse`` (len(A),) the index into ``first`` of every row's distinct row."""
    P = np.ascontiguousarray(A, dtype=np.float64) + 0.0  # -0.0 → +0.0 (a new array)
    keys = P.view(np.dtype((np.void, 8 * P.shape[1]))).ravel()
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    return first[order], rank[inverse.ravel()]


def landmark_spans(s: int, chunk: int) -> list[tuple[int, int]]:
    """The spans ``[a, c)`` of landmark columns :func:`gram_dot` computes one at a time without
    a sketch: ``chunk`` columns each (at least 1), the last one shorter.

    Parameters
    ----------
    s : int
        Number of landmarks.
    chunk : int
        Landmark columns per kernel block.

    Returns
    -------
    list of (int, int)
    """
    step = max(int(chunk), 1)
    return [(a, min(a + step, s)) for a in range(0, s, step)]


def gram_dot(
    kernel,
    A,
    landmarks,
    sketch: RealizedSketch | None = None,
    *,
    right: np.ndarray | None = None,
    chunk: int = 2048,
    dtype: Any = np.float64,
    out=None,
):
    """``Σ_c k(A, L_c) F_c`` over spans ``c`` of the landmarks, without a full Gram block.

    With ``sketch`` the factor is ``F = R_mixᵀ`` and the result is the block
    ``C_I = k(A, X_J) R_mixᵀ`` of ``K Rᵀ`` (docs/design/engine.md, "The streaming pass"); with
    ``right`` it is ``k(A, L) F`` for a dense ``F`` (features of new points); with neither it
    is ``k(A, L)`` itself. The kernel block held at any time is ``len(A) × chunk``.

    When each output column is one scaled kernel column (a diagonal ``R_mix``, e.g.
    sub-sampling, or no factor), the kernel writes straight into the result
    (:meth:`Kernel.fill <distsketch.kernels.Kernel.fill>`; the Gaussian kernel in cache-sized
    row tiles, scaling included).

    Computed in the backend of ``out`` (or of ``A``): ``A`` and ``landmarks`` must belong to it;
    the sketch's host matrices are converted by :meth:`Backend.operand
    <distsketch.backends.Backend.operand>`.

    Parameters
    ----------
    kernel : Kernel
    A : array or sparse, shape (b, d)
    landmarks : array or sparse, shape (s', d)
    sketch : RealizedSketch, optional
    right : ndarray of shape (s', k), optional
        With neither ``sketch`` nor ``right``, ``F`` is the identity.
    chunk : int
        Landmark columns per kernel block.
    dtype : {float64, float32}
        Of the result. Written kernel columns are float32 values of the kernel (exponential
        kernels evaluate ``exp`` in float32, see :mod:`distsketch.kernels`); mixed columns
        are summed in float64 and rounded once.
    out : array of shape (b, k) and ``dtype``, optional
        Written and returned instead of a new array.

    Returns
    -------
    array of shape (b, k), ``dtype``
    """
    be = backend_of(A if out is None else out)
    xp = be.xp
    A, landmarks = be.asarray(A), be.asarray(landmarks)
    b = A.shape[0]
    dtype = np.dtype(dtype)
    if sketch is not None:
        k = sketch.m
        spans = sketch.support_spans(chunk)
    else:
        s = landmarks.shape[0]
        k = s if right is None else right.shape[1]
        spans = landmark_spans(s, chunk)
    diagonal = sketch is not None and sketch.scale is not None
    if diagonal or (sketch is None and right is None):
        # each output column is one scaled kernel column (R_mix = diag(scale), or no factor)
        out = xp.empty((b, k), dtype=dtype) if out is None else out
        for a, c in spans:
            kernel.fill(A, landmarks[a:c], out[:, a:c],
                        be.asarray(sketch.scale[a:c]) if diagonal else None)
        return out
    acc = xp.zeros((b, k))
    for a, c in spans:
        Kc = kernel(A, landmarks[a:c])
        if sketch is not None:
            acc += Kc @ be.cached_operand(sketch, ("mixing", a, c),
                                          lambda: sketch.mixing_t_block(a, c))
        else:
            acc += Kc @ be.cached_operand(right, ("rows", a, c), lambda: right[a:c])
    if out is not None:
        xp.copyto(out, acc)
        return out
    return acc if dtype == np.float64 else acc.astype(dtype)
