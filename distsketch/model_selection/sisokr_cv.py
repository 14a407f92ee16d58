"""SISOKRCV: SISOKR's λ, rank and input kernel chosen by K-fold cross-validation from one pass.

The pass computes per-fold sums (``G_k``, ``M_k``, ``Σ k_Y(y_i, y_i)``); with the feature maps
fixed (sketches drawn once from all rows), every fold's model and its surrogate error come from
them, for every λ and rank (:mod:`distsketch.model_selection.fold_algebra`), and the model is
refitted on all rows at the best point from the same sums. The decoded scorings
(``"f1_samples"``, ``"kernel_loss"``, ``"topk_accuracy"``; ``"auto"`` where affordable,
:func:`~distsketch.model_selection.scoring.auto_scoring`) read the rows once more.
"""

from __future__ import annotations

import logging
import numbers
import os
import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .._base import check_lam
from ..engine.sums import fold_ids
from ..kernels.families import Linear
from ..models.base import FitSpec, SketchedEstimator
from ..models.sisokr import SISOKR
from ..solvers.direct import input_basis
from ..solvers.reduced_rank import check_rank
from .fold_algebra import output_scale, sisokr_fold_scores
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
from .scoring import auto_scoring, is_binary, set_best

if TYPE_CHECKING:
    import zarr

    from ..engine.store import StoreDirectory
    from ..kernels.base import Kernel
    from ..options import EngineOptions
    from ..sketches.base import Sketch

__all__ = ["SISOKRCV", "DECODED_SCORINGS"]

logger = logging.getLogger(__name__)

