"""The restricted problem of the Newton route's polish (entry-wise kinks: scalar ε-insensitive,
pinball with any d and ``M``), solved exactly on the driver.

A sweep gathers the entries ``e = (i, j)`` near their kink (the *window*; every entry of a
small problem), with their rows ``a_e`` of the constraint matrix (``a_e·vec Ξ = (S Ξᵀ φ_i)_j``),
targets ``t_e = y_ij + κ_e`` and the subdifferential ``[lo_e, hi_e]`` at the kink; the other
entries' losses are kept linear (``g``: their ``(1/n) Φᵀ α S`` and ``Σα``). With ``z = (vec Ξ,
b₀)`` (no ``b₀`` without an intercept)::

    min_z (λ/2)‖x‖² + gᵀz + (1/n) Σ_e max(lo_e u_e, hi_e u_e),    u_e = a_eᵀx + b₀_j − t_e

is a lower model of the objective (each loss lies above its tangent), equal to it near the
iterate, and the whole problem when the window holds every kink of every entry.
:func:`restricted_polish` solves it by a primal–dual interior-point method
(:func:`interior_point`), then identifies the entries held on their kinks and computes the
exact vertex by primal–dual active-set steps (:func:`active_set`: the equality-constrained QP
on the held entries, :func:`kkt_point`). An exact point is accepted only when its held entries
sit on their kinks to rounding and their multipliers in ``[lo_e, hi_e]``: the KKT conditions.
References: Mehrotra, *On the implementation of a primal–dual interior point method*, SIAM J.
Optim. 2(4), 1992 (the predictor–corrector); Hintermüller, Ito & Kunisch, *The primal–dual
active set strategy as a semismooth Newton method*, SIAM J. Optim. 13(3), 2002 (the steps).
The design and its measurements: docs/design/lipschitz.md, "Restricted polish".

Glossary: ``z`` (``vec Ξ``, ``b₀``): the unknowns (``N = r·d + d``); ``k``: the entries;
``A`` (k, r·d): their constraint rows; ``β_e = lo_e + w_e``: their multipliers (``0 ≤ w_e ≤
c_e = hi_e − lo_e``); ``ξ_e = max(u_e, 0)``, ``s_e = ξ_e − u_e``: the primal slacks.
"""

from __future__ import annotations

import logging
import math

import numpy as np
from scipy.linalg.lapack import dpotrf, dpotrs

from .polish import solve_kkt
from .problem import Problem

__all__ = ["WINDOW", "WINDOW_ENTRIES", "RESTRICTED_SIZE", "ACTIVE_STEPS", "ACTIVE_SHARE",
           "IPM_STEPS", "IPM_TOL", "kkt_point", "active_set", "interior_point",
           "restricted_polish"]

logger = logging.getLogger(__name__)

#: Width, in units of μ, of the window of entries around their kink that a sweep gathers for
#: the restricted polish, the most entries gathered, and the largest system (``r·d + d``) the
#: driver solves for it (each interior-point step factorises one; beyond, the band polish).
WINDOW, WINDOW_ENTRIES, RESTRICTED_SIZE = 3.0, 4000, 512
#: Most primal–dual active-set steps from a partition, and the largest share of the held
#: entries one step may move (more: the partition is too far from the solution's, and the
#: steps would oscillate).
ACTIVE_STEPS, ACTIVE_SHARE = 8, 0.3
#: Most interior-point iterations, and the complementarity (relative to the objective's
#: scale) below which the held entries are identified and the vertex computed (every other
#: iteration until found). Measured over the 252 polishes of bench_small_fits.py's two
#: ``select`` cv cases: 6–12 iterations, every one found; tolerances 1e-9 … 1e-6 tried
#: (``select`` quantile validation, 30 polishes): 272, 257, 241 and 222 iterations with 1,
#: 3, 5 and 11 failed vertex attempts, the time equal to ±10 % (shared machine).
IPM_STEPS, IPM_TOL = 30, 1e-8


