"""SketchedKRR: sketched kernel ridge regression for scalar or multi-output targets.

:class:`SketchedKRR` (exact KRR with ``sketch=None``) minimises ``(1/n) Σ_i ‖f(x_i) − y_i‖² +
λ ‖f‖²`` over the sketched hypothesis space (see :mod:`distsketch.linalg.solve` for the closed
form), fits with the template of :class:`~distsketch.models.base.SketchedEstimator` (one
streaming pass, then the driver solve) and solves any λ from the pass's small sums, with no new
pass. Its λ path, solver route and intercept are in :mod:`distsketch.models.ridge`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..options import driver_threads, with_blas_limit
from ..solvers.direct import krr_sums, solve_krr
from ..solvers.routes import check_iterations
from .base import FitSpec, RidgeEstimator, checks_feature_names
from .growing import Growing
from .ridge import (
    RIDGE_PARAMS,
    KRRClosedForm,
    auto_ridge_route,
    centre_targets,
    check_intercept,
    driver_size,
    intercept_sums,
    kernel_expansion,
    pcg_appending_refusal,
    with_metric,
)

if TYPE_CHECKING:
    import zarr

    from ..engine.store import StoreDirectory
    from ..kernels.base import Kernel
    from ..options import EngineOptions
    from ..sketches.base import Sketch
    from ..solvers.routes import Route

__all__ = ["SketchedKRR"]


class SketchedKRR(Growing, RidgeEstimator):
    """Sketched kernel ridge regression, scalar or multi-output (exact with ``sketch=None``).

    ``f(x) = (R k(X, x))ᵀ β(λ)`` with ``β(λ) = (R K² Rᵀ + nλ R K Rᵀ)^† R K Y`` (eq. 3 of
    Chen & Yang, AISTATS 2021; El Ahmad et al., TMLR 2023), minimising
    ``(1/n) Σ ‖f(x_i) − y_i‖² + λ‖f‖²``.

    Parameters
    ----------
    kernel : kernel, str or callable
    sketch : Sketch or None
    fit_intercept : bool, default True
        Centre the targets: fit on ``y_i − ȳ`` and add the training mean ``ȳ`` back, so
        ``f(x) = (R k(X, x))ᵀ β(λ) + ȳ`` with ``β(λ)`` of the centred targets (what users of
        scikit-learn's ``KernelRidge`` do by hand; from the pass's sums ``s = R K 1`` and
        ``Σ y_i``: the right-hand side becomes ``R K Y − s ȳᵀ``). ``False`` gives the paper's
        estimator exactly (no intercept). Unlike :class:`SketchedRegressor`'s intercept, the
        features are not centred: ``ȳ`` is the intercept for every λ.
    lam, random_state, store, options
        As for :class:`SISOKR`.
    solver : {"auto", "direct", "pcg"}, a registered route's name or a Route, default "auto"
        ``"direct"``: one streaming pass forms ``G = CᵀC`` (``2nm²`` flops; a kept store holds
        ``C``, n × m) and the driver solves every λ from it. ``"pcg"``: Falkon's preconditioned
        conjugate gradient (``distsketch.solvers.pcg``) for large m: no ``G``, no ``C`` stored, each
        iteration one pass of recomputed kernel blocks (``4nm`` flops plus the kernel); the
        same model up to ``tol``. Only for sketches that pick landmarks (``SubSampling``,
        ``LeverageScores``). ``"auto"``: direct while forming ``G`` (``2nm²`` flops) costs no
        more than PCG's passes of kernel blocks (``m ≤ 8100``, the measured crossover) and a kept store's ``C``
        (``4nm`` bytes) ≤ 32 GiB, PCG beyond (``distsketch.solvers.pcg.choose_solver``).
    tol : float, default 1e-8
        PCG only: the relative residual ``‖Pᵀ(z − Hα)‖ ≤ tol ‖Pᵀz‖`` to reach, per target.
    max_iter : int, default 200
        PCG only: most iterations (passes) per λ; reaching it warns (``ConvergenceWarning``).

    Attributes
    ----------
    sketch_ : RealizedSketch
    kernel_ : Kernel
    landmarks_ : array of shape (s', d)
    input_solution_ : InputSolution or None
        None after a PCG fit.
    dual_coef_ : ndarray of shape (s', n_targets)
        ``R_mixᵀ β(λ)``: ``f(x) = k(x, landmarks_) @ dual_coef_ + intercept_``.
    intercept_ : ndarray of shape (n_targets,)
        The training targets' mean ``ȳ`` (zeros with ``fit_intercept=False``).
    solver_ : str
        The route taken, ``"direct"`` or ``"pcg"``.
    n_iter_, n_iters_ : int, ndarray of int
        PCG iterations (passes) of the active λ and of each λ; 1 on the direct route (one
        solve from the pass's sums).
    n_passes_ : int
        Passes over the rows the fit made (1 on the direct route; a resumed PCG fit makes
        fewer).
    path_ : KRRClosedForm or CoefTable
        The fitted λ path (``coef(λ)`` gives ``dual_coef_``): the direct route's closed form
        (any λ > 0) or an iterative route's table (:class:`~distsketch.CoefTable`).
        A PCG fit keeps the λ path given at fit:
        :meth:`set_lam` switches among ``lams_`` only (any other λ needs the data again).
    lam_, lams_, n_features_in_, feature_names_in_, store_
        As for :class:`SISOKR`.

    References
    ----------
    .. [1] Y. Chen and Y. Yang, "Accumulations of Projections — A Unified Framework for
       Random Sketches in Kernel Ridge Regression", AISTATS 2021.
    .. [2] T. El Ahmad, P. Laforgue and F. d'Alché-Buc, "Fast Kernel Methods for Generic
       Lipschitz Losses via p-Sparsified Sketches", Transactions on Machine Learning
       Research, 2023.

    Examples
    --------
    >>> import numpy as np
    >>> from distsketch import SketchedKRR
    >>> from distsketch.kernels import Gaussian
    >>> from distsketch.sketches import SubSampling
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(100, 4))
    >>> y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=100)
    >>> model = SketchedKRR(Gaussian(gamma=0.5), sketch=SubSampling(30), lam=1e-3,
    ...                     random_state=0).fit(X, y)
    >>> model.predict(X[:3]).shape, model.dual_coef_.shape, model.solver_
    ((3,), (30, 1), 'direct')
    >>> round(model.score(X, y), 2)
    0.88
    """

    _estimator_type = "regressor"
    _param_kinds = {"kernel": "kernel", "sketch": "sketch", "fit_intercept": "json",
                    **RIDGE_PARAMS, "solver": "solver", "tol": "json", "max_iter": "json"}
    _input = ("kernel", "sketch")
    _targets = "y"
    _standardized = "kernel"
    _configurable = True

    def __init__(self, kernel: Kernel | str | Callable = "gaussian", *,
                 sketch: Sketch | None = None, lam: float | Sequence[float] = 1e-6,
                 fit_intercept: bool = True, solver: str | Route = "auto", tol: float = 1e-8,
                 max_iter: int = 200, random_state: int | np.random.Generator | None = None,
                 store: str | os.PathLike | zarr.Group | StoreDirectory | None = None,
                 options: EngineOptions | None = None) -> None:
        self.kernel = kernel
        self.sketch = sketch
        self.lam = lam
        self.fit_intercept = fit_intercept
        self.solver = solver
        self.tol = tol
        self.max_iter = max_iter
        self.random_state = random_state
        self.store = store
        self.options = options

    def _validate(self, X, Y) -> FitSpec:
        check_intercept(self.fit_intercept)
        return super()._validate(X, Y)

    # -- the solver route (subclasses without a ``solver`` parameter stay direct) ----------
    _routes = ("direct", "pcg")

    def _auto_route(self, X):
        """``distsketch.solvers.pcg.choose_solver``'s route for the rows of ``X`` and the input
        sketch's m (the sketch is the parameter ``self._input[1]``)."""
        return auto_ridge_route(self, X)

    def _check_pcg_args(self) -> None:
        """``tol``, ``max_iter`` and a sketch that picks landmarks, before the data."""
        from ..sketches.base import check_sketch
        from ..solvers.pcg import check_pcg_sketch

        check_iterations(self.tol, self.max_iter)
        param = self._input[1]
        check_pcg_sketch(check_sketch(getattr(self, param), argument=param), solver="pcg",
                         argument=param)

    def _appending_refusal(self) -> str | None:
        """PCG without a kept store: no appending (:func:`.ridge.pcg_appending_refusal`)."""
        return pcg_appending_refusal(self)

    def _sums(self, spec: FitSpec) -> tuple[str, ...]:
        sums = krr_sums(x_exact=spec.exact("sketch"))
        return sums + intercept_sums(sums) if self.fit_intercept else sums

    def _solve(self, spec: FitSpec, res) -> None:
        self.kernel_ = spec.kernels["kernel"]
        self.sketch_ = res.x_sketch
        self.landmarks_ = res.x_landmarks
        # right-hand side of the solve: b = R_X K_X Y (sketched input), Y itself (exact)
        with driver_threads(driver_size(res.sums)):
            self.input_solution_, rhs = solve_krr(res.sums, res.x_sketch, n=res.n,
                                                  rtol=spec.options.eig_rtol,
                                                  n_lams=len(spec.lams),
                                                  tuning=spec.options.tuning)
        self._rhs, self.intercept_ = centre_targets(res.sums, rhs, n=res.n,
                                                    fit_intercept=bool(self.fit_intercept))
        self.path_ = KRRClosedForm(self.input_solution_, self._rhs, self.sketch_)
        self._y_1d = spec.Y.input_ndim == 1
        self._set_lams(spec)

    def _adopt_path(self, spec: FitSpec, fitted) -> None:
        """An iterative route's λ path (:class:`~distsketch.CoefTable` of ``dual_coef_``
        on the landmarks) and the intercept it fitted (zeros without ``fit_intercept``)."""
        self.kernel_ = spec.kernels["kernel"]
        self.sketch_, self.landmarks_ = fitted.x_sketch, fitted.x_landmarks
        self.path_ = fitted.path
        self.input_solution_ = self._rhs = None
        t = 1 if spec.Y.input_ndim == 1 else spec.Y.shape[1]
        intercept = fitted.intercept
        if intercept is None:
            if self.fit_intercept:
                raise ValueError(f"solver: the route {fitted.solver!r} fitted no intercept; "
                                 f"give fit_intercept=False or a route that fits one")
            intercept = np.zeros(t)
        self.intercept_ = np.asarray(intercept, dtype=np.float64)
        self._y_1d = spec.Y.input_ndim == 1
        self._set_lams(spec)

    def _update_coef(self):
        path = self.path_  # α(λ) on the landmarks (PCG: α = R_mixᵀ β; direct: R_mixᵀ β(λ))
        self.dual_coef_ = path.coef(self.lam_)
        self.n_iters_ = path.iterations(self.lams_)
        self.n_iter_ = path.n_iter(self.lam_)

    def _default_metrics(self, Y) -> list[str]:
        return ["rmse", "r2"]

    def _get_state(self):
        arrays, state = super()._get_state()
        if self.path_.any_lam:  # the closed form's right-hand side
            arrays.update(rhs=self._rhs, input_metric=self.input_solution_.metric)
        self._put_side("input", self.kernel_, self.sketch_, self.landmarks_, arrays, state)
        arrays.update(intercept=self.intercept_)
        state.update(y_1d=bool(self._y_1d))
        return arrays, state

    def _set_state(self, arrays, state):
        super()._set_state(arrays, state)
        self.kernel_, self.sketch_, self.landmarks_ = self._get_side("input", arrays, state)
        self._y_1d = bool(state["y_1d"])
        if self.path_ is not None:  # an iterative route's table
            self._rhs = None
            self.intercept_ = np.asarray(arrays["intercept"], dtype=np.float64)
            return
        self.input_solution_ = with_metric(self.input_solution_, arrays)
        self._rhs = arrays["rhs"]
        self.path_ = KRRClosedForm(self.input_solution_, self._rhs, self.sketch_)
        # models saved before fit_intercept existed have no intercept
        intercept = arrays.get("intercept")
        self.intercept_ = (np.zeros(self._rhs.shape[1]) if intercept is None
                           else np.asarray(intercept, dtype=np.float64))

    @checks_feature_names
    @with_blas_limit
    def predict(self, X: Any) -> Any:
        """``f(x) = k(x, landmarks_) @ dual_coef_ + intercept_``.

        Parameters
        ----------
        X : array of shape (n, d)

        Returns
        -------
        array of shape (n,) or (n, n_targets)
            As ``y`` at fit; a dask array input gives a lazy dask array.
        """
        out = kernel_expansion(self, X) + self.intercept_
        return out[:, 0] if self._y_1d else out

    @checks_feature_names
    def score(self, X: Any, y: Any) -> float:
        """Coefficient of determination R² of ``predict(X)`` (uniform average over targets;
        :func:`distsketch.metrics.r2_score`).

        Parameters
        ----------
        X : array of shape (n, d)
        y : array of shape (n,) or (n, n_targets)
            True targets.

        Returns
        -------
        float
        """
        from ..metrics import r2_score

        return r2_score(y, np.asarray(self.predict(X)))
