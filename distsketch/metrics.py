"""Metrics of structured prediction: multi-label, ranking, kernel losses, surrogate MSE.

Glossary
--------
Y, Ŷ          true and predicted output rows, shape (n, d)
ψ             output feature map of the kernel k_Y; ‖ψ(y) − ψ(y')‖² = k(y,y) + k(y',y') − 2k(y,y')
ĥ(x)          the fitted surrogate in H_Y (before decoding)

Functions take numpy arrays (scipy.sparse label matrices are accepted where noted) and return
Python floats; every one is a mean over samples.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .backends.base import dense

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

    from .kernels.base import Kernel

__all__ = ["f1_samples", "hamming_loss", "topk_accuracy", "mean_reciprocal_rank", "kernel_loss",
           "surrogate_mse", "pinball_loss", "crossing_loss", "arrmse", "rmse", "mae", "r2_score",
           "Metric", "METRICS", "check_metrics", "as_binary"]


def as_binary(Y: Any, argument: str) -> np.ndarray:
    """A label matrix as booleans; values other than 0 and 1 are refused.

    Real-valued predictions of a regression model would otherwise count every non-zero as a
    label.

    Parameters
    ----------
    Y : array-like or scipy.sparse matrix of shape (n_samples, n_labels)
        0/1 (or boolean) labels.
    argument : str
        The argument's name in the error message.

    Returns
    -------
    ndarray of bool of shape (n_samples, n_labels)
        The labels.

    Raises
    ------
    ValueError
        A value other than 0 and 1, naming ``argument``.

    Examples
    --------
    >>> from distsketch.metrics import as_binary
    >>> as_binary([[0, 1], [1, 1]], "Y")
    array([[False,  True],
           [ True,  True]])
    """
    Y = dense(Y)
    if Y.ndim != 2:
        raise ValueError(f"{argument}: expected a 2-D label matrix (n_samples, n_labels)")
    if Y.dtype != np.bool_:
        bad = (Y != 0) & (Y != 1)
        if bad.any():
            i, j = np.argwhere(bad)[0]
            raise ValueError(f"{argument}: F1 and Hamming loss need binary label matrices "
                             f"(0/1), got {Y[i, j]!r} at row {i}, column {j}; for real-valued "
                             f"outputs use rmse, mae or r2")
    return Y != 0


def _finite_reals(Y, pred, argument: str = "Y_pred") -> tuple[np.ndarray, np.ndarray]:
    """True rows and predictions as float64 arrays of one shape; NaN/inf refused."""
    Y = np.asarray(dense(Y), dtype=np.float64)
    P = np.asarray(dense(pred), dtype=np.float64)
    if P.size != Y.size:
        raise ValueError(f"{argument}: shape {P.shape} differs from Y_true's {Y.shape}")
    P = P.reshape(Y.shape)
    for a, name in ((Y, "Y_true"), (P, argument)):
        if not np.isfinite(a).all():
            raise ValueError(f"{name}: regression metrics need finite values; found "
                             f"{int((~np.isfinite(a)).sum())} NaN or infinite entries")
    return Y, P


def rmse(Y_true: ArrayLike, Y_pred: ArrayLike) -> float:
    """Root mean squared error over every entry of the rows.

    Parameters
    ----------
    Y_true : array-like of shape (n_samples,) or (n_samples, n_targets)
        True values (finite).
    Y_pred : array-like of the same shape
        Predicted values (finite).

    Returns
    -------
    float
        ``sqrt(mean((Y_pred − Y_true)²))``.

    Examples
    --------
    >>> from distsketch.metrics import rmse
    >>> rmse([1.0, 2.0, 3.0], [1.0, 2.0, 5.0])
    1.1547005383792515
    """
    Y, P = _finite_reals(Y_true, Y_pred)
    return float(np.sqrt(np.mean((P - Y) ** 2)))


def mae(Y_true: ArrayLike, Y_pred: ArrayLike) -> float:
    """Mean absolute error over every entry of the rows.

    Parameters
    ----------
    Y_true : array-like of shape (n_samples,) or (n_samples, n_targets)
        True values (finite).
    Y_pred : array-like of the same shape
        Predicted values (finite).

    Returns
    -------
    float
        ``mean(|Y_pred − Y_true|)``.

    Examples
    --------
    >>> from distsketch.metrics import mae
    >>> mae([1.0, 2.0, 3.0], [1.0, 2.0, 5.0])
    0.6666666666666666
    """
    Y, P = _finite_reals(Y_true, Y_pred)
    return float(np.mean(np.abs(P - Y)))


def r2_score(Y_true: ArrayLike, Y_pred: ArrayLike) -> float:
    """Coefficient of determination ``1 − Σ(y − ŷ)² / Σ(y − ȳ)²``, averaged over outputs.

    As scikit-learn's ``r2_score`` with ``force_finite=True``: a constant output scores 1 if
    predicted exactly, else 0.

    Parameters
    ----------
    Y_true : array-like of shape (n_samples,) or (n_samples, n_targets)
        True values (finite).
    Y_pred : array-like of the same shape
        Predicted values (finite).

    Returns
    -------
    float
        The uniform average over outputs of each output's R².

    Examples
    --------
    >>> from distsketch.metrics import r2_score
    >>> r2_score([1.0, 2.0, 3.0], [1.0, 2.0, 4.0])
    0.5
    """
    Y, P = _finite_reals(Y_true, Y_pred)
    Y, P = Y.reshape(len(Y), -1), P.reshape(len(P), -1)
    ss_res = ((Y - P) ** 2).sum(axis=0)
    ss_tot = ((Y - Y.mean(axis=0)) ** 2).sum(axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        r2 = np.where(ss_tot > 0, 1.0 - ss_res / ss_tot, np.where(ss_res > 0, 0.0, 1.0))
    return float(np.mean(r2))


def _same_shape(a: np.ndarray, b: np.ndarray) -> None:
    if a.shape != b.shape:
        raise ValueError(f"Y_pred: shape {b.shape} differs from Y_true's {a.shape}")


def f1_samples(Y_true: Any, Y_pred: Any, *, zero_division: float = 0.0) -> float:
    """Example-based F1: mean over samples of ``2|y ∩ ŷ| / (|y| + |ŷ|)``.

    Parameters
    ----------
    Y_true : array-like or scipy.sparse matrix of shape (n_samples, n_labels)
        True 0/1 labels.
    Y_pred : array-like or scipy.sparse matrix of shape (n_samples, n_labels)
        Predicted 0/1 labels.
    zero_division : float, default 0.0
        The score of a sample whose true and predicted label sets are both empty (0, as
        scikit-learn's ``f1_score(average="samples", zero_division=0)`` and the SISOKR
        paper's code).

    Returns
    -------
    float
        The mean F1 over samples.

    Examples
    --------
    >>> from distsketch.metrics import f1_samples
    >>> f1_samples([[1, 0, 1], [0, 1, 0]], [[1, 0, 0], [0, 1, 0]])
    0.8333333333333333
    """
    T, P = as_binary(Y_true, "Y_true"), as_binary(Y_pred, "Y_pred")
    _same_shape(T, P)
    inter = (T & P).sum(axis=1)
    denom = T.sum(axis=1) + P.sum(axis=1)
    f1 = np.where(denom > 0, 2.0 * inter / np.maximum(denom, 1), zero_division)
    return float(f1.mean())


def hamming_loss(Y_true: Any, Y_pred: Any) -> float:
    """Fraction of wrong labels, over all samples and labels.

    Parameters
    ----------
    Y_true : array-like or scipy.sparse matrix of shape (n_samples, n_labels)
        True 0/1 labels.
    Y_pred : array-like or scipy.sparse matrix of shape (n_samples, n_labels)
        Predicted 0/1 labels.

    Returns
    -------
    float
        The mean of ``Y_true != Y_pred``.

    Examples
    --------
    >>> from distsketch.metrics import hamming_loss
    >>> hamming_loss([[1, 0, 1], [0, 1, 0]], [[1, 0, 0], [0, 1, 0]])
    0.16666666666666666
    """
    T, P = as_binary(Y_true, "Y_true"), as_binary(Y_pred, "Y_pred")
    _same_shape(T, P)
    return float((T != P).mean())


def _ranks(true_index, topk_indices) -> np.ndarray:
    """1-based rank of the true candidate in each row of ``topk_indices`` (0 if absent)."""
    t = np.asarray(true_index).reshape(-1, 1)
    I = np.asarray(topk_indices)
    if I.ndim != 2 or I.shape[0] != t.shape[0]:
        raise ValueError("topk_indices: expected shape (n_queries, k) matching true_index")
    hit = I == t
    return np.where(hit.any(axis=1), hit.argmax(axis=1) + 1, 0)


def topk_accuracy(true_index: ArrayLike, topk_indices: ArrayLike, *,
                  k: int | None = None) -> float:
    """Fraction of queries whose true candidate is among the first ``k`` returned.

    Parameters
    ----------
    true_index : array-like of int of shape (n_queries,)
        Index of each query's true candidate.
    topk_indices : array-like of int of shape (n_queries, k_returned)
        Candidates returned per query, best first (``SISOKR.predict_topk``).
    k : int or None, default None
        Count the first ``k`` returned only (None: all of them).

    Returns
    -------
    float
        The fraction of hits.

    Examples
    --------
    >>> from distsketch.metrics import topk_accuracy
    >>> topk_accuracy([3, 1], [[3, 0], [2, 1]])
    1.0
    >>> topk_accuracy([3, 1], [[3, 0], [2, 1]], k=1)
    0.5
    """
    I = np.asarray(topk_indices)
    _ranks(true_index, I)  # validates the shapes
    if k is not None:
        if k < 1:
            raise ValueError(f"k: must be a positive integer, got {k}")
        I = I[:, :k]
    return float((_ranks(true_index, I) > 0).mean())


def mean_reciprocal_rank(true_index: ArrayLike, topk_indices: ArrayLike) -> float:
    """Mean of ``1 / rank`` of the true candidate (0 when it is not in the returned top-k).

    Parameters
    ----------
    true_index : array-like of int of shape (n_queries,)
        Index of each query's true candidate.
    topk_indices : array-like of int of shape (n_queries, k)
        Candidates returned per query, best first.

    Returns
    -------
    float
        The mean reciprocal rank.

    Examples
    --------
    >>> from distsketch.metrics import mean_reciprocal_rank
    >>> mean_reciprocal_rank([3, 1, 5], [[3, 0], [2, 1], [0, 2]])
    0.5
    """
    r = _ranks(true_index, topk_indices)
    return float(np.where(r > 0, 1.0 / np.maximum(r, 1), 0.0).mean())


def kernel_loss(kernel: Kernel, Y_true: ArrayLike, Y_pred: ArrayLike) -> float:
    """Mean ``‖ψ(y) − ψ(ŷ)‖² = k(y,y) + k(ŷ,ŷ) − 2 k(y,ŷ)`` over paired rows.

    With a Gaussian kernel this is the "RBF loss" ``2 − 2 exp(−γ‖y − ŷ‖²)`` of the image
    completion experiments (Weston et al. 2003; Brogat-Motte et al. 2022).

    Parameters
    ----------
    kernel : Kernel
        The output kernel ``k`` (:mod:`distsketch.kernels`).
    Y_true : array-like of shape (n_samples, d_Y)
        True output rows.
    Y_pred : array-like of shape (n_samples, d_Y)
        Predicted output rows.

    Returns
    -------
    float
        The mean squared distance in the kernel's feature space.

    Examples
    --------
    >>> from distsketch.kernels import Gaussian
    >>> from distsketch.metrics import kernel_loss
    >>> kernel_loss(Gaussian(gamma=1.0), [[0.0], [1.0]], [[0.0], [1.0]])
    0.0
    """
    Y_true = np.asarray(Y_true, dtype=np.float64)
    Y_pred = np.asarray(Y_pred, dtype=np.float64)
    _same_shape(Y_true, Y_pred)
    b = 256  # paired values k(y_i, ŷ_i): diagonals of small blocks
    cross = np.concatenate([np.diag(kernel(Y_true[s : s + b], Y_pred[s : s + b]))
                            for s in range(0, len(Y_true), b)])
    return float(np.mean(kernel.diag(Y_true) + kernel.diag(Y_pred) - 2.0 * cross))


def surrogate_mse(model: Any, X: Any, Y: Any) -> float:
    """Mean ``‖ĥ(x) − ψ(y)‖²`` in H_Y, without decoding (model selection in the papers).

    ``‖ĥ(x) − ψ(y)‖² = k_Y(y, y) − 2⟨ĥ(x), ψ(y)⟩ + ‖ĥ(x)‖²``, with ``⟨ĥ(x), ψ(y)⟩ = φ_Y(y)ᵀ g(x)``
    and ``‖ĥ(x)‖² = ‖g(x)‖²`` for a sketched output side (``T_Yᵀ R_Y K_Y R_Yᵀ T_Y = I``), or
    ``g(x)ᵀ K_Y g(x)`` for an exact one (``ĥ(x) = Σ_i g_i(x) ψ(y_i)``).

    Parameters
    ----------
    model : SISOKR
        A fitted :class:`~distsketch.SISOKR`.
    X : array-like of shape (n_samples, d_X)
        Inputs.
    Y : array-like of shape (n_samples, d_Y)
        True output rows.

    Returns
    -------
    float
        The mean of ``‖ĥ(x) − ψ(y)‖²`` over the rows.

    Examples
    --------
    >>> import numpy as np
    >>> from distsketch import SISOKR
    >>> from distsketch.kernels import Gaussian
    >>> from distsketch.metrics import surrogate_mse
    >>> rng = np.random.default_rng(0)
    >>> X, Y = rng.normal(size=(60, 3)), rng.normal(size=(60, 2))
    >>> model = SISOKR(Gaussian(), Gaussian(), lam=1e-3).fit(X, Y)
    >>> 0.0 <= surrogate_mse(model, X, Y) < surrogate_mse(model, X, Y[::-1])
    True
    """
    g = model.surrogate(X)
    Y = np.asarray(dense(Y), dtype=np.float64)
    phi = np.asarray(model.output_features(Y))  # of y − ȳ with an intercept
    if getattr(model, "intercept_", None) is not None:  # ψ(y) = y − ȳ
        Y = Y - model.intercept_
    inner = np.einsum("ij,ij->i", phi, g)
    if model.output_projection_ is None:  # exact output side: ‖ĥ‖² = gᵀ K_Y g
        from .linalg.blocks import gram_dot

        L = model.output_landmarks_
        Kg = gram_dot(model.output_kernel_, L, L, right=g.T, chunk=model._options().gram_chunk)
        norm = np.einsum("ji,ji->i", g.T, Kg)
    else:
        norm = np.einsum("ij,ij->i", g, g)
    return float(np.mean(model.output_kernel_.diag(Y) - 2.0 * inner + norm))


def pinball_loss(y: ArrayLike, Q: ArrayLike, quantiles: ArrayLike) -> float:
    """Mean over samples of ``Σ_j ρ_{τ_j}(y − q_j)``, ``ρ_τ(u) = max(τu, (τ − 1)u)``.

    Parameters
    ----------
    y : array-like of shape (n_samples,) or (n_samples, 1)
        True targets.
    Q : array-like of shape (n_samples, d)
        Predicted quantiles, one column per level.
    quantiles : array-like of shape (d,)
        The levels ``τ_j`` of the columns of ``Q``.

    Returns
    -------
    float
        The mean summed pinball loss.

    Examples
    --------
    >>> from distsketch.metrics import pinball_loss
    >>> pinball_loss([1.0, 2.0], [[0.0, 1.0], [2.0, 3.0]], [0.25, 0.75])
    0.25
    """
    y = np.asarray(y, dtype=np.float64).reshape(-1, 1)
    Q = np.asarray(Q, dtype=np.float64).reshape(len(y), -1)
    tau = np.asarray(quantiles, dtype=np.float64).reshape(1, -1)
    u = y - Q
    return float(np.mean(np.maximum(tau * u, (tau - 1.0) * u).sum(axis=1)))


def crossing_loss(Q: ArrayLike) -> float:
    """Mean over samples of ``Σ_j max(0, q_j − q_{j+1})``: 0 when no two quantiles cross.

    Parameters
    ----------
    Q : array-like of shape (n_samples, d)
        Quantiles predicted at increasing levels, one column per level.

    Returns
    -------
    float
        The mean total crossing.

    Examples
    --------
    >>> from distsketch.metrics import crossing_loss
    >>> crossing_loss([[0.0, 1.0, 2.0], [0.0, 2.0, 1.5]])
    0.25
    """
    Q = np.asarray(Q, dtype=np.float64)
    return float(np.mean(np.maximum(0.0, Q[:, :-1] - Q[:, 1:]).sum(axis=1)))


def arrmse(Y: ArrayLike, pred: ArrayLike, Y_train_mean: ArrayLike | None = None) -> float:
    """Average relative RMSE over outputs, the multi-target regression benchmarks' metric [1]_.

    ``mean_j sqrt(Σ_i (y_ij − ŷ_ij)² / Σ_i (y_ij − ȳ_j)²)``.

    Parameters
    ----------
    Y : array-like of shape (n_samples, n_targets)
        True values.
    pred : array-like of shape (n_samples, n_targets)
        Predicted values.
    Y_train_mean : array-like of shape (n_targets,) or None, default None
        ``ȳ``: the training targets' mean (None: the mean of ``Y``).

    Returns
    -------
    float
        The average relative RMSE (1: as good as predicting ``ȳ``).

    References
    ----------
    .. [1] E. Spyromitros-Xioufis, G. Tsoumakas, W. Groves and I. Vlahavas, "Multi-target
       regression via input space expansion: treating targets as inputs", Machine Learning
       104(1), 2016.

    Examples
    --------
    >>> from distsketch.metrics import arrmse
    >>> arrmse([[1.0], [3.0]], [[2.0], [2.0]])
    1.0
    """
    Y = np.asarray(Y, dtype=np.float64)
    P = np.asarray(pred, dtype=np.float64).reshape(Y.shape)
    mean = Y.mean(axis=0) if Y_train_mean is None else np.asarray(Y_train_mean, dtype=np.float64)
    return float(np.mean(np.sqrt(((Y - P) ** 2).sum(axis=0) / ((Y - mean) ** 2).sum(axis=0))))


# --------------------------------------------------------------------------- registry


def _needs(attribute: str, what: str) -> Callable:
    def applies(model) -> str | None:
        return None if hasattr(model, attribute) else f"it needs {what}"
    return applies


def _any(model) -> str | None:
    return None


def _point_prediction(model) -> str | None:
    """rmse/mae/r2 compare one prediction per target: a quantile model predicting several
    levels per row has none (one level, e.g. the median, is a point prediction)."""
    levels = getattr(model, "quantiles_", None)
    if levels is not None and len(levels) > 1:
        return (f"it predicts {len(levels)} quantile levels per row, not one value per target: "
                f"use pinball or crossing")
    return None


@dataclass(frozen=True)
class Metric:
    """A metric of a fitted model on labelled data, by name (``distsketch evaluate``).

    Parameters
    ----------
    func : callable
        ``func(model, X, Y, pred)``: ``Y`` the true rows as a dense float64 array, ``pred``
        the model's ``predict(X)`` (computed once for every metric that
        ``needs_prediction``).
    needs_prediction : bool, default True
        Whether ``func`` reads ``pred`` (``surrogate_mse`` does not).
    applies : callable
        ``applies(model)``: None when the metric applies to the model, else the reason it
        does not (checked by :func:`check_metrics` before any prediction runs); the values
        themselves are validated by the metric (binary labels for F1/Hamming, finite reals
        for regression).
    """

    func: Callable
    needs_prediction: bool = True
    applies: Callable = _any


#: Metrics by name, in the order they are listed.
METRICS: dict[str, Metric] = {
    "f1_samples": Metric(lambda model, X, Y, pred: f1_samples(Y, pred)),
    "hamming_loss": Metric(lambda model, X, Y, pred: hamming_loss(Y, pred)),
    "kernel_loss": Metric(lambda model, X, Y, pred: kernel_loss(model.output_kernel_, Y, pred),
                          applies=_needs("output_kernel_", "an output kernel (SISOKR)")),
    "surrogate_mse": Metric(lambda model, X, Y, pred: surrogate_mse(model, X, Y),
                            needs_prediction=False,
                            applies=_needs("output_kernel_", "a surrogate in H_Y (SISOKR)")),
    "rmse": Metric(lambda model, X, Y, pred: rmse(Y, pred), applies=_point_prediction),
    "mae": Metric(lambda model, X, Y, pred: mae(Y, pred), applies=_point_prediction),
    "r2": Metric(lambda model, X, Y, pred: r2_score(Y, pred), applies=_point_prediction),
    "pinball": Metric(lambda model, X, Y, pred: pinball_loss(Y, pred, model.quantiles_),
                      applies=_needs("quantiles_", "quantile levels (SketchedQuantileRegressor)")),
    "crossing": Metric(lambda model, X, Y, pred: crossing_loss(pred),
                       applies=_needs("quantiles_", "quantile levels (SketchedQuantileRegressor)")),
}


def check_metrics(names: str | Sequence[str], *, model: Any = None,
                  argument: str = "metrics") -> list[str]:
    """Validate metric names (and, given a fitted ``model``, that each applies to it).

    Parameters
    ----------
    names : str or sequence of str
        Names of :data:`METRICS`.
    model : estimator or None, default None
        A fitted model each metric must apply to.
    argument : str, default "metrics"
        The argument's name in error messages.

    Returns
    -------
    list of str
        The names, as a list.

    Raises
    ------
    ValueError
        An unknown name, or a metric that does not apply to ``model``: the message names
        ``argument``, the metric and the known names.

    Examples
    --------
    >>> from distsketch.metrics import check_metrics
    >>> check_metrics("rmse")
    ['rmse']
    """
    if isinstance(names, str):
        names = [names]
    names = list(names)
    for name in names:
        if name not in METRICS:
            raise ValueError(f"{argument}: unknown metric {name!r}; known metrics are "
                             f"{', '.join(METRICS)}")
        if model is not None:
            why = METRICS[name].applies(model)
            if why:
                raise ValueError(f"{argument}: metric {name!r} does not apply to a "
                                 f"{type(model).__name__}: {why}")
    return names