DECODED_SCORINGS = ("auto", "surrogate", "f1_samples", "kernel_loss", "topk_accuracy")
# scoring="auto" of SISOKRCV (auto_scoring): the largest decode cost at which the folds are
# decoded is EngineOptions.tuning.auto_decode_budget (distsketch.Tuning, with its measurement).


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
    (``distsketch.model_selection.fold_algebra.fold_route``), either a congruence ``Pᵀ G_k P`` and
    one band reduction of ``r_X × r_X`` (then per λ a banded solve), or a pivoted Cholesky
    factorisation of ``G_k`` (rank ≤ n_k) and per λ a Woodbury solve (an ``r_X × n_k`` symmetric
    rank-k product and an ``n_k × n_k`` Cholesky factorisation); per (fold, λ) one ``r_Y × r_Y``
    eigendecomposition (``distsketch.model_selection.fold_algebra.sisokr_fold_scores``).

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
        The number of contiguous folds, or a splitter with ``n_splits``, ``shuffle`` and
        ``random_state``, as for :class:`SketchedKRRCV`. Seeded folds take appended rows
        (``partial_fit``) with ``scoring="surrogate"``, a kernel grid's every width scored
        again (as for :class:`SketchedKRRCV`).
    scoring : {"auto", "surrogate", "f1_samples", "kernel_loss", "topk_accuracy"}
        ``"auto"`` (default): the task's metric where decoding the folds is affordable,
        ``"f1_samples"`` for binary outputs, else ``"kernel_loss"``, when ``n · |U| ·
        settings · m_Y ≤`` ``options.tuning.auto_decode_budget`` (``|U|`` the unique training outputs,
        ``settings`` the grid's points); otherwise ``"surrogate"`` with a warning that the
        two can choose differently (``distsketch.model_selection.scoring.auto_scoring``).
        ``scoring_`` records the choice. ``"surrogate"``: minus the mean surrogate error, from the
        sums alone. ``"f1_samples"`` / ``"kernel_loss"`` / ``"topk_accuracy"``: decode each
        validation row over the unique training outputs (``candidates_``, all folds', so every row's
        own output is a candidate) with every fold's models and score the decoded outputs (F1, minus
        the kernel loss, or the fraction of rows whose own output is among the ``top_k`` best-scored
        candidates, ties to the lower candidate index as ``predict``). This reads the rows once more
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
        score not resolved above its rounding error bound is NaN
        (``distsketch.model_selection.fold_algebra.sisokr_fold_scores``); its point has a NaN
        mean, the worst rank (shared) and is never chosen.
    best_index_, best_params_, best_score_, n_splits_
    scoring_ : str
        The scoring used (``scoring``, or what ``"auto"`` resolved to).
    Other attributes as :class:`~distsketch.SISOKR`, refitted at the best ``(λ, p)`` from the
    same sums (``set_lam`` and ``set_rank`` switch).

    See Also
    --------
    SISOKR : The model for one ``(λ, p)``.
    SketchedKRRCV : Cross-validated kernel ridge regression of vector targets.

    Examples
    --------
    >>> import numpy as np
    >>> from distsketch import SISOKRCV, Gaussian, SubSampling
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(100, 4))
    >>> Y = (X[:, :3] + 0.3 * rng.normal(size=(100, 3)) > 0).astype(float)
    >>> model = SISOKRCV(Gaussian(gamma=0.5), Gaussian(gamma=1.0),
    ...                  input_sketch=SubSampling(30), output_sketch=SubSampling(30),
    ...                  lams=(1e-3, 1e-2, 1e-1, 1.0), cv=3, random_state=0).fit(X, Y)
    >>> model.best_params_, model.scoring_
    ({'lam': 0.01, 'rank': None}, 'f1_samples')
    >>> model.predict(X[:2]).shape
    (2, 3)
    """

    _param_kinds = {"input_kernel": "kernel", "output_kernel": "kernel",
                    "input_sketch": "sketch", "output_sketch": "sketch", "lams": "json",
                    "ranks": "json", "gammas": "json", "kernels": "json", "cv": "folds",
                    "scoring": "json",
                    "top_k": "json", "random_state": "random_state", "store": "store",
                    "options": "options"}
    _configurable = True
    _needs_eigenbasis = True  # the fold scores work in the refit's eigenbasis of H

    #: ``partial_fit`` / ``forget`` with seeded folds: every fold and λ scored again from the
    #: batches' per-fold sums (docs/design/growing.md, "Cross-validation")
    _appends = True

    def __init__(self, input_kernel: Kernel | str | Callable = "gaussian",
                 output_kernel: Kernel | str | Callable = "gaussian", *,
                 input_sketch: Sketch | None = None, output_sketch: Sketch | None = None,
                 lams: Sequence[float] = (1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2),
                 ranks: Sequence[int] | None = None, gammas: Sequence[float] | None = None,
                 kernels: Sequence[Any] | None = None, cv: int | Any = 5,
                 scoring: str = "auto", top_k: int = 5,
                 random_state: int | np.random.Generator | None = None,
                 store: str | os.PathLike | zarr.Group | StoreDirectory | None = None,
                 options: EngineOptions | None = None) -> None:
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
        json_kernels(kernels, self.store)
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
        spec = all_rows_for_exact_sides(spec, K)
        self._folds = folds
        self._widths, self._gammas = widths, gammas
        self._prefixes = prefixes
        kernels = spec.kernels if widths is None else {**spec.kernels,
                                                       "input_kernel": widths[0]}
        return FitSpec(spec.X, spec.Y, kernels, spec.sketches, spec.options, spec.rng, lams)

    def _appending_refusal(self) -> str | None:
        why = appending_refusal(self.cv, sketches={"input_sketch": self.input_sketch,
                                                   "output_sketch": self.output_sketch})
        if why is None and self.scoring != "surrogate":
            why = (f"scoring: scoring={self.scoring!r} decodes every fold's rows, read again "
                   f"after the pass, which a re-solve over appended rows does not hold; give "
                   f"scoring='surrogate' to append rows")
        return why

    def _growth_refusal(self, spec: FitSpec) -> str | None:
        return self._appending_refusal()

    def _growth_result(self, growth):
        self._widths = fitted_widths(growth, "input_kernel")
        return super()._growth_result(growth)

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
        gammas = self._gammas  # the fitted grid's (a re-solve scores the widths it holds)
        set_best(self, np.concatenate(scores, axis=1),
                  _sisokr_params(lams, ranks, gammas, self._prefixes))
        best_width = self.best_index_ // (len(lams) * max(len(ranks), 1))
        if best_width != len(widths) - 1:  # the refit at the best width (its driver work again)
            SISOKR._solve(self, self._width_spec(spec, best_width),
                          self._width_result(res, best_width))
        self.gammas_ = gammas
        self.kernels_ = kernel_descriptions(self._prefixes)
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
        """The pass's result as a plain SISOKR of input width ``j`` sees it (folds summed,
        the width's own input sketch)."""
        f, sfx, sums = self._folds, (f"~{j}" if j else ""), res.sums
        return _with_sums(res, dict(sums, B=sums[f"B{sfx}"],
                                    G=ordered_sum(np.asarray(sums[f"G@{f}{sfx}"], np.float64)),
                                    M=ordered_sum(np.asarray(sums[f"M@{f}{sfx}"], np.float64))),
                          x_sketch=res.x_sketch_of(j))

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
            scores = self._decoded_scores(spec, _with_sums(res, res.sums,
                                                           x_sketch=res.x_sketch_of(j)),
                                          models, ranks, self.output_whitening_, cnt)
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
                     gammas=self.gammas_, cv_prefixes=self._prefixes, cv_folds=self._folds)
        return arrays, state

    def _set_state(self, arrays, state):
        super()._set_state(arrays, state)
        self.gammas_ = self._gammas = state.get("gammas")
        # what a re-solve over appended rows reads (models saved before: no batches held);
        # the input kernels of a grid are the batches' (_growth_result)
        self._folds, self._widths = state.get("cv_folds"), None
        # a model saved before scoring_ existed: its scoring was never "auto"
        self.scoring_ = state.get("scoring", getattr(self, "scoring", "surrogate"))
        params = [{"lam": float(a), "rank": None if b is None else int(b)}
                  for a, b in state["cv_params"]]
        self._prefixes = prefixes_of(state.get("cv_prefixes"), self.gammas_)
        self.kernels_ = kernel_descriptions(self._prefixes)
        if self._prefixes is not None:  # the pairs repeat per kernel, the outer loop
            per = len(params) // len(self._prefixes)
            params = [{**self._prefixes[i // per], **p} for i, p in enumerate(params)]
        set_best(self, np.asarray(arrays["cv_scores"]), params, state["best_index"])


def _sisokr_params(lams, ranks, gammas, prefixes=None) -> list[dict]:
    """The candidates of :class:`SISOKRCV`: (λ, p), the input kernel (kernel, γ) the outer
    loop when given."""
    grid = [{"lam": lam, "rank": None} for lam in lams] if not ranks else \
        [{"lam": lam, "rank": p} for lam in lams for p in ranks]
    outer = prefixes_of(prefixes, gammas)
    return grid if outer is None else [{**o, **p} for o in outer for p in grid]


def _with_sums(res, sums: dict, **changes):
    import dataclasses

    return dataclasses.replace(res, sums=sums, **changes)
