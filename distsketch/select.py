"""Model selection over λ (and rank, and a small grid of input kernel widths γ) for the CLI's
``[select]`` table and for scripts: K-fold cross-validation from one pass, or a hold-out split.

Two routes:

- ``cv = K`` — :class:`~distsketch.SketchedKRRCV` / :class:`~distsketch.SISOKRCV`: every fold ×
  every λ (× every rank) scored from per-fold sums of **one pass**, the model refitted on all
  rows from the same sums (see docs/design.md, "Cross-validation from one pass"). SketchedKRR
  and SISOKR only.
- ``validation = f`` — any model: rows split by a seeded hash of their index (a fraction ``f``
  held out, independent of chunking), the model fitted once on the rest with its whole λ path
  (every λ, and every rank, from that fit's sums: ``set_lam`` / ``set_rank``), each candidate
  scored on the held-out rows with a metric of :data:`distsketch.metrics.METRICS`, then
  refitted on all rows at the chosen values.

A γ grid costs one pass per γ (a kernel block depends on γ) plus the refit's pass; without a
grid, the cv route costs one pass in all and the validation route two.
"""

from __future__ import annotations

import dataclasses
import logging
import numbers
from typing import Any

import numpy as np

from ._hashing import row_hash
from .metrics import METRICS, check_metrics

__all__ = ["Selection", "select", "check_selection", "METRIC_ORIENTATION"]

logger = logging.getLogger(__name__)

#: +1 where greater is better, −1 where smaller is.
METRIC_ORIENTATION = {"f1_samples": 1, "r2": 1, "rmse": -1, "mae": -1, "hamming_loss": -1,
                      "kernel_loss": -1, "surrogate_mse": -1, "pinball": -1, "crossing": -1}

#: The cv route's scorings, by metric name (the CV estimators' ``scoring``).
_KRR_SCORING = {"rmse": "neg_mean_squared_error", "r2": "r2"}
_SISOKR_SCORING = {"surrogate_mse": "surrogate", "f1_samples": "f1_samples",
                   "kernel_loss": "kernel_loss"}


@dataclasses.dataclass
class Selection:
    """The outcome of :func:`select`.

    Attributes
    ----------
    model : estimator
        Fitted on all rows at the chosen values (saved in its store when it has one).
    table : list of dict
        One row per candidate: ``gamma`` (when a grid was given), ``lam``, ``rank`` (SISOKR with
        ranks), ``score`` (the metric on the held-out rows, or the CV mean) and, for cv,
        ``std``.
    best : dict
        The chosen values (same keys as a table row, without the scores).
    metric : str
        The metric's name (cv: the CV estimator's scoring, e.g. ``neg_mean_squared_error``).
    greater_is_better : bool
    route : {"cv", "validation"}
    """

    model: Any
    table: list[dict]
    best: dict
    metric: str
    greater_is_better: bool
    route: str


def check_selection(*, cv=None, validation=None, metric=None, gammas=None,
                    argument: str = "select") -> None:
    """Validate the arguments of :func:`select` (``ValueError`` naming ``argument.key``)."""
    if (cv is None) == (validation is None):
        raise ValueError(f"{argument}: give exactly one of cv (folds, e.g. cv = 5) or "
                         f"validation (a held-out fraction, e.g. validation = 0.2)")
    if cv is not None and (isinstance(cv, bool) or not isinstance(cv, numbers.Integral)
                           or cv < 2):
        raise ValueError(f"{argument}.cv: expected an integer ≥ 2 (number of folds), got {cv!r}")
    if validation is not None and (isinstance(validation, bool)
                                   or not isinstance(validation, numbers.Real)
                                   or not 0.0 < float(validation) < 1.0):
        raise ValueError(f"{argument}.validation: expected a fraction in (0, 1), got "
                         f"{validation!r}")
    if metric is not None:
        if not isinstance(metric, str):
            raise ValueError(f"{argument}.metric: expected a metric name, got {metric!r}")
        check_metrics([metric], argument=f"{argument}.metric")
    if gammas is not None:
        if (not isinstance(gammas, (list, tuple)) or not gammas
                or any(isinstance(g, bool) or not isinstance(g, numbers.Real) or not g > 0
                       or not np.isfinite(g) for g in gammas)):
            raise ValueError(f"{argument}.gammas: expected a non-empty list of positive numbers, "
                             f"got {gammas!r}")


def _kernel_param(model) -> str:
    name = getattr(type(model), "_standardized", None)
    if not name:
        raise ValueError(f"select.gammas: {type(model).__name__} has no input kernel to vary")
    return name


def with_gamma(kernel, gamma: float):
    """A copy of ``kernel`` with width ``gamma`` (through :class:`Standardized`)."""
    from .kernels import Standardized

    if isinstance(kernel, Standardized):
        return Standardized(with_gamma(kernel.kernel, gamma), kernel.mean, kernel.scale)
    params = kernel.get_params(deep=False) if hasattr(kernel, "get_params") else {}
    if "gamma" not in params:
        raise ValueError(f"select.gammas: the input kernel {kernel!r} has no width gamma")
    return type(kernel)(**{**params, "gamma": float(gamma)})


