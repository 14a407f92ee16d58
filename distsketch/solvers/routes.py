"""Solver routes: how a fit turns the data into a model's fitted state.

Every estimator fits with one template (``distsketch.models.base.SketchedEstimator.fit``)::

    route = resolve_route(est, X)      # solver= : a registered name, "auto" or a Route object
    spec = est._validate(X, Y)         # every argument, then the data
    route.check(est, spec)             # what the route needs of this model and data
    fitted = route.run(est, spec)      # passes and solves: a RouteFit, the store still open
    route.adopt(est, spec, fitted)     # the model's fitted state, one shape whatever the route
    (save into the store, close it)

A route is an object (as scikit-learn's GLM takes a ``NewtonSolver`` class and Falkon an
``optimizer``): :class:`Direct` (one pass, the closed form from its sums), :class:`PCG`
(Falkon's preconditioned conjugate gradient, one pass of recomputed kernel blocks per
iteration, ``distsketch.solvers.pcg``), and the Lipschitz losses' ``Newton`` and ``ADMM``
(``distsketch.solvers.lipschitz.routes``: one pass, then one sweep over the blocks per
iteration). Defining a subclass with a ``name`` registers it (:data:`ROUTES`), so
``solver="<name>"`` finds it, in Python and in TOML configs; an instance can be passed as
``solver=`` directly. A model lists the built-in routes it accepts (``_routes``) and how it
adopts a route's :class:`CoefTable` (``_adopt_path``); docs/guide/extending.md, "How to add a solver
route".
"""

from __future__ import annotations

import importlib
import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from .._registry import Registry

__all__ = ["Route", "RouteFit", "CoefTable", "Direct", "PCG", "Auto", "ROUTES", "get_route",
           "resolve_route", "route_from_config", "fitted_index", "check_iterations"]

#: Solver routes by name (each class registers itself by its ``name``).
ROUTES: Registry = Registry("solver route")

#: The package whose modules hold the built-in routes (a route defined elsewhere is a user's).
PACKAGE = __name__.split(".")[0]
#: Modules whose route classes register themselves when imported.
BUILTIN_ROUTES = ("solvers.routes", "solvers.lipschitz.routes")


def fitted_index(lams: Sequence[float], lam: float, *, argument: str) -> int:
    """Position of ``lam`` in a fitted λ path (``rtol = 1e-12``).

    Parameters
    ----------
    lams : sequence of float
        The fitted λ path.
    lam : float
        The λ to find.
    argument : str
        The argument's name in the error message.

    Returns
    -------
    int
        The index of ``lam`` in ``lams``.

    Raises
    ------
    ValueError
        ``lam`` was not fitted (another λ needs new passes over the data).
    """
    for k, v in enumerate(lams):
        if np.isclose(v, lam, rtol=1e-12, atol=0):
            return k
    raise ValueError(f"{argument}: {lam!r} was not fitted; a solver='pcg' fit keeps the λ path "
                     f"given at fit, {list(lams)}: fit again with lam=[...] including it (or "
                     f"solver='direct', which serves any λ)")


def check_iterations(tol: float, max_iter: int) -> tuple[float, int]:
    """Validate the iterative routes' stopping arguments; each error names its argument.

    Parameters
    ----------
    tol : float
        Relative residual at which to stop, in (0, 1).
    max_iter : int
        Most iterations per λ, positive.

    Returns
    -------
    tuple of (float, int)
        ``(tol, max_iter)``.
    """
    if (isinstance(tol, bool) or not isinstance(tol, numbers.Real) or not np.isfinite(tol)
            or not 0 < tol < 1):
        raise ValueError(f"tol: the relative residual PCG stops at must lie in (0, 1), got "
                         f"{tol!r}")
    if isinstance(max_iter, bool) or not isinstance(max_iter, numbers.Integral) or max_iter < 1:
        raise ValueError(f"max_iter: expected a positive integer (PCG iterations per λ), got "
                         f"{max_iter!r}")
    return float(tol), int(max_iter)


