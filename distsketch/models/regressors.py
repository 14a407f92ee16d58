"""Sketched kernel machines for Lipschitz losses (El Ahmad, Laforgue & d'Alché-Buc, TMLR 2023).

- :class:`SketchedRegressor` — κ-Huber (robust), ε-insensitive (SVR), pinball (quantile) or
  squared loss, scalar or multi-output with an output matrix ``M`` (decomposable kernel
  ``k(x, x') M``), an unpenalised intercept per output.
- :class:`SketchedQuantileRegressor` — joint quantile regression: one output per quantile
  level, ``M_ij = exp(−γ_τ (τ_i − τ_j)²)``, the summed pinball losses.

Both minimise (docs/design/lipschitz.md; ``distsketch.solvers.lipschitz.newton``)::

    (1/n) Σ_i ℓ(f(x_i) − y_i) + (λ/2) ‖f‖²,   f(x) = k(x, X) Rᵀ Γ M + b₀

over the sketched space, fitted with the template of every model: one streaming pass (the
same as :class:`~distsketch.SketchedKRR`'s, so a store written by one serves the other), then
Newton iterations of one sweep each over the stored blocks, stopped on a certified relative
duality gap.
"""

from __future__ import annotations

import numbers
import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Self

import numpy as np

from ..engine.schedulers import distributed_client
from ..linalg.solve import whitening
from ..losses.base import Loss, check_loss
from ..losses.quantile import Pinball
from ..options import with_blas_limit
from ..solvers.lipschitz.problem import Problem
from .base import FitSpec, SketchedEstimator, checks_feature_names
from .growing import Growing
from .krr import SketchedKRR
from .ridge import kernel_expansion

if TYPE_CHECKING:
    import zarr

    from ..kernels.base import Kernel
    from ..options import EngineOptions
    from ..sketches.base import Sketch
    from ..solvers.routes import Route

__all__ = ["SketchedRegressor", "SketchedQuantileRegressor"]

_PARAMS = {"kernel": "kernel", "sketch": "sketch", "lam": "lam", "loss": "loss",
           "output_matrix": "matrix", "random_state": "random_state", "store": "store",
           "options": "options"}


def _check_matrix(M, d: int) -> np.ndarray:
    """``output_matrix`` as a symmetric PSD (d, d) float64 array."""
    if M is None:
        return np.eye(d)
    try:
        A = np.asarray(M, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"output_matrix: expected a ({d}, {d}) array, got {M!r}") from None
    if A.ndim == 0 and d == 1:
        A = A.reshape(1, 1)
    if A.shape != (d, d):
        raise ValueError(f"output_matrix: expected shape ({d}, {d}) (one row and column per "
                         f"output), got {A.shape}")
    if not np.isfinite(A).all():
        raise ValueError("output_matrix: contains NaN or infinity")
    scale = max(float(np.abs(A).max()), np.finfo(float).tiny)
    if np.abs(A - A.T).max() > 1e-10 * scale:
        raise ValueError("output_matrix: must be symmetric (M = Mᵀ)")
    w = np.linalg.eigvalsh(0.5 * (A + A.T))
    if w[0] < -1e-10 * scale:
        raise ValueError(f"output_matrix: must be positive semi-definite (smallest eigenvalue "
                         f"{w[0]:.3g})")
    if w[-1] <= 0:
        raise ValueError("output_matrix: must not be zero")
    return 0.5 * (A + A.T)




def _is_identity(M) -> bool:
    """Whether ``output_matrix`` is None or the identity (without knowing d)."""
    if M is None:
        return True
    try:
        A = np.asarray(M, dtype=np.float64)
    except (TypeError, ValueError):
        return False
    if A.ndim == 0:
        return float(A) == 1.0
    return A.ndim == 2 and A.shape[0] == A.shape[1] and np.array_equal(A, np.eye(A.shape[0]))


def _check_positive_int(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name}: expected a positive integer, got {value!r}")
    return int(value)