def _grid(value) -> list:
    if value is None:
        return [None]
    return list(value) if isinstance(value, (list, tuple, np.ndarray)) else [value]


def _default_metric(model) -> str:
    if hasattr(model, "quantiles"):
        return "pinball"
    if "output_kernel" in model.get_params(deep=False):
        return "surrogate_mse"
    return "rmse"


def _take(A, idx: np.ndarray):
    if isinstance(A, np.ndarray) or hasattr(A, "tocsr"):
        return A[idx]
    import dask.array as da

    return da.asarray(A)[idx]


def select(model, X, Y, *, cv: int | None = None, validation: float | None = None,
           metric: str | None = None, gammas=None, random_state: int = 0) -> Selection:
    """Choose λ (the model's ``lam`` grid), the rank (SISOKR's ``rank`` grid) and optionally
    the input kernel's γ, then fit on all rows at the chosen values.

    Parameters
    ----------
    model : unfitted estimator
        SketchedKRR, SISOKR, SketchedRegressor or SketchedQuantileRegressor; its ``lam`` (and
        ``rank``) hold the grids. Its ``store`` receives the final model.
    X, Y : arrays of shape (n, d) and (n, t)
    cv : int, optional
        Folds of the one-pass cross-validation (SketchedKRR, SISOKR).
    validation : float, optional
        Fraction of rows held out (any model).
    metric : str, optional
        A name of :data:`~distsketch.metrics.METRICS`. Default: ``rmse`` (regression),
        ``surrogate_mse`` (SISOKR), ``pinball`` (quantiles).
    gammas : sequence of float, optional
        Widths of the input kernel to try (one pass each).
    random_state : int
        Seed of the hold-out split (the cv route's folds are contiguous).

    Returns
    -------
    Selection
    """
    check_selection(cv=cv, validation=validation, metric=metric, gammas=gammas)
    metric = metric or _default_metric(model)
    check_metrics([metric], model=_Probe(model), argument="select.metric")
    kparam = _kernel_param(model) if gammas is not None else None
    if cv is not None:
        return _select_cv(model, X, Y, cv=int(cv), metric=metric, gammas=gammas, kparam=kparam)
    return _select_validation(model, X, Y, fraction=float(validation), metric=metric,
                              gammas=gammas, kparam=kparam, random_state=random_state)


class _Probe:
    """Stands for the fitted model in :func:`check_metrics` before the fit: the attributes a
    metric's ``applies`` looks for are those the fitted model will have."""

    def __init__(self, model):
        params = model.get_params(deep=False)
        if "output_kernel" in params:
            self.output_kernel_ = params["output_kernel"]
        if "quantiles" in params:
            self.quantiles_ = params["quantiles"]
        self._name = type(model).__name__

    def __repr__(self):
        return self._name


# --------------------------------------------------------------------------- cv route


def _cv_estimator(model, metric: str, folds: int):
    from .cv import SISOKRCV, SketchedKRRCV
    from .models import SISOKR, SketchedKRR

    p = model.get_params(deep=False)
    common = dict(cv=folds, random_state=p.get("random_state"), options=p.get("options"))
    if isinstance(model, SketchedKRR):
        if metric not in _KRR_SCORING:
            raise ValueError(f"select.metric: cross-validation from one pass scores SketchedKRR "
                             f"by {sorted(_KRR_SCORING)}; for {metric!r} use select.validation")
        if p["sketch"] is None:
            raise ValueError("select.cv: exact KRR (no [model.sketch]) is not cross-validated "
                             "from one pass; use select.validation, or give a sketch")
        extra = {}
        if "fit_intercept" in SketchedKRRCV().get_params(deep=False):
            extra["fit_intercept"] = p.get("fit_intercept", True)
        return SketchedKRRCV(p["kernel"], sketch=p["sketch"], lams=_grid(p["lam"]),
                             scoring=_KRR_SCORING[metric], **extra, **common), "kernel"
    if isinstance(model, SISOKR):
        if metric not in _SISOKR_SCORING:
            raise ValueError(f"select.metric: cross-validation from one pass scores SISOKR by "
                             f"{sorted(_SISOKR_SCORING)}; for {metric!r} use select.validation")
        if p["input_sketch"] is None or p["output_sketch"] is None:
            raise ValueError("select.cv: SISOKR is cross-validated from one pass only with both "
                             "sides sketched ([model.input_sketch] and [model.output_sketch]); "
                             "otherwise use select.validation")
        ranks = p.get("rank")
        return SISOKRCV(p["input_kernel"], p["output_kernel"], input_sketch=p["input_sketch"],
                        output_sketch=p["output_sketch"], lams=_grid(p["lam"]),
                        ranks=None if ranks is None else _grid(ranks),
                        scoring=_SISOKR_SCORING[metric], **common), "input_kernel"
    raise ValueError(f"select.cv: cross-validation from one pass exists for SketchedKRR and "
                     f"SISOKR; for {type(model).__name__} use select.validation = 0.2")


