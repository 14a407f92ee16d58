"""Feature maps: the kernel side of every block of work.

Glossary (docs/design/math.md)
------------------------------
L          landmarks: the support rows ``X_J`` of a sketch, shape (s', d)
P          projection (s', r): ``R_mixᵀ T`` for whitened features, any dense matrix, a
           realised sketch (``P = R_mixᵀ``, the pass's ``C = K Rᵀ``) or None (identity)
φ(x)       ``Pᵀ k(L, x)``; for a block of rows ``A``: ``k(A, L) P`` (b × r)

:class:`FeatureMap` bundles ``(kernel, landmarks, projection)``, the one object the pass,
decoding, the estimators and saved models use for a kernelised side. Its block method is the
block product (:func:`distsketch.linalg.blocks.gram_dot`); :meth:`FeatureMap.transform` maps it over
any input's rows through the engine (dask in, dask out).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import scipy.sparse as sp

from .._hashing import fingerprint
from ..kernels.base import kernel_description
from ..kernels.sparse import tuned
from ..linalg.blocks import aligned_rows, as_float, distinct_rows, gram_dot, pad_rows
from ..sketches.base import RealizedSketch
from .mapreduce import map_local
from .transform import transform_rows

__all__ = ["FeatureMap"]

#: Largest landmark array (as float64 bytes) whose repeated rows :class:`FeatureMap` merges.
MERGE_BYTES = 256 << 20


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
    tuning : Tuning or None
        The kernel products' density rule and sparse panels (a fit's ``EngineOptions.tuning``:
        :func:`distsketch.kernels.tuned`), applied wherever the map's blocks are computed (it
        travels with the map to every task); None: the defaults. An engine knob like
        ``chunk`` (results to rounding), not part of :attr:`key`.
    """

    kernel: Any
    landmarks: Any
    projection: Any = None
    chunk: int = 2048
    tuning: Any = None

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

    @cached_property
    def _merged(self) -> tuple[np.ndarray, Any] | None:
        """``(L_u, P_u)``: the distinct landmark rows (each first occurrence, in order) and
        the projection with the rows of a repeated landmark summed, ``P_u = Sᵀ P`` (``S``:
        s' × u, a single 1 per row at the landmark's distinct row). ``k(A, L) P =
        k(A, L_u) P_u`` exactly (equal rows give equal kernel columns), with one kernel
        column per distinct landmark: a p-sparsified output sketch on Bibtex draws 2 701
        label rows of which 1 293 differ. None where no landmark repeats or the merge does
        not apply: sparse or device landmarks, landmarks over :data:`MERGE_BYTES` (their
        comparison copies them), no projection, or a diagonal sketch (each feature is one
        scaled kernel column)."""
        L, P = self.landmarks, self.projection
        if (P is None or type(L) is not np.ndarray or L.ndim != 2 or L.shape[0] < 2
                or L.shape[0] * L.shape[1] * 8 > MERGE_BYTES):
            return None
        if isinstance(P, RealizedSketch) and P.scale is not None:
            return None
        first, inverse = distinct_rows(L)
        if len(first) == L.shape[0]:
            return None
        if isinstance(P, RealizedSketch):
            P = P.mixing_t_block(0, L.shape[0])
        S = sp.csr_array((np.ones(L.shape[0]), (inverse, np.arange(L.shape[0]))),
                         shape=(len(first), L.shape[0]))  # Sᵀ, summing rows in order
        P_u = S @ P
        return L[first], (P_u.tocsr() if sp.issparse(P_u) else np.asarray(P_u))

    def block(self, A: Any, *, dtype: Any = np.float64, out: np.ndarray | None = None
              ) -> np.ndarray:
        """Features of one in-memory block of rows, ``k(A, L) P``, shape (len(A), r); a
        repeated landmark's kernel column is computed once (:attr:`_merged`); the kernel
        products under the map's :attr:`tuning`."""
        merged = self._merged
        with tuned(self.tuning):
            if merged is not None:
                return gram_dot(self.kernel, A, merged[0], right=merged[1], chunk=self.chunk,
                                dtype=dtype, out=out)
            if isinstance(self.projection, RealizedSketch):
                return gram_dot(self.kernel, A, self.landmarks, self.projection,
                                chunk=self.chunk, dtype=dtype, out=out)
            return gram_dot(self.kernel, A, self.landmarks, right=self.projection,
                            chunk=self.chunk, dtype=dtype, out=out)

    def block_then(self, A: Any, post: np.ndarray | None = None) -> np.ndarray:
        """``k(A, L) P post`` of one block (``post`` (r × k) applied per block)."""
        phi = self.block(A)
        return phi if post is None else phi @ post

    def transform(self, X: Any, *, post: np.ndarray | None = None, block_memory: int = 128 * 2**20,
                  argument: str = "X", n_features: int | None = None,
                  model: str = "the model") -> Any:
        """``φ(x)`` of every row, ``(n, r)`` (``(n, k)`` with ``post``), block by block.

        A dask array gives a lazy dask array; numpy, scipy.sparse and zarr inputs give an
        ndarray computed on all local cores in fixed blocks of rows (results never depend on
        the number of threads). See :func:`distsketch.engine.transform_rows`.
        """
        width = self.width if post is None else post.shape[1]
        if n_features is None:
            n_features = self.n_features_in
        return transform_rows(self.block_then, X, width=width, post=post,
                              row_bytes=8 * (self.chunk + self.width + width),
                              block_memory=block_memory, argument=argument,
                              n_features=n_features, model=model)

    def tiles(self, Y: Any, *, rows: int, parallel: bool = False) -> np.ndarray:
        """``φ`` of the rows of ``Y`` (c × r), ``rows`` at a time, each tile zero-padded to
        ``aligned_rows(rows)`` rows: every BLAS call has the same shape and every row sits in a
        full micro-tile (:data:`~distsketch.linalg.blocks.TILE_ALIGN`), so equal rows get
        bitwise-equal features wherever they sit (decoding's exact ties). ``parallel=True``
        computes the tiles on all local cores (:func:`distsketch.engine.map_local`); inside a
        task keep the default.
        """
        out = np.empty((Y.shape[0], self.width))
        height = aligned_rows(rows)

        def tile(s: int) -> None:
            padded = pad_rows(as_float(Y[s:s + rows]), height)
            out[s:s + rows] = self.block(padded)[:min(rows, Y.shape[0] - s)]

        starts = list(range(0, Y.shape[0], rows))
        if parallel:
            map_local(tile, starts)
        else:
            for s in starts:
                tile(s)
        return out

    def diag(self, A: Any) -> np.ndarray:
        """``k(a, a)`` of each row of ``A`` (n,), float64 (integer and boolean rows as float)."""
        return np.asarray(self.kernel.diag(as_float(A)), dtype=np.float64)

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