def kkt_point(A: np.ndarray, Eb: np.ndarray | None, t: np.ndarray, g: np.ndarray,
              sa: np.ndarray | None, lam: float, n: int):
    """The equality-constrained QP on a set of held entries.

    ``argmin (λ/2)‖x‖² + gᵀx + (saᵀb)/n  s.t.  A x + Eb b = t`` (no ``b`` when ``Eb`` is
    None; ``Eb``: the one-hot output of each entry), through its multipliers ν: ``λx = −g −
    Aᵀν``, ``Ebᵀν = −sa/n``, a system of size ``k + d`` (:func:`~.polish.solve_kkt`)::

        [ −AAᵀ  Eb ] [ ν  ]   [ λt + Ag ]
        [ Ebᵀ   0  ] [ λb ] = [ −sa/n   ]

    Parameters
    ----------
    A : ndarray (k, rd)
    Eb : ndarray (k, d) or None
    t : ndarray (k,)
    g : ndarray (rd,)
    sa : ndarray (d,) or None
    lam : float
    n : int

    Returns
    -------
    x : ndarray (rd,)
    b : ndarray (d,) or (0,)
    nu : ndarray (k,)
    """
    k = len(t)
    # the first block row times λ, and λb for b: [−AAᵀ  Eb; Ebᵀ 0] [ν; λb] = [λt + Ag; −sa/n],
    # scaled alike for any λ (its condition estimate then measures dependent kinks only)
    K = -(A @ A.T)
    rhs = lam * t + A @ g
    if Eb is not None:
        d = Eb.shape[1]
        K = np.block([[K, Eb], [Eb.T, np.zeros((d, d))]])
        rhs = np.concatenate([rhs, -sa / n])
    sol = solve_kkt(K, rhs) if len(rhs) else np.zeros(0)
    nu = sol[:k]
    x = -(g + A.T @ nu) / lam
    return x, sol[k:] / lam, nu


