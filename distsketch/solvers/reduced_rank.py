"""Reduced rank: the principal directions of the training predictions in the output space
(Brogat-Motte et al., JMLR 2022), and the ``rank`` argument.

A rank-p model projects its output coordinates on the top p principal directions of the
covariance of the training predictions (:func:`prediction_covariance`,
:func:`principal_directions`); with a sketched input side and an exact output side
:func:`factored_directions` finds them from an ``r_X × r_X`` problem, without any ``n × n``
object. The input side's factors are :mod:`distsketch.linalg.solve`'s. numpy only, no dask.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..linalg.solve import InputSolution, sym

__all__ = ["prediction_covariance", "principal_directions", "factored_directions", "check_rank"]


# --------------------------------------------------------------------------- reduced rank


def prediction_covariance(sol: InputSolution, W: np.ndarray) -> np.ndarray:
    """``Σ_i g(x_i) g(x_i)ᵀ`` (r_Y × r_Y): n times the uncentred covariance of the training
    predictions' output coordinates ``g(x) = W φ_X(x)`` (Brogat-Motte et al., JMLR 2022).

    ``W F Wᵀ`` with ``F = Σ_i φ_X(x_i) φ_X(x_i)ᵀ`` the Gram of the input features over the
    training rows: ``F = H = T_Xᵀ G T_X`` (sketched input; ``diag(Λ)`` in the eigenbasis, so
    ``W H Wᵀ = Ã diag(Λ/(Λ + nλ)²) Ãᵀ``) or ``F = K_X²`` (exact input, features
    ``k_X(X, x)``; ``diag(Λ²)`` in the eigenbasis).
    """
    W = np.asarray(W, dtype=np.float64)
    if sol.V is not None:
        f = sol.evals * sol.evals if sol.exact else sol.evals
        return sym((W * f) @ W.T)
    if sol.exact:  # Cholesky route: F = K_X²
        WK = W @ sol.H
        return sym(WK @ WK.T)
    return sym(W @ sol.H @ W.T)


def principal_directions(S: np.ndarray, metric: np.ndarray | None = None, *,
                         rtol: float = 1e-10) -> tuple[np.ndarray, np.ndarray]:
    """Principal directions of a covariance ``S`` of output coordinates, in H_Y.

    The coordinates ``g`` stand for ``Σ_j g_j e_j`` with ``⟨e_j, e_k⟩ = metric_jk``
    (``None``: orthonormal, a whitened sketched output side; ``K_Y`` for an exact one).
    Returns ``(A, μ)``: ``A`` (r_Y × q) whose columns are the eigenvectors of the covariance
    operator, orthonormal in H_Y (``Aᵀ metric A = I``), in descending order of ``μ`` (q ≤ r_Y:
    the retained dimension of the metric). The rank-p projection of ``g`` is
    ``A_p A_pᵀ metric g``.
    """
    if metric is None:
        mu, Q = np.linalg.eigh(sym(S))
        return Q[:, ::-1].copy(), mu[::-1].copy()
    s, U = np.linalg.eigh(sym(metric))
    keep = s > rtol * max(s[-1], 0.0)
    U, r = U[:, keep], np.sqrt(s[keep])
    Z = (U.T @ S @ U) * r[:, None] * r[None, :]  # the covariance in orthonormal coordinates
    mu, V = np.linalg.eigh(sym(Z))
    return (U / r) @ V[:, ::-1], mu[::-1].copy()


def factored_directions(sol: InputSolution, Q: np.ndarray, lam: float, *,
                        rtol: float = 1e-10) -> tuple[np.ndarray, np.ndarray]:
    """:func:`principal_directions` for a sketched input side and an exact output side
    without any n × n object.

    There ``W(λ) = Rᵀ N`` (n × r_X: ``R`` the operator, r_X × n; ``N = (H + nλ·metric)^{-1}``,
    r_X × r_X, see :func:`~distsketch.solvers.direct.sisokr_coef`) and ``S = W F Wᵀ = Φ Φᵀ`` with ``Φ = Rᵀ N L``,
    ``F = L Lᵀ`` (``F = H``; ``diag(Λ)`` on the eigen route). In the metric ``Γ = K_Y`` the
    eigenpairs of the covariance operator with ``μ > 0`` come from an r_X × r_X problem::

        Φᵀ Γ Φ = (N L)ᵀ Q (N L) = V diag(μ) Vᵀ,     Q = R K_Y Rᵀ   (λ-free, r_X × r_X)
        A = Φ V diag(μ)^{-1/2} = Rᵀ E,              E = N L V diag(μ)^{-1/2}

    so that ``Aᵀ Γ A = I`` and ``S Γ A = A diag(μ)``: the columns of ``A`` are those of
    :func:`principal_directions` (up to signs within equal ``μ``), restricted to ``μ`` above
    ``rtol · μ_max`` — the span of the predictions, so a rank past it is the full model.
    Cost: ``O(r_X³)`` here, ``Q`` once per fit (``2n²r_X`` flops from row blocks of
    ``K_Y``), against ``O(n³)`` for the metric's eigendecomposition.

    Returns ``(E, μ)``: ``E`` (r_X × q) by descending ``μ`` (q,).
    """
    if sol.V is not None:
        f = np.maximum(sol.evals, 0.0)
        g = np.sqrt(f) / (f + sol.n * float(lam))  # N L = diag(√Λ / (Λ + nλ))
        Z = Q * g[:, None] * g[None, :]

        def apply(V):  # N L V, N L diagonal
            return g[:, None] * V
    else:
        s, U = np.linalg.eigh(sym(sol.H))
        NL = sol.solve(U * np.sqrt(np.maximum(s, 0.0)), lam)
        Z = NL.T @ Q @ NL

        def apply(V):
            return NL @ V
    mu, V = np.linalg.eigh(sym(Z))
    mu, V = mu[::-1], V[:, ::-1]
    keep = mu > rtol * max(float(mu[0]), 0.0) if len(mu) else np.zeros(0, bool)
    mu = mu[keep]
    return apply(V[:, keep]) / np.sqrt(mu), mu.copy()


def check_rank(rank: Any, *, argument: str = "rank") -> tuple[int, ...]:
    """``None`` (full rank), a positive int or a sequence of them; returns the ranks."""
    if rank is None:
        return ()
    values = rank if isinstance(rank, (Sequence, np.ndarray)) and not isinstance(rank, str) \
        else [rank]
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1:
            raise ValueError(f"{argument}: the rank of the reduced-rank estimator must be None "
                             f"or a positive integer (or a sequence of them), got {rank!r}")
        out.append(int(v))
    if not out:
        raise ValueError(f"{argument}: empty sequence; give at least one rank, or None")
    return tuple(out)
