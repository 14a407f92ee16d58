"""Model selection over λ (and rank, the input kernel, and a small grid of its widths γ) for the
CLI's ``[select]`` table and for scripts: K-fold cross-validation or a hold-out split, every
chosen value at an edge of its grid named in a
:class:`~distsketch.model_selection.GridEdgeWarning`.

Three routes:

- ``cv = K``, SketchedKRR and SISOKR with a metric their CV estimators score —
  :class:`~distsketch.SketchedKRRCV` / :class:`~distsketch.SISOKRCV`: every fold × every λ
  (× every rank) × every input-kernel candidate scored from per-fold sums of **one pass**
  (each candidate kernel × width computed per row block over the same landmarks and sketch:
  the CV estimators' ``kernels=`` and ``gammas=``), the model refitted on all rows from the
  same sums (see docs/design/model-selection.md, "Cross-validation from one pass").
- ``cv = K``, any other model or metric (SketchedRegressor, SketchedQuantileRegressor;
  SketchedKRR scored by ``mae``, …): per candidate kernel and per fold, one fit on the
  fold's training rows with the whole λ path (``set_lam`` / ``set_rank``), each setting scored
  on the fold's rows; the score is the mean over the folds. The sketch is drawn again for
  each fold from its training rows (same seed): the models accept no realised sketch from
  outside, so the fold scores include the sketch's variability, as scikit-learn's
  ``cross_val_score`` of a Nyström pipeline would. Cost: K fits per candidate, plus the refit.
- ``validation = f`` — any model: rows split by a seeded hash of their index (a fraction ``f``
  held out, independent of chunking), the model fitted once on the rest with its whole λ path,
  each candidate scored on the held-out rows with a metric of
  :data:`distsketch.metrics.METRICS`, then refitted on all rows at the chosen values.

Folds are shuffled by default: row ``i`` in fold ``splitmix64(seed, i) mod K`` (the fold spec
``"K:seed"`` of ``distsketch.engine.sums.fold_ids``; ``seed = random_state``), so a file
sorted by a column gives folds that each span it; ``shuffle=False`` gives contiguous folds.

The input kernel itself can be a candidate, as ``kernel`` in a scikit-learn ``GridSearchCV``
param grid: ``kernels = [...]`` lists kernels (a name, a config table, a distsketch kernel),
each one replacing the model's input kernel (inside its standardisation, when it has one), and
``gammas`` crosses every candidate that has a ``gamma`` with the γ grid.

Cost: the one-pass cv route costs one pass for every kernel × γ (one per kernel entry when
the sketch depends on the kernel, e.g. ``LeverageScores``), plus the refit's pass when the
model has a store and there were several candidates; the other routes one fit per candidate
(kernel × γ) per split, plus the refit.
"""

from __future__ import annotations

