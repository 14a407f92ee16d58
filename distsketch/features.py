"""Feature maps and the block product: the kernel side of every block of work.

Glossary (docs/design.md, "Math")
---------------------------------
L          landmarks: the support rows ``X_J`` of a sketch, shape (s', d)
P          projection (s', r): ``R_mixᵀ T`` for whitened features, any dense matrix, a
           realised sketch (``P = R_mixᵀ``, the pass's ``C = K Rᵀ``) or None (identity)
φ(x)       ``Pᵀ k(L, x)``; for a block of rows ``A``: ``k(A, L) P`` (b × r)

:func:`gram_dot` is the block product every pass and prediction runs: ``Σ_c k(A, L_c) P_c``
over spans ``c`` of the landmarks, never holding more than ``len(A) × chunk`` kernel values.
:class:`FeatureMap` bundles ``(kernel, landmarks, projection)``, the one object the pass,
decoding, the estimators and saved models use for a kernelised side.

This module imports no dask: :meth:`FeatureMap.transform` hands inputs that need scheduling
(dask, zarr, many in-memory rows) to :func:`distsketch.engine.transform_rows`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import scipy.sparse as sp

from ._hashing import fingerprint
from .backends import backend_of
from .kernels import kernel_description
from .sketches import RealizedSketch

__all__ = ["gram_dot", "FeatureMap", "pad_rows"]


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


def _as_float(Y):
    if sp.issparse(Y):
        return Y
    Y = np.asarray(Y)
    return Y if Y.dtype.kind == "f" else Y.astype(np.float64)


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
    ``C_I = k(A, X_J) R_mixᵀ`` of ``K Rᵀ`` (docs/design.md, "The streaming pass"); with
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
    b = A.shape[0]
    dtype = np.dtype(dtype)
    if sketch is not None:
        k = sketch.m
        spans = sketch.support_spans(chunk)
    else:
        s, step = landmarks.shape[0], max(int(chunk), 1)
        k = s if right is None else right.shape[1]
        spans = [(a, min(a + step, s)) for a in range(0, s, step)]
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
            acc += Kc @ be.operand(sketch.mixing_t_block(a, c))
        else:
            acc += Kc @ be.operand(right[a:c])
    if out is not None:
        xp.copyto(out, acc)
        return out
    return acc if dtype == np.float64 else acc.astype(dtype)


@dataclass(frozen=True, eq=False)
class FeatureMap:
    """``φ(x) = Pᵀ k(L, x)``: a kernel, its landmarks and a projection.

    The pass's sketched side is ``FeatureMap(kernel, X_J, R)`` (``C_I = k(X_I, X_J) R_mixᵀ``),
    a model's input or output features are ``FeatureMap(kernel, X_J, R_mixᵀ T)``, an exact
    side's raw kernel features ``FeatureMap(kernel, X, None)``. Picklable; shipped to workers
    once per graph.

    Parameters
    ----------
    kernel : Kernel
    landmarks : ndarray or scipy.sparse, shape (s', d)
    projection : None, ndarray of shape (s', r), or RealizedSketch
    chunk : int
        Landmark columns per kernel block (an engine knob: it changes the summation order of
        mixed columns, so results only to rounding, and is not part of :attr:`key`).
    """

    kernel: Any
    landmarks: Any
    projection: Any = None
    chunk: int = 2048

    @property
    def width(self) -> int:
        """Number of features ``r``."""
        P = self.projection
        if P is None:
            return self.landmarks.shape[0]
        if isinstance(P, RealizedSketch):
            return P.m
        return P.shape[1]

    @property
    def n_features_in(self) -> int:
        return self.landmarks.shape[1]

    def block(self, A, *, dtype=np.float64, out=None):
        """Features of one in-memory block of rows, ``k(A, L) P``, shape (len(A), r)."""
        if isinstance(self.projection, RealizedSketch):
            return gram_dot(self.kernel, A, self.landmarks, self.projection, chunk=self.chunk,
                            dtype=dtype, out=out)
        return gram_dot(self.kernel, A, self.landmarks, right=self.projection, chunk=self.chunk,
                        dtype=dtype, out=out)

    def block_then(self, A, post=None):
        """``k(A, L) P post`` of one block (``post`` (r × k) applied per block)."""
        phi = self.block(A)
        return phi if post is None else phi @ post

    def transform(self, X, *, post=None, block_memory: int = 128 * 2**20, argument: str = "X",
                  n_features: int | None = None, model: str = "the model"):
        """``φ(x)`` of every row, ``(n, r)`` (``(n, k)`` with ``post``), block by block.

        A dask array gives a lazy dask array; numpy, scipy.sparse and zarr inputs give an
        ndarray computed on all local cores in fixed blocks of rows (results never depend on
        the number of threads). See :func:`distsketch.engine.transform_rows`.
        """
        from .engine import transform_rows

        width = self.width if post is None else post.shape[1]
        if n_features is None:
            n_features = self.n_features_in
        return transform_rows(self.block_then, X, width=width, post=post,
                              row_bytes=8 * (self.chunk + self.width + width),
                              block_memory=block_memory, argument=argument,
                              n_features=n_features, model=model)

    def tiles(self, Y, *, rows: int, parallel: bool = False) -> np.ndarray:
        """``φ`` of the rows of ``Y`` (c × r), computed in zero-padded tiles of exactly ``rows``
        rows: every BLAS call has the same shape, so equal rows get bitwise-equal features
        wherever they sit (decoding's exact ties). ``parallel=True`` computes the tiles on all
        local cores (:func:`distsketch.engine.map_local`); inside a task keep the default.
        """
        out = np.empty((Y.shape[0], self.width))

        def tile(s: int) -> None:
            padded = pad_rows(_as_float(Y[s:s + rows]), rows)
            out[s:s + rows] = self.block(padded)[:min(rows, Y.shape[0] - s)]

        starts = list(range(0, Y.shape[0], rows))
        if parallel:
            from .engine import map_local

            map_local(tile, starts)
        else:
            for s in starts:
                tile(s)
        return out

    def diag(self, A) -> np.ndarray:
        """``k(a, a)`` of each row of ``A`` (n,), float64 (integer and boolean rows as float)."""
        return np.asarray(self.kernel.diag(_as_float(A)), dtype=np.float64)

    @cached_property
    def key(self) -> str:
        """Stable identifier of the map (kernel description, landmarks, projection): equal for
        maps that compute the same features in any process. Cache key of candidate features."""
        P = self.projection
        if isinstance(P, RealizedSketch):
            arrays, meta = P.get_state()
            P = np.frombuffer(fingerprint(
                np.frombuffer(repr(sorted(meta.items())).encode(), np.uint8),
                *(arrays[k] for k in sorted(arrays))).encode(), np.uint8)
        return fingerprint(
            np.frombuffer(repr(kernel_description(self.kernel)).encode(), dtype=np.uint8),
            self.landmarks, P)
