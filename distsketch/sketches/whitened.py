"""A realised sketch whitened before the pass: ``R' = Tᵀ R``.

Glossary (docs/design/math.md, "Pre-whitening")
-----------------------------------------------
R        the inner realised sketch (m × n): ``R = R_mix R_sub``, support ``J`` (s' rows)
B0       ``R K Rᵀ = R_mix K_JJ R_mixᵀ`` (m × m): the landmarks' own sketched Gram matrix
T        its whitening (m × r): ``Tᵀ B0 T = I_r``, ``T Tᵀ = B0^†`` on the kept eigenspace
R'       ``Tᵀ R`` (r × n): support ``J``, mixing ``Tᵀ R_mix`` (dense r × s')

For a sketch with a small support (landmarks), ``B0`` is known before the pass, so ``T`` is
too, and the pass can sum ``G' = (C T)ᵀ(C T)`` over the whitened blocks ``C' = K R'ᵀ = C T``
instead of ``G = CᵀC`` followed by ``Tᵀ G T`` on the driver: the directions of ``K_JJ`` far
below ``‖G‖`` no longer drown in ``G``'s rounding (docs/design/math.md, "Pre-whitening"). The
estimators are invariant to an invertible map of the sketch's rows (``R' K R'ᵀ ≈ I``, whose
whitening on the driver is then trivial), so every part of the pipeline runs unchanged on
``R'``. The whitening itself is computed by the engine
(:func:`distsketch.engine.prewhiten.prewhitened`); this module holds the realisation only.

Block math: numpy and scipy only (no dask).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._hashing import fingerprint
from ..backends.base import backend_of
from .base import RealizedSketch

__all__ = ["WhitenedSketch"]

#: Prefix of the inner sketch's arrays in :meth:`WhitenedSketch.get_state`.
_INNER = "inner__"


class WhitenedSketch(RealizedSketch):
    """``R' = Tᵀ R`` for a realised sketch ``R`` and a dense ``T`` (m × r).

    Its support is the inner sketch's, its mixing ``Tᵀ R_mix`` (dense, r × s'), its rows
    ``r``; the specification, ``n`` and the seed are the inner sketch's.

    Parameters
    ----------
    inner : RealizedSketch
        The sketch as drawn (usually a :class:`~distsketch.sketches.SparseSketch` with a
        small support: sub-sampling, leverage scores, accumulation).
    T : ndarray of shape (inner.m, r)
        The whitening of ``B0 = R K Rᵀ``.
    rtol : float
        The relative eigenvalue threshold ``T`` was computed with (recorded).

    Attributes
    ----------
    inner : RealizedSketch
    T : ndarray of shape (inner.m, r)
    rtol : float
    """

    kind = "whitened"

    def __init__(self, inner: RealizedSketch, T: np.ndarray, *, rtol: float) -> None:
        T = np.ascontiguousarray(T, dtype=np.float64)
        if T.ndim != 2 or T.shape[0] != inner.m:
            raise ValueError(f"WhitenedSketch: T must have shape ({inner.m}, r), got {T.shape}")
        self.inner = inner
        self.T = T
        self.rtol = float(rtol)
        self.spec = inner.spec
        self.n = inner.n
        self.seed = inner.seed
        self.m = int(T.shape[1])

    @property
    def drawn(self) -> int | None:  # type: ignore[override]
        """The inner sketch's (a grown sketch: the rows it was drawn for)."""
        return self.inner.drawn

    def _grown(self, n: int) -> "WhitenedSketch":
        """The inner sketch grown (zero columns for the rows beyond its own), whitened by the
        same ``T``: ``B0`` involves the support only, which growing keeps."""
        return WhitenedSketch(self.inner.grown(n), self.T, rtol=self.rtol)

    def __getstate__(self) -> dict:
        # the dense projection R_mixᵀ T is rebuilt where it is used (a worker), not shipped
        return {k: v for k, v in self.__dict__.items() if k != "_proj"}

    @property
    def projection(self) -> np.ndarray:
        """``R_mixᵀ T`` (s' × r, float64): the factor of the pass's block
        ``C'_I = k(X_I, X_J) R_mixᵀ T``; computed once per process."""
        P = self.__dict__.get("_proj")
        if P is None:
            P = np.ascontiguousarray(self.inner.transpose_dot(self.T), dtype=np.float64)
            self.__dict__["_proj"] = P
        return P

    @property
    def support(self) -> np.ndarray:
        return self.inner.support

    @property
    def support_size(self) -> int:
        return self.inner.support_size

    @property
    def mixing(self) -> np.ndarray:
        return np.ascontiguousarray(self.projection.T)

    def to_config(self) -> dict:
        """The inner sketch's description, with the whitening's rank, threshold and a
        fingerprint of ``T`` (what a store records: a pass is resumed only with the same
        ``T``).

        Returns
        -------
        dict
        """
        fp = self.__dict__.get("_fingerprint")
        if fp is None:  # T is never modified: hashed once
            fp = self.__dict__["_fingerprint"] = fingerprint(self.T)
        return {**self.inner.to_config(),
                "whitened": {"rank": self.m, "rtol": self.rtol, "T": fp}}

    def support_spans(self, chunk: int) -> list[tuple[int, int]]:
        return self.inner.support_spans(chunk)

    def mixing_t_block(self, start: int, stop: int) -> np.ndarray:
        """``(Tᵀ R_mix)[:, start:stop]ᵀ = R_mix[:, start:stop]ᵀ T`` (dense, (stop − start) × r).

        Parameters
        ----------
        start, stop : int
            Support positions (a span of :meth:`support_spans`).

        Returns
        -------
        ndarray of shape (stop − start, r)
        """
        return self.projection[start:stop]

    def left_rows(self, block: Any, start: int, stop: int) -> tuple[np.ndarray, Any]:
        """``Tᵀ (R[:, start:stop] @ block)``: every row of ``R'`` when the inner sketch has a
        non-zero in the block's columns, none otherwise (a sub-sampling sketch's blocks
        without landmarks add nothing).

        Parameters
        ----------
        block : array of shape (stop − start, k)
        start, stop : int

        Returns
        -------
        rows : ndarray of int64
        values : array of shape (len(rows), k), in the backend of ``block``
        """
        rows, values = self.inner.left_rows(block, start, stop)
        if rows.size == 0:
            return rows, values.reshape(0, block.shape[1])
        be = backend_of(values)
        Tt = be.asarray(np.ascontiguousarray(self.T[rows].T))  # (r, len(rows))
        return np.arange(self.m, dtype=np.int64), Tt @ values

    def transpose_dot(self, T: np.ndarray) -> np.ndarray:
        """``(Tᵀ R_mix)ᵀ T₂ = R_mixᵀ (T T₂)``.

        Parameters
        ----------
        T : ndarray of shape (r, k)

        Returns
        -------
        ndarray of shape (s', k)
        """
        return self.inner.transpose_dot(self.T @ np.asarray(T, dtype=np.float64))

    def columns(self, start: int, stop: int) -> np.ndarray:
        """``Tᵀ R[:, start:stop]``, for auditing.

        Parameters
        ----------
        start, stop : int
            Training rows (columns of ``R'``).

        Returns
        -------
        ndarray of shape (r, stop − start)
        """
        inner = self.inner.columns(start, stop)
        return np.ascontiguousarray(np.asarray(inner.T @ self.T).T)

    def _state(self):
        arrays, meta = self.inner.get_state()
        out = {f"{_INNER}{k}": v for k, v in arrays.items()}
        out["whitening"] = self.T
        return out, {"inner": meta, "rtol": self.rtol}

    @classmethod
    def _from_state(cls, spec, meta, arrays):
        inner = RealizedSketch.from_state(
            {k[len(_INNER):]: v for k, v in arrays.items() if k.startswith(_INNER)},
            meta["inner"])
        T = np.asarray(arrays["whitening"], dtype=np.float64)
        if T.shape != (inner.m, meta["m"]):
            raise ValueError(f"saved sketch: the whitening has shape {T.shape}, expected "
                             f"({inner.m}, {meta['m']})")
        return cls(inner, T, rtol=meta["rtol"])
