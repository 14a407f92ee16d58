"""The Lipschitz-loss problems solved by an independent solver (CVXPY with Clarabel) in the
feature space of a fitted estimator's realised sketch: the reference of tests/test_lipschitz*.py
and tests/test_admm*.py, and their data."""

import warnings

import numpy as np
import pytest

from distsketch.losses.radial import EpsilonInsensitive, Huber, Squared
from reference.closed_forms import dense, white
from reference.kernels import gaussian_gram


def data(n, d=1, seed=0, outliers=12):
    """Smooth targets with ``outliers`` gross outliers (where robust losses differ from the
    squared one): ``X`` (n, 3), ``y`` (n,) or ``Y`` (n, d)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    base = np.sin(X[:, :1]) + 0.5 * X[:, 1:2]
    Y = base + 0.3 * np.arange(d)[None, :] * X[:, 2:3] + 0.1 * rng.normal(size=(n, d))
    Y[:outliers] += 4.0
    return X, (Y[:, 0] if d == 1 else Y)


def reference(est, X, y, loss, lam, M=None, intercept=True, *, gamma):
    """``(objective, predictions, C)`` of the feature-space problem of ``est`` (Gaussian
    kernel of width ``gamma``) solved by CVXPY (Clarabel) on the realised sketch."""
    cp = pytest.importorskip("cvxpy")
    n = len(X)
    Y = y.reshape(n, -1)
    K = gaussian_gram(X, gamma=gamma)
    R = dense(est.sketch_.matrix())
    C = K @ R.T
    Phi = C @ white(R @ C)
    d = len(est.output_sqrt_)
    if M is None:
        M = np.eye(d)
    w, V = np.linalg.eigh(M)
    S = (V * np.sqrt(np.clip(w, 0, None))) @ V.T
    Xi = cp.Variable((Phi.shape[1], d))
    b = cp.Variable(d) if intercept else np.zeros(d)
    F = Phi @ Xi @ S + (cp.reshape(b, (1, d), order="C") if intercept else 0)
    Rs = F - (np.repeat(Y, d, axis=1) if Y.shape[1] != d else Y)
    if isinstance(loss, Squared):
        data = 0.5 * cp.sum_squares(Rs)
    elif isinstance(loss, Huber):
        W = cp.Variable((n, d))  # h(r) = min_w ½‖w‖² + κ‖r − w‖ (radial Huber)
        data = 0.5 * cp.sum_squares(W) + loss.kappa * cp.sum(cp.norm(Rs - W, 2, axis=1))
    elif isinstance(loss, EpsilonInsensitive):
        data = cp.sum(cp.pos(cp.norm(Rs, 2, axis=1) - loss.epsilon))
    else:
        tau = loss.taus(d)[None, :]
        data = cp.sum(cp.maximum(cp.multiply(-tau, Rs), cp.multiply(1 - tau, Rs)))
    prob = cp.Problem(cp.Minimize(data / n + lam / 2 * cp.sum_squares(Xi)))
    with warnings.catch_warnings():  # "may be inaccurate": the objective is checked to 1e-6
        warnings.simplefilter("ignore")
        prob.solve(solver="CLARABEL", tol_gap_abs=1e-12, tol_gap_rel=1e-12, tol_feas=1e-12)
    pred = Phi @ Xi.value @ S + (b.value if intercept else 0)
    return float(prob.value), pred, C


def cvx_scalar(Phi, y, lam, loss, intercept):
    """``(objective, x, b)`` of ``min (1/n) Σ ℓ(Φx + b − y) + (λ/2)‖x‖²`` for a scalar
    ε-insensitive or pinball ``loss`` (every entry kept exact), by CVXPY (Clarabel): the
    reference of the restricted polish."""
    from distsketch.losses.quantile import Pinball

    cp = pytest.importorskip("cvxpy")
    n, r = Phi.shape
    x = cp.Variable(r)
    b = cp.Variable() if intercept else 0.0
    u = Phi @ x + b - y
    if isinstance(loss, Pinball):
        tau = float(loss.taus(1)[0])
        data_term = cp.sum(cp.maximum(-tau * u, (1 - tau) * u))
    else:
        data_term = cp.sum(cp.pos(cp.abs(u) - loss.epsilon))
    prob = cp.Problem(cp.Minimize(data_term / n + lam / 2 * cp.sum_squares(x)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prob.solve(solver="CLARABEL", tol_gap_abs=1e-12, tol_gap_rel=1e-12, tol_feas=1e-12)
    return float(prob.value), np.asarray(x.value), (float(b.value) if intercept else 0.0)


def held_sweep_data(n=230, m=9, rows=50, seed=5):
    """A sweep's data held in memory (blocks of ``rows`` rows of a random ``C`` (n, m)) and
    scalar targets: ``(data, X, Y, C, y, rng)``."""
    from distsketch.engine.rows import as_row_source
    from distsketch.engine.sweep import SweepData

    rng = np.random.default_rng(seed)
    C = rng.normal(size=(n, m))
    y = rng.normal(size=n) * 2.0
    held = tuple(C[s:s + rows] for s in range(0, n, rows))
    data = SweepData(n=n, block_rows=rows, m=m, d=1, C=None, crcs=(), x=None,
                     dtype=np.dtype("float64"), held=held)
    X = as_row_source(np.zeros((n, 1)), argument="X")
    Y = as_row_source(y, argument="y", allow_1d=True)
    return data, X, Y, C, y, rng


def whole_window(Phi, y, loss, intercept):
    """``(problem, sums)`` for :func:`distsketch.solvers.lipschitz.restricted.restricted_polish` with every entry of
    the scalar problem on features ``Phi`` (n, r) in its window (nothing kept linear;
    ``T = I``): the polish then solves the whole problem, :func:`cvx_scalar`'s."""
    from distsketch.solvers.lipschitz.problem import Problem

    n, r = Phi.shape
    prob = Problem(T=np.eye(r), S=np.eye(1), nu=np.ones(1), U=np.eye(1),
                   Gt=np.zeros((r + 1, r + 1)), b=np.zeros((r, 1)), y1=np.zeros(1), n=n,
                   loss=loss, intercept=intercept)
    s = {"E_row": np.arange(n), "E_col": np.zeros(n, dtype=np.int64), "E_C": Phi,
         "E_y": y, "E_target": y.copy(), "Ca_out": np.zeros((r, 1)), "sa_out": np.zeros(1)}
    return prob, s


