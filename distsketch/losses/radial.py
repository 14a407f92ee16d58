"""The radial losses: functions ``p(‖r‖₂)`` of the residual's norm (the scalar loss for d = 1).

:class:`Squared` (``½t²``), :class:`Huber` (``½t²`` if ``t ≤ κ`` else ``κt − κ²/2``) and
:class:`EpsilonInsensitive` (``max(t − ε, 0)``), with ``t = ‖r‖₂``. Their Hessian is
``g(t)·I + (p''(t) − g(t))·r̂r̂ᵀ`` with ``g = p'(t)/t``; conjugates
``h*(β) = (q/2)‖β‖² + e‖β‖`` on the ball ``‖β‖ ≤ ρ`` (Squared: q = 1, ρ = ∞; Huber: q = 1,
ρ = κ; ε-insensitive: e = ε, ρ = 1). Their proximal operator shrinks ``‖v‖`` by the 1-d prox
of the profile. The ε-insensitive loss is not differentiable and is smoothed (Moreau
envelope); its kinks are entry-wise for d = 1 and on the sphere ``‖r‖ = ε`` for d > 1.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

from .base import Curvature, Loss

__all__ = ["Squared", "Huber", "EpsilonInsensitive"]


def _positive(value: Any, *, name: str, loss: str, allow_zero: bool = False) -> float:
    ok = (isinstance(value, numbers.Real) and not isinstance(value, bool)
          and np.isfinite(value) and (value >= 0 if allow_zero else value > 0))
    if not ok:
        what = "a non-negative" if allow_zero else "a positive"
        raise ValueError(f"loss: {loss}({name}={value!r}): {name} must be {what} finite number")
    return float(value)


# --------------------------------------------------------------------------- radial losses


class _Radial(Loss):
    """A loss ``p(‖r‖)``; subclasses give the profile ``p`` and its derivatives."""

    projects_dual = True

    def project_dual(self, alpha: np.ndarray) -> np.ndarray:
        """Rows of ``α`` onto the ball of the conjugate's radius (κ for Huber, 1 for
        ε-insensitive; none for squared)."""
        radius = self._conj()[2]
        if not np.isfinite(radius):
            return alpha
        norms = self._norms(alpha)
        over = norms > radius
        if over.any():
            alpha = alpha.copy()
            alpha[over] *= (radius / norms[over])[:, None]
        return alpha

    #: conjugate ``(q/2)‖β‖² + e‖β‖`` on ``‖β‖ ≤ radius``
    def _conj(self) -> tuple[float, float, float]:
        raise NotImplementedError

    def _profile(self, t: np.ndarray, mu: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(p(t), g(t) = p'(t)/t, p''(t))`` elementwise (the limit of ``g`` at 0)."""
        raise NotImplementedError

    _base = 0.0  # ∇²h = base·I where the profile is quadratic-free (Huber, squared: 1)
    _other: float | None = None  # another level of the scalar loss (Huber: 0 beyond κ)

    @staticmethod
    def _norms(R: np.ndarray) -> np.ndarray:
        return np.sqrt(np.einsum("ij,ij->i", R, R)) if R.shape[1] > 1 else np.abs(R[:, 0])

    def value(self, R: np.ndarray, mu: float = 0.0) -> np.ndarray:
        return self._profile(self._norms(R), mu)[0]

    def _prox_norm(self, s: np.ndarray, t: float) -> np.ndarray:
        """The 1-d prox of ``t·p`` on ``[0, ∞)`` at ``s = ‖v‖`` (the norm of the minimiser)."""
        raise NotImplementedError

    def prox(self, V: np.ndarray, t: float) -> np.ndarray:
        # radial: the minimiser is along v, its norm the 1-d prox of the profile
        s = self._norms(V)
        q = self._prox_norm(s, float(t))
        return V * np.where(s > 0, q / np.where(s > 0, s, 1.0), 0.0)[:, None]

    def gradient(self, R: np.ndarray, mu: float = 0.0) -> np.ndarray:
        return R * self._profile(self._norms(R), mu)[1][:, None]

    def curvature_kind(self, d: int, *, exact: bool = True) -> str:
        return "scalar" if d == 1 or not exact else "full"

    def curvature_levels(self, d: int, mu: float = 0.0, *, exact: bool = True) -> tuple:
        return (self._base,) if d > 1 or self._other is None else (self._base, self._other)

    def curvature(self, R: np.ndarray, mu: float = 0.0, *, exact: bool = True,
                  base: float | None = None) -> Curvature:
        t = self._norms(R)
        _, g, p2 = self._profile(t, mu)
        d = R.shape[1]
        base = self._base if base is None else float(base)
        if d == 1 and (exact or not self.smoothed):
            w = p2 - base
            rows = np.flatnonzero(w)
            return Curvature(base, "scalar", rows, w[rows])
        if not exact:  # a scalar majorant: the largest eigenvalue of g I + (p2 − g) r̂r̂ᵀ
            w = np.maximum(g, p2) - base
            rows = np.flatnonzero(w)
            return Curvature(base, "scalar", rows, w[rows])
        rows = np.flatnonzero((g != base) | (p2 != base))
        t_r = t[rows]
        safe = np.where(t_r > 0, t_r, 1.0)
        u = R[rows] / safe[:, None]
        vals = (g[rows] - base)[:, None, None] * np.eye(d) \
            + (p2[rows] - g[rows])[:, None, None] * (u[:, :, None] * u[:, None, :])
        return Curvature(base, "full", rows, vals)

    def dual_scale(self, c: np.ndarray) -> np.ndarray | float:
        _, _, radius = self._conj()
        nc = float(np.linalg.norm(c))
        if not np.isfinite(radius) or nc == 0.0:
            return 1.0
        return radius / (radius + nc)

    def conjugate_sum(self, stats: dict, t: np.ndarray | float, c: np.ndarray, n: int,
                      mu: float) -> float:
        q, e, _ = self._conj()
        q = q + mu
        total = 0.0
        if q:
            total += 0.5 * q * float(t) ** 2 * float(np.sum(stats["aa"]) - n * np.dot(c, c))
        if e:
            total += e * float(t) * (float(stats["an"]) + n * float(np.linalg.norm(c)))
        return total


