"""The estimator seam: one fit template for every model, and the registry that finds them.

Every estimator subclasses :class:`SketchedEstimator` and fits the same way::

    validate (arguments, then data)  →  pass (fitpass.fit_pass, the sums it declares)
        →  solve (direct.solve_*)  →  coefficients (λ-dependent)  →  save (kept store)

A model declares what differs — its parameters' kinds (:attr:`SketchedEstimator._param_kinds`,
which also drive saved-model JSON and TOML configs), its kernelised sides, the pass sums it
needs (:meth:`~SketchedEstimator._sums`), how it solves them (:meth:`~SketchedEstimator._solve`)
and its fitted state for saving (:meth:`~SketchedEstimator._get_state` /
:meth:`~SketchedEstimator._set_state`). Defining the class registers it
(:mod:`distsketch._registry`): :mod:`distsketch.io.persist`, :mod:`distsketch.cli.config` and
:mod:`distsketch.cli` find it by name and name no model. docs/guide/extending.md, "How to add
a model".
"""

from __future__ import annotations

import contextvars
import dataclasses
import functools
import numbers
import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Self

import numpy as np

from .._base import ParamsMixin, check_lam
from .._registry import register_model
from ..engine.features import FeatureMap
from ..engine.fitpass import PassResult, fit_pass
from ..engine.rows import RowSource, as_row_source
from ..io import model_json, persist
from ..kernels.base import Kernel, check_kernel
from ..linalg.solve import InputSolution
from ..options import EngineOptions, check_options, with_blas_limit
from ..sketches.base import RealizedSketch, Sketch, check_sketch

if TYPE_CHECKING:
    import zarr

__all__ = ["SketchedEstimator", "RidgeEstimator", "not_fitted_error", "FitSpec", "check_lam",
           "check_random_state", "feature_names_of", "checks_feature_names"]

_NOT_FITTED: type | None = None


def not_fitted_error() -> type:
    """The class :class:`NotFittedError`, built on first use.

    When scikit-learn is installed the class derives from
    ``sklearn.exceptions.NotFittedError`` (so scikit-learn's handlers catch it), otherwise from
    ``(ValueError, AttributeError)`` like scikit-learn's. It is built lazily so that
    ``import distsketch`` never imports scikit-learn (≈ 0.6 s); the import happens the first
    time the name is looked up or the error raised.
    """
    global _NOT_FITTED
    if _NOT_FITTED is None:
        try:  # scikit-learn is optional; when present, our error is also its NotFittedError
            from sklearn.exceptions import NotFittedError as base
            bases: tuple[type, ...] = (base,)
        except ImportError:  # pragma: no cover - exercised without scikit-learn
            bases = (ValueError, AttributeError)
        _NOT_FITTED = type("NotFittedError", bases, {
            "__doc__": "Raised when a prediction method is called before ``fit`` "
                       "(a ValueError and an AttributeError).",
            "__module__": "distsketch"})
    return _NOT_FITTED


def __getattr__(name: str):
    if name == "NotFittedError":
        return not_fitted_error()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# --------------------------------------------------------------------------- feature names


def feature_names_of(X: Any) -> np.ndarray | None:
    """The column names of a data frame (pandas, dask) when every one is a string, as an object
    array; else None (arrays, frames with integer or mixed column labels). scikit-learn's
    rule for ``feature_names_in_``."""
    columns = getattr(X, "columns", None)
    if columns is None or isinstance(X, np.ndarray):
        return None
    names = list(columns)
    if not names or not all(isinstance(c, str) for c in names):
        return None
    return np.asarray(names, dtype=object)


_CHECKING: contextvars.ContextVar[bool] = contextvars.ContextVar("distsketch_names", default=False)