# --------------------------------------------------------------------------- what a route gives


@dataclass
class CoefTable:
    """A λ path solved by an iterative route: the model's coefficients at each fitted λ.

    Parameters
    ----------
    lams : tuple of float
        The fitted λ, in the order given at fit.
    coefs : ndarray of shape (n_lams, ...)
        The coefficients per λ, in the basis the model documents for its iterative routes
        (:class:`~distsketch.SketchedKRR`: ``dual_coef_`` on ``landmarks_``, shape (s', t);
        :class:`~distsketch.SISOKR`: ``α`` on the input landmarks, (s', r_Y); the regressors:
        ``Ξ`` in the whitened features when ``basis`` is given, else ``α`` on the landmarks).
    n_iters : ndarray of int, shape (n_lams,)
        Iterations each λ took.
    residuals : ndarray or None
        The last relative residual of each λ (and output), where the route has one.
    intercepts : ndarray of shape (n_lams, t) or None
        Intercepts fitted jointly with each λ's coefficients (the Lipschitz routes).
    objectives, duality_gaps : ndarray of shape (n_lams,) or None
        The primal objective and the certified relative duality gap, where the route has them.
    products : ndarray or None
        ``K_nmᵀ K_nm α`` per λ, carried by PCG's iterations: :class:`~distsketch.SISOKR`'s
        prediction covariance ``αᵀ K_nmᵀ K_nm α`` for a reduced rank.
    basis : ndarray of shape (m, r) or None
        The whitening ``T`` of the features ``φ(x) = Tᵀ R k(X, x)`` the coefficients are in
        (None: on the landmarks themselves).
    output_sqrt : ndarray of shape (d, d) or None
        ``M^{1/2}`` of a decomposable output kernel (the regressors).

    Notes
    -----
    A table serves its fitted λ only: :meth:`fitted_lam` refuses another.
    """

    lams: tuple[float, ...]
    coefs: np.ndarray
    n_iters: np.ndarray
    residuals: np.ndarray | None = None
    intercepts: np.ndarray | None = None
    objectives: np.ndarray | None = None
    duality_gaps: np.ndarray | None = None
    products: np.ndarray | None = None
    basis: np.ndarray | None = None
    output_sqrt: np.ndarray | None = None

    #: Whether any λ > 0 is served (a closed form), not only the fitted ones.
    any_lam: ClassVar[bool] = False
    #: The input side's closed form (``distsketch.linalg.solve.InputSolution``): none.
    solution: ClassVar[Any] = None

    def __post_init__(self) -> None:
        self.lams = tuple(float(v) for v in self.lams)
        self.n_iters = np.asarray(self.n_iters, dtype=np.int64)
        if len(self.coefs) != len(self.lams) or len(self.n_iters) != len(self.lams):
            raise ValueError(f"CoefTable: {len(self.lams)} λ but {len(self.coefs)} coefficient "
                             f"sets and {len(self.n_iters)} iteration counts")

    def fitted_lam(self, lam: float, *, argument: str = "lam") -> float:
        """The fitted λ equal to ``lam`` (to ``rtol = 1e-12``).

        Parameters
        ----------
        lam : float
            The λ asked for.
        argument : str, default "lam"
            The argument's name in the error message.

        Returns
        -------
        float
            The fitted value.

        Raises
        ------
        ValueError
            ``lam`` was not fitted.
        """
        return self.lams[fitted_index(self.lams, lam, argument=argument)]

    def coef(self, lam: float) -> np.ndarray:
        """The coefficients at a fitted λ.

        Parameters
        ----------
        lam : float
            One of the fitted ``lams``.

        Returns
        -------
        ndarray
            ``coefs`` of that λ.
        """
        return self.coefs[fitted_index(self.lams, lam, argument="lam")]

    def n_iter(self, lam: float) -> int:
        """Iterations a fitted λ took.

        Parameters
        ----------
        lam : float
            One of the fitted ``lams``.

        Returns
        -------
        int
            Its iterations.
        """
        return int(self.n_iters[fitted_index(self.lams, lam, argument="lam")])

    def iterations(self, lams: Sequence[float]) -> np.ndarray:
        """Iterations of each fitted λ.

        Parameters
        ----------
        lams : sequence of float
            The model's ``lams_`` (the table's own).

        Returns
        -------
        ndarray of int of shape (n_lams,)
            ``n_iters``.
        """
        return self.n_iters