def _check_tol(value) -> float:
    if (isinstance(value, bool) or not isinstance(value, numbers.Real) or not np.isfinite(value)
            or not 0 < value < 1):
        raise ValueError(f"tol: the relative duality gap to reach must lie in (0, 1), got "
                         f"{value!r}")
    return float(value)


class SketchedRegressor(Growing, SketchedEstimator):
    """Sketched kernel regression with a Lipschitz (or the squared) loss, scalar or multi-output.

    Minimises ``(1/n) Σ_i ℓ(f(x_i) − y_i) + (λ/2) Tr(B Γ M Γᵀ)`` over
    ``f(x) = M Γᵀ R k(X, x) + b₀`` (Prop. 1 of El Ahmad et al., TMLR 2023, with an intercept),
    solved in the pipeline's whitened features to a certified relative duality gap ``tol``.

    Parameters
    ----------
    kernel : kernel, str or callable
        Input kernel (:mod:`distsketch.kernels`).
    loss : str or Loss
        ``"squared"``, ``"huber"`` (κ = 1), ``"epsilon_insensitive"`` (ε = 0.1), ``"pinball"``
        (τ = 0.5), or an object of :mod:`distsketch.losses` (``Huber(kappa)``,
        ``EpsilonInsensitive(epsilon)``, ``Pinball(tau)``, ``Squared()``). Multi-output
        Huber and ε-insensitive losses act on ``‖f(x) − y‖₂``.
    sketch : Sketch or None
        ``None``: exact (the n × n problem; small n only).
    lam : float or sequence of float
        λ > 0. A sequence is solved in decreasing order, each λ warm-started from the one
        before; the first value is active after ``fit``, :meth:`set_lam` switches among them.
    output_matrix : array of shape (d, d) or None
        ``M ⪰ 0`` of the decomposable kernel ``k(x, x') M`` (``None``: identity).
    fit_intercept : bool
        An unpenalised bias per output (``False``: the paper's problem exactly).
    tol : float
        Relative duality gap ``(P − D)/P`` at which to stop (``solver="pcg"``: the relative
        residual ``‖Pᵀ(z − Hα)‖ ≤ tol ‖Pᵀz‖`` per output).
    max_iter : int
        Most sweeps (passes over the stored blocks; PCG: over the rows) per λ; reaching it
        warns (``ConvergenceWarning``).
    exact_hessian : bool or None
        Multi-output radial losses: form the exact d × d Hessian of every row (``True``;
        d² Grams per sweep) or a scalar majorant (``False``: one Gram, more sweeps).
        ``None``: exact for d ≤ 8 while the d² Grams of size (m+1)² take at most 256 MiB.
    solver : {"newton", "admm", "pcg", "auto"}, a registered route's name or a Route
        ``"newton"``: (semismooth, smoothed) Newton iterations, weighted Grams per sweep
        (``distsketch.solvers.lipschitz.newton``). ``"admm"``: ADMM reusing the
        eigendecomposition of the feature Gram, no Gram per sweep, ``O(r²d)`` driver work per
        iteration and more iterations (``distsketch.solvers.lipschitz.admm``; without a
        ``store`` only on the local scheduler). Both stop on the same certified gap.
        ``"pcg"``: the squared loss only (scalar or multi-output), ``output_matrix`` None or
        the identity, a sketch that picks landmarks (``SubSampling``, ``LeverageScores``):
        Falkon's preconditioned conjugate gradient of :class:`~distsketch.SketchedKRR`
        (``distsketch.solvers.pcg``; no streaming
        pass, no ``G``, no ``C`` stored, one pass of recomputed kernel blocks per iteration),
        with the intercept fitted jointly (the features' mean removed, as on the other
        routes); it stops on the relative residual, not a duality gap. A general
        ``M = U diag(ν) Uᵀ ≻ 0`` is refused although it reduces to KRR: rotating the outputs
        by ``U`` decouples the problem into d ridge regressions on the targets ``Y U_j``
        with ``λ/ν_j`` each (``ν_j = 0``: the output's mean), i.e. one λ, hence one
        preconditioner and one CG, per eigenvalue of M, which this route does not do.
        ``"auto"``: for the squared loss with M the identity, PCG when
        ``distsketch.solvers.pcg.choose_solver`` picks it (as ``SketchedKRR(solver="auto")``:
        ``m > 8100`` landmarks, or a kept store's ``C`` over 32 GiB); otherwise ADMM from
        r ≥ 4000 whitened features (``EngineOptions(tuning=Tuning(auto_rank=...))``), else Newton.
    random_state, store, options
        As for :class:`~distsketch.SketchedKRR`.

    Attributes
    ----------
    sketch_ : RealizedSketch
    kernel_ : Kernel
    landmarks_ : array of shape (s', n_features)
    whitening_ : ndarray of shape (m, r), or None
        ``T`` (features ``φ(x) = Tᵀ R k(X, x)``); None after a PCG fit.
    output_sqrt_ : ndarray of shape (d, d)
        ``M^{1/2}``.
    coefs_ : ndarray of shape (n_lams, r, d)
        ``Ξ`` per λ (``f(x) = M^{1/2} Ξᵀ φ(x) + b₀``). After a PCG fit, shape
        (n_lams, s', d): the dual coefficients ``α(λ)`` on the landmarks themselves.
    intercepts_ : ndarray of shape (n_lams, d)
    dual_coef_ : ndarray of shape (s', d)
        ``f(x) = k(x, landmarks_) @ dual_coef_ + intercept_`` for the active λ.
    intercept_ : ndarray of shape (d,) (a float for 1-D y)
    n_iter_ : int
        Sweeps of the active λ's iterations (``n_iters_``: per λ).
    objective_ : float
        Primal objective at the solution (``objectives_``: per λ).
    duality_gap_ : float
        Its duality gap ``P − D`` (``duality_gaps_``: per λ; relative: divided by
        ``objective_``). NaN after a PCG fit, which forms no dual point: its certificate is
        ``residual_``.
    residual_ : float or None
        PCG only (None on the other routes): the relative residual ``‖Pᵀ(z − Hα)‖/‖Pᵀz‖``
        reached, the largest over the outputs (``residuals_``: per λ and output, shape
        (n_lams, d)). With ``H`` PCG's system matrix and ``P`` its preconditioner, the
        relative error of the preconditioned unknowns ``u = P^{-1}α`` is at most
        ``residual_ · cond(PᵀHP)``.
    n_passes_ : int
        Passes over the training rows this fit made (the streaming pass and the sweeps; PCG:
        its passes).
    solver_ : str
        The route taken: ``"newton"``, ``"admm"`` or ``"pcg"``.
    lam_, lams_, n_features_in_, feature_names_in_, store_
        As for :class:`~distsketch.SketchedKRR`.

    See Also
    --------
    SketchedQuantileRegressor : Joint quantile regression with the pinball loss.
    SketchedKRR : The squared loss's closed form, from the same streaming pass.

    References
    ----------
    .. [1] T. El Ahmad, P. Laforgue and F. d'Alché-Buc, "Fast Kernel Methods for Generic
       Lipschitz Losses via p-Sparsified Sketches", Transactions on Machine Learning
       Research, 2023.

    Examples
    --------
    Robust (κ-Huber) regression on 50 sub-sampled landmarks:

    >>> import numpy as np
    >>> from distsketch import SketchedRegressor
    >>> from distsketch.kernels import Gaussian
    >>> from distsketch.sketches import SubSampling
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(200, 3))
    >>> y = np.sin(X[:, 0]) + 0.1 * rng.standard_t(2, size=200)
    >>> model = SketchedRegressor(Gaussian(gamma=0.5), loss="huber", sketch=SubSampling(50),
    ...                           lam=1e-3, random_state=0).fit(X, y)
    >>> model.predict(X[:3]).shape
    (3,)
    >>> model.solver_, model.duality_gap_ <= 1e-6 * model.objective_
    ('newton', True)
    """

    _estimator_type = "regressor"
    _param_kinds = {**_PARAMS, "fit_intercept": "json", "tol": "json", "max_iter": "json",
                    "exact_hessian": "json", "solver": "solver"}
    _input = ("kernel", "sketch")
    _targets = "y"
    _standardized = "kernel"
    _configurable = True
    _aliases = ("regressor",)
    _pass_model = "SketchedKRR"  # the same pass: stores are shared with SketchedKRR

    def __init__(self, kernel: Kernel | str | Callable = "gaussian", *,
                 loss: str | Loss | dict = "squared", sketch: Sketch | None = None,
                 lam: float | Sequence[float] = 1e-6, output_matrix: Any = None,
                 fit_intercept: bool = True, tol: float = 1e-6, max_iter: int = 100,
                 exact_hessian: bool | None = None, solver: str | Route = "newton",
                 random_state: int | np.random.Generator | None = None,
                 store: str | os.PathLike | zarr.Group | None = None,
                 options: EngineOptions | None = None) -> None:
        self.kernel = kernel
        self.loss = loss
        self.sketch = sketch
        self.lam = lam
        self.output_matrix = output_matrix
        self.fit_intercept = fit_intercept
        self.tol = tol
        self.max_iter = max_iter
        self.exact_hessian = exact_hessian
        self.solver = solver
        self.random_state = random_state
        self.store = store
        self.options = options

    # -- what differs from the other quantile / regressor class -------------------------
    def _loss(self, d: int) -> Loss:
        return check_loss(self.loss, d)

    def _matrix(self, d: int) -> np.ndarray:
        return _check_matrix(self.output_matrix, d)

    def _n_outputs(self, spec: FitSpec) -> int:
        return 1 if spec.Y.input_ndim == 1 else spec.Y.shape[1]

    # -- fit ------------------------------------------------------------------------
    def _validate(self, X, Y) -> FitSpec:
        if not isinstance(self.fit_intercept, (bool, np.bool_)):
            raise ValueError(f"fit_intercept: expected True or False, got {self.fit_intercept!r}")
        _check_tol(self.tol)
        _check_positive_int(self.max_iter, "max_iter")
        if self.exact_hessian not in (None, True, False):
            raise ValueError(f"exact_hessian: expected None, True or False, got "
                             f"{self.exact_hessian!r}")
        self._check_own()
        spec = super()._validate(X, Y)
        d = self._n_outputs(spec)
        self._loss(d)
        self._matrix(d)
        return spec

    def _check_pcg(self, spec: FitSpec) -> None:
        """What ``solver="pcg"`` needs: the squared loss, M the identity, landmarks."""
        from ..solvers.pcg import check_pcg_sketch

        loss = self._loss(self._n_outputs(spec))
        if not loss.normal_equations:
            raise ValueError(f"solver='pcg' solves the squared loss's normal equations (kernel "
                             f"ridge regression); loss={loss!r} has none: use "
                             f"solver='newton' (or 'admm', 'auto')")
        if not _is_identity(self.output_matrix):
            raise ValueError("solver='pcg' needs output_matrix=None (the identity): a general "
                             "M ≻ 0 decouples into one ridge regression per eigenvector of M "
                             "with λ divided by its eigenvalue, a λ (and a preconditioner) per "
                             "output that this route does not solve; use solver='newton', or "
                             "rotate y by M's eigenvectors and fit one model per output")
        check_pcg_sketch(spec.sketches["sketch"], solver="pcg")

    # -- the solver routes (solvers/routes.py, solvers/lipschitz/routes.py) --------------
    _routes = ("newton", "admm", "pcg")
    _pcg_centre = True  # PCG fits the intercept jointly (the features' mean removed)

    def _auto_route(self, X):
        """PCG for the squared loss with M the identity when
        ``distsketch.solvers.pcg.choose_solver`` picks it (as :class:`~distsketch.SketchedKRR`);
        else the sweeps, Newton or ADMM by the features' rank (decided after the pass)."""
        from ..engine.rows import as_row_source
        from ..sketches.base import check_sketch
        from ..solvers.lipschitz.routes import NewtonOrADMM
        from ..solvers.pcg import choose_solver
        from ..solvers.routes import PCG

        try:  # bad arguments or data are left to fit's validation, in its order
            if not check_loss(self.loss, 1).normal_equations or not _is_identity(
                    self.output_matrix):
                return NewtonOrADMM()
            sketch = check_sketch(self.sketch, argument="sketch")
            n = as_row_source(X, argument="X").n
            tuning = self._options().tuning
        except Exception:
            return NewtonOrADMM()
        route = choose_solver("auto", n=n, m=getattr(sketch, "m", None), sketch=sketch,
                              store=self.store, tuning=tuning)
        return PCG() if route == "pcg" else NewtonOrADMM()

    def _lipschitz_problem(self, spec: FitSpec, res) -> tuple[Problem, np.ndarray]:
        """The sweeps' problem from the pass ``res`` (``solvers.lipschitz.problem.Problem``:
        the whitening ``T`` of ``B``, ``M^{1/2}``, the bordered Gram ``G̃`` with the intercept's
        row, ``b``, ``Σy``, the loss) and ``M``."""
        d = self._n_outputs(spec)
        loss = self._loss(d)
        Mx = self._matrix(d)
        nu, U = np.linalg.eigh(Mx)
        nu = np.clip(nu, 0.0, None)
        S = (U * np.sqrt(nu)) @ U.T
        sums, n = res.sums, res.n
        if res.x_sketch.is_identity:
            K = np.asarray(sums["C"], dtype=np.float64)
            Yv = np.asarray(sums["Y"], dtype=np.float64).reshape(n, -1)
            G, B, s, b, y1 = K.T @ K, K, K.sum(axis=0), K.T @ Yv, Yv.sum(axis=0)
        else:
            G, B, s = sums["G"], sums["B"], sums["s"]
            b, y1 = sums["b"], sums["y1"]
        m = G.shape[0]
        b = np.asarray(b, dtype=np.float64).reshape(m, -1)
        y1 = np.asarray(y1, dtype=np.float64).reshape(-1)
        if b.shape[1] != d:  # one target column for d outputs (joint quantiles)
            b, y1 = np.repeat(b, d, axis=1), np.repeat(y1, d)
        T = whitening(B, rtol=spec.options.eig_rtol, argument="kernel")
        Gt = np.empty((m + 1, m + 1))
        Gt[:m, :m], Gt[:m, m], Gt[m, :m], Gt[m, m] = G, s, s, n
        # exact d × d Hessians while their d² Grams stay small (d ≤ 8, at most 256 MiB)
        exact = (self.exact_hessian if self.exact_hessian is not None
                 else d <= 8 and d * d * (m + 1) ** 2 * 8 <= 2**28)
        prob = Problem(T=T, S=S, nu=nu, U=U, Gt=Gt, b=b, y1=y1, n=n, loss=loss,
                       intercept=bool(self.fit_intercept), exact_curvature=bool(exact))
        return prob, Mx

    def _adopt_path(self, spec: FitSpec, fitted) -> None:
        """A route's λ path: ``Ξ`` in the whitened features (``basis`` T, the sweeps) or ``α``
        on the landmarks (PCG), the intercepts, objectives and gaps of every λ."""
        table = fitted.path
        d = self._n_outputs(spec)
        self.kernel_ = spec.kernels["kernel"]
        self.sketch_, self.landmarks_ = fitted.x_sketch, fitted.x_landmarks
        self.whitening_ = table.basis
        self.output_sqrt_ = np.eye(d) if table.output_sqrt is None else table.output_sqrt
        self.coefs_ = table.coefs
        self.intercepts_ = table.intercepts
        self.n_iters_ = table.n_iters
        self.objectives_ = table.objectives
        self.duality_gaps_ = table.duality_gaps
        self.residuals_ = table.residuals
        self._y_1d = spec.Y.input_ndim == 1 and self._targets_1d_out()
        self.lams_ = tuple(spec.lams)
        self.lam_ = spec.lams[0]

    def _appending_refusal(self) -> str | None:
        """Every route of this model (Newton, ADMM, PCG) re-solves over all rows: appending
        needs the rows' blocks and targets kept in a store."""
        if self.store is None:
            return ("its routes re-solve over every row's blocks and targets, which only a "
                    "kept store keeps: fit with store=... (a path) to append rows")
        return None

    def _check_own(self) -> None:
        """Checks of the subclass's own arguments (before the data)."""
        if not isinstance(self.loss, (str, dict, Loss)):
            check_loss(self.loss, 1)  # raises, naming loss
        if isinstance(self.loss, Loss):
            self.loss.check(self.loss.default_outputs())

    def _sums(self, spec: FitSpec) -> tuple[str, ...]:
        if spec.exact("sketch"):
            return ("C", "Y")
        sums = ("G", "B", "b", "s", "y1")
        # no store to read the blocks back from: hold them for the sweeps while they fit in
        # options.sweep_memory (local scheduler only: a cluster's blocks stay on its workers)
        m = getattr(spec.sketches["sketch"], "m", None)
        size = spec.X.n * int(m or 0) * 8  # held as float64: no conversion per sweep
        if (self.store is None and m and size <= spec.options.sweep_memory
                and distributed_client() is None):
            sums += ("held",)
        return sums

    def _targets_1d_out(self) -> bool:
        """Whether 1-D targets give 1-D predictions (not for joint quantiles)."""
        return True

    def _update_coef(self) -> None:
        k = self.lams_.index(self.lam_)
        if self.whitening_ is None:  # PCG: the dual coefficients themselves (solvers/pcg.py)
            self.dual_coef_ = self.coefs_[k]
        else:
            self.dual_coef_ = self.sketch_.transpose_dot(self.whitening_ @ self.coefs_[k]
                                                         @ self.output_sqrt_)
        res = getattr(self, "residuals_", None)
        self.residual_ = None if res is None else float(np.max(res[k]))
        b0 = self.intercepts_[k]
        self.intercept_ = float(b0[0]) if self._y_1d else b0.copy()
        self.n_iter_ = int(self.n_iters_[k])
        self.objective_ = float(self.objectives_[k])
        self.duality_gap_ = float(self.duality_gaps_[k])

    def set_lam(self, lam: float) -> Self:
        """Switch the active λ to one of the fitted ``lams_``.

        Parameters
        ----------
        lam : float
            One of the fitted ``lams_`` (compared to a relative 1e-12).

        Returns
        -------
        self
            The estimator, with ``lam_`` and the coefficients of ``lam``.
        """
        self._check_fitted()
        matches = [v for v in self.lams_ if np.isclose(v, lam, rtol=1e-12, atol=0)]
        if not matches:
            raise ValueError(f"lam: {lam!r} was not fitted; the fitted values are "
                             f"{list(self.lams_)} (fit with lam=[...] to solve a path)")
        self.lam_ = matches[0]
        self._update_coef()
        return self

    def _default_metrics(self, Y) -> list[str]:
        return ["rmse", "mae", "r2"]

    # -- saving -----------------------------------------------------------------------
    def _get_state(self):
        arrays, state = super()._get_state()
        self._put_side("input", self.kernel_, self.sketch_, self.landmarks_, arrays, state)
        arrays.update(whitening=self.whitening_, output_sqrt=self.output_sqrt_,
                      coefs=self.coefs_, intercepts=self.intercepts_,
                      residuals=getattr(self, "residuals_", None))
        state.update(y_1d=bool(self._y_1d), lams=list(self.lams_), lam=self.lam_,
                     n_iters=[int(v) for v in self.n_iters_],
                     objectives=[float(v) for v in self.objectives_],
                     duality_gaps=[float(v) for v in self.duality_gaps_],
                     n_passes=int(self.n_passes_), solver=self.solver_)
        return arrays, state

    def _set_state(self, arrays, state):
        super()._set_state(arrays, state)
        self.kernel_, self.sketch_, self.landmarks_ = self._get_side("input", arrays, state)
        self.whitening_ = arrays.get("whitening")  # None: a PCG fit
        self.residuals_ = arrays.get("residuals")
        self.output_sqrt_ = arrays["output_sqrt"]
        self.coefs_ = arrays["coefs"]
        self.intercepts_ = arrays["intercepts"]
        self._y_1d = bool(state["y_1d"])
        self.lams_ = tuple(state["lams"])
        self.lam_ = float(state["lam"])
        self.n_iters_ = np.array(state["n_iters"])
        self.objectives_ = np.array(state["objectives"])
        self.duality_gaps_ = np.array(state["duality_gaps"])
        self.n_passes_ = int(state["n_passes"])
        self.solver_ = str(state.get("solver", "newton"))

    # -- prediction -------------------------------------------------------------------
    @checks_feature_names
    @with_blas_limit
    def predict(self, X: Any) -> Any:
        """Predict ``f(x) = k(x, landmarks_) @ dual_coef_ + intercept_``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Inputs: a numpy, scipy.sparse, dask or zarr array.

        Returns
        -------
        ndarray or dask array of shape (n_samples,) or (n_samples, d)
            One value per output (1-D for 1-D training targets); a dask array input gives
            a lazy dask array.
        """
        out = kernel_expansion(self, X) + self.intercepts_[self.lams_.index(self.lam_)]
        return out[:, 0] if self._y_1d else out

    #: R² of ``predict(X)`` (uniform average over outputs), as for SketchedKRR
    score = SketchedKRR.score


