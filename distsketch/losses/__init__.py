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
written. A new loss is one class (in this package or in a user's module) that sets ``name``:
defining it registers it in :data:`LOSSES`.

The base class, its registry and the checks are in ``distsketch.losses.base``, the radial
losses in ``distsketch.losses.radial``, pinball in ``distsketch.losses.quantile``; all are
re-exported here.
"""

from __future__ import annotations

from .base import LOSSES, Curvature, Loss, check_loss, loss_from_config
from .quantile import Pinball
from .radial import EpsilonInsensitive, Huber, Squared

__all__ = ["Loss", "Squared", "Huber", "EpsilonInsensitive", "Pinball", "Curvature", "LOSSES",
           "check_loss", "loss_from_config"]
