"""Large m: Falkon's preconditioned conjugate gradient for sketched KRR with landmarks, the route.

Glossary (docs/design/pcg.md)::

    n, m, t     training rows, landmarks (the sketch's support J), target columns
    K_nm        k(X, X_J), n × m — never formed: its row blocks K_I are recomputed per pass
    K_mm        k(X_J, X_J), m × m
    α           the dual coefficients on the landmarks, f(x) = k(x, X_J) α + ȳ (m × t)
    z           K_nmᵀ (Y − 1ȳᵀ) (ȳ = 0 without an intercept)
    H           K_nmᵀ K_nm + nλ K_mm

The sketched KRR problem with a sub-sampling sketch ``R = diag(r) S_J`` (uniform or
leverage-score landmarks), ``min_f (1/n) Σ ‖f(x_i) − y_i‖² + λ‖f‖²`` over
``f = k(·, X) Rᵀ β``, has the normal equations ``(G + nλB) β = b`` with ``G = CᵀC``,
``B = R K Rᵀ``, ``b = Cᵀ Y``, ``C = K Rᵀ = K_nm diag(r)`` (Chen & Yang 2021, eq. 3). In
``α = diag(r) β`` (the model's ``dual_coef_``) they read ``H α = z``, the system of Falkon
(Rudi, Carratino & Rosasco, NeurIPS 2017; Meanti et al., NeurIPS 2020); ``r`` drops out.
:class:`~distsketch.SketchedKRR`'s direct route solves the same system through ``H``'s
eigendecomposition (``B`` whitened), so both give the same ``α`` when ``K_mm`` has full rank.

:class:`~distsketch.SketchedRegressor`'s squared loss (``fit_pcg(..., centre=True)``) fits its
intercept jointly, ``b₀ = ȳ − αᵀ s/n`` with ``s = K_nmᵀ 1``: the centred system
``(K_nmᵀ K_nm − s sᵀ/n + nλ K_mm) α = z``, the rank-one term applied on the driver
(:func:`~distsketch.solvers.conjugate_gradient.pcg_path`).

:class:`~distsketch.SISOKR`'s input side (:func:`fit_pcg_sisokr`) is the same system with the
r_Y whitened output features as targets, ``z = K_nmᵀ D T_Y = diag(1/r) Mᵀ T_Y``, its right-hand
side from one streaming pass (``M``, ``E``; no ``G``), solved by
:func:`~distsketch.solvers.conjugate_gradient.lam_path`, the λ loop ``pcg_path`` uses.

Here: which solver a fit takes (:func:`choose_solver`, :func:`check_pcg_sketch`) and a whole
fit, from the sketch's draw to the λ path with its store (:func:`fit_pcg`, and SISOKR's input
side :func:`fit_pcg_sisokr`). The landmarks PCG solves in and Falkon's preconditioner are
:mod:`distsketch.solvers.preconditioner`'s, the iterations
:mod:`distsketch.solvers.conjugate_gradient`'s.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass

import numpy as np
from scipy.linalg import solve_triangular

from .._base import nearest_lams
from .._hashing import fingerprint
from ..engine.storeguard import DataChanged
from ..engine.sweep import SweepData, Sweeper
from ..tuning import check_tuning, store_config
from .conjugate_gradient import PCGResult, PCGStep, lam_path, pcg_block, pcg_path
from .lipschitz.problem import SolverState, state_key
from .preconditioner import LandmarkGram, distinct_landmarks, factor_kmm, select_landmarks

__all__ = ["landmark_sketches", "AUTO_STORE_BYTES", "PCG_STATE_VERSION", "check_pcg_sketch",
           "choose_solver", "PCGFit", "fit_pcg", "SisokrPCGFit", "fit_pcg_sisokr", "refit_pcg"]

logger = logging.getLogger(__name__)

def landmark_sketches() -> list[str]:
    """Names of the registered sketches PCG supports: those that declare
    :attr:`~distsketch.sketches.Sketch.selects_landmarks` (a support of m training rows and a
    diagonal ``R_mix``, so ``B = diag(r) K_mm diag(r)`` is the landmarks' own Gram matrix, the
    preconditioner's input; mixing sketches have no Nyström structure to precondition by)."""
    from ..sketches.base import SKETCHES

    return list(dict.fromkeys(cls.__name__ for cls in SKETCHES.values()
                              if cls.selects_landmarks is True))  # in registration order


#: ``solver="auto"``'s cost model (:func:`choose_solver`): direct while forming ``G`` costs no
#: more than PCG's passes, ``2nm² ≤ auto_pcg_passes · n·m · auto_pass_flops`` (``m ≤ 8 100``
#: whatever n), fields of ``EngineOptions.tuning`` (:class:`~distsketch.Tuning`, where their
#: measurements are: benchmarks/bench_large_m.py, RESULTS.md ``large_m``) …
#: … and while a kept store's ``C`` (``n m`` values, 4 bytes in float32) takes at most this.
AUTO_STORE_BYTES = 32 * 2**30
#: Format of the PCG state in a store (part of its key).
PCG_STATE_VERSION = 1


# --------------------------------------------------------------------------- choosing a solver


def check_pcg_sketch(sketch, *, solver: str, argument: str = "sketch") -> None:
    """Refuse a sketch PCG cannot use, naming ``solver``, the sketch's ``argument`` and the
    supported sketches."""
    name = type(sketch).__name__
    if not getattr(sketch, "selects_landmarks", False):
        exact = "exact KRR" if argument == "sketch" else "an exact input side"
        what = f"{argument}=None ({exact})" if name == "Identity" else f"{argument}={sketch!r}"
        raise ValueError(
            f"solver={solver!r}: the preconditioned conjugate gradient needs landmarks, a sketch "
            f"that sub-samples rows ({', '.join(landmark_sketches())}): its preconditioner is "
            f"built from the landmarks' kernel matrix K_mm alone; {what} has none. Use one of "
            f"those sketches, or solver='direct'")


def choose_solver(solver: str, *, n: int, m: int | None, sketch, store, tuning=None) -> str:
    """``"direct"`` or ``"pcg"`` for a fit of ``n`` rows and ``m`` landmarks.

    ``"auto"``: direct while forming ``G`` costs no more than PCG's passes,
    ``2nm² ≤ auto_pcg_passes · n·m · auto_pass_flops`` (``tuning``'s fields: ``m ≤ 8 100`` at
    the defaults), and (with a kept ``store``) the stored ``C``, ``4nm`` bytes in float32, is
    at most ``AUTO_STORE_BYTES``; PCG beyond, when the sketch picks landmarks
    (``Sketch.selects_landmarks``; any other sketch stays direct). ``tuning``: the fit's
    ``options.tuning`` (:class:`~distsketch.Tuning`; None: the defaults).
    """
    if solver != "auto":
        return solver
    if m is None or not getattr(sketch, "selects_landmarks", False):
        return "direct"
    tuning = check_tuning(tuning)
    cheaper = 2.0 * n * m * m <= tuning.auto_pcg_passes * n * m * tuning.auto_pass_flops
    affordable = store is None or 4.0 * n * m <= AUTO_STORE_BYTES
    return "direct" if cheaper and affordable else "pcg"


# --------------------------------------------------------------------------- a whole fit


def _states_for(states, keep):
    """``states`` with the number of landmarks solved in in every key (their arrays have
    that many rows), or ``states`` itself when all are."""
    if states is None or keep is None:
        return states
    u = int(len(keep))
    return lambda key: states({**key, "distinct": u})


def _expand(result: PCGResult, keep, landmarks, Kmm: LandmarkGram) -> PCGResult:
    """``result`` of the landmarks ``landmarks[keep]`` solved in, in all ``m`` landmarks:
    ``α`` 0 on the others; ``K_nmᵀ K_nm α`` of a left-out landmark ``j`` as
    ``w_jᵀ (K_nmᵀ K_nm α)_S`` with ``w_j = K_SS^{-1} k(L_S, x_j)`` (exact for a repeated
    landmark, whose ``w_j`` selects its first copy; to the rounding of ``K_mm`` for a
    dependent one)."""
    if keep is None:
        return result
    m = landmarks.shape[0]
    L, _, t = result.alphas.shape
    alphas = np.zeros((L, m, t))
    alphas[:, keep] = result.alphas
    galphas = None
    if result.galphas is not None:
        galphas = np.zeros((L, m, t))
        galphas[:, keep] = result.galphas
        out = np.setdiff1d(np.arange(m), keep)
        # exact copies: their first copy's row
        first, inverse = distinct_landmarks(landmarks) or (np.arange(m), np.arange(m))
        pos = np.full(m, -1)
        pos[keep] = np.arange(len(keep))
        src = pos[first[inverse[out]]]
        copies = src >= 0
        galphas[:, out[copies]] = result.galphas[:, src[copies]]
        rest = out[~copies]
        if len(rest):  # numerically dependent: through the projection on the kept span
            k_sr = np.asarray(Kmm.fmap.block(landmarks[rest], dtype=np.float64)).T
            w = _cho_solve_upper(factor_kmm(Kmm), k_sr)
            galphas[:, rest] = np.einsum("sr,lst->lrt", w, result.galphas)
    return dataclasses.replace(result, alphas=alphas, galphas=galphas)


def _cho_solve_upper(T: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``(TᵀT)^{-1} b`` for an upper-triangular ``T``."""
    v = solve_triangular(T, b, lower=False, trans="T", check_finite=False)
    return solve_triangular(T, v, lower=False, check_finite=False)


def _prepare_pcg(fs, config: dict, options, *, Kmm: LandmarkGram, n: int, block_rows: int,
                 dtype):
    """Prepare the open store ``fs`` for the PCG pass ``config`` and build what the sweeps
    need: ``(data, states)`` — the :class:`~distsketch.engine.sweep.SweepData` of kernel blocks
    recomputed against ``Kmm``'s landmarks, and ``states(key)``, the solver-state group of
    ``key`` in a kept store (None in a temporary one)."""
    fs.prepare_pass(config, overwrite=options.overwrite)
    data = SweepData(n=n, block_rows=block_rows, m=Kmm.m, d=1, C=None, crcs=(),
                     x=Kmm.fmap, dtype=dtype, location=fs.location, backend=options.backend)

    def states(key: dict):
        if fs.temporary:
            return None
        return fs.group.require_group("solver").require_group(
            state_key({"pass": config, **key}))

    return data, states


def _solve_or_reset(solve, fs, config: dict, options):
    """``solve()``; when the store's recorded data differ (``DataChanged``) and
    ``options.overwrite``, reset the store to ``config`` and solve afresh."""
    try:
        return solve()
    except DataChanged as exc:
        if not options.overwrite:
            raise
        logger.warning("%s; overwrite=True: solving afresh", exc)
        fs.reset(config)
        return solve()

@dataclass
class PCGFit:
    """What :func:`fit_pcg` gives the estimator: the realised sketch, landmarks, kernel, the
    solutions, and the open store (closed by the caller after saving the model)."""

    sketch: object
    landmarks: object
    result: PCGResult
    store: str | None
    fs: object


def fit_pcg(spec, *, kernel, sketch, store, reuse_seeds: bool, tol: float, max_iter: int,
            fit_intercept: bool, model: str = "SketchedKRR", centre: bool = False) -> PCGFit:
    """Draw the sketch (as the streaming pass draws it: the same seeds give the same
    landmarks as the direct route), open the store and solve the λ path by PCG.

    ``spec`` is the estimator's validated :class:`~distsketch.models.base.FitSpec`; ``kernel`` and
    ``sketch`` its resolved input side. The store records a pass configuration with
    ``"solver": "pcg"`` and no block arrays; the solver's states live under ``solver/``.
    ``centre``: the jointly fitted intercept of :class:`~distsketch.SketchedRegressor`
    (:func:`pcg_path`).
    """
    from ..engine.fitpass import choose_block_rows, jsonable
    from ..engine.store import StoreDirectory, open_fit_store
    from ..kernels.base import kernel_description

    check_pcg_sketch(sketch, solver="pcg")
    X, Y, options = spec.X, spec.Y, spec.options
    n = X.n
    directory = store if isinstance(store, StoreDirectory) else None
    fs = None if directory is not None else open_fit_store(store, lock=True)
    try:
        seed = int(spec.rng.integers(0, 2**63 - 1, size=2)[0])
        found = fs.recorded_seed("input") if reuse_seeds and fs is not None else None
        seed = seed if found is None else found
        if getattr(sketch, "needs_kernel", False):
            xs = sketch.realize(n, seed=seed, data=X, kernel=kernel)
        else:
            xs = sketch.realize(n, seed=seed, data=X)
        land = X.take(xs.support)
        dtype = np.dtype(options.block_dtype)
        m = xs.m
        b = choose_block_rows(options, n, m + X.shape[1] + 2 * Y.shape[1], X.native_rows,
                               dtype)
        config = jsonable({
            "model": model, "solver": "pcg", "version": PCG_STATE_VERSION, "n": n,
            "block_rows": b, "block_dtype": str(dtype), "gram_chunk": options.gram_chunk,
            "m_x": None, "m_y": None,  # no blocks are stored
            "input": {"kernel": kernel_description(kernel), "sketch": xs.to_config(),
                      "shape": X.shape, "landmarks": fingerprint(land)},
            "output": {"targets": Y.shape}, "unique_outputs": False,
            **store_config(options.tuning),  # none at the defaults: earlier stores resume
        })
        if directory is not None:
            fs = directory.open(config)
        keep, Kmm, T = select_landmarks(kernel, land, chunk=options.gram_chunk, what=model,
                                        tuning=options.tuning, backend=options.backend)
        data, states = _prepare_pcg(fs, config, options, Kmm=Kmm, n=n, block_rows=b,
                                    dtype=dtype)
        states = _states_for(states, keep)

        def solve():
            return pcg_path(data, X, Y, Kmm=Kmm, lams=spec.lams, tol=tol, max_iter=max_iter,
                            fit_intercept=fit_intercept, split_every=options.split_every,
                            progress=options.progress, states=states, centre=centre, T=T)

        result = _expand(_solve_or_reset(solve, fs, config, options), keep, land, Kmm)
    except BaseException:
        if fs is not None:
            fs.close()
        raise
    return PCGFit(xs, land, result, None if fs.temporary else fs.location, fs)


# --------------------------------------------------------------------------- SISOKR's input side


class _SisokrRhsState(SolverState):
    """SISOKR's right-hand side ``z`` in a store group: a resumed fit recomputes it by its
    first pass and reuses the stored iterates only if it is bitwise the same."""

    ARRAYS = ("z",)


@dataclass
class SisokrPCGFit:
    """What :func:`fit_pcg_sisokr` gives :class:`~distsketch.SISOKR`: both realised sides,
    the pass's sums (``M``, ``E``, ``U``), the output whitening ``T_Y``, the PCG solutions and
    the open store (closed by the caller after saving the model)."""

    x_sketch: object
    x_landmarks: object
    y_sketch: object
    y_landmarks: object
    sums: dict
    output_whitening: np.ndarray
    result: PCGResult
    store: str | None
    fs: object


def fit_pcg_sisokr(spec, *, store, reuse_seeds: bool, tol: float, max_iter: int,
                   linear_output: bool, sums: tuple | None = None,
                   model: str = "SISOKR") -> SisokrPCGFit:
    """SISOKR's input side by PCG: multi-output KRR of the whitened output features.

    With a sub-sampling input sketch (landmarks ``X_J``, ``C = K_nm diag(r)``) and a sketched
    output side (``D = K_Y R_Yᵀ``, ``T_Y`` whitening ``E = R_Y K_Y R_Yᵀ``), the input side is
    kernel ridge regression of ``Ψ = D T_Y`` (n × r_Y) on the inputs. In the landmark
    parametrisation ``g(x) = αᵀ k(X_J, x)`` (r_Y output coordinates) its normal equations are

        (K_nmᵀ K_nm + nλ K_mm) α = K_nmᵀ D T_Y = diag(1/r) Mᵀ T_Y,     M = Dᵀ C = Σ_I D_Iᵀ C_I

    and ``W(λ) = α(λ)ᵀ`` in the input features ``k(X_J, x)`` is the direct route's
    ``(T_Yᵀ M T_X)(H + nλI)^{-1}`` in its own features when ``K_mm`` has full rank.

    One streaming pass (:func:`~distsketch.engine.fitpass.fit_pass`, nothing stored: no ``C``,
    no ``D``) computes ``M``, ``E`` (and ``U``, the default candidates, unless the output
    kernel is linear) — not ``G``; then :func:`lam_path` solves the r_Y columns at once, one
    pass of recomputed kernel blocks per iteration. The sketches are drawn from the same two
    seeds as the direct route's pass (same ``random_state``, same landmarks). With a kept
    store the λ states are kept under ``solver/`` as :func:`fit_pcg` keeps them; a resumed fit
    recomputes the first pass (one pass) and continues from the stored iterates only when its
    right-hand side is bitwise the recorded one (other data: ``DataChanged``, or with
    ``EngineOptions(overwrite=True)`` solved afresh).

    ``spec``: the validated :class:`~distsketch.models.base.FitSpec` of a SISOKR (kernels and
    sketches under ``input_*`` / ``output_*``). ``sums``: the first pass's sums (default
    ``M``, ``E`` and, unless the output kernel is linear, ``U``; a growing fit with centred
    outputs adds the intercept's ``b``, ``s``, ``y1``, which add over row batches).
    """
    from ..engine.fitpass import choose_block_rows, fit_pass, jsonable
    from ..engine.store import StoreDirectory, open_fit_store
    from ..kernels.base import kernel_description
    from ..linalg.solve import whitening

    kx, ky = spec.kernels["input_kernel"], spec.kernels["output_kernel"]
    xsk, ysk = spec.sketches["input_sketch"], spec.sketches["output_sketch"]
    check_pcg_sketch(xsk, solver="pcg")
    X, Y, options = spec.X, spec.Y, spec.options
    n = X.n
    directory = store if isinstance(store, StoreDirectory) else None
    fs = None if directory is not None else open_fit_store(store, lock=True)
    try:
        seeds = [int(s) for s in spec.rng.integers(0, 2**63 - 1, size=2)]
        if reuse_seeds and fs is not None:
            found = [fs.recorded_seed(side) for side in ("input", "output")]
            seeds = [s if f is None else f for f, s in zip(found, seeds)]
        if sums is None:
            sums = ("M", "E") if linear_output else ("M", "E", "U")
        # the route's preconditioner and right-hand side are in the input landmarks' own
        # coordinates (C = K_nm diag(r)): the input side is never pre-whitened; the output
        # side is as the direct route's (EngineOptions.prewhiten), the same output features
        res = fit_pass(X, Y, x_kernel=kx, x_sketch=xsk, y_kernel=ky, y_sketch=ysk, sums=sums,
                       rng=spec.rng, seeds=seeds, store=None, options=options, model=model,
                       kernel_names=("input_kernel", "output_kernel"),
                       prewhiten_sides=("output",))
        res.fs.close()
        xs, ys = res.x_sketch, res.y_sketch
        T_Y = whitening(np.asarray(res.sums["E"], dtype=np.float64), rtol=options.eig_rtol,
                        argument="output_kernel")
        M = np.asarray(res.sums["M"], dtype=np.float64)  # m_Y × m_X
        z = np.ascontiguousarray((M.T @ T_Y) / np.asarray(xs.scale, dtype=np.float64)[:, None])
        dtype = np.dtype(options.block_dtype)
        m = xs.m
        b = choose_block_rows(options, n, m + X.shape[1] + Y.shape[1], X.native_rows, dtype)
        config = jsonable({
            "model": model, "solver": "pcg", "version": PCG_STATE_VERSION, "n": n,
            "block_rows": b, "block_dtype": str(dtype), "gram_chunk": options.gram_chunk,
            "m_x": None, "m_y": None,  # no blocks are stored
            "input": {"kernel": kernel_description(kx), "sketch": xs.to_config(),
                      "shape": X.shape, "landmarks": fingerprint(res.x_landmarks)},
            "output": {"kernel": kernel_description(ky), "sketch": ys.to_config(),
                       "shape": Y.shape, "landmarks": fingerprint(res.y_landmarks)},
            "unique_outputs": not linear_output,
            **store_config(options.tuning),  # none at the defaults: earlier stores resume
        })
        if directory is not None:
            fs = directory.open(config)
        keep, Kmm, T = select_landmarks(kx, res.x_landmarks, chunk=options.gram_chunk,
                                        what=model, tuning=options.tuning,
                                        backend=options.backend)
        data, states = _prepare_pcg(fs, config, options, Kmm=Kmm, n=n, block_rows=b,
                                    dtype=dtype)
        states = _states_for(states, keep)
        z_solve = z if keep is None else np.ascontiguousarray(z[keep])  # the rows solved in

        def solve():
            rhs = _SisokrRhsState(states({"what": "rhs"}))
            st = rhs.load()
            if st is not None and st.get("done"):
                if not np.array_equal(st["z"], z):
                    raise DataChanged(
                        f"store {fs.location!r}: the training data differ from those the "
                        f"stored PCG iterations were computed from (the right-hand side "
                        f"K_nmᵀ D T_Y of the first pass differs); fit on the same data, or use "
                        f"EngineOptions(overwrite=True) or a new store path")
            else:
                rhs.save({"z": z, "done": True})
            sweeper = Sweeper(data, X, Y, split_every=options.split_every,
                              progress=options.progress, block=pcg_block, name="pcg")
            return lam_path(sweeper, Kmm, z_solve, spec.lams, tol=tol, max_iter=max_iter,
                            states=states, T=T)

        result = _expand(_solve_or_reset(solve, fs, config, options), keep, res.x_landmarks,
                         Kmm)
    except BaseException:
        if fs is not None:
            fs.close()
        raise
    result = dataclasses.replace(result, n_passes=result.n_passes + 1)  # and the first pass
    return SisokrPCGFit(xs, res.x_landmarks, ys, res.y_landmarks, res.sums, T_Y, result,
                        None if fs.temporary else fs.location, fs)


# --------------------------------------------------------------------------- appended rows


def refit_pcg(est, spec, growth, fs) -> tuple[PCGResult, object, object]:
    """A PCG model (:class:`~distsketch.SketchedKRR`, the squared-loss
    :class:`~distsketch.SketchedRegressor`, :class:`~distsketch.SISOKR`'s input side)
    solved again over every batch it holds: the route's :meth:`~distsketch.Route.resolve`.

    PCG recomputes every row's kernel blocks at each iteration, so its kept store keeps each
    batch's inputs and targets (``rows/X``, ``rows/Y``:
    :mod:`~distsketch.engine.keptrows`, checked against their checksums): the sweeps run over
    them as segments in batch order (:class:`~distsketch.engine.sweep.Segments`), against the
    fit's landmarks and kernel, and :func:`~distsketch.solvers.conjugate_gradient.pcg_path`
    solves ``(K_nmᵀ K_nm + nλ K_mm) α = K_nmᵀ (Y − 1ȳᵀ)`` over all rows (ȳ, and the centred
    system's ``s``, from its first pass over all rows), each λ started from the fitted ``α``
    at the nearest fitted λ, to the model's ``tol``.

    SISOKR's right-hand side ``z = diag(1/r) Mᵀ T_Y`` comes from the batches' summed ``M``
    instead (each batch's pass computes its ``M``, ``E``, ``U``; nothing is stored of its
    blocks): :func:`_refit_sisokr`.

    Returns
    -------
    (PCGResult, RealizedSketch, object)
        The path (``α`` on all m landmarks), the fitted sketch grown over the rows, and what
        the model adopts (the path; SISOKR: a :class:`SisokrPCGFit`).
    """
    if fs is None or fs.temporary:
        raise ValueError("partial_fit: the 'pcg' route re-solves over every row's inputs, "
                         "which only a kept store keeps; fit with store=... (a path)")
    options = spec.options
    kernel, land = growth.kernels[est._input[0]], growth.x_landmarks
    keep, Kmm, T = select_landmarks(kernel, land, chunk=options.gram_chunk,
                                    what=type(est).__name__, tuning=options.tuning,
                                    backend=options.backend)
    data, Xs, Ys = _kept_segments(fs, growth, Kmm, options)
    table = getattr(est, "path_", None)  # SketchedKRR, SISOKR: its table; the regressor: coefs_
    coefs = np.asarray(table.coefs if hasattr(table, "coefs") else est.coefs_)
    warm = coefs[nearest_lams(est.lams_, spec.lams)]
    warm = warm.reshape(len(spec.lams), land.shape[0], -1)
    if keep is not None:
        warm = np.ascontiguousarray(warm[:, keep])
    grown = growth.x_sketch.grown(max(growth.rows, growth.x_sketch.rows_drawn))
    if est._output is not None:
        fit = _refit_sisokr(est, spec, growth, data, Xs, Ys, Kmm, T, keep, warm)
        return fit.result, grown, fit
    result = pcg_path(data, Xs, Ys, Kmm=Kmm, lams=spec.lams, tol=float(est.tol),
                      max_iter=int(est.max_iter), fit_intercept=bool(est.fit_intercept),
                      split_every=options.split_every, progress=options.progress,
                      centre=bool(est._pcg_centre), T=T, warm=warm)
    result = _expand(result, keep, land, Kmm)
    return result, grown, result


def _kept_segments(fs, growth, Kmm: LandmarkGram, options):
    """``Segments.of`` the batches' kept inputs and targets: kernel blocks against ``Kmm``'s
    landmarks, recomputed from each batch's ``rows/X`` in its own blocks."""
    from ..engine.batchstore import batch_group
    from ..engine.keptrows import kept_rows
    from ..engine.sweep import Segment, Segments

    segments = []
    for record in growth.batches:
        k, rows = int(record["batch"]), int(record["rows"])
        store = fs if k == 0 else batch_group(fs, k)
        X, Y = (kept_rows(store.group, name, location=store.location, rows=rows)
                for name in ("X", "Y"))
        data = SweepData(n=rows, block_rows=int(store.meta["pass"]["block_rows"]), m=Kmm.m,
                         d=1, C=None, crcs=(), x=Kmm.fmap,
                         dtype=np.dtype(options.block_dtype), location=store.location,
                         backend=options.backend)
        segments.append(Segment(data, Y, X))
    return Segments.of(segments)


def _refit_sisokr(est, spec, growth, data, Xs, Ys, Kmm, T, keep, warm) -> SisokrPCGFit:
    """SISOKR's input side again over every batch: ``z = diag(1/r) Mᵀ T_Y`` from the
    batches' summed ``M`` (``E``, hence ``T_Y``, is the fit's: appended rows add nothing to
    it; with centred outputs both are re-centred by the mean of every row held, from the
    batches' ``b``, ``s``, ``y1``: ``est._growth_result``), then :func:`lam_path` from the
    fitted ``α`` (their products by one pass)."""
    from ..linalg.solve import whitening

    options = spec.options
    res = est._growth_result(growth)
    xs = res.x_sketch
    T_Y = whitening(np.asarray(res.sums["E"], dtype=np.float64), rtol=options.eig_rtol,
                    argument="output_kernel")
    M = np.asarray(res.sums["M"], dtype=np.float64)
    z = np.ascontiguousarray((M.T @ T_Y) / np.asarray(xs.scale, dtype=np.float64)[:, None])
    z = z if keep is None else np.ascontiguousarray(z[keep])
    sweeper = Sweeper(data, Xs, Ys, split_every=options.split_every,
                      progress=options.progress, block=pcg_block, name="pcg")
    L, m0, t = warm.shape
    gv = sweeper(PCGStep(np.ascontiguousarray(warm.transpose(1, 0, 2).reshape(m0, -1))))["GV"]
    starts = (warm, np.asarray(gv).reshape(m0, L, t).transpose(1, 0, 2))
    result = lam_path(sweeper, Kmm, z, spec.lams, tol=float(est.tol),
                      max_iter=int(est.max_iter), T=T, warm=starts)
    result = _expand(result, keep, res.x_landmarks, Kmm)
    return SisokrPCGFit(xs, res.x_landmarks, res.y_sketch, res.y_landmarks, res.sums, T_Y,
                        result, None, None)

