"""Falkon's conjugate gradient iterations: one block map-reduce over the training rows each.

Conjugate gradient runs on ``Pᵀ H P u = Pᵀ z``, ``α = P u`` (``P``: Falkon's preconditioner,
:mod:`distsketch.solvers.preconditioner`), one column of ``z`` at a time (vectorised: the
columns share the passes but not their step sizes, and a column that has converged is frozen,
so each column's result is the one it would have alone). Every iteration is ONE block
map-reduce over the training rows (:class:`distsketch.engine.sweep.Sweeper` with
:func:`pcg_block`): each task recomputes its kernel block ``K_I`` from the rows (in
``EngineOptions.block_dtype``, float64 accumulation; no ``C`` stored, no ``G`` formed) and
returns ``K_Iᵀ (K_I V)``, reduced in the engine's fixed tree; the first pass also returns
``K_Iᵀ Y``, ``K_Iᵀ 1`` and ``Σ y``. ``H`` is applied exactly: ``K_nmᵀ K_nm v`` from the
pass plus ``nλ K_mm v`` on the driver with the unjittered ``K_mm`` (the jitter touches only
the preconditioner, never the solution). Driver memory O(m² + m t), task memory O(b m). The
problem and its glossary are :mod:`distsketch.solvers.pcg`'s.

Stopping rule: the relative residual ``‖Pᵀ(z − H α)‖ ≤ tol ‖Pᵀ z‖`` of each column (the
recursively updated residual of CG), or ``max_iter`` iterations (a ``ConvergenceWarning``),
or the divergence guard (:func:`_solve_lam`): a column whose residual grows to
:data:`DIVERGE_GROWTH` times its lowest, or has not gone below it for :data:`STALL_WINDOW`
iterations, stops and returns its best iterate, its residual recomputed by one more pass
(or its start, where that is lower), with a ``ConvergenceWarning`` that says what happened
and what to do (``solver="direct"``, a larger λ, float64 blocks).
A λ path is solved in decreasing order, each λ warm-started from the previous solution; the
products ``K_nmᵀ K_nm α`` are carried along the iterations, so a warm start costs no pass.
With a kept store, the right-hand side and each iteration's state (``u``, residual, direction,
``K_nmᵀ K_nm α``) are written under ``solver/<key>`` (double-buffered, checksummed:
:class:`distsketch.solvers.lipschitz.problem.SolverState`): a fit killed between iterations
resumes from the last one and ends with the identical model, after one pass that checks the
rows' fingerprints against those the first pass recorded (other data: ``DataChanged``). The
store keeps no kernel blocks.
"""

from __future__ import annotations

import dataclasses
import logging
import warnings
from dataclasses import dataclass

import numpy as np

from .._hashing import data_fingerprint
from ..backends.base import dense
from ..engine.deviceblocks import device_block_products
from ..engine.fused import fused_block_product
from ..engine.rows import check_finite_block
from ..engine.storeguard import DataChanged
from ..engine.sweep import SweepData, Sweeper, block_native, gram_product
from ..options import driver_threads
from .lipschitz.problem import SolverState, convergence_warning
from .preconditioner import LandmarkGram, Preconditioner, factor_kmm

__all__ = ["DIVERGE_GROWTH", "STALL_WINDOW", "PCGStep", "pcg_block", "PCGResult", "pcg_path",
           "lam_path"]

logger = logging.getLogger(__name__)

#: Divergence guard of the iterations (:func:`_solve_lam`): a column stops when its relative
#: residual exceeds this multiple of the lowest it has reached (impossible in exact arithmetic
#: unless ``cond(Pᵀ H P) ≥ DIVERGE_GROWTH²``) …
DIVERGE_GROWTH = 1e3
#: … or has not gone below that lowest for this many iterations.
STALL_WINDOW = 50

#: Whether :func:`pcg_block` computes a recomputed float32 block's kernel fused with its
#: product (``distsketch.engine.fused``: bitwise the same ``K_Iᵀ (K_I V)``, without the
#: b × m block in memory). Tests switch it off to compare.
FUSE_KERNEL_PRODUCT = True


