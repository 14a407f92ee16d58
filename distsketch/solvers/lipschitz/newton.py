"""Newton route of the Lipschitz-loss machines: Newton iterations, one sweep over the blocks each.

The problem, its Fenchel dual and the certificate (the relative duality gap ``(P − D)/P`` at
a feasible dual point from every iterate) are :mod:`distsketch.lipschitz`'s (docs/design.md,
"Lipschitz losses"); the fit stops when the gap is ≤ ``tol``.

Each iteration is one sweep (:mod:`distsketch.sweep`) that returns, at the iterate, the loss,
the gradient ``Cᵀα`` and the weighted Grams of the (generalised) Hessian, and the losses along
the previous Newton direction on a grid of step sizes (a backtracking line search with no
extra pass when the full step is taken, as near the solution). The driver forms the Newton
system of size ``r·d + d`` — or ``d`` systems of size ``r + 1`` (one factorisation for
``M = I``) when the Hessian weights are scalar per row, in the eigenbasis of ``M`` — and
solves it. Non-smooth losses (ε-insensitive, pinball) are replaced by their Moreau envelopes
``h_μ`` with μ decreased by 10 whenever the smoothed problem's gap falls below a tenth of
the true gap (continuation), so Newton converges on each and the true gap certifies the end.
At each μ change a *KKT polish* tries the non-smooth problem's solution: for entry-wise kinks
(scalar ε, pinball, also coupled by ``M``) the exact solution of the problem restricted to the
entries within ``WINDOW·μ`` of their kinks, the others' losses kept linear, solved on the
driver (:func:`restricted_polish`; :func:`polish`, the equality-constrained QP on the smoothing
band's active set, when no window is gathered); for the radial ε with d > 1,
whose kink is the sphere ``‖r_i‖ = ε``, Newton (SQP) steps with those rows held on it, one
sweep each (:func:`sphere_step`). Either ends at rounding level once the active set is right.
The first iterate is the closed-form squared-loss solution from the pass's sums (exact for
``loss="squared"``, which is :class:`~distsketch.SketchedKRR` with an intercept and ``M``).

The driver is a sequence of phases over a typed state (:class:`NewtonState`; its ``mode``
says what the next sweep evaluates): :func:`solve_lam` runs a sweep (:func:`sweep_request`,
:func:`record_sweep`), then the phase of what it evaluated — :func:`after_newton_step` (the
line search), :func:`after_polish`, :func:`after_sphere_polish`, or, at the iterate itself,
:func:`after_probe` (the first sweep of a smoothed loss: μ) — then, at an accepted point,
:func:`certify` (the gap and the stopping rules) and :func:`next_step` (a smaller μ and a
polish, or the next Newton direction). The state after every sweep is written to the store
(``solver/<key>``, with its checksums, in the solver state's keys): a fit killed
mid-iterations resumes from the last one and ends with the identical model.

Glossary: ``Ξ`` (``Xi``, r × d) and ``b₀`` (``b0``): the iterate; ``ΔΞ``, ``Δb₀`` (``dXi``,
``db0``): a direction; ``μ`` (``mu``): the smoothing; ``s``: a sweep's sums; ``P``
(``p_true``), ``P_μ`` (``p_mu``): the true and smoothed objectives.
"""

from __future__ import annotations

import logging
import math
import warnings
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from scipy.linalg import LinAlgError, LinAlgWarning, cho_factor, cho_solve, lu_factor, lu_solve
from scipy.linalg.lapack import dgecon as _dgecon
from scipy.linalg.lapack import dpotrf as _dpotrf
from scipy.linalg.lapack import dpotrs as _dpotrs

from .problem import (STATE_VERSION, Problem, Solution, SolverState, convergence_warning,
    dual_values, finish, objective, save_state, state_key)
from ...engine.sweep import Iterate

__all__ = ["NewtonState", "NewtonSetup", "solve_lam", "solve_path", "warm_start",
           "newton_direction",
           # re-exported from distsketch.lipschitz, where they live (pcg.py imports them here)
           "Problem", "Solution", "SolverState", "state_key", "convergence_warning",
           "dual_values", "STATE_VERSION"]

logger = logging.getLogger(__name__)


def __getattr__(name: str):
    if name == "ConvergenceWarning":
        return convergence_warning()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


#: Step sizes of the line search: 1, 1/2, …, 2^-12 (losses of all of them in one sweep). The
#: full step when it meets Armijo's condition; otherwise the grid's lowest objective (not the
#: longest step meeting Armijo's: on a piecewise-quadratic smoothed loss that cut the sweeps of
#: ε-insensitive SVR on CASP-20 000 from 46 to 38 and of pinball τ = 0.9 from 126 to 91).
GRID = tuple(2.0 ** -k for k in range(13))
#: Steps along a KKT polish whose true objective a polish sweep reports.
POLISH_GRID = tuple(2.0 ** -k for k in range(1, 9))
#: Levenberg–Marquardt damping of smoothed losses: ``damp/μ · [C 1]ᵀ[C 1]/n`` is added to
#: the Hessian (a band of weight ``damp/μ`` over every row), ×DAMP_UP after a step shorter
#: than 1 (at least DAMP_MIN), ×DAMP_DOWN after a full one.
DAMP_UP, DAMP_DOWN, DAMP_MIN = 10.0, 0.1, 1e-4
#: Armijo's sufficient-decrease constant.
ARMIJO = 1e-4
#: Smoothing continuation: μ ← μ·MU_FACTOR once the smoothed gap is below GAP_RATIO × true gap.
MU_FACTOR = 0.1
GAP_RATIO = 0.1
#: Smoothings at which the first sweep of a smoothed loss counts the rows at each curvature
#: level (quarter octaves, 2^-100 … 2^100): μ is its residuals' RMS, known only after it, and
#: the next sweep's Gram skips the rows at the commonest level at the nearest of these μ
#: (CASP-20 000, ε = 0.5: 7142 rows instead of the 12 858 in the band at 1/μ).
LEVEL_MUS = 2.0 ** (np.arange(-400, 401) / 4.0)
#: Largest ``(m+1)²`` Gram (bytes) the driver keeps from sweep to sweep, so that a Newton sweep
#: from the last Grams' point forms only their change over the rows whose curvature moved
#: (``Iterate.delta``; CASP-20 000, ε = 0.5: 3036 rows instead of 7142, 519 instead of 2155,
#: 114 instead of 2167 at successive sweeps). Beyond, every sweep forms its Grams whole.
DELTA_GRAM_BYTES = 32 << 20


# --------------------------------------------------------------------------- the Newton step


def _feature_grams(prob: Problem, Q: np.ndarray, kind: str, base: float) -> np.ndarray:
    """``(1/n) P̃ᵀ (Q + base·G̃) P̃`` with ``P̃ = diag(T, 1)``, per kind (the base part,
    ``P̃ᵀ G̃ P̃ / n``, is transformed once per problem)."""
    m, r = prob.T.shape
    n = prob.n

    def tf(A):
        if not np.any(A):
            return np.zeros((r + 1, r + 1))
        out = np.empty((r + 1, r + 1))
        TA = prob.T.T @ A[:m]  # (r, m+1)
        out[:r, :r] = TA[:, :m] @ prob.T
        out[:r, r] = TA[:, m]
        out[r, :r] = A[m, :m] @ prob.T
        out[r, r] = A[m, m]
        return out / n

    GF = prob.feature_gram() if base else 0.0
    if kind == "scalar":
        return tf(Q) + base * GF
    d = prob.d
    out = np.zeros((d, d, r + 1, r + 1))
    for j in range(d):
        if kind == "diag":
            out[j, j] = tf(Q[j]) + base * GF
        else:
            for k in range(d):
                out[j, k] = tf(Q[j, k]) + (base * GF if j == k else 0.0)
    return out


