"""SISOKRCV's fold algebra: every fold's surrogate scores, for every λ and rank, from the sums.

:func:`sisokr_fold_scores` scores the model trained without each fold in the eigenbasis of the
refit's ``H``, by one of two routes per fold: the band route (a congruence ``Pᵀ G_k P`` and one
band reduction per fold, then a banded solve per λ) or the Woodbury route (a pivoted Cholesky
factor of ``G_k``, :func:`fold_factor`, then a Woodbury solve per λ), whichever
:func:`fold_route`'s flop model finds cheaper (weighted by :data:`BAND_RATE_WEIGHT`), on a
thread pool. :func:`output_scale` is the output side's factor of the scores' rounding bound
(:func:`~distsketch.model_selection.scoring.fold_error_bound`).
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from itertools import pairwise

import numpy as np

from ..tuning import check_tuning
from .folds import ordered_sum
from .scoring import fold_error_bound, resolved

__all__ = ["BAND_RATE_WEIGHT", "output_scale", "sisokr_fold_scores", "fold_route",
           "fold_factor"]

logger = logging.getLogger(__name__)

# The fold route, band and threads and the driver's budget for the per-fold sums are fields of
# EngineOptions.tuning (distsketch.Tuning: fold_route, fold_band, fold_threads, max_fold_bytes,
# each with its measured basis); docs/design/model-selection.md, "Cross-validation from one pass",
# has the two routes.
# fold_route's weight on the band route's flops: the Woodbury route's flop rate over the band
# route's, from the process CPU seconds of the fold algebra on Bibtex's sums (m_X = 2250,
# r_X = 2247, n_k = 976, r_Y = 200, 10 λ, one BLAS thread; benchmarks/bench_cv.py's "fold
# algebra alone", two runs): 8.9–9.4 s for the Woodbury route's 318 GFLOP (about 35 GFLOP/s:
# SYRK, GEMM) against 14.3–15.1 s for the band route's 353 (about 24 GFLOP/s: the
# reduction's panels, Q's reflectors), a ratio of 1.4–1.5.
BAND_RATE_WEIGHT = 1.4


def output_scale(kernel, landmarks, sketch, T_Y: np.ndarray) -> float:
    """``a_Y = ‖T_Y‖_F ‖ |R_mix| κ ‖₂``, ``κ_j = k_Y(y_j, y_j)^{1/2}`` over the output
    landmarks: for every output row ``y``, ``d = R_mix k_Y(Y_J, y)`` has ``|k_Y(y_j, y)| ≤
    κ_j k_Y(y, y)^{1/2}`` (Cauchy–Schwarz in H_Y), so ``‖d‖ ≤ ‖|R_mix| κ‖ k_Y(y, y)^{1/2}``,
    and the rounding ``δM_k`` of the accumulated ``M_k = Σ d_i c_iᵀ`` (``|δM_k| ≤ γ_{n_k} Σ
    |d_i||c_i|ᵀ``) moves the cross term ``tr(T_Yᵀ M_k β)`` by at most ``γ_{n_k} ‖T_Y‖₂ ‖β‖_F
    Σ ‖d_i‖ ‖c_i‖ ≤ γ_{n_k} a_Y ‖β‖_F (Σ k_Y(y_i, y_i))^{1/2} (tr G_k)^{1/2}``: the factor
    of the cross term in :func:`sisokr_fold_scores`' rounding bound (``‖T_Y‖_F ≥ ‖T_Y‖₂``
    spares an SVD).

    Parameters
    ----------
    kernel : Kernel
        The output kernel.
    landmarks : ndarray or sparse of shape (s', d_Y)
    sketch : RealizedSketch
        The output sketch (``R_mix``: m_Y × s').
    T_Y : ndarray of shape (m_Y, r_Y)
    """
    import scipy.sparse as sp

    kappa = np.sqrt(np.maximum(np.asarray(kernel.diag(landmarks), dtype=np.float64), 0.0))
    v = np.zeros(T_Y.shape[0])
    step = 4096  # R_mixᵀ by column spans: a dense (tiled) sketch is never whole
    for a in range(0, len(kappa), step):
        Rt = sketch.mixing_t_block(a, min(a + step, len(kappa)))  # (span, m_Y)
        Rt = abs(Rt) if sp.issparse(Rt) else np.abs(np.asarray(Rt))
        v += np.asarray(Rt.T @ kappa[a:a + step]).reshape(-1)
    t_norm = float(np.linalg.norm(T_Y))  # ‖T_Y‖_F ≥ ‖T_Y‖₂: O(m_Y r_Y), no SVD
    return t_norm * float(np.linalg.norm(v))


def _congruence(P: np.ndarray, G: np.ndarray, *, blocks: int = 4) -> np.ndarray:
    """``Pᵀ G P`` for symmetric ``G``: ``Y = G P``, then only the block lower triangle of
    ``Pᵀ Y`` (``(blocks + 1) / (2 · blocks)`` of its flops), mirrored."""
    Y = G @ P
    r = P.shape[1]
    edges = np.linspace(0, r, blocks + 1).astype(int)
    out = np.empty((r, r))
    for a, b in pairwise(edges):
        out[a:b, :b] = P[:, a:b].T @ Y[:, :b]
    lower = np.tril(out)
    return lower + np.tril(lower, -1).T


def sisokr_fold_scores(P, evals, operator, T_Y, Gf, Mf, kyy, cnt, *, n: int, lams, ranks,
                       keep_models: bool = False, band: int | None = None,
                       output_scale: float = 1.0, tuning=None):
    """Surrogate validation errors of SISOKR trained without each fold, for every λ and rank.

    In the eigenbasis of the full ``H = V Λ Vᵀ`` (input features ``Pᵀ c``, ``P = T_X V``),
    fold ``k``'s Gram is ``Ĥ_k = Pᵀ G_k P`` (``Σ_k Ĥ_k = Λ``: the last fold's is ``Λ`` minus
    the others, one transform saved) and the model trained without it is
    ``Wᵀ = Z = (Ĥ_{−k} + cI)^{-1} R_{−k}``, ``c = n_{−k} λ``, ``Ĥ_{−k} = Λ − Ĥ_k``,
    ``R = operator = Pᵀ Mᵀ T_Y`` (``R_{−k} = R − R_k``, ``R_k = Pᵀ M_kᵀ T_Y``). One
    :class:`~distsketch.linalg.shifted.BandReduction` ``Ĥ_{−k} = Q Bd Qᵀ`` per fold serves every λ:
    ``Y = (Bd + cI)^{-1} Qᵀ R_{−k}`` (banded Cholesky), ``Z = Q Y``, and the r_Y × r_Y
    matrices of the scores are

        S = W Ĥ_{−k} Wᵀ = Yᵀ Bd Y            (the training predictions' covariance)
        W A_kᵀ = (Qᵀ R_k)ᵀ Y                  (tr(Wᵀ A_k), A_k = R_kᵀ)
        W Ĥ_k Wᵀ = Zᵀ Λ Z − S                 (Ĥ_k = Λ − Ĥ_{−k})

    so the validation error ``Σ k_Y(y,y) − 2 tr(W A_kᵀ) + tr(W Ĥ_k Wᵀ)``, and for every rank
    p the same with ``W_p = Q_S,p Q_S,pᵀ W`` (``S = Q_S diag(μ) Q_Sᵀ``, descending): cumulative
    sums of the diagonals of ``Q_Sᵀ (W A_kᵀ) Q_S`` and of ``Q_Sᵀ (Zᵀ Λ Z) Q_S − μ``. The
    ``Z Q_S`` of all λ of a fold go through ``Q`` in one product. Where ``Bd + cI`` is not
    numerically positive definite the fold falls back to the eigendecomposition of
    ``Ĥ_{−k}`` (:class:`~distsketch.linalg.shifted.EigenShifted`, eigenvalues clipped at 0).

    That is the band route. A fold with fewer rows than features takes the Woodbury route
    instead where :func:`fold_route` finds it cheaper: ``G_k = L Lᵀ`` (pivoted Cholesky,
    rank ≤ n_k), ``U = Pᵀ L`` so ``Ĥ_k = U Uᵀ``, and per λ
    ``(Λ + c − U Uᵀ)^{-1} = D + D U (I − Uᵀ D U)^{-1} Uᵀ D``, ``D = (Λ + c)^{-1}``, with
    ``Uᵀ Z`` the inner solution itself (:func:`_woodbury_lam`); no congruence, no band
    reduction. A fold whose inner factor is not numerically positive definite, or is
    conditioned beyond the exact bound ``(max Λ + c)/c``, falls back to the band route. The
    fold Grams, then the folds (the Woodbury route: its factors, then its (fold, λ) pairs),
    run on ``tuning.fold_threads`` threads (each computed the same way on any thread).

    Parameters
    ----------
    P : ndarray of shape (m_X, r_X)
        ``T_X V``.
    evals : ndarray of shape (r_X,)
        ``Λ``.
    operator : ndarray of shape (r_X, r_Y)
        ``Pᵀ Mᵀ T_Y`` (:func:`~distsketch.solvers.direct.sisokr_operator`).
    T_Y : ndarray of shape (m_Y, r_Y)
    Gf, Mf : ndarray of shape (K, m_X, m_X) and (K, m_Y, m_X)
        Per-fold ``G_k``, ``M_k``.
    kyy, cnt : ndarray of shape (K,)
        Per-fold ``Σ k_Y(y_i, y_i)`` and row counts.
    n : int
    lams : sequence of float
    ranks : tuple of int
        Empty: full rank only.
    keep_models : bool
        Also return, per fold and λ, ``(P Z, Q_S or None)`` (``g(x) = cᵀ P Z``, ``c`` the
        sketched input row) for decoded scoring.
    band : int or None
        Bandwidth of the reduction (None: ``tuning.fold_band``).
    output_scale : float
        ``a_Y`` of the rounding bound (:func:`output_scale`): ``‖T_Y‖₂ ‖d_i‖ ≤ a_Y
        k_Y(y_i, y_i)^{1/2}`` for every output feature row ``d_i``.
    tuning : Tuning or None
        The fit's ``options.tuning`` (:class:`~distsketch.Tuning`; None: the defaults): the
        fold route (``fold_route``: forced, or None for :func:`fold_route`'s rule), the band
        (``fold_band``) and the threads (``fold_threads``).

    Returns
    -------
    scores : ndarray of shape (K, len(lams) · max(len(ranks), 1))
        Minus the mean surrogate error per fold, λ-major then rank; NaN where the error is
        not resolved above its rounding bound (:func:`resolved`).
    models : list or None

    Notes
    -----
    The rounding bound of a fold's error ``Σ_{i∈k} k_Y(y_i, y_i) − 2 tr(Zᵀ Pᵀ M_kᵀ T_Y) +
    tr(Zᵀ Pᵀ G_k P Z)`` is :func:`fold_error_bound`'s with the same Cauchy–Schwarz steps in
    the model's coefficients ``β = P Z`` (``‖β‖_F ≤ ‖P‖_F ‖Z‖_F``; the spectral norm, up to
    ``r_X^{1/2}`` tighter, would cost an SVD of ``P``): ``y_size = (Σ k_Y(y_i, y_i))^{1/2}``,
    ``cross_scale = a_Y`` (:func:`output_scale`), ``coef_size = ‖Z‖_F (‖P‖_F² tr G_k +
    max Λ)^{1/2}`` (``max Λ`` for the terms evaluated in the eigenbasis of ``H``,
    ``Λ − Ĥ_{−k}`` and ``Zᵀ Λ Z``), ``N = n_k + m_X + m_Y + r_X + r_Y + 8`` and ``coef_terms =
    m_X²`` (the Woodbury route's dropped Schur complement, :func:`fold_factor`: ``tr S ≤
    m_X² u tr G_k``). Every rank's model ``Z Q_p`` has ``‖Z Q_p‖_F ≤ ‖Z‖_F``. Not counted
    (a first-order estimate there, not a worst case): the rounding of the basis changes
    ``Pᵀ G_k P`` and ``Pᵀ M_kᵀ T_Y``, read as a backward perturbation ``ΔP`` of the basis
    (columnwise, relative ``γ_{m_X}``), i.e. of the model ``P Z``, which moves the error by
    ``2 ‖C_k ΔP Z‖ sse^{1/2}`` to first order: in the residual, not in ``‖β‖²``. A worst case
    in ``|P||Z|`` would count the whitening's cancellations and leave no score resolved at
    moderate λ (tests/test_cv.py's grids), where the scores match dense refits to 1e-8.
    """
    tuning = check_tuning(tuning)
    K = len(Gf)
    per = max(len(ranks), 1)
    scores = np.full((K, len(lams) * per), np.nan)
    width = tuning.fold_band if band is None else int(band)
    m, r = P.shape
    routes = [fold_route(int(cnt[k]), m=m, r=r, r_y=operator.shape[1], n_lams=len(lams),
                         tuning=tuning) for k in range(K)]
    done = [None] * K
    with ThreadPoolExecutor(_fold_threads(K, tuning.fold_threads)) as pool:
        wood = [k for k in range(K) if routes[k] == "woodbury"]
        if wood:
            for k, out in _woodbury_folds(pool, wood, Gf, Mf, kyy, cnt, P=P, evals=evals,
                                          operator=operator, T_Y=T_Y, n=n, lams=lams,
                                          ranks=ranks, keep_model=keep_models).items():
                done[k] = out
        band_folds = [k for k in range(K) if done[k] is None]
        logger.debug("cv folds: %s by the Woodbury route, %s by the band route",
                     [k for k in range(K) if done[k] is not None], band_folds)
        if band_folds:
            # Ĥ_k in the eigenbasis of H; with every fold here, the last fold's from
            # Σ_k Ĥ_k = Λ
            last = band_folds[-1] if len(band_folds) == K else None
            fold_H = dict(zip([k for k in band_folds if k != last],
                              pool.map(partial(_congruence, P),
                                       [Gf[k] for k in band_folds if k != last])))
            if last is not None:
                fold_H[last] = np.diag(evals) - ordered_sum(
                    np.asarray([fold_H[k] for k in band_folds if k != last]))
            work = partial(_fold_scores, P=P, evals=evals, operator=operator, T_Y=T_Y, n=n,
                           lams=lams, ranks=ranks, keep_model=keep_models, band=width)
            for k, out in zip(band_folds, pool.map(work, [fold_H[k] for k in band_folds],
                                                   Mf[band_folds], kyy[band_folds],
                                                   cnt[band_folds])):
                done[k] = out
    p_norm2 = float(np.einsum("ij,ij->", P, P))  # ‖P‖_F² ≥ ‖P‖₂²: O(m r), an SVD is not
    top = float(np.max(evals, initial=0.0))
    for k, (row, _, znorms) in enumerate(done):
        n_terms = cnt[k] + m + T_Y.shape[0] + r + operator.shape[1] + 8
        coef = np.asarray(znorms) * np.sqrt(p_norm2 * max(float(np.trace(Gf[k])), 0.0) + top)
        bound = np.repeat(fold_error_bound(n_terms, np.sqrt(max(kyy[k], 0.0)), coef,
                                           cross_scale=output_scale, coef_terms=m * m), per)
        sse = -np.asarray(row) * cnt[k]
        ok = resolved(sse, bound)
        if not ok.all():
            logger.debug("cv fold %d: surrogate errors %s not resolved above their rounding "
                         "bounds %s", k, sse[~ok], bound[~ok])
        scores[k] = np.where(ok, row, np.nan)
    return scores, ([m for _, m, _ in done] if keep_models else None)


def _fold_threads(K: int, threads: int | None = None) -> int:
    """Threads for the folds' driver work: ``threads`` (``Tuning.fold_threads``), else one per
    core this process may use (at most ``K``)."""
    import os

    if threads is not None:
        return max(1, min(K, int(threads)))
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    return max(1, min(K, cores))


def _fold_scores(H_k, M_k, kyy_k, cnt_k, *, P, evals, operator, T_Y, n, lams, ranks,
                 keep_model, band):
    """One fold of :func:`sisokr_fold_scores`: its row of scores, with ``keep_model`` its
    decoding models (else None), and ``‖Z‖_F`` per λ (:func:`fold_error_bound`)."""
    from ..linalg.shifted import BandReduction, EigenShifted

    per = max(len(ranks), 1)
    row = np.full(len(lams) * per, np.nan)
    n_tr = n - cnt_k
    H_tr = np.diag(evals) - H_k  # the last fold's: the others' sum
    R_val = P.T @ (M_k.T @ T_Y)  # (r_X, r_Y)
    R_tr = operator - R_val
    r_y = R_tr.shape[1]
    fac = BandReduction(H_tr, band=band)
    rhs = fac.qt_dot(np.hstack([R_tr, R_val]))
    Ys = [fac.solve(rhs[:, :r_y], n_tr * lam) for lam in lams]
    if any(Y is None for Y in Ys):
        fac = EigenShifted(H_tr)
        rhs = fac.qt_dot(np.hstack([R_tr, R_val]))
        Ys = [fac.solve(rhs[:, :r_y], n_tr * lam) for lam in lams]
    A_val = rhs[:, r_y:]
    cols, crosses, mus, Qs = [], [], [], []
    for Y in Ys:
        S = Y.T @ fac.band_dot(Y)
        S = 0.5 * (S + S.T)
        AW = A_val.T @ Y
        if ranks:
            mu, Q = np.linalg.eigh(S)
            mu, Q = mu[::-1], Q[:, ::-1]
            crosses.append(np.cumsum(np.einsum("ij,ij->j", Q, AW @ Q)))
            mus.append(mu)
            cols.append(Y @ Q)
            Qs.append(Q)
        else:
            crosses.append(np.trace(AW))
            mus.append(np.trace(S))
            cols.append(Y)
            Qs.append(None)
    Z = fac.q_dot(np.hstack(cols))  # every λ's Z Q_S at once, in the eigenbasis of H
    lam_quad = np.einsum("i,ij->j", evals, Z * Z).reshape(len(lams), r_y)
    for j in range(len(lams)):
        if ranks:
            quad = np.cumsum(lam_quad[j] - mus[j])
            for i, p in enumerate(ranks):
                q = min(p, len(quad)) - 1
                row[j * per + i] = -(kyy_k - 2.0 * crosses[j][q] + quad[q]) / cnt_k
        else:
            row[j] = -(kyy_k - 2.0 * crosses[j] + lam_quad[j].sum() - mus[j]) / cnt_k
    model = [[P @ fac.q_dot(Y), Q] for Y, Q in zip(Ys, Qs)] if keep_model else None
    return row, model, [float(np.linalg.norm(Y)) for Y in Ys]  # ‖Z‖_F = ‖Q Y‖_F = ‖Y‖_F


def fold_route(n_k: int, *, m: int, r: int, r_y: int, n_lams: int, tuning=None) -> str:
    """The cheaper route of one fold's algebra in :func:`sisokr_fold_scores`, by flops.

    ``"band"`` (congruence ``Pᵀ G_k P``, band reduction of ``Ĥ_{−k}``, ``Q`` on every λ's
    columns)::

        2 m² r + (5/4) m r² + (4/3) r³ + 2 r² r_Y (len(lams) + 2)

    weighted by :data:`BAND_RATE_WEIGHT` (its measured rate relative to the other), against
    ``"woodbury"`` (pivoted Cholesky of ``G_k`` stopped at rank ``k ≤ min(n_k, m)``,
    ``U = Pᵀ L``, then per λ a symmetric rank-k product, a ``k × k`` Cholesky factorisation
    and the products with the ``r_Y`` right-hand sides)::

        m² k − m k² + k³/3 + 2 m r k + 2 m r r_Y
        + len(lams) · (r k² + k³/3 + 4 r k r_Y + 2 k² r_Y + 3 r r_Y²)

    ``tuning.fold_route`` forces one.

    Parameters
    ----------
    n_k : int
        The fold's rows (the rank bound of ``G_k``).
    m, r, r_y : int
        ``m_X``, ``r_X``, ``r_Y``.
    n_lams : int
    tuning : Tuning or None
        The fit's ``options.tuning`` (None: the defaults); its ``fold_route``, when not None,
        is the answer (a value other than ``"band"`` or ``"woodbury"`` is refused naming
        ``options.tuning.fold_route``).
    """
    forced = check_tuning(tuning).fold_route
    if forced is not None:
        return forced
    m, r, r_y, L = float(m), float(r), float(r_y), float(n_lams)
    k = float(min(n_k, m))
    band = 2 * m * m * r + 1.25 * m * r * r + 4 * r ** 3 / 3 + 2 * r * r * r_y * (L + 2)
    wood = (m * m * k - m * k * k + k ** 3 / 3 + 2 * m * r * k + 2 * m * r * r_y
            + L * (r * k * k + k ** 3 / 3 + 4 * r * k * r_y + 2 * k * k * r_y + 3 * r * r_y * r_y))
    return "woodbury" if wood < BAND_RATE_WEIGHT * band else "band"


def fold_factor(G_k: np.ndarray, P: np.ndarray) -> np.ndarray:
    """``U`` (r_X × k) with ``U Uᵀ = Pᵀ G_k P`` to the rounding of ``G_k``: ``G_k = L Lᵀ`` by a
    pivoted Cholesky factorisation (LAPACK ``pstrf``) stopped at its default tolerance
    (``m·ε·max diag G_k``), ``U = Pᵀ L``; ``k`` (the numerical rank) ≤ the fold's rows.

    What is dropped is the Schur complement ``S`` of the kept pivots, ``G_k − L Lᵀ =
    Πᵀ diag(0, S) Π`` with ``‖S‖₂ ≤ tr S ≤ (m − k)·m·ε·max diag G_k`` (every remaining pivot
    below the tolerance, ``S`` positive semi-definite), the order of the rounding already in
    the pass sum ``G_k`` (a sum of ``n_k`` outer products).

    Parameters
    ----------
    G_k : ndarray of shape (m, m)
        Symmetric positive semi-definite.
    P : ndarray of shape (m, r)

    Returns
    -------
    ndarray of shape (r, k)
    """
    from scipy.linalg.lapack import dpstrf

    G = np.array(G_k, dtype=np.float64, order="F")
    m = G.shape[0]
    if m == 0 or not G.diagonal().max(initial=0.0) > 0.0:
        return np.zeros((P.shape[1], 0))
    c, piv, rank, info = dpstrf(G, lower=1, overwrite_a=1)
    if info < 0:  # pragma: no cover - invalid arguments only
        raise ValueError(f"fold factor: LAPACK pstrf info {info}")
    if rank == 0:  # pragma: no cover - a positive diagonal gives a first pivot
        return np.zeros((P.shape[1], 0))
    piv = np.asarray(piv[:m], dtype=np.intp) - 1  # 1-based: row i of L is G's row piv[i]
    return _pivoted_product(P, piv, c, rank)


def _pivoted_product(P: np.ndarray, piv: np.ndarray, c: np.ndarray, k: int) -> np.ndarray:
    """``P[piv]ᵀ L`` for the lower trapezoidal ``L = tril(c[:, :k])`` (m × k): its first ``k``
    rows are lower triangular, so ``P[piv[:k]]ᵀ L_1`` is a triangular product (BLAS ``trmm``,
    ``r k²`` flops where the full product takes ``2 r k²``), plus ``P[piv[k:]]ᵀ L_2`` (GEMM,
    ``2 r (m − k) k``). Bibtex's folds (m = 2250, r = 2247, k = 972): 7.7 GFLOP instead of
    9.8."""
    from scipy.linalg.blas import dtrmm

    # Pᵀ in Fortran order (the transpose of a C-ordered row selection): trmm works in place
    U = dtrmm(1.0, np.asfortranarray(c[:k, :k]), P[piv[:k]].T, side=1, lower=1,
              overwrite_b=1)
    if k < len(piv):
        U += P[piv[k:]].T @ c[k:, :k]  # the rows below the triangle (pstrf leaves them full)
    return U


def _woodbury_prepare(G_k, M_k, *, P, operator, T_Y):
    """The λ-independent part of one fold's Woodbury route: ``(U, R_k, R_{−k})``
    (:func:`fold_factor`; ``R_k = Pᵀ M_kᵀ T_Y``)."""
    U = fold_factor(G_k, P)  # (r, k)
    R_val = P.T @ (M_k.T @ T_Y)  # (r_X, r_Y)
    return U, R_val, operator - R_val


def _woodbury_lam(prep, kyy_k, cnt_k, lam, *, P, evals, n, ranks, keep_model):
    """One (fold, λ) of :func:`sisokr_fold_scores` by the Woodbury identity: its scores (one
    per rank), with ``keep_model`` ``[P Z, Q_S]`` (else None), and ``‖Z‖_F``; None where the
    inner factor is not numerically positive definite or is conditioned worse than exact
    arithmetic allows (the fold then takes the band route).

    With ``Ĥ_k = U Uᵀ`` (:func:`fold_factor`), ``c = n_{−k} λ``, ``D = (Λ + c)^{-1}`` and
    ``F = I − Uᵀ D U``::

        Z = (Λ + c − U Uᵀ)^{-1} R_{−k} = D R_{−k} + D U t,   t = F^{-1} Uᵀ D R_{−k} = Uᵀ Z

    (from ``(Λ + c) Z − U (Uᵀ Z) = R_{−k}``), so ``W Ĥ_k Wᵀ = tᵀ t`` and
    ``S = W Ĥ_{−k} Wᵀ = Zᵀ Λ Z − tᵀ t``. The nonzero spectrum of ``I − F`` is that of
    ``D^{1/2} U Uᵀ D^{1/2}``, and ``I − D^{1/2} U Uᵀ D^{1/2} = D^{1/2}(Ĥ_{−k} + c)D^{1/2} ⪰
    c/(max Λ + c)``, so ``cond₂ F ≤ (max Λ + c)/c``, the direct system's own bound; LAPACK's
    estimate (``pocon``: 1-norm, a lower bound of ``‖F^{-1}‖₁``, ``cond₁ ≤ k·cond₂``) beyond
    ``k (max Λ + c)/c`` means rounding has broken that bound.
    """
    from scipy.linalg.lapack import dpocon, dpotrf, dpotrs

    U, R_val, R_tr = prep
    k = U.shape[1]
    c = (n - cnt_k) * float(lam)
    d = 1.0 / (evals + c)
    Z = d[:, None] * R_tr
    if k:
        sd = np.sqrt(d)
        X = sd[:, None] * U  # D^{1/2} U
        F = X.T @ X  # symmetric (numpy's product of a matrix with its transpose: syrk)
        F *= -1.0
        F.flat[:: k + 1] += 1.0  # I − Uᵀ D U
        norm1 = np.abs(F).sum(axis=0).max()
        Lf, info = dpotrf(F.T, lower=1, clean=0, overwrite_a=1)  # F.T: Fortran order
        if info != 0:
            logger.debug("cv fold (n_k = %d), λ = %g: I − UᵀDU not positive definite, band "
                         "route", cnt_k, lam)
            return None
        rcond, info = dpocon(Lf, norm1, uplo="L")
        top = float(evals.max(initial=0.0))
        if info != 0 or not rcond * k * (top + c) >= c:
            logger.debug("cv fold (n_k = %d), λ = %g: rcond %.3g below the bound, band route",
                         cnt_k, lam, rcond)
            return None
        t, info = dpotrs(Lf, X.T @ (sd[:, None] * R_tr), lower=1)  # F^{-1} Uᵀ D R_{−k}
        if info != 0:  # pragma: no cover - the factor exists
            return None
        Z += sd[:, None] * (X @ t)
    else:
        t = np.zeros((0, R_tr.shape[1]))
    Ze = np.sqrt(evals)[:, None] * Z  # Λ^{1/2} Z: Zᵀ Λ Z as a symmetric product (syrk)
    S = Ze.T @ Ze - t.T @ t
    S = 0.5 * (S + S.T)
    AW = R_val.T @ Z  # W A_kᵀ
    if ranks:
        _, Q = np.linalg.eigh(S)
        Q = Q[:, ::-1]
        cross = np.cumsum(np.einsum("ij,ij->j", Q, AW @ Q))
        tq = t @ Q
        quad = np.cumsum(np.einsum("ij,ij->j", tq, tq))  # diagonal of Qᵀ (W Ĥ_k Wᵀ) Q
        row = [-(kyy_k - 2.0 * cross[min(p, len(quad)) - 1] + quad[min(p, len(quad)) - 1])
               / cnt_k for p in ranks]
    else:
        Q = None
        row = [-(kyy_k - 2.0 * np.trace(AW) + np.einsum("ij,ij->", t, t)) / cnt_k]
    return np.array(row), ([P @ Z, Q] if keep_model else None), float(np.linalg.norm(Z))


def _woodbury_folds(pool, folds, Gf, Mf, kyy, cnt, *, P, evals, operator, T_Y, n, lams, ranks,
                    keep_model) -> dict:
    """The folds ``folds`` by the Woodbury route: ``{k: (row, models, ‖Z‖_F per λ) or
    None}`` (None: the
    fold takes the band route). Tasks per fold (the factor), then per (fold, λ), so two
    threads share 5 folds × 10 λ evenly; each task is computed the same way on any thread.

    No barrier between the two kinds: the factors are queued first, then the (fold, λ) tasks
    fold by fold, each waiting for its fold's factor, so a thread that is done with the
    factors starts on the pairs while the other finishes the last factor (5 factors on two
    threads left one idle for a factor's time). The pool's queue is first in, first out:
    every factor has left the queue before any pair task runs, so a pair task waits only on a
    factor that is running or done (never on one queued behind it: no deadlock)."""
    prep = partial(_woodbury_prepare, P=P, operator=operator, T_Y=T_Y)
    preps = [pool.submit(prep, Gf[k], Mf[k]) for k in folds]
    pairs = [(i, lam) for i in range(len(folds)) for lam in lams]
    work = partial(_woodbury_lam, P=P, evals=evals, n=n, ranks=ranks, keep_model=keep_model)

    def pair(i, lam):
        return work(preps[i].result(), kyy[folds[i]], cnt[folds[i]], lam)

    outs = list(pool.map(pair, [i for i, _ in pairs], [lam for _, lam in pairs]))
    done = {}
    for i, k in enumerate(folds):
        mine = outs[i * len(lams):(i + 1) * len(lams)]
        if any(o is None for o in mine):
            done[k] = None
            continue
        done[k] = (np.concatenate([row for row, _, _ in mine]),
                   [model for _, model, _ in mine] if keep_model else None,
                   [norm for _, _, norm in mine])
    return done