def active_set(A: np.ndarray, Eb: np.ndarray | None, t: np.ndarray, lo: np.ndarray,
               hi: np.ndarray, gz: np.ndarray, cols: np.ndarray, lam: float, n: int,
               held: np.ndarray, beta: np.ndarray, b_free: np.ndarray | None = None):
    """The exact minimiser of the restricted problem by primal–dual active-set steps from a
    partition of its entries.

    ``held``: the entries held on their kink (``u_e = 0``); the others sit at a bound of
    their subdifferential (``beta_e`` = ``lo_e`` for ``u_e < 0``, ``hi_e`` for ``u_e > 0``).
    Each step solves the equality-constrained QP on the partition (:func:`kkt_point`: the
    held entries' multipliers ``β_e = nν_e``), then moves a held entry whose ``β_e`` left
    ``[lo_e, hi_e]`` to that bound, and holds a bound entry whose ``u_e`` crossed to the
    other side of its kink. A partition that needs no move is the solution: the held entries
    on their kinks (to rounding), their multipliers in the subdifferential, the others on
    their side — the KKT conditions of the restricted problem.

    An output with no held entry (with an intercept) leaves its ``b₀_j`` unpinned by the
    equalities: the objective is flat in it wherever its entries keep their sides, provided
    their bounds balance (``Σ_{e∈j} β_e = −n g_{b,j}``, checked; else its entry nearest its
    kink is held). It takes the middle of that interval (:func:`_free_intercepts`; a
    quantile level with ``τ·n`` entries below, as the median of an even sample), where least
    squares would put it at 0; ``b_free[j]`` when the interval is empty (entries then cross).

    Parameters
    ----------
    A : ndarray (k, rd)
        The entries' constraint rows (``x`` part).
    Eb : ndarray (k, d) or None
        The one-hot output of each entry (with an intercept).
    t, lo, hi : ndarray (k,)
        Targets and subdifferential bounds at the kinks.
    gz : ndarray (rd,) or (rd + d,)
        The linear part's gradient (``(1/n)Σα`` of the other entries last, with ``Eb``).
    cols : ndarray of int (k,)
        Each entry's output.
    lam : float
    n : int
    held : ndarray of bool (k,)
    beta : ndarray (k,)
        The bound entries' multipliers (the held ones' are ignored).
    b_free : ndarray (d,) or None
        The intercepts of outputs without a held entry (None: 0).

    Returns
    -------
    tuple or None
        ``(x, b₀, β, held, steps)``; None (gave up) when a step would move more than
        ``ACTIVE_SHARE`` of the held entries, when the moves do not shrink, when more entries
        are held than there are unknowns, when the held entries are left off their kinks (a
        degenerate vertex's least-squares point), or after ``ACTIVE_STEPS``.
    """
    rd = A.shape[1]
    d = 0 if Eb is None else Eb.shape[1]
    tol_u = 1e-9 * max(float(np.abs(t).max()), 1.0)
    b_free = np.zeros(d) if b_free is None else np.asarray(b_free, dtype=np.float64)
    moved = math.inf
    for step in range(1, ACTIVE_STEPS + 1):
        if int(held.sum()) > rd + d:  # more kinks than unknowns: not a vertex's active set
            return None
        out = ~held
        gk = gz[:rd] + A[out].T @ beta[out] / n
        bk = b_free.copy()
        if d:
            sk = gz[rd:] * n + np.bincount(cols[out], weights=beta[out], minlength=d)
            pinned = np.bincount(cols[held], minlength=d) > 0
            x, bk[pinned], nu = kkt_point(A[held], Eb[held][:, pinned] if pinned.any()
                                          else None, t[held], gk, sk[pinned], lam, n)
        else:
            x, _, nu = kkt_point(A[held], None, t[held], gk, None, lam, n)
        if not np.all(np.isfinite(x)):
            return None
        beta = beta.copy()
        beta[held] = n * nu
        if d and not pinned.all():
            _free_intercepts(A @ x - t, cols, beta, lo, hi, pinned, bk)
        uk = A @ x + (bk[cols] if d else 0.0) - t
        # held entries whose multiplier left the subdifferential (beyond rounding), and
        # entries at a bound that crossed their kink
        low, high = held & (beta < lo - 1e-9), held & (beta > hi + 1e-9)
        cross = out & (((beta == lo) & (uk > tol_u)) | ((beta == hi) & (uk < -tol_u)))
        if d and not pinned.all():  # a free intercept whose entries' bounds do not balance
            for j in np.flatnonzero(~pinned & (np.abs(sk) > 1e-9 * n)):
                own = np.flatnonzero(cols == j)
                cross[own[np.argmin(np.abs(uk[own]))]] = True
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


def _free_intercepts(v: np.ndarray, cols: np.ndarray, beta: np.ndarray, lo: np.ndarray,
                     hi: np.ndarray, pinned: np.ndarray, b: np.ndarray) -> None:
    """The intercepts of the outputs without a held entry, in place in ``b``: the middle of
    the interval where every entry of the output keeps its side (``u_e = v_e + b_j``, ``v =
    A x − t``: ``u_e ≥ 0`` at ``β_e = hi_e``, ``u_e ≤ 0`` at ``β_e = lo_e``), when both ends
    are finite and in order; else ``b_j`` is left as given."""
    for j in np.flatnonzero(~pinned):
        own = cols == j
        up, down = own & (beta == hi), own & (beta == lo)
        if not (up.any() and down.any()):
            continue
        low, high = float(np.max(-v[up])), float(np.min(-v[down]))
        if low <= high:
            b[j] = 0.5 * (low + high)


