"""A fitted λ path solved again over rows in several segments, warm-started from its solution.

When rows are appended to a model fitted by the Newton or ADMM sweeps, the problem of all
rows (:meth:`~distsketch.solvers.lipschitz.problem.Problem.with_rows`: its sums over every
segment) is solved again at every fitted λ, each from the fitted ``(Ξ(λ), b₀(λ))`` instead of
the path's cold start, by sweeps over the row segments (:class:`~distsketch.engine.sweep.Segments`:
the fit's stored ``C``, then each appended batch's blocks, each with its targets). Every sweep
reads every segment, so the certificate — the relative duality gap ``(P − D)/P ≤ tol`` of
:mod:`~distsketch.solvers.lipschitz.problem` — is that of the problem of all rows, as a fresh
fit's. What each solver starts from (docs/design/lipschitz.md, "Segments and warm starts"):

- Newton: the iterate ``(Ξ, b₀)``; its smoothing μ, active sets and polish are found again
  from the first sweep's residuals (nothing per row is carried over).
- ADMM: ``x = (Ξ, b₀)``; on the fitted rows the fit's own ``Z, U`` and ρ where its store
  keeps them (``duals``, :func:`fitted_duals`), else ``Z = F`` and ``U = ∇h(F − Y)/ρ`` (the
  start's gradients, its dual point) from ρ's start, as on the new rows.

Glossary: ``Ξ`` (r × d) and ``b₀`` (d,): coefficients in the whitened features ``φ = Tᵀ…``
(``basis`` T, m × r) and the intercept.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ...engine.sweep import Segment, Segments, Sweeper
from ..routes import CoefTable
from .admm import RowState, admm_block, supports
from .admm import solve_path as admm_path
from .newton import WHOLE_ENTRIES, solve_path
from .problem import Problem, SolverState
from .sweeps import held_sweeps, local_memory_ok, path_table

__all__ = ["Resolved", "warm_starts", "fitted_duals", "resolve_path"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Resolved:
    """A λ path solved again: its table (as a fit's), the solver and the sweeps made."""

    path: CoefTable
    solver: str
    n_sweeps: int


def warm_starts(prob: Problem, coefs: np.ndarray, intercepts: np.ndarray, *,
                basis: np.ndarray | None = None) -> list[tuple[np.ndarray, np.ndarray]]:
    """One ``(Ξ, b₀)`` per λ in ``prob``'s whitened features from a fitted path.

    ``coefs`` (n_lams, r', d) are in the whitening ``basis`` (m, r'; None: ``prob.T``).
    The same realised sketch gives the same ``B = R K Rᵀ`` and so bitwise the same ``T``:
    the coefficients are taken as they are. Another basis is mapped by least squares,
    ``Ξ = argmin ‖T Ξ − T' Ξ'‖_F`` (the same function ``k(x, X_J) R_mixᵀ T Ξ`` where ``T``
    spans ``T'``)."""
    coefs = np.asarray(coefs, dtype=np.float64)
    intercepts = np.asarray(intercepts, dtype=np.float64).reshape(len(coefs), -1)
    if basis is not None and not (np.shape(basis) == prob.T.shape
                                  and np.array_equal(basis, prob.T)):
        coefs = np.stack([np.linalg.lstsq(prob.T, np.asarray(basis) @ Xi, rcond=None)[0]
                          for Xi in coefs])
    if coefs.shape[1:] != (prob.r, prob.d):
        raise ValueError(f"coefs: expected (n_lams, {prob.r}, {prob.d}) in the problem's "
                         f"whitened features; got {coefs.shape}")
    return [(Xi.copy(), b0.copy()) for Xi, b0 in zip(coefs, intercepts)]


def fitted_duals(group) -> dict | None:
    """A finished ADMM λ's per-row variables from its solver-state group in a fit store
    (``solver/<key>``): ``{"Z", "U", "rho"}`` (n × d, the last sweep's generation, ``U``
    scaled at ``rho``, that sweep's penalty), or None when the group holds no finished ADMM
    state. The last generation has no record (the fit ended before committing it): it is
    read as it is, a start that the re-solve's certificate checks like any other."""
    st = SolverState(group).load()
    if not st or not st.get("done") or st.get("route") != "admm" or "z_0" not in group:
        return None
    g = (int(st["n_iter"]) - 1) % 2
    return {"Z": np.asarray(group[f"z_{g}"][:], dtype=np.float64),
            "U": np.asarray(group[f"u_{g}"][:], dtype=np.float64), "rho": float(st["rho"])}


def resolve_path(prob: Problem, lams: Sequence[float], segments: Sequence[Segment], *,
                 coefs: np.ndarray, intercepts: np.ndarray, basis: np.ndarray | None = None,
                 solver: str = "newton", tol: float, max_iter: int, split_every: int = 4,
                 progress: bool = False, whole_entries: int = WHOLE_ENTRIES,
                 states: Callable | None = None, rows: Callable | None = None,
                 duals: Sequence[dict | None] | None = None) -> Resolved:
    """Solve ``prob`` (over the rows of every segment) at each λ of ``lams`` from the fitted
    ``coefs``, ``intercepts`` (one per λ, in the order of ``lams``).

    Parameters
    ----------
    prob : Problem
        The problem of all rows: ``prob.n`` must be the segments' rows together.
    lams : sequence of float
        The fitted λ (the path's).
    segments : sequence of Segment
        The rows in order (the fit's first, then each appended batch).
    coefs, intercepts : ndarray (n_lams, r, d), (n_lams, d)
        The fitted ``Ξ`` (in ``basis``, :func:`warm_starts`) and ``b₀``.
    solver : {"newton", "admm"}
        The sweeps' solver (the fit's).
    tol, max_iter : float, int
        The relative duality gap certified on all rows; most iterations per λ.
    states : callable, optional
        ``states(k) -> SolverState or None``: where λ number k keeps its iterations (a
        resumable re-solve); None: in memory.
    rows : callable, optional
        ADMM's ``rows(k, state) -> RowState`` (n × d over all segments, global rows); None:
        in memory, which needs the local scheduler. Stored rows need every segment's blocks
        on their chunk grid (the same ``block_rows``, every segment but the last a multiple
        of it): two blocks writing one chunk would race.
    duals : sequence of dict or None, optional
        ADMM: per λ, the fit's ``{"Z", "U", "rho"}`` of its rows (the first rows of the
        segments; :func:`fitted_duals`), or None.

    Returns
    -------
    Resolved
    """
    data, Xs, Ys = Segments.of(segments)
    if data.n != prob.n:
        raise ValueError(f"segments: {data.n} rows, but the problem is over {prob.n}; build "
                         f"it from every segment's sums (Problem.with_rows)")
    warm = warm_starts(prob, coefs, intercepts, basis=basis)
    if len(warm) != len(lams):
        raise ValueError(f"coefs: one per λ ({len(lams)}); got {len(warm)}")
    if solver == "admm":
        if not supports(prob.loss):
            raise ValueError(f"solver: 'admm' needs a loss with a proximal operator; got "
                             f"{prob.loss!r}")
        if rows is None:
            if not local_memory_ok():
                raise ValueError("solver: 'admm' keeps its per-row variables in memory "
                                 "without rows=...: run on the local scheduler")

            def rows(k, state):
                return RowState.in_memory(data.n, data.d)

        sweeper = Sweeper(data, Xs, Ys, split_every=split_every, progress=progress,
                          block=admm_block, name="admm")
        sols = admm_path(prob, lams, sweeper, tol=tol, max_iter=max_iter, rows=rows,
                         states=states, warm=warm, duals=duals)
    elif solver == "newton":
        sweeper = Sweeper(data, Xs, Ys, split_every=split_every, progress=progress)
        held_run = held_sweeps(sweeper, data)
        try:
            sols = solve_path(prob, lams, sweeper if held_run is None else held_run, tol=tol,
                              max_iter=max_iter, states=states, whole_entries=whole_entries,
                              warm=warm)
        finally:
            if held_run is not None:
                held_run.close()
    else:
        raise ValueError(f"solver: 'newton' or 'admm'; got {solver!r}")
    logger.info("re-solved %d λ over %d segments (%d rows): %s iterations, %d sweeps",
                len(lams), len(data.parts), data.n, [sol.n_iter for sol in sols],
                sweeper.count)
    return Resolved(path_table(prob, lams, sols), solver, sweeper.count)
