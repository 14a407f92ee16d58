"""SISOKR: one sketched pipeline for IOKR, SIOKR, ISOKR and SISOKR (interchangeable sketches).

:class:`SISOKR` has an input and an output kernel, each side exact (``None``) or sketched, and
minimises ``(1/n) Σ_i ‖h(x_i) − ψ(y_i)‖² + λ ‖h‖²`` over the sketched hypothesis space (see
:mod:`distsketch.linalg.solve` for the closed forms). It fits with the template of
:class:`~distsketch.models.base.SketchedEstimator` (one streaming pass, then the driver solve),
solves any λ from the pass's small sums with no new pass, calls one ``solve_sisokr`` and keeps
the small (``m × m``-sized) fitted state as numpy arrays; its kernelised sides are
:class:`~distsketch.engine.features.FeatureMap` objects. Its reduced rank and saved state are
module-level functions in :mod:`distsketch.models.sisokr_state`; its λ paths and solver route are in
:mod:`distsketch.models.ridge`.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Self

import numpy as np

from .._base import check_lam
from ..backends.base import dense
from ..decoding.routes import (
    Surrogate,
    candidate_scores,
    centred,
    check_width,
    decode,
    default_features,
)
from ..engine.features import FeatureMap
from ..engine.rows import as_row_source
from ..kernels.families import Linear
from ..options import driver_threads, with_blas_limit
from ..solvers.direct import sisokr_coef, sisokr_sums, solve_sisokr
from ..solvers.reduced_rank import check_rank
from ..solvers.routes import fitted_index
from .base import FitSpec, RidgeEstimator, checks_feature_names
from .centring import CentredGrowth
from .growing import Growing
from .ridge import (
    RIDGE_PARAMS,
    SisokrClosedForm,
    SisokrTable,
    auto_sisokr_route,
    centred_rows,
    check_intercept,
    check_sisokr_pcg,
    driver_size,
    pcg_appending_refusal,
)
from .sisokr_state import operator_gram, output_metric, principal_at, set_sisokr_state, sisokr_state

if TYPE_CHECKING:
    import zarr

    from ..engine.store import StoreDirectory
    from ..kernels.base import Kernel
    from ..options import EngineOptions
    from ..sketches.base import Sketch
    from ..solvers.routes import Route

__all__ = ["SISOKR"]



class SISOKR(CentredGrowth, Growing, RidgeEstimator):
    """Sketch-In-Sketch-Out kernel regression for structured outputs (IOKR family).

    Learns a surrogate ``ĥ`` from the sketched input space to the sketched output space — kernel
    ridge regression of the outputs' feature maps ``ψ(y)``, projected onto the span of the
    output sketch — and predicts by decoding ``argmin_y k_Y(y, y) − 2⟨ĥ(x), ψ(y)⟩`` over
    candidates (Prop. 1 of El Ahmad et al., AISTATS 2024). ``input_sketch=None`` / ``output_sketch=None`` keep that side exact:

    ======== ================ ================
    model    input_sketch     output_sketch
    ======== ================ ================
    IOKR     None             None
    SIOKR    a sketch         None
    ISOKR    None             a sketch
    SISOKR   a sketch         a sketch
    ======== ================ ================

    Parameters
    ----------
    input_kernel, output_kernel : kernel, str or callable
        See :mod:`distsketch.kernels`. A :class:`~distsketch.kernels.Linear` output kernel
        makes ``predict`` return vectors (multi-output regression, no decoding).
    input_sketch, output_sketch : Sketch or None
    lam : float or sequence of float
        Ridge parameter λ > 0 of ``(1/n) Σ ‖h(x_i) − ψ(y_i)‖² + λ‖h‖²``. A sequence is
        solved from the same pass: one Cholesky factorisation per λ, or one
        eigendecomposition for a path long enough that it pays off (more than 8 values with
        an exact input side; the measured crossover of ``distsketch.solvers.direct.eigen_pays``
        with a sketched one); the first value is active after ``fit`` and :meth:`set_lam`
        switches.
    rank : None, int or sequence of int
        Reduced-rank estimator (Brogat-Motte et al., JMLR 2022): the surrogate projected onto
        the top-``p`` principal directions in H_Y of its own training predictions,
        ``ĥ_p = P_p ĥ``. ``None``: full rank (IOKR and its sketched forms). A sequence is
        served by one eigendecomposition per λ; the first value is active after ``fit`` and
        :meth:`set_rank` switches. ``p`` at least the output dimension gives back the
        full-rank model exactly. Decoding is then ``p``-dimensional on both sides.
    rank_lam : None or float
        λ₁ of the projection (the paper's estimator projects ``W(λ₂)`` onto the principal
        directions of ``W(λ₁)``); ``None``: the active λ (λ₁ = λ₂, the paper's experiments).
    fit_intercept : bool, default False
        Vector outputs (a :class:`~distsketch.kernels.Linear` output kernel) only: centre the
        outputs, ``ψ(y) = y − ȳ``, and add the training mean back, ``h(x) = ĥ(x) + ȳ`` — what
        :class:`SketchedKRR` does with ``fit_intercept=True``. ``ȳ`` is computed before the
        pass (one read of ``Y``, not of ``X``). Decoding among candidates then ranks
        ``‖ĥ(x) + ȳ − y‖²``; a :class:`~distsketch.CandidateStore` (features cached for the
        uncentred outputs) is refused. ``partial_fit`` and ``forget`` centre by the mean of every
        row held (docs/design/growing.md, "Centred vector outputs").
    random_state : None, int or numpy.random.Generator
        Seeds the sketches (one generator per fit).
    store : None, path, zarr.Group or StoreDirectory
        Where the pass is written. ``None``: nothing is written (the sums stay in memory;
        an interrupted fit starts over).
        A path is kept, and a fit interrupted there resumes when fitted again with the
        same data, ``random_state`` and options (README, "What the store guarantees").
        :class:`~distsketch.StoreDirectory` keeps one store per pass configuration, for
        estimators that are cloned and refitted (``GridSearchCV``).
    options : EngineOptions or None
        Engine knobs (block rows, dtype, thresholds); they do not change the model.
    solver : {"direct", "pcg", "auto"}, a registered route's name or a Route, default "direct"
        How the input side is solved. ``"direct"``: the pass forms ``G = CᵀC`` (``2nm²``
        flops) and the driver solves every λ from it. ``"pcg"``: Falkon's preconditioned
        conjugate gradient (``distsketch.solvers.pcg.fit_pcg_sisokr``), the r_Y output
        coordinates as right-hand sides of one system ``(K_nmᵀK_nm + nλK_mm) α = K_nmᵀ D T_Y``:
        one pass for ``M``, ``E`` (no ``G``, nothing stored), then one pass of recomputed
        kernel blocks per iteration; the same model up to ``tol``, in the input features
        ``k_X(X_J, x)`` with ``coef_ = α(λ)ᵀ``. Needs a sub-sampling input sketch
        (``SubSampling``, ``LeverageScores``) and a sketched output side (an exact one would
        be n right-hand sides). ``"auto"``: ``distsketch.solvers.pcg.choose_solver`` on the input
        side's m (direct while ``m ≤ 8100``), direct where PCG does not apply.
    tol : float, default 1e-8
        PCG only: the relative residual ``‖Pᵀ(z − Hα)‖ ≤ tol ‖Pᵀz‖`` to reach, per output
        coordinate.
    max_iter : int, default 200
        PCG only: most iterations (passes) per λ; reaching it warns (``ConvergenceWarning``).

    Attributes
    ----------
    input_sketch_, output_sketch_ : RealizedSketch
    input_feature_map_ : FeatureMap
        ``φ_X(x) = T_Xᵀ R_X k_X(X, x)`` in the eigenbasis of ``H`` on the eigen route;
        ``(R_X k_X(X, x))_keep`` in the generalized form (the certified columns of
        ``B``; ``distsketch.linalg.solve.solve_input``); ``k_X(X, x)`` for an exact input side on
        the Cholesky route: ``(input_kernel_, input_landmarks_, input_projection_)``.
    output_feature_map_ : FeatureMap
        ``φ_Y(y) = T_Yᵀ R_Y k_Y(Y, y)`` (``k_Y(Y, y)`` for an exact output side): the
        candidate features of decoding.
    input_landmarks_ : array of shape (s'_X, d_X)
    output_landmarks_ : array of shape (s'_Y, d_Y)
    input_solution_ : InputSolution or None
        λ-independent factors of the input side: ``T_X`` and ``H = T_Xᵀ G T_X``, the
        generalized form ``G_kk``, ``B_kk``, or ``H = K_X`` with an exact input side (see
        ``distsketch.linalg.solve``); its ``route`` says how the active λ was solved. None after
        a PCG fit (input features ``k_X(X_J, x)``, ``coef_ = α(λ)ᵀ``).
    solver_ : str
        The route taken, ``"direct"`` or ``"pcg"``.
    n_iter_, n_iters_, residuals_, n_passes_
        PCG only: iterations of the active λ and of each λ, relative residuals per λ and
        output coordinate (n_lams, r_Y), passes over the rows the fit made. A PCG fit keeps
        its λ path: :meth:`set_lam` switches among ``lams_`` only, and ``rank_lam`` must be
        one of them.
    output_whitening_ : ndarray of shape (m_Y, r_Y) or None
        ``None`` for an exact output side (features are ``k_Y(Y, y)`` themselves).
    lam_ : float
        Active λ.
    lams_ : tuple of float
    coef_ : ndarray of shape (r_Y, r_X), or (p, r_X) with a rank
        ``W(λ)`` for the active λ (``r_X = n`` with an exact input side, whose input
        features are ``k_X(X, x)``; ``r_Y = n`` with an exact output side); with an active
        rank ``p``, ``A_pᵀ Γ W(λ)``: the coordinates of ``ĥ_p`` in its principal directions
        (``Γ``: the output coordinates' metric, ``I`` or ``K_Y``).
    rank_, ranks_ : int or None, tuple of int
        Active and fitted ranks (``None`` / ``()``: full rank).
    principal_values_ : ndarray or None
        ``μ``, the eigenvalues of ``Σ_i ĥ(x_i) ⊗ ĥ(x_i)`` (descending) at the projection's λ,
        when a rank is active.
    candidates_ : ndarray of shape (n_candidates, d_Y)
        Unique training outputs in order of first appearance (default candidates).
    candidate_index_ : ndarray of int
        Training row of each default candidate's first appearance.
    output_key_ : str
        ``output_feature_map_.key``: identifies the output side, the cache key of candidate
        features in a :class:`~distsketch.CandidateStore` (λ does not change it).
    intercept_ : ndarray of shape (d_Y,) or None
        ``ȳ`` with ``fit_intercept=True``, else None.
    n_features_in_ : int
    feature_names_in_ : ndarray of str, shape (``n_features_in_``,)
        Column names of a data frame ``X`` given at fit (pandas, dask; only when all are
        strings). Prediction methods refuse a frame whose names differ or come in another
        order, and warn when names are on one side only (scikit-learn's rule).
    store_ : str or None
        Path of the kept store.

    References
    ----------
    .. [1] T. El Ahmad, L. Brogat-Motte, P. Laforgue and F. d'Alché-Buc, "Sketch In, Sketch
       Out: Accelerating both Learning and Inference for Structured Prediction with Kernels",
       AISTATS 2024.
    .. [2] L. Brogat-Motte, A. Rudi, C. Brouard, J. Rousu and F. d'Alché-Buc, "Vector-Valued
       Least-Squares Regression under Output Regularity Assumptions", JMLR 23, 2022.

    Examples
    --------
    >>> import numpy as np
    >>> from distsketch import SISOKR, Gaussian, SubSampling
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(100, 4))
    >>> Y = (X[:, :3] + 0.3 * rng.normal(size=(100, 3)) > 0).astype(float)  # 3 labels
    >>> model = SISOKR(Gaussian(gamma=0.5), Gaussian(gamma=1.0), input_sketch=SubSampling(30),
    ...                output_sketch=SubSampling(30), lam=1e-3, random_state=0).fit(X, Y)
    >>> model.predict(X[:2])  # decoded among the training outputs
    array([[1., 0., 1.],
           [0., 1., 1.]])
    """

    _estimator_type = None  # structured prediction: neither classifier nor regressor
    _param_kinds = {"input_kernel": "kernel", "output_kernel": "kernel",
                    "input_sketch": "sketch", "output_sketch": "sketch", **RIDGE_PARAMS,
                    "rank": "rank", "rank_lam": "json", "fit_intercept": "json",
                    "solver": "solver", "tol": "json", "max_iter": "json"}
    _input = ("input_kernel", "input_sketch")
    _output = ("output_kernel", "output_sketch")
    _targets = "Y"
    _standardized = "input_kernel"
    _configurable = "default"  # the model of a config without [model] type

    def __init__(self, input_kernel: Kernel | str | Callable = "gaussian",
                 output_kernel: Kernel | str | Callable = "gaussian", *,
                 input_sketch: Sketch | None = None, output_sketch: Sketch | None = None,
                 lam: float | Sequence[float] = 1e-6, rank: int | Sequence[int] | None = None,
                 rank_lam: float | None = None, fit_intercept: bool = False,
                 random_state: int | np.random.Generator | None = None,
                 store: str | os.PathLike | zarr.Group | StoreDirectory | None = None,
                 options: EngineOptions | None = None, solver: str | Route = "direct",
                 tol: float = 1e-8, max_iter: int = 200) -> None:
        self.input_kernel = input_kernel
        self.output_kernel = output_kernel
        self.input_sketch = input_sketch
        self.output_sketch = output_sketch
        self.lam = lam
        self.rank = rank
        self.rank_lam = rank_lam
        self.fit_intercept = fit_intercept
        self.random_state = random_state
        self.store = store
        self.options = options
        self.solver = solver
        self.tol = tol
        self.max_iter = max_iter

    # -- fit ------------------------------------------------------------------------
    def _validate(self, X, Y) -> FitSpec:
        check_rank(self.rank)
        if self.rank_lam is not None and len(check_lam(self.rank_lam, argument="rank_lam")) != 1:
            raise ValueError(f"rank_lam: give one λ for the projection, got {self.rank_lam!r}")
        intercept = getattr(self, "fit_intercept", False)
        check_intercept(intercept)
        spec = super()._validate(X, Y)
        self._offset = None
        if intercept:
            if not isinstance(spec.kernels["output_kernel"], Linear):
                raise ValueError("fit_intercept: an intercept exists for vector outputs (a Linear "
                                 "output kernel) only; structured outputs have none: set "
                                 "fit_intercept=False")
            self._offset, Yc = centred_rows(spec.Y)
            spec = dataclasses.replace(spec, Y=as_row_source(Yc, argument="Y"))
        return spec

    def _appending_refusal(self) -> str | None:
        """PCG without a kept store: no appending (:func:`.ridge.pcg_appending_refusal`)."""
        return pcg_appending_refusal(self)

    def _sums(self, spec: FitSpec) -> tuple[str, ...]:
        return sisokr_sums(x_exact=spec.exact("input_sketch"), y_exact=spec.exact("output_sketch"),
                           linear_output=isinstance(spec.kernels["output_kernel"], Linear))

    #: Whether the fit needs the input side's eigenbasis whatever the λ path (SISOKRCV's
    #: fold scores); otherwise the driver picks its route by cost (distsketch.solvers.direct).
    _needs_eigenbasis = False

    # -- the solver route (SISOKRCV, without a ``solver`` parameter, stays direct) ----------
    _routes = ("direct", "pcg")

    def _auto_route(self, X):
        """PCG where ``distsketch.solvers.pcg.choose_solver`` picks it and the model can take
        it (a sketched output side; a ``rank_lam`` among the fitted λ), else direct."""
        return auto_sisokr_route(self, X)

    def _check_pcg_args(self) -> None:
        check_sisokr_pcg(self)

    def _check_pcg(self, spec: FitSpec) -> None:
        if self.rank_lam is not None:  # PCG serves its fitted λ only: before anything is written
            fitted_index(spec.lams, check_lam(self.rank_lam)[0], argument="rank_lam")

    def _table(self, table):
        return SisokrTable(**{f.name: getattr(table, f.name)
                              for f in dataclasses.fields(table)})

    def _adopt_path(self, spec: FitSpec, fitted) -> None:
        """PCG's fit (:func:`distsketch.solvers.pcg.fit_pcg_sisokr`): the input side's λ path (α on
        the input landmarks, ``W(λ) = α(λ)ᵀ``) and the output side from ``fitted.result``."""
        res = fitted.result
        linear = isinstance(spec.kernels["output_kernel"], Linear)
        self.path_ = self._table(fitted.path)
        self.input_solution_ = None
        out_proj = res.y_sketch.transpose_dot(res.output_whitening)
        self._set_fitted(spec, res, input_projection=None, output_projection=out_proj,
                         output_whitening=res.output_whitening, operator=None,
                         output_map=out_proj.T @ dense(res.y_landmarks) if linear else None)

    def _solve(self, spec: FitSpec, res) -> None:
        ky = spec.kernels["output_kernel"]
        linear = isinstance(ky, Linear)
        with driver_threads(driver_size(res.sums)):
            sol = solve_sisokr(res.sums, res.x_sketch, res.y_sketch, res.y_landmarks, n=res.n,
                               rtol=spec.options.eig_rtol, n_lams=len(spec.lams),
                               linear_output=linear, eigen=self._needs_eigenbasis,
                               threads=driver_threads, tuning=spec.options.tuning)
        self.input_solution_ = sol.input
        self.path_ = SisokrClosedForm(sol.input, sol.operator)
        self._set_fitted(spec, res, input_projection=sol.input_projection,
                         output_projection=sol.output_projection,
                         output_whitening=sol.output_whitening, operator=sol.operator,
                         output_map=sol.output_map)

    def _set_fitted(self, spec: FitSpec, res, *, input_projection, output_projection,
                    output_whitening, operator, output_map) -> None:
        """The fitted sides and λ / rank state of either route (``res``: the pass's result
        or :class:`~distsketch.solvers.pcg.SisokrPCGFit`: sketches, landmarks, sums)."""
        kx, ky = spec.kernels["input_kernel"], spec.kernels["output_kernel"]
        chunk = spec.options.gram_chunk
        self.input_sketch_, self.output_sketch_ = res.x_sketch, res.y_sketch
        tuning = spec.options.tuning
        self.input_feature_map_ = FeatureMap(kx, res.x_landmarks, input_projection, chunk,
                                             tuning)
        self._output_base = FeatureMap(ky, res.y_landmarks, output_projection, chunk, tuning)
        self.output_feature_map_ = self._output_base
        self.output_whitening_ = output_whitening
        self.operator_ = operator
        if isinstance(ky, Linear):
            self.candidates_ = self.candidate_index_ = None
            self._output_map_base = output_map
        else:
            self._output_map_base = None
            rows, first = res.sums["U"]
            order = np.argsort(first, kind="stable")
            self.candidates_, self.candidate_index_ = rows[order], first[order]
        self.ranks_, self.rank_lam_ = self._fit_ranks()
        if self.rank_lam_ is not None:
            self.rank_lam_ = self.path_.fitted_lam(self.rank_lam_, argument="rank_lam")
        self.rank_ = self.ranks_[0] if self.ranks_ else None
        self._principal = self._metric = self._opgram = None
        self._set_lams(spec)
        self.n_outputs_ = spec.Y.shape[1]
        self.intercept_ = getattr(self, "_offset", None)  # set by _validate (not SISOKRCV)
        self._caches = {}

    def _fit_ranks(self) -> tuple[tuple[int, ...], float | None]:
        """The fitted ranks (the first active) and the projection's λ₁ (None: λ)."""
        return (check_rank(self.rank),
                None if self.rank_lam is None else check_lam(self.rank_lam)[0])

    def _factored_rank(self) -> bool:
        """Whether the reduced rank takes
        :func:`~distsketch.solvers.reduced_rank.factored_directions`: a sketched input side (direct
        solver) with an exact output side, where the metric route would form and eigendecompose n ×
        n matrices."""
        sol = self.path_.solution
        return self._output_base.projection is None and sol is not None and not sol.exact

    def _update_coef(self):
        path = self.path_  # W(λ): the closed form's, or α(λ)ᵀ in the input features k_X(X_J, x)
        W = path.coef(self.lam_)
        self.n_iters_ = path.iterations(self.lams_)
        self.n_iter_ = path.n_iter(self.lam_)
        self.residuals_ = (None if path.residuals is None
                           else np.asarray(path.residuals, dtype=np.float64))
        base, out_map = self._output_base, self._output_map_base
        self.principal_values_ = None
        p = self.rank_
        if p is not None and p < W.shape[0]:
            A, mu = principal_at(self, self.rank_lam_ if self.rank_lam_ is not None
                                  else self.lam_)
            if self._factored_rank():  # A_pᵀ K_Y W = E_pᵀ Q N (W = Rᵀ N)
                Ep = A[:, :p]
                self.coef_ = Ep.T @ sisokr_coef(self.input_solution_, operator_gram(self),
                                                self.lam_)
                Ap = self.operator_.T @ Ep
            else:
                Ap = A[:, :p]
                metric = output_metric(self)
                self.coef_ = Ap.T @ (W if metric is None else metric @ W)
            proj = Ap if base.projection is None else np.asarray(base.projection) @ Ap
            base = dataclasses.replace(base, projection=proj)
            out_map = None if out_map is None else Ap.T @ out_map
            self.principal_values_ = mu
        else:
            self.coef_ = W
        if base is not self.output_feature_map_:
            self._caches.pop("candidate_features", None)
        self.output_feature_map_ = base
        if out_map is not None:
            self.output_map_ = out_map
        # identifies the output features (what candidate features depend on): the output
        # side, and with a rank the projection (λ₁, p)
        self.output_key_ = self.output_feature_map_.key

    @with_blas_limit
    def set_rank(self, rank: int | None) -> Self:
        """Switch the active rank without touching the data (any rank, not only ``ranks_``).

        Parameters
        ----------
        rank : int or None
            A positive rank, or ``None`` for full rank.

        Returns
        -------
        self
        """
        self._check_fitted()
        ranks = check_rank(rank)
        if len(ranks) > 1:
            raise ValueError(f"rank: give one rank (or None), got {rank!r}")
        self.rank_ = ranks[0] if ranks else None
        self._update_coef()
        return self

    def _default_metrics(self, Y) -> list[str]:
        if self.candidates_ is None:  # linear output kernel: vectors
            return ["rmse", "r2"]
        Yd = dense(Y)
        binary = np.isin(np.unique(Yd), [0, 1]).all()
        return (["f1_samples", "hamming_loss"] if binary else []) + ["kernel_loss", "surrogate_mse"]

    # -- saving -----------------------------------------------------------------------
    def _get_state(self):
        return sisokr_state(self, *super()._get_state())

    def _set_state(self, arrays, state):
        super()._set_state(arrays, state)
        set_sisokr_state(self, arrays, state)

    # -- the feature maps' parts ------------------------------------------------------
    input_kernel_ = property(lambda self: self.input_feature_map_.kernel,
                             doc="The fitted input kernel.")
    output_kernel_ = property(lambda self: self.output_feature_map_.kernel,
                              doc="The fitted output kernel.")
    input_landmarks_ = property(lambda self: self.input_feature_map_.landmarks,
                                doc="Input landmarks ``X_J``, (s'_X, d_X).")
    output_landmarks_ = property(lambda self: self.output_feature_map_.landmarks,
                                 doc="Output landmarks ``Y_J``, (s'_Y, d_Y).")
    input_projection_ = property(lambda self: self.input_feature_map_.projection,
                                 doc="``R_Xmixᵀ (T_X V)`` (s'_X, r_X), or None (exact input, "
                                     "Cholesky route).")
    output_projection_ = property(lambda self: self.output_feature_map_.projection,
                                  doc="``R_Ymixᵀ T_Y`` (s'_Y, r_Y), or None (exact output).")

    def _input_map(self) -> FeatureMap:
        return self._feature_map(self.input_feature_map_)

    def _output_map(self) -> FeatureMap:
        return self._feature_map(self.output_feature_map_)

    # -- features ----------------------------------------------------------------
    @checks_feature_names
    @with_blas_limit
    def input_features(self, X: Any) -> Any:
        """``φ_X(x) = T_Xᵀ R_X k_X(X_train, x)`` for each row (exact input side:
        ``k_X(X_train, x)``, ``r_X = n``).

        Parameters
        ----------
        X : array of shape (n_queries, d_X)

        Returns
        -------
        array of shape (n_queries, r_X)
            Dask in, dask out.
        """
        self._check_fitted()
        return self._input_map().transform(X, block_memory=self._options().block_memory,
                                           model="SISOKR")

    @with_blas_limit
    def output_features(self, Y: Any) -> Any:
        """``φ_Y(y) = T_Yᵀ R_Y k_Y(Y_train, y)`` for each row (with an intercept, of the centred
        rows ``y − ȳ``).

        Parameters
        ----------
        Y : array of shape (n_candidates, d_Y)

        Returns
        -------
        array of shape (n_candidates, r_Y)
        """
        self._check_fitted()
        Y = centred(check_width(Y, self.n_outputs_, "candidates"),
                    getattr(self, "intercept_", None))
        return self._output_map().transform(Y, block_memory=self._options().block_memory,
                                            argument="candidates", model="SISOKR")

    @checks_feature_names
    @with_blas_limit
    def surrogate(self, X: Any) -> np.ndarray:
        """``W(λ) φ_X(x)``: coordinates of ``ĥ(x)`` in the output features, computed block by
        block on all cores, never holding ``φ_X`` of all queries.

        Parameters
        ----------
        X : array of shape (n_queries, d_X)

        Returns
        -------
        ndarray of shape (n_queries, r_Y)
        """
        self._check_fitted()
        return np.asarray(self._input_map().transform(
            X, post=self.coef_.T, block_memory=self._options().block_memory, model="SISOKR"))

    @checks_feature_names
    def score(self, X: Any, y: Any) -> float:
        """Negative mean surrogate error ``−(1/n) Σ_i ‖ĥ(x_i) − ψ(y_i)‖²`` in H_Y (greater is
        better; :func:`distsketch.metrics.surrogate_mse`).

        The criterion the model minimises (without its penalty) and the default scoring of
        :class:`~distsketch.SISOKRCV`: no decoding, so it is cheap, defined for every output
        kernel and what scikit-learn's ``GridSearchCV``/``cross_val_score`` use by default.
        For a decoded metric pass a scorer (e.g. F1 from :mod:`distsketch.metrics`).

        Parameters
        ----------
        X : array of shape (n, d_X)
        y : array of shape (n, d_Y)
            True output rows (named ``y`` as in every scikit-learn ``score``, which passes it by
            keyword).

        Returns
        -------
        float
        """
        from ..metrics import surrogate_mse

        return -surrogate_mse(self, X, y)

    # -- decoding (distsketch.decoding) --------------------------------------------
    @checks_feature_names
    @with_blas_limit
    def score_candidates(self, X: Any, candidates: Any) -> np.ndarray:
        """Decoding criterion ``k_Y(y, y) − 2⟨ĥ(x), ψ(y)⟩``; smaller is better.

        Parameters
        ----------
        X : array of shape (n_queries, d_X)
        candidates : array of shape (n_candidates, d_Y)

        Returns
        -------
        ndarray of shape (n_queries, n_candidates)
        """
        self._check_fitted()
        cand = centred(check_width(candidates, self.n_outputs_, "candidates"),
                       getattr(self, "intercept_", None))
        return candidate_scores(self._output_map(), self._surrogate(), X, cand)

    @checks_feature_names
    @with_blas_limit
    def predict_topk(self, X: Any, candidates: Any = None, *, k: int = 1,
                     candidate_sets: Any = None,
                     query_sets: Any = None) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` best candidates of each query, by the decoding criterion.

        The score matrix is never materialised: map tasks score (query × candidate) blocks
        into partial top-k results merged by a tree (``distsketch.decoding.preimage``).

        Parameters
        ----------
        X : array of shape (n_queries, d_X)
        candidates : array of shape (n_candidates, d_Y), or a fixed CandidateStore, optional
            One candidate set for every query. Default: the unique training outputs.
        k : int
            Number of candidates to return per query.
        candidate_sets : sequence of arrays (n_s, d_Y), or a ragged CandidateStore, optional
            Per-query candidate sets; each query is scored only against its own set.
        query_sets : array of int of shape (n_queries,), optional
            Set number of each query (default: the store's own ``query_sets``).

        Returns
        -------
        indices : ndarray of int64, shape (n_queries, k)
            Rows of ``candidates``, or positions inside each query's set; ``-1`` where a set
            has fewer than ``k`` members. Ties are broken by the lower index.
        scores : ndarray of float64, shape (n_queries, k)
            ``k_Y(y, y) − 2⟨ĥ(x), ψ(y)⟩`` (``+inf`` for padding), ascending.
        """
        idx, scores, _ = self._decode(X, candidates, k, candidate_sets, query_sets)
        return idx, scores

    @checks_feature_names
    @with_blas_limit
    def predict(self, X: Any, candidates: Any = None, *, candidate_sets: Any = None,
                query_sets: Any = None) -> Any:
        """Best candidate row per query; vectors ``ĥ(x)`` for a linear output kernel.

        Parameters
        ----------
        X : array of shape (n_queries, d_X)
        candidates, candidate_sets, query_sets
            As for :meth:`predict_topk`; default candidates: the unique training outputs
            (``candidates_``).

        Returns
        -------
        ndarray of shape (n_queries, d_Y)
        """
        self._check_fitted()
        if candidates is None and candidate_sets is None and self.candidates_ is None:
            h = self.surrogate(X) @ self.output_map_  # linear output kernel: h(x) itself
            return h if getattr(self, "intercept_", None) is None else h + self.intercept_
        idx, _, take = self._decode(X, candidates, 1, candidate_sets, query_sets)
        return dense(take(idx[:, 0]))

    def _decode(self, X, candidates, k, candidate_sets, query_sets):
        """:func:`distsketch.decoding.routes.decode`: ``(indices, scores, take)``."""
        self._check_fitted()
        return decode(self._output_map(), self._surrogate(), X, candidates, self._options(),
                      k=k, candidate_sets=candidate_sets, query_sets=query_sets,
                      width=self.n_outputs_, key=self.output_key_,
                      default=self._default_candidates, offset=getattr(self, "intercept_", None))

    def _default_candidates(self, fmap: FeatureMap):
        """``(candidates_, φ_Y, kyy)``: the default candidates' features, once per fit."""
        if self.candidates_ is None:
            raise ValueError("candidates: a model with a linear output kernel has no default "
                             "candidates; pass candidates=")
        features = self._caches.get("candidate_features")
        if features is None:
            features = self._caches["candidate_features"] = default_features(
                fmap, self.candidates_)
        return (self.candidates_, *features)

    #: Folded decoding: ``None`` (the cost rule of :func:`distsketch.decoding.preimage.fold_route`),
    #: or force ``"unfolded"``, ``"coef"``, ``"features"`` or ``"kernel"`` (tests, benchmarks).
    _fold = None

    def _fold_cache(self) -> dict:
        """Folded matrices of :class:`~distsketch.decoding.routes.Surrogate`, valid for the active
        coefficients: emptied whenever ``coef_`` (λ, rank, refit) or the output map changes."""
        cache = self._caches.get("folded")
        if cache is None or cache[0] is not self.coef_ or cache[1] != self.output_key_:
            cache = self._caches["folded"] = (self.coef_, self.output_key_, {})
        return cache[2]

    def _surrogate(self) -> Surrogate:
        """``g(x) = W φ_X(x)`` and its folds, for :mod:`distsketch.decoding`."""
        return Surrogate(self._input_map(), self.coef_, self._fold_cache(),
                         self._options().block_memory, self._fold)