def check_feature_names(est: SketchedEstimator, X: Any) -> None:
    """Columns are matched by position, so a data frame whose names differ from the fit's —
    other columns, or the same in another order — is refused (a silently wrong prediction
    otherwise); names on one side only warn, as scikit-learn does."""
    if not hasattr(est, "n_features_in_"):
        return  # not fitted: the method says so
    fitted, names = getattr(est, "feature_names_in_", None), feature_names_of(X)
    cls = type(est).__name__
    if fitted is None and names is None:
        return
    if fitted is None:
        warnings.warn(f"X has feature names, but {cls} was fitted without feature names",
                      UserWarning, stacklevel=3)
        return
    if names is None:
        warnings.warn(f"X does not have valid feature names, but {cls} was fitted with "
                      f"feature names", UserWarning, stacklevel=3)
        return
    if len(names) == len(fitted) and (names == fitted).all():
        return
    seen, given = set(fitted), set(names)

    def listed(values) -> str:  # scikit-learn's layout: five names, then "- ..."
        return "".join(f"- {v}\n" for v in values[:5]) + ("- ...\n" if len(values) > 5 else "")

    unseen, missing = sorted(given - seen), sorted(seen - given)
    message = "X: The feature names should match those that were passed during fit.\n"
    if unseen:
        message += "Feature names unseen at fit time:\n" + listed(unseen)
    if missing:
        message += "Feature names seen at fit time, yet now missing:\n" + listed(missing)
    if not unseen and not missing:
        message += "Feature names must be in the same order as they were in fit.\n"
    raise ValueError(message + "Columns are matched by position: pass X[model.feature_names_in_].")


def checks_feature_names(method: Callable) -> Callable:
    """Decorator of a fitted estimator's methods whose first argument is ``X``:
    :func:`check_feature_names` once per call (not again in the methods it calls)."""

    @functools.wraps(method)
    def checked(self, X, *args, **kwargs):
        if _CHECKING.get():
            return method(self, X, *args, **kwargs)
        check_feature_names(self, X)
        token = _CHECKING.set(True)
        try:
            return method(self, X, *args, **kwargs)
        finally:
            _CHECKING.reset(token)

    return checked


# --------------------------------------------------------------------------- validation


def check_random_state(random_state: Any) -> np.random.Generator:
    """One generator per fit; ``None`` draws fresh entropy (never the global RNG)."""
    if random_state is None:
        return np.random.default_rng()
    if isinstance(random_state, np.random.Generator):
        return random_state
    if isinstance(random_state, np.random.RandomState):
        return np.random.default_rng(random_state.randint(0, 2**31 - 1))
    if isinstance(random_state, numbers.Integral) and not isinstance(random_state, bool):
        if random_state < 0:
            raise ValueError(f"random_state: must be a non-negative integer, got {random_state}")
        return np.random.default_rng(int(random_state))
    raise ValueError(f"random_state: expected None, an int or a numpy Generator, got {random_state!r}")


def check_data(X: Any, Y: Any, *, y_name: str | None, model: str,
               min_rows: int = 2) -> tuple[RowSource, RowSource | None]:
    """Row sources of the training data (``y_name=None``: unsupervised, ``Y`` is ignored), at
    least ``min_rows`` of them (a fit needs 2; rows appended to a fitted model, 1)."""
    if y_name is not None and Y is None:
        raise ValueError(f"{y_name}: {model} requires y to be passed, but the target y is None")
    Xs = as_row_source(X, argument="X")
    Ys = None if y_name is None else as_row_source(Y, argument=y_name, allow_1d=True)
    if Ys is not None and Ys.n != Xs.n:
        raise ValueError(f"{y_name}: has {Ys.n} rows but X has {Xs.n}; "
                         f"X and {y_name} must hold the same samples")
    if Xs.n < min_rows:
        raise ValueError(f"X: at least {min_rows} samples are needed to fit, got n_samples = "
                         f"{Xs.n}")
    Xs.check_finite()
    if Ys is not None:
        Ys.check_finite()
    return Xs, Ys


@dataclass
class FitSpec:
    """A validated fit: resolved arguments and row sources, before any pass."""

    X: RowSource
    Y: RowSource | None
    kernels: dict[str, Kernel]
    sketches: dict[str, Sketch]
    options: EngineOptions
    rng: np.random.Generator
    lams: tuple[float, ...] = ()

    def exact(self, sketch_param: str) -> bool:
        from ..sketches.sampling import Identity

        return isinstance(self.sketches[sketch_param], Identity)