# --------------------------------------------------------------------------- the block task


@dataclass(frozen=True)
class PCGStep:
    """What one PCG sweep ships to the tasks: directions ``V`` (m × k, or None) whose
    ``K_nmᵀ K_nm V`` is wanted, and whether to also return the right-hand side's sums."""

    V: np.ndarray | None
    first: bool = False
    check: bool = False  # first pass of lazy inputs: check the rows for NaN / inf
    fingerprint: bool = False  # return the rows' fingerprints (a resumed fit checks the data)


def pcg_block(shared, item, ws) -> dict:
    """``K_Iᵀ (K_I V)`` of one row block (and on the first pass ``K_Iᵀ Y``, ``K_Iᵀ 1``,
    ``Σ y`` and ``Σ y²`` per column), float64, from the kernel block recomputed from the rows.

    The iterations' passes (``V`` without the first pass's sums) over float32 blocks compute
    the kernel fused with the product where it applies
    (``distsketch.engine.fused.fused_block_product``: Gaussian kernel, dense rows): the
    kernel's own row tiles into a ring of rows, the product's float64 tiles taken from it,
    bitwise the same ``K_Iᵀ (K_I V)`` as the block written whole and multiplied by
    :func:`~distsketch.engine.sweep.gram_product`, without the b × m block in memory.
    :data:`FUSE_KERNEL_PRODUCT` switches it off."""
    data, step = shared
    i, ref, crc, yb = item
    if step.check:  # lazy inputs are checked block by block, as the streaming pass does
        start = data.rows(i)[0]
        check_finite_block(ref, argument="X", start=start)
        check_finite_block(yb, argument="y", start=start)
    out = {}
    if step.fingerprint:  # 64-bit hashes of the rows as exact 32-bit halves (sums are exact)
        fp = np.zeros((data.n_blocks, 4))
        for j, h in enumerate((data_fingerprint(ref), data_fingerprint(yb))):
            fp[i, 2 * j], fp[i, 2 * j + 1] = h >> 32, h & 0xFFFFFFFF
        out["fp"] = fp
        if step.V is None and not step.first:
            return out
    on_device = device_block_products(data, i, ref, crc, step.V, yb, first=step.first, ws=ws)
    if on_device is not None:  # a device backend: the block and its products on the GPU
        out.update(on_device)
        return out
    if FUSE_KERNEL_PRODUCT and step.V is not None and not step.first:
        GV = fused_block_product(data, i, ref, crc, step.V, ws)
        if GV is not None:
            out["GV"] = GV
            return out
    K = block_native(data, i, ref, crc, ws)  # k(X_I, X_J) at the block dtype
    if step.V is not None:  # float32 blocks converted tile by tile, accumulated in float64
        out["GV"] = gram_product(K, step.V, ws)
    if step.first:
        K = K.astype(np.float64, copy=False)
        Y = dense(yb).astype(np.float64, copy=False).reshape(K.shape[0], -1)
        out["b"] = K.T @ Y
        out["s"] = K.sum(axis=0)
        out["y1"] = Y.sum(axis=0)
        out["yy"] = np.einsum("ij,ij->j", Y, Y)
    return out


# --------------------------------------------------------------------------- the iterations


class _RhsState(SolverState):
    """The first pass's sums in a store group (``solver/<key>``)."""

    ARRAYS = ("b", "s", "y1", "fp", "yy")


class _PCGState(SolverState):
    """One λ's CG state in a store group: ``u``, residual ``r``, direction ``p``, the carried
    ``K_nmᵀ K_nm α`` (``galpha``), ``‖r‖²`` (``rr``), iterations per column, and when done
    the solution ``alpha``."""

    ARRAYS = ("u", "r", "p", "galpha", "rr", "iters", "alpha", "u_best", "g_best", "rr_best",
              "it_best", "stopped")