class _Entries:
    """The restricted problem's entries and the products the interior-point method needs:
    ``u = A x + b₀_j − t``, ``Aᵀw`` (with the intercept's ``Σ_{e∈j} w_e``) and the normal
    matrix ``Σ_e D_e ã_e ã_eᵀ`` in ``z``, formed per output from the features alone
    (``ã_e = [s_j ⊗ φ_i; e_j]``: ``Σ_j s_j s_jᵀ ⊗ Σ_{e∈j} D_e φ_i φ_iᵀ``, ``k·r²`` flops
    instead of ``k·(rd)²``; the entries of one row summed first, ``n·r²`` for ε's two
    kinks)."""

    def __init__(self, A, Phi, S, cols, rows, d, intercept):
        self.A, self.S, self.cols, self.d, self.ib = A, S, cols, d, intercept
        self.r = Phi.shape[1]
        self.by_output, self.row_of, self.Phi_j = [], [], []
        for j in range(d):
            idx = np.flatnonzero(cols == j)
            # the entries of one row (ε's two kinks) share its features: one Gram term each
            _, first, inv = np.unique(rows[idx], return_index=True, return_inverse=True)
            self.by_output.append(idx)
            self.row_of.append((inv, len(first)))
            # with a column of ones: one product gives G_j, h_j and ΣD
            self.Phi_j.append(np.hstack([Phi[idx[first]], np.ones((len(first), 1))]))
        self.SS = S[:, :, None] * S[:, None, :]  # (j, a, c): S_ja S_jc

    def u(self, z, t):
        rd = self.r * self.d
        out = self.A @ z[:rd] - t
        if self.ib:
            out += z[rd:][self.cols]
        return out

    def At(self, w):
        xt = self.A.T @ w
        if not self.ib:
            return xt
        return np.concatenate([xt, np.bincount(self.cols, weights=w, minlength=self.d)])

    def normal(self, D, diag):
        """``diag(diag) + Σ_e D_e ã_e ã_eᵀ`` (N, N): ``H_XX[(a,p),(c,q)] = Σ_j S_ja S_jc
        G_j[p,q]``, ``H_Xb[(a,p),j] = S_ja h_j[p]``, ``H_bb = diag(Σ_{e∈j} D_e)`` from
        ``[G_j h_j; h_jᵀ ΣD] = Σ_{e∈j} D_e [φ_i; 1][φ_i; 1]ᵀ``."""
        r, d, S = self.r, self.d, self.S
        rd = r * d
        Gt = np.empty((d, r + 1, r + 1))
        for j, (idx, (inv, nrow), P) in enumerate(zip(self.by_output, self.row_of,
                                                      self.Phi_j)):
            Dj = np.bincount(inv, weights=D[idx], minlength=nrow)
            np.matmul(P.T, Dj[:, None] * P, out=Gt[j])
        H = np.empty((rd + d, rd + d) if self.ib else (rd, rd))
        if d == 1:
            H[:r, :r] = (S[0, 0] * S[0, 0]) * Gt[0, :r, :r]
        else:
            HXX = np.tensordot(self.SS, Gt[:, :r, :r], axes=(0, 0))  # (a, c, p, q)
            H[:rd, :rd] = HXX.transpose(0, 2, 1, 3).reshape(rd, rd)
        if self.ib:
            HXb = (S[:, :, None] * Gt[:, None, :r, r]).transpose(1, 2, 0).reshape(rd, d)
            H[:rd, rd:] = HXb
            H[rd:, :rd] = HXb.T
            H[rd:, rd:] = np.diag(Gt[:, r, r])
        H.flat[:: H.shape[0] + 1] += diag
        return H


def _spd_solver(H: np.ndarray):
    """``b ↦ H⁻¹ b`` for a symmetric positive semi-definite ``H`` (b: (N, 1)): one Cholesky
    factorisation for every right-hand side, or, where it fails, the eigendecomposition
    with the numerically null directions dropped."""
    S = np.add(H, H.T)
    S *= 0.5  # exactly symmetric: Sᵀ (Fortran order, no copy) is S itself
    c, info = dpotrf(S.T, lower=1, clean=0, overwrite_a=1)
    if info == 0:
        return lambda b: dpotrs(c, b, lower=1)[0]
    w, V = np.linalg.eigh(0.5 * (H + H.T))
    keep = w > max(w[-1], 0.0) * 1e-13
    Vk, wk = V[:, keep], w[keep]
    return lambda b: Vk @ ((Vk.T @ b) / wk[:, None])


def _max_step(*pairs: np.ndarray) -> float:
    """The longest step ``α ≤ 1`` with ``x + α dx ≥ 0`` for every pair ``x, dx`` (x > 0)."""
    x, dx = np.concatenate(pairs[::2]), np.concatenate(pairs[1::2])
    neg = dx < 0
    if not neg.any():
        return 1.0
    return float(min(1.0, np.min(-x[neg] / dx[neg])))