import dataclasses
import logging
import numbers
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from .._hashing import row_hash
from ..metrics import METRICS, check_metrics
from .kernel_grid import (
    check_kernels,
    describe_kernel,
    has_gamma,
    inside_standardization,
    with_gamma,
)

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
        Whether the metric's larger values are better.
    route : {"cv", "validation"}
        How the candidates were scored.
    """

    model: Any
    table: list[dict]
    best: dict
    metric: str
    greater_is_better: bool
    route: str


def check_selection(*, cv: int | None = None, validation: float | None = None,
                    metric: str | None = None, gammas: Sequence[float] | None = None,
                    kernels: Sequence | None = None, argument: str = "select") -> None:
    """Validate the arguments of :func:`select` before any work.

    Parameters
    ----------
    cv, validation, metric, gammas, kernels
        As for :func:`select`.
    argument : str, default "select"
        Prefix of the names in error messages (``argument.key``).

    Raises
    ------
    ValueError
        An invalid argument, naming ``argument.key``.
    """
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


def _kernel_param(model, key: str) -> str:
    name = getattr(type(model), "_standardized", None)
    if not name:
        raise ValueError(f"select.{key}: {type(model).__name__} has no input kernel to vary")
    return name


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
        k = inside_standardization(base, k)
        for g in (gammas if gammas is not None and has_gamma(k) else [None]):
            cand = with_gamma(k, g) if g is not None else k
            row = {"kernel": describe_kernel(cand, gammas is not None)}
            if gammas is not None:
                row["gamma"] = None if g is None else float(g)
            out.append((row, cand))
    return out


def _grid(value) -> list:
    if value is None:
        return [None]
    return list(value) if isinstance(value, (list, tuple, np.ndarray)) else [value]


def _default_metric(model) -> str:
    if hasattr(model, "quantiles"):
        return "pinball"
    if "output_kernel" in model.get_params(deep=False):
        return "surrogate_mse"  # select() resolves SISOKR's default by _auto_metric first
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


def select(model: Any, X: Any, Y: Any, *, cv: int | None = None,
           validation: float | None = None, metric: str | None = None,
           gammas: Sequence[float] | None = None, kernels: Sequence | None = None,
           random_state: int = 0, shuffle: bool = True) -> Selection:
    """Choose λ (the model's ``lam`` grid), the rank (SISOKR's ``rank`` grid) and optionally
    the input kernel (``kernels``) and its γ (``gammas``), then fit on all rows at the chosen
    values.

    The candidates are the product kernel × γ × λ (× rank): every input-kernel candidate
    (every entry of ``kernels``, and with ``gammas`` every γ of an entry that has a ``gamma``)
    scores the whole λ (rank) path of a fit — the one-pass cv route from per-fold sums (**one
    pass for every kernel × γ**), the refit cv route from one fit per fold, the validation
    route on the held-out rows (one fit per kernel × γ) — and the best candidate is refitted
    on all rows (one more pass when the one-pass route had more than one candidate kernel and
    the model has a store; the other routes always refit).

    Parameters
    ----------
    model : unfitted estimator
        SketchedKRR, SISOKR, SketchedRegressor or SketchedQuantileRegressor; its ``lam`` (and
        ``rank``) hold the grids. Its ``store`` receives the final model.
    X : array-like of shape (n_samples, n_features)
        Training inputs.
    Y : array-like of shape (n_samples,) or (n_samples, n_targets)
        Training targets.
    cv : int, optional
        Folds of the cross-validation, any model (module notes: from one pass for SketchedKRR
        and SISOKR with their CV estimators' metrics, else one fit per fold).
    validation : float, optional
        Fraction of rows held out (any model).
    metric : str, optional
        A name of :data:`~distsketch.metrics.METRICS`. Default: ``rmse`` (regression),
        ``pinball`` (quantiles); SISOKR: the task's metric where decoding the scored rows is
        affordable (``distsketch.model_selection.scoring.auto_scoring``: ``f1_samples`` for
        binary outputs, else ``kernel_loss``), else ``surrogate_mse`` with a warning.
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
        describes each. Validated before any work
        (``distsketch.model_selection.kernel_grid.check_kernels``). A ``linear`` kernel
        with ``fit_intercept=True`` on standardised inputs is ridge regression on the raw
        features.
    random_state : int
        Seed of the hold-out split and of the shuffled folds.
    shuffle : bool, default True
        ``cv``: folds by a seeded hash of the row index (``fold_ids`` with the spec
        ``"K:random_state"``: the same rows for the same seed, whatever the chunking), so a
        file sorted by a column gives folds that each span its range. ``False``: contiguous
        folds (row ``i`` in fold ``⌊iK/n⌋``, the behaviour before shuffling was the default).

    Returns
    -------
    Selection
        The refitted model, the table of scores and the chosen values.

    Warns
    -----
    GridEdgeWarning
        Once per parameter whose chosen value is the smallest or largest of its grid
        (``model.lam``, ``select.gammas``, ``model.rank`` below the full rank), naming the
        value and the fix (``distsketch.model_selection.grid.grid_edges``).

    Examples
    --------
    λ and the Gaussian kernel's width by 3-fold cross-validation, from one pass per width:

    >>> import numpy as np
    >>> from distsketch import SketchedKRR
    >>> from distsketch.kernels import Gaussian
    >>> from distsketch.model_selection.select import select
    >>> from distsketch.sketches import SubSampling
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(-3, 3, size=(300, 1))
    >>> y = np.sin(2 * X[:, 0]) + 0.3 * rng.normal(size=300)
    >>> model = SketchedKRR(Gaussian(), sketch=SubSampling(60), random_state=0,
    ...                     lam=[1e-1, 1e-2, 1e-3, 1e-4, 1e-5])
    >>> selection = select(model, X, y, cv=3, gammas=[0.1, 1.0, 10.0])
    >>> selection.best
    {'gamma': 1.0, 'lam': 0.001}
    >>> selection.model.lam_
    0.001

    A Gaussian kernel at three widths against ridge regression on the raw features (one
    pass each)::

        select(SketchedKRR(standardized(Gaussian(), X), sketch=SubSampling(1000),
                           lam=[1e-3, 1e-5, 1e-7]),
               X, y, cv=5, kernels=["gaussian", "linear"], gammas=[0.01, 0.1, 1.0])
    """
    from .grid import GridEdgeWarning

    check_selection(cv=cv, validation=validation, metric=metric, gammas=gammas,
                    kernels=kernels)
    if not isinstance(shuffle, bool):
        raise ValueError(f"select.shuffle: expected true or false, got {shuffle!r}")
    if (isinstance(random_state, bool) or not isinstance(random_state, numbers.Integral)
            or random_state < 0):
        raise ValueError(f"select.seed: expected a non-negative integer, got {random_state!r}")
    candidates = _candidates(model, kernels=kernels, gammas=gammas)
    kparam = _kernel_param(model, "kernels") if candidates[0][1] is not None else None
    if metric is None and "output_kernel" in model.get_params(deep=False):
        # SISOKR: the task's metric where decoding is affordable
        # (distsketch.model_selection.scoring.auto_scoring), decided once for every candidate
        p = model.get_params(deep=False)
        metric = _auto_metric(
            model, Y, scored=X.shape[0] if cv is not None else X.shape[0] * float(validation),
            settings=len(candidates) * len(_grid(p.get("lam"))) * len(_grid(p.get("rank"))))
    metric = metric or _default_metric(model)
    check_metrics([metric], model=_Probe(model), argument="select.metric")
    one_pass = cv is not None and _one_pass_cv(model, metric)
    # the trials' own edge warnings would name their grids piecemeal (one kernel entry's): the
    # selection's edges are named once, below, for the chosen point
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", GridEdgeWarning)
        if cv is not None:
            folds = f"{int(cv)}:{int(random_state)}" if shuffle else str(int(cv))
            if one_pass:
                sel = _select_cv(model, X, Y, cv=folds, kernels=kernels, gammas=gammas,
                                 metric=metric, candidates=candidates)
            else:
                sel = _select_splits(model, X, Y, splits=fold_splits(X.shape[0], folds),
                                     metric=metric, candidates=candidates, kparam=kparam,
                                     route="cv")
        else:
            sel = _select_splits(model, X, Y,
                                 splits=[split_rows(X.shape[0], float(validation),
                                                    random_state)],
                                 metric=metric, candidates=candidates, kparam=kparam,
                                 route="validation")
    _warn_edges(model, sel, gammas)
    return sel


def _warn_edges(model, sel: Selection, gammas) -> None:
    """A :class:`~distsketch.model_selection.grid.GridEdgeWarning` per chosen value at an edge
    of its grid (``model.lam``, ``model.rank``, ``select.gammas``;
    :func:`distsketch.model_selection.grid.grid_edges`)."""
    from .grid import grid_edges, warn_edges

    params = model.get_params(deep=False)
    grids = {"lam": ("model.lam", _grid(params.get("lam"))),
             "gamma": ("select.gammas", list(gammas) if gammas is not None else None),
             "rank": ("model.rank", _grid(params.get("rank")) if "rank" in params else None)}
    op = getattr(sel.model, "operator_", None)
    warn_edges(grid_edges(sel.best, grids, prefix="select",
                          full_rank=None if op is None else int(op.shape[1])), stacklevel=3)


def _auto_metric(model, Y, *, scored: float, settings: int) -> str:
    """SISOKR's default metric on the hold-out and refit routes:
    :func:`distsketch.model_selection.scoring.auto_scoring`'s rule (``f1_samples`` for binary
    outputs, else ``kernel_loss``, where decoding the ``scored`` rows against the unique
    training outputs at every grid point is within the model's
    ``options.tuning.auto_decode_budget``; else ``surrogate_mse`` with its warning)."""
    import dask

    from ..tuning import check_tuning
    from .scoring import auto_scoring, is_binary

    if dask.is_dask_collection(Y):
        Y = Y.compute()
    Yd = Y.toarray() if hasattr(Y, "toarray") else np.asarray(Y, dtype=np.float64)
    Yd = Yd.reshape(len(Yd), -1)
    params = model.get_params(deep=False)
    sketch = params.get("output_sketch")
    m_y = int(getattr(sketch, "m", None) or len(Yd))
    budget = check_tuning(getattr(params.get("options"), "tuning", None)).auto_decode_budget
    scoring, message = auto_scoring(binary=is_binary(Yd), n=int(scored),
                                    n_unique=len(np.unique(Yd, axis=0)), settings=settings,
                                    m_y=m_y, budget=budget)
    if message:
        warnings.warn(message.replace("scoring='auto'", "select.metric (default)").replace(
            "pass scoring=", "give select.metric = "), UserWarning, stacklevel=4)
    return {"surrogate": "surrogate_mse"}.get(scoring, scoring)


def fold_splits(n: int, folds: str) -> list[tuple[np.ndarray, np.ndarray]]:
    """``(training rows, validation rows)`` of every fold of the fold spec ``folds`` (``"K"``:
    contiguous, ``"K:seed"``: a seeded hash of the row index; the folds of the one-pass CV
    estimators, :func:`distsketch.engine.sums.fold_ids`)."""
    from ..engine.sums import fold_ids

    f = fold_ids(0, n, n, folds)
    K = int(folds.partition(":")[0])
    out = []
    for k in range(K):
        train, val = np.flatnonzero(f != k), np.flatnonzero(f == k)
        if len(val) == 0 or len(train) == 0:
            raise ValueError(f"select.cv: fold {k} of {K} has {len(val)} of the {n} rows; use "
                             f"fewer folds")
        out.append((train, val))
    return out


def _one_pass_cv(model, metric: str) -> bool:
    """Whether ``model`` × ``metric`` has a one-pass CV estimator (else: refits per fold)."""
    from ..models.krr import SketchedKRR
    from ..models.sisokr import SISOKR

    if isinstance(model, SketchedKRR):
        return metric in _KRR_SCORING
    if isinstance(model, SISOKR):
        return metric in _SISOKR_SCORING
    return False


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
    from ..models.krr import SketchedKRR
    from ..models.sisokr import SISOKR
    from .krr_cv import SketchedKRRCV
    from .sisokr_cv import SISOKRCV

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


def _select_cv(model, X, Y, *, cv, metric, candidates, kernels=None, gammas=None
               ) -> Selection:
    """The cv route. A CV score not resolved above its rounding error bound is NaN in the
    table and never chosen (:func:`distsketch.model_selection.scoring.resolved`); with every
    point unresolved the selection fails
    (:class:`~distsketch.model_selection.scoring.UnresolvedScoresError`).

    With ``kernels``, every kernel × width is scored in **one pass** (the CV estimators'
    ``kernels=``: the same landmarks and sketch), unless the sketch depends on the kernel
    (``LeverageScores``): then one pass per kernel entry (its widths sharing it), an entry
    whose every point is unresolved skipped (its rows NaN)."""
    est, kname = _cv_estimator(model, metric, cv)
    store = model.get_params(deep=False).get("store")
    sketch = model.get_params(deep=False).get("sketch" if kname == "kernel" else "input_sketch")
    if kernels is not None and not getattr(sketch, "needs_kernel", False):
        return _select_cv_one_pass(est, kname, X, Y, store=store, kernels=kernels,
                                   gammas=gammas, candidates=candidates)
    return _select_cv_groups(est, kname, X, Y, store=store, candidates=candidates)


def _select_cv_one_pass(est, kname, X, Y, *, store, kernels, gammas, candidates) -> Selection:
    """Every input-kernel candidate in one CV estimator (one pass); the chosen kernel refitted
    into the model's store (one more pass) when it has one."""
    trial = _clone(est).set_params(store=None, kernels=[k for _, k in _entries(candidates)],
                                   gammas=gammas).fit(X, Y)
    res = trial.cv_results_
    table = []
    for i, params in enumerate(res["params"]):
        row = {"kernel": params["kernel"]}
        if gammas is not None:
            row["gamma"] = params["gamma"]
        row["lam"] = float(params["lam"])
        if params.get("rank") is not None:
            row["rank"] = params["rank"]
        row.update(score=float(res["mean_test_score"][i]), std=float(res["std_test_score"][i]))
        table.append(row)
    chosen = {k: v for k, v in trial.best_params_.items()
              if not (k == "rank" and v is None) and not (k == "gamma" and gammas is None)}
    kernel = trial.kernel_ if kname == "kernel" else trial.input_kernel_
    if store is not None:
        fitted = _clone(est).set_params(**{kname: kernel}, store=store).fit(X, Y)
    else:  # the trial is the final model: its parameters name the chosen kernel, as a refit's
        fitted = trial.set_params(**{kname: kernel, "kernels": None, "gammas": None})
    logger.info("select: best CV %s %.6g at %s", trial.scoring, trial.best_score_, chosen)
    return Selection(fitted, table, chosen, getattr(trial, "scoring_", trial.scoring), True,
                     "cv")


