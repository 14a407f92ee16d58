"""The separable losses, summed over outputs: :class:`Pinball`, the quantile loss.

``Σ_j ρ_{τ_j}(y_j − f_j)`` with ``ρ_τ(u) = max(τu, (τ − 1)u)`` (quantile regression, one level
``τ_j`` per output), conjugate ``0`` on the box ``β_j ∈ [−τ_j, 1 − τ_j]``. Not differentiable:
the solver smooths it (Moreau envelope, a quadratic band ``[μ(−τ_j), μ(1 − τ_j)]`` around 0),
and its kinks are entry-wise; its proximal operator soft-thresholds each entry with its two
slopes.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence

import numpy as np

from .base import Curvature, Loss

__all__ = ["Pinball"]


# --------------------------------------------------------------------------- separable losses


class Pinball(Loss):
    """Pinball (quantile) loss ``Σ_j ρ_{τ_j}(y_j − f_j)``, ``ρ_τ(u) = max(τu, (τ − 1)u)``.

    Parameters
    ----------
    tau : float in (0, 1), or a sequence of them (one per output)
        Quantile level(s). A scalar applies to every output.
    """

    name = "pinball"
    smoothed = True
    projects_dual = True

    def __init__(self, tau: float | Sequence[float] = 0.5) -> None:
        self.tau = tau

    def default_outputs(self) -> int:
        return len(np.atleast_1d(self.tau))

    def project_dual(self, alpha: np.ndarray) -> np.ndarray:
        """Entries of ``α`` onto ``[−τ_j, 1 − τ_j]``."""
        lo, hi = self.entry_bounds(alpha.shape[1])
        return np.clip(alpha, lo, hi)

    def taus(self, d: int) -> np.ndarray:
        tau = np.atleast_1d(np.asarray(self.tau, dtype=np.float64))
        return np.full(d, tau[0]) if tau.size == 1 else tau

    def check(self, d: int) -> None:
        tau = self.tau
        values = list(tau) if isinstance(tau, (list, tuple, np.ndarray)) else [tau]
        for v in values:
            if (isinstance(v, bool) or not isinstance(v, numbers.Real) or not np.isfinite(v)
                    or not 0.0 < v < 1.0):
                raise ValueError(f"loss: Pinball(tau={tau!r}): every tau must lie strictly "
                                 f"between 0 and 1")
        if len(values) not in (1, d):
            raise ValueError(f"loss: Pinball(tau={tau!r}): give one tau, or one per output "
                             f"({d} outputs)")

    def lipschitz_sq(self, d: int) -> float:
        tau = self.taus(d)
        return float(np.sum(np.maximum(tau, 1.0 - tau) ** 2))

    def entry_bounds(self, d: int) -> tuple[np.ndarray, np.ndarray]:
        return self._bounds(d)

    def band(self, R: np.ndarray, mu: float, width: float = 0.0
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        if mu <= 0:
            return None
        lo, hi = self._bounds(R.shape[1])
        near = (R >= mu * lo) & (R <= mu * hi)
        if width > 0:
            near |= np.abs(R) <= width
        rows, cols = np.nonzero(near)
        return rows, cols, np.zeros(len(rows))

    def _bounds(self, d):
        tau = self.taus(d)
        return -tau, 1.0 - tau

    def value(self, R: np.ndarray, mu: float = 0.0) -> np.ndarray:
        lo, hi = self._bounds(R.shape[1])
        if mu <= 0:
            return np.maximum(lo * R, hi * R).sum(axis=1)
        a, b = mu * lo, mu * hi  # the quadratic band [μ·lo, μ·hi] around 0
        v = np.where(R < a, lo * R - 0.5 * mu * lo * lo,
                     np.where(R > b, hi * R - 0.5 * mu * hi * hi, R * R / (2 * mu)))
        return v.sum(axis=1)

    def gradient(self, R: np.ndarray, mu: float = 0.0) -> np.ndarray:
        lo, hi = self._bounds(R.shape[1])
        if mu <= 0:
            return np.where(R > 0, hi, np.where(R < 0, lo, 0.0)) + np.zeros_like(R)
        return np.clip(R / mu, lo, hi)

    def prox(self, V: np.ndarray, t: float) -> np.ndarray:
        # entry-wise soft thresholding with the asymmetric slopes lo = −τ, hi = 1 − τ
        lo, hi = self._bounds(V.shape[1])
        t = float(t)
        return np.where(V > t * hi, V - t * hi, np.where(V < t * lo, V - t * lo, 0.0))

    def curvature_kind(self, d: int, *, exact: bool = True) -> str:
        return "scalar" if d == 1 else "diag"

    def level_counts(self, R: np.ndarray, mus: np.ndarray) -> np.ndarray | None:
        if R.shape[1] != 1:
            return None
        # in the band μ·lo ≤ r ≤ μ·hi (lo = −τ < 0 < hi = 1 − τ): curvature 1/μ, else 0;
        # r is in it when q = max(r/lo, r/hi) ≤ μ (counted to rounding at the band's edges)
        lo, hi = self._bounds(1)
        r = R[:, 0]
        q = np.where(r >= 0, r / hi[0], r / lo[0])
        band = np.searchsorted(np.sort(q), mus, side="right").astype(np.float64)
        return np.stack([len(R) - band, band], axis=1)

    def curvature_levels(self, d: int, mu: float = 0.0, *, exact: bool = True) -> tuple:
        return (0.0, 1.0 / mu) if exact and mu > 0 else (0.0,)

    def curvature(self, R: np.ndarray, mu: float = 0.0, *, exact: bool = True,
                  base: float | None = None) -> Curvature:
        lo, hi = self._bounds(R.shape[1])
        base = 0.0 if base is None else float(base)
        if mu <= 0:
            w = np.zeros_like(R)
        else:
            band = (R >= mu * lo) & (R <= mu * hi)
            if exact:
                w = band / mu
            else:  # the secant weight α/r outside the band (IRLS), 1/μ inside
                safe = np.where(band, 1.0, R)
                w = np.where(band, 1.0 / mu, np.clip(R / mu, lo, hi) / safe)
        if base:
            w = w - base
        if R.shape[1] == 1:
            rows = np.flatnonzero(w[:, 0])
            return Curvature(base, "scalar", rows, w[rows, 0])
        rows = np.flatnonzero(w.any(axis=1))
        return Curvature(base, "diag", rows, w[rows])

    def dual_scale(self, c: np.ndarray) -> np.ndarray | float:
        lo, hi = self._bounds(len(c))
        t = np.ones(len(c))
        pos, neg = c > 0, c < 0
        t[pos] = lo[pos] / (lo[pos] - c[pos])
        t[neg] = hi[neg] / (hi[neg] - c[neg])
        return t

    def conjugate_sum(self, stats: dict, t: np.ndarray | float, c: np.ndarray, n: int,
                      mu: float) -> float:
        if not mu:
            return 0.0
        t = np.asarray(t, dtype=np.float64)
        return 0.5 * mu * float(np.sum(t * t * (stats["aa"] - n * c * c)))
