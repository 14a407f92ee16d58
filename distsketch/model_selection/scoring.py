"""How a CV grid's points are scored and chosen: rounding bounds, ``"auto"``, ``cv_results_``.

A fold score computed from the pass's sums by the trace form ``Σ‖y‖² − 2⟨β, b_k⟩ + ⟨β, G_k β⟩``
cancels: where the coefficients are large (small λ, wide kernels, float32 blocks) its three
terms can exceed the error by many orders of magnitude and their float64 rounding can exceed
the error itself, down to a negative squared error. Every fold score comes with a rounding
error bound computed from the same sums (:func:`fold_error_bound`, :func:`krr_fold_error`); a
score whose bound is above :data:`SCORE_RTOL` times it is NaN in ``cv_results_``
(:func:`resolved`), its point ranked last, named in a :class:`UserWarning` and never selected
(with every point unresolved, an :class:`UnresolvedScoresError` says what to change;
:func:`set_best`). :func:`auto_scoring` resolves SISOKRCV's ``scoring="auto"``.
"""

from __future__ import annotations

import warnings

import numpy as np

from ..tuning import check_tuning
from .grid import grid_edges, warn_edges

__all__ = ["SCORE_RTOL", "UnresolvedScoresError", "fold_error_bound", "krr_fold_error", "resolved",
           "is_binary", "auto_scoring", "set_best"]


# Largest ratio of a fold score's rounding error bound to the fold's squared error at which
# the score is used (fold_error_bound): above, the score is NaN and its point never selected.
# 1/2 keeps the true error of every used score within a factor [1/2, 3/2] of the reported one
# whatever the rounding, so no rounding can turn a bad point into the apparent best by more
# than a factor 3 (and no score is ever positive); the bound is a worst case, the rounding
# actually met on rf1's folds is about 10⁴ times below it.
SCORE_RTOL = 0.5


class UnresolvedScoresError(ValueError):
    """No point of a CV grid has a fold score resolved above its rounding error bound
    (``distsketch.model_selection.scoring.resolved``)."""


def fold_error_bound(n_terms, y_size, coef_size, *, cross_scale=1.0, coef_terms=0):
    """Worst-case rounding error of a fold's squared validation error computed from the pass's
    float64 sums (the trace form ``Σ‖y‖² − 2⟨β, b_k⟩ + ⟨β, G_k β⟩``).

    The exact fold error of the coefficients ``β`` the fold computed is
    ``Σ_{i∈k} ‖y_i − βᵀc_i‖²``. Its three terms are sums of products each of whose
    magnitude is bounded by the matching term of ``(‖y‖ + ‖β‖·(Σ‖c_i‖²)^{1/2})²`` (Cauchy–
    Schwarz: ``Σ_i |β|ᵀ|c_i||y_i| ≤ ‖β‖ (Σ‖c_i‖²)^{1/2} ‖y‖`` and ``|β|ᵀ(Σ_i |c_i||c_i|ᵀ)|β|
    ≤ ‖β‖² Σ‖c_i‖²``, which also bounds ``|β|ᵀ|G_k||β|``). Every float64 rounding on the way
    — the pass's accumulation of ``G_k``, ``b_k``, ``Σy²`` over the fold's ``n_k`` rows (in
    any order: tree, BLAS, blocks; the products of float32 block values are exact in float64),
    then the products and sums of the evaluation over ``m`` features — perturbs a term by at
    most ``γ_N`` times its magnitude (Higham, *Accuracy and Stability of Numerical
    Algorithms*, 2nd ed., §3.1, Lemma 3.1 and eq. 3.5: ``|fl(Σ a_i) − Σ a_i| ≤ γ_{N} Σ|a_i|``,
    ``γ_N = Nu/(1 − Nu)``, ``u = 2^{-53}``), with ``N`` the longest chain of roundings
    (``n_k + m`` plus a few). So, to first order in ``u``,

        |sse_computed − sse_exact| ≤ γ_N (y_size + coef_size)²,

    ``y_size = (Σ_{i∈k} ‖y_i‖²)^{1/2}`` (of the centred targets: ``(Σ (|y_i| + |ȳ|)²)^{1/2}``)
    and ``coef_size = ‖β‖ (tr G_k)^{1/2}`` (``tr G_k = Σ‖c_i‖²``, a sum of non-negative terms,
    accurate to ``γ_{n_k}`` relative). The bound needs nothing beyond the sums: no rows.

    In general (:func:`~distsketch.model_selection.fold_algebra.sisokr_fold_scores`) the cross
    term's magnitude carries a factor
    ``cross_scale ≥ 1`` and the quadratic term ``coef_terms`` more roundings::

        γ_N (y_size² + 2 cross_scale y_size coef_size) + γ_{N + coef_terms} coef_size².

    Parameters
    ----------
    n_terms : float
        ``N``, the longest chain of roundings.
    y_size, coef_size : float or ndarray
        Per target (broadcast).
    cross_scale : float
    coef_terms : float

    Returns
    -------
    float or ndarray
        The bound (same shape as the broadcast arguments).
    """
    def gamma(N):
        u = np.finfo(np.float64).eps / 2
        return N * u / (1.0 - N * u)

    y = np.asarray(y_size, dtype=np.float64)
    c = np.asarray(coef_size, dtype=np.float64)
    a = max(1.0, float(cross_scale))
    return gamma(n_terms) * (y * y + 2.0 * a * y * c) + gamma(n_terms + coef_terms) * c * c