@dataclass
class PCGResult:
    """Solutions of a λ path (in the order of ``lams``).

    Attributes
    ----------
    alphas : ndarray (n_lams, m, t)
        ``α(λ)``.
    intercept : ndarray (t,)
        ``ȳ`` (zeros without an intercept).
    n_iters : ndarray (n_lams,) of int
        CG iterations (passes) of each λ: the most over the columns.
    residuals : ndarray (n_lams, t)
        Relative residuals ``‖Pᵀ(z − Hα)‖ / ‖Pᵀ z‖`` reached (recursive).
    converged : ndarray (n_lams,) of bool
    n_passes : int
        Passes over the training rows this call made (a resumed fit makes fewer).
    intercepts : ndarray (n_lams, t)
        The intercept of each λ: ``ȳ`` for every λ, or with ``centre=True`` the unpenalised
        bias ``b₀(λ) = ȳ − α(λ)ᵀ s / n`` (``s = K_nmᵀ 1``).
    rss : ndarray (n_lams, t)
        ``‖K_nm α + 1 b₀ᵀ − Y‖²`` per column, from the pass's sums without another pass:
        ``αᵀ K_nmᵀK_nm α − 2 αᵀ z + ‖Y − 1ȳᵀ‖²`` (``− (sᵀα)²/n`` centred; ``z`` and ȳ
        zero-centred without an intercept). Absolute rounding ``≈ ε ‖Y − 1ȳᵀ‖²``.
    penalties : ndarray (n_lams, t)
        ``αᵀ K_mm α`` per column (``‖f‖²`` in the RKHS).
    galphas : ndarray (n_lams, m, t)
        ``K_nmᵀ K_nm α(λ)``, carried along the iterations (no pass): SISOKR's reduced rank
        takes ``Σ_i g(x_i) g(x_i)ᵀ = αᵀ K_nmᵀ K_nm α`` from it. (A landmark left out of the
        solve, :func:`~distsketch.solvers.preconditioner.select_landmarks`: its first copy's row,
        or for a numerically dependent one the projection on the kept landmarks,
        ``distsketch.solvers.pcg._expand``.)
    """

    alphas: np.ndarray
    intercept: np.ndarray
    n_iters: np.ndarray
    residuals: np.ndarray
    converged: np.ndarray
    n_passes: int
    intercepts: np.ndarray | None = None
    rss: np.ndarray | None = None
    penalties: np.ndarray | None = None
    galphas: np.ndarray | None = None


def _first_pass(sweeper: Sweeper, state) -> dict:
    """The right-hand side's sums (and the rows' fingerprints): from the store, after one
    pass of fingerprints only that checks the data are the recorded ones, or computed."""
    st = state.load() if state is not None else None
    if st is not None and st.get("done") and st.get("yy") is not None:  # (older: no Σ y²)
        found = sweeper(PCGStep(None, fingerprint=True))["fp"]
        bad = np.flatnonzero(np.any(found != st["fp"], axis=1))
        if len(bad):
            s, e = sweeper.data.rows(int(bad[0]))
            which = "X" if np.any(found[bad[0], :2] != st["fp"][bad[0], :2]) else "y"
            raise DataChanged(
                f"store {sweeper.data.location!r}: the training data differ from those the "
                f"stored PCG iterations were computed from ({which}, rows {s}–{e - 1}); fit on "
                f"the same data, or use EngineOptions(overwrite=True) or a new store path")
        return {k: st[k] for k in ("b", "s", "y1", "yy")}
    sums = sweeper(PCGStep(None, first=True, check=_lazy(sweeper.X) or _lazy(sweeper.Y),
                           fingerprint=state is not None))
    if state is not None:
        state.save({**sums, "done": True})
    return sums