@dataclass
class RouteFit:
    """What :meth:`Route.run` gives the model, which :meth:`Route.adopt` reads.

    Parameters
    ----------
    fs : FitStore
        The open fit store (a temporary one without ``store``): its lock is held until the
        fitted model is saved into it, then the template closes it.
    store : str or None
        The kept store's location (``store_``).
    solver : str
        The route taken (``solver_``).
    n_passes : int
        Passes over the training rows the fit made (a resumed fit makes fewer).
    x_sketch : RealizedSketch or None
        The input side's realised sketch.
    x_landmarks : array or None
        Its landmarks (the rows of its support).
    path : CoefTable or None
        The λ path of an iterative route; None for
        :class:`~distsketch.solvers.routes.Direct`, whose model solves the pass's sums itself
        (its closed form serves every λ).
    result : object
        The route's own result: the ``PassResult`` of a pass
        (``distsketch.engine.fitpass``), or what ``distsketch.solvers.pcg`` gives (the
        output side of SISOKR's PCG fit).
    intercept : ndarray or None
        An intercept the route fitted that does not depend on λ (PCG's target mean).
    """

    fs: Any
    store: str | None
    solver: str
    n_passes: int
    x_sketch: Any = None
    x_landmarks: Any = None
    path: CoefTable | None = None
    result: Any = None
    intercept: np.ndarray | None = None

    @classmethod
    def from_pass(cls, res: Any, *, solver: str, path: CoefTable | None = None,
                  n_passes: int = 1, intercept: np.ndarray | None = None) -> RouteFit:
        """A route's fit after the model's streaming pass.

        Parameters
        ----------
        res : PassResult
            The pass (the estimator's ``run_pass``), its store open.
        solver : str
            The route taken.
        path : CoefTable or None, default None
            The λ path of an iterative route.
        n_passes : int, default 1
            Passes over the training rows.
        intercept : ndarray or None, default None
            An intercept the route fitted that does not depend on λ.

        Returns
        -------
        RouteFit
            The fit, holding the pass's store, sketch and landmarks.
        """
        return cls(res.fs, res.store, solver, n_passes, res.x_sketch, res.x_landmarks,
                   path, res, intercept)


# --------------------------------------------------------------------------- the protocol


