"""The loss interface: the :class:`Loss` base class, its registry and the loss checks.

:class:`Loss` declares what the solvers (``distsketch.solvers.lipschitz.newton``,
``distsketch.solvers.lipschitz.admm``) ask of a loss ``h`` of the residual ``r = f(x) − y``
(values, gradients and curvature of its Moreau envelope ``h_μ``, the convex conjugate ``h*``,
the kinks of smoothed losses, the proximal operator) and its capabilities
(:attr:`~Loss.has_prox`, :attr:`~Loss.projects_dual`, :attr:`~Loss.normal_equations`);
:class:`Curvature` carries a block's generalised Hessian. A subclass that sets ``name``
registers itself in :data:`LOSSES`, where :func:`loss_from_config` and :func:`check_loss` find
it by name. The contract and the shipped losses are described in :mod:`distsketch.losses`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from .._base import ParamsMixin
from .._registry import Registry

__all__ = ["Loss", "Curvature", "LOSSES", "check_loss", "loss_from_config"]


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
            Also the entries within ``width`` of their kink on either side; ``math.inf``:
            every entry at each of its kinks (the whole problem; an entry with two kinks,
            such as the scalar ε-insensitive loss's ``r = ±ε``, appears once per kink).

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