def _solve_lam(Kmm, T, z, lam, n, sweeper, *, alpha0, galpha0, tol, max_iter, state,
               c=None):
    """CG on ``Pᵀ H P u = Pᵀ z`` for one λ; returns ``(α, Kᵀ K α, n_iter, residuals, ok)``.

    ``c``: None, or ``s/√n`` (``s = K_nmᵀ 1``) for the centred system of an unpenalised
    intercept, ``H = K_nmᵀ K_nm − c cᵀ + nλ K_mm`` (the rank-one term on the driver, no pass).
    ``Kᵀ K α`` is returned uncentred in both cases.

    Divergence guard (per column, :data:`DIVERGE_GROWTH`, :data:`STALL_WINDOW`): each column
    keeps its best iterate, the one of lowest relative residual ``ρ_k = ‖r_k‖ / ‖Pᵀ z‖`` so far
    (its start included). In exact arithmetic CG decreases the error's energy norm at every
    step, so ``ρ_k ≤ √κ · min_{j<k} ρ_j`` (``κ = cond(Pᵀ H P)``); a column whose ``ρ_k`` exceeds
    ``DIVERGE_GROWTH`` times its best (κ ≥ 10⁶, or the recurrences lost to rounding), or that
    has not improved on its best for ``STALL_WINDOW`` iterations, stops. A column that stopped
    so is set back to its best iterate, certified by one more pass: ``K_nmᵀ K_nm α``
    recomputed and the residual ``‖Pᵀ(z − H α)‖`` formed from it (not the recursion), the
    value reported; where the start ``α₀`` (cold: 0; warm: the previous λ's solution, with its
    carried ``K_nmᵀ K_nm α₀``) has the lower residual, the start is kept instead. A diverged
    or stalled column warns (``ConvergenceWarning``) with what happened, what was kept and
    what to do. (A column at ``max_iter`` keeps its last iterate, as CG's error decreases in
    the energy norm, not necessarily its residual.)
    """
    device = getattr(Kmm, "on_device", None)
    with driver_threads(Kmm.m if isinstance(Kmm, LandmarkGram) else len(Kmm)):
        P = (Preconditioner(Kmm, lam, n, T=T, centre=c is not None) if device is None else
             device.preconditioner(T, lam, n, centre=c is not None))
    nlam = n * lam

    def hv(gv, v):  # H v from K_nmᵀ K_nm v
        out = gv + nlam * Kmm.dot(v)
        if c is not None:
            out -= np.outer(c, c @ v)
        return out
    rhs = P.apply_t(z)
    norm0 = np.sqrt(np.einsum("ij,ij->j", rhs, rhs))
    st = state.load() if state is not None else None
    if st is not None and st.get("done"):
        logger.info("pcg λ = %.3g: solution found in the store (%d iterations)", lam,
                    st["n_iter"])
        rr = st["rr"]
        return (st["alpha"], st["galpha"], int(st["n_iter"]), _rel(rr, norm0),
                bool(st["converged"]))
    t = z.shape[1]
    if st is not None:
        u, r, p, galpha, rr = st["u"], st["r"], st["p"], st["galpha"], st["rr"]
        iters, n_iter = st["iters"], int(st["n_iter"])
        logger.info("pcg λ = %.3g: resuming at iteration %d from the store", lam, n_iter)
    else:
        u = P.inverse(alpha0)
        galpha = galpha0.copy()
        r = rhs - P.apply_t(hv(galpha, alpha0))
        p = r.copy()
        rr = np.einsum("ij,ij->j", r, r)
        iters, n_iter = np.zeros(t), 0
    if st is not None and st.get("u_best") is not None:
        u_best, g_best, rr_best = st["u_best"], st["g_best"], st["rr_best"]
        it_best, stopped = st["it_best"], st["stopped"]
        failures = {int(j): tuple(f) for j, f in (st.get("failures") or {}).items()}
    else:  # a fresh start (or a state saved without the guard): the current iterate is best
        u_best, g_best, rr_best = u.copy(), galpha.copy(), rr.copy()
        it_best, stopped = iters.copy(), np.zeros(t)
        failures = {}

    def save(**extra):
        state.save({"u": u, "r": r, "p": p, "galpha": galpha, "rr": rr, "iters": iters,
                    "u_best": u_best, "g_best": g_best, "rr_best": rr_best,
                    "it_best": it_best, "stopped": stopped,
                    "failures": {str(j): list(f) for j, f in failures.items()}, **extra})
    while True:
        active = np.flatnonzero((np.sqrt(rr) > tol * norm0) & (stopped == 0))
        if len(active) == 0 or n_iter >= max_iter:
            break
        pa = p[:, active]
        v = P.apply(pa)
        gv = sweeper(PCGStep(v))["GV"]
        q = P.apply_t(hv(gv, v))
        step = rr[active] / np.einsum("ij,ij->j", pa, q)
        u[:, active] += step * pa
        galpha[:, active] += step * gv
        ra = r[:, active] - step * q
        r[:, active] = ra
        rr_new = np.einsum("ij,ij->j", ra, ra)
        p[:, active] = ra + (rr_new / rr[active]) * pa
        rr[active] = rr_new
        iters[active] += 1
        n_iter += 1
        better = active[rr_new < rr_best[active]]
        u_best[:, better], g_best[:, better] = u[:, better], galpha[:, better]
        rr_best[better], it_best[better] = rr[better], iters[better]
        _guard_columns(active, n_iter, rr, rr_best, iters, it_best, norm0, stopped, failures)
        if state is not None:
            save(alpha=None, n_iter=n_iter, done=False)
        logger.debug("pcg λ = %.3g: iteration %d, relative residuals %s", lam, n_iter,
                     _rel(rr, norm0))
    res = _rel(rr, norm0)
    back = np.flatnonzero(stopped > 0)
    if len(back):  # set back to the best iterates, certified by one pass
        start = _set_back(back, P, sweeper, hv, rhs, alpha0, galpha0,
                          u=u, galpha=galpha, r=r, rr=rr, u_best=u_best)
        res = _rel(rr, norm0)
        logger.info("pcg λ = %.3g: %d column(s) set back to their best iterate (%d to the "
                    "start), certified relative residuals %s", lam, len(back), len(start),
                    res[back])
    else:
        start = back
    ok = bool(np.all(res <= tol))
    if failures:
        warnings.warn(_divergence_message(lam, tol, failures, res, start),
                      convergence_warning(), stacklevel=4)
    elif not ok:
        warnings.warn(f"solver='pcg', λ = {lam:g}: stopped at max_iter = {max_iter} with relative "
                      f"residual {res.max():.3g} > tol = {tol:g}; increase max_iter or tol",
                      convergence_warning(), stacklevel=4)
    alpha = P.apply(u)
    alpha[:, start] = alpha0[:, start]
    if state is not None:
        save(alpha=alpha, n_iter=n_iter, done=True, converged=ok)
    return alpha, galpha, n_iter, res, ok


