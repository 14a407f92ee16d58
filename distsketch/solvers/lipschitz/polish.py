"""KKT polishes of the Newton route: the non-smooth problem's solution, tried at each change of
the smoothing μ.

For entry-wise kinks (scalar ε, pinball, also coupled by ``M``): the exact solution of the
problem restricted to the entries within ``WINDOW·μ`` of their kinks, the others' losses kept
linear, solved on the driver (:func:`restricted_polish`: Newton on its smoothing with an exact
line search, then primal–dual active-set steps); :func:`polish`, the equality-constrained QP
on the smoothing band's active set, when no window is gathered. For the radial ε with d > 1,
whose kink is the sphere ``‖r_i‖ = ε``: Newton (SQP) steps with those rows held on it, one
sweep each (:func:`sphere_step`). Either ends at rounding level once the active set is right;
the next sweep's duality gap, with the polish's multipliers as the held entries' dual point
(:func:`with_fix`, :func:`sphere_dual_stats`), says whether it is. The iterations that try
them are :mod:`distsketch.solvers.lipschitz.newton`'s.

Glossary: ``Ξ`` (``Xi``, r × d) and ``b₀`` (``b0``): the iterate; ``ΔΞ``, ``Δb₀`` (``dXi``,
``db0``): a direction; ``μ`` (``mu``): the smoothing; ``s``: a sweep's sums; ``P``
(``p_true``), ``P_μ`` (``p_mu``): the true and smoothed objectives.
"""

from __future__ import annotations

import logging
import math
import warnings

import numpy as np
from scipy.linalg import LinAlgError, LinAlgWarning, lu_factor, lu_solve
from scipy.linalg.lapack import dgecon as _dgecon

from .direction import coupled_hessian, feature_grams, gradient, solve_spd
from .problem import Problem

__all__ = ["KKT_RCOND", "polish", "WINDOW", "WINDOW_ENTRIES", "RESTRICTED_SIZE",
           "RESTRICTED_STAGES", "RESTRICTED_STEPS", "RESTRICTED_START", "ACTIVE_STEPS",
           "ACTIVE_SHARE", "restricted_polish", "with_fix", "sphere_step", "sphere_dual_stats"]

logger = logging.getLogger(__name__)


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
            dz = solve_spd(H, -grad[:, None])[:, 0]
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


def with_fix(prob: Problem, Xi: np.ndarray, b0: np.ndarray, s: dict, fix: dict, mu: float):
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
    Qf = feature_grams(prob, Q, kind, 0.0)
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
    gXi, gb = gradient(prob, lam, stats, Xi)
    H = coupled_hessian(prob, Qf, lam, 0.0)
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