def restricted_instance(loss, d, intercept, *, n=30, r=5, seed=0, linear=0.3):
    """A small restricted problem of :func:`distsketch.solvers.lipschitz.restricted.
    restricted_polish`: random features ``Φ`` (n, r), ``d`` outputs coupled by ``S =
    M^{1/2}`` (M a Gaussian Gram of the levels for d > 1), every entry at each of its kinks
    (``loss.band`` with ``width = inf``: ε's rows twice) except a share ``linear`` of the
    rows, kept linear with random gradients in the loss's range (their ``Ca_out``,
    ``sa_out``). Returns ``(problem, sums, A, Eb, t, lo, hi, g)``: the sweep-like sums the
    polish reads, and the dense problem ``min (λ/2)‖x‖² + gᵀz + (1/n) Σ_e max(lo_e u_e,
    hi_e u_e)``, ``u = A x + Eb b − t`` (``g``: (rd,) or (rd + d,)), for an independent
    solver."""
    import math

    from distsketch.solvers.lipschitz.problem import Problem

    rng = np.random.default_rng(seed)
    Phi = rng.normal(size=(n, r))
    Y = (Phi @ rng.normal(size=(r, 1)) * 0.5 + rng.standard_t(3, size=(n, 1))) * np.ones((1, d))
    if d > 1:
        M = gaussian_gram(np.linspace(0.1, 0.9, d)[:, None], gamma=2.0)
        w, V = np.linalg.eigh(M)
        S = (V * np.sqrt(w)) @ V.T
    else:
        M = S = np.eye(1)
    nu, U = np.linalg.eigh(M)
    prob = Problem(T=np.eye(r), S=S, nu=nu, U=U, Gt=np.zeros((r + 1, r + 1)),
                   b=np.zeros((r, d)), y1=np.zeros(d), n=n, loss=loss, intercept=intercept)
    kept = rng.random(n) >= linear
    rows, cols, kink = loss.band(np.zeros((n, d)), 1.0, math.inf)
    sel = kept[rows]
    rows, cols, kink = rows[sel], cols[sel], kink[sel]
    lo_d, hi_d = loss.entry_bounds(d)
    # the linear rows' gradients, small enough for the entries' multipliers to balance them
    # (the intercept's equation; else the restricted problem is unbounded in b₀)
    alpha = 0.2 * rng.uniform(lo_d, hi_d, size=(n, d)) * (~kept)[:, None]
    s = {"E_row": rows, "E_col": cols, "E_C": Phi[rows], "E_y": Y[rows, cols],
         "E_target": Y[rows, cols] + kink, "Ca_out": Phi.T @ alpha, "sa_out": alpha.sum(axis=0)}
    A = np.concatenate([S[cols, a][:, None] * Phi[rows] for a in range(d)], axis=1)
    Eb = np.eye(d)[cols] if intercept else None
    lo, hi = loss.kink_bounds(cols, kink, d)
    g = (Phi.T @ alpha @ S / n).T.reshape(-1)
    if intercept:
        g = np.concatenate([g, alpha.sum(axis=0) / n])
    return prob, s, A, Eb, s["E_target"], lo, hi, g


def restricted_objective(A, Eb, t, lo, hi, g, lam, n, x, b):
    """``(λ/2)‖x‖² + gᵀ(x, b) + (1/n) Σ_e max(lo_e u_e, hi_e u_e)`` (the dense restricted
    problem of :func:`restricted_instance`)."""
    u = A @ x - t + (Eb @ b if Eb is not None else 0.0)
    z = np.concatenate([x, b]) if Eb is not None else x
    return 0.5 * lam * float(x @ x) + float(g @ z) + float(np.maximum(lo * u, hi * u).sum()) / n


def restricted_dual_scipy(A, Eb, t, lo, hi, g, lam, n):
    """The dense restricted problem's dual by SciPy (SLSQP), independent of distsketch::

        max_β −‖g_x + Aᵀβ/n‖²/(2λ) − tᵀβ/n   s.t.  lo ≤ β ≤ hi,  Ebᵀβ/n + g_b = 0

    (``x = −(g_x + Aᵀβ/n)/λ`` at the optimum; strong duality: its value is the primal
    minimum). Returns ``(value, x, β)``."""
    from scipy.optimize import minimize

    rd = A.shape[1]
    gx = g[:rd]

    def neg(beta):
        v = gx + A.T @ beta / n
        return float(v @ v) / (2 * lam) + float(t @ beta) / n, A @ v / (lam * n) + t / n

    cons = []
    if Eb is not None:
        gb = g[rd:]
        cons = [{"type": "eq", "fun": lambda beta: Eb.T @ beta / n + gb,
                 "jac": lambda beta: Eb.T / n}]
    beta0 = np.clip(np.zeros(len(t)), lo, hi)
    res = minimize(neg, beta0, jac=True, bounds=list(zip(lo, hi)), constraints=cons,
                   method="SLSQP", options={"ftol": 1e-16, "maxiter": 2000})
    beta = res.x
    x = -(gx + A.T @ beta / n) / lam
    return -neg(beta)[0], x, beta