def _guard_columns(active, n_iter, rr, rr_best, iters, it_best, norm0, stopped,
                   failures) -> None:
    """The divergence guard of :func:`_solve_lam` after an iteration (``rr_best ≤ rr``: the
    current one included): an active column whose residual grew :data:`DIVERGE_GROWTH`-fold
    past its best, or went non-finite, or has not improved for :data:`STALL_WINDOW`
    iterations, is marked in ``stopped`` and recorded in ``failures`` (both updated in place)."""
    for j in active:
        if rr[j] > DIVERGE_GROWTH ** 2 * rr_best[j] or not np.isfinite(rr[j]):
            failures[int(j)] = ("grew", n_iter, float(rr_best[j]), float(rr[j]),
                                int(it_best[j]), float(norm0[j]))
        elif iters[j] - it_best[j] >= STALL_WINDOW:
            failures[int(j)] = ("stalled", n_iter, float(rr_best[j]), float(rr[j]),
                                int(it_best[j]), float(norm0[j]))
        else:
            continue
        stopped[j] = 1.0


def _set_back(back, P, sweeper, hv, rhs, alpha0, galpha0, *, u, galpha, r, rr,
              u_best) -> np.ndarray:
    """Columns ``back`` of :func:`_solve_lam`'s iterate (``u``, ``galpha``, ``r``, ``rr``,
    updated in place) set back to their best iterates, certified by one pass — or to the
    start where that is better (its residual from the given ``K_nmᵀ K_nm α₀``). Returns the
    columns set back to the start."""
    u[:, back] = u_best[:, back]
    a_b = P.apply(u[:, back])
    gv = sweeper(PCGStep(a_b))["GV"]
    galpha[:, back] = gv
    r[:, back] = rhs[:, back] - P.apply_t(hv(gv, a_b))
    rr[back] = np.einsum("ij,ij->j", r[:, back], r[:, back])
    r0 = rhs[:, back] - P.apply_t(hv(galpha0[:, back], alpha0[:, back]))
    rr0 = np.einsum("ij,ij->j", r0, r0)
    worse = rr0 < rr[back]
    start = back[worse]
    u[:, start], galpha[:, start] = P.inverse(alpha0[:, start]), galpha0[:, start]
    r[:, start], rr[start] = r0[:, worse], rr0[worse]
    return start


