"""Model selection over λ (and rank, the input kernel, and a small grid of its widths γ) for the
CLI's ``[select]`` table and for scripts: K-fold cross-validation from one pass, or a hold-out
split.

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

The input kernel itself can be a candidate, as ``kernel`` in a scikit-learn ``GridSearchCV``
param grid: ``kernels = [...]`` lists kernels (a name, a config table, a distsketch kernel),
each one replacing the model's input kernel (inside its standardisation, when it has one), and
``gammas`` crosses every candidate that has a ``gamma`` with the γ grid.

Cost: the cv route costs one pass per kernel entry — the γ grid of an entry is scored in the
same pass (``gammas=`` of the CV estimators: each row block read once, its kernel block
computed per γ) — and with more than one entry the chosen candidate is refitted (one more
pass); the validation route costs one pass per input-kernel candidate (each kernel × each of
its γ) plus the refit.
"""

from __future__ import annotations

import dataclasses
import logging
import numbers
from collections.abc import Mapping
from typing import Any

import numpy as np

from ._hashing import row_hash
from .metrics import METRICS, check_metrics

__all__ = ["Selection", "select", "check_selection", "check_kernels", "METRIC_ORIENTATION"]

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
        One row per candidate: ``kernel`` (when ``kernels`` was given: a short description of
        the input kernel, e.g. ``"gaussian"``, ``"linear"``, ``"polynomial(degree=2, gamma=1.0,
        coef0=1.0)"``; ``gamma`` in its own column when ``gammas`` was given), ``gamma`` (when
        ``gammas`` was given; None for a kernel without one), ``lam``, ``rank`` (SISOKR with
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


def check_selection(*, cv=None, validation=None, metric=None, gammas=None, kernels=None,
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
    if kernels is not None:
        check_kernels(kernels, gammas=gammas, argument=argument)


_KERNELS_FIX = ('a non-empty list of kernels: names ("linear"), tables ({name = "gaussian", '
                'gamma = 0.1}) or distsketch kernels')


def check_kernels(kernels, *, gammas=None, argument: str = "select") -> list:
    """The candidate input kernels of ``kernels`` (validated, before any work).

    Parameters
    ----------
    kernels : sequence
        Each entry a kernel name, a config mapping ``{"name": ..., **params}`` (TOML: a table or
        an inline table), a :class:`~distsketch.kernels.Kernel` or a callable (see
        :func:`~distsketch.kernels.check_kernel`).
    gammas : sequence of float, optional
        The γ grid; it applies to the entries with a ``gamma`` parameter.
    argument : str
        Prefix of the error messages.

    Returns
    -------
    list of Kernel
        One per entry, in order.

    Raises
    ------
    ValueError
        Naming ``argument.kernels[i]`` and the fix: not a list, an empty list, an unknown name
        or parameter, a config table that gives ``gamma`` while ``gammas`` is given (two grids
        for one parameter), ``gammas`` with no entry that has a ``gamma``, or two entries that
        are the same candidate.
    """
    from .kernels import check_kernel

    key = f"{argument}.kernels"
    if isinstance(kernels, (str, bytes)) or not isinstance(kernels, (list, tuple)) or not kernels:
        raise ValueError(f"{key}: expected {_KERNELS_FIX}, got {kernels!r}")
    out = []
    for i, entry in enumerate(kernels):
        if isinstance(entry, Mapping) and "name" not in entry:
            raise ValueError(f"{key}[{i}].name: missing kernel name (e.g. {{name = \"linear\"}}"
                             f" or the bare name \"linear\")")
        try:
            k = check_kernel(entry, name=f"{key}[{i}]")
        except ValueError as exc:
            raise ValueError(str(exc).replace("kernel_from_config: ", "")) from None
        if gammas is not None and isinstance(entry, Mapping) and "gamma" in entry:
            raise ValueError(f"{key}[{i}].gamma: given here and by {argument}.gammas; drop it "
                             f"here (the gammas grid applies to this kernel) or drop "
                             f"{argument}.gammas and list one kernel per width")
        out.append(k)
    if gammas is not None and not any(_has_gamma(k) for k in out):
        raise ValueError(f"{argument}.gammas: none of {key} has a width gamma "
                         f"({[_describe(k, False) for k in out]}); drop {argument}.gammas or "
                         f"add a kernel with one (gaussian, laplacian, gaussian_tanimoto, "
                         f"polynomial)")
    seen: dict = {}
    for i, k in enumerate(out):
        for g in (gammas if gammas is not None and _has_gamma(k) else [None]):
            cand = with_gamma(k, g) if g is not None else k
            ident = _identity(cand)
            if ident in seen:
                raise ValueError(f"{key}[{i}]: the same candidate as {key}[{seen[ident]}] "
                                 f"({_describe(cand, False)}); list each kernel once")
            seen[ident] = i
    return out


def _has_gamma(kernel) -> bool:
    from .kernels import Standardized

    if isinstance(kernel, Standardized):
        return _has_gamma(kernel.kernel)
    params = kernel.get_params(deep=False) if hasattr(kernel, "get_params") else {}
    return "gamma" in params


def _identity(kernel):
    try:
        key = kernel._key()
        hash(key)
        return key
    except TypeError:  # an unhashable parameter: by object
        return id(kernel)


def _describe(kernel, gamma_column: bool) -> str:
    """A short description of a candidate kernel: its name and parameters (``gamma`` left out
    when it has its own column; a standardisation wrapper left out)."""
    from .kernels import Standardized, kernel_description

    if isinstance(kernel, Standardized):
        return _describe(kernel.kernel, gamma_column)
    cfg = dict(kernel_description(kernel))
    name = cfg.pop("name", None) or cfg.pop("callable", "?")
    if gamma_column:
        cfg.pop("gamma", None)
    return name + (f"({', '.join(f'{k}={v!r}' for k, v in cfg.items())})" if cfg else "")


def _kernel_param(model, key: str) -> str:
    name = getattr(type(model), "_standardized", None)
    if not name:
        raise ValueError(f"select.{key}: {type(model).__name__} has no input kernel to vary")
    return name


def _inside(base, kernel):
    """``kernel`` on the inputs of ``base``: wrapped in ``base``'s standardisation when ``base``
    has one and ``kernel`` has none."""
    from .kernels import Standardized

    if isinstance(base, Standardized) and not isinstance(kernel, Standardized):
        return Standardized(kernel, base.mean, base.scale)
    return kernel


def _candidates(model, *, kernels, gammas) -> list[tuple[dict, Any]]:
    """The input-kernel candidates, in table order: ``(row prefix, input kernel)`` pairs; one
    ``({}, None)`` (the model's own kernel) without ``kernels`` and ``gammas``."""
    if kernels is None and gammas is None:
        return [({}, None)]
    base = model.get_params(deep=False)[_kernel_param(
        model, "kernels" if kernels is not None else "gammas")]
    if kernels is None:
        return [({"gamma": float(g)}, with_gamma(base, g)) for g in gammas]
    out = []
    for k in check_kernels(kernels, gammas=gammas):
        k = _inside(base, k)
        for g in (gammas if gammas is not None and _has_gamma(k) else [None]):
            cand = with_gamma(k, g) if g is not None else k
            row = {"kernel": _describe(cand, gammas is not None)}
            if gammas is not None:
                row["gamma"] = None if g is None else float(g)
            out.append((row, cand))
    return out


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
    """Rows ``idx`` of numpy, scipy.sparse, pandas (by position, names kept), dask arrays and
    dask data frames (as a dask array: the final fit on every row records the names)."""
    if isinstance(A, np.ndarray) or hasattr(A, "tocsr"):
        return A[idx]
    import dask
    import dask.array as da

    if dask.is_dask_collection(A):
        if hasattr(A, "to_dask_array"):  # a dask data frame or series
            A = A.to_dask_array(lengths=True)
    elif hasattr(A, "iloc"):  # pandas
        return A.iloc[idx]
    return da.asarray(A)[idx]


def select(model, X, Y, *, cv: int | None = None, validation: float | None = None,
           metric: str | None = None, gammas=None, kernels=None,
           random_state: int = 0) -> Selection:
    """Choose λ (the model's ``lam`` grid), the rank (SISOKR's ``rank`` grid) and optionally
    the input kernel (``kernels``) and its γ (``gammas``), then fit on all rows at the chosen
    values.

    The candidates are the product kernel × γ × λ (× rank): for every input-kernel candidate
    (every entry of ``kernels``, and with ``gammas`` every γ of an entry that has a ``gamma``)
    one fit scores the whole λ (rank) path — the cv route from that fit's per-fold sums (**one
    pass per kernel entry**, its γ grid included: the widths share the pass), the validation
    route on the held-out rows (one pass per kernel × γ) — and the best candidate is refitted
    on all rows (one more pass when the cv route had more than one kernel entry and the model
    has a store; the validation route always refits).

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
        Values of the input kernel's ``gamma`` to try (a width for gaussian / laplacian /
        gaussian_tanimoto, the scale of ``⟨x, x'⟩`` for polynomial). Without ``kernels``, the
        model's input kernel must have one. With ``kernels``, the grid applies to each entry
        that has a ``gamma`` (replacing its own) and the others are tried once; an entry given
        as a config table with its own ``gamma`` is refused (two grids for one parameter), and
        so is a grid that applies to no entry.
    kernels : sequence, optional
        Input kernels to try, in place of the model's (scikit-learn's ``GridSearchCV`` with
        ``{"kernel": [...]}``): names (``"linear"``), config mappings (``{"name":
        "polynomial", "degree": 2}``), distsketch kernels or callables, as
        :func:`~distsketch.kernels.check_kernel` takes them. When the model's input kernel is a
        :class:`~distsketch.kernels.Standardized` (``[data] standardize = true``,
        :func:`distsketch.standardized`), each entry is applied to the same standardised
        inputs (unless it is a ``Standardized`` itself). The table's ``kernel`` column
        describes each. Validated before any work (:func:`check_kernels`). A ``linear`` kernel
        with ``fit_intercept=True`` on standardised inputs is ridge regression on the raw
        features.
    random_state : int
        Seed of the hold-out split (the cv route's folds are contiguous).

    Returns
    -------
    Selection

    Examples
    --------
    A Gaussian kernel at three widths against ridge regression on the raw features (four
    passes, plus the refit's)::

        select(SketchedKRR(standardized(Gaussian(), X), sketch=SubSampling(1000),
                           lam=[1e-3, 1e-5, 1e-7]),
               X, y, cv=5, kernels=["gaussian", "linear"], gammas=[0.01, 0.1, 1.0])
    """
    check_selection(cv=cv, validation=validation, metric=metric, gammas=gammas,
                    kernels=kernels)
    metric = metric or _default_metric(model)
    check_metrics([metric], model=_Probe(model), argument="select.metric")
    candidates = _candidates(model, kernels=kernels, gammas=gammas)
    if cv is not None:
        return _select_cv(model, X, Y, cv=int(cv), metric=metric, candidates=candidates)
    kparam = _kernel_param(model, "kernels") if candidates[0][1] is not None else None
    return _select_validation(model, X, Y, fraction=float(validation), metric=metric,
                              candidates=candidates, kparam=kparam, random_state=random_state)


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
        extra = {}
        if "fit_intercept" in SketchedKRRCV().get_params(deep=False):
            extra["fit_intercept"] = p.get("fit_intercept", True)
        return SketchedKRRCV(p["kernel"], sketch=p["sketch"], lams=_grid(p["lam"]),
                             scoring=_KRR_SCORING[metric], **extra, **common), "kernel"
    if isinstance(model, SISOKR):
        if metric not in _SISOKR_SCORING:
            raise ValueError(f"select.metric: cross-validation from one pass scores SISOKR by "
                             f"{sorted(_SISOKR_SCORING)}; for {metric!r} use select.validation")
        ranks = p.get("rank")
        return SISOKRCV(p["input_kernel"], p["output_kernel"], input_sketch=p["input_sketch"],
                        output_sketch=p["output_sketch"], lams=_grid(p["lam"]),
                        ranks=None if ranks is None else _grid(ranks),
                        scoring=_SISOKR_SCORING[metric], **common), "input_kernel"
    raise ValueError(f"select.cv: cross-validation from one pass exists for SketchedKRR and "
                     f"SISOKR; for {type(model).__name__} use select.validation = 0.2")


def _width_groups(candidates) -> list[list[tuple[dict, Any]]]:
    """Consecutive candidates that differ only in their width γ (one kernel entry × the γ
    grid): one CV trial each, every width scored in the same pass (``gammas=`` of the CV
    estimators: each row block read once)."""
    groups: list[list[tuple[dict, Any]]] = []
    for prefix, kernel in candidates:
        g = prefix.get("gamma")
        if (groups and g is not None and groups[-1][0][0].get("gamma") is not None
                and {k: v for k, v in groups[-1][0][0].items() if k != "gamma"}
                == {k: v for k, v in prefix.items() if k != "gamma"}):
            groups[-1].append((prefix, kernel))
        else:
            groups.append([(prefix, kernel)])
    return groups


def _select_cv(model, X, Y, *, cv, metric, candidates) -> Selection:
    """The cv route. A CV score not resolved above its rounding error bound is NaN in the
    table and never chosen (:func:`distsketch.cv.resolved`); an entry of ``kernels`` whose
    every point is unresolved is skipped (its rows NaN), and with every entry unresolved the
    selection fails (:class:`~distsketch.cv.UnresolvedScoresError`)."""
    from .cv import UnresolvedScoresError

    est, kname = _cv_estimator(model, metric, cv)
    store = model.get_params(deep=False).get("store")
    groups = _width_groups(candidates)
    single = len(groups) == 1
    table: list[dict] = []
    best = None
    for group in groups:
        # one trial: its fit is the final model (into the store); several: the trials keep
        # nothing on disk and the chosen one is refitted into the store
        widths = [float(p["gamma"]) for p, _ in group] if len(group) > 1 else None
        prefixes = {float(p["gamma"]): p for p, _ in group} if widths else None
        kernel = group[0][1]
        trial = _clone(est).set_params(store=store if single else None,
                                       **({kname: kernel} if kernel is not None else {}),
                                       **({"gammas": widths} if widths else {}))
        try:
            trial.fit(X, Y)
        except UnresolvedScoresError:
            if single:
                raise
            # every point of this entry unresolved (NaN rows); the other entries may choose
            logger.warning("select: %s: no CV score resolved above its rounding bound",
                           group[0][0] or kernel)
            trial.best_score_ = None
        res = trial.cv_results_
        for i, params in enumerate(res["params"]):
            prefix = prefixes[float(params["gamma"])] if widths else group[0][0]
            row = dict(prefix) | {"lam": float(params["lam"])}
            if params.get("rank") is not None:
                row["rank"] = params["rank"]
            row.update(score=float(res["mean_test_score"][i]),
                       std=float(res["std_test_score"][i]))
            table.append(row)
        if trial.best_score_ is None:
            continue
        if widths:
            at = float(trial.best_params_["gamma"])
            best_prefix, best_kernel = prefixes[at], next(k for p, k in group
                                                          if float(p["gamma"]) == at)
        else:
            best_prefix, best_kernel = group[0]
        if best is None or trial.best_score_ > best[0]:
            best = (trial.best_score_, best_prefix, best_kernel, trial)
        logger.info("select: %s best CV %s %.6g at %s", best_prefix or "", trial.scoring,
                    trial.best_score_, trial.best_params_)
    if best is None:
        raise UnresolvedScoresError(
            f"select: no candidate has a CV score resolved above its rounding error bound "
            f"({len(table)} candidates, every one NaN); use larger λ, narrower kernel widths "
            f"or EngineOptions(block_dtype='float64')")
    _, prefix, kernel, fitted = best
    if store is not None and not single:
        fitted = _clone(est).set_params(**{kname: kernel}, store=store).fit(X, Y)
    chosen = dict(prefix) | {k: v for k, v in fitted.best_params_.items() if k != "gamma"}
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


def _select_validation(model, X, Y, *, fraction, metric, candidates, kparam, random_state
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
    for prefix, kernel in candidates:
        trial = _clone(model).set_params(store=None, **(
            {kparam: kernel} if kernel is not None else {}))
        trial.fit(Xtr, Ytr)
        for lam in lams:
            trial.set_lam(lam)
            for rank in ranks:
                if rank is not None:
                    trial.set_rank(rank)
                pred = np.asarray(trial.predict(Xva)) if m.needs_prediction else None
                score = float(m.func(trial, Xva, Yva, pred))
                row = dict(prefix) | {"lam": float(lam)} | (
                    {"rank": rank} if rank is not None else {})
                row["score"] = score
                table.append(row)
                if best is None or sign * score > sign * best[0]:
                    best = (score, {k: v for k, v in row.items() if k != "score"}, kernel)
                logger.info("select: %s → %s %.6g", row, metric, score)
    _, chosen, kernel = best
    final_params: dict[str, Any] = {"lam": [chosen["lam"]] + [l for l in lams
                                                               if l != chosen["lam"]]
                                    if len(lams) > 1 else chosen["lam"]}
    if "rank" in chosen:
        final_params["rank"] = chosen["rank"]
    if kernel is not None:
        final_params[kparam] = kernel
    final = _clone(model).set_params(**final_params).fit(X, Y)
    return Selection(final, table, chosen, metric, sign > 0, "validation")