class Route:
    """Base of the solver routes.

    A subclass sets ``name`` (registering it in :data:`~distsketch.solvers.routes.ROUTES`) and
    implements :meth:`run`; it may refine :meth:`accepts`, :meth:`prepare`, :meth:`check` and
    :meth:`adopt`. Routes hold no data: a model's ``solver`` may be an instance, cloned and
    pickled with it.
    """

    #: The registered name (``solver="<name>"``, ``solver_``, saved models).
    name: ClassVar[str | None] = None
    #: Whether the route makes passes per iteration (its λ path is a :class:`CoefTable`).
    iterative: ClassVar[bool] = True
    #: Whether a model it fitted can take appended rows (:meth:`resolve`).
    appends: ClassVar[bool] = False
    #: What a kept store keeps of each batch's rows for :meth:`resolve` (``"Y"``: the
    #: targets, ``"X"``: the inputs; ``distsketch.engine.keptrows``).
    kept_rows: ClassVar[tuple] = ()
    #: Whether an appended batch runs the model's pass (its blocks and sums); False: the
    #: store keeps its rows only (``distsketch.engine.batchstore.kept_batch``).
    batch_pass: ClassVar[bool] = True

    def growth_refusal(self, est: Any) -> str | None:
        """Why a model this route fitted cannot take appended rows.

        Parameters
        ----------
        est : estimator

        Returns
        -------
        str or None
            The reason; None where it can (and the route :attr:`appends`).
        """
        return None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        ROUTES.register_class(cls)

    def accepts(self, est: Any) -> bool:
        """Whether an estimator can adopt this route's result.

        Parameters
        ----------
        est : estimator
            The model being fitted.

        Returns
        -------
        bool
            For a built-in route: whether the model lists it in its ``_routes``; for
            another route: whether the model adopts a :class:`CoefTable`
            (``_adopt_path``).
        """
        if type(self).__module__.startswith(PACKAGE + "."):
            return self.name in type(est)._routes
        return callable(getattr(est, "_adopt_path", None))

    def prepare(self, est: Any, X: Any) -> None:
        """Checks of the route's own arguments before the model's validation (none).

        Parameters
        ----------
        est : estimator
            The model being fitted.
        X : array-like
            The training inputs, not validated yet.
        """

    def check(self, est: Any, spec: Any) -> None:
        """What the route needs of this model and data, after validation.

        Runs before anything is written (nothing by default).

        Parameters
        ----------
        est : estimator
            The model being fitted.
        spec : FitSpec
            The validated fit.

        Raises
        ------
        ValueError
            What the route cannot do, naming the argument and the fix.
        """

    def run(self, est: Any, spec: Any) -> RouteFit:
        """Make the passes and solve the λ path of a validated fit.

        Parameters
        ----------
        est : estimator
            The model being fitted.
        spec : FitSpec
            The validated fit.

        Returns
        -------
        RouteFit
            The fit; its store stays open.
        """
        raise NotImplementedError

    def adopt(self, est: Any, spec: Any, fitted: RouteFit) -> None:
        """Set the estimator's fitted state from the route's fit (its ``_adopt_path``).

        Parameters
        ----------
        est : estimator
            The model being fitted.
        spec : FitSpec
            The validated fit.
        fitted : RouteFit
            What :meth:`run` gave.
        """
        est._adopt_path(spec, fitted)

    def resolve(self, est: Any, spec: Any, growth: Any, fs: Any) -> None:
        """Solve a model again after rows were appended or forgotten (``partial_fit``,
        ``forget``: ``distsketch.models.growing``), for a route that :attr:`appends`.

        Parameters
        ----------
        est : estimator
        spec : FitSpec
            The re-solve's specification (λ path, fitted kernels, the shapes of every row).
        growth : Growth
            The batches the model holds (``est._growth_result(growth)``: their summed sums).
        fs : FitStore or None
            The model's kept store, open and locked (None: no store).
        """
        raise NotImplementedError(f"solver: the {self.name!r} route cannot re-solve appended rows")

    def to_config(self) -> dict:
        """What saved models record of a route object.

        Returns
        -------
        dict
            ``{"name": …, "params": …}``: the registered name and the constructor's
            arguments; :func:`~distsketch.solvers.routes.route_from_config` is the inverse.

        Raises
        ------
        ValueError
            The route's class has no registered name.
        """
        if not self.name or ROUTES.get(self.name) is not type(self):
            raise ValueError(f"solver: {self!r} has no registered name; a route saved with a "
                             f"model needs one (set the class attribute name = '...')")
        return {"name": self.name, "params": dict(vars(self))}

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({args})"

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and vars(self) == vars(other)

    def __hash__(self) -> int:
        return hash(type(self))


def get_route(name: str) -> type[Route]:
    """The route class registered as ``name`` (the package's routes loaded first).

    Parameters
    ----------
    name : str
        A registered route name (``"direct"``, ``"pcg"``, ``"newton"``, …).

    Returns
    -------
    type
        The :class:`~distsketch.Route` subclass.

    Raises
    ------
    KeyError
        No route is registered under ``name``.

    Examples
    --------
    >>> from distsketch.solvers.routes import get_route
    >>> get_route("pcg")
    <class 'distsketch.solvers.routes.PCG'>
    """
    if name not in ROUTES:
        for mod in BUILTIN_ROUTES:
            importlib.import_module(f"{PACKAGE}.{mod}")
    return ROUTES[name]


