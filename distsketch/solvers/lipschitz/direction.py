"""The Newton direction of the Newton route: the Hessian from a sweep's Grams, its solve, the
gradient and the warm start.

``(ΔΞ, Δb₀) = −∇²P⁻¹ ∇P`` (:func:`newton_direction`, the intercept block damped by λ): when the
Hessian weights are scalar per row, ``d`` systems of size ``r + 1`` in the eigenbasis of ``M``
(one factorisation for ``M = I``), else one system of size ``r·d + d``
(:func:`coupled_hessian`); symmetric positive semi-definite systems by Cholesky or, where that
fails, the eigendecomposition with the numerically null directions dropped
(:func:`solve_spd`). The first iterate is the closed-form squared-loss solution from the pass's
sums, one Newton step from 0 (:func:`warm_start`). The iterations that take these steps are
:mod:`distsketch.solvers.lipschitz.newton`'s, the polishes
:mod:`distsketch.solvers.lipschitz.polish`'s.

Glossary: ``Ξ`` (``Xi``, r × d) and ``b₀`` (``b0``): the iterate; ``ΔΞ``, ``Δb₀`` (``dXi``,
``db0``): a direction; ``μ`` (``mu``): the smoothing; ``s``: a sweep's sums; ``P``
(``p_true``), ``P_μ`` (``p_mu``): the true and smoothed objectives.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.linalg import LinAlgError, cho_factor, cho_solve
from scipy.linalg.lapack import dpotrf as _dpotrf
from scipy.linalg.lapack import dpotrs as _dpotrs

from .problem import Problem

__all__ = ["feature_grams", "solve_spd", "newton_direction", "coupled_hessian", "gradient",
           "warm_start"]


# --------------------------------------------------------------------------- the Newton step


def feature_grams(prob: Problem, Q: np.ndarray, kind: str, base: float) -> np.ndarray:
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


def solve_spd(K: np.ndarray, rhs: np.ndarray) -> np.ndarray:
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
    Qf = feature_grams(prob, Q, kind, base)
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
            x = -solve_spd(K, rhs)
            dR[:, cols] = x[:r]
            if ib:
                dbR[cols] = x[r]
        return dR @ prob.U.T, prob.U @ dbR
    H = coupled_hessian(prob, Qf, lam, lam)
    g = gXi.T.reshape(-1)
    if ib:
        g = np.concatenate([g, gb])
    x = -solve_spd(H, g[:, None])[:, 0]
    dXi = x[: d * r].reshape(d, r).T
    db = x[d * r:] if ib else np.zeros(d)
    return dXi, db


def coupled_hessian(prob: Problem, Qf: np.ndarray, lam: float, damp_b: float) -> np.ndarray:
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


def gradient(prob: Problem, lam: float, stats: dict, Xi: np.ndarray):
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