def interior_point(ent: _Entries, t: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                   gz: np.ndarray, pen: np.ndarray, n: int, z0: np.ndarray, crossover):
    """The restricted problem by a primal–dual interior-point method (Mehrotra's
    predictor–corrector), in the scaled form (the objective times n, ``β = lo + w``)::

        min ½ zᵀΛz + qᵀz + Σ_e c_e ξ_e   s.t. ξ − s = A z − t, ξ ≥ 0, s ≥ 0
        Λ = n·diag(pen), q = n·g + Aᵀlo, c = hi − lo;   duals w ∈ [0, c] of s ≥ 0, c − w of ξ ≥ 0

    Each iteration solves ``(Λ + Aᵀ D A) Δz = …`` with ``D_e = 1/(ξ_e/(c_e − w_e) +
    s_e/w_e)`` (:class:`_Entries`, a Cholesky factorisation of size N), twice (predictor,
    corrector). Once the complementarity is below ``IPM_TOL`` of the objective's scale,
    ``crossover(held, beta, z)`` is asked for the exact vertex from the partition the iterate
    names (held: ``ξ_e ≤ c_e − w_e`` and ``s_e ≤ w_e``; else the side of the larger slack),
    at most every other iteration; its result is returned, or None after ``IPM_STEPS``.
    """
    k = len(t)
    c = hi - lo
    Lam = n * pen
    q = n * gz + ent.At(lo)
    z = z0.copy()
    u = ent.u(z, t)
    delta = max(float(np.sqrt(np.mean(u * u))), 1e-8 * max(float(np.abs(t).max()), 1.0))
    xi = np.maximum(u, 0.0) + delta
    s = xi - u
    w = 0.5 * c
    v = c - w
    scale = max(float(np.abs(q).max()), float(c.max()), 1.0)
    tried = -2
    for it in range(IPM_STEPS):
        rd_ = Lam * z + q + ent.At(w)
        rp = xi - s - u
        rc = w + v - c
        mu = float(w @ s + v @ xi) / (2 * k)
        if mu <= IPM_TOL * scale and it - tried >= 2:
            tried = it
            held = (xi <= v) & (s <= w)
            found = crossover(held, np.where(xi > v, hi, lo), z)
            if found is not None:
                return found, it
        D = 1.0 / (xi / v + s / w)
        solve = _spd_solver(ent.normal(D, Lam))

        def direction(r1, r2):
            r2 = r2 + xi * rc
            rho = -rp - r2 / v + r1 / w
            dz = solve((-rd_ - ent.At(D * rho))[:, None])[:, 0]
            dw = D * (ent.u(dz, 0.0) + rho)
            return dz, dw, -rc - dw, (r1 - s * dw) / w, (r2 + xi * dw) / v

        dz, dw, dv, ds, dxi = direction(-w * s, -v * xi)
        a = _max_step(xi, dxi, s, ds, w, dw, v, dv)
        mu_aff = float((w + a * dw) @ (s + a * ds) + (v + a * dv) @ (xi + a * dxi)) / (2 * k)
        sigma = (mu_aff / mu) ** 3 if mu > 0 else 0.0
        dz, dw, dv, ds, dxi = direction(sigma * mu - w * s - dw * ds,
                                        sigma * mu - v * xi - dv * dxi)
        a = 0.995 * _max_step(xi, dxi, s, ds, w, dw, v, dv)
        z, w, v, s, xi = z + a * dz, w + a * dw, v + a * dv, s + a * ds, xi + a * dxi
        u = ent.u(z, t)
    return None, IPM_STEPS