# --------------------------------------------------------------------------- the base class


class SketchedEstimator(ParamsMixin):
    """Base of every distsketch estimator: the fit template, saving, the registry.

    Class attributes a model sets
    -----------------------------
    _param_kinds : dict
        Constructor parameter → kind: ``"kernel"``, ``"sketch"``, ``"lam"``, ``"rank"``,
        ``"loss"``, ``"matrix"``, ``"solver"`` (a route's name or a
        ``distsketch.Route``), ``"folds"`` (``cv``: saved as its fold spec), ``"random_state"``,
        ``"store"``, ``"options"`` (or
        ``"json"`` for plain values). Kernels are validated in order, then sketches; saved models and
        configs convert and validate each by its kind, never by its name.
    _input : (kernel param, sketch param)
        The input side of the pass (``C = K_X R_Xᵀ``).
    _output : (kernel param, sketch param) or None
        The output side for structured outputs (``D = K_Y R_Yᵀ``).
    _targets : str or None
        Name of the second argument of ``fit`` when the model needs one (``"Y"``, ``"y"``).
    _standardized : str or None
        The kernel parameter a config's ``standardize = true`` wraps in
        :class:`~distsketch.kernels.Standardized`.
    _configurable : bool or "default"
        Whether ``distsketch fit`` may build it from a TOML config (``"default"``: also the
        model of a config that names no ``[model] type``).
    _aliases : tuple of str
        Short names a config's ``[model] type`` may use for it (``"regressor"``).
    _pass_model : str or None
        The model name recorded in the pass configuration (default: the class name). Models
        whose passes are the same (sketched KRR and the Lipschitz-loss machines) share it, so
        a store written by one is reused by the other.
    _routes : tuple of str
        The built-in solver routes (``distsketch.solvers.routes``) its ``solver`` parameter may
        name, the first the default; a model without a ``solver`` parameter takes
        ``"direct"``. A model that takes iterative routes implements ``_adopt_path`` (the
        fitted state from a ``distsketch.CoefTable``) and ``_auto_route``.
    _pcg_centre : bool
        Whether the PCG route fits its intercept jointly (``fit_pcg(centre=True)``) rather
        than by centring the targets.
    """

    _param_kinds: ClassVar[dict[str, str]] = {}
    _input: ClassVar[tuple[str, str]] = ("kernel", "sketch")
    _output: ClassVar[tuple[str, str] | None] = None
    _targets: ClassVar[str | None] = "y"
    _standardized: ClassVar[str | None] = None
    _configurable: ClassVar[bool | str] = False
    _estimator_type: ClassVar[str | None] = None
    _pass_model: ClassVar[str | None] = None
    _aliases: ClassVar[tuple[str, ...]] = ()
    _routes: ClassVar[tuple[str, ...]] = ("direct",)
    _pcg_centre: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not cls.__name__.startswith("_") and cls.__dict__.get("_param_kinds"):
            register_model(cls)

    # -- the template -------------------------------------------------------------
    @with_blas_limit
    def fit(self, X: Any, Y: Any = None) -> Self:
        """Fit on inputs ``X`` (and targets ``Y`` where the model has them).

        The ``solver`` route (:class:`~distsketch.Route`;
        :class:`~distsketch.solvers.routes.Direct` for a model without one) makes the passes
        and solves; the fitted model is saved into a kept ``store``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Training inputs: a numpy, scipy.sparse, dask or zarr array (or a data frame,
            whose string column names become ``feature_names_in_``).
        Y : array-like of shape (n_samples,) or (n_samples, n_targets), optional
            Training targets with the rows of ``X``, for a model that has them.

        Returns
        -------
        self
            The fitted estimator.
        """
        from ..solvers.routes import resolve_route

        route = resolve_route(self, X)
        spec = self._validate(X, Y)
        route.check(self, spec)
        fitted = route.run(self, spec)
        # the store's lock is held from the pass to the saved model: one writer at a time
        with fitted.fs as fs:
            route.adopt(self, spec, fitted)
            self._after_fit(spec, route, fitted)
            self.solver_ = fitted.solver
            self.n_passes_ = int(fitted.n_passes)
            self.n_features_in_ = spec.X.shape[1]
            self.store_ = fitted.store
            self._update_coef()
            if not fs.temporary:
                persist.save(self, fs, overwrite=True)
        return self

    def run_pass(self, spec: FitSpec) -> PassResult:
        """The model's streaming pass over the rows of a validated fit.

        What a solver route (:class:`~distsketch.Route`) starts from: the sums the model
        declares, computed by ``distsketch.engine.fitpass.fit_pass`` in a kept store or a
        temporary one.

        Parameters
        ----------
        spec : FitSpec
            The validated fit: row sources, resolved kernels and sketches, options, the
            random generator.

        Returns
        -------
        PassResult
            The pass's sums, realised sketches and landmarks; its store is open.
        """
        kx, sx = self._input
        out = self._output
        return fit_pass(
            spec.X, spec.Y,
            x_kernel=spec.kernels[kx], x_sketch=spec.sketches[sx],
            y_kernel=spec.kernels[out[0]] if out else None,
            y_sketch=spec.sketches[out[1]] if out else None,
            sums=self._pass_sums(spec), rng=spec.rng, store=self.store, options=spec.options,
            model=self._pass_model or type(self).__name__,
            reuse_seeds=self.random_state is None,
            x_widths=self._x_widths(spec),
            kernel_names=(kx, out[0] if out else "output_kernel"),
        )

    def _validate(self, X, Y) -> FitSpec:
        """Arguments first (in the order lam, kernels, sketches, options, random_state), then
        the data, then the sketches against the number of rows: every error names its
        argument and comes before anything is written."""
        kinds = self._param_kinds
        lams = check_lam(self.lam) if "lam" in kinds else ()
        kernels = {name: check_kernel(getattr(self, name), name=name)
                   for name, kind in kinds.items() if kind == "kernel"}
        sketches = {name: check_sketch(getattr(self, name), argument=name)
                    for name, kind in kinds.items() if kind == "sketch"}
        options = self._options()
        rng = check_random_state(self.random_state)
        Xs, Ys = check_data(X, Y, y_name=self._targets, model=type(self).__name__)
        for name, sketch in sketches.items():
            sketch.check(Xs.n, argument=name)
        if self.store is not None:
            for name, kernel in kernels.items():
                model_json.check_savable(kernel, argument=name)
        names = feature_names_of(X)  # scikit-learn's feature_names_in_ (data frames)
        if names is None:
            self.__dict__.pop("feature_names_in_", None)
        else:
            self.feature_names_in_ = names
        return FitSpec(Xs, Ys, kernels, sketches, options, rng, lams)

    # -- what a model implements --------------------------------------------------
    def _sums(self, spec: FitSpec) -> tuple[str, ...]:
        """Names of the pass sums this model needs (``sums.SUM_TERMS``)."""
        raise NotImplementedError

    def _pass_sums(self, spec: FitSpec) -> tuple[str, ...]:
        """The sums :meth:`run_pass` computes: :meth:`_sums` (a model that takes appended rows
        adds the rows' digest, ``distsketch.models.growing``)."""
        return self._sums(spec)

    def _after_fit(self, spec: FitSpec, route: Any, fitted: Any) -> None:
        """Called once the route's fit is adopted, before the model is saved (nothing by
        default; ``distsketch.models.growing`` keeps the batches' sums)."""

    def _x_widths(self, spec: FitSpec) -> tuple:
        """Further input kernels whose sums the same pass computes (``"<sum>~<j>"``, see
        ``distsketch.engine.fitpass.fit_pass``); none by default."""
        return ()

    def _solve(self, spec: FitSpec, res: PassResult) -> None:
        """The direct route: set the fitted state from the pass's result (calling a
        ``direct.solve_*``)."""
        raise NotImplementedError

    def _auto_route(self, X):
        """The route ``solver="auto"`` takes for the data ``X`` (a
        :class:`~distsketch.Route`); arguments that fail validation are left to
        :meth:`_validate`, in its order."""
        from ..solvers.routes import Direct

        return Direct()

    def _check_pcg_args(self) -> None:
        """Checks of the model's own arguments for the PCG route, before the data (none)."""

    def _check_pcg(self, spec: FitSpec) -> None:
        """What the PCG route needs of this model and data, after validation (nothing)."""

    def _update_coef(self) -> None:
        """Recompute the λ-dependent coefficients from the fitted state (none by default)."""

    def _get_state(self) -> tuple[dict[str, Any], dict]:
        """The fitted state as ``(arrays, json)``: arrays (ndarray, scipy.sparse or None) and
        JSON values. Subclasses extend the dicts of ``super()._get_state()``."""
        names = getattr(self, "feature_names_in_", None)
        return {}, {"n_features_in": int(self.n_features_in_), "store": self.store_,
                    "feature_names_in": None if names is None else [str(n) for n in names],
                    "solver": self.solver_, "n_passes": int(self.n_passes_)}

    def _set_state(self, arrays: dict[str, Any], state: dict) -> None:
        """Inverse of :meth:`_get_state` (then :meth:`_update_coef` runs)."""
        self.n_features_in_ = int(state["n_features_in"])
        self.store_ = state["store"]
        # the route taken (models saved before it was recorded: their default route)
        self.solver_ = str(state.get("solver", type(self)._routes[0]))
        self.n_passes_ = int(state.get("n_passes", 1))
        names = state.get("feature_names_in")  # absent in models saved before it existed
        if names is None:
            self.__dict__.pop("feature_names_in_", None)
        else:
            self.feature_names_in_ = np.asarray(names, dtype=object)

    def _default_metrics(self, Y) -> list[str]:
        """Metric names ``distsketch evaluate`` reports by default (:data:`metrics.METRICS`)."""
        return []

    # -- shared machinery -----------------------------------------------------------
    def save(self, store: str | os.PathLike | zarr.Group, *, overwrite: bool = False) -> str:
        """Save the fitted model into a store; :func:`distsketch.load` reads it back.

        ``fit`` already saves into a kept ``store``; use this for a model fitted with
        ``store=None`` or to copy it elsewhere.

        Parameters
        ----------
        store : str, path or zarr.Group
            Where to save: a directory path or a zarr group.
        overwrite : bool, default False
            Replace a different model saved there.

        Returns
        -------
        str
            The store's location.
        """
        return persist.save(self, store, overwrite=overwrite)

    def _check_fitted(self):
        if not hasattr(self, "n_features_in_"):
            raise not_fitted_error()(f"This {type(self).__name__} instance is not fitted yet; "
                                 f"call fit(X, Y) first")

    def _options(self) -> EngineOptions:
        return check_options(self.options)

    def _feature_map(self, fmap: FeatureMap) -> FeatureMap:
        """``fmap`` with the current options' ``gram_chunk`` and ``tuning``."""
        options = self._options()
        chunk, tuning = options.gram_chunk, options.tuning
        if fmap.chunk == chunk and fmap.tuning == tuning:
            return fmap
        return dataclasses.replace(fmap, chunk=chunk, tuning=tuning)

    @staticmethod
    def _put_side(side: str, kernel, sketch: RealizedSketch, landmarks, arrays: dict,
                  state: dict) -> None:
        """Save a kernelised side: its kernel (JSON), landmarks and realised sketch (arrays)."""
        arrays[f"{side}_landmarks"] = landmarks
        state[f"{side}_kernel"] = model_json.kernel_to_json(kernel)
        sk_arrays, meta = sketch.get_state()
        for key, value in sk_arrays.items():
            arrays[f"{side}_sketch__{key}"] = value
        state[f"{side}_sketch"] = meta

    @staticmethod
    def _get_side(side: str, arrays: dict, state: dict) -> tuple:
        """Inverse of :meth:`_put_side`: ``(kernel, realised sketch, landmarks)``."""
        prefix = f"{side}_sketch__"
        own = {k[len(prefix):]: v for k, v in arrays.items() if k.startswith(prefix)}
        return (model_json.kernel_from_json(state[f"{side}_kernel"]),
                RealizedSketch.from_state(own, state[f"{side}_sketch"]),
                arrays[f"{side}_landmarks"])

    def __sklearn_tags__(self):
        """scikit-learn's estimator tags (scikit-learn itself is optional)."""
        from sklearn.utils import InputTags, RegressorTags, Tags, TargetTags

        return Tags(estimator_type=self._estimator_type, target_tags=TargetTags(
            required=True, multi_output=True, single_output=self._estimator_type == "regressor"),
            regressor_tags=RegressorTags() if self._estimator_type == "regressor" else None,
            input_tags=InputTags(sparse=True, allow_nan=False))


