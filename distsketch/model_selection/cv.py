"""Cross-validation from one pass: :class:`SketchedKRRCV`, :class:`SISOKRCV` (scikit-learn's
``RidgeCV`` habit).

The pass computes, besides ``B = R K Rᵀ``, the sums of every fold ``k`` separately (sum names
``"G@K"``, ``"b@K"``, … of :func:`distsketch.accumulate.sum_term`)::

    G_k = Σ_{i∈k} c_i c_iᵀ,   b_k = Σ_{i∈k} c_i y_iᵀ,   (yy)_k = Σ_{i∈k} y_i²,   (y1)_k = Σ_{i∈k} y_i

so a fold's training sums are the totals minus its own (``G − G_k``, ``b − b_k``) and, with the
realised sketch fixed (its feature map ``φ = Tᵀ R k(X, ·)`` drawn once from all rows), the
model trained without fold ``k`` is, for every λ,

    β_k(λ) = T V_k (Λ_k + n_{−k} λ)^{-1} V_kᵀ Tᵀ (b − b_k),    Tᵀ (G − G_k) T = V_k Λ_k V_kᵀ

(one ``r × r`` eigendecomposition per fold), and its squared error on the fold needs no data:

    Σ_{i∈k} ‖y_i − β_kᵀ c_i‖² = Σ (yy)_k − 2 ⟨β_k, b_k⟩ + ⟨β_k, G_k β_k⟩.

K folds × every λ therefore cost one pass plus ``K`` eigendecompositions of ``r × r``; the model
refitted on all rows at the best λ uses the summed folds (``G = Σ_k G_k``).

That trace form cancels: where the coefficients are large (small λ, wide kernels, float32
blocks) its three terms can exceed the error by many orders of magnitude and their float64
rounding can exceed the error itself, down to a negative squared error. Every fold score comes
with a rounding error bound computed from the same sums (:func:`fold_error_bound`); a score
whose bound is above :data:`SCORE_RTOL` times it is NaN in ``cv_results_``, its point ranked
last, named in a :class:`UserWarning` and never selected (with every point unresolved, an
:class:`UnresolvedScoresError` says what to change).
"""

from __future__ import annotations

import dataclasses
import logging
import numbers
import warnings
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from itertools import pairwise

import numpy as np

from .._base import check_lam
from ..engine.accumulate import fold_ids
from ..models.base import FitSpec, SketchedEstimator
from ..kernels.base import Linear
from ..models.ridge import SISOKR, KRRClosedForm, SketchedKRR, centre_targets
from ..linalg.solve import check_rank, input_basis, solve_krr, whitening
from ..tuning import check_tuning

__all__ = ["SketchedKRRCV", "SISOKRCV", "UnresolvedScoresError", "GridEdgeWarning",
           "fold_error_bound", "grid_edges"]

logger = logging.getLogger(__name__)

SCORINGS = ("neg_mean_squared_error", "r2")
DECODED_SCORINGS = ("auto", "surrogate", "f1_samples", "kernel_loss", "topk_accuracy")
# scoring="auto" of SISOKRCV (auto_scoring): the largest decode cost at which the folds are
# decoded is EngineOptions.tuning.auto_decode_budget (distsketch.Tuning, with its measurement).
# The fold route, band and threads and the driver's budget for the per-fold sums are fields of
# EngineOptions.tuning (distsketch.Tuning: fold_route, fold_band, fold_threads, max_fold_bytes,
# each with its measured basis); docs/design.md, "Cross-validation from one pass", has the two
# routes.
# fold_route's weight on the band route's flops: the Woodbury route's flop rate over the band
# route's, from the process CPU seconds of the fold algebra on Bibtex's sums (m_X = 2250,
# r_X = 2247, n_k = 976, r_Y = 200, 10 λ, one BLAS thread; benchmarks/bench_cv.py's "fold
# algebra alone", two runs): 8.9–9.4 s for the Woodbury route's 318 GFLOP (about 35 GFLOP/s:
# SYRK, GEMM) against 14.3–15.1 s for the band route's 353 (about 24 GFLOP/s: the
# reduction's panels, Q's reflectors), a ratio of 1.4–1.5.
BAND_RATE_WEIGHT = 1.4


# Largest ratio of a fold score's rounding error bound to the fold's squared error at which
# the score is used (fold_error_bound): above, the score is NaN and its point never selected.
# 1/2 keeps the true error of every used score within a factor [1/2, 3/2] of the reported one
# whatever the rounding, so no rounding can turn a bad point into the apparent best by more
# than a factor 3 (and no score is ever positive); the bound is a worst case, the rounding
# actually met on rf1's folds is about 10⁴ times below it.
SCORE_RTOL = 0.5


class UnresolvedScoresError(ValueError):
    """No point of a CV grid has a fold score resolved above its rounding error bound
    (:func:`resolved`)."""


class GridEdgeWarning(UserWarning):
    """A selected value (λ, a kernel width γ, a rank) is the smallest or largest of its grid:
    the best value may lie beyond the grid (:func:`grid_edges`)."""