class Squared(_Radial):
    """``h(r) = ½‖r‖²`` (kernel ridge regression: equals :class:`~distsketch.SketchedKRR`)."""

    name = "squared"
    normal_equations = True
    _base = 1.0

    def _conj(self):
        return 1.0, 0.0, np.inf

    def _profile(self, t, mu):
        return 0.5 * t * t, np.ones_like(t), np.ones_like(t)

    def _prox_norm(self, s, t):
        return s / (1.0 + t)


class Huber(_Radial):
    """κ-Huber: ``½‖r‖²`` if ``‖r‖ ≤ κ``, else ``κ‖r‖ − κ²/2`` (robust regression).

    Parameters
    ----------
    kappa : float > 0
        Threshold between the quadratic and the linear part, in units of the targets
        (κ → ∞: the squared loss).
    """

    name = "huber"
    _base = 1.0
    _other = 0.0

    def __init__(self, kappa: float = 1.0) -> None:
        self.kappa = kappa

    def check(self, d: int) -> None:
        _positive(self.kappa, name="kappa", loss="Huber")

    def _conj(self):
        return 1.0, 0.0, float(self.kappa)

    def _profile(self, t, mu):
        k = float(self.kappa)
        inside = t <= k
        safe = np.where(inside, 1.0, t)
        p = np.where(inside, 0.5 * t * t, k * t - 0.5 * k * k)
        g = np.where(inside, 1.0, k / safe)
        p2 = inside.astype(np.float64)
        return p, g, p2

    def value(self, R: np.ndarray, mu: float = 0.0) -> np.ndarray:
        # the profile alone (the sweeps' line-search grid evaluates it 13 times per block)
        t = self._norms(R)
        k = float(self.kappa)
        return np.where(t <= k, 0.5 * t * t, k * t - 0.5 * k * k)

    def _prox_norm(self, s, t):
        k = float(self.kappa)  # quadratic part while s/(1 + t) ≤ κ, else a shift by tκ
        return np.where(s <= k * (1.0 + t), s / (1.0 + t), s - t * k)


