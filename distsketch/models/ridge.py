"""What the ridge family shares: its fitted λ paths, solver routes and intercept.

:class:`~distsketch.models.sisokr.SISOKR` and :class:`~distsketch.models.krr.SketchedKRR` both
minimise ``(1/n) Σ_i ‖h(x_i) − y_i‖² + λ ‖h‖²`` over the sketched hypothesis space (see
:mod:`distsketch.linalg.solve` for the closed forms) and solve any λ from the pass's small sums,
with no new pass. Their parts here: the fitted λ paths of ``path_`` (the direct route's closed
forms :class:`KRRClosedForm` and :class:`SisokrClosedForm`, any λ > 0; :class:`SisokrTable`,
SISOKR's view of an iterative route's table), the choice and checks of the solver route
(:func:`auto_ridge_route`, :func:`auto_sisokr_route`, :func:`check_sisokr_pcg`,
:func:`pcg_appending_refusal`), the intercept
(:func:`check_intercept`, :func:`intercept_sums`, :func:`centre_targets`,
:func:`centred_rows`), a saved input solution (:func:`with_metric`), the order of the driver's
factorisation (:func:`driver_size`) and the kernel expansion ``k(x, landmarks) @ dual_coef``
(:func:`kernel_expansion`).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .._base import check_lam
from ..engine.features import FeatureMap
from ..engine.rows import as_row_source
from ..options import driver_threads
from ..solvers.direct import krr_coef, sisokr_coef
from ..solvers.reduced_rank import prediction_covariance
from ..solvers.routes import CoefTable, Direct, check_iterations, fitted_index, get_route

__all__ = ["RIDGE_PARAMS", "KRRClosedForm", "SisokrClosedForm", "SisokrTable",
           "check_sisokr_pcg", "auto_sisokr_route", "auto_ridge_route", "check_intercept",
           "intercept_sums", "centre_targets", "with_metric", "driver_size", "centred_rows",
           "kernel_expansion", "pcg_appending_refusal"]

RIDGE_PARAMS = {"lam": "lam", "random_state": "random_state", "store": "store",
                 "options": "options"}


# --------------------------------------------------------------------------- fitted λ paths
# A ridge model's ``path_`` (RidgeEstimator): the direct route's closed form, any λ > 0, or an
# iterative route's CoefTable (distsketch.solvers.routes), its fitted λ; the same methods either
# way.


class _ClosedForm:
    """What the closed forms share: any λ > 0 is served, one solve per λ."""

    any_lam = True
    residuals = None

    def fitted_lam(self, lam: float, *, argument: str = "lam") -> float:
        return lam

    def n_iter(self, lam: float) -> int:
        return 1

    def iterations(self, lams) -> np.ndarray:
        return np.ones(len(lams), dtype=np.int64)  # one solve per λ


@dataclasses.dataclass
class KRRClosedForm(_ClosedForm):
    """SketchedKRR's direct route: ``dual_coef(λ) = R_mixᵀ β(λ)``, ``β(λ)`` of
    :func:`~distsketch.solvers.direct.krr_coef` from the fit's ``H`` and right-hand side ``rhs``."""

    solution: object
    rhs: np.ndarray
    sketch: object

    def coef(self, lam: float) -> np.ndarray:
        with driver_threads(self.solution.H.shape[0]):
            beta = krr_coef(self.solution, self.rhs, lam)
        return self.sketch.transpose_dot(beta)


@dataclasses.dataclass
class SisokrClosedForm(_ClosedForm):
    """SISOKR's direct route: ``W(λ)`` of :func:`~distsketch.solvers.direct.sisokr_coef` (r_Y × r_X)
    and the prediction covariance ``Σ_i g(x_i) g(x_i)ᵀ`` of the reduced rank."""

    solution: object
    operator: np.ndarray | None

    def coef(self, lam: float) -> np.ndarray:
        with driver_threads(self.solution.H.shape[0]):
            return sisokr_coef(self.solution, self.operator, lam)

    def covariance(self, lam: float) -> np.ndarray:
        W = sisokr_coef(self.solution, self.operator, lam)
        return prediction_covariance(self.solution, W)


