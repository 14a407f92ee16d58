"""The Lipschitz losses' solver routes: one streaming pass, then one sweep over the row
blocks per iteration (:class:`Newton`, :class:`ADMM`; ``solver="auto"``'s :class:`NewtonOrADMM`
picks one by the features' rank). The model (:class:`~distsketch.SketchedRegressor`) gives the
problem (``_lipschitz_problem``: the whitened features, the loss, ``M``) and adopts the
:class:`~distsketch.solvers.routes.CoefTable` (``_adopt_path``); the solvers are
:mod:`distsketch.solvers.lipschitz.newton` and :mod:`distsketch.solvers.lipschitz.admm` over
:mod:`distsketch.solvers.lipschitz.problem`'s shared problem, their states kept in the fit store's
``solver/`` group (a killed fit resumes).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ...engine.features import FeatureMap
from ...engine.store import CSUM
from ...engine.sweep import SweepData, Sweeper
from ..routes import CoefTable, Route, RouteFit
from .admm import RowState, admm_block, choose_route, supports
from .admm import solve_path as admm_path
from .newton import solve_path
from .problem import SolverState, state_key
from .resolve import resolve_batches
from .sweeps import HeldSweeps, held_sweeps, local_memory_ok, path_table

if TYPE_CHECKING:
    from ...losses.base import Loss
    from .problem import Problem

__all__ = ["Newton", "ADMM", "NewtonOrADMM", "HeldSweeps", "held_sweeps", "local_memory_ok",
           "path_table"]


# --------------------------------------------------------------------------- the routes


class Newton(Route):
    """(Semismooth, smoothed) Newton iterations, a weighted Gram per sweep
    (:mod:`distsketch.solvers.lipschitz.newton`), stopped on a certified relative duality gap."""

    name = "newton"
    appends = True
    kept_rows = ("Y",)

    def resolve(self, est: Any, spec: Any, growth: Any, fs: Any) -> None:
        """Sweeps over every batch's stored blocks and kept targets, warm-started from the
        fitted path (:func:`~distsketch.solvers.lipschitz.resolve.resolve_batches`)."""
        resolve_batches(self.name, est, spec, growth, fs)

    def choose(self, prob: Problem, loss: Loss, fs: Any, spec: Any) -> str:
        """The sweeps' solver for ``prob``: this route's own."""
        return self.name

    def run(self, est: Any, spec: Any) -> RouteFit:
        res = est.run_pass(spec)
        try:
            table, taken, sweeps = sweep_path(self, est, spec, res)
        except BaseException:
            res.fs.close()
            raise
        return RouteFit.from_pass(res, solver=taken, path=table, n_passes=1 + sweeps)


class ADMM(Newton):
    """ADMM reusing the eigendecomposition of the feature Gram: no Gram per sweep, ``O(r²d)``
    driver work per iteration and more iterations (:mod:`distsketch.solvers.lipschitz.admm`); its
    per-row variables live in the fit store (or in memory on the local scheduler)."""

    name = "admm"

    def prepare(self, est: Any, X: Any) -> None:
        if est.store is None and not local_memory_ok():
            raise ValueError("solver: 'admm' without a store keeps its per-row variables in "
                             "memory, which needs the local threaded or synchronous scheduler; "
                             "give store=... (a fit store on shared storage) to run it on a "
                             "cluster or with processes")

    def check(self, est: Any, spec: Any) -> None:
        loss = est._loss(est._n_outputs(spec))
        if not supports(loss):
            raise ValueError(f"solver: 'admm' needs a loss with a proximal operator (squared, "
                             f"huber, epsilon_insensitive, pinball); got {loss!r}: use "
                             f"solver='newton'")


class NewtonOrADMM(Newton):
    """``solver="auto"``'s sweeps: ADMM from ``options.tuning.auto_rank`` whitened features
    (:func:`distsketch.solvers.lipschitz.admm.choose_route`), where ADMM can run (a loss with a
    proximal operator; a store, or the local scheduler), else Newton."""

    name = None

    def choose(self, prob: Problem, loss: Loss, fs: Any, spec: Any) -> str:
        route = choose_route("auto", prob.r, tuning=spec.options.tuning)
        if route == "admm" and ((fs.temporary and not local_memory_ok()) or not supports(loss)):
            route = "newton"  # on a cluster without a store (nowhere to keep Z, U), or a loss
            # without a proximal operator
        return route

    def __repr__(self) -> str:
        return "NewtonOrADMM()"


def sweep_path(route: Newton, est: Any, spec: Any, res: Any) -> tuple[CoefTable, str, int]:
    """Solve ``spec``'s λ path by sweeps over the pass ``res``'s blocks: ``(table, the solver
    taken, sweeps made)``. The blocks are the store's ``C``, the blocks the pass held in
    memory, or recomputed from the landmarks; each λ's state is kept in the store's
    ``solver/`` group under a key of everything that defines it."""
    prob, Mx = est._lipschitz_problem(spec, res)
    loss, d, n = prob.loss, prob.b.shape[1], res.n
    fs = res.fs
    meta = fs.meta["pass"]
    C = None
    crcs: tuple = ()
    if not fs.temporary:
        C = fs.pass_arrays()[0]
        crcs = tuple(int(v) for v in fs.records()[:, CSUM])
    held = res.sums.get("held")
    data = SweepData(n=n, block_rows=int(meta["block_rows"]), m=prob.Gt.shape[0] - 1, d=d, C=C,
                     crcs=crcs, held=held, x=None if C is not None or held is not None
                     else FeatureMap(spec.kernels[est._input[0]], res.x_landmarks,
                                     res.x_sketch, spec.options.gram_chunk,
                                     spec.options.tuning),
                     dtype=np.dtype(meta["block_dtype"]), location=fs.location)
    taken = route.choose(prob, loss, fs, spec)
    sweeper = Sweeper(data, spec.X, spec.Y, split_every=spec.options.split_every,
                      progress=spec.options.progress,
                      **({"block": admm_block, "name": "admm"} if taken == "admm" else {}))
    lams = spec.lams
    tol, max_iter = float(est.tol), int(est.max_iter)

    def states(k: int):
        if fs.temporary:
            return None
        config = {"pass": meta, "loss": loss.to_config(), "lam": lams[k],
                  "tol": tol, "M": Mx.tolist(), "intercept": prob.intercept,
                  "exact": prob.exact_curvature,
                  "warm": sorted(v for v in lams if v > lams[k])}
        if taken == "admm":  # its own state (and row arrays) beside Newton's
            config = {**config, "solver": "admm", "exact": None}
        return SolverState(fs.group.require_group("solver").require_group(state_key(config)))

    if taken == "admm":
        def rows(k: int, state):
            if state is None:
                return RowState.in_memory(n, d)
            return RowState.in_group(state.group, n, d, int(meta["block_rows"]), fresh=False)

        sols = admm_path(prob, lams, sweeper, tol=tol, max_iter=max_iter, rows=rows,
                         states=states)
    else:
        held_run = held_sweeps(sweeper, data, spec)
        try:
            sols = solve_path(prob, lams, sweeper if held_run is None else held_run, tol=tol,
                              max_iter=max_iter, states=states,
                              whole_entries=spec.options.tuning.whole_problem_entries)
        finally:
            if held_run is not None:
                held_run.close()
    return path_table(prob, lams, sols), taken, sweeper.count
