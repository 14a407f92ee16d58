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

from ..._base import nearest_lams
from ...engine.batchstore import batch_group
from ...engine.keptrows import kept_rows
from ...engine.store import CSUM
from ...engine.storeguard import StoreError
from ...engine.sweep import Segment, Segments, SweepData, Sweeper
from ..routes import CoefTable, RouteFit
from .admm import RowState, admm_block, supports
from .admm import solve_path as admm_path
from .newton import WHOLE_ENTRIES, solve_path
from .problem import Problem, SolverState
from .sweeps import held_sweeps, local_memory_ok, path_table

__all__ = ["Resolved", "warm_starts", "fitted_duals", "resolve_path", "batch_segments",
           "resolve_batches"]

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


def batch_segments(fs, batches: Sequence[dict], *, m: int, d: int) -> list[Segment]:
    """The row segments of a kept store's batches, in order: batch 0's stored ``C`` (the
    fit's pass), then each appended batch's (``batches/<k>``), each with its CRC-32 records
    and the targets the store keeps beside it (:func:`~distsketch.engine.keptrows.kept_rows`,
    checked against their checksums).

    Parameters
    ----------
    fs : FitStore
        The model's store, open.
    batches : sequence of dict
        The batches held (``batch``, ``rows``), in row order.
    m, d : int
        Columns of ``C`` (the landmarks' features) and outputs.

    Returns
    -------
    list of Segment
    """
    segments = []
    for record in batches:
        k, rows = int(record["batch"]), int(record["rows"])
        store = fs if k == 0 else batch_group(fs, k)
        meta = store.meta_or_none() or {}
        if not meta.get("pass") or int(meta["pass"]["n"]) != rows:
            raise StoreError(f"store {store.location!r}: holds no pass of batch {k}'s {rows} "
                             f"rows; the store is damaged: fit again")
        C = store.pass_arrays()[0]
        data = SweepData(n=rows, block_rows=int(meta["pass"]["block_rows"]), m=m, d=d, C=C,
                         crcs=tuple(int(v) for v in store.records()[:, CSUM]), x=None,
                         dtype=np.dtype(meta["pass"]["block_dtype"]), location=store.location)
        segments.append(Segment(data, kept_rows(store.group, "Y", location=store.location,
                                                 rows=rows)))
    return segments


def resolve_batches(solver: str, est, spec, growth, fs) -> None:
    """A Newton or ADMM model solved again over every batch it holds
    (:meth:`~distsketch.Route.resolve` of the sweeps' routes).

    The problem of all rows comes from the batches' summed sums
    (``est._lipschitz_problem`` of ``est._growth_result(growth)``); each λ of ``spec.lams``
    starts from the fitted solution at the nearest fitted λ (:func:`warm_starts`) and is
    certified, by sweeps over the store's segments (:func:`batch_segments`), to the model's
    ``tol`` on all rows. ADMM keeps its per-row variables in memory here: on a cluster the
    re-solve runs Newton's sweeps instead (the same certificate). The model adopts the
    path as a fit's (``_adopt_path``); ``n_passes_`` counts the batch's pass and the sweeps.
    """
    if fs is None or fs.temporary:
        raise ValueError(f"partial_fit: the {solver!r} route re-solves over every row's stored "
                         f"blocks; fit with store=... (a path)")
    res = est._growth_result(growth)
    prob, _ = est._lipschitz_problem(spec, res)
    segments = batch_segments(fs, growth.batches, m=prob.Gt.shape[0] - 1, d=prob.b.shape[1])
    nearest = nearest_lams(est.lams_, spec.lams)
    sweeps = solver
    if solver == "admm" and not local_memory_ok():
        sweeps = "newton"
        logger.info("re-solve: ADMM's per-row variables need the local scheduler; Newton's "
                    "sweeps certify the same duality gap on this cluster")
    out = resolve_path(prob, spec.lams, segments, coefs=np.asarray(est.coefs_)[nearest],
                       intercepts=np.asarray(est.intercepts_)[nearest], basis=est.whitening_,
                       solver=sweeps, tol=float(est.tol), max_iter=int(est.max_iter),
                       split_every=spec.options.split_every, progress=spec.options.progress,
                       whole_entries=spec.options.tuning.whole_problem_entries)
    est._adopt_path(spec, RouteFit(None, getattr(est, "store_", None), solver,
                                   1 + out.n_sweeps, res.x_sketch, res.x_landmarks, out.path,
                                   res))
    est.n_passes_ = 1 + out.n_sweeps