def _user_route(name: str) -> bool:
    """Whether ``name`` is a route registered outside the package."""
    try:
        cls = get_route(name)
    except KeyError:
        return False
    return not cls.__module__.startswith(PACKAGE + ".")


def route_from_config(config: dict) -> Route:
    """The route :meth:`~distsketch.Route.to_config` described.

    Its class is found by registered name, never imported from the saved text.

    Parameters
    ----------
    config : dict
        ``{"name": …, "params": …}``.

    Returns
    -------
    Route
        A new route object.

    Raises
    ------
    ValueError
        The name is not registered.

    Examples
    --------
    >>> from distsketch.solvers.routes import PCG, route_from_config
    >>> route_from_config(PCG().to_config())
    PCG()
    """
    name = config.get("name")
    try:
        cls = get_route(name)
    except (KeyError, TypeError):
        raise ValueError(f"solver: the route {name!r} is not registered; import the module "
                         f"that defines it before loading (registered: {sorted(ROUTES)})") from None
    return cls(**config.get("params", {}))


def resolve_route(est: Any, X: Any) -> Route:
    """The route an estimator's ``solver`` names, for the data: where a ``solver`` becomes a route.

    A model without a ``solver`` parameter takes :class:`Direct`; ``"auto"`` asks the model
    (``_auto_route``, a route for the data); a :class:`Route` instance is used as given. The
    route's own arguments are checked here (:meth:`~distsketch.Route.prepare`).

    Parameters
    ----------
    est : estimator
        The model being fitted.
    X : array-like
        The training inputs.

    Returns
    -------
    Route
        The route to run.

    Raises
    ------
    ValueError
        A ``solver`` the model does not take.

    Examples
    --------
    >>> import numpy as np
    >>> from distsketch import SketchedKRR
    >>> from distsketch.sketches import SubSampling
    >>> from distsketch.solvers.routes import resolve_route
    >>> resolve_route(SketchedKRR(sketch=SubSampling(5), solver="pcg"), np.zeros((10, 2)))
    PCG()
    >>> resolve_route(SketchedKRR(), np.zeros((10, 2)))
    Direct()
    """
    accepted = list(type(est)._routes)
    if "solver" not in type(est)._param_kinds:  # the model's one route (SketchedKRRCV: direct)
        return get_route(accepted[0])()
    solver = est.solver
    if isinstance(solver, Route):
        route = solver
        if est.store is not None:  # the saved model names it: before anything is written
            route.to_config()
    elif isinstance(solver, str) and (solver == "auto" or solver in accepted):
        route = Auto() if solver == "auto" else get_route(solver)()
    elif isinstance(solver, str) and _user_route(solver):
        route = get_route(solver)()  # a route registered outside the package
    else:
        names = [repr(v) for v in sorted(accepted + ["auto"])]
        extra = "" if isinstance(solver, str) else " (or a distsketch.Route instance)"
        raise ValueError(f"solver: expected {', '.join(names[:-1])} or {names[-1]}{extra}, "
                         f"got {solver!r}")
    if not route.accepts(est):
        raise ValueError(f"solver: {type(est).__name__} cannot take the route {route!r}; its "
                         f"routes are {accepted + ['auto']}")
    route.prepare(est, X)
    if isinstance(route, Auto):
        route = est._auto_route(X)
    return route


# --------------------------------------------------------------------------- the built-in routes


class Direct(Route):
    """One streaming pass, then the model's closed form from its sums (``_solve``): every λ
    (and rank, fold, width) from the same factorisations."""

    name = "direct"
    iterative = False
    appends = True

    def run(self, est: Any, spec: Any) -> RouteFit:
        return RouteFit.from_pass(est.run_pass(spec), solver=self.name)

    def adopt(self, est: Any, spec: Any, fitted: RouteFit) -> None:
        est._solve(spec, fitted.result)

    def resolve(self, est: Any, spec: Any, growth: Any, fs: Any) -> None:
        est._solve(spec, est._growth_result(growth))  # the batches' summed sums: no row read


