"""Sketches drawn tile by tile: column tile ``t`` of ``R`` from ``default_rng([seed, t])``.

The dense realisation :class:`TiledSketch` (``R_mix`` generated in tiles of :data:`TILE`
columns, never whole) and the specifications that draw their random entries per tile:
:class:`PSparsified`, :class:`GaussianSketch` (a :class:`TiledSketch`) and
:class:`CountSketch`. Any worker regenerates any block of columns from ``(seed, t)``, so the
draw never depends on how the training rows are chunked. The other sketches and the base
classes: :mod:`distsketch.sketches.base`.

References: El Ahmad, Laforgue, d'Alché-Buc, "Fast kernel methods for generic Lipschitz
losses via p-sparsified sketches", TMLR 2023.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterator
from typing import Any

import numpy as np

from .._hashing import fingerprint
from ..backends.base import backend_of
from .base import RealizedSketch, Sketch, SparseSketch

__all__ = ["TILE", "TiledSketch", "PSparsified", "GaussianSketch", "CountSketch"]

#: Width (in columns of R) of the tiles in which random sketch matrices are generated.
#: Part of the realisation: changing it changes every drawn sketch.
TILE = 4096


def _tile_rng(seed: int, tile: int) -> np.random.Generator:
    return np.random.default_rng([int(seed), int(tile)])


def _tiles(n: int) -> Iterator[tuple[int, int, int]]:
    for t, start in enumerate(range(0, n, TILE)):
        yield t, start, min(start + TILE, n)


class TiledSketch(RealizedSketch):
    """A dense ``R_mix`` over every training row, generated in tiles of :data:`TILE` columns
    by ``spec.tile(seed, t, m, width)``, so any worker regenerates any block of columns from
    ``(seed, t)`` and the whole matrix never exists.

    Parameters
    ----------
    spec : Sketch
        Implements ``tile(seed, t, m, width) -> ndarray (m, width)``.
    n, seed, m : int
    drawn : int, optional
        Rows the tiles were drawn for when fewer than ``n`` (a grown sketch,
        :meth:`~distsketch.sketches.RealizedSketch.grown`): the columns beyond are zero.
    """

    kind = "tiled"

    def __init__(self, spec: Sketch, n: int, seed: int, m: int, *,
                 drawn: int | None = None) -> None:
        self.spec = spec
        self.n = int(n)
        self.seed = int(seed)
        self.m = int(m)
        self.drawn = None if drawn is None or int(drawn) == self.n else int(drawn)

    @property
    def support(self) -> np.ndarray:
        return np.arange(self.rows_drawn, dtype=np.int64)

    @property
    def support_size(self) -> int:
        return self.rows_drawn

    def _support_span(self, start: int, stop: int) -> tuple[int, int]:
        d = self.rows_drawn
        return min(start, d), min(stop, d)

    def _grown(self, n: int) -> "TiledSketch":
        return TiledSketch(self.spec, n, self.seed, self.m, drawn=self.rows_drawn)

    @property
    def mixing(self):
        return self._dense_columns(0, self.rows_drawn)

    def mixing_t_block(self, start: int, stop: int) -> np.ndarray:
        """``R_mix[:, start:stop]ᵀ``: a transposed view (Fortran-ordered); a device backend keeps
        that layout (``distsketch.backends.cuda.CupyBackend.operand``).

        Parameters
        ----------
        start, stop : int
            Support positions (a span of :meth:`support_spans`).

        Returns
        -------
        ndarray of shape (stop − start, m)
        """
        return self._dense_columns(start, stop).T

    def columns(self, start: int, stop: int) -> np.ndarray:
        return self._dense_columns(start, stop)

    def _dense_columns(self, start: int, stop: int) -> np.ndarray:
        out = np.empty((self.m, stop - start))
        if stop > self.rows_drawn:  # a grown sketch: zero columns beyond the rows drawn
            out[:, max(self.rows_drawn - start, 0):] = 0.0
        for t, a, b in _tiles(self.rows_drawn):
            lo, hi = max(a, start), min(b, stop)
            if lo < hi:
                tile = self.spec.tile(self.seed, t, self.m, b - a)
                out[:, lo - start : hi - start] = tile[:, lo - a : hi - a]
        return out

    def support_spans(self, chunk: int) -> list[tuple[int, int]]:
        """Spans ``[a, b)`` of about ``chunk`` columns, aligned with the generation tiles, so no
        tile is drawn twice for one block.

        Parameters
        ----------
        chunk : int
            Columns per span wanted (rounded to a multiple of :data:`TILE`, at least one).

        Returns
        -------
        list of (int, int)
            Consecutive spans covering ``range(n)``.
        """
        s = self.rows_drawn
        step = max(TILE, (max(chunk, 1) // TILE) * TILE)
        return [(a, min(a + step, s)) for a in range(0, s, step)]

    def left_rows(self, block: Any, start: int, stop: int) -> tuple[np.ndarray, Any]:
        be = backend_of(block)
        if start >= self.rows_drawn:  # rows a grown sketch has zero columns for
            return np.zeros(0, np.int64), be.xp.zeros((0, block.shape[1]))
        return np.arange(self.m), be.operand(self._dense_columns(start, stop)) @ block

    def transpose_dot(self, T: np.ndarray) -> np.ndarray:
        out = np.empty((self.rows_drawn, T.shape[1]))
        for t, a, b in _tiles(self.rows_drawn):
            out[a:b] = self.spec.tile(self.seed, t, self.m, b - a).T @ T
        return out

    def _tile_fingerprints(self) -> list[str]:
        """Fingerprints of the first and last generation tiles."""
        tiles = list(_tiles(self.rows_drawn))
        return [fingerprint(self.spec.tile(self.seed, t, self.m, b - a))
                for t, a, b in {tiles[0], tiles[-1]}]

    def _state(self):
        # The tiles are a pure function of (seed, t): storing the dense m × n mixing would add
        # nothing but size. What is stored is a fingerprint of two tiles, checked on loading, so
        # a generator that draws differently (another numpy) is refused, never used silently.
        meta = {"tile_fingerprints": sorted(self._tile_fingerprints())}
        if self.drawn is not None:
            meta["drawn"] = self.drawn
        return {}, meta

    @classmethod
    def _from_state(cls, spec, meta, arrays):
        sketch = cls(spec, meta["n"], meta["seed"], meta["m"], drawn=meta.get("drawn"))
        if sorted(sketch._tile_fingerprints()) != meta.get("tile_fingerprints"):
            raise ValueError(
                f"saved sketch: {spec!r} regenerated from its seed differs from the sketch the "
                f"model was fitted with (a numpy whose random generator draws differently); "
                f"refit the model with this installation")
        return sketch


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

    def __init__(self, m: int, p: float, kind: str = "rademacher") -> None:
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
        self._check_rows(n, argument=argument)

    def realize(self, n: int, *, seed: int, data: Any = None) -> RealizedSketch:
        m, p = self._checked()
        rows, cols, vals = [], [], []
        for t, a, b in _tiles(n):
            r, c, v = self._tile_entries(seed, t, b - a, m, p)
            rows.append(r)
            cols.append(c + a)
            vals.append(v)
        return SparseSketch.from_entries(self, n, seed, m, np.concatenate(rows),
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


class GaussianSketch(Sketch):
    """Dense Gaussian sketch ``R_ij ~ N(0, 1/m)``, generated tile by tile, never whole.

    Parameters
    ----------
    m : int
        Number of rows.
    """

    name = "gaussian"

    def __init__(self, m: int) -> None:
        self.m = m

    def check(self, n: int, *, argument: str) -> None:
        self._check_rows(n, argument=argument)

    def realize(self, n: int, *, seed: int, data: Any = None) -> RealizedSketch:
        return TiledSketch(self, n, seed, self._m())

    def tile(self, seed: int, t: int, m: int, width: int) -> np.ndarray:
        g = _tile_rng(seed, t).standard_normal((m, width))
        g /= np.sqrt(m)
        return g


class CountSketch(Sketch):
    """CountSketch: column ``j`` has a single ``±1`` at a uniformly drawn row ``h(j)``.

    Parameters
    ----------
    m : int
        Number of rows (buckets).
    """

    name = "count"

    def __init__(self, m: int) -> None:
        self.m = m

    def check(self, n: int, *, argument: str) -> None:
        self._check_rows(n, argument=argument)

    def realize(self, n: int, *, seed: int, data: Any = None) -> RealizedSketch:
        m = self._m()
        rows, signs = [], []
        for t, a, b in _tiles(n):
            rng = _tile_rng(seed, t)
            rows.append(rng.integers(0, m, size=b - a))
            signs.append(rng.integers(0, 2, size=b - a) * 2.0 - 1.0)
        return SparseSketch.from_entries(self, n, seed, m, np.concatenate(rows), np.arange(n),
                                         np.concatenate(signs))
