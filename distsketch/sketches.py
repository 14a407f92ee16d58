"""Sketch matrices ``R = R_mix · R_sub`` and their application to kernel blocks.

Glossary (DESIGN §2)
--------------------
n        number of training rows (columns of ``R``)
m        sketch size (rows of ``R``)
J        support: the training rows that ``R`` touches (non-null columns), sorted
s'       ``len(J)``
R_sub    the ``s' × n`` selection of the rows ``J``
R_mix    the ``m × s'`` mixing matrix, so that ``R = R_mix R_sub``

A *sketch specification* (``SubSampling(m=500)``) holds only its constructor
arguments. ``spec.realize(n, seed=...)`` draws a :class:`RealizedSketch`, a function
of ``(seed, n)`` alone: dense random matrices are generated in fixed tiles of
:data:`TILE` columns, tile ``t`` from the generator ``default_rng([seed, t])``, so any
worker can regenerate any block of columns and the draw never depends on how the
training rows are chunked.

=====================  ==============================  =============================
sketch                 support J                       R_mix
=====================  ==============================  =============================
Identity               all n                           I_n
SubSampling(m)         m rows, uniform, no replacement  sqrt(n/m) I_m
PSparsified(m, p)      non-null columns of a           ±1/sqrt(mp) or N(0,1)/sqrt(mp)
                       Bernoulli(p) mask               on the mask
Accumulation(m, q)     <= m q rows (with replacement)  q signed entries per row,
                                                       ±sqrt(n/(mq))
GaussianSketch(m)      all n                           N(0, 1/m), generated per tile
CountSketch(m)         all n                           one ±1 per column
=====================  ==============================  =============================

All scalings make ``E[RᵀR] = I_n``; the SISOKR and sketched-KRR estimators are
invariant to a scalar rescaling of ``R``, so the scaling only matters for auditing.

References: El Ahmad, Brogat-Motte, Laforgue, d'Alché-Buc, "Sketch In, Sketch Out",
AISTATS 2024; El Ahmad, Laforgue, d'Alché-Buc, "Fast kernel methods for generic
Lipschitz losses via p-sparsified sketches", TMLR 2023; Chen & Yang, "Accumulations of
projections", JMLR 2021.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import scipy.sparse as sp

from ._base import ParamsMixin

__all__ = [
    "TILE",
    "Sketch",
    "Identity",
    "SubSampling",
    "PSparsified",
    "Accumulation",
    "GaussianSketch",
    "CountSketch",
    "RealizedSketch",
    "check_sketch",
    "sketch_from_config",
    "gram_dot",
]

#: Width (in columns of R) of the tiles in which random sketch matrices are generated.
#: Part of the realisation: changing it changes every drawn sketch.
TILE = 4096


def _tile_rng(seed: int, tile: int) -> np.random.Generator:
    return np.random.default_rng([int(seed), int(tile)])


def _tiles(n: int) -> Iterator[tuple[int, int, int]]:
    for t, start in enumerate(range(0, n, TILE)):
        yield t, start, min(start + TILE, n)


def _positive_int(value: Any, *, owner: str, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{owner}: {name} must be a positive integer, got {value!r}")
    return int(value)


# --------------------------------------------------------------------------- realised


class RealizedSketch:
    """A drawn sketch ``R`` (m × n), stored as its support ``J`` and mixing matrix ``R_mix``.

    Only O(nnz + s') numbers are held: a sub-sampling sketch of a billion rows is its m
    indices. The full ``R`` is built by :meth:`matrix` on request (for auditing).

    Parameters
    ----------
    spec : Sketch
        The specification it was drawn from.
    n : int
        Number of training rows.
    seed : int
        The seed it was drawn from (with ``n``, it determines the sketch).
    m : int
        Number of rows of ``R``.
    support : ndarray of int64, shape (s',), optional
        Sorted non-null columns ``J``; omitted for sketches generated per tile (all n).
    mixing : scipy.sparse matrix of shape (m, s'), optional
        ``R_mix`` of a sparse sketch; omitted for sketches generated per tile.
    scale : ndarray of shape (m,) or None
        Set when ``R_mix`` is diagonal (identity, sub-sampling): ``R_mix = diag(scale)``.

    Attributes
    ----------
    support : ndarray of int64, shape (s',)
        Sorted training rows ``J`` with a non-null column in ``R``.
    """

    def __init__(self, spec: "Sketch", n: int, seed: int, m: int, *, support=None, mixing=None,
                 scale=None):
        self.spec = spec
        self.n = int(n)
        self.seed = int(seed)
        self.m = int(m)
        self.scale = scale
        if mixing is None:  # generated per tile, support = every row
            self.support = np.arange(self.n, dtype=np.int64)
            self._mix_csc = self._mix_t = None
        else:
            self.support = np.asarray(support, dtype=np.int64)
            self._mix_csc = sp.csc_array(mixing)
            # R_mixᵀ (s' × m), CSR so that row slices over the support are cheap.
            self._mix_t = sp.csr_array(self._mix_csc.T)

    @classmethod
    def from_entries(cls, spec: "Sketch", n: int, seed: int, m: int, rows, cols, vals,
                     **kw) -> "RealizedSketch":
        """Build from the non-zeros ``R[rows, cols] += vals`` (duplicates add up)."""
        support, local = np.unique(np.asarray(cols, dtype=np.int64), return_inverse=True)
        R = sp.coo_array((vals, (rows, local)), shape=(m, support.size)).tocsc()
        R.sum_duplicates()
        R.eliminate_zeros()
        keep = np.flatnonzero(np.diff(R.indptr))  # columns whose entries cancelled are dropped
        if keep.size < support.size:
            support, R = support[keep], R[:, keep]
        return cls(spec, n, seed, m, support=support, mixing=R, **kw)

    # -- description ------------------------------------------------------------
    @property
    def support_size(self) -> int:
        """``s' = len(J)``."""
        return int(self.support.size)

    @property
    def is_identity(self) -> bool:
        return isinstance(self.spec, Identity)

    def __repr__(self) -> str:
        return (
            f"RealizedSketch({self.spec!r}, n={self.n}, seed={self.seed}, m={self.m}, "
            f"support_size={self.support_size})"
        )

    def to_config(self) -> dict:
        """JSON-serialisable description: specification, n and seed."""
        return {"spec": self.spec.to_config(), "n": self.n, "seed": self.seed}

    # -- matrices ------------------------------------------------------------------
    def mixing_t_block(self, start: int, stop: int):
        """``R_mix[:, start:stop]ᵀ`` of shape (stop − start, m), in support coordinates.

        Sparse (CSR) for sparse sketches, dense for sketches generated per tile.
        """
        if self._mix_t is not None:
            return self._mix_t[start:stop]
        return self._dense_columns(start, stop).T

    @property
    def mixing(self):
        """``R_mix`` of shape (m, s'); sparse CSR, or dense for generated sketches."""
        if self._mix_csc is not None:
            return sp.csr_array(self._mix_csc)
        return self._dense_columns(0, self.n)

    def matrix(self):
        """``R`` of shape (m, n): scipy.sparse CSR, or an ndarray for generated sketches."""
        return self.columns(0, self.n)

    def _support_span(self, start: int, stop: int) -> tuple[int, int]:
        """Positions ``[a, b)`` of the support rows that fall in training rows ``[start, stop)``."""
        return (int(np.searchsorted(self.support, start)), int(np.searchsorted(self.support, stop)))

    def columns(self, start: int, stop: int):
        """``R[:, start:stop]`` for a block of training rows (sparse CSR, or dense if generated)."""
        if self._mix_csc is None:
            return self._dense_columns(start, stop)
        a, b = self._support_span(start, stop)
        part = self._mix_csc[:, a:b].tocoo()
        cols = self.support[a:b][part.col] - start
        return sp.csr_array((part.data, (part.row, cols)), shape=(self.m, stop - start))

    def _dense_columns(self, start: int, stop: int) -> np.ndarray:
        out = np.empty((self.m, stop - start))
        for t, a, b in _tiles(self.n):
            lo, hi = max(a, start), min(b, stop)
            if lo < hi:
                tile = self.spec._dense_tile(self, t, b - a)
                out[:, lo - start : hi - start] = tile[:, lo - a : hi - a]
        return out

    # -- products used by the streaming pass --------------------------------------
    def support_spans(self, chunk: int) -> list[tuple[int, int]]:
        """Spans ``[a, b)`` of support positions of at most ``chunk`` columns.

        For generated sketches the spans are aligned with the generation tiles so no
        tile is drawn twice for one block.
        """
        s = self.support_size
        if self._mix_csc is None:
            step = max(TILE, (max(chunk, 1) // TILE) * TILE)
        else:
            step = max(int(chunk), 1)
        return [(a, min(a + step, s)) for a in range(0, s, step)]

    def left_rows(self, block: np.ndarray, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        """The non-zero rows of ``R[:, start:stop] @ block``: ``(rows, values)``.

        ``rows`` (sorted int64) are the rows of ``R`` with a non-zero in training rows
        ``start:stop``; ``values`` has shape (len(rows), k). For a sub-sampling sketch that is
        the few landmarks inside the block, so a partial sum of ``B`` stays small.
        """
        if self._mix_csc is None:
            return np.arange(self.m), self._dense_columns(start, stop) @ block
        a, b = self._support_span(start, stop)
        sub = sp.csr_array(self._mix_csc[:, a:b])
        rows = np.flatnonzero(np.diff(sub.indptr))
        # R[:, I] block = R_mix[:, J∩I] block[J∩I]: only the support rows of the block
        values = np.asarray(sub[rows] @ block[self.support[a:b] - start]).reshape(rows.size,
                                                                                 block.shape[1])
        return rows.astype(np.int64), values

    def left_columns(self, block: np.ndarray, start: int, stop: int) -> np.ndarray:
        """``R[:, start:stop] @ block`` of shape (m, k) for training rows ``start:stop``.

        Implements one term of ``B = R K Rᵀ = Σ_I R[:, I] C_I`` (DESIGN §2).
        """
        rows, values = self.left_rows(block, start, stop)
        out = np.zeros((self.m, block.shape[1]))
        out[rows] = values
        return out

    def transpose_dot(self, T: np.ndarray) -> np.ndarray:
        """``R_mixᵀ T`` of shape (s', r): projects landmark kernel columns onto features."""
        if self._mix_t is not None:
            return np.asarray(self._mix_t @ T)
        out = np.empty((self.n, T.shape[1]))
        for t, a, b in _tiles(self.n):
            out[a:b] = self.spec._dense_tile(self, t, b - a).T @ T
        return out


# --------------------------------------------------------------------------- specs


class Sketch(ParamsMixin):
    """Base class of sketch specifications (constructor arguments only)."""

    name: str = ""

    def check(self, n: int, *, argument: str) -> None:
        """Raise ``ValueError`` naming ``argument`` if the sketch cannot be drawn for ``n`` rows."""

    def realize(self, n: int, *, seed: int) -> RealizedSketch:
        """Draw the sketch for ``n`` training rows from ``seed``."""
        raise NotImplementedError

    def to_config(self) -> dict:
        return {"name": self.name, **self.get_params(deep=False)}

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self.get_params() == other.get_params()

    def __hash__(self) -> int:
        return hash((type(self).__name__, tuple(sorted(self.get_params().items()))))

    def _dense_tile(self, sketch: RealizedSketch, tile: int, width: int) -> np.ndarray:
        raise NotImplementedError

    def _m(self) -> int:
        return _positive_int(self.m, owner=type(self).__name__, name="m")


class Identity(Sketch):
    """No sketching: ``R = I_n`` (exact IOKR / KRR)."""

    name = "identity"

    def realize(self, n: int, *, seed: int) -> RealizedSketch:
        n = int(n)
        return RealizedSketch(self, n, seed, n, support=np.arange(n),
                              mixing=sp.identity(n, format="csc"), scale=np.ones(n))


class SubSampling(Sketch):
    """Uniform sub-sampling of ``m`` rows without replacement (Nyström).

    ``R[r, J_r] = sqrt(n/m)``, ``J`` drawn uniformly without replacement and sorted.

    Parameters
    ----------
    m : int
        Number of sampled rows, ``1 <= m <= n``.
    """

    name = "subsampling"

    def __init__(self, m: int):
        self.m = m

    def check(self, n: int, *, argument: str) -> None:
        try:
            m = self._m()
        except ValueError as exc:
            raise ValueError(f"{argument}: {exc}") from None
        if m > n:
            raise ValueError(
                f"{argument}: SubSampling(m={m}) needs m <= n_samples = {n}; "
                f"use a smaller m or Identity() for the exact model"
            )

    def realize(self, n: int, *, seed: int) -> RealizedSketch:
        m = self._m()
        rng = np.random.default_rng([int(seed), 0])
        rows = np.sort(rng.choice(n, size=m, replace=False)).astype(np.int64)
        scale = np.full(m, np.sqrt(n / m))
        return RealizedSketch(self, n, seed, m, support=rows, mixing=sp.diags_array(scale),
                              scale=scale)


class PSparsified(Sketch):
    """p-sparsified sketch: i.i.d. Bernoulli(p) mask times Rademacher or Gaussian entries.

    ``R_ij = b_ij ε_ij / sqrt(m p)`` with ``b_ij ~ Bernoulli(p)`` and ``ε_ij = ±1``
    (``kind="rademacher"``) or ``N(0, 1)`` (``kind="gaussian"``). Only the non-null
    columns (expected ``n(1-(1-p)^m)``) form the support (the decomposition trick of
    El Ahmad et al., TMLR 2023, §3). The mask is drawn sparsely, tile by tile, from
    geometric gaps between non-zeros, so no dense m × n mask ever exists.

    Parameters
    ----------
    m : int
        Number of rows.
    p : float in (0, 1]
        Probability that an entry is non-null.
    kind : {"rademacher", "gaussian"}
    """

    name = "p_sparsified"

    def __init__(self, m: int, p: float, kind: str = "rademacher"):
        self.m = m
        self.p = p
        self.kind = kind

    def _checked(self) -> tuple[int, float]:
        m = self._m()
        p = self.p
        if isinstance(p, bool) or not isinstance(p, numbers.Real) or not 0.0 < float(p) <= 1.0:
            raise ValueError(f"PSparsified: p must be a probability in (0, 1], got {p!r}")
        if self.kind not in ("rademacher", "gaussian"):
            raise ValueError(
                f"PSparsified: kind must be 'rademacher' or 'gaussian', got {self.kind!r}"
            )
        return m, float(p)

    def check(self, n: int, *, argument: str) -> None:
        try:
            self._checked()
        except ValueError as exc:
            raise ValueError(f"{argument}: {exc}") from None

    def realize(self, n: int, *, seed: int) -> RealizedSketch:
        m, p = self._checked()
        rows, cols, vals = [], [], []
        for t, a, b in _tiles(n):
            r, c, v = self._tile_entries(seed, t, b - a, m, p)
            rows.append(r)
            cols.append(c + a)
            vals.append(v)
        return RealizedSketch.from_entries(self, n, seed, m, np.concatenate(rows),
                                           np.concatenate(cols), np.concatenate(vals))

    def _tile_entries(self, seed: int, tile: int, width: int, m: int, p: float):
        """Non-zeros of one tile: positions ``pos = col * m + row`` of a Bernoulli(p) mask."""
        rng = _tile_rng(seed, tile)
        total = m * width
        if p == 1.0:
            pos = np.arange(total, dtype=np.int64)
        else:
            chunks, last = [], -1
            while last < total:
                expect = (total - last) * p
                size = int(expect + 6.0 * np.sqrt(expect) + 16)
                gaps = rng.geometric(p, size=size)
                pos = last + np.cumsum(gaps, dtype=np.int64)
                chunks.append(pos)
                last = int(pos[-1])
            pos = np.concatenate(chunks)
            pos = pos[pos < total]
        if self.kind == "rademacher":
            vals = rng.integers(0, 2, size=pos.size) * 2.0 - 1.0
        else:
            vals = rng.standard_normal(pos.size)
        vals /= np.sqrt(m * p)
        return pos % m, pos // m, vals


class Accumulation(Sketch):
    """Accumulation sketch: the sum of ``q`` signed uniform sub-sampling matrices.

    Each of the ``m`` rows receives ``q`` entries ``±sqrt(n/(m q))`` at columns drawn
    uniformly with replacement (Chen & Yang, JMLR 2021, eq. 2; ``p_j = 1/n``).
    Repeated columns within a row add up.

    Parameters
    ----------
    m : int
        Number of rows.
    q : int
        Number of accumulated sub-sampling matrices.
    """

    name = "accumulation"

    def __init__(self, m: int, q: int = 2):
        self.m = m
        self.q = q

    def check(self, n: int, *, argument: str) -> None:
        try:
            self._m()
            _positive_int(self.q, owner="Accumulation", name="q")
        except ValueError as exc:
            raise ValueError(f"{argument}: {exc}") from None

    def realize(self, n: int, *, seed: int) -> RealizedSketch:
        m = self._m()
        q = _positive_int(self.q, owner="Accumulation", name="q")
        rng = np.random.default_rng([int(seed), 0])
        cols = rng.integers(0, n, size=(m, q))
        signs = rng.integers(0, 2, size=(m, q)) * 2.0 - 1.0
        vals = signs * np.sqrt(n / (m * q))
        return RealizedSketch.from_entries(self, n, seed, m, np.repeat(np.arange(m), q),
                                           cols.ravel(), vals.ravel())


class GaussianSketch(Sketch):
    """Dense Gaussian sketch ``R_ij ~ N(0, 1/m)``, generated tile by tile, never whole.

    Parameters
    ----------
    m : int
        Number of rows.
    """

    name = "gaussian"

    def __init__(self, m: int):
        self.m = m

    def check(self, n: int, *, argument: str) -> None:
        try:
            self._m()
        except ValueError as exc:
            raise ValueError(f"{argument}: {exc}") from None

    def realize(self, n: int, *, seed: int) -> RealizedSketch:
        return RealizedSketch(self, n, seed, self._m())

    def _dense_tile(self, sketch: RealizedSketch, tile: int, width: int) -> np.ndarray:
        g = _tile_rng(sketch.seed, tile).standard_normal((sketch.m, width))
        g /= np.sqrt(sketch.m)
        return g


class CountSketch(Sketch):
    """CountSketch: column ``j`` has a single ``±1`` at a uniformly drawn row ``h(j)``.

    Parameters
    ----------
    m : int
        Number of rows (buckets).
    """

    name = "count"

    def __init__(self, m: int):
        self.m = m

    def check(self, n: int, *, argument: str) -> None:
        try:
            self._m()
        except ValueError as exc:
            raise ValueError(f"{argument}: {exc}") from None

    def realize(self, n: int, *, seed: int) -> RealizedSketch:
        m = self._m()
        rows, signs = [], []
        for t, a, b in _tiles(n):
            rng = _tile_rng(seed, t)
            rows.append(rng.integers(0, m, size=b - a))
            signs.append(rng.integers(0, 2, size=b - a) * 2.0 - 1.0)
        return RealizedSketch.from_entries(self, n, seed, m, np.concatenate(rows), np.arange(n),
                                           np.concatenate(signs))


SKETCHES: dict[str, type[Sketch]] = {
    cls.name: cls
    for cls in (Identity, SubSampling, PSparsified, Accumulation, GaussianSketch, CountSketch)
}


def check_sketch(sketch: Any, *, argument: str) -> Sketch:
    """Resolve a sketch argument: ``None`` means :class:`Identity` (exact)."""
    if sketch is None:
        return Identity()
    if isinstance(sketch, Sketch):
        return sketch
    if isinstance(sketch, dict):
        return sketch_from_config(sketch, argument=argument)
    raise ValueError(
        f"{argument}: expected None (exact) or a distsketch.sketches object such as "
        f"SubSampling(m=...), got {sketch!r}"
    )


def sketch_from_config(cfg: dict, *, argument: str = "sketch") -> Sketch:
    """Inverse of :meth:`Sketch.to_config`."""
    cfg = dict(cfg)
    name = cfg.pop("name", None)
    if name not in SKETCHES:
        raise ValueError(f"{argument}: unknown sketch {name!r}; use one of {sorted(SKETCHES)}")
    try:
        return SKETCHES[name](**cfg)
    except TypeError as exc:
        raise ValueError(f"{argument}: bad parameters for sketch {name!r}: {exc}") from None


# --------------------------------------------------------------------------- block math


def gram_dot(
    kernel: Callable,
    A,
    landmarks,
    sketch: RealizedSketch | None = None,
    *,
    right: np.ndarray | None = None,
    chunk: int = 2048,
    dtype: Any = np.float64,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """``Σ_c k(A, L_c) F_c`` over spans ``c`` of the landmarks, without a full Gram block.

    With ``sketch`` the factor is ``F = R_mixᵀ`` and the result is the block
    ``k(A, X_J) R_mixᵀ`` of ``K Rᵀ`` (DESIGN §2, "streaming pass"); with ``right`` it is
    ``k(A, L) F`` for a dense ``F`` (features of new points); with neither it is
    ``k(A, L)`` itself. The kernel block held at any time is ``len(A) × chunk``.

    When each output column is one scaled kernel column (a diagonal ``R_mix``, e.g.
    sub-sampling, or no factor), the kernel writes straight into the result
    (``Kernel._into``; the Gaussian kernel in cache-sized row tiles, scaling included).

    Parameters
    ----------
    kernel : Kernel
        ``kernel(A, B, out=None) -> (len(A), len(B))``.
    A : ndarray or sparse, shape (b, d)
    landmarks : ndarray or sparse, shape (s', d)
    sketch : RealizedSketch, optional
    right : ndarray of shape (s', k), optional
        With neither ``sketch`` nor ``right``, ``F`` is the identity.
    chunk : int
        Landmark columns per kernel block.
    dtype : {float64, float32}
        Of the result. Written kernel columns are float32 values of the kernel (exponential
        kernels evaluate ``exp`` in float32, see :mod:`distsketch.kernels`); mixed columns
        are summed in float64 and rounded once.
    out : ndarray of shape (b, k) and ``dtype``, optional
        Written and returned instead of a new array.

    Returns
    -------
    ndarray of shape (b, k), ``dtype``
    """
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
        out = np.empty((b, k), dtype=dtype) if out is None else out
        for a, c in spans:
            kernel._into(A, landmarks[a:c], out[:, a:c], sketch.scale[a:c] if diagonal else None)
        return out
    acc = np.zeros((b, k))
    for a, c in spans:
        Kc = kernel(A, landmarks[a:c])
        if sketch is not None:
            acc += Kc @ sketch.mixing_t_block(a, c)
        else:
            acc += Kc @ right[a:c]
    if out is not None:
        np.copyto(out, acc)
        return out
    return acc if dtype == np.float64 else acc.astype(dtype)