def krr_fold_error(beta, G_k, b_k, yy_k, *, y_size, n_rows):
    """Squared validation error of coefficients ``β`` on fold ``k``, from its sums, per target,
    and its rounding error bound (:func:`fold_error_bound`)::

        sse_t = Σ_{i∈k} (y_it − β_tᵀ c_i)² = (Σ_k y²)_t − 2 β_tᵀ b_k,t + β_tᵀ G_k β_t

    Parameters
    ----------
    beta : ndarray of shape (m, t)
    G_k : ndarray of shape (m, m)
        ``Σ_{i∈k} c_i c_iᵀ``.
    b_k : ndarray of shape (m, t)
        ``Σ_{i∈k} c_i y_iᵀ`` (of the centred targets with an intercept).
    yy_k : ndarray of shape (t,)
        ``Σ_{i∈k} y_i²`` (idem).
    y_size : ndarray of shape (t,)
        ``(Σ_{i∈k} y_i²)^{1/2}``, or its bound for centred targets.
    n_rows : float
        ``n_k``.

    Returns
    -------
    sse, bound : ndarray of shape (t,)
    """
    sse = yy_k - 2.0 * np.einsum("ij,ij->j", beta, b_k) + np.einsum("ij,ij->j", beta, G_k @ beta)
    trace_g = max(float(np.trace(G_k)), 0.0)
    bound = fold_error_bound(n_rows + len(G_k) + 8, y_size,
                             np.sqrt(np.einsum("ij,ij->j", beta, beta) * trace_g))
    return sse, bound


def resolved(sse, bound):
    """Where a fold's squared error ``sse`` is resolved: positive and its error bound at most
    :data:`SCORE_RTOL` times it (elementwise)."""
    sse = np.asarray(sse, dtype=np.float64)
    return (sse > 0) & (np.asarray(bound) <= SCORE_RTOL * sse)


def is_binary(rows) -> bool:
    """Whether every entry of ``rows`` (dense or scipy.sparse) is 0 or 1."""
    data = rows.data if hasattr(rows, "tocsr") else np.asarray(rows)
    return bool(np.all((data == 0) | (data == 1)))


def auto_scoring(*, binary: bool, n: int, n_unique: int, settings: int, m_y: int,
                 budget: float | None = None) -> tuple[str, str | None]:
    """The scoring of ``scoring="auto"`` and, where it is the surrogate, the warning to give.

    Rule: the folds are decoded (every row against the ``n_unique`` unique training outputs,
    at every one of the ``settings`` grid points, each candidate score an inner product of
    ``r_Y ≤ m_y``) when that costs at most ``budget`` multiply-adds (None: the default
    ``Tuning.auto_decode_budget``), ``n · n_unique · settings · m_y ≤ budget``, and scored by
    the task's metric: ``"f1_samples"`` for binary outputs (multi-label sets), else
    ``"kernel_loss"`` (the decoded output's distance to the true one in the output kernel's
    space). Above the budget: ``"surrogate"`` (the sums alone), with a warning that the
    surrogate error and the decoded metric can choose differently, naming the cost and the
    scoring to pass. The decode also reads the rows once more after the pass.

    Returns
    -------
    scoring : str
    warning : str or None
    """
    budget = check_tuning(None).auto_decode_budget if budget is None else float(budget)
    cost = float(n) * float(n_unique) * float(settings) * float(m_y)
    task = "f1_samples" if binary else "kernel_loss"
    if cost <= budget:
        return task, None
    return "surrogate", (
        f"scoring='auto': decoding the folds would cost {cost:.2g} multiply-adds ({n} rows × "
        f"{n_unique} unique training outputs × {settings} grid points × m_Y = {m_y}), above "
        f"options.tuning.auto_decode_budget = {budget:.2g}; scored by the surrogate error "
        f"instead, which can choose another λ (rank, γ) than the task's metric does (on "
        f"multi-label sets it has chosen λ 10–100× too large); pass scoring={task!r} to decode "
        f"anyway, or a smaller grid")