def _divergence_message(lam: float, tol: float, failures: dict, res: np.ndarray,
                        start: np.ndarray) -> str:
    """The warning of columns the divergence guard stopped: what happened (the worst column's
    residual history), what was kept (the best iterate, or the start where that certified
    better: ``start``) and what to do."""
    j = max(failures, key=lambda k: res[k])
    how, at, best, last, it_best, norm0 = failures[j]
    rel = (lambda v: np.sqrt(v) / norm0) if norm0 > 0 else (lambda v: 0.0)
    cols = f"{len(failures)} of the target columns" if len(res) > 1 else "the solve"
    what = (f"the relative residual grew from its lowest {rel(best):.3g} (iteration {it_best}) "
            f"to {rel(last):.3g} at iteration {at}" if how == "grew" else
            f"the relative residual has not gone below its lowest {rel(best):.3g} (iteration "
            f"{it_best}) in the {STALL_WINDOW} iterations to iteration {at}")
    kept = (f"Stopped and kept the starting point (the best iterate, iteration {it_best}, "
            f"was worse once recomputed)" if j in set(start.tolist()) else
            f"Stopped and kept the best iterate (iteration {it_best})")
    verb = "diverged" if how == "grew" else "stalled"
    return (f"solver='pcg', λ = {lam:g}: the conjugate gradient {verb} for {cols}: {what}. "
            f"{kept}, whose relative residual, recomputed (not the recursion's), is "
            f"{res[j]:.3g} "
            f"({'≤' if res[j] <= tol else '>'} tol = {tol:g}). More iterations will not help: "
            f"the preconditioned system is too ill-conditioned in floating point (nearly "
            f"coincident landmarks, or λ too small for the block dtype). Use solver='direct' "
            f"(which drops the numerically null directions of K_mm), a larger λ, or "
            f"EngineOptions(block_dtype='float64')")


def _lazy(src) -> bool:
    """Whether a row source (or any of a tuple of them, one per segment) is lazy."""
    return any(part.lazy for part in src) if isinstance(src, tuple) else bool(src.lazy)


def _rel(rr: np.ndarray, norm0: np.ndarray) -> np.ndarray:
    return np.where(norm0 > 0, np.sqrt(rr) / np.where(norm0 > 0, norm0, 1.0), 0.0)