class EpsilonInsensitive(_Radial):
    """ε-insensitive: ``max(‖r‖ − ε, 0)`` (support vector regression; multi-output: ``‖r‖₂``).

    Parameters
    ----------
    epsilon : float >= 0
        Width of the insensitive tube, in units of the targets.
    """

    name = "epsilon_insensitive"
    smoothed = True

    def __init__(self, epsilon: float = 0.1) -> None:
        self.epsilon = epsilon

    def check(self, d: int) -> None:
        _positive(self.epsilon, name="epsilon", loss="EpsilonInsensitive", allow_zero=True)

    def _conj(self):
        return 0.0, float(self.epsilon), 1.0

    def lipschitz_sq(self, d: int) -> float:
        return 1.0

    def entry_bounds(self, d: int) -> tuple[np.ndarray, np.ndarray]:
        return np.full(d, -1.0), np.full(d, 1.0)

    def curvature_levels(self, d: int, mu: float = 0.0, *, exact: bool = True) -> tuple:
        return (0.0, 1.0 / mu) if d == 1 and mu > 0 else (0.0,)

    def level_counts(self, R: np.ndarray, mus: np.ndarray) -> np.ndarray | None:
        if R.shape[1] != 1:
            return None
        # in the band 0 < |r| − ε ≤ μ: curvature 1/μ; elsewhere 0
        over = np.abs(R[:, 0]) - float(self.epsilon)
        band = np.searchsorted(np.sort(over[over > 0]), mus, side="right").astype(np.float64)
        return np.stack([len(R) - band, band], axis=1)

    def kink_bounds(self, cols: np.ndarray, kink: np.ndarray, d: int
                    ) -> tuple[np.ndarray, np.ndarray]:
        # ∂h at r = +ε is [0, 1], at r = −ε it is [−1, 0]; at r = 0 (ε = 0) it is [−1, 1]
        kink = np.asarray(kink, dtype=np.float64)
        return np.where(kink > 0, 0.0, -1.0), np.where(kink < 0, 0.0, 1.0)

    def band(self, R: np.ndarray, mu: float, width: float = 0.0
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        if R.shape[1] != 1 or mu <= 0:
            return None
        r = R[:, 0]
        eps = float(self.epsilon)
        if width == math.inf and eps > 0:  # every row at both kinks, +ε then −ε
            rows = np.repeat(np.arange(len(r)), 2)
            return rows, np.zeros(len(rows), dtype=np.int64), np.tile([eps, -eps], len(r))
        over = np.abs(r) - eps
        near = (over > 0) & (over <= mu)
        if width > 0:  # within half the tube of ±ε at most: the sign of r names the kink
            near |= np.abs(over) <= (min(width, 0.5 * eps) if eps > 0 else width)
        rows = np.flatnonzero(near)
        return rows, np.zeros(len(rows), dtype=np.int64), np.sign(r[rows]) * float(self.epsilon)

    def sphere_band(self, R: np.ndarray, mu: float) -> np.ndarray | None:
        eps = float(self.epsilon)
        if R.shape[1] == 1 or mu <= 0 or eps <= 0:  # ε = 0: a cone, not a sphere
            return None
        over = self._norms(R) - eps
        return np.flatnonzero((over > 0) & (over <= mu))

    def value(self, R: np.ndarray, mu: float = 0.0) -> np.ndarray:
        # the profile alone, as _profile's (the sweeps' line-search grid evaluates it 13
        # times per block): 0 in the tube, over²/(2μ) in the band, over − μ/2 beyond
        over = self._norms(R) - float(self.epsilon)
        if mu <= 0:
            return np.maximum(over, 0.0)
        return np.where(over <= mu, np.square(np.maximum(over, 0.0)) / (2 * mu), over - 0.5 * mu)

    def _prox_norm(self, s, t):
        eps = float(self.epsilon)  # inside the tube: kept; within t of it: onto it; else shifted
        return np.where(s <= eps, s, np.where(s <= eps + t, eps, s - t))

    def _profile(self, t, mu):
        eps = float(self.epsilon)
        safe = np.where(t > 0, t, 1.0)
        over = t - eps
        if mu <= 0:
            out = over > 0
            return (np.maximum(over, 0.0), np.where(out, 1.0 / safe, 0.0),
                    np.zeros_like(t))
        band = (over > 0) & (over <= mu)
        beyond = over > mu
        p = np.where(band, over * over / (2 * mu), np.where(beyond, over - 0.5 * mu, 0.0))
        g = np.where(band, over / (mu * safe), np.where(beyond, 1.0 / safe, 0.0))
        p2 = np.where(band, 1.0 / mu, 0.0)
        return p, g, p2