@dataclasses.dataclass
class SisokrTable(CoefTable):
    """SISOKR's view of an iterative route's table of ``α(λ)`` (s'_X × r_Y on the input
    landmarks): ``W(λ) = α(λ)ᵀ`` and the covariance ``αᵀ (K_nmᵀ K_nm α)`` from the products
    the iterations carried."""

    def coef(self, lam: float) -> np.ndarray:
        return np.ascontiguousarray(super().coef(lam).T)

    def covariance(self, lam: float) -> np.ndarray:
        if self.products is None:
            raise ValueError("rank: this solver route gave no products K_nmᵀ K_nm α, which a "
                             "reduced rank needs; fit with solver='direct' or 'pcg'")
        k = fitted_index(self.lams, lam, argument="rank_lam")
        S = self.coefs[k].T @ self.products[k]
        return 0.5 * (S + S.T)


# --------------------------------------------------------------------------- solver routes
# The solver route of a ridge model: SISOKR's checks and choice for solver="pcg" / "auto", and
# the choice both ridge models make for solver="auto".


def pcg_appending_refusal(est) -> str | None:
    """Why ``est`` cannot take appended rows, decided from its parameters: PCG without a kept
    store (it re-solves over every row's inputs, which only a kept store keeps), or None."""
    if est.store is None and getattr(est.solver, "name", est.solver) == "pcg":
        return ("solver='pcg' re-solves over every row's inputs, which only a kept store "
                "keeps: fit with store=... (a path) to append rows")
    return None


def check_sisokr_pcg(est) -> None:
    """What ``solver="pcg"`` needs of a SISOKR's arguments: ``tol``, ``max_iter``, an input
    sketch that picks landmarks and a sketched output side; each error names its argument."""
    from ..sketches.base import check_sketch
    from ..sketches.sampling import Identity
    from ..solvers.pcg import check_pcg_sketch

    check_iterations(est.tol, est.max_iter)
    check_pcg_sketch(check_sketch(est.input_sketch, argument="input_sketch"), solver="pcg",
                     argument="input_sketch")
    if isinstance(check_sketch(est.output_sketch, argument="output_sketch"), Identity):
        raise ValueError(
            "output_sketch: solver='pcg' solves the input side with one right-hand side per "
            "output coordinate; an exact output side (output_sketch=None) has n of them "
            "(and its model needs C itself): give a sketched output side (SubSampling, "
            "PSparsified, ...), or solver='direct'")


def auto_sisokr_route(est, X):
    """``solver="auto"`` of a SISOKR: :func:`auto_ridge_route`'s choice, PCG only with a
    sketched output side and a ``rank_lam`` among the fitted λ (else direct)."""
    route = auto_ridge_route(est, X)
    if route.name != "pcg":
        return route
    from ..sketches.base import check_sketch
    from ..sketches.sampling import Identity

    try:  # bad arguments are left to fit's validation, in its order
        if isinstance(check_sketch(est.output_sketch, argument="output_sketch"), Identity):
            return Direct()
        if est.rank_lam is not None:  # PCG serves fitted λ₁ only
            fitted_index(check_lam(est.lam), check_lam(est.rank_lam)[0], argument="rank_lam")
    except Exception:
        return Direct()
    return route


def auto_ridge_route(est, X):
    """``solver="auto"`` of a ridge model with ``tol``, ``max_iter`` (validated here): the
    route :func:`~distsketch.solvers.pcg.choose_solver` picks from the rows of ``X`` and the input
    sketch's m (the parameter ``est._input[1]``); direct where the sketch or data do not
    validate (left to fit's validation, in its order)."""
    check_iterations(est.tol, est.max_iter)
    from ..sketches.base import check_sketch
    from ..solvers.pcg import choose_solver

    param = est._input[1]
    try:
        sketch = check_sketch(getattr(est, param), argument=param)
        n = as_row_source(X, argument="X").n
        tuning = est._options().tuning
    except Exception:
        return Direct()
    route = choose_solver("auto", n=n, m=getattr(sketch, "m", None), sketch=sketch,
                          store=est.store, tuning=tuning)
    return get_route(route)()


