"""The sketches drawn in one go: the identity, uniform sub-sampling and accumulation.

Each is a :class:`~distsketch.sketches.base.Sketch` specification whose ``realize`` draws a
:class:`~distsketch.sketches.base.SparseSketch` from ``default_rng([seed, 0])``; the table of
every sketch's support and mixing is in :mod:`distsketch.sketches.base`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

from .base import RealizedSketch, Sketch, SparseSketch, positive_int

__all__ = ["Identity", "SubSampling", "Accumulation"]


class Identity(Sketch):
    """No sketching: ``R = I_n`` (exact IOKR / KRR)."""

    name = "identity"
    exact = True

    def deterministic(self, n: int) -> bool:
        return True

    def realize(self, n: int, *, seed: int, data: Any = None) -> RealizedSketch:
        n = int(n)
        return SparseSketch(self, n, seed, n, support=np.arange(n),
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
    selects_landmarks = True

    def __init__(self, m: int) -> None:
        self.m = m

    def check(self, n: int, *, argument: str) -> None:
        self._check_rows(n, argument=argument)

    def deterministic(self, n: int) -> bool:
        return self.m == n

    def realize(self, n: int, *, seed: int, data: Any = None) -> RealizedSketch:
        m = self._m()
        rng = np.random.default_rng([int(seed), 0])
        rows = np.sort(rng.choice(n, size=m, replace=False)).astype(np.int64)
        scale = np.full(m, np.sqrt(n / m))
        return SparseSketch(self, n, seed, m, support=rows, mixing=sp.diags_array(scale),
                            scale=scale)


class Accumulation(Sketch):
    """Accumulation sketch: the sum of ``q`` signed uniform sub-sampling matrices.

    Each of the ``m`` rows receives ``q`` entries ``±sqrt(n/(m q))`` at columns drawn
    uniformly with replacement (Chen & Yang, AISTATS 2021, eq. 2; ``p_j = 1/n``).
    Repeated columns within a row add up.

    Parameters
    ----------
    m : int
        Number of rows.
    q : int
        Number of accumulated sub-sampling matrices.
    """

    name = "accumulation"

    def __init__(self, m: int, q: int = 2) -> None:
        self.m = m
        self.q = q

    def check(self, n: int, *, argument: str) -> None:
        try:
            positive_int(self.q, owner="Accumulation", name="q")
        except ValueError as exc:
            raise ValueError(f"{argument}: {exc}") from None
        self._check_rows(n, argument=argument)

    def realize(self, n: int, *, seed: int, data: Any = None) -> RealizedSketch:
        m = self._m()
        q = positive_int(self.q, owner="Accumulation", name="q")
        rng = np.random.default_rng([int(seed), 0])
        cols = rng.integers(0, n, size=(m, q))
        signs = rng.integers(0, 2, size=(m, q)) * 2.0 - 1.0
        vals = signs * np.sqrt(n / (m * q))
        return SparseSketch.from_entries(self, n, seed, m, np.repeat(np.arange(m), q),
                                         cols.ravel(), vals.ravel())