class PCG(Route):
    """Falkon's preconditioned conjugate gradient (``distsketch.solvers.pcg``): no ``G``, no stored
    blocks; one pass of recomputed kernel blocks per iteration. The input side's ridge
    problem — on the targets (SketchedKRR, the squared-loss regressor, its intercept fitted
    jointly when the model declares ``_pcg_centre``), or on the whitened output features
    (SISOKR, a model with an output side)."""

    name = "pcg"
    appends = True
    kept_rows = ("X", "Y")
    batch_pass = False

    def prepare(self, est: Any, X: Any) -> None:
        est._check_pcg_args()

    def check(self, est: Any, spec: Any) -> None:
        est._check_pcg(spec)

    def run(self, est: Any, spec: Any) -> RouteFit:
        from ..kernels.families import Linear
        from .pcg import fit_pcg, fit_pcg_sisokr

        model = est._pass_model or type(est).__name__
        common = dict(store=est.store, reuse_seeds=est.random_state is None,
                      tol=float(est.tol), max_iter=int(est.max_iter), model=model)
        if est._output is not None:  # SISOKR: the whitened output features as targets
            linear = isinstance(spec.kernels[est._output[0]], Linear)
            res = fit_pcg_sisokr(spec, linear_output=linear, sums=est._first_pass_sums(
                ("M", "E") if linear else ("M", "E", "U")), **common)
            r = res.result
            return RouteFit(res.fs, res.store, self.name, int(r.n_passes), res.x_sketch,
                            res.x_landmarks, _pcg_table(spec, r, False, products=True), res)
        kx, sx = est._input
        res = fit_pcg(spec, kernel=spec.kernels[kx], sketch=spec.sketches[sx],
                      fit_intercept=bool(est.fit_intercept), centre=est._pcg_centre, **common)
        r = res.result
        return RouteFit(res.fs, res.store, self.name, int(r.n_passes), res.sketch,
                        res.landmarks, _pcg_table(spec, r, est._pcg_centre), res,
                        intercept=r.intercept)

    def resolve(self, est: Any, spec: Any, growth: Any, fs: Any) -> None:
        from .pcg import refit_pcg  # over every batch's kept rows, from the fitted path
        r, sketch, result = refit_pcg(est, spec, growth, fs)
        table = _pcg_table(spec, r, est._pcg_centre, products=est._output is not None)
        est._adopt_path(spec, RouteFit(None, getattr(est, "store_", None), self.name,
                                       int(r.n_passes), sketch, growth.x_landmarks, table,
                                       result, intercept=r.intercept))
        est.n_passes_ = int(r.n_passes)


def _pcg_table(spec: Any, r: Any, centre: bool, *, products: bool = False) -> CoefTable:
    """A PCG λ path as a table (SISOKR's with ``products``, ``K_nmᵀK_nm α``); ``centre``: with
    the objectives ``(1/n) Σ ½‖r_i‖² + (λ/2) Σ_j α_jᵀ K_mm α_j`` of the joint intercept."""
    table = CoefTable(spec.lams, r.alphas, r.n_iters, residuals=r.residuals,
                      intercepts=getattr(r, "intercepts", None),
                      products=r.galphas if products else None)
    if centre:
        table.objectives = (0.5 * r.rss.sum(axis=1) / spec.X.n
                            + 0.5 * np.asarray(spec.lams) * r.penalties.sum(axis=1))
        table.duality_gaps = np.full(len(spec.lams), np.nan)
    return table


class Auto(Route):
    """``solver="auto"``: the model's ``_auto_route``, taken by :func:`resolve_route` first."""

    name = "auto"

    def accepts(self, est: Any) -> bool:
        return True

    def run(self, est: Any, spec: Any) -> RouteFit:  # pragma: no cover - resolved before a fit
        raise RuntimeError("solver='auto' is resolved to a route before the fit")
