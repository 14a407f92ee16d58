"""Losses of the Lipschitz-loss machines (:class:`~distsketch.SketchedRegressor`): one class each.

A loss ``h`` acts on the residual ``r = f(x) − y`` of one row (d outputs) and carries, in one
object, everything the solver (``distsketch.solvers.lipschitz.newton``) asks of it:

- :meth:`~Loss.value` — ``h(r)`` per row, or its Moreau envelope ``h_μ`` for ``μ > 0``;
- :meth:`~Loss.gradient` — ``∇h_μ(r)`` per row (a subgradient of ``h`` for ``μ = 0``);
- :meth:`~Loss.curvature` — the (generalised) Hessian ``∇²h_μ(r) = base·I + Δ_r`` as the rows
  where ``Δ_r ≠ 0`` and their ``Δ`` (a scalar, a diagonal or a full d × d matrix per row), so
  that a pass forms the weighted Gram ``Σ_i Δ_i ⊗ c̃_i c̃_iᵀ`` over those rows only;
- the convex conjugate ``h*`` (:meth:`~Loss.dual_scale`, :meth:`~Loss.conjugate_sum`), for the
  duality gap that certifies a solution, and its smoothing ``h*_μ = h* + (μ/2)‖·‖²``.
- :meth:`~Loss.prox` — the proximal operator of ``t·h`` row by row (the ADMM route,
  ``distsketch.solvers.lipschitz.admm``): radial losses shrink ``‖v‖`` by their 1-d prox, pinball
  soft-thresholds each entry with its two slopes.

Two families:

- *radial* losses of ``t = ‖r‖₂`` (the scalar loss for d = 1): :class:`Squared`
  (``½t²``), :class:`Huber` (``½t²`` if ``t ≤ κ`` else ``κt − κ²/2``) and
  :class:`EpsilonInsensitive` (``max(t − ε, 0)``). Their Hessian is
  ``g(t)·I + (p''(t) − g(t))·r̂r̂ᵀ`` with ``g = p'(t)/t``; conjugates
  ``h*(β) = (q/2)‖β‖² + e‖β‖`` on the ball ``‖β‖ ≤ ρ`` (Squared: q = 1, ρ = ∞; Huber: q = 1,
  ρ = κ; ε-insensitive: e = ε, ρ = 1).
- *separable* losses summed over outputs: :class:`Pinball` ``Σ_j ρ_{τ_j}(y_j − f_j)``
  (quantile regression), conjugate ``0`` on the box ``β_j ∈ [−τ_j, 1 − τ_j]``.

Smoothing (ε-insensitive and pinball, which are not differentiable): the Moreau envelope
``h_μ(r) = min_z h(z) + ‖r − z‖²/(2μ)`` has a ``1/μ``-Lipschitz gradient and
``0 ≤ h − h_μ ≤ μL²/2`` (L: Lipschitz constant of ``h``); its conjugate is ``h* + (μ/2)‖β‖²``.
The kinks of the smoothed losses, for the solver's KKT polish: :meth:`~Loss.band` gives the
entries held on an entry-wise kink (scalar ε, pinball), :meth:`~Loss.sphere_band` the rows near
the sphere ``‖r‖ = ε`` of the radial ε-insensitive loss with d > 1.
Losses are picklable value objects with scikit-learn's ``get_params`` (compared by value),
validated by :meth:`~Loss.check` when a fit starts, so a bad one fails before anything is
written. A new loss is one class (here or in a user's module) that sets ``name``: defining it
registers it in :data:`LOSSES`.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from ._base import ParamsMixin
from ._registry import Registry

__all__ = ["Loss", "Squared", "Huber", "EpsilonInsensitive", "Pinball", "Curvature", "LOSSES",
           "check_loss", "loss_from_config"]


@dataclass
class Curvature:
    """``∇²h_μ(r_i) = base·I + Δ_i`` for a block's rows; ``Δ_i`` nonzero only on ``rows``.

    Parameters
    ----------
    base : float
        The curvature every row shares (one of :meth:`Loss.curvature_levels`).
    kind : {"scalar", "diag", "full"}
        ``Δ_i = values[k]·I`` (values (k,)), ``diag(values[k])`` (values (k, d)) or
        ``values[k]`` (values (k, d, d)).
    rows : ndarray of int64 of shape (k,)
        Rows (in the block) where ``Δ_i ≠ 0``.
    values : ndarray
        ``Δ`` of those rows, shaped by ``kind``.
    """

    base: float
    kind: str
    rows: np.ndarray
    values: np.ndarray


def _positive(value: Any, *, name: str, loss: str, allow_zero: bool = False) -> float:
    ok = (isinstance(value, numbers.Real) and not isinstance(value, bool)
          and np.isfinite(value) and (value >= 0 if allow_zero else value > 0))
    if not ok:
        what = "a non-negative" if allow_zero else "a positive"
        raise ValueError(f"loss: {loss}({name}={value!r}): {name} must be {what} finite number")
    return float(value)


#: Loss classes by name, for ``loss=`` strings and configs: a subclass that sets ``name`` in its
#: body registers itself.
LOSSES: Registry = Registry("loss")


class Loss(ParamsMixin):
    """Base class of the losses (see the module's notes for the contract).

    A subclass sets ``name`` (which registers it in :data:`LOSSES`) and implements the
    methods the solver asks of it; its constructor arguments are its parameters.

    Examples
    --------
    >>> import numpy as np
    >>> from distsketch.losses import Huber
    >>> loss = Huber(kappa=1.0)
    >>> loss.value(np.array([[0.5], [3.0]]))
    array([0.125, 2.5  ])
    >>> loss.to_config()
    {'type': 'huber', 'kappa': 1.0}
    """

    name = "loss"
    #: Capability: ``project_dual`` projects onto ``dom h*`` (what the ADMM route needs beside
    #: :attr:`has_prox`).
    projects_dual: ClassVar[bool] = False
    #: Capability: the loss is the squared loss, whose minimiser solves the normal equations of
    #: kernel ridge regression (what the PCG route solves).
    normal_equations: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        LOSSES.register_class(cls)

    @property
    def has_prox(self) -> bool:
        """Whether the loss implements :meth:`prox` (not the base class's)."""
        return type(self).prox is not Loss.prox

    def default_outputs(self) -> int:
        """The number of outputs the loss's own parameters imply.

        For checking the loss before the data are seen.

        Returns
        -------
        int
            Pinball: one per level; 1 when the parameters imply none.
        """
        return 1

    def project_dual(self, alpha: np.ndarray) -> np.ndarray:
        """``α`` projected onto ``dom h*``, for losses with ``projects_dual``.

        Parameters
        ----------
        alpha : ndarray of shape (n, d)
            Dual variables, already in ``dom h*`` up to rounding.

        Returns
        -------
        ndarray of shape (n, d)
            The projection.
        """
        raise NotImplementedError(f"{type(self).__name__} has no projection onto dom h*")
    #: Whether the loss is non-differentiable and the solver smooths it (Moreau envelope).
    smoothed = False

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self.to_config() == other.to_config()

    def __hash__(self) -> int:
        return hash(repr(self.to_config()))

    def to_config(self) -> dict:
        """JSON description of the loss; :func:`loss_from_config` is its inverse.

        Returns
        -------
        dict
            ``{"type": name, **parameters}``.
        """
        params = {k: (list(v) if isinstance(v, (tuple, list, np.ndarray)) else v)
                  for k, v in self.get_params(deep=False).items()}
        return {"type": self.name, **params}

    def check(self, d: int) -> None:
        """Validate the parameters for ``d`` outputs.

        Parameters
        ----------
        d : int
            Number of outputs.

        Raises
        ------
        ValueError
            A parameter out of its range, naming it.
        """

    # -- what the solver asks ----------------------------------------------------------
    def value(self, R: np.ndarray, mu: float = 0.0) -> np.ndarray:
        """``h_μ(r_i)`` per row (``h`` itself for ``μ = 0``).

        Parameters
        ----------
        R : ndarray of shape (b, d)
            Residuals ``r_i = f(x_i) − y_i``, one row each.
        mu : float, default 0.0
            Smoothing ``μ ≥ 0`` of the Moreau envelope.

        Returns
        -------
        ndarray of shape (b,)
            The loss of each row.
        """
        raise NotImplementedError

    def gradient(self, R: np.ndarray, mu: float = 0.0) -> np.ndarray:
        """``∇h_μ(r_i)`` per row (a subgradient of ``h`` for ``μ = 0``).

        Parameters
        ----------
        R : ndarray of shape (b, d)
            Residuals, one row each.
        mu : float, default 0.0
            Smoothing ``μ ≥ 0``.

        Returns
        -------
        ndarray of shape (b, d)
            The gradients; they lie in the domain of ``h*`` (bounded).
        """
        raise NotImplementedError

    def curvature(self, R: np.ndarray, mu: float = 0.0, *, exact: bool = True,
                  base: float | None = None) -> Curvature:
        """``∇²h_μ(r_i) − base·I`` on the rows where it is nonzero.

        Parameters
        ----------
        R : ndarray of shape (b, d)
            Residuals, one row each.
        mu : float, default 0.0
            Smoothing ``μ ≥ 0``.
        exact : bool, default True
            False: a scalar majorant ``w_i I ⪰ ∇²h_μ(r_i)`` may be returned instead of a
            full matrix (cheaper Grams).
        base : float or None, default None
            One of :meth:`curvature_levels` (None: the first).

        Returns
        -------
        Curvature
            ``base`` and the rows' ``Δ_i``.
        """
        raise NotImplementedError

    def curvature_levels(self, d: int, mu: float = 0.0, *, exact: bool = True) -> tuple:
        """The constant values the curvature takes on whole regions of residuals.

        A sweep subtracts whichever level most rows sit at, so that its weighted Grams cover
        only the other rows (``Σ_{rest} + level·G``, with ``G = CᵀC`` from the pass): e.g.
        ε-insensitive with a large smoothing μ, where most rows are in the band at ``1/μ``.

        Parameters
        ----------
        d : int
            Number of outputs.
        mu : float, default 0.0
            Smoothing ``μ ≥ 0``.
        exact : bool, default True
            As for :meth:`curvature`.

        Returns
        -------
        tuple of float
            The levels; the first is the default ``base``.
        """
        return (0.0,)

    def curvature_kind(self, d: int, *, exact: bool = True) -> str:
        """The ``kind`` :meth:`curvature` returns for ``d`` outputs.

        Parameters
        ----------
        d : int
            Number of outputs.
        exact : bool, default True
            As for :meth:`curvature`.

        Returns
        -------
        {"scalar", "diag", "full"}
            The kind of ``Δ_i``.
        """
        raise NotImplementedError

    def level_counts(self, R: np.ndarray, mus: np.ndarray) -> np.ndarray | None:
        """Rows at each of the :meth:`curvature_levels` for every smoothing of ``mus``.

        The solver's first sweep (before μ is known) asks for them, so that the first Gram
        is formed over the rows off the commonest level.

        Parameters
        ----------
        R : ndarray of shape (b, d)
            Residuals, one row each.
        mus : ndarray of shape (n_mus,)
            Smoothings ``μ``, increasing.

        Returns
        -------
        ndarray of shape (n_mus, n_levels) or None
            Row counts at each level of ``curvature_levels(d, μ)`` (exact curvature); None
            when the loss does not count them.
        """
        return None

    def entry_bounds(self, d: int) -> tuple[np.ndarray, np.ndarray]:
        """Per-output bounds of a gradient entry (losses with :meth:`band`).

        Parameters
        ----------
        d : int
            Number of outputs.

        Returns
        -------
        lo, hi : ndarray of shape (d,)
            Lower and upper bounds (infinite when unbounded).
        """
        return np.full(d, -np.inf), np.full(d, np.inf)

    def kink_bounds(self, cols: np.ndarray, kink: np.ndarray, d: int
                    ) -> tuple[np.ndarray, np.ndarray]:
        """The subdifferential ``[lo_e, hi_e]`` of the loss at each held entry of a band.

        The interval the KKT polish keeps its multiplier ``β_e`` in.

        Parameters
        ----------
        cols : ndarray of int of shape (k,)
            Output of each held entry (from :meth:`band`).
        kink : ndarray of shape (k,)
            The residual each entry takes on its kink.
        d : int
            Number of outputs.

        Returns
        -------
        lo, hi : ndarray of shape (k,)
            The bounds; by default :meth:`entry_bounds` of each entry's output.
        """
        lo, hi = self.entry_bounds(d)
        return lo[cols], hi[cols]

    def band(self, R: np.ndarray, mu: float, width: float = 0.0
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """Entries in the smoothing band of ``h_μ``: the active set of the non-smooth problem.

        For the KKT polish of ``distsketch.solvers.lipschitz.newton``.

        Parameters
        ----------
        R : ndarray of shape (b, d)
            Residuals, one row each.
        mu : float
            Smoothing ``μ > 0``.
        width : float, default 0.0
            Also the entries within ``width`` of their kink on either side.

        Returns
        -------
        tuple of ndarray or None
            ``(rows, cols, kink)``: the entries ``(i, j)`` and the value ``r_ij`` takes on
            the kink. None when the loss has no such linear description (smooth losses,
            radial losses with d > 1).
        """
        return None

    def sphere_band(self, R: np.ndarray, mu: float) -> np.ndarray | None:
        """Rows in the smoothing band of a kink on the sphere ``‖r‖ = ε`` (radial, d > 1).

        The rows the KKT polish of ``distsketch.solvers.lipschitz.newton`` holds on the
        sphere (a nonlinear active set, so not an entry-wise :meth:`band`).

        Parameters
        ----------
        R : ndarray of shape (b, d)
            Residuals, one row each.
        mu : float
            Smoothing ``μ > 0``.

        Returns
        -------
        ndarray of int or None
            The rows with ``0 < ‖r_i‖ − ε ≤ μ``; None when the loss has no such kink.
        """
        return None

    def lipschitz_sq(self, d: int) -> float:
        """``L²`` with ``h − h_μ ≤ μL²/2`` per row.

        Parameters
        ----------
        d : int
            Number of outputs.

        Returns
        -------
        float
            The squared Lipschitz constant of ``h`` (0 for losses that are not smoothed).
        """
        return 0.0

    def prox(self, V: np.ndarray, t: float) -> np.ndarray:
        """The proximal operator of ``t·h``, row by row: ``argmin_z h(z) + ‖z − v_i‖²/(2t)``.

        Parameters
        ----------
        V : ndarray of shape (b, d)
            Residual-space points ``v_i`` (one row each).
        t : float > 0
            Step (the ADMM route, ``distsketch.solvers.lipschitz.admm``, uses ``t = 1/ρ``).

        Returns
        -------
        ndarray of shape (b, d)
            The minimisers; ``(v_i − z_i)/t ∈ ∂h(z_i)`` (the optimality condition).
        """
        raise NotImplementedError(f"{type(self).__name__} has no proximal operator")

    def dual_scale(self, c: np.ndarray) -> np.ndarray | float:
        """A scale ``t`` with ``t(α_i − c)`` in the domain of ``h*`` for every gradient ``α_i``.

        Parameters
        ----------
        c : ndarray of shape (d,)
            The mean gradient subtracted for the intercept.

        Returns
        -------
        float or ndarray of shape (d,)
            The scale (per output for separable losses).
        """
        raise NotImplementedError

    def conjugate_sum(self, stats: dict, t: np.ndarray | float, c: np.ndarray, n: int,
                      mu: float) -> float:
        """An upper bound of ``Σ_i h*_μ(β_i)`` for ``β_i = t(α_i − c)``, from block sums.

        Parameters
        ----------
        stats : dict
            ``stats["aa"]``: per-column ``Σ α_ij²``; ``stats["an"]``: ``Σ ‖α_i‖``.
        t : float or ndarray of shape (d,)
            The scale of :meth:`dual_scale`.
        c : ndarray of shape (d,)
            The mean gradient subtracted for the intercept.
        n : int
            Number of rows.
        mu : float
            Smoothing ``μ ≥ 0``.

        Returns
        -------
        float
            The bound (exact when ``c = 0``).
        """
        raise NotImplementedError


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
        over = np.abs(r) - float(self.epsilon)
        near = (over > 0) & (over <= mu)
        if width > 0:  # within half the tube of ±ε at most: the sign of r names the kink
            eps = float(self.epsilon)
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


def loss_from_config(config: dict) -> Loss:
    """A loss from its JSON description: the inverse of :meth:`Loss.to_config`.

    Parameters
    ----------
    config : dict
        ``{"type": name, **parameters}``, ``name`` registered in :data:`LOSSES`.

    Returns
    -------
    Loss
        The loss (not validated: see :func:`check_loss`).

    Raises
    ------
    ValueError
        An unknown ``type``.

    Examples
    --------
    >>> from distsketch.losses import loss_from_config
    >>> loss_from_config({"type": "pinball", "tau": 0.9})
    Pinball(tau=0.9)
    """
    config = dict(config)
    name = config.pop("type", None)
    if name not in LOSSES:
        raise ValueError(f"loss: unknown loss {name!r}; known: {sorted(LOSSES)}")
    return LOSSES[name](**config)


def check_loss(loss: Loss | str | dict, d: int) -> Loss:
    """A validated loss for ``d`` outputs.

    Parameters
    ----------
    loss : Loss, str or dict
        A loss object, a name registered in :data:`LOSSES` (with its default parameters) or
        a config dict (:func:`loss_from_config`).
    d : int
        Number of outputs.

    Returns
    -------
    Loss
        The loss, checked for ``d`` outputs.

    Raises
    ------
    ValueError
        An unknown name, or parameters that do not suit ``d`` outputs.

    Examples
    --------
    >>> from distsketch.losses import check_loss
    >>> check_loss("huber", 1)
    Huber()
    """
    if isinstance(loss, str):
        if loss not in LOSSES:
            raise ValueError(f"loss: unknown loss {loss!r}; use one of {sorted(LOSSES)} or an "
                             f"object from distsketch.losses")
        loss = LOSSES[loss]()
    elif isinstance(loss, dict):
        loss = loss_from_config(loss)
    if not isinstance(loss, Loss):
        raise ValueError(f"loss: expected a name ({sorted(LOSSES)}) or a distsketch.losses "
                         f"object, got {loss!r}")
    loss.check(d)
    return loss