def _entries(candidates):
    """The kernel entries of the candidates, once each (the first width of an entry crossed
    with ``gammas`` stands for it: the CV estimator applies the grid again)."""
    out, seen = [], set()
    for prefix, kernel in candidates:
        key = prefix["kernel"]
        if key not in seen:
            seen.add(key)
            out.append((prefix, kernel))
    return out


def _select_cv_groups(est, kname, X, Y, *, store, candidates) -> Selection:
    """One CV estimator per kernel entry (its widths in one pass)."""
    from .scoring import UnresolvedScoresError
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


def _select_splits(model, X, Y, *, splits, metric, candidates, kparam, route) -> Selection:
    """The hold-out route (one split) and the refit route of ``cv`` (one split per fold):
    per candidate kernel and split, one fit on the split's training rows with the whole λ
    (rank) path, every (λ, rank) scored on its held-out rows; a candidate's score is the mean
    over the splits (``std`` their standard deviation with several); the best is refitted on
    all rows."""
    sign = METRIC_ORIENTATION.get(metric, -1)
    m = METRICS[metric]
    params = model.get_params(deep=False)
    lams = _grid(params.get("lam"))
    ranks = _grid(params.get("rank")) if "rank" in params else [None]
    parts = []
    for train, val in splits:
        Yva = _take(Y, val)
        if hasattr(Yva, "compute"):
            Yva = Yva.compute()
        Yva = np.asarray(Yva.toarray() if hasattr(Yva, "toarray") else Yva, dtype=np.float64)
        parts.append((_take(X, train), _take(Y, train), _take(X, val), Yva))
    table: list[dict] = []
    best = None
    for prefix, kernel in candidates:
        scores: dict = {}
        for Xtr, Ytr, Xva, Yva in parts:
            trial = _clone(model).set_params(store=None, **(
                {kparam: kernel} if kernel is not None else {}))
            trial.fit(Xtr, Ytr)
            for lam in lams:
                trial.set_lam(lam)
                for rank in ranks:
                    if rank is not None:
                        trial.set_rank(rank)
                    pred = np.asarray(trial.predict(Xva)) if m.needs_prediction else None
                    scores.setdefault((lam, rank), []).append(
                        float(m.func(trial, Xva, Yva, pred)))
        for (lam, rank), vals in scores.items():
            score = float(np.mean(vals))
            row = dict(prefix) | {"lam": float(lam)} | (
                {"rank": rank} if rank is not None else {})
            row["score"] = score
            if len(splits) > 1:
                row["std"] = float(np.std(vals))
            table.append(row)
            if best is None or sign * score > sign * best[0]:
                best = (score, {k: v for k, v in row.items() if k not in ("score", "std")},
                        kernel)
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
    return Selection(final, table, chosen, metric, sign > 0, route)
