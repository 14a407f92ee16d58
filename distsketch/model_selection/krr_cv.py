"""SketchedKRRCV: K-fold cross-validation of sketched KRR from one pass (``RidgeCV``'s habit).

The pass computes, besides ``B = R K Rᵀ``, the sums of every fold ``k`` separately (sum names
``"G@K"``, ``"b@K"``, … of :func:`distsketch.engine.sums.sum_term`)::

    G_k = Σ_{i∈k} c_i c_iᵀ,   b_k = Σ_{i∈k} c_i y_iᵀ,   (yy)_k = Σ_{i∈k} y_i²,   (y1)_k = Σ_{i∈k} y_i

so a fold's training sums are the totals minus its own (``G − G_k``, ``b − b_k``) and, with the
realised sketch fixed (its feature map ``φ = Tᵀ R k(X, ·)`` drawn once from all rows), the
model trained without fold ``k`` is, for every λ,

    β_k(λ) = T V_k (Λ_k + n_{−k} λ)^{-1} V_kᵀ Tᵀ (b − b_k),    Tᵀ (G − G_k) T = V_k Λ_k V_kᵀ

(one ``r × r`` eigendecomposition per fold), and its squared error on the fold needs no data:

    Σ_{i∈k} ‖y_i − β_kᵀ c_i‖² = Σ (yy)_k − 2 ⟨β_k, b_k⟩ + ⟨β_k, G_k β_k⟩.

K folds × every λ therefore cost one pass plus ``K`` eigendecompositions of ``r × r``; the model
refitted on all rows at the best λ uses the summed folds (``G = Σ_k G_k``).

That trace form cancels: every fold score comes with a rounding error bound computed from the
same sums, and a score not resolved above it is NaN and never selected
(:mod:`distsketch.model_selection.scoring`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .._base import check_lam
from ..linalg.solve import whitening
from ..models.base import FitSpec
from ..models.krr import SketchedKRR
from ..models.ridge import KRRClosedForm, centre_targets
from ..solvers.direct import solve_krr
from .folds import (
    all_rows_for_exact_sides,
    appending_refusal,
    fitted_widths,
    fold_spec,
    ordered_sum,
)
from .grid import (
    candidate_kernels,
    check_gammas,
    json_kernels,
    kernel_descriptions,
    prefixes_of,
)
from .scoring import krr_fold_error, resolved, set_best

if TYPE_CHECKING:
    import zarr

    from ..engine.store import StoreDirectory
    from ..kernels.base import Kernel
    from ..options import EngineOptions
    from ..sketches.base import Sketch

__all__ = ["SketchedKRRCV", "SCORINGS"]

logger = logging.getLogger(__name__)

SCORINGS = ("neg_mean_squared_error", "r2")


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
        "polynomial", "degree": 2}``) or kernels
        (``distsketch.model_selection.kernel_grid.check_kernels``;
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
        ``random_state`` (scikit-learn's ``KFold``; shuffled folds are a seeded hash of the row
        index, the same rows whatever the chunking, not the rows ``KFold`` itself would pick).
        Seeded folds (a shuffled ``KFold``, or ``"K:seed"``) take appended rows
        (``partial_fit``: each row keeps the fold of the position it arrives at, every fold
        and λ is scored again; with ``gammas`` / ``kernels``, every fitted width from its own
        per-fold sums, the batch's pass computing each width's blocks with the fit's
        realised sketch of that width; docs/design/growing.md); contiguous folds, whose
        boundaries move with ``n``, have no ``partial_fit``.
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

    See Also
    --------
    SketchedKRR : The model for one λ.
    SISOKRCV : Cross-validated structured-output regression.

    Examples
    --------
    >>> import numpy as np
    >>> from distsketch import SketchedKRRCV, Gaussian, SubSampling
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(100, 4))
    >>> y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=100)
    >>> model = SketchedKRRCV(Gaussian(gamma=0.5), sketch=SubSampling(30),
    ...                       lams=(1e-4, 1e-3, 1e-2), cv=3, random_state=0).fit(X, y)
    >>> model.best_params_, len(model.cv_results_["mean_test_score"])
    ({'lam': 0.001}, 3)
    >>> model.predict(X[:3]).shape
    (3,)
    """

    _param_kinds = {"kernel": "kernel", "sketch": "sketch", "lams": "json", "gammas": "json",
                    "kernels": "json", "cv": "folds", "scoring": "json", "fit_intercept": "json",
                    "random_state": "random_state", "store": "store", "options": "options"}
    _configurable = True

    #: ``partial_fit`` / ``forget`` with seeded folds: every fold and λ scored again from the
    #: batches' per-fold sums (docs/design/growing.md, "Cross-validation")
    _appends = True

    def __init__(self, kernel: Kernel | str | Callable = "gaussian", *,
                 sketch: Sketch | None = None,
                 lams: Sequence[float] = (1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2),
                 gammas: Sequence[float] | None = None, kernels: Sequence[Any] | None = None,
                 cv: int | Any = 5, scoring: str = "neg_mean_squared_error",
                 fit_intercept: bool = True,
                 random_state: int | np.random.Generator | None = None,
                 store: str | os.PathLike | zarr.Group | StoreDirectory | None = None,
                 options: EngineOptions | None = None) -> None:
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
        json_kernels(kernels, self.store)
        widths, prefixes = candidate_kernels(self.kernel, kernels, gammas, kernel_name="kernel")
        spec = super()._validate(X, Y)
        K = int(folds.partition(":")[0])
        if spec.X.n < 2 * K:
            raise ValueError(f"cv: {K} folds need at least {2 * K} rows, got {spec.X.n}")
        spec = all_rows_for_exact_sides(spec, K)
        self._folds = folds
        self._widths, self._gammas = widths, gammas
        self._prefixes = prefixes
        kernels = spec.kernels if widths is None else {**spec.kernels, "kernel": widths[0]}
        return FitSpec(spec.X, spec.Y, kernels, spec.sketches, spec.options, spec.rng, lams)

    def _appending_refusal(self) -> str | None:
        return appending_refusal(self.cv, sketches={"sketch": self.sketch})

    def _growth_result(self, growth):
        self._widths = fitted_widths(growth, "kernel")
        return super()._growth_result(growth)

    def _growth_refusal(self, spec: FitSpec) -> str | None:
        return self._appending_refusal()

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
        gammas = self._gammas  # the fitted grid's (a re-solve scores the widths it holds)
        set_best(self, scores, _krr_params(lams, gammas, self._prefixes))
        best_width, best_lam = divmod(self.best_index_, len(lams))
        # the refit on all rows at the best width, from the same sums (the folds summed)
        G, b, y1, s, B = self._width_sums(res.sums, best_width)
        n = res.n
        intercept = bool(self.fit_intercept)
        self.kernel_ = widths[best_width]
        self.gammas_ = gammas
        self.kernels_ = kernel_descriptions(self._prefixes)
        self.sketch_ = res.x_sketch_of(best_width)  # pre-whitened for that width's kernel
        self.landmarks_ = res.x_landmarks
        self.input_solution_, rhs = solve_krr({"G": G, "B": B, "b": b}, self.sketch_,
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
        G = ordered_sum(np.asarray(sums[f"G@{f}{sfx}"], dtype=np.float64))
        bf = np.asarray(sums[f"b@{f}{sfx}"], dtype=np.float64)
        b = ordered_sum(bf.reshape(bf.shape[0], bf.shape[1], -1))
        y1f = np.asarray(sums[f"y1@{f}"], dtype=np.float64)
        y1 = ordered_sum(y1f.reshape(len(y1f), -1))
        s = None
        if self.fit_intercept:
            sf = np.asarray(sums[f"s@{f}{sfx}"], dtype=np.float64)
            s = ordered_sum(sf.reshape(len(sf), -1))
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
                     cv_prefixes=self._prefixes, cv_folds=self._folds)
        return arrays, state

    def _set_state(self, arrays, state):
        super()._set_state(arrays, state)
        self.gammas_ = self._gammas = state.get("gammas")
        self._prefixes = state.get("cv_prefixes")
        # what a re-solve over appended rows reads (models saved before: no batches held);
        # the input kernels of a grid are the batches' (_growth_result)
        self._folds, self._widths = state.get("cv_folds"), None
        self.kernels_ = kernel_descriptions(self._prefixes)
        set_best(self, np.asarray(arrays["cv_scores"]),
                  _krr_params(self.lams_, self.gammas_, self._prefixes), state["best_index"])


def _krr_params(lams, gammas, prefixes=None) -> list[dict]:
    """The candidates of :class:`SketchedKRRCV`: λ, or the input kernel (kernel, γ; outer) ×
    λ (inner)."""
    outer = prefixes_of(prefixes, gammas)
    if outer is None:
        return [{"lam": v} for v in lams]
    return [{**o, "lam": v} for o in outer for v in lams]


def _fold_basis(T, G, Gk, n: int, count: float, k: int):
    """``(n_{−k}, Λ_k, T V_k)``: the model without fold ``k`` in the eigenbasis of
    ``H_{−k} = Tᵀ (G − G_k) T`` (eigenvalues clipped at 0)."""
    if count == 0 or count == n:
        raise ValueError(f"cv: fold {k} has {int(count)} of the {n} rows; use fewer folds or "
                         f"contiguous folds")
    H = T.T @ (G - Gk) @ T
    evals, V = np.linalg.eigh(0.5 * (H + H.T))
    return n - count, np.clip(evals, 0.0, None), T @ V