class RidgeEstimator(SketchedEstimator):
    """Base of the ridge models: ``(1/n) Σ_i ‖h(x_i) − y_i‖² + λ ‖h‖²`` over the sketched
    space, every λ of a path solved from one pass (``distsketch.linalg.solve.InputSolution``).

    Its fitted λ path is ``path_``, one object whatever the route: the model's closed form
    (the direct route: any λ > 0) or a :class:`~distsketch.CoefTable` (an iterative
    route: its fitted λ), each with ``coef(λ)``, ``fitted_lam(λ)``, ``n_iter(λ)`` and
    ``iterations(lams)``; ``input_solution_`` is the closed form's, None after an iterative
    route.
    """

    @with_blas_limit
    def set_lam(self, lam: float) -> Self:
        """Switch the active λ without touching the data.

        After a direct fit any positive λ is allowed, not only those of the fitted ``lam``
        sequence: the fit's ``H`` serves every λ (its eigendecomposition, or a Cholesky
        factorisation of ``K_X + nλI`` with an exact input side). After an iterative route's
        fit (``solver="pcg"``), one of the fitted ``lams_`` (another λ needs new passes over
        the data: fit again with ``lam=[...]``).

        Parameters
        ----------
        lam : float
            The ridge parameter λ > 0 to predict with.

        Returns
        -------
        self
            The estimator, with ``lam_`` and the coefficients of ``lam``.
        """
        self._check_fitted()
        (value,) = check_lam(lam)
        self.lam_ = self.path_.fitted_lam(value, argument="lam")
        self._update_coef()
        return self

    def _set_lams(self, spec: FitSpec) -> None:
        self.lams_ = spec.lams
        self.lam_ = spec.lams[0]

    def _table(self, table):
        """The model's view of an iterative route's :class:`~distsketch.CoefTable`
        (the table itself by default)."""
        return table

    def _get_state(self):
        arrays, state = super()._get_state()
        path = self.path_
        if path.any_lam:  # the closed form: H (and its factors) serve every λ
            sol = self.input_solution_
            arrays.update(T=sol.T, H=sol.H, V=sol.V, evals=sol.evals)
            state.update(n=sol.n)
        else:  # an iterative route's table (array names of the release that added PCG)
            arrays.update(pcg_alphas=path.coefs, pcg_residuals=path.residuals,
                          pcg_galphas=path.products)
            state.update(path="table", n_iters=[int(v) for v in path.n_iters])
        state.update(lams=list(self.lams_), lam=self.lam_)
        return arrays, state

    def _set_state(self, arrays, state):
        super()._set_state(arrays, state)
        self.lams_ = tuple(state["lams"])
        self.lam_ = float(state["lam"])
        if state.get("path") == "table" or state.get("solver") == "pcg":
            from ..solvers.routes import CoefTable

            self.input_solution_ = None
            self.path_ = self._table(CoefTable(
                self.lams_, arrays["pcg_alphas"], np.array(state["n_iters"]),
                residuals=arrays.get("pcg_residuals"), products=arrays.get("pcg_galphas")))
            return
        self.input_solution_ = InputSolution(T=arrays.get("T"), H=arrays["H"], n=int(state["n"]),
                                             V=arrays.get("V"), evals=arrays.get("evals"))
        self.path_ = None  # the model's closed form, made by its _set_state