def pcg_path(data: SweepData, X, Y, *, Kmm: LandmarkGram, lams, tol: float, max_iter: int,
             fit_intercept: bool, split_every: int = 4, progress: bool = False,
             states=None, centre: bool = False, T: np.ndarray | None = None,
             warm: np.ndarray | None = None) -> PCGResult:
    """Solve ``(K_nmᵀ K_nm + nλ K_mm) α = K_nmᵀ (Y − 1ȳᵀ)`` for every λ of ``lams`` by PCG.

    With ``centre=True`` (and ``fit_intercept``) the intercept is an unpenalised bias fitted
    jointly with α, as :class:`~distsketch.SketchedRegressor`'s: minimising
    ``(1/2n)‖K_nm α + 1 b₀ᵀ − Y‖² + (λ/2) Tr(αᵀ K_mm α)`` over ``b₀`` gives
    ``b₀ = ȳ − αᵀ s/n`` (``s = K_nmᵀ 1``), and over α the centred system
    ``(K_nmᵀ K_nm − s sᵀ/n + nλ K_mm) α = K_nmᵀ (Y − 1ȳᵀ)`` (the features' mean removed; the
    rank-one term is applied on the driver, so an iteration still costs one pass).

    Parameters
    ----------
    data : SweepData
        The sweep's layout; ``data.x`` is ``FeatureMap(kernel, X_J, None)`` (raw kernel blocks
        ``K_I``, recomputed: ``data.C`` and ``data.held`` None).
    X, Y : RowSource
        Training inputs and targets (n rows; Y of t columns, or 1-D).
    Kmm : LandmarkGram
        ``K_mm`` (products and the matrix to factor).
    lams : sequence of float
    tol, max_iter : float, int
        Relative residual to reach per column; most iterations per λ.
    fit_intercept : bool
        Centre the targets (``ȳ`` from the first pass).
    states : callable or None
        ``states(key: dict) -> SolverState group or None``: where to keep the state of the
        right-hand side (``key["what"] == "rhs"``) and of each λ (kept store), or None.
    centre : bool
        Also centre the features: the jointly fitted intercept (see above).
    T : ndarray (m, m), optional
        ``K_mm``'s factor (:func:`factor_kmm`) when already computed.
    warm : ndarray (n_lams, m, t), optional
        A start per λ (in the order of ``lams``; a fitted path's ``α``): the first pass also
        forms ``K_nmᵀ K_nm α₀`` of every start (one product of ``n_lams·t`` columns), and each
        λ starts from its own instead of the previous λ's solution. ``data`` may be
        :class:`~distsketch.engine.sweep.Segments` (``X``, ``Y``: tuples, one per part):
        every pass, and so every residual, is over the rows of every segment.

    Returns
    -------
    PCGResult
    """
    sweeper = Sweeper(data, X, Y, split_every=split_every, progress=progress, block=pcg_block,
                      name="pcg")
    n = data.n
    starts = None
    if warm is None:
        sums = _first_pass(sweeper,
                           None if states is None else _RhsState(states({"what": "rhs"})))
    else:  # the right-hand side and the starts' products, in one pass
        a0 = np.asarray(warm, dtype=np.float64)
        L, m0, t0 = a0.shape
        sums = sweeper(PCGStep(np.ascontiguousarray(a0.transpose(1, 0, 2).reshape(m0, -1)),
                               first=True, check=_lazy(X) or _lazy(Y)))
        starts = (a0, np.asarray(sums["GV"]).reshape(m0, L, t0).transpose(1, 0, 2))
    b = np.asarray(sums["b"], dtype=np.float64)
    y1 = np.asarray(sums["y1"], dtype=np.float64).reshape(-1)
    s = np.asarray(sums["s"], dtype=np.float64).reshape(-1)
    yy = np.asarray(sums["yy"], dtype=np.float64).reshape(-1)
    centre = bool(centre and fit_intercept)
    if fit_intercept:
        ybar = y1 / n
        z = b - np.outer(s, ybar)
        yyc = yy - n * ybar * ybar  # ‖Y − 1ȳᵀ‖² per column
    else:
        ybar, z, yyc = np.zeros_like(y1), b, yy
    c = s / np.sqrt(float(n)) if centre else None
    # SketchedKRR's keys as they were; the centred system is another one
    key = {"intercept": bool(fit_intercept), **({"centre": True} if centre else {})}
    res = lam_path(sweeper, Kmm, z, lams, tol=tol, max_iter=max_iter, states=states, key=key,
                   c=c, T=T, warm=starts)
    t = z.shape[1]
    intercepts = np.tile(ybar, (len(lams), 1))
    rss, penalties = np.empty((len(lams), t)), np.empty((len(lams), t))
    for k in range(len(lams)):
        # C-ordered operands: the same rounding whether α was computed or read from a store
        a, ga = res.alphas[k], np.ascontiguousarray(res.galphas[k])
        sa = s @ a
        rss[k] = (np.einsum("ij,ij->j", a, ga) - 2.0 * np.einsum("ij,ij->j", a, z)
                  + yyc - (sa * sa / n if centre else 0.0))
        penalties[k] = np.einsum("ij,ij->j", a, Kmm.dot(a))
        if centre:
            intercepts[k] = ybar - sa / n
    return dataclasses.replace(res, intercept=ybar, intercepts=intercepts,
                               rss=np.maximum(rss, 0.0), penalties=penalties)