def _solve_spd(K: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    """``K⁻¹ rhs`` for a symmetric PSD ``K``: Cholesky, or the eigendecomposition with the
    numerically null directions dropped."""
    K = np.asarray(K, dtype=np.float64)
    S = np.add(K, K.T)
    S *= 0.5  # = 0.5 (K + Kᵀ), exactly symmetric: Sᵀ (Fortran order, no copy) is S itself
    if S.size and np.ndim(rhs) == 2:  # cho_factor / cho_solve's LAPACK calls (lower),
        c, info = _dpotrf(S.T, lower=1, clean=0, overwrite_a=1)  # without checks and copies
        if info == 0:
            x, info = _dpotrs(c, rhs, lower=1)
            if info == 0:
                return x
        K = 0.5 * (K + K.T)
        if info < 0:
            raise ValueError(f"LAPACK reported an illegal value in argument {-info}")
    else:
        K = S
    try:
        return cho_solve(cho_factor(K, lower=True, check_finite=False), rhs, check_finite=False)
    except LinAlgError:
        w, V = np.linalg.eigh(K)
        keep = w > max(w[-1], 0.0) * 1e-13
        return V[:, keep] @ ((V[:, keep].T @ rhs) / w[keep][:, None])


def newton_direction(prob: Problem, lam: float, stats: dict, kind: str, base: float,
                     gXi: np.ndarray, gb: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(ΔΞ, Δb₀) = −∇²P⁻¹ ∇P`` from a sweep's Grams (the intercept block damped by λ)."""
    r, d = prob.r, prob.d
    Q = stats["Q"]
    if not np.any(Q):  # no row off the base curvature (a 0-d zero): base·I per row
        kind, Q = "scalar", np.zeros_like(prob.Gt)
    Qf = _feature_grams(prob, Q, kind, base)
    ib = prob.intercept
    if kind == "scalar":  # decoupled in the eigenbasis of M: one (r+1) system per eigenvalue
        gR = gXi @ prob.U
        gbR = prob.U.T @ gb
        dR = np.empty_like(gR)
        dbR = np.zeros(d)
        for nu in np.unique(prob.nu):
            cols = np.flatnonzero(prob.nu == nu)
            sq = math.sqrt(max(nu, 0.0))
            size = r + 1 if ib else r
            K = np.empty((size, size))
            K[:r, :r] = nu * Qf[:r, :r]
            K[:r, :r].flat[:: r + 1] += lam
            rhs = np.empty((size, len(cols)))
            rhs[:r] = gR[:, cols]
            if ib:
                K[:r, r] = K[r, :r] = sq * Qf[:r, r]
                K[r, r] = Qf[r, r] + lam
                rhs[r] = gbR[cols]
            x = -_solve_spd(K, rhs)
            dR[:, cols] = x[:r]
            if ib:
                dbR[cols] = x[r]
        return dR @ prob.U.T, prob.U @ dbR
    H = _coupled_hessian(prob, Qf, lam, lam)
    g = gXi.T.reshape(-1)
    if ib:
        g = np.concatenate([g, gb])
    x = -_solve_spd(H, g[:, None])[:, 0]
    dXi = x[: d * r].reshape(d, r).T
    db = x[d * r:] if ib else np.zeros(d)
    return dXi, db


def _coupled_hessian(prob: Problem, Qf: np.ndarray, lam: float, damp_b: float) -> np.ndarray:
    """The Hessian in ``(vec Ξ, b₀)`` (size ``r·d + d``, Ξ flattened output-major) from the
    feature Grams ``Qf`` (d, d, r+1, r+1): ``H_ΞΞ[(a,p),(c,q)] = Σ_jk S_ja S_kc Qf_jk[p,q]
    + λδ``, ``H_Ξb[(a,p),k] = Σ_j S_ja Qf_jk[p,r]``, ``H_bb = Qf[:, :, r, r] + damp_b·I``
    (the Newton step damps the intercept by λ; the sphere polish does not)."""
    r, d, S = prob.r, prob.d, prob.S
    HXX = np.einsum("ja,kc,jkpq->apcq", S, S, Qf[:, :, :r, :r], optimize=True).reshape(d * r, d * r)
    HXX.flat[:: d * r + 1] += lam
    if not prob.intercept:
        return HXX
    HXb = np.einsum("ja,jkp->apk", S, Qf[:, :, :r, r], optimize=True).reshape(d * r, d)
    Hbb = Qf[:, :, r, r] + damp_b * np.eye(d)
    return np.block([[HXX, HXb], [HXb.T, Hbb]])


# --------------------------------------------------------------------------- gradient, warm start


def _gradient(prob: Problem, lam: float, stats: dict, Xi: np.ndarray):
    n = prob.n
    gXi = prob.T.T @ stats["Ca"] @ prob.S / n + lam * Xi
    gb = stats["sa"] / n if prob.intercept else np.zeros(prob.d)
    return gXi, gb


def warm_start(prob: Problem, lam: float) -> tuple[np.ndarray, np.ndarray]:
    """The squared-loss solution (closed form from the pass's sums): one Newton step from 0."""
    stats = {"Q": np.zeros_like(prob.Gt)}
    gXi = -prob.T.T @ prob.b @ prob.S / prob.n
    gb = -prob.y1 / prob.n if prob.intercept else np.zeros(prob.d)
    return newton_direction(prob, lam, stats, "scalar", 1.0, gXi, gb)


# --------------------------------------------------------------------------- the KKT polish


#: Relative singular-value cut of a polish's KKT system (dependent kinks, see _solve_kkt).
KKT_RCOND = 1e-12


def _solve_kkt(K: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    """A polish's (symmetric, indefinite) KKT system: LU when it is well conditioned (LAPACK's
    ``dgecon`` estimate, O(size²) after the factorisation), else the minimum-norm
    least-squares solution with singular values below ``KKT_RCOND`` of the largest dropped.
    A degenerate vertex holds more kinks than independent constraints (features of
    numerically lower rank than r): LU would then return multipliers of size 1/rounding and
    a polished point far off, where the least-squares one keeps the consistent part."""
    try:
        with warnings.catch_warnings():  # an exactly singular K: least squares below
            warnings.simplefilter("error", LinAlgWarning)
            lu, piv = lu_factor(K, check_finite=False)
        rcond, info = _dgecon(lu, float(np.abs(K).sum(axis=0).max()), norm="1")
        if info == 0 and rcond >= KKT_RCOND:
            sol = lu_solve((lu, piv), rhs, check_finite=False)
            if np.all(np.isfinite(sol)):
                return sol
    except (LinAlgError, LinAlgWarning, ValueError):
        pass
    return np.linalg.lstsq(K, rhs, rcond=KKT_RCOND)[0]


def polish(prob: Problem, lam: float, s: dict) -> tuple[np.ndarray, np.ndarray] | None:
    """The KKT point of the non-smooth problem on the active set of a sweep (``collect``).

    Entries in the smoothing band are held on their kink (``f_j(x_i) = y_ij + kink``), the
    others keep their gradient (``α_out``, a constant of the non-smooth loss there): the
    equality-constrained quadratic program ``min (λ/2)‖Ξ‖² + ⟨g_out, (Ξ, b₀)⟩ s.t. A (Ξ, b₀) = t``,
    solved through its multipliers ν (``λΞ = −g_out − A_Ξᵀν``, size ``|E| + d``). A held
    entry whose dual value ``β_e = nν_e`` leaves its interval ``[lo_j, hi_j]`` is released
    to that side (its gradient the bound, added to ``g_out``) and the program solved again,
    on the driver, until every held ``β_e`` is feasible (a primal–dual active-set loop over
    the band; for the separable pinball and the scalar ε the gathered rows suffice, and the
    coupling by ``M`` only enters through ``A``). Exact when the active set is the
    solution's: the next sweep's duality gap says whether it is.
    """
    k = len(s["E_row"])
    if k == 0:
        return None
    r, d, n = prob.r, prob.d, prob.n
    cols = s["E_col"]
    Phi = s["E_C"] @ prob.T
    AX = np.concatenate([prob.S[cols, a][:, None] * Phi for a in range(d)], axis=1)
    gX = (prob.T.T @ s["Ca_out"] @ prob.S / n).T.reshape(-1)
    sa = np.array(s["sa_out"], dtype=np.float64)
    lo, hi = prob.loss.kink_bounds(cols, s["E_target"] - s["E_y"], d)
    held = np.ones(k, dtype=bool)
    beta = np.zeros(k)
    for _ in range(k):
        idx = np.flatnonzero(held)
        if len(idx) == 0:
            return None
        A = AX[idx]
        rhs = s["E_target"][idx] + A @ gX / lam
        K = -(A @ A.T) / lam
        if prob.intercept:
            Ab = np.zeros((len(idx), d))
            Ab[np.arange(len(idx)), cols[idx]] = 1.0
            K = np.block([[K, Ab], [Ab.T, np.zeros((d, d))]])
            rhs = np.concatenate([rhs, -sa / n])
        sol = _solve_kkt(K, rhs)
        nu = sol[: len(idx)]
        # the dual variables of the held entries: β_e = n ν_e (λ n Ξ = −Φᵀ β S)
        beta[idx] = n * nu
        low, high = beta[idx] < lo[idx], beta[idx] > hi[idx]
        if not (low.any() or high.any()):
            break
        out = idx[low | high]
        beta[out] = np.where(low, lo[idx], hi[idx])[low | high]
        held[out] = False
        gX = gX + AX[out].T @ beta[out] / n
        np.add.at(sa, cols[out], beta[out])
    if not np.all(np.isfinite(sol)):
        return None
    Xi = (-(gX + A.T @ nu) / lam).reshape(d, r).T
    b0 = sol[len(idx):] if prob.intercept else np.zeros(d)
    fix = {"fix_C": s["E_C"], "fix_col": cols.astype(np.float64), "fix_y": s["E_y"],
           "fix_beta": beta}
    return Xi, b0, fix


#: Width, in units of μ, of the window of entries around their kink that a sweep gathers for
#: the restricted polish (entry-wise kinks: scalar ε-insensitive, pinball with any d and M),
#: the most entries gathered, and the largest system (``r·d + d``) the driver solves for it
#: (each of its Newton steps factorises one; beyond, the band polish alone).
WINDOW, WINDOW_ENTRIES, RESTRICTED_SIZE = 3.0, 4000, 512
#: Continuation stages and Newton steps per stage of the restricted problem on the driver.
RESTRICTED_STAGES, RESTRICTED_STEPS = 12, 40
#: The first stage's smoothing, relative to the sweeps' μ: the iterate is already about the
#: minimiser of the problem smoothed with μ (the continuation moves on once its smoothed gap is
#: a tenth of the true one), so a stage at μ itself would repeat the sweeps' Newton steps
#: (CASP-20 000: 4 steps, 6–9 ms of the polish's ~70, the same polished point).
RESTRICTED_START = 0.1


def _kkt_point(A: np.ndarray, Eb: np.ndarray | None, t: np.ndarray, g: np.ndarray,
               sa: np.ndarray, lam: float, n: int):
    """``argmin (λ/2)‖x‖² + gᵀx + (saᵀb)/n  s.t.  A x + Eb b = t`` (no b when ``Eb`` is
    None; ``Eb``: the one-hot output of each entry) through its multipliers ν
    (``λx = −g − Aᵀν``, ``Ebᵀν = −sa/n``): ``(x, b, ν)``."""
    k = len(t)
    K = -(A @ A.T) / lam
    rhs = t + A @ g / lam
    if Eb is not None:
        d = Eb.shape[1]
        K = np.block([[K, Eb], [Eb.T, np.zeros((d, d))]])
        rhs = np.concatenate([rhs, -sa / n])
    sol = _solve_kkt(K, rhs) if len(rhs) else np.zeros(0)
    nu = sol[:k]
    x = -(g + A.T @ nu) / lam
    return x, sol[k:], nu


#: Most primal–dual active-set steps after a stage of the restricted polish, and the largest
#: share of the held entries one step may move (more: the stage's band is too far from the
#: solution's, and the steps would oscillate; the continuation goes on).
ACTIVE_STEPS, ACTIVE_SHARE = 8, 0.3


def _active_set(A: np.ndarray, Eb: np.ndarray | None, t: np.ndarray, lo: np.ndarray,
                hi: np.ndarray, gz: np.ndarray, cols: np.ndarray, lam: float, n: int,
                held: np.ndarray, beta: np.ndarray):
    """The exact minimiser of the restricted problem (:func:`restricted_polish`) by
    primal–dual active-set steps from a stage's partition of its entries.

    ``held``: the entries held on their kink (``u_e = 0``); the others sit at a bound of
    their subdifferential (``beta_e`` = ``lo_e`` for ``u_e < 0``, ``hi_e`` for ``u_e > 0``,
    their gradient in ``g``). Each step solves the equality-constrained QP on the partition
    (:func:`_kkt_point`: the held entries' multipliers ``β_e = nν_e``), then moves a held
    entry whose ``β_e`` left ``[lo_e, hi_e]`` to that bound, and holds a bound entry whose
    ``u_e`` crossed to the other side of its kink. A partition that needs no move is the
    solution: the held entries on their kinks (to rounding), their multipliers in the
    subdifferential, the others on their side — the KKT conditions of the restricted problem.
    Gives up (None) when a step would move more than ``ACTIVE_SHARE`` of the held entries,
    when the moves do not shrink, when more entries are held than there are unknowns, or
    after ``ACTIVE_STEPS``. Returns ``(x, b₀, β, held, steps)``.
    """
    rd = A.shape[1]
    d = 0 if Eb is None else Eb.shape[1]
    tol_u = 1e-9 * max(float(np.abs(t).max()), 1.0)
    moved = math.inf
    for step in range(1, ACTIVE_STEPS + 1):
        if int(held.sum()) > rd + d:  # more kinks than unknowns: not a vertex's active set
            return None
        out = ~held
        gk = gz[:rd] + A[out].T @ beta[out] / n
        sk = (gz[rd:] * n + np.bincount(cols[out], weights=beta[out], minlength=d)
              if d else None)
        x, bk, nu = _kkt_point(A[held], Eb[held] if d else None, t[held], gk, sk, lam, n)
        if not np.all(np.isfinite(x)):
            return None
        beta = beta.copy()
        beta[held] = n * nu
        uk = A @ x + (bk[cols] if d else 0.0) - t
        # held entries whose multiplier left the subdifferential (beyond rounding), and
        # entries at a bound that crossed their kink
        low, high = held & (beta < lo - 1e-9), held & (beta > hi + 1e-9)
        cross = out & (((beta == lo) & (uk > tol_u)) | ((beta == hi) & (uk < -tol_u)))
        count = int(low.sum() + high.sum() + cross.sum())
        if count == 0:
            # held entries on their kinks: a degenerate vertex (more held than independent
            # constraints) leaves them off in least squares, and is not accepted
            if np.all(np.abs(uk[held]) <= tol_u):
                return x, (bk if d else np.zeros(0)), beta, held, step
            return None
        if count > max(2, ACTIVE_SHARE * int(held.sum())) or count >= moved:
            return None
        moved = count
        beta[low], beta[high] = lo[low], hi[high]
        held = (held & ~low & ~high) | cross
    return None


def _exact_step(u: np.ndarray, du: np.ndarray, lo: np.ndarray, hi: np.ndarray, mu: float,
                n: int, c0: float, c1: float, s0: float) -> float | None:
    """The exact line search of :func:`restricted_polish` along a Newton step ``dz`` (``du =
    A dz``; ``c0``, ``c1``: the quadratic part's slope at 0 and curvature, ``s0``: the slope
    at 0): the step ``h`` where the smoothed restricted objective's slope ``φ'(h)`` vanishes,
    by safeguarded Newton on the monotone, piecewise-linear ``φ'``; None when the full step
    already ends on the minimum."""

    flat = None  # (φ', φ''): the slope once it no longer depends on h (below)
    wbuf, vbuf, cbuf = np.empty_like(u), np.empty_like(u), np.empty_like(u)
    ibuf, jbuf = np.empty(u.shape, dtype=bool), np.empty(u.shape, dtype=bool)

    def slope(h):  # the smoothed restricted objective along dz: φ'(h), φ''(h)
        nonlocal flat
        if flat is not None:
            return flat
        w = np.multiply(h, du, out=wbuf)
        w += u  # u + h·du
        v = np.divide(w, mu, out=vbuf)
        ins = np.greater(v, lo, out=ibuf)
        ins &= np.less(v, hi, out=jbuf)
        np.maximum(v, lo, out=cbuf)  # clip(v, lo, hi) (the same values)
        np.minimum(cbuf, hi, out=cbuf)
        dui = du[ins]
        out = (c0 + h * c1 + float(cbuf @ du) / n,
               c1 + float(dui @ dui) / (n * mu))
        # a step too short to move any u_e (or the quadratic part) in floating point: every
        # shorter one gives these same values (rounding is monotone), so the bisection
        # towards 0 that follows (rounding noise in φ' near a converged point) needs no
        # more passes over the entries: the same iterations, bitwise the same h
        if c0 + h * c1 == c0 and np.array_equal(w, u):
            flat = out
        return out

    s1, curv = slope(1.0)
    if abs(s1) <= 1e-9 * abs(s0):
        return None
    hlo, hhi, h = 0.0, math.inf, 1.0
    for _ in range(100):  # safeguarded Newton on the monotone, piecewise-linear φ'
        if s1 < 0:
            hlo = h
        else:
            hhi = h
        if abs(s1) <= 1e-12 * abs(s0) or hhi - hlo <= 1e-15 * hhi:
            break
        h = h - s1 / curv if curv > 0 else math.nan
        if not hlo < h < hhi:
            h = 0.5 * (hlo + hhi) if math.isfinite(hhi) else 2.0 * hlo
        s1, curv = slope(h)
    return h


def restricted_polish(prob: Problem, lam: float, s: dict, Xi: np.ndarray, b0: np.ndarray,
                      mu: float):
    """The exact minimiser of the problem restricted to a window of entries.

    The sweep gathered the entries ``e = (i, j)`` within ``WINDOW·μ`` of their kink
    (``collect`` with ``window``; separable losses: scalar ε, pinball with any d and ``M``):
    their rows ``a_e`` of the constraint matrix (``a_e·vec Ξ = (S Ξᵀ φ_i)_j``, as in
    :func:`polish`), targets ``t_e = y_ij + κ_e``, the subdifferential ``[lo_e, hi_e]`` at
    the kink, and the gradient sums of the other entries, whose loss is kept linear (``g``:
    their ``(1/n) Φᵀ α S`` and ``Σα``). The restricted problem, ``x = vec Ξ``::

        min (λ/2)‖x‖² + gᵀx + (Σα)ᵀb₀/n + (1/n) Σ_e max(lo_e u_e, hi_e u_e),
        u_e = a_eᵀx + b₀_j − t_e

    is a lower model of the objective (each loss lies above its tangent), exact near the
    iterate, so its minimiser is the end point of a descent direction. The driver solves it
    (k ≤ WINDOW_ENTRIES entries, systems of size ``r·d + d``): Newton on its Moreau smoothing
    (the band's Gram updated by the entries that enter or leave it) with an exact line search
    (safeguarded Newton on the monotone piecewise-linear slope), from ``RESTRICTED_START·μ``
    (μ: the sweeps' smoothing), divided by 10 per stage;
    after each stage, primal–dual active-set steps from the band's partition
    (:func:`_active_set`: the KKT point on the held entries, :func:`_kkt_point`, then the
    entries whose multiplier or side is wrong moved) until a partition is the restricted
    problem's solution (held ``β_e = nν_e ∈ [lo_e, hi_e]`` on their kinks, every other entry
    on its side of the kink), or they give up and the next stage goes on. Returns
    ``(Ξ, b₀, fix)`` as :func:`polish`, or None (no exact point within RESTRICTED_STAGES
    stages).
    """
    k = len(s["E_row"])
    if k == 0:
        return None
    n, r, d = prob.n, prob.r, prob.d
    cols = np.asarray(s["E_col"], dtype=np.int64)
    Phi = s["E_C"] @ prob.T
    if d == 1:  # one output: A = S₁₁ Φ (no copy when S₁₁ = 1)
        A = Phi if prob.S[0, 0] == 1.0 else prob.S[0, 0] * Phi
    else:
        A = np.concatenate([prob.S[cols, a][:, None] * Phi for a in range(d)], axis=1)
    rd = r * d
    t = np.asarray(s["E_target"], dtype=np.float64)
    lo, hi = prob.loss.kink_bounds(cols, t - s["E_y"], d)
    ib = prob.intercept
    gz = (prob.T.T @ s["Ca_out"] @ prob.S / n).T.reshape(-1)
    z = Xi.T.reshape(-1).astype(np.float64)
    pen = np.full(rd, lam)
    At = A
    if ib:  # z = (vec Ξ, b₀): the intercept unpenalised, each entry on its output's b₀
        Eb = np.zeros((k, d))
        Eb[np.arange(k), cols] = 1.0
        At = np.hstack([A, Eb])
        gz = np.concatenate([gz, np.asarray(s["sa_out"], dtype=np.float64) / n])
        z = np.concatenate([z, np.asarray(b0, dtype=np.float64)])
        pen = np.concatenate([pen, np.zeros(d)])
    size = At.shape[1]
    mu = mu * RESTRICTED_START
    Hbuf = np.empty((size, size))
    for _ in range(RESTRICTED_STAGES):
        last = None
        prev, G = np.zeros(k, dtype=bool), np.zeros((size, size))
        u = At @ z - t  # (then moved with z: u + h·du)
        clipped = None
        mlo, mhi = mu * lo, mu * hi
        for _ in range(RESTRICTED_STEPS):
            inb = (u > mlo) & (u < mhi)
            if last is not None and np.array_equal(inb, last):
                break  # the same band after a full Newton step: the smoothed minimiser
            cl = np.clip(u / mu, lo, hi)
            moved = None if clipped is None else np.flatnonzero(cl != clipped)
            if moved is None or 2 * len(moved) > k:
                glin = At.T @ cl
            elif len(moved):  # Aᵀ clip(u/μ): only the band's and the crossing entries move
                glin = glin + At[moved].T @ (cl[moved] - clipped[moved])
            clipped = cl
            grad = pen * z + gz + glin / n
            add, rem = np.flatnonzero(inb & ~prev), np.flatnonzero(prev & ~inb)
            if len(add) + len(rem) < int(inb.sum()):  # Σ_band ã ãᵀ updated by the changes
                ch = np.concatenate([add, rem])
                Ac = At[ch]
                G += Ac.T @ (np.where(np.arange(len(ch)) < len(add), 1.0, -1.0)[:, None] * Ac)
            else:
                Ab = At[inb]
                G = Ab.T @ Ab
            prev = inb
            H = np.divide(G, n * mu, out=Hbuf)
            H.flat[:: size + 1] += lam  # (the intercept damped by λ, as newton_direction)
            dz = _solve_spd(H, -grad[:, None])[:, 0]
            du = At @ dz
            s0 = float(grad @ dz)
            if not s0 < 0:
                break
            c0, c1 = float((pen * z + gz) @ dz), float(dz @ (pen * dz))
            h = _exact_step(u, du, lo, hi, mu, n, c0, c1, s0)
            if h is None:  # the Newton step ends on the minimum
                z = z + dz
                u = u + du
                last = inb
                continue
            last = None
            z_next, u_next = z + h * dz, u + h * du
            if inb.any() and np.array_equal(z_next, z) and np.array_equal(u_next, u):
                # a step that moves nothing in floating point: the next steps would repeat
                # this one from the same state (the same band, gradient, Gram — updated by
                # nothing — and step); an empty band would recompute its Gram from scratch
                break
            z, u = z_next, u_next
        u = At @ z - t
        held = (u > mlo) & (u < mhi)
        beta = np.where(u <= mlo, lo, hi)
        mu *= 0.1
        found = _active_set(A, Eb if ib else None, t, lo, hi, gz, cols, lam, n, held, beta)
        if found is not None:
            x, bk, beta, held, steps = found
            logger.debug("restricted polish: %d entries, %d held, exact at μ = %.3g (%d active-set "
                         "steps)", k, int(held.sum()), mu * 10, steps)
            fix = {"fix_C": s["E_C"], "fix_col": cols.astype(np.float64), "fix_y": s["E_y"],
                   "fix_beta": np.clip(beta, lo, hi)}
            return x.reshape(d, r).T, (bk if ib else np.zeros(d)), fix
    logger.debug("restricted polish: no exact point on %d entries", k)
    return None


def _with_fix(prob: Problem, Xi: np.ndarray, b0: np.ndarray, s: dict, fix: dict, mu: float):
    """The sweep's dual sums with the held entries' gradients replaced by the polish's
    multipliers ``β_e`` (clipped to ``dom h*``): the dual point of the polished iterate."""
    loss, d = prob.loss, prob.d
    C, cols, y = fix["fix_C"], fix["fix_col"].astype(np.int64), fix["fix_y"]
    k = len(cols)
    F = C @ prob.coef(Xi) + b0
    R = np.zeros((k, d))
    R[np.arange(k), cols] = F[np.arange(k), cols] - y
    old = loss.gradient(R, mu)[np.arange(k), cols]
    lo, hi = loss.entry_bounds(d)
    new = np.clip(fix["fix_beta"], lo[cols], hi[cols])
    delta = new - old
    out = dict(s)
    Ca = s["Ca"].copy()
    sa, aa, ya = s["sa"].copy(), s["aa"].copy(), s["ya"].copy()
    for j in range(d):
        sel = cols == j
        Ca[:, j] += C[sel].T @ delta[sel]
        sa[j] += delta[sel].sum()
        aa[j] += float(np.sum(new[sel] ** 2 - old[sel] ** 2))
        ya[j] += float(np.dot(y[sel], delta[sel]))
    out.update(Ca=Ca, sa=sa, aa=aa, ya=ya,
               an=s["an"] + float(np.sum(np.abs(new) - np.abs(old))))
    return out


# --------------------------------------------------------------------------- sphere polish
# Radial ε-insensitive loss with d > 1 outputs: its kink is the sphere ‖r_i‖ = ε, a nonlinear
# active set. The polish holds a set E of rows on it and takes Newton (SQP) steps on the KKT
# system of  min (1/n) Σ_{i∉E} h_μ(r_i) + (λ/2)‖Ξ‖²  s.t.  ‖r_e‖ = ε (e ∈ E), with multipliers
# s_e (the dual point β_e = s_e r̂_e, 0 ≤ s_e ≤ 1). One sweep per step; the sweep leaves E's
# rows out of its sums (Iterate.exclude) and the driver adds them from their gathered C rows.


def _held_rows(prob: Problem, Xi: np.ndarray, b0: np.ndarray, fix: dict):
    """Residuals ``r_e`` (k, d) of the held rows, their norms (k,) and directions (k, d)."""
    R = fix["fix_C"] @ prob.coef(Xi) + b0 - fix["fix_y"]
    t = np.sqrt(np.einsum("ij,ij->i", R, R))
    return R, t, R / np.where(t > 0, t, 1.0)[:, None]


def _add_rows(stats: dict, C: np.ndarray, Y: np.ndarray, alpha: np.ndarray) -> dict:
    """The sweep's gradient and conjugate sums with rows ``(C, Y)`` of gradients ``α`` added."""
    out = dict(stats)
    out.update(Ca=stats["Ca"] + C.T @ alpha, sa=stats["sa"] + alpha.sum(axis=0),
               aa=stats["aa"] + np.einsum("ij,ij->j", alpha, alpha),
               an=stats["an"] + np.sqrt(np.einsum("ij,ij->i", alpha, alpha)).sum(),
               ya=stats["ya"] + np.einsum("ij,ij->j", Y, alpha))
    return out


def _row_grams(prob: Problem, C: np.ndarray, W: np.ndarray) -> np.ndarray:
    """``(1/n) Σ_e W_e[j, k] φ̃_e φ̃_eᵀ`` (d, d, r+1, r+1), ``φ̃_e = [Tᵀc_e; 1]``, W (k, d, d)."""
    Pt = np.hstack([C @ prob.T, np.ones((len(C), 1))])
    return np.einsum("ep,ejk,eq->jkpq", Pt, W, Pt, optimize=True) / prob.n


def _full_feature_grams(prob: Problem, Q: np.ndarray, kind: str) -> np.ndarray:
    """A sweep's Grams (base 0) in features as (d, d, r+1, r+1), whatever their kind."""
    d, r = prob.d, prob.r
    out = np.zeros((d, d, r + 1, r + 1))
    if not np.any(Q):
        return out
    Qf = _feature_grams(prob, Q, kind, 0.0)
    if kind == "full":
        return Qf
    for j in range(d):
        out[j, j] = Qf if kind == "scalar" else Qf[j, j]
    return out


def sphere_step(prob: Problem, lam: float, s: dict, fix: dict, Xi: np.ndarray, b0: np.ndarray,
                mu: float, kind: str):
    """One Newton (SQP) step of the sphere polish from a sweep at ``(Ξ, b₀)`` that left the
    held rows E out (``Iterate.exclude``).

    With ``g`` the gradient of ``(1/n) Σ_{i∉E} h_μ(r_i) + (λ/2)‖Ξ‖²`` in ``x = (vec Ξ, b₀)``,
    ``a_e = ∇‖r_e‖/n = [φ_e ⊗ S r̂_e; r̂_e]/n`` and ``H`` the Hessian of the Lagrangian (the
    sweep's Grams plus ``s_e (I − r̂_e r̂_eᵀ)/‖r_e‖`` for the held rows, no damping)::

        [ H   Aᵀ ] [Δx ]     [ g              ]
        [ A   0  ] [s⁺ ] = − [ (‖r_e‖ − ε)/n  ]

    Rows whose multiplier left ``[0, 1]`` at the previous step leave E first (their smoothed
    loss is added back). Returns ``(ΔΞ, Δb₀, fix)`` with the new multipliers ``s⁺``, or None
    when no row is left on the sphere.
    """
    loss, n, r, d = prob.loss, prob.n, prob.r, prob.d
    C, Y, ids, mult = fix["fix_C"], fix["fix_y"], fix["fix_col"], fix["fix_beta"]
    R, t, u = _held_rows(prob, Xi, b0, fix)
    keep = (mult >= 0.0) & (mult <= 1.0)
    if not keep.any():
        return None
    Qf = _full_feature_grams(prob, s["Q"], kind)
    stats = s
    if not keep.all():  # released rows: the sweep left them out, their smoothed loss back in
        drop = ~keep
        stats = _add_rows(s, C[drop], Y[drop], loss.gradient(R[drop], mu))
        curv = loss.curvature(R[drop], mu, exact=True, base=0.0)
        if len(curv.rows):
            W = curv.values if curv.kind == "full" else \
                curv.values[:, None, None] * np.eye(d)
            Qf = Qf + _row_grams(prob, C[drop][curv.rows], W)
    C, Y, ids, mult, t, u = C[keep], Y[keep], ids[keep], mult[keep], t[keep], u[keep]
    k = len(t)
    W = (mult / t)[:, None, None] * (np.eye(d) - u[:, :, None] * u[:, None, :])
    Qf = Qf + _row_grams(prob, C, W)
    gXi, gb = _gradient(prob, lam, stats, Xi)
    H = _coupled_hessian(prob, Qf, lam, 0.0)
    A = np.einsum("ea,ep->eap", u @ prob.S, C @ prob.T).reshape(k, d * r)
    g = gXi.T.reshape(-1)
    if prob.intercept:
        A = np.hstack([A, u])
        g = np.concatenate([g, gb])
    A /= n
    size = len(g)
    K = np.zeros((size + k, size + k))
    K[:size, :size] = H
    K[size:, :size] = A
    K[:size, size:] = A.T
    rhs = -np.concatenate([g, (t - float(loss.epsilon)) / n])
    sol = _solve_kkt(K, rhs)
    if not np.all(np.isfinite(sol)):
        return None
    dXi = sol[: d * r].reshape(d, r).T
    db = sol[d * r: size] if prob.intercept else np.zeros(d)
    return dXi, db, {"fix_C": C, "fix_col": ids, "fix_y": Y, "fix_beta": sol[size:]}


def sphere_dual_stats(prob: Problem, s: dict, fix: dict, Xi: np.ndarray, b0: np.ndarray) -> dict:
    """The sweep's sums with the held rows' dual points ``β_e = clip(s_e, 0, 1) r̂_e`` added
    (``‖β_e‖ ≤ 1``: in ``dom h*``, so the gap is a valid bound whatever E is)."""
    _, _, u = _held_rows(prob, Xi, b0, fix)
    beta = np.clip(fix["fix_beta"], 0.0, 1.0)[:, None] * u
    return _add_rows(s, fix["fix_C"], fix["fix_y"], beta)



# --------------------------------------------------------------------------- the iterations

_FIX = ("fix_C", "fix_col", "fix_y", "fix_beta")

#: Most band entries the KKT polish gathers on the driver (rows of C): beyond, no polish.
POLISH_ENTRIES = 20000

#: Sweeps without a better certified point (a lower relative duality gap) after which the
#: iterations stop and return the best one with a ConvergenceWarning, once that best is
#: within STALL_NEAR × tol: past it the continuation has shrunk μ below what float64
#: certifies (a smoothed dual point at μ ≈ 1e-9 is worse than the polish's). Farther from
#: tol a μ stage can wander above its best gap for longer (slow stages of pinball), so only
#: max_iter stops it.
STALL_SWEEPS, STALL_NEAR = 60, 100.0

#: Most Newton steps of one sphere polish, and the factor by which each must cut the gap.
SPHERE_STEPS, SPHERE_SHRINK = 8, 0.5

#: What the next sweep evaluates besides the iterate: the losses along a Newton direction
#: (``"newton"``, its line search), the polished point and steps towards it (``"polish"``), a
#: step of the sphere polish (``"sphere"``); None: the iterate alone.
Mode = Literal["newton", "polish", "sphere"]

#: NewtonState's fields and their keys in the persisted solver state (STATE_VERSION 3, the
#: format a store killed by an earlier release holds): in every state ...
_KEYS = (("Xi", "Xi"), ("b0", "b0"), ("dXi", "dXi"), ("db0", "db0"), ("mode", "mode"),
         ("n_iter", "n_iter"), ("start_objective", "p_at"), ("slope", "slope"),
         ("ref_objective", "p_ref"), ("band_entries", "nband"), ("window_entries", "nwin"),
         ("damping", "damp"), ("history", "history"), ("mu", "mu"))
#: ... and once set (absent before; None here).
_KEYS_ONCE_SET = (("level", "level"), ("grams", "Q"), ("grams_mu", "Q_mu"),
                  ("grams_base", "Q_base"), ("grams_Xi", "Q_Xi"), ("grams_b0", "Q_b0"),
                  ("best_rel", "best_rel"), ("best_objective", "best_p"), ("best_at", "best_at"),
                  ("best_Xi", "best_Xi"), ("best_b0", "best_b0"), ("ref_gap", "gap_ref"),
                  ("sphere_steps", "sqp"))


@dataclass
class NewtonState:
    """The Newton iterations' state for one λ between two sweeps (persisted after each).

    :meth:`as_dict` and :meth:`from_dict` convert it to and from the solver state's dict (its
    keys, in parentheses where they differ from the fields' names, are those of
    ``STATE_VERSION`` 3: a store killed mid-iterations by an earlier release resumes).

    Attributes
    ----------
    Xi, b0 : ndarray (r, d), (d,)
        The iterate.
    mu : float
        The loss's smoothing μ (0: none; -1: not known yet: the next sweep is the probe).
    n_iter : int
        Sweeps done; ``history``: ``[n_iter, objective, relative gap, μ]`` per certified point.
    mode : Mode or None
        What the next sweep evaluates along the direction ``dXi``, ``db0`` (:data:`Mode`).
    start_objective (p_at), slope : float
        The smoothed objective at a Newton step's origin and its slope along the step
        (Armijo's condition of the line search).
    ref_objective (p_ref) : float
        The true objective a polish's point must not exceed; ``ref_gap`` (gap_ref): the
        relative gap a sphere-polish step must cut by SPHERE_SHRINK; ``sphere_steps`` (sqp):
        the sphere polish's steps so far.
    band_entries (nband), window_entries (nwin) : float
        Entries in the last sweep's smoothing band and kink window (-1: not counted): the next
        sweep gathers them for the polish when few enough.
    damping (damp) : float
        Levenberg–Marquardt factor of smoothed losses (DAMP_UP, DAMP_DOWN).
    level : int or None
        The curvature level most rows sat at in the last sweep: the next Grams' base.
    held : dict or None
        The polish's held entries or rows (``fix_C``, ``fix_col``, ``fix_y``, ``fix_beta``),
        for the next sweep only.
    grams (Q), grams_mu, grams_base, grams_Xi, grams_b0 (Q_mu, Q_base, Q_Xi, Q_b0)
        The last sweep's Grams, kept while small (DELTA_GRAM_BYTES), and the μ, the base
        and the point they were formed at.
    best_rel, best_objective (best_p), best_at, best_Xi, best_b0
        The best certified point so far: relative gap, objective, sweep, iterate.
    """

    Xi: np.ndarray
    b0: np.ndarray
    mu: float
    n_iter: int = 0
    history: list = field(default_factory=list)
    mode: Mode | None = None
    dXi: np.ndarray | None = None
    db0: np.ndarray | None = None
    start_objective: float = 0.0
    slope: float = 0.0
    ref_objective: float = 0.0
    band_entries: float = -1.0
    window_entries: float = -1.0
    damping: float = 0.0
    level: int | None = None
    held: dict | None = None
    grams: np.ndarray | None = None
    grams_mu: float | None = None
    grams_base: float | None = None
    grams_Xi: np.ndarray | None = None
    grams_b0: np.ndarray | None = None
    best_rel: float | None = None
    best_objective: float | None = None
    best_at: float | None = None
    best_Xi: np.ndarray | None = None
    best_b0: np.ndarray | None = None
    ref_gap: float | None = None
    sphere_steps: int | None = None

    @classmethod
    def start(cls, Xi0: np.ndarray, b00: np.ndarray, *, smoothed: bool) -> "NewtonState":
        """The state before the first sweep (μ from the first sweep's residuals when smoothed)."""
        return cls(np.array(Xi0, dtype=np.float64), np.array(b00, dtype=np.float64),
                   -1.0 if smoothed else 0.0)

    def as_dict(self) -> dict:
        """The persisted solver state (see the class)."""
        out = {key: getattr(self, name) for name, key in _KEYS}
        out.update((key, getattr(self, name)) for name, key in _KEYS_ONCE_SET
                   if getattr(self, name) is not None)
        if self.held is not None:
            out.update(self.held)
        return out

    @classmethod
    def from_dict(cls, st: dict) -> "NewtonState":
        """The state a persisted solver state holds (its other entries, such as ``slot``,
        ``checksums`` and ``done``, are the store's)."""
        kw = {name: st[key] for name, key in _KEYS}
        kw.update((name, st[key]) for name, key in _KEYS_ONCE_SET if st.get(key) is not None)
        if st.get("fix_C") is not None:
            kw["held"] = {key: st[key] for key in _FIX}
        return cls(**kw)


@dataclass(frozen=True)
class NewtonSetup:
    """What stays fixed over one λ's iterations: the stopping rule, the curvature (``exact``:
    exact Hessian weights, else secant ones outside the smoothing band; ``kind``: their kind,
    :meth:`~distsketch.losses.Loss.curvature_kind`), the most band entries the band polish
    gathers (``cap``), the kink window of the restricted polish in units of μ (``window``;
    0: none), the squared Lipschitz constant of the loss, and whether the last sweep's
    Grams are small enough to keep (``keep_grams``)."""

    tol: float
    max_iter: int
    exact: bool
    kind: str
    cap: int
    window: float
    lipschitz_sq: float
    keep_grams: bool

    @classmethod
    def of(cls, prob: Problem, tol: float, max_iter: int) -> "NewtonSetup":
        loss, d = prob.loss, prob.d
        exact = prob.exact_curvature
        # a vertex holds at most r·d + d entries on their kinks: more cannot be a KKT point's
        # active set (and the polish's system would be over-determined)
        cap = min(POLISH_ENTRIES, (prob.r + 1) * d)
        # entry-wise kinks (scalar ε, pinball): the sweeps gather a window of entries around
        # their kinks, whose restricted problem the driver solves exactly (restricted_polish)
        window = (WINDOW if loss.smoothed and loss.band(np.zeros((1, d)), 1.0) is not None
                  and (prob.r + 1) * d <= RESTRICTED_SIZE else 0.0)
        # the last sweep's Grams kept (and in the solver state) while small: the next Newton
        # sweep from their point asks for their change only (Iterate.delta)
        m1 = prob.Gt.shape[0]
        return cls(tol, max_iter, exact, loss.curvature_kind(d, exact=exact), cap, window,
                   loss.lipschitz_sq(d), m1 * m1 * 8 <= DELTA_GRAM_BYTES)


@dataclass(frozen=True)
class Sweep:
    """One sweep as it was asked for (the state's iterate, direction, mode and μ before it;
    ``base``: its Grams' base curvature; ``held``: the polish's held entries it evaluated)
    and what it returned (``sums``)."""

    Xi: np.ndarray
    b0: np.ndarray
    dXi: np.ndarray | None
    db0: np.ndarray | None
    mode: Mode | None
    mu: float
    base: float
    held: dict | None
    sums: dict

    @property
    def probe(self) -> bool:
        """The first sweep of a smoothed loss, at μ = 0: its residuals give μ."""
        return self.mu < 0


@dataclass(frozen=True)
class Certificate:
    """The certified point after a sweep: objectives (smoothed, true), duality gaps
    (smoothed, true) and the true relative gap."""

    smoothed_objective: float
    objective: float
    smoothed_gap: float
    gap: float
    rel_gap: float


@dataclass(frozen=True)
class Stop:
    """The end of one λ: :func:`~distsketch.lipschitz.finish`'s ``result`` (None: the best
    certified point) and ``why`` (the reason of a stop short of ``tol``)."""

    result: tuple | None
    why: str | None = None


#: What a phase asks for next: save the state and sweep again, or certify the accepted point.
Next = Literal["sweep", "certify"]


def sweep_request(prob: Problem, setup: NewtonSetup, state: NewtonState
                  ) -> tuple[Iterate, float]:
    """The next sweep's :class:`~distsketch.sweep.Iterate` from the state, and its Grams'
    base curvature: the level most rows sat at in the last sweep or, for a Newton sweep
    from the kept Grams' point at the same μ, theirs (the sweep then forms their change)."""
    loss = prob.loss
    Xi, b0, dXi, db0, mode, mu = state.Xi, state.b0, state.dXi, state.db0, state.mode, state.mu
    probe = mu < 0
    grid = (GRID if mode == "newton" else POLISH_GRID if mode == "polish"
            or (mode == "sphere" and dXi is not None) else ())
    levels = loss.curvature_levels(prob.d, 0.0 if probe else mu, exact=setup.exact)
    base = float(levels[min(int(state.level or 0), len(levels) - 1)])
    sphere = mode == "sphere"
    delta = (setup.kind == "scalar" and setup.keep_grams and mode == "newton"
             and state.grams is not None and state.grams_mu == mu
             and np.array_equal(Xi, state.grams_Xi) and np.array_equal(b0, state.grams_b0))
    if delta:
        base = float(state.grams_base)
    win = setup.window
    it = Iterate(loss, prob.coef(Xi), b0, None if dXi is None else prob.coef(dXi), db0,
                 0.0 if probe else mu, grid,
                 grid_mu=0.0 if mode in ("polish", "sphere") else None,
                 gram=not probe, exact=setup.exact,
                 collect=(0 <= state.window_entries <= WINDOW_ENTRIES if win else
                          0 <= state.band_entries <= setup.cap and not sphere), window=win,
                 base=base, levels=levels if len(levels) > 1 else (),
                 exclude=state.held["fix_col"].astype(np.int64) if sphere else None,
                 level_mus=LEVEL_MUS if probe else None, delta=delta)
    return it, base


def record_sweep(prob: Problem, setup: NewtonSetup, state: NewtonState, it: Iterate,
                 base: float, s: dict) -> Sweep:
    """Count the sweep ``s`` of ``it`` in the state and keep its by-products (its Grams
    while small, the band's and the window's sizes, the commonest curvature level); clear
    the direction, the mode and the held entries it evaluated. Returns the :class:`Sweep`."""
    sweep = Sweep(state.Xi, state.b0, state.dXi, state.db0, state.mode, state.mu, base,
                  state.held, s)
    state.n_iter += 1
    if it.delta:
        s["Q"] = state.grams + s["Q"]
    if (it.gram and setup.keep_grams and setup.kind == "scalar"
            and sweep.mode in ("newton", None)):
        # the Grams (at base) of this sweep's point: the iterate, or its full step. Not a
        # polish's: its point holds entries on their kinks, the band's edge, where the
        # next sweep's rounding of the same point classes them at random
        m1 = prob.Gt.shape[0]
        state.grams = np.broadcast_to(s["Q"], (m1, m1)).copy()
        state.grams_mu, state.grams_base = sweep.mu, base
        state.grams_Xi = np.array(sweep.Xi if sweep.dXi is None else sweep.Xi + sweep.dXi,
                                  dtype=np.float64)
        state.grams_b0 = np.array(sweep.b0 if sweep.db0 is None else sweep.b0 + sweep.db0,
                                  dtype=np.float64)
    else:
        state.grams = state.grams_Xi = state.grams_b0 = None
    state.dXi = state.db0 = state.mode = state.held = None
    if "nband" in s:
        state.band_entries = float(s["nband"])
        logger.debug("smoothing band: %d entries", int(state.band_entries))
    if "nwin" in s:
        state.window_entries = float(s["nwin"])
    if "at_level" in s:
        state.level = int(np.argmax(s["at_level"]))
    return sweep


def after_probe(prob: Problem, state: NewtonState, sweep: Sweep) -> Next:
    """After the first sweep of a smoothed loss: μ from the residuals' scale, and the
    commonest curvature level at (about) that μ."""
    s = sweep.sums
    state.mu = max(math.sqrt(float(s["rr"]) / prob.n), 1e-300)
    if "level_counts" in s:
        near = int(np.argmin(np.abs(np.log(LEVEL_MUS) - math.log(state.mu))))
        state.level = int(np.argmax(s["level_counts"][near]))
    return "sweep"


def after_newton_step(prob: Problem, lam: float, state: NewtonState, sweep: Sweep
                      ) -> Next | Stop:
    """After a sweep along a Newton direction: the full step when it meets Armijo's
    condition (certify it), else the grid's lowest point (sweep again), else — no decrease —
    a smaller μ, or the end (the limit of float64). Adapts the damping of smoothed losses."""
    loss, s = prob.loss, sweep.sums
    Xi, b0, dXi, db0, mu = sweep.Xi, sweep.b0, sweep.dXi, sweep.db0, sweep.mu
    vals = np.array([objective(prob, lam, s["grid"][k], Xi + t * dXi)
                     for k, t in enumerate(GRID)])
    ok = np.flatnonzero(vals <= state.start_objective + ARMIJO * np.asarray(GRID) * state.slope)
    logger.debug("line search: step %s, decrease %.3g (slope %.3g)",
                 GRID[ok[0]] if ok.size else None, state.start_objective - vals.min(), state.slope)
    if loss.smoothed:  # Levenberg–Marquardt: damp more after a short step
        state.damping = (state.damping * DAMP_DOWN if ok.size and ok[0] == 0
                         else max(state.damping, DAMP_MIN) * DAMP_UP)
    if not (ok.size and ok[0] == 0):  # not the full step: the grid's lowest point
        k = int(ok[np.argmin(vals[ok])]) if ok.size else int(np.argmin(vals))
        if ok.size or vals[k] < state.start_objective:
            state.Xi, state.b0 = Xi + GRID[k] * dXi, b0 + GRID[k] * db0
        elif loss.smoothed and mu > 0:
            state.mu, state.level = mu * MU_FACTOR, 0  # no decrease: on to a smaller μ
        else:  # no decrease along the Newton direction: the limit of float64
            return Stop(None)
        return "sweep"
    state.Xi, state.b0 = Xi + dXi, b0 + db0
    return "certify"


def after_polish(prob: Problem, lam: float, state: NewtonState, sweep: Sweep) -> Next:
    """After a sweep at a KKT polish's point: the point when its true objective is not
    worse than where the polish started (certify it), else the best true decrease along
    the step, if any (sweep again)."""
    s = sweep.sums
    Xi, b0, dXi, db0 = sweep.Xi, sweep.b0, sweep.dXi, sweep.db0
    p_true = objective(prob, lam, s["loss"], Xi + dXi)
    if p_true > state.ref_objective:  # worse than where it started: the best true decrease
        vals = np.array([objective(prob, lam, s["grid"][k], Xi + t * dXi)
                         for k, t in enumerate(POLISH_GRID)])
        k = int(np.argmin(vals))
        logger.debug("polish: full step rejected (objective %.10g > %.10g), step %s",
                     p_true, state.ref_objective,
                     POLISH_GRID[k] if vals[k] < state.ref_objective else 0)
        if vals[k] < state.ref_objective:
            state.Xi, state.b0 = Xi + POLISH_GRID[k] * dXi, b0 + POLISH_GRID[k] * db0
        return "sweep"
    state.Xi, state.b0 = Xi + dXi, b0 + db0
    return "certify"


def after_sphere_polish(prob: Problem, lam: float, setup: NewtonSetup, state: NewtonState,
                        sweep: Sweep) -> Next | Stop:
    """After a sweep of the sphere polish: certify the step's point with the held rows'
    multipliers as their dual, then take the next step (:func:`sphere_step`), or give up
    (back to the smoothed continuation at μ) when a step does not cut the gap by
    ``SPHERE_SHRINK`` or after ``SPHERE_STEPS``. Stops when the gap is within ``tol``."""
    s, fix, mu = sweep.sums, sweep.held, sweep.mu
    Xi, b0, dXi, db0 = sweep.Xi, sweep.b0, sweep.dXi, sweep.db0
    if dXi is not None:
        Xn, bn = Xi + dXi, b0 + db0
        p_true = objective(prob, lam, s["loss"], Xn)
        _, d_true = dual_values(prob, lam, sphere_dual_stats(prob, s, fix, Xn, bn), 0.0)
        gap = p_true - d_true
        rel = gap / max(abs(p_true), 1e-300)
        state.history.append([state.n_iter, p_true, rel, mu])
        logger.info("λ = %.3g, iteration %d: objective %.10g, relative duality gap %.3g "
                    "(sphere polish, %d rows held, step %d)", lam, state.n_iter, p_true, rel,
                    len(fix["fix_beta"]), state.sphere_steps)
        if rel <= setup.tol:
            state.Xi, state.b0 = Xn, bn
            return Stop((p_true, gap, True))
        if not rel < SPHERE_SHRINK * state.ref_gap or state.sphere_steps >= SPHERE_STEPS:
            # wrong active set (or stalled): the best true objective along the step
            vals = np.array([objective(prob, lam, s["grid"][k], Xi + t * dXi)
                             for k, t in enumerate(POLISH_GRID)])
            best = int(np.argmin(vals))
            if p_true <= state.ref_objective:
                state.Xi, state.b0 = Xn, bn
            elif vals[best] < state.ref_objective:
                state.Xi, state.b0 = Xi + POLISH_GRID[best] * dXi, b0 + POLISH_GRID[best] * db0
            logger.debug("sphere polish stopped at step %d (gap %.3g, before %.3g)",
                         state.sphere_steps, rel, state.ref_gap)
            return "sweep"
        state.Xi, state.b0, state.ref_objective, state.ref_gap = Xn, bn, p_true, rel
    step = sphere_step(prob, lam, s, fix, state.Xi, state.b0, mu, setup.kind)
    if step is not None:
        state.dXi, state.db0, state.mode = step[0], step[1], "sphere"
        state.sphere_steps, state.held = state.sphere_steps + 1, step[2]
    return "sweep"


def certify(prob: Problem, lam: float, setup: NewtonSetup, state: NewtonState, sweep: Sweep
            ) -> Certificate | Stop:
    """The duality gaps at the accepted point (after a polish, with its multipliers as the
    held entries' dual), recorded in the history; keeps the best certified point. Stops at
    ``tol``, at ``max_iter``, or after ``STALL_SWEEPS`` without a better point once the best
    is within ``STALL_NEAR × tol``."""
    s, mu = sweep.sums, sweep.mu
    Xi, b0 = state.Xi, state.b0
    p_mu = objective(prob, lam, s["loss_mu"], Xi)
    p_true = objective(prob, lam, s["loss"], Xi)
    if sweep.mode == "polish":  # the polish's own dual point (its multipliers)
        fixed = _with_fix(prob, Xi, b0, s, sweep.held, mu)
        d_mu, d_true = dual_values(prob, lam, fixed, mu)
    else:
        d_mu, d_true = dual_values(prob, lam, s, mu)
    gap_mu, gap = p_mu - d_mu, p_true - d_true
    rel = gap / max(abs(p_true), 1e-300)
    state.history.append([state.n_iter, p_true, rel, mu])
    logger.info("λ = %.3g, iteration %d: objective %.10g, relative duality gap %.3g%s",
                lam, state.n_iter, p_true, rel, f", μ = {mu:.3g}" if prob.loss.smoothed else "")
    if rel <= setup.tol:
        return Stop((p_true, gap, True))
    best_rel = math.inf if state.best_rel is None else state.best_rel
    if not rel >= best_rel:  # the best certified point so far
        state.best_rel, state.best_objective = float(rel), float(p_true)
        state.best_at = float(state.n_iter)
        state.best_Xi, state.best_b0 = Xi.copy(), np.array(b0, dtype=np.float64)
    if state.n_iter >= setup.max_iter:
        return Stop(None, f"max_iter = {setup.max_iter}")
    if (state.n_iter - (0.0 if state.best_at is None else state.best_at) > STALL_SWEEPS
            and state.best_rel <= STALL_NEAR * setup.tol):
        return Stop(None, f"no better certified point in {STALL_SWEEPS} sweeps")
    return Certificate(p_mu, p_true, gap_mu, gap, rel)


def next_step(prob: Problem, lam: float, setup: NewtonSetup, state: NewtonState,
              sweep: Sweep, cert: Certificate) -> Next | Stop:
    """From a certified point that did not reach ``tol``: a smaller μ (with a polish, see
    :func:`start_polish`) once the smoothed gap is below ``GAP_RATIO`` × the true one, else
    the next (damped) Newton direction — or the end, when none descends (rounding)."""
    s, mu = sweep.sums, sweep.mu
    lsq = setup.lipschitz_sq
    mu_floor = 0.02 * setup.tol * abs(cert.objective) / lsq if lsq else 0.0
    if prob.loss.smoothed and cert.smoothed_gap <= GAP_RATIO * cert.gap and mu > mu_floor:
        state.mu, state.level = max(mu * MU_FACTOR, mu_floor), 0  # a narrower band
        start_polish(prob, lam, setup, state, sweep, cert)
        return "sweep"
    gXi, gb = _gradient(prob, lam, s, state.Xi)
    damp = state.damping / mu if mu > 0 else 0.0
    dXi, db0 = newton_direction(prob, lam, s, setup.kind, sweep.base + damp, gXi, gb)
    slope = float(np.sum(gXi * dXi) + np.dot(gb, db0))
    if not slope < 0:  # no descent direction left (rounding): the limit of float64
        return Stop((cert.objective, cert.gap, cert.rel_gap <= setup.tol))
    state.dXi, state.db0, state.mode = dXi, db0, "newton"
    state.start_objective, state.slope = cert.smoothed_objective, slope
    return "sweep"


def start_polish(prob: Problem, lam: float, setup: NewtonSetup, state: NewtonState,
                 sweep: Sweep, cert: Certificate) -> None:
    """At a change of μ, the KKT polish of the sweep's gathered entries (if any) as the next
    sweep's mode: for the radial ε with d > 1 the sphere polish (the band's rows held on
    ``‖r‖ = ε``), else the restricted polish's point (:func:`restricted_polish`, with a
    window) or the band polish's (:func:`polish`), tried with the next μ's sums."""
    s, mu = sweep.sums, sweep.mu
    if "E_Y" in s:  # radial, d > 1: hold the band's rows on the sphere ‖r‖ = ε
        if len(s["E_row"]) and float(prob.loss.epsilon) > 0:
            state.mode, state.ref_objective = "sphere", cert.objective
            state.ref_gap, state.sphere_steps = cert.rel_gap, 0
            state.held = {"fix_C": s["E_C"], "fix_col": s["E_row"].astype(np.float64),
                          "fix_y": s["E_Y"], "fix_beta": np.minimum(
                              np.sqrt(np.einsum("ij,ij->i", s["E_a"], s["E_a"])), 1.0)}
        return
    if "E_row" not in s:
        pol = None
    elif setup.window:
        pol = restricted_polish(prob, lam, s, state.Xi, state.b0, mu)
    else:
        pol = polish(prob, lam, s)
    if pol is not None:  # try the active set's KKT point, with the next μ's stats
        state.dXi, state.db0 = pol[0] - state.Xi, pol[1] - state.b0
        state.mode, state.ref_objective = "polish", cert.objective
        state.held = pol[2]


def solve_lam(prob: Problem, lam: float, sweeper, *, Xi0, b00, tol: float, max_iter: int,
              state: SolverState | None = None) -> Solution:
    """Newton iterations (with smoothing continuation and KKT polish) for one λ, from
    ``(Xi0, b00)`` or from the solver state in the store: one sweep per loop, then the
    phase of what it evaluated, then, at an accepted point, its certificate and the next
    step (see the module); the state is saved after each."""
    setup = NewtonSetup.of(prob, tol, max_iter)
    st = state.load() if state is not None else None
    if st is not None and st.get("done"):
        logger.info("λ = %.3g: solution found in the store (%d iterations)", lam, st["n_iter"])
        return Solution.from_state(lam, st)
    if st is not None:
        logger.info("λ = %.3g: resuming the iterations at iteration %d", lam, st["n_iter"])
        current = NewtonState.from_dict(st)
    else:
        current = NewtonState.start(Xi0, b00, smoothed=prob.loss.smoothed)
    while True:
        if current.n_iter >= max_iter:  # stopped between evaluations: report the last gap
            return finish(prob, lam, current.as_dict(), tol, state, None,
                          why=f"max_iter = {max_iter}")
        it, base = sweep_request(prob, setup, current)
        sweep = record_sweep(prob, setup, current, it, base, sweeper(it))
        if sweep.mode == "sphere":
            nxt = after_sphere_polish(prob, lam, setup, current, sweep)
        elif sweep.mode == "newton":
            nxt = after_newton_step(prob, lam, current, sweep)
        elif sweep.mode == "polish":
            nxt = after_polish(prob, lam, current, sweep)
        else:  # the iterate alone
            nxt = "certify"
        if nxt == "certify" and sweep.probe:
            nxt = after_probe(prob, current, sweep)
        elif nxt == "certify":
            nxt = certify(prob, lam, setup, current, sweep)
            if isinstance(nxt, Certificate):
                nxt = next_step(prob, lam, setup, current, sweep, nxt)
        if isinstance(nxt, Stop):
            return finish(prob, lam, current.as_dict(), tol, state, nxt.result, why=nxt.why)
        save_state(state, current.as_dict())


def solve_path(prob: Problem, lams, sweeper, *, tol: float, max_iter: int,
               states=None) -> list[Solution]:
    """Solve every λ in decreasing order, each warm-started from the one before (the first
    from the squared-loss closed form); returns the solutions in the order of ``lams``."""
    order = sorted(range(len(lams)), key=lambda k: -lams[k])
    out: list[Solution | None] = [None] * len(lams)
    prev = None
    for k in order:
        lam = lams[k]
        Xi0, b00 = warm_start(prob, lam) if prev is None else (prev.Xi, prev.b0)
        state = states(k) if states is not None else None
        sol = solve_lam(prob, lam, sweeper, Xi0=Xi0, b00=b00, tol=tol, max_iter=max_iter,
                        state=state)
        out[k] = prev = sol
    return out