def _fmt(v) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def grid_edges(best: dict, grids: dict, *, full_rank: int | None = None,
               prefix: str = "cv") -> list[str]:
    """Messages for the selected values that lie at an edge of their grid.

    Parameters
    ----------
    best : dict
        The selected point, ``{"lam": …, "gamma": …, "rank": …}`` (absent or None: not
        searched).
    grids : dict
        ``{key: (argument name, values)}``: each searched parameter's grid (as given: only its
        distinct values count; a grid of one value is no search and never at an edge).
    full_rank : int, optional
        ``r_Y``: a rank at least this is the full model, the largest a rank can be (no edge).
    prefix : str
        Start of each message.

    Returns
    -------
    list of str
        One message per parameter at an edge: the parameter, its edge value, the grid's range
        and the fix (extend the grid beyond the edge, with two suggested values: λ and γ by
        factors of 10, a rank by halving or doubling).

    Notes
    -----
    An edge is the smallest or the largest value of a numeric grid. The kernel itself (a
    category) has no edge. Where the selected value is at an edge the score was still
    improving towards it (or flat): a value beyond the grid may be better, and a search that
    cannot see past its grid cannot say so otherwise.
    """
    out = []
    for key, (name, values) in grids.items():
        v = best.get(key)
        vals = sorted({float(x) if key != "rank" else int(x) for x in values
                       if x is not None}) if values is not None else []
        if v is None or len(vals) < 2:
            continue
        lo, hi = vals[0], vals[-1]
        if v != lo and v != hi:
            continue
        symbol = {"lam": "λ", "gamma": "γ"}.get(key, key)
        if key == "rank":
            if v == hi and full_rank is not None and v >= full_rank:
                continue
            nxt = [max(1, v // 2), max(1, v // 4)] if v == lo else [v * 2, v * 4]
            if v == lo and v == 1:
                continue  # the smallest rank there is
        else:
            nxt = [v / 10, v / 100] if v == lo else [v * 10, v * 100]
        side = "smallest" if v == lo else "largest"
        where = "below" if v == lo else "above"
        out.append(f"{prefix}: the selected {symbol} = {_fmt(v)} is the {side} value of {name} "
                   f"({_fmt(lo)} … {_fmt(hi)}); the best {symbol} may lie {where} the grid: "
                   f"extend {name} {where} {_fmt(v)} (e.g. add "
                   f"{', '.join(_fmt(x) for x in nxt)}) and select again")
    return out


def warn_edges(messages, stacklevel: int = 3) -> None:
    """One :class:`GridEdgeWarning` per message of :func:`grid_edges`."""
    for msg in messages:
        warnings.warn(msg, GridEdgeWarning, stacklevel=stacklevel + 1)


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

    In general (:func:`sisokr_fold_scores`) the cross term's magnitude carries a factor
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


def fold_spec(cv, *, argument: str = "cv") -> str:
    """The pass's fold spec (``"K"`` or ``"K:seed"``) of ``cv``: an int ``K ≥ 2`` (contiguous
    folds), or an object with ``n_splits``, ``shuffle`` and ``random_state`` (scikit-learn's
    ``KFold``): shuffled folds are a seeded hash of the row index (the same rows for the same
    seed, whatever the chunking; not the rows ``KFold`` itself would pick), or the spec itself
    as a string, ``"K"`` or ``"K:seed"`` (what :func:`distsketch.select.select` passes: it
    is saved with the model as a plain value)."""
    if isinstance(cv, str):
        from ..engine.accumulate import parse_folds

        try:
            parse_folds(cv)
        except ValueError:
            raise ValueError(f"{argument}: expected a number of folds, a KFold-like splitter or "
                             f"a fold spec 'K' / 'K:seed' (K >= 2), got {cv!r}") from None
        k, sep, seed = cv.partition(":")
        return f"{int(k)}:{int(seed)}" if sep else str(int(k))
    if isinstance(cv, numbers.Integral) and not isinstance(cv, bool):
        if cv < 2:
            raise ValueError(f"{argument}: the number of folds must be at least 2, got {cv!r}")
        return str(int(cv))
    k = getattr(cv, "n_splits", None)
    if isinstance(k, numbers.Integral) and not isinstance(k, bool) and k >= 2 \
            and hasattr(cv, "shuffle"):
        if not cv.shuffle:
            return str(int(k))
        seed = getattr(cv, "random_state", None)
        if not isinstance(seed, numbers.Integral) or isinstance(seed, bool) or seed < 0:
            raise ValueError(f"{argument}: shuffled folds need an integer random_state "
                             f"(KFold(n_splits={k}, shuffle=True, random_state=0)), got "
                             f"{seed!r}")
        return f"{int(k)}:{int(seed)}"
    raise ValueError(f"{argument}: expected a number of folds (int >= 2) or a KFold-like "
                     f"splitter (n_splits, shuffle, random_state), got {cv!r}")


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

    A point with an unresolved fold score (NaN, :func:`resolved_scores`) has a NaN mean and
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


def _set_best(est, scores: np.ndarray, params: list[dict], best_index: int | None = None):
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
                f"too large for the fold sums' float64 precision: distsketch.cv.SCORE_RTOL); "
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


class SketchedKRRCV(SketchedKRR):
    """Sketched kernel ridge regression with λ chosen by K-fold cross-validation, from one pass.

    Every fold and every λ is scored from per-fold sums of the one streaming pass (module
    notes), then the model is refitted on all rows at the best λ from the same sums: the cost of
    one fit plus ``K`` eigendecompositions of ``r × r``. The folds share the sketch, drawn once
    from all rows (its landmarks may lie in a validation fold: the feature map is fixed, only
    the regression is cross-validated).

    Parameters
    ----------
    kernel : kernel, str or callable
    sketch : Sketch
        A sketch, or ``None`` (exact KRR: cross-validated as the all-rows sub-sampling
        ``SubSampling(n)``, whose fold scores are exact KRR's on each fold's rows; the fold
        sums are n × n, at most ``options.tuning.max_fold_bytes``).
    lams : sequence of float
        The λ grid.
    gammas : sequence of float, optional
        A grid of widths ``γ`` of the input kernel (which must have a ``gamma``), scored with
        every λ **in the same pass**: each row block is read once and its blocks
        ``C_I^{(γ)} = k_γ(X_I, X_J) R_mixᵀ`` computed for every γ over the same landmarks and
        sketch, each with its own per-fold sums (the pass's kernel and sums cost × len(γ),
        the reads of the data × 1). The refit uses the best γ (``kernel_``); the grid's first
        width is the one whose blocks a ``store`` keeps. None: the kernel as given.
    kernels : sequence, optional
        Input kernels to try in place of ``kernel`` (scikit-learn's ``GridSearchCV`` with
        ``{"kernel": [...]}``): names (``"linear"``), config mappings (``{"name":
        "polynomial", "degree": 2}``) or kernels (:func:`distsketch.kernel_grid.check_kernels`;
        with a ``store``, names and mappings only). Each is applied inside ``kernel``'s
        standardisation when ``kernel`` is a :class:`~distsketch.kernels.Standardized`;
        ``gammas`` applies to each entry that has a ``gamma`` (the others are tried once).
        Every candidate kernel × width is scored **in the same pass** as a width of
        ``gammas`` is: the same landmarks and sketch (drawn once, with the first candidate
        where the sketch depends on the kernel, e.g. ``LeverageScores``), each row block read
        once and its block ``C_I`` computed per candidate. ``cv_results_`` gains
        ``param_kernel`` (a description of each candidate), ``kernels_`` lists them and
        ``kernel_`` is the chosen one.
    cv : int or KFold-like
        Number of contiguous folds, or a splitter with ``n_splits``, ``shuffle``,
        ``random_state`` (:func:`fold_spec`).
    scoring : {"neg_mean_squared_error", "r2"}
        Validation score, greater is better: minus the mean squared error over rows and
        targets, or R² per target (fold mean as baseline) averaged over targets.
    fit_intercept : bool, default True
        As for :class:`~distsketch.SketchedKRR`: each fold's model centres the targets by its
        own training mean ``ȳ_{−k} = (Σ y − Σ_k y) / n_{−k}`` (right-hand side
        ``b_{−k} − s_{−k} ȳ_{−k}ᵀ``, from per-fold sums ``s_k = R K_k 1``) and predicts
        ``C_k β + ȳ_{−k}`` on its validation rows.
    random_state, store, options
        As for :class:`~distsketch.SketchedKRR`.

    Attributes
    ----------
    cv_results_ : dict
        scikit-learn's layout: ``param_lam`` (and ``param_gamma`` with a width grid),
        ``params``, ``split{k}_test_score``, ``mean_test_score``, ``std_test_score``,
        ``rank_test_score``; with ``gammas``, the rows run over γ (outer) × λ (inner). A fold
        score not resolved above its rounding error bound is NaN (module notes); its point
        has a NaN mean, the worst rank (shared) and is never chosen.
    best_index_, best_params_, best_score_
    n_splits_ : int
    lam_ : float
        The best λ (``set_lam`` switches to any other, at the chosen width).
    kernel_ : Kernel
        The input kernel at the chosen width.
    gammas_ : list of float or None
        The width grid.
    Other attributes as :class:`~distsketch.SketchedKRR`.
    """

    _param_kinds = {"kernel": "kernel", "sketch": "sketch", "lams": "json", "gammas": "json",
                    "kernels": "json", "cv": "json", "scoring": "json", "fit_intercept": "json",
                    "random_state": "random_state", "store": "store", "options": "options"}
    _configurable = True

    def __init__(self, kernel="gaussian", *, sketch=None, lams=(1e-8, 1e-7, 1e-6, 1e-5, 1e-4,
                                                                 1e-3, 1e-2), gammas=None,
                 kernels=None, cv=5, scoring="neg_mean_squared_error", fit_intercept=True,
                 random_state=None, store=None, options=None):
        self.kernel = kernel
        self.sketch = sketch
        self.lams = lams
        self.gammas = gammas
        self.kernels = kernels
        self.cv = cv
        self.scoring = scoring
        self.fit_intercept = fit_intercept
        self.random_state = random_state
        self.store = store
        self.options = options

    def _validate(self, X, Y) -> FitSpec:
        lams = check_lam(self.lams, argument="lams")
        folds = fold_spec(self.cv)
        if self.scoring not in SCORINGS:
            raise ValueError(f"scoring: expected one of {list(SCORINGS)}, got {self.scoring!r}")
        gammas = check_gammas(self.gammas)
        # the kernel's width is the grid's: a kernel without one is refused before any data
        kernels = getattr(self, "kernels", None)
        _json_kernels(kernels, self.store)
        widths, prefixes = candidate_kernels(self.kernel, kernels, gammas, kernel_name="kernel")
        spec = super()._validate(X, Y)
        K = int(folds.partition(":")[0])
        if spec.X.n < 2 * K:
            raise ValueError(f"cv: {K} folds need at least {2 * K} rows, got {spec.X.n}")
        spec = _all_rows_for_exact_sides(spec, K)
        self._folds = folds
        self._widths = widths
        self._prefixes = prefixes
        kernels = spec.kernels if widths is None else {**spec.kernels, "kernel": widths[0]}
        return FitSpec(spec.X, spec.Y, kernels, spec.sketches, spec.options, spec.rng, lams)

    def _x_widths(self, spec: FitSpec) -> tuple:
        return () if self._widths is None else tuple(self._widths[1:])

    def _sums(self, spec: FitSpec) -> tuple[str, ...]:
        f = self._folds
        sums = ("B", f"G@{f}", f"b@{f}", f"yy@{f}", f"y1@{f}", f"count@{f}")
        sums = sums + (f"s@{f}",) if self.fit_intercept else sums
        more = () if self._widths is None else tuple(
            f"{name}~{j}" for j in range(1, len(self._widths)) for name in sums
            if not name.startswith(("yy@", "y1@", "count@")))  # the same for every width
        return sums + more

    def _solve(self, spec: FitSpec, res) -> None:
        lams = spec.lams
        widths = self._widths or [spec.kernels["kernel"]]
        scores = np.concatenate([self._width_scores(spec, res, j) for j in range(len(widths))],
                                axis=1)
        gammas = None if self.gammas is None else [float(g) for g in self.gammas]
        _set_best(self, scores, _krr_params(lams, gammas, self._prefixes))
        best_width, best_lam = divmod(self.best_index_, len(lams))
        # the refit on all rows at the best width, from the same sums (the folds summed)
        G, b, y1, s, B = self._width_sums(res.sums, best_width)
        n = res.n
        intercept = bool(self.fit_intercept)
        self.kernel_ = widths[best_width]
        self.gammas_ = gammas
        self.kernels_ = None if getattr(self, "kernels", None) is None else \
            [p["kernel"] for p in self._prefixes]
        self.sketch_ = res.x_sketch
        self.landmarks_ = res.x_landmarks
        self.input_solution_, rhs = solve_krr({"G": G, "B": B, "b": b}, res.x_sketch,
                                              n=n, rtol=spec.options.eig_rtol,
                                              n_lams=len(lams), tuning=spec.options.tuning)
        self._rhs, self.intercept_ = centre_targets(
            {"b": b, "y1": y1, **({"s": s} if intercept else {})}, rhs, n=n,
            fit_intercept=intercept)
        self.path_ = KRRClosedForm(self.input_solution_, self._rhs, self.sketch_)
        self._y_1d = spec.Y.input_ndim == 1
        self.lams_ = tuple(lams)
        self.lam_ = lams[best_lam]

    def _width_sums(self, sums: dict, j: int):
        """``(G, b, Σy, s or None, B)`` of input width ``j``, the folds summed."""
        f, sfx = self._folds, (f"~{j}" if j else "")
        G = _ordered_sum(np.asarray(sums[f"G@{f}{sfx}"], dtype=np.float64))
        bf = np.asarray(sums[f"b@{f}{sfx}"], dtype=np.float64)
        b = _ordered_sum(bf.reshape(bf.shape[0], bf.shape[1], -1))
        y1f = np.asarray(sums[f"y1@{f}"], dtype=np.float64)
        y1 = _ordered_sum(y1f.reshape(len(y1f), -1))
        s = None
        if self.fit_intercept:
            sf = np.asarray(sums[f"s@{f}{sfx}"], dtype=np.float64)
            s = _ordered_sum(sf.reshape(len(sf), -1))
        return G, b, y1, s, sums[f"B{sfx}"]

    def _width_scores(self, spec: FitSpec, res, j: int) -> np.ndarray:
        """Scores (K, n_λ) of every fold and λ at input width ``j`` (module notes)."""
        f, sfx = self._folds, (f"~{j}" if j else "")
        sums = res.sums
        Gf = np.asarray(sums[f"G@{f}{sfx}"], dtype=np.float64)
        bf = np.asarray(sums[f"b@{f}{sfx}"], dtype=np.float64)
        bf = bf.reshape(bf.shape[0], bf.shape[1], -1)
        yyf = np.asarray(sums[f"yy@{f}"], dtype=np.float64).reshape(len(Gf), -1)
        y1f = np.asarray(sums[f"y1@{f}"], dtype=np.float64).reshape(len(Gf), -1)
        cnt = np.asarray(sums[f"count@{f}"], dtype=np.float64).reshape(-1)
        n = res.n
        G, b, y1, s, B = self._width_sums(sums, j)
        intercept = bool(self.fit_intercept)
        if intercept:
            sf = np.asarray(sums[f"s@{f}{sfx}"], dtype=np.float64).reshape(len(Gf), -1)
        lams = spec.lams
        T = whitening(B, rtol=spec.options.eig_rtol, argument="kernel")
        K = len(Gf)
        scores = np.full((K, len(lams)), np.nan)
        for k in range(K):
            n_tr, evals, P = _fold_basis(T, G, Gf[k], n, cnt[k], k)
            b_tr, b_val, yy_val = b - bf[k], bf[k], yyf[k]
            if intercept:  # centred by the fold's training mean ȳ (module notes)
                ybar = (y1 - y1f[k]) / n_tr
                b_tr = b_tr - np.outer(s - sf[k], ybar)
                b_val = b_val - np.outer(sf[k], ybar)  # C_kᵀ (Y_k − 1ȳᵀ)
                yy_val = yy_val - 2.0 * ybar * y1f[k] + cnt[k] * ybar * ybar  # Σ_k ‖y − ȳ‖²
                # Σ_k (|y| + |ȳ|)² ≤ 2 (Σ_k y² + n_k ȳ²): the centred targets' magnitude
                y_size = np.sqrt(2.0 * (yyf[k] + cnt[k] * ybar * ybar))
            else:
                y_size = np.sqrt(yyf[k])
            z = P.T @ b_tr
            for i, lam in enumerate(lams):
                beta = P @ (z / (evals + n_tr * lam)[:, None])  # (m, t)
                sse, bound = krr_fold_error(beta, Gf[k], b_val, yy_val, y_size=y_size,
                                            n_rows=cnt[k])
                if self.scoring == "r2":
                    sst = yyf[k] - y1f[k] ** 2 / cnt[k]
                    ok = bool(np.all(resolved(sse, bound)))
                    scores[k, i] = float(np.mean(1.0 - sse / sst)) if ok else np.nan
                else:
                    ok = bool(resolved(np.sum(sse), np.sum(bound)))
                    scores[k, i] = -float(np.sum(sse) / (cnt[k] * len(sse))) if ok else np.nan
                if not ok:
                    logger.debug("cv fold %d, width %d, λ = %g: squared error %s not resolved "
                                 "above its rounding bound %s", k, j, lam, sse, bound)
        return scores

    def _get_state(self):
        arrays, state = super()._get_state()
        r = self.cv_results_
        arrays.update(cv_scores=np.stack([r[f"split{k}_test_score"]
                                          for k in range(self.n_splits_)]))
        state.update(best_index=self.best_index_, scoring=self.scoring, gammas=self.gammas_,
                     cv_prefixes=self._prefixes)
        return arrays, state

    def _set_state(self, arrays, state):
        super()._set_state(arrays, state)
        self.gammas_ = state.get("gammas")
        self._prefixes = state.get("cv_prefixes")
        self.kernels_ = None if self._prefixes is None or "kernel" not in self._prefixes[0] \
            else [p["kernel"] for p in self._prefixes]
        _set_best(self, np.asarray(arrays["cv_scores"]),
                  _krr_params(self.lams_, self.gammas_, self._prefixes), state["best_index"])


def _prefixes_of(prefixes, gammas):
    """The per-kernel columns: ``prefixes``, else (a model saved with a width grid only) one
    ``{"gamma": γ}`` per width, else None."""
    if prefixes is not None:
        return [dict(p) for p in prefixes]
    return None if gammas is None else [{"gamma": g} for g in gammas]


def _sisokr_params(lams, ranks, gammas, prefixes=None) -> list[dict]:
    """The candidates of :class:`SISOKRCV`: (λ, p), the input kernel (kernel, γ) the outer
    loop when given."""
    grid = [{"lam": lam, "rank": None} for lam in lams] if not ranks else \
        [{"lam": lam, "rank": p} for lam in lams for p in ranks]
    outer = _prefixes_of(prefixes, gammas)
    return grid if outer is None else [{**o, **p} for o in outer for p in grid]


def _krr_params(lams, gammas, prefixes=None) -> list[dict]:
    """The candidates of :class:`SketchedKRRCV`: λ, or the input kernel (kernel, γ; outer) ×
    λ (inner)."""
    outer = _prefixes_of(prefixes, gammas)
    if outer is None:
        return [{"lam": v} for v in lams]
    return [{**o, "lam": v} for o in outer for v in lams]


def candidate_kernels(kernel, kernels, gammas, *, kernel_name: str):
    """The input-kernel candidates of a CV estimator: ``(kernels, prefixes)``, one kernel per
    candidate (in ``cv_results_`` order) and its ``cv_results_`` columns, or ``(None, None)``
    for the kernel as given.

    Without ``kernels``: the kernel at each width of ``gammas`` (prefix ``{"gamma": γ}``).
    With ``kernels`` (:func:`distsketch.kernel_grid.check_kernels`: names, config mappings,
    kernels; each inside the estimator kernel's standardisation when it has one): each entry,
    crossed with ``gammas`` when it has a ``gamma`` (prefix ``{"kernel": description,
    "gamma": γ or None}``, ``gamma`` only with ``gammas``)."""
    from ..kernels.base import check_kernel
    from .kernel_grid import check_kernels, describe_kernel, has_gamma, inside_standardization

    if kernels is None:
        if gammas is None:
            return None, None
        return ([with_width(kernel, g, kernel_name=kernel_name) for g in gammas],
                [{"gamma": float(g)} for g in gammas])
    base = check_kernel(kernel, name=kernel_name)
    try:
        entries = check_kernels(kernels, gammas=gammas, argument="@")
    except ValueError as exc:
        raise ValueError(str(exc).replace("@.", "")) from None
    out, prefixes = [], []
    for k in entries:
        k = inside_standardization(base, k)
        for g in (gammas if gammas is not None and has_gamma(k) else [None]):
            cand = k if g is None else with_width(k, g, kernel_name="kernels")
            prefix = {"kernel": describe_kernel(cand, gammas is not None)}
            if gammas is not None:
                prefix["gamma"] = None if g is None else float(g)
            out.append(cand)
            prefixes.append(prefix)
    return out, prefixes


def _json_kernels(kernels, store) -> None:
    """With a ``store``, ``kernels`` is saved with the model's parameters: names and config
    mappings only."""
    if store is None or kernels is None:
        return
    for i, k in enumerate(kernels):
        if not isinstance(k, (str, dict)):
            raise ValueError(f"kernels[{i}]: with a store, give each kernel as a name or a "
                             f"config table ({{'name': 'gaussian', 'gamma': 0.1}}), not "
                             f"{type(k).__name__} (the parameters are saved as JSON)")


def check_gammas(gammas, *, argument: str = "gammas") -> list[float] | None:
    """A width grid: None, or a non-empty sequence of distinct positive finite numbers."""
    if gammas is None:
        return None
    if (isinstance(gammas, (str, bytes)) or not hasattr(gammas, "__len__") or not len(gammas)
            or not all(isinstance(g, numbers.Real) and not isinstance(g, bool)
                       and np.isfinite(g) and g > 0 for g in gammas)):
        raise ValueError(f"{argument}: expected a non-empty list of positive kernel widths, "
                         f"got {gammas!r}")
    if len({float(g) for g in gammas}) != len(gammas):
        raise ValueError(f"{argument}: the widths must be distinct, got {list(gammas)!r}")
    return [float(g) for g in gammas]


def with_width(kernel, gamma: float, *, argument: str = "gammas", kernel_name: str = "kernel"):
    """A copy of ``kernel`` (a kernel with a ``gamma``, possibly :class:`Standardized`) with
    width ``gamma``."""
    from ..kernels.base import Standardized, check_kernel

    kernel = check_kernel(kernel, name=kernel_name)
    if isinstance(kernel, Standardized):
        return Standardized(with_width(kernel.kernel, gamma, argument=argument), kernel.mean,
                            kernel.scale)
    params = kernel.get_params(deep=False)
    if "gamma" not in params:
        raise ValueError(f"{argument}: the kernel {kernel!r} has no width gamma to vary; drop "
                         f"{argument} or use a kernel with one (Gaussian, Laplacian, Matern, "
                         f"…)")
    return type(kernel)(**{**params, "gamma": float(gamma)})


def _all_rows_for_exact_sides(spec: FitSpec, K: int) -> FitSpec:
    """``spec`` with each exact side (``Identity``) as the all-rows sub-sampling ``SubSampling(n)``
    (``R = I_n``: every training row a landmark, in order, scale 1), after checking that the
    per-fold sums fit ``spec.options.tuning.max_fold_bytes`` (:class:`~distsketch.Tuning`).

    The fold scores of an exact side are those of the exact per-fold models: the model trained
    without fold ``k`` minimises its objective over the span of the training rows' features,
    a subspace of the span of all rows' features that ``SubSampling(n)`` gives (representer
    theorem), and the validation error of ``ψ(y)`` in H_Y is measured in the span of all
    rows' outputs, which holds both ``ĥ(x)`` and ``ψ(y)``. The refit is the exact model in the
    whitened basis of ``K`` (directions of ``K`` below ``eig_rtol`` dropped, as for every
    sketched side).
    """
    from ..sketches.base import Identity, SubSampling

    n = spec.X.n
    sketches = {name: SubSampling(n) if isinstance(sk, Identity) else sk
                for name, sk in spec.sketches.items()}
    names = list(sketches)  # ["sketch"] (SketchedKRRCV) or ["input_sketch", "output_sketch"]
    m_x = int(getattr(sketches[names[0]], "m", n))
    m_y = int(getattr(sketches[names[1]], "m", n)) if len(names) > 1 else 0
    need = 8 * K * m_x * (m_x + m_y)
    budget = spec.options.tuning.max_fold_bytes
    if need > budget:
        exact = [name for name, sk in spec.sketches.items() if isinstance(sk, Identity)]
        name = (exact or names)[0]
        fit = int((budget / (8 * K * len(names))) ** 0.5)  # m_X = m_Y = fit
        raise ValueError(f"{name}: the per-fold sums {'G_k' if m_y == 0 else 'G_k, M_k'} "
                         f"({K} folds × {m_x} × {m_x + m_y} float64) take "
                         f"{need / 2**20:,.0f} MiB on the driver, more than "
                         f"options.tuning.max_fold_bytes = {budget / 2**20:,.0f} MiB; "
                         f"give a smaller sketch (e.g. SubSampling({max(1, min(n - 1, fit))})), "
                         f"fewer folds, or a larger budget on a driver with the memory "
                         f"(EngineOptions(tuning=Tuning(max_fold_bytes=…)))")
    return dataclasses.replace(spec, sketches=sketches)


def _fold_basis(T, G, Gk, n: int, count: float, k: int):
    """``(n_{−k}, Λ_k, T V_k)``: the model without fold ``k`` in the eigenbasis of
    ``H_{−k} = Tᵀ (G − G_k) T`` (eigenvalues clipped at 0)."""
    if count == 0 or count == n:
        raise ValueError(f"cv: fold {k} has {int(count)} of the {n} rows; use fewer folds or "
                         f"contiguous folds")
    H = T.T @ (G - Gk) @ T
    evals, V = np.linalg.eigh(0.5 * (H + H.T))
    return n - count, np.clip(evals, 0.0, None), T @ V


def _ordered_sum(parts: np.ndarray) -> np.ndarray:
    """``Σ_k parts[k]`` added in fold order (a fixed order: the same bits on every machine)."""
    out = parts[0].copy()
    for p in parts[1:]:
        out += p
    return out


class SISOKRCV(SISOKR):
    """SISOKR with λ and the reduced rank p chosen by K-fold cross-validation, from one pass.

    Either side sketched or exact (``None``: cross-validated as the all-rows sub-sampling
    ``SubSampling(n)``, which gives the exact per-fold models' scores; its fold sums are
    n-sized, so the driver must hold ``K · m_X · (m_X + m_Y)`` floats, at most
    ``options.tuning.max_fold_bytes``). The pass computes per fold ``G_k = Σ c_i c_iᵀ``, ``M_k = Σ d_i c_iᵀ``
    and ``Σ k_Y(y_i, y_i)``; with the feature maps fixed (sketches drawn once from all rows),
    the model without fold ``k`` is, in the eigenbasis ``V_k, Λ_k`` of
    ``H_{−k} = T_Xᵀ (G − G_k) T_X``, ``W = Ã (Λ_k + n_{−k} λ)^{-1}`` with
    ``Ã = T_Yᵀ (M − M_k) T_X V_k``, and its surrogate error on the fold needs no data::

        Σ_{i∈k} ‖ĥ(x_i) − ψ(y_i)‖² = Σ k_Y(y_i, y_i) − 2 tr(Wᵀ A_k) + tr(W H_k Wᵀ)

    (``A_k = T_Yᵀ M_k T_X V_k``, ``H_k = V_kᵀ T_Xᵀ G_k T_X V_k``). Every rank p at once: with
    the principal directions ``Q`` of ``W Λ_k Wᵀ`` (the training predictions' covariance),
    ``W_p = Q_p Q_pᵀ W`` and the two traces are cumulative sums of the diagonals of
    ``Qᵀ A_k Wᵀ Q`` and ``Qᵀ W H_k Wᵀ Q``. Cost: one pass and the refit (whose whitening and
    eigendecomposition of ``H`` every fold reuses), then per fold, by the cheaper route
    (:func:`fold_route`), either a congruence ``Pᵀ G_k P`` and one band reduction of
    ``r_X × r_X`` (then per λ a banded solve), or a pivoted Cholesky factorisation of ``G_k``
    (rank ≤ n_k) and per λ a Woodbury solve (an ``r_X × n_k`` symmetric rank-k product and an
    ``n_k × n_k`` Cholesky factorisation); per (fold, λ) one ``r_Y × r_Y``
    eigendecomposition (:func:`sisokr_fold_scores`).

    Parameters
    ----------
    input_kernel, output_kernel, input_sketch, output_sketch
        As for :class:`~distsketch.SISOKR`. An exact side (``None``) is cross-validated and
        refitted as ``SubSampling(n)`` (``R = I_n``, the exact model in the whitened basis of
        its kernel matrix; ``input_sketch_`` / ``output_sketch_`` record it).
    lams : sequence of float
    ranks : None or sequence of int
        Ranks to try (``None``: full rank only); a rank at least ``r_Y`` is the full model.
    gammas : sequence of float, optional
        A grid of widths of the input kernel, every one scored with every (λ, p) from the same
        pass (one read of the rows; each block's ``C_I`` computed once per width, see
        :class:`SketchedKRRCV`). The driver work (whitening, ``eigh(H)``, fold reductions)
        is once per width; the model is refitted at the best width.
    kernels : sequence, optional
        Input kernels to try in place of ``input_kernel``, each (× ``gammas`` where it has a
        ``gamma``) scored in the same pass, as for :class:`SketchedKRRCV`; the chosen one is
        ``input_kernel_``.
    cv : int or KFold-like
        See :func:`fold_spec`.
    scoring : {"auto", "surrogate", "f1_samples", "kernel_loss", "topk_accuracy"}
        ``"auto"`` (default): the task's metric where decoding the folds is affordable,
        ``"f1_samples"`` for binary outputs, else ``"kernel_loss"``, when ``n · |U| ·
        settings · m_Y ≤`` ``options.tuning.auto_decode_budget`` (``|U|`` the unique training outputs,
        ``settings`` the grid's points); otherwise ``"surrogate"`` with a warning that the
        two can choose differently (:func:`auto_scoring`). ``scoring_`` records the choice.
        ``"surrogate"``: minus the mean surrogate error, from the sums alone.
        ``"f1_samples"`` / ``"kernel_loss"`` / ``"topk_accuracy"``: decode each validation
        row over the unique training outputs (``candidates_``, all folds', so every row's
        own output is a candidate) with every fold's models and score the decoded outputs
        (F1, minus the kernel loss, or the fraction of rows whose own output is among the
        ``top_k`` best-scored candidates, ties to the lower candidate index as
        ``predict``). This reads the rows once more
        after the pass (their input features and outputs) and decodes every validation row
        ``len(lams) × len(ranks)`` times.
    top_k : int
        ``k`` of ``scoring="topk_accuracy"`` (ignored otherwise).
    random_state, store, options
        As for :class:`~distsketch.SISOKR`.

    Attributes
    ----------
    cv_results_ : dict
        ``param_lam``, ``param_rank`` (None: full), with ``gammas`` also ``param_gamma``
        (the outer loop), ``params``, ``split{k}_test_score`` (the ``scoring``, greater is
        better), ``mean_test_score``, ``std_test_score``, ``rank_test_score``. A surrogate
        score not resolved above its rounding error bound is NaN (:func:`sisokr_fold_scores`);
        its point has a NaN mean, the worst rank (shared) and is never chosen.
    best_index_, best_params_, best_score_, n_splits_
    scoring_ : str
        The scoring used (``scoring``, or what ``"auto"`` resolved to).
    Other attributes as :class:`~distsketch.SISOKR`, refitted at the best ``(λ, p)`` from the
    same sums (``set_lam`` and ``set_rank`` switch).
    """

    _param_kinds = {"input_kernel": "kernel", "output_kernel": "kernel",
                    "input_sketch": "sketch", "output_sketch": "sketch", "lams": "json",
                    "ranks": "json", "gammas": "json", "kernels": "json", "cv": "json",
                    "scoring": "json",
                    "top_k": "json", "random_state": "random_state", "store": "store",
                    "options": "options"}
    _configurable = True
    _needs_eigenbasis = True  # the fold scores work in the refit's eigenbasis of H

    def __init__(self, input_kernel="gaussian", output_kernel="gaussian", *, input_sketch=None,
                 output_sketch=None, lams=(1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2),
                 ranks=None, gammas=None, kernels=None, cv=5, scoring="auto", top_k=5,
                 random_state=None, store=None, options=None):
        self.input_kernel = input_kernel
        self.output_kernel = output_kernel
        self.input_sketch = input_sketch
        self.output_sketch = output_sketch
        self.lams = lams
        self.ranks = ranks
        self.gammas = gammas
        self.kernels = kernels
        self.cv = cv
        self.scoring = scoring
        self.top_k = top_k
        self.random_state = random_state
        self.store = store
        self.options = options

    def _validate(self, X, Y) -> FitSpec:
        lams = check_lam(self.lams, argument="lams")
        check_rank(self.ranks, argument="ranks")
        top_k = getattr(self, "top_k", 5)
        if isinstance(top_k, bool) or not isinstance(top_k, numbers.Integral) or top_k < 1:
            raise ValueError(f"top_k: expected a positive integer, got {top_k!r}")
        folds = fold_spec(self.cv)
        if self.scoring not in DECODED_SCORINGS:
            raise ValueError(f"scoring: expected one of {list(DECODED_SCORINGS)}, got "
                             f"{self.scoring!r}")
        gammas = check_gammas(getattr(self, "gammas", None))
        kernels = getattr(self, "kernels", None)
        _json_kernels(kernels, self.store)
        widths, prefixes = candidate_kernels(self.input_kernel, kernels, gammas,
                                             kernel_name="input_kernel")
        spec = SketchedEstimator._validate(self, X, Y)
        self._offset = None  # SISOKR's output centring (fit_intercept): not cross-validated
        if isinstance(spec.kernels["output_kernel"], Linear):
            raise ValueError("output_kernel: SISOKRCV scores the surrogate error of a "
                             "non-linear output kernel; use SketchedKRRCV for vector targets")
        K = int(folds.partition(":")[0])
        if spec.X.n < 2 * K:
            raise ValueError(f"cv: {K} folds need at least {2 * K} rows, got {spec.X.n}")
        spec = _all_rows_for_exact_sides(spec, K)
        self._folds = folds
        self._widths = widths
        self._prefixes = prefixes
        kernels = spec.kernels if widths is None else {**spec.kernels,
                                                       "input_kernel": widths[0]}
        return FitSpec(spec.X, spec.Y, kernels, spec.sketches, spec.options, spec.rng, lams)

    def _x_widths(self, spec: FitSpec) -> tuple:
        return () if self._widths is None else tuple(self._widths[1:])

    def _sums(self, spec: FitSpec) -> tuple[str, ...]:
        f = self._folds
        sums = ("B", "E", "U", f"G@{f}", f"M@{f}", f"kyy@{f}", f"count@{f}")
        more = () if self._widths is None else tuple(
            f"{name}~{j}" for j in range(1, len(self._widths))
            for name in ("B", f"G@{f}", f"M@{f}"))  # the output side's are the same
        return sums + more

    def _fit_ranks(self):
        # the refit runs before the scores exist (its factors serve every fold); _solve
        # puts the best rank first afterwards
        return check_rank(self.ranks, argument="ranks"), None

    def _solve(self, spec: FitSpec, res) -> None:
        f = self._folds
        cnt = np.asarray(res.sums[f"count@{f}"], dtype=np.float64).reshape(-1)
        n, lams = res.n, spec.lams
        ranks = check_rank(self.ranks, argument="ranks")
        for k in range(len(cnt)):
            if cnt[k] == 0 or cnt[k] == n:
                raise ValueError(f"cv: fold {k} has {int(cnt[k])} of the {n} rows; use fewer "
                                 f"folds or contiguous folds")
        widths = self._widths or [spec.kernels["input_kernel"]]
        self.scoring_ = self._resolve_scoring(res, len(lams) * max(len(ranks), 1)
                                              * len(widths),
                                              budget=spec.options.tuning.auto_decode_budget)
        scores = []
        for j in range(len(widths)):  # each width's refit is left fitted by its scores
            scores.append(self._width_scores(self._width_spec(spec, j), res, j))
        gammas = None if getattr(self, "gammas", None) is None else [float(g) for g in self.gammas]
        _set_best(self, np.concatenate(scores, axis=1),
                  _sisokr_params(lams, ranks, gammas, self._prefixes))
        best_width = self.best_index_ // (len(lams) * max(len(ranks), 1))
        if best_width != len(widths) - 1:  # the refit at the best width (its driver work again)
            SISOKR._solve(self, self._width_spec(spec, best_width),
                          self._width_result(res, best_width))
        self.gammas_ = gammas
        self.kernels_ = None if getattr(self, "kernels", None) is None else \
            [p["kernel"] for p in self._prefixes]
        # the refit at the best (λ, p): best first, as SISOKR(lam=[...], rank=[...]) would
        best_lam, best_rank = self.best_params_["lam"], self.best_params_["rank"]
        self.lams_ = (best_lam, *[v for v in lams if v != best_lam])
        self.lam_ = best_lam
        self.ranks_ = () if best_rank is None else \
            (best_rank, *[p for p in ranks if p != best_rank])
        self.rank_ = best_rank
        self._principal = None

    def _resolve_scoring(self, res, settings: int, budget: float | None = None) -> str:
        """``scoring``, with ``"auto"`` resolved by :func:`auto_scoring` from the unique
        training outputs of the pass (its warning given here); ``budget``: the fit's
        ``options.tuning.auto_decode_budget``."""
        if self.scoring != "auto":
            return self.scoring
        rows, _ = res.sums["U"]
        scoring, message = auto_scoring(binary=is_binary(rows), n=res.n, n_unique=rows.shape[0],
                                        settings=settings, m_y=int(res.y_sketch.m),
                                        budget=budget)
        if message:
            warnings.warn(message, UserWarning, stacklevel=5)
        logger.info("SISOKRCV: scoring='auto' is %r", scoring)
        return scoring

    def _width_spec(self, spec: FitSpec, j: int) -> FitSpec:
        if self._widths is None:
            return spec
        return FitSpec(spec.X, spec.Y, {**spec.kernels, "input_kernel": self._widths[j]},
                       spec.sketches, spec.options, spec.rng, spec.lams)

    def _width_result(self, res, j: int):
        """The pass's result as a plain SISOKR of input width ``j`` sees it (folds summed)."""
        f, sfx, sums = self._folds, (f"~{j}" if j else ""), res.sums
        return _with_sums(res, dict(sums, B=sums[f"B{sfx}"],
                                    G=_ordered_sum(np.asarray(sums[f"G@{f}{sfx}"], np.float64)),
                                    M=_ordered_sum(np.asarray(sums[f"M@{f}{sfx}"], np.float64))))

    def _width_scores(self, spec: FitSpec, res, j: int) -> np.ndarray:
        """Scores (K, n_λ · n_p) at input width ``j``; leaves the refit of that width fitted."""
        f, sfx, sums = self._folds, (f"~{j}" if j else ""), res.sums
        Gf = np.asarray(sums[f"G@{f}{sfx}"], dtype=np.float64)
        Mf = np.asarray(sums[f"M@{f}{sfx}"], dtype=np.float64)
        kyy = np.asarray(sums[f"kyy@{f}"], dtype=np.float64).reshape(-1)
        cnt = np.asarray(sums[f"count@{f}"], dtype=np.float64).reshape(-1)
        ranks = check_rank(self.ranks, argument="ranks")
        # the refit on all rows from the same sums (the folds summed), first: its whitening
        # T_X, T_Y and eigendecomposition H = V Λ Vᵀ serve every fold
        SISOKR._solve(self, spec, self._width_result(res, j))
        sol = self.input_solution_
        decoded = self.scoring_ != "surrogate"
        a_y = output_scale(spec.kernels["output_kernel"], res.y_landmarks, res.y_sketch,
                           self.output_whitening_)
        scores, models = sisokr_fold_scores(input_basis(sol), sol.evals, self.operator_,
                                            self.output_whitening_, Gf, Mf, kyy, cnt, n=res.n,
                                            lams=spec.lams, ranks=ranks, keep_models=decoded,
                                            output_scale=a_y, tuning=spec.options.tuning)
        if decoded:
            scores = self._decoded_scores(spec, res, models, ranks, self.output_whitening_, cnt)
        return scores

    def _decoded_scores(self, spec, res, models, ranks, T_Y, cnt) -> np.ndarray:
        """Per fold and setting, the mean decoded score of the fold's rows (one more read of
        the rows, block by block: input features ``c``, outputs ``y``)."""
        from ..engine.features import FeatureMap
        from ..metrics import as_binary, kernel_loss

        ky = spec.kernels["output_kernel"]
        rows, first = res.sums["U"]
        cand = rows[np.argsort(first, kind="stable")]
        cand = cand.toarray() if hasattr(cand, "toarray") else np.asarray(cand, dtype=np.float64)
        phi_c = FeatureMap(ky, res.y_landmarks, res.y_sketch.transpose_dot(T_Y)).block(cand)
        kcc = np.asarray(ky.diag(cand), dtype=np.float64)
        xmap = FeatureMap(spec.kernels["input_kernel"], res.x_landmarks, res.x_sketch,
                          spec.options.gram_chunk, spec.options.tuning)
        # candidate features in each (fold, λ) principal basis, once (not per block)
        rotated = [[None if Q is None else phi_c @ Q for _, Q in fold] for fold in models]
        topk = self.scoring_ == "topk_accuracy"
        if topk:  # each row's own output among the candidates (absent: -1, never a hit)
            where = {row.tobytes(): j for j, row in enumerate(np.ascontiguousarray(cand))}
            index = np.arange(len(cand))
        K, per = len(models), len(models[0]) * max(len(ranks), 1)
        totals = np.zeros((K, per))
        b = 1024
        blocks = zip(spec.X.blocks(b), spec.Y.blocks(b))
        for i, (xb, yb) in enumerate(blocks):
            xb = xb.compute() if hasattr(xb, "compute") else xb
            yb = yb.compute() if hasattr(yb, "compute") else yb
            yb = yb.toarray() if hasattr(yb, "toarray") else np.asarray(yb, dtype=np.float64)
            C = np.asarray(xmap.block(xb), dtype=np.float64)
            f = fold_ids(i * b, i * b + len(C), res.n, self._folds)
            for k in np.unique(f):
                sel = f == k
                Cv, Yv = C[sel], yb[sel]
                if topk:
                    true = np.array([where.get(row.tobytes(), -1)
                                     for row in np.ascontiguousarray(Yv)], dtype=np.int64)
                col = 0
                for (Z, Q), cq in zip(models[k], rotated[k]):
                    g = Cv @ Z  # (rows, r_Y) output coordinates
                    if Q is None:
                        choices = [(g, phi_c)]
                    else:
                        gq = g @ Q
                        choices = [(gq[:, :p], cq[:, :p]) for p in ranks]
                    for gg, cc in choices:
                        score = kcc[None, :] - 2.0 * (gg @ cc.T)
                        if topk:  # rank of the own output, ties to the lower index
                            own = score[np.arange(len(score)), np.maximum(true, 0)][:, None]
                            ahead = (score < own) | ((score == own)
                                                     & (index[None, :] < true[:, None]))
                            hit = (true >= 0) & (ahead.sum(axis=1) < self.top_k)
                            totals[k, col] += float(hit.sum())
                            col += 1
                            continue
                        pred = cand[np.argmin(score, axis=1)]
                        if self.scoring_ == "f1_samples":
                            T, Pb = as_binary(Yv, "Y"), as_binary(pred, "candidates")
                            denom = T.sum(axis=1) + Pb.sum(axis=1)
                            val = np.where(denom > 0, 2.0 * (T & Pb).sum(axis=1)
                                           / np.maximum(denom, 1), 0.0).sum()
                        else:
                            val = -kernel_loss(ky, Yv, pred) * len(Yv)
                        totals[k, col] += val
                        col += 1
        return totals / cnt[:, None]

    def _get_state(self):
        arrays, state = super()._get_state()
        arrays.update(cv_scores=np.stack([self.cv_results_[f"split{k}_test_score"]
                                          for k in range(self.n_splits_)]))
        state.update(best_index=self.best_index_, scoring=self.scoring_,
                     cv_params=[[float(p["lam"]), p["rank"]] for p in self.cv_results_["params"]],
                     gammas=self.gammas_, cv_prefixes=self._prefixes)
        return arrays, state

    def _set_state(self, arrays, state):
        super()._set_state(arrays, state)
        self.gammas_ = state.get("gammas")
        # a model saved before scoring_ existed: its scoring was never "auto"
        self.scoring_ = state.get("scoring", getattr(self, "scoring", "surrogate"))
        params = [{"lam": float(a), "rank": None if b is None else int(b)}
                  for a, b in state["cv_params"]]
        self._prefixes = _prefixes_of(state.get("cv_prefixes"), self.gammas_)
        self.kernels_ = None if self._prefixes is None or "kernel" not in self._prefixes[0] \
            else [p["kernel"] for p in self._prefixes]
        if self._prefixes is not None:  # the pairs repeat per kernel, the outer loop
            per = len(params) // len(self._prefixes)
            params = [{**self._prefixes[i // per], **p} for i, p in enumerate(params)]
        _set_best(self, np.asarray(arrays["cv_scores"]), params, state["best_index"])


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
    :class:`~distsketch.solve.BandReduction` ``Ĥ_{−k} = Q Bd Qᵀ`` per fold serves every λ:
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
    ``Ĥ_{−k}`` (:class:`~distsketch.solve.EigenShifted`, eigenvalues clipped at 0).

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
        ``Pᵀ Mᵀ T_Y`` (:func:`~distsketch.solve.sisokr_operator`).
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
                fold_H[last] = np.diag(evals) - _ordered_sum(
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
    from ..linalg.solve import BandReduction, EigenShifted

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


def _with_sums(res, sums: dict):
    import dataclasses

    return dataclasses.replace(res, sums=sums)


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