def restricted_polish(prob: Problem, lam: float, s: dict, Xi: np.ndarray, b0: np.ndarray):
    """The exact minimiser of the problem restricted to the entries a sweep gathered.

    Parameters
    ----------
    prob : Problem
    lam : float
    s : dict
        The sweep's sums with its gathered entries (``collect`` with a window): their rows of
        ``C`` (``E_C``, (k, m)), outputs (``E_col``), targets (``E_y``) and values on the
        kink (``E_target``), and the other entries' gradient sums ``Ca_out`` (m, d),
        ``sa_out`` (d,).
    Xi, b0 : ndarray (r, d), (d,)
        The iterate: the interior-point method's start.

    Returns
    -------
    tuple or None
        ``(Ξ, b₀, fix)``: the restricted problem's minimiser (module docstring) and the held
        entries' multipliers as :func:`~.polish.polish` gives them (``fix_C``, ``fix_col``,
        ``fix_y``, ``fix_beta``: every gathered entry, ``β_e`` at its bound when not held); None
        when no exact point was found (:func:`interior_point`), or with an intercept when an
        output's entries cannot balance the other entries' gradients (its ``b₀`` unbounded in
        the restricted problem; an output without entries among them).
    """
    k = len(s["E_row"])
    if k == 0:
        return None
    n, r, d = prob.n, prob.r, prob.d
    cols = np.asarray(s["E_col"], dtype=np.int64)
    ib = prob.intercept
    Phi = s["E_C"] @ prob.T
    if d == 1:  # one output: A = S₁₁ Φ (no copy when S₁₁ = 1)
        A = Phi if prob.S[0, 0] == 1.0 else prob.S[0, 0] * Phi
    else:
        A = np.concatenate([prob.S[cols, a][:, None] * Phi for a in range(d)], axis=1)
    rd = r * d
    t = np.asarray(s["E_target"], dtype=np.float64)
    lo, hi = prob.loss.kink_bounds(cols, t - s["E_y"], d)
    gz = (prob.T.T @ s["Ca_out"] @ prob.S / n).T.reshape(-1)
    z0 = Xi.T.reshape(-1).astype(np.float64)
    pen = np.full(rd, lam)
    Eb = None
    if ib:  # z = (vec Ξ, b₀): the intercept unpenalised, each entry on its output's b₀
        sa = np.asarray(s["sa_out"], dtype=np.float64)
        if np.any(-sa <= np.bincount(cols, weights=lo, minlength=d)) or \
                np.any(-sa >= np.bincount(cols, weights=hi, minlength=d)):
            # the entries' multipliers cannot balance the others' gradients (Σ_{e∈j} β_e
            # = −Σα_out,j within the box's interior): the restricted problem is unbounded
            # (or its multipliers pinned to bounds) in b₀_j
            return None
        Eb = np.zeros((k, d))
        Eb[np.arange(k), cols] = 1.0
        gz = np.concatenate([gz, sa / n])
        z0 = np.concatenate([z0, np.asarray(b0, dtype=np.float64)])
        pen = np.concatenate([pen, np.zeros(d)])

    def crossover(held, beta, z):
        return active_set(A, Eb, t, lo, hi, gz, cols, lam, n, held, beta, z[rd:])

    ent = _Entries(A, Phi, prob.S, cols, np.asarray(s["E_row"], dtype=np.int64), d, ib)
    found, its = interior_point(ent, t, lo, hi, gz, pen, n, z0, crossover)
    if found is None:
        logger.debug("restricted polish: no exact point on %d entries", k)
        return None
    x, bk, beta, held, steps = found
    logger.debug("restricted polish: %d entries, %d held, exact after %d interior-point "
                 "iterations (%d active-set steps)", k, int(held.sum()), its, steps)
    beta = np.clip(beta, lo, hi)
    fix = {"fix_C": s["E_C"], "fix_col": cols.astype(np.float64), "fix_y": s["E_y"],
           "fix_beta": beta}
    key = np.asarray(s["E_row"], dtype=np.int64) * d + cols
    if k > 1 and np.any(key[1:] == key[:-1]):
        # a row at two kinks (ε's whole window, +ε then −ε): one dual value per row, the sum
        # of its entries' (one of them 0 at the solution; in [−1, 1] either way)
        first = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
        fix = {"fix_C": s["E_C"][first], "fix_col": fix["fix_col"][first],
               "fix_y": s["E_y"][first], "fix_beta": np.add.reduceat(beta, first)}
    return x.reshape(d, r).T, (bk if ib else np.zeros(d)), fix
