"""KKT polishes of the Newton route: the non-smooth problem's solution, tried at each change of
the smoothing μ.

For entry-wise kinks (scalar ε, pinball, also coupled by ``M``): the exact solution of the
problem restricted to the entries near their kinks, the others' losses kept linear
(:mod:`distsketch.solvers.lipschitz.restricted`); :func:`polish`, the equality-constrained QP
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
import warnings

import numpy as np
from scipy.linalg import LinAlgError, LinAlgWarning, lu_factor, lu_solve
from scipy.linalg.lapack import dgecon as _dgecon

from .direction import coupled_hessian, feature_grams, gradient
from .problem import Problem

__all__ = ["KKT_RCOND", "solve_kkt", "polish", "with_fix", "sphere_step", "sphere_dual_stats"]

logger = logging.getLogger(__name__)


# --------------------------------------------------------------------------- the KKT polish


#: Relative singular-value cut of a polish's KKT system (dependent kinks, see solve_kkt).
KKT_RCOND = 1e-12


def solve_kkt(K: np.ndarray, rhs: np.ndarray) -> np.ndarray:
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
        sol = solve_kkt(K, rhs)
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
    sol = solve_kkt(K, rhs)
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
