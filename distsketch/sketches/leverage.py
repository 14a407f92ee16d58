"""Leverage-score sampling: the data-dependent sketch :class:`LeverageScores`.

:func:`approximate_leverage_scores` estimates the ridge leverage scores of rows from a uniform
dictionary of rows; :class:`LeverageScores` draws ``m`` rows with probabilities proportional to
them (a defensive mixture with the uniform distribution) in one walk over the data, so its
realisation depends on the data and the kernel and is saved with the model, never redrawn.

References: Alaoui & Mahoney, NeurIPS 2015; Rudi, Carratino & Rosasco, "FALKON", NeurIPS 2017;
Rudi et al., "On fast leverage score sampling and optimal learning" (BLESS), NeurIPS 2018.
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np
import scipy.sparse as sp
from scipy.linalg import solve_triangular

from .._hashing import row_hash
from .base import RealizedSketch, Sketch, SparseSketch

__all__ = ["approximate_leverage_scores", "LeverageScores"]


def _uniform01(seed: int, rows: np.ndarray) -> np.ndarray:
    """A uniform in (0, 1) per row index, a pure function of ``(seed, row)`` (:func:`row_hash`)."""
    return ((row_hash(seed, rows) >> np.uint64(11)).astype(np.float64) + 0.5) / 2.0**53


def approximate_leverage_scores(kernel: Any, X: Any, dictionary: Any,
                                lam: float) -> np.ndarray:
    """Ridge leverage scores of the rows ``X`` from a dictionary of rows (Alaoui & Mahoney,
    NeurIPS 2015; the estimator of BLESS, Rudi et al., NeurIPS 2018, eq. 3, with a uniform
    dictionary of q rows)::

        τ̃_i(λ) = (k(x_i, x_i) − k(x_i, X_J) (K_JJ + λ q I)^{-1} k(X_J, x_i)) / (λ n)

    approximating ``τ_i(λ) = (K (K + nλI)^{-1})_ii`` (``n``: the number of training rows;
    pass ``lam`` as ``λ n / n`` of the model's scale).

    Parameters
    ----------
    kernel : Kernel
        The side's kernel.
    X : ndarray of shape (b, d)
        The rows scored.
    dictionary : ndarray of shape (q, d)
        The dictionary's rows ``X_J``.
    lam : float
        λ > 0.

    Returns
    -------
    ndarray of shape (b,)
        The numerator ``λ n τ̃_i(λ)`` of each row: divide by ``λ n`` for the scores.

    References
    ----------
    .. [1] A. E. Alaoui and M. W. Mahoney, "Fast Randomized Kernel Ridge Regression with
       Statistical Guarantees", NeurIPS 2015.
    .. [2] A. Rudi, D. Calandriello, L. Carratino and L. Rosasco, "On Fast Leverage Score
       Sampling and Optimal Learning", NeurIPS 2018.

    Examples
    --------
    >>> import numpy as np
    >>> from distsketch.kernels import Gaussian
    >>> from distsketch.sketches import approximate_leverage_scores
    >>> X = np.random.default_rng(0).normal(size=(20, 2))
    >>> lam = 1e-3
    >>> tau = approximate_leverage_scores(Gaussian(), X, X[:5], lam) / (lam * len(X))
    >>> tau.shape, bool((tau >= 0).all())
    ((20,), True)
    """
    D = np.asarray(dictionary)
    q = D.shape[0]
    Kjj = np.asarray(kernel(D, D), dtype=np.float64)
    L = np.linalg.cholesky(0.5 * (Kjj + Kjj.T) + lam * q * np.eye(q))
    Kij = np.asarray(kernel(X, D), dtype=np.float64)
    Z = solve_triangular(L, Kij.T, lower=True, check_finite=False)  # (q, b)
    return np.asarray(kernel.diag(X), dtype=np.float64) - np.einsum("ij,ij->j", Z, Z)


class LeverageScores(Sketch):
    """Sub-sampling by approximate ridge leverage scores (data-dependent).

    A first, cheap walk over the rows computes ``τ̃_i(λ)`` (:func:`approximate_leverage_scores`
    from a uniform dictionary of ``dictionary`` rows), then ``m`` distinct rows are drawn with
    probabilities proportional to ``τ̃`` (Efraimidis–Spirakis weighted sampling without
    replacement: the ``m`` largest keys ``u_i^{1/w_i}``, with ``u_i`` a pure function of the
    seed and the row index, so the draw never depends on chunking) and scaled
    ``R[r, J_r] = 1/sqrt(m p_{J_r})`` with ``p = w/Σ w`` (Alaoui & Mahoney 2015; Rudi, Carratino &
    Rosasco, "FALKON", NeurIPS 2017). The weights are a defensive mixture
    ``w_i = τ̃_i + d̂/n`` (``d̂``: the dictionary's estimate of ``d_eff = Σ τ``), about half
    leverage and half uniform, so that dense regions keep landmarks when a few sparse rows
    have most of the leverage (measured: RESULTS.md, "leverage"). The scores need the kernel: the side's kernel, given by the
    fit. The realised sketch is saved with the model (never redrawn).

    Parameters
    ----------
    m : int
        Number of sampled rows, ``1 <= m <= n``.
    lam : float > 0 or None
        Ridge parameter of the scores. ``None`` (default): the λ whose effective dimension
        ``d_eff(λ) = Σ_i τ_i(λ)`` satisfies ``d_eff log d_eff = m`` — the scale that ``m``
        leverage-sampled landmarks resolve (``m ≳ d_eff log d_eff`` in the theory of Alaoui &
        Mahoney 2015, Rudi et al. 2015) — estimated from the dictionary's spectrum,
        ``d_eff(λ) ≈ Σ_j s_j / (s_j + λq)`` (``s``: eigenvalues of ``K_JJ``), by bisection in
        ``log λ``. A model λ far below it makes the scores nearly
        ``1/density`` and over-samples sparse regions (RESULTS.md, "leverage").
    dictionary : int or None
        Rows of the uniform dictionary (default ``min(n, 4m)``).
    """

    name = "leverage_scores"
    needs_kernel = True
    selects_landmarks = True

    def __init__(self, m: int, lam: float | None = None, dictionary: int | None = None) -> None:
        self.m = m
        self.lam = lam
        self.dictionary = dictionary

    def check(self, n: int, *, argument: str) -> None:
        self._check_rows(n, argument=argument)
        lam = self.lam
        if lam is not None and (isinstance(lam, bool) or not isinstance(lam, numbers.Real)
                                or not lam > 0 or not np.isfinite(lam)):
            raise ValueError(f"{argument}: LeverageScores: lam must be a positive number, "
                             f"got {lam!r}")
        q = self.dictionary
        if q is not None and (isinstance(q, bool) or not isinstance(q, numbers.Integral)
                              or q < 1):
            raise ValueError(f"{argument}: LeverageScores: dictionary must be None or a "
                             f"positive integer, got {q!r}")

    def scores(self, n: int, *, seed: int, data: Any, kernel: Any,
               block_rows: int = 4096) -> np.ndarray:
        """``τ̃`` of every row (n-sized: for audits and tests; :meth:`realize` streams them).

        Parameters
        ----------
        n : int
            Training rows.
        seed : int
            Seeds the dictionary (as in :meth:`realize`).
        data : RowSource
            The training rows (``distsketch.engine.rows.RowSource``).
        kernel : Kernel
            The side's kernel.
        block_rows : int
            Rows per block of the walk.

        Returns
        -------
        ndarray of shape (n,)
            The approximate ridge leverage scores, without the uniform part of the weights.
        """
        return np.concatenate([s for _, s, _ in self._walk(n, seed, data, kernel, block_rows)])

    def _walk(self, n, seed, data, kernel, block_rows):
        q = min(n, self.dictionary or 4 * self._m())
        rng = np.random.default_rng([int(seed), 1])
        J = np.sort(rng.choice(n, size=q, replace=False)).astype(np.int64)
        D = data.take(J)
        D = D.toarray() if hasattr(D, "toarray") else np.asarray(D)
        lam = float(self.lam) if self.lam is not None else self._auto_lam(kernel, D)
        Kjj = np.asarray(kernel(D, D), dtype=np.float64)
        sv = np.clip(np.linalg.eigvalsh(0.5 * (Kjj + Kjj.T)), 0.0, None)
        floor = float(np.sum(sv / (sv + lam * q))) / n  # d_eff(λ)/n: the mean score
        for i, blk in enumerate(data.blocks(block_rows)):
            blk = blk.compute() if hasattr(blk, "compute") else blk
            blk = blk.toarray() if hasattr(blk, "toarray") else np.asarray(blk)
            yield i * block_rows, np.clip(
                approximate_leverage_scores(kernel, blk, D, lam), 0.0, None) / (lam * n), floor

    def _auto_lam(self, kernel, D) -> float:
        """The λ with ``d_eff(λ) = Σ_j s_j/(s_j + λq) = d``, ``d log d = m`` (bisection)."""
        q = D.shape[0]
        Kjj = np.asarray(kernel(D, D), dtype=np.float64)
        s = np.clip(np.linalg.eigvalsh(0.5 * (Kjj + Kjj.T)), 0.0, None)
        m = float(self._m())
        a, b = 1.0, max(m, np.e)  # d log d = m, d in [1, m]
        for _ in range(100):
            c = 0.5 * (a + b)
            a, b = (c, b) if c * np.log(c) < m else (a, c)
        target = max(0.5 * (a + b), 1.0)
        if np.sum(s > 0) <= target:  # every direction resolvable: the smallest scale
            return max(float(s[s > 0].min()) / q, 1e-300) if np.any(s > 0) else 1.0
        lo, hi = np.log(1e-16 * s.max() / q), np.log(s.max() / q * 1e6)
        for _ in range(100):
            mid = 0.5 * (lo + hi)
            if np.sum(s / (s + np.exp(mid) * q)) > target:
                lo = mid
            else:
                hi = mid
        return float(np.exp(0.5 * (lo + hi)))

    def realize(self, n: int, *, seed: int, data: Any = None,
                kernel: Any = None) -> RealizedSketch:
        m = self._m()
        if data is None or kernel is None:
            raise ValueError("LeverageScores: the sketch is drawn from the training rows and "
                             "the kernel (fit passes them)")
        total = 0.0
        best_keys = np.empty(0)
        best_rows = np.empty(0, dtype=np.int64)
        best_tau = np.empty(0)
        for start, tau, floor in self._walk(n, seed, data, kernel, 4096):
            rows = np.arange(start, start + len(tau), dtype=np.int64)
            tau = tau + floor  # defensive mixture: half the mass uniform (see the class notes)
            total += float(tau.sum())
            with np.errstate(divide="ignore"):
                keys = np.where(tau > 0, np.log(_uniform01(seed, rows)) / tau, -np.inf)
            keys = np.concatenate([best_keys, keys])
            rows = np.concatenate([best_rows, rows])
            tau = np.concatenate([best_tau, tau])
            top = np.argsort(-keys, kind="stable")[:m]
            best_keys, best_rows, best_tau = keys[top], rows[top], tau[top]
        order = np.argsort(best_rows)
        rows, tau = best_rows[order], best_tau[order]
        p = np.maximum(tau / max(total, 1e-300), 1e-300)
        scale = 1.0 / np.sqrt(m * p)
        return SparseSketch(self, n, seed, m, support=rows, mixing=sp.diags_array(scale),
                            scale=scale)