def lam_path(sweeper: Sweeper, Kmm, z: np.ndarray, lams, *, tol: float, max_iter: int,
             states=None, key: dict | None = None, c: np.ndarray | None = None,
             T: np.ndarray | None = None, warm: tuple | None = None) -> PCGResult:
    """Solve ``(K_nmᵀ K_nm + nλ K_mm) α = z`` (``− c cᵀ`` with ``c``) for every λ of ``lams``
    by PCG, all columns of ``z`` (m × t) at once, from a right-hand side already computed.

    The λ are solved in decreasing order, each warm-started from the previous ``α`` and its
    carried ``K_nmᵀ K_nm α`` (no pass). ``states``: as for :func:`pcg_path`; each λ's state is
    kept under ``{"what": "lam", "lam", "tol", "warm", **key}``. ``sweeper``: a
    :class:`~distsketch.engine.sweep.Sweeper` running :func:`pcg_block`. Returns a
    :class:`PCGResult` with ``galphas`` (``K_nmᵀ K_nm α(λ)``) and zero ``intercept``;
    ``n_passes`` counts the sweeper's passes so far. ``T``: ``K_mm``'s factor
    (:func:`factor_kmm`) when already computed. ``warm``: ``(α₀, K_nmᵀ K_nm α₀)``, arrays
    (n_lams, m, t): each λ starts from its own instead (its state keyed ``"start": "given"``).
    """
    n = sweeper.data.n
    m, t = z.shape
    if T is None:
        with driver_threads(m):  # between passes: the driver's factorisations on idle cores
            T = factor_kmm(Kmm)
    order = sorted(range(len(lams)), key=lambda k: -lams[k])
    alphas, galphas = np.empty((len(lams), m, t)), np.empty((len(lams), m, t))
    n_iters = np.zeros(len(lams), dtype=np.int64)
    residuals = np.empty((len(lams), t))
    converged = np.zeros(len(lams), dtype=bool)
    alpha, galpha = np.zeros((m, t)), np.zeros((m, t))
    for k in order:
        lam = float(lams[k])
        state = None
        if warm is not None:
            alpha, galpha = warm[0][k], warm[1][k]
        if states is not None:
            state = _PCGState(states({"what": "lam", "lam": lam, "tol": float(tol),
                                      "warm": sorted(float(v) for v in lams if v > lam),
                                      **(key or {}),
                                      **({"start": "given"} if warm is not None else {})}))
        alpha, galpha, n_iters[k], residuals[k], converged[k] = _solve_lam(
            Kmm, T, z, lam, n, sweeper, alpha0=alpha, galpha0=galpha, tol=tol,
            max_iter=max_iter, state=state, c=c)
        alphas[k], galphas[k] = alpha, galpha
        logger.info("pcg λ = %.3g: %d iterations, relative residual %.3g", lam, n_iters[k],
                    residuals[k].max())
    return PCGResult(alphas, np.zeros(t), n_iters, residuals, converged, sweeper.count,
                     galphas=galphas)
