"""Shared data and error measure of the PCG tests (test_pcg, test_pcg_regressor,
test_pcg_sisokr)."""

import numpy as np


def data(n=400, t=1, seed=0):
    """Smooth targets of 3 inputs (t columns, 1-D when t = 1), offset 2 (an intercept to fit)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    Y = np.sin(X[:, :1]) + 0.5 * X[:, 1:2] + 0.3 * np.arange(t)[None, :] * X[:, 2:3] \
        + 0.1 * rng.normal(size=(n, t)) + 2.0
    return X, (Y[:, 0] if t == 1 else Y)


def rel(a, b) -> float:
    """``max |a − b| / max |b|``."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    return float(np.abs(a - b).max() / np.abs(b).max())


def repeated(n_distinct=50, copies=12, noise=0.0, seed=0):
    """``copies`` copies of ``n_distinct`` rows of 3 inputs (the issue's repeated rows) and
    their smooth targets; with ``noise`` every copy after the first is moved by
    ``noise · N(0, 1)`` (distinct rows, numerically coincident for small ``noise``)."""
    rng = np.random.default_rng(seed)
    Xd = rng.normal(size=(n_distinct, 3))
    yd = np.sin(Xd[:, 0]) + 0.5 * Xd[:, 1]
    X = np.tile(Xd, (copies, 1))
    if noise:
        X[n_distinct:] += noise * rng.normal(size=X[n_distinct:].shape)
    return X, np.tile(yd, copies)


def distinct(L):
    """The distinct rows of ``L`` (first occurrences, in order)."""
    _, first = np.unique(np.ascontiguousarray(L), axis=0, return_index=True)
    return L[np.sort(first)]


def dense_distinct(kernel, X, Y, landmarks, lam, *, intercept=True, centre=False):
    """The sketched KRR problem solved densely in the distinct landmarks ``L_u``:
    ``(L_u, α_u, b₀)`` with ``(K_cᵀ K_c + nλ K_uu) α_u = K_cᵀ (Y − 1ȳᵀ)``, ``K_c = K_nu``
    (``− 1 sᵀ/n`` with ``centre``: the jointly fitted intercept, ``b₀ = ȳ − α_uᵀ s/n``; else
    ``b₀ = ȳ``); predictions ``k(x, L_u) α_u + b₀``."""
    Lu = distinct(landmarks)
    n = len(X)
    Y = np.asarray(Y, dtype=np.float64).reshape(n, -1)
    Knu, Kuu = np.asarray(kernel(X, Lu)), np.asarray(kernel(Lu, Lu))
    ybar = Y.mean(axis=0) if intercept else np.zeros(Y.shape[1])
    Kc = Knu - Knu.mean(axis=0) if centre else Knu
    alpha = np.linalg.solve(Kc.T @ Kc + n * lam * Kuu, Kc.T @ (Y - ybar))
    b0 = ybar - Knu.mean(axis=0) @ alpha if centre else ybar
    return Lu, alpha, b0