def _cv_results(params: list[dict], scores: np.ndarray) -> dict:
    """scikit-learn's ``cv_results_`` layout from per-fold scores (K, n_params).

    A point with an unresolved fold score (NaN, :func:`resolved`) has a NaN mean and
    std and the worst rank, shared by every such point (scikit-learn's convention); the
    resolved points are ranked among themselves as before (ties by grid order)."""
    mean = scores.mean(axis=0)
    finite = np.isfinite(mean)
    order = np.argsort(-mean, kind="stable")  # NaN last
    rank = np.empty(len(params), dtype=np.int64)
    rank[order] = np.arange(1, len(params) + 1)
    rank[~finite] = int(finite.sum()) + 1
    out = {f"param_{k}": (np.array([p[k] for p in params]) if k in ("lam", "gamma")
                          else [p[k] for p in params]) for k in params[0]}
    out.update(params=[dict(p) for p in params],
               **{f"split{k}_test_score": scores[k] for k in range(len(scores))},
               mean_test_score=mean, std_test_score=scores.std(axis=0), rank_test_score=rank)
    return out


def _describe_point(p: dict) -> str:
    return "(" + ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"
                           for k, v in p.items()) + ")"


def set_best(est, scores: np.ndarray, params: list[dict], best_index: int | None = None):
    """``cv_results_``, ``best_index_``, ``best_params_``, ``best_score_``, ``n_splits_``.

    The best point is the best resolved mean (a NaN mean is never selected). On a fit
    (``best_index`` None), a :class:`UserWarning` names the unresolved points; with every
    point unresolved, an :class:`UnresolvedScoresError` (``cv_results_`` is set before it is
    raised)."""
    est.cv_results_ = _cv_results(params, scores)
    est.n_splits_ = len(scores)
    mean = est.cv_results_["mean_test_score"]
    if best_index is None:
        bad = [i for i in range(len(params)) if not np.isfinite(mean[i])]
        if len(bad) == len(params):
            raise UnresolvedScoresError(
                f"cv: no point of the grid {[_describe_point(p) for p in params]} has a fold "
                f"score resolved above its rounding error bound (the fitted coefficients are "
                f"too large for the fold sums' float64 precision: "
                f"distsketch.model_selection.scoring.SCORE_RTOL); "
                f"use larger λ (lams), narrower kernel widths, or "
                f"EngineOptions(block_dtype='float64')")
        if bad:
            warnings.warn(
                f"cv: {len(bad)} of {len(params)} points have a fold score not resolved above "
                f"its rounding error bound (large coefficients: small λ, wide kernel); they "
                f"are NaN in cv_results_ and never selected: "
                f"{', '.join(_describe_point(params[i]) for i in bad)}", UserWarning,
                stacklevel=4)
        best_index = int(np.nanargmax(mean))
        fit = True
    else:
        fit = False
    est.best_index_ = int(best_index)
    est.best_params_ = dict(params[est.best_index_])
    est.best_score_ = float(mean[est.best_index_])
    if fit:  # a selection at an edge of its grid says so (GridEdgeWarning)
        grids = {key: (name, [p.get(key) for p in params])
                 for key, name in (("lam", "lams"), ("gamma", "gammas"), ("rank", "ranks"))}
        op = getattr(est, "operator_", None)
        warn_edges(grid_edges(est.best_params_, grids, prefix=type(est).__name__,
                              full_rank=None if op is None else int(op.shape[1])),
                   stacklevel=3)