def _check_quantiles(quantiles) -> np.ndarray:
    try:
        q = np.asarray(quantiles, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        raise ValueError(f"quantiles: expected a sequence of levels in (0, 1), got "
                         f"{quantiles!r}") from None
    if q.size == 0 or not np.isfinite(q).all() or q.min() <= 0 or q.max() >= 1:
        raise ValueError(f"quantiles: every level must lie strictly between 0 and 1, got "
                         f"{quantiles!r}")
    if q.size > 1 and not np.all(np.diff(q) > 0):
        raise ValueError(f"quantiles: levels must be strictly increasing (sorted, no repeats), "
                         f"got {quantiles!r}")
    return q


class SketchedQuantileRegressor(SketchedRegressor):
    """Joint quantile regression: one output per level ``τ_1 < … < τ_d`` of a scalar target.

    Minimises ``(1/n) Σ_i Σ_j ρ_{τ_j}(y_i − f_j(x_i)) + (λ/2)‖f‖²`` with the decomposable
    kernel ``k(x, x') M``, ``M_ij = exp(−γ_τ (τ_i − τ_j)²)``, which ties neighbouring
    quantiles together (fewer crossings than separate fits; γ_τ → ∞: independent fits).

    Parameters
    ----------
    kernel : kernel, str or callable
        Input kernel (:mod:`distsketch.kernels`).
    quantiles : sequence of float
        Strictly increasing levels in (0, 1).
    quantile_gamma : float >= 0
        ``γ_τ`` of ``M`` (0: all quantiles share one function up to their intercepts).
    sketch, lam, fit_intercept, tol, max_iter, random_state, store, options
        As for :class:`SketchedRegressor`.

    Attributes
    ----------
    quantiles_ : ndarray of shape (d,)
        The levels, one output each: ``predict`` returns (n, d) quantiles.
    sketch_, kernel_, landmarks_, whitening_, output_sqrt_, coefs_, intercepts_, dual_coef_
        As for :class:`SketchedRegressor`.
    intercept_, n_iter_, objective_, duality_gap_, n_passes_, solver_, lam_, lams_
        As for :class:`SketchedRegressor`.
    n_features_in_, feature_names_in_, store_
        As for :class:`SketchedRegressor`.

    See Also
    --------
    SketchedRegressor : One output per target column, any Lipschitz loss.

    References
    ----------
    .. [1] M. Sangnier, O. Fercoq and F. d'Alché-Buc, "Joint quantile regression in
       vector-valued RKHSs", Advances in Neural Information Processing Systems 29, 2016.
    .. [2] T. El Ahmad, P. Laforgue and F. d'Alché-Buc, "Fast Kernel Methods for Generic
       Lipschitz Losses via p-Sparsified Sketches", Transactions on Machine Learning
       Research, 2023.

    Examples
    --------
    >>> import numpy as np
    >>> from distsketch import SketchedQuantileRegressor
    >>> from distsketch.kernels import Gaussian
    >>> from distsketch.sketches import SubSampling
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(200, 3))
    >>> y = np.sin(X[:, 0]) + 0.3 * rng.normal(size=200)
    >>> model = SketchedQuantileRegressor(Gaussian(gamma=0.5), quantiles=[0.1, 0.5, 0.9],
    ...                                   sketch=SubSampling(50), lam=1e-3,
    ...                                   random_state=0).fit(X, y)
    >>> Q = model.predict(X[:4])
    >>> Q.shape
    (4, 3)
    """

    _param_kinds = {k: v for k, v in _PARAMS.items() if k not in ("loss", "output_matrix")}
    _param_kinds.update(quantiles="json", quantile_gamma="json", fit_intercept="json",
                        tol="json", max_iter="json")
    _aliases = ("quantile",)

    def __init__(self, kernel: Kernel | str | Callable = "gaussian", *,
                 quantiles: Sequence[float] = (0.1, 0.3, 0.5, 0.7, 0.9),
                 quantile_gamma: float = 1.0, sketch: Sketch | None = None,
                 lam: float | Sequence[float] = 1e-6, fit_intercept: bool = True,
                 tol: float = 1e-6, max_iter: int = 200,
                 random_state: int | np.random.Generator | None = None,
                 store: str | os.PathLike | zarr.Group | None = None,
                 options: EngineOptions | None = None) -> None:
        self.kernel = kernel
        self.quantiles = quantiles
        self.quantile_gamma = quantile_gamma
        self.sketch = sketch
        self.lam = lam
        self.fit_intercept = fit_intercept
        self.tol = tol
        self.max_iter = max_iter
        self.random_state = random_state
        self.store = store
        self.options = options

    exact_hessian = None
    solver = "newton"  # joint quantiles: the Newton route (no solver= parameter yet)

    def _check_own(self) -> None:
        _check_quantiles(self.quantiles)
        g = self.quantile_gamma
        if isinstance(g, bool) or not isinstance(g, numbers.Real) or not np.isfinite(g) or g < 0:
            raise ValueError(f"quantile_gamma: expected a non-negative number, got {g!r}")

    def _n_outputs(self, spec: FitSpec) -> int:
        if spec.Y.input_ndim != 1 and spec.Y.shape[1] != 1:
            raise ValueError(f"y: {type(self).__name__} fits quantiles of one target; got "
                             f"{spec.Y.shape[1]} target columns")
        return len(_check_quantiles(self.quantiles))

    def _loss(self, d: int) -> Loss:
        return check_loss(Pinball(tuple(float(v) for v in _check_quantiles(self.quantiles))), d)

    def _matrix(self, d: int) -> np.ndarray:
        q = _check_quantiles(self.quantiles)
        return np.exp(-float(self.quantile_gamma) * (q[:, None] - q[None, :]) ** 2)

    def _targets_1d_out(self) -> bool:
        return False

    def __sklearn_tags__(self):
        """One target (its quantiles are the outputs): not a multi-output regressor."""
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = False
        return tags

    def _adopt_path(self, spec, fitted) -> None:
        super()._adopt_path(spec, fitted)
        self.quantiles_ = _check_quantiles(self.quantiles)

    def _set_state(self, arrays, state):
        super()._set_state(arrays, state)
        self.quantiles_ = _check_quantiles(self.quantiles)

    def _default_metrics(self, Y) -> list[str]:
        return ["pinball", "crossing"]

    @checks_feature_names
    def score(self, X: Any, y: Any) -> float:
        """Minus the mean summed pinball loss of ``predict(X)`` (higher is better).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Inputs.
        y : array-like of shape (n_samples,)
            True targets.

        Returns
        -------
        float
            ``−(1/n) Σ_i Σ_j ρ_{τ_j}(y_i − Q_ij)``.
        """
        from ..metrics import pinball_loss

        return -pinball_loss(np.asarray(y, dtype=np.float64), np.asarray(self.predict(X)),
                             self.quantiles_)