def check_intercept(fit_intercept) -> None:
    """``fit_intercept`` must be a bool (a string such as ``"false"`` would be truthy)."""
    if not isinstance(fit_intercept, (bool, np.bool_)):
        raise ValueError(f"fit_intercept: expected True or False, got {fit_intercept!r}")


def intercept_sums(sums: tuple[str, ...]) -> tuple[str, ...]:
    """The extra sums target centring needs: ``Σ y_i`` (``"y1"``), and ``s = R K 1``
    (``"s"``) when the right-hand side is the sketched ``b = R K Y``."""
    return ("s", "y1") if "b" in sums else ("y1",)


def centre_targets(sums: dict, rhs: np.ndarray, *, n: int, fit_intercept: bool
                   ) -> tuple[np.ndarray, np.ndarray]:
    """The right-hand side of the centred targets ``Y − 1ȳᵀ`` and the intercept ``ȳ``.

    Sketched (``rhs = b = R K Y``, shape (m, t)): ``R K (Y − 1ȳᵀ) = b − s ȳᵀ`` with
    ``s = R K 1``; exact (``rhs = Y``, shape (n, t)): ``Y − 1ȳᵀ``. Without an intercept,
    ``(rhs, 0)``.
    """
    rhs = np.asarray(rhs, dtype=np.float64)
    t = rhs.shape[1] if rhs.ndim == 2 else 1
    if not fit_intercept:
        return rhs, np.zeros(t)
    ybar = np.asarray(sums["y1"], dtype=np.float64).reshape(-1) / n
    if "b" in sums:
        s = np.asarray(sums["s"], dtype=np.float64).reshape(-1)
        return rhs - np.outer(s, ybar), ybar
    return rhs - ybar[None, :], ybar


def with_metric(sol, arrays: dict):
    """The saved input solution with its generalized form's ``metric = B_kk`` (models saved
    before the generalized form have none: the whitened form, ``metric = I``)."""
    metric = arrays.get("input_metric")
    return sol if metric is None else dataclasses.replace(
        sol, metric=np.asarray(metric, dtype=np.float64))


def driver_size(sums: dict) -> int:
    """The order of the driver's largest factorisation: ``m_X`` (``B``) or ``n`` (``C``)."""
    A = sums.get("B", sums.get("C"))
    return 0 if A is None else int(np.shape(A)[0])


def centred_rows(Y) -> tuple[np.ndarray, object]:
    """``(ȳ, Y − 1ȳᵀ)`` of a row source: the column means in float64 (one read of ``Y``) and
    the centred rows, dense (numpy in, numpy out; sparse densified; dask and zarr lazily)."""
    data = Y.data
    if Y.kind == "numpy":
        A = np.asarray(data, dtype=np.float64).reshape(Y.shape)
        ybar = A.mean(axis=0)
        return ybar, A - ybar
    if Y.kind == "sparse":
        A = np.asarray(data.toarray(), dtype=np.float64)
        ybar = A.mean(axis=0)
        return ybar, A - ybar
    import dask.array as da

    A = (data if Y.kind == "dask" else da.from_zarr(data)).astype(np.float64)
    A = A.reshape(Y.shape) if A.ndim == 1 else A
    ybar = np.asarray(A.mean(axis=0).compute(), dtype=np.float64)
    return ybar, A - ybar


def kernel_expansion(est, X):
    """``k(x, est.landmarks_) @ est.dual_coef_`` of a fitted estimator (dask in, dask out)."""
    est._check_fitted()
    options = est._options()
    fmap = FeatureMap(est.kernel_, est.landmarks_, est.dual_coef_, options.gram_chunk,
                      options.tuning)
    return fmap.transform(X, block_memory=options.block_memory, model=type(est).__name__)