def _select_cv(model, X, Y, *, cv, metric, gammas, kparam) -> Selection:
    est, kname = _cv_estimator(model, metric, cv)
    store = model.get_params(deep=False).get("store")
    table: list[dict] = []
    best = None
    for g in _grid(gammas):
        # without a γ grid the one fit is the final model (into the store); with one, the
        # trials keep nothing on disk and the chosen γ is refitted into the store
        trial = _clone(est).set_params(
            store=store if gammas is None else None,
            **({kname: with_gamma(getattr(model, kname), g)} if g is not None else {}))
        trial.fit(X, Y)
        res = trial.cv_results_
        for i, params in enumerate(res["params"]):
            row = ({"gamma": float(g)} if g is not None else {}) | {"lam": float(params["lam"])}
            if params.get("rank") is not None:
                row["rank"] = params["rank"]
            row.update(score=float(res["mean_test_score"][i]),
                       std=float(res["std_test_score"][i]))
            table.append(row)
        if best is None or trial.best_score_ > best[0]:
            best = (trial.best_score_, g, trial)
        logger.info("select: γ = %s, best CV %s %.6g at %s", g, trial.scoring, trial.best_score_,
                    trial.best_params_)
    _, g_best, fitted = best
    if store is not None and gammas is not None:
        fitted = _clone(est).set_params(
            **{kname: with_gamma(getattr(model, kname), g_best)}, store=store).fit(X, Y)
    chosen = ({"gamma": float(g_best)} if g_best is not None else {}) | dict(fitted.best_params_)
    return Selection(fitted, table, chosen, est.scoring, True, "cv")


def _clone(est):
    return type(est)(**est.get_params(deep=False))


# --------------------------------------------------------------------------- validation route


def split_rows(n: int, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Training and held-out row indices: row ``i`` is held out when its seeded hash falls in
    the lowest ``fraction`` of the 64-bit range (a pure function of ``(seed, i)``)."""
    h = row_hash(seed, np.arange(n))
    held = h < np.uint64(int(fraction * 2.0**64) if fraction < 1 else 2**64 - 1)
    val, train = np.flatnonzero(held), np.flatnonzero(~held)
    if len(val) == 0 or len(train) == 0:
        raise ValueError(f"select.validation: {fraction} of {n} rows leaves an empty "
                         f"{'held-out' if len(val) == 0 else 'training'} part")
    return train, val


def _select_validation(model, X, Y, *, fraction, metric, gammas, kparam, random_state
                       ) -> Selection:
    n = X.shape[0]
    train, val = split_rows(n, fraction, random_state)
    Xtr, Ytr, Xva, Yva = _take(X, train), _take(Y, train), _take(X, val), _take(Y, val)
    if hasattr(Yva, "compute"):
        Yva = Yva.compute()
    Yva = np.asarray(Yva.toarray() if hasattr(Yva, "toarray") else Yva, dtype=np.float64)
    sign = METRIC_ORIENTATION.get(metric, -1)
    m = METRICS[metric]
    params = model.get_params(deep=False)
    lams = _grid(params.get("lam"))
    ranks = _grid(params.get("rank")) if "rank" in params else [None]
    table: list[dict] = []
    best = None
    for g in _grid(gammas):
        trial = _clone(model).set_params(store=None, **(
            {kparam: with_gamma(params[kparam], g)} if g is not None else {}))
        trial.fit(Xtr, Ytr)
        for lam in lams:
            trial.set_lam(lam)
            for rank in ranks:
                if rank is not None:
                    trial.set_rank(rank)
                pred = np.asarray(trial.predict(Xva)) if m.needs_prediction else None
                score = float(m.func(trial, Xva, Yva, pred))
                row = ({"gamma": float(g)} if g is not None else {}) | {"lam": float(lam)} | (
                    {"rank": rank} if rank is not None else {})
                row["score"] = score
                table.append(row)
                if best is None or sign * score > sign * best[0]:
                    best = (score, {k: v for k, v in row.items() if k != "score"})
                logger.info("select: %s → %s %.6g", row, metric, score)
    chosen = best[1]
    final_params: dict[str, Any] = {"lam": [chosen["lam"]] + [l for l in lams
                                                               if l != chosen["lam"]]
                                    if len(lams) > 1 else chosen["lam"]}
    if "rank" in chosen:
        final_params["rank"] = chosen["rank"]
    if "gamma" in chosen:
        final_params[kparam] = with_gamma(params[kparam], chosen["gamma"])
    final = _clone(model).set_params(**final_params).fit(X, Y)
    return Selection(final, table, chosen, metric, sign > 0, "validation")
