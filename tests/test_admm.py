"""The ADMM route of the Lipschitz-loss machines (``SketchedRegressor(solver="admm")``).

Checked against the Newton route and against CVXPY on the realised sketch (the feature-space
problem of Prop. 1 of El Ahmad et al., TMLR 2023, written in CVXPY's atoms), the proximal
operators against brute-force minimisation, the reported gap as a bound, invariance to the
block size, the store-backed and in-memory rows, resume after SIGKILL mid-iteration, and
the ``solver`` argument's errors.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from scipy.optimize import minimize, minimize_scalar

import distsketch as ds
from distsketch.losses.quantile import Pinball
from distsketch.losses.radial import EpsilonInsensitive, Huber, Squared
from distsketch.solvers.lipschitz.admm import choose_route, project_dual
from reference.lipschitz import data, reference

F64 = ds.EngineOptions(block_dtype="float64", block_rows=64)
GAMMA = 0.5
LAM = 1e-3


def _data(n=200, d=1, seed=0, outliers=12):
    return data(n, d, seed, outliers)


def _fit(loss, X, y, *, solver, tol, **kw):
    kw.setdefault("options", F64)
    return ds.SketchedRegressor(ds.Gaussian(gamma=GAMMA), loss=loss, sketch=ds.SubSampling(30),
                                lam=LAM, tol=tol, max_iter=5000, random_state=1, solver=solver,
                                **kw).fit(X, y)


# --------------------------------------------------------------------------- prox


def _h(loss, z):
    return float(loss.value(np.atleast_2d(z), 0.0)[0])


PROX_CASES = [(Squared(), 1), (Huber(0.5), 1), (EpsilonInsensitive(0.2), 1), (Pinball(0.3), 1),
              (Squared(), 2), (Huber(0.5), 2), (EpsilonInsensitive(0.2), 2),
              (Pinball((0.2, 0.7)), 2)]


@pytest.mark.slow
@pytest.mark.parametrize("loss, d", PROX_CASES, ids=lambda c: getattr(c, "name", str(c)))
@pytest.mark.parametrize("t", [0.3, 2.0])
def test_prox_against_brute_force(loss, d, t):
    """``prox_{t h}(v)`` minimises ``h(z) + ‖z − v‖²/(2t)``: no brute-force minimiser finds a
    lower value, and (strong convexity, modulus 1/t) it lies within ``√(2t·δ)`` of one that
    is ``δ`` above the minimum; ``(v − z)/t`` is a subgradient (in ``dom h*``)."""
    rng = np.random.default_rng(3)
    # norms spanning every piece: inside the tube / quadratic part, on the kink, beyond
    V = rng.normal(size=(12, d)) * np.geomspace(0.01, 5.0, 12)[:, None]
    Z = loss.prox(V, t)
    assert Z.shape == V.shape
    for v, z in zip(V, Z):
        def f(x, v=v):
            return _h(loss, x) + float(np.sum((x - v) ** 2)) / (2 * t)

        if d == 1:
            span = abs(v[0]) + 1.0
            best = minimize_scalar(lambda x: f(np.array([x])), bounds=(-span, span),
                                   method="bounded", options={"xatol": 1e-12}).x
            best = np.array([best])
        else:
            best = min((minimize(f, x0, method="Nelder-Mead",
                                 options={"xatol": 1e-12, "fatol": 1e-15, "maxiter": 20000}).x
                        for x0 in (v, np.zeros(d), 0.5 * v)), key=f)
        assert f(z) <= f(best) + 1e-13
        assert np.linalg.norm(z - best) <= np.sqrt(2 * t * max(f(best) - f(z), 0.0) + 1e-14) + 1e-6
    alpha = (V - Z) / t
    assert np.allclose(project_dual(loss, alpha), alpha, rtol=0, atol=1e-12)


# --------------------------------------------------------------------------- optimality


def _reference(est, X, y, loss, lam, M=None, intercept=True):
    """The feature-space problem's optimum by CVXPY (Clarabel) on the realised sketch."""
    return reference(est, X, y, loss, lam, M, intercept, gamma=GAMMA)[0]


M3 = np.array([[1.0, 0.5, 0.2], [0.5, 1.0, 0.5], [0.2, 0.5, 1.0]])
OPT_CASES = [  # (loss, d, output matrix, intercept)
    (Squared(), 1, None, True),
    (Huber(0.5), 1, None, True),
    (EpsilonInsensitive(0.2), 1, None, True),
    (Pinball(0.3), 1, None, True),
    (Pinball(0.3), 1, None, False),
    (Huber(0.5), 3, M3, True),
    (EpsilonInsensitive(0.2), 3, None, True),
    (Pinball((0.2, 0.7)), 2, np.array([[1.0, 0.5], [0.5, 1.0]]), True),
]


@pytest.mark.slow
@pytest.mark.parametrize("loss, d, M, intercept", OPT_CASES,
                         ids=lambda c: getattr(c, "name", None) if isinstance(c, ds.losses.Loss)
                         else None)
def test_admm_optimal_against_newton_and_cvxpy(loss, d, M, intercept):
    X, y = _data(d=d)
    kw = dict(output_matrix=M, fit_intercept=intercept)
    admm = _fit(loss, X, y, solver="admm", tol=1e-8, **kw)
    assert admm.solver_ == "admm"
    assert 0.0 <= admm.duality_gap_ <= 1e-8 * admm.objective_
    # the reference needs 1e-6 (below); a certified 1e-10 sits at float64's floor for some
    # problems and BLAS kernels (1.25e-10 for Huber, d = 3, on OpenBLAS's SkylakeX kernels)
    newton = _fit(loss, X, y, solver="newton", tol=1e-9, **kw)
    assert newton.solver_ == "newton"
    assert abs(admm.objective_ - newton.objective_) <= 1e-6 * newton.objective_
    ref = _reference(admm, X, y, loss, LAM, M=M, intercept=intercept)
    assert abs(admm.objective_ - ref) <= 1e-6 * ref
    # the gap bounds the suboptimality (up to CVXPY's own accuracy)
    assert admm.duality_gap_ >= admm.objective_ - ref - 1e-9 * ref
    pred, ref_pred = admm.predict(X), newton.predict(X)
    assert np.allclose(pred, ref_pred, rtol=0, atol=1e-3 * np.abs(y).max())


def test_lambda_path_matches_newton():
    X, y = _data()
    lams = [1e-2, 1e-3]
    kw = dict(loss=Huber(0.5), sketch=ds.SubSampling(30), lam=lams, max_iter=5000,
              random_state=1, options=F64)
    admm = ds.SketchedRegressor(ds.Gaussian(gamma=GAMMA), solver="admm", tol=1e-9, **kw).fit(X, y)
    newton = ds.SketchedRegressor(ds.Gaussian(gamma=GAMMA), tol=1e-9, **kw).fit(X, y)
    assert np.allclose(admm.objectives_, newton.objectives_, rtol=1e-7, atol=0)
    assert np.all(admm.duality_gaps_ <= 1e-9 * admm.objectives_)


# --------------------------------------------------------------------------- invariance, rows


@pytest.mark.slow
@pytest.mark.parametrize("loss", [Huber(0.5), Pinball(0.3)], ids=lambda l: l.name)
def test_same_model_for_two_block_sizes(loss):
    X, y = _data()
    fits = [_fit(loss, X, y, solver="admm", tol=1e-8,
                 options=ds.EngineOptions(block_dtype="float64", block_rows=rows))
            for rows in (64, 37)]
    # the blocks' sums are added in another order (rounding, 1e-16), carried through the
    # iterations: measured 6e-13 (Huber, 16 iterations) and 3e-12 (pinball, 282) in the
    # predictions, 7e-12 and 2e-11 relative in dual_coef_ (Newton: 4e-15 and 1e-14)
    assert fits[0].n_iter_ == fits[1].n_iter_
    pred = [f.predict(X) for f in fits]
    assert np.allclose(pred[0], pred[1], rtol=0, atol=1e-11 * np.abs(pred[0]).max())
    scale = np.abs(fits[0].dual_coef_).max()
    assert np.allclose(fits[0].dual_coef_, fits[1].dual_coef_, rtol=0, atol=1e-10 * scale)
    assert abs(fits[0].objective_ - fits[1].objective_) <= 1e-12 * fits[0].objective_


@pytest.mark.slow
def test_in_memory_and_store_backed_rows_agree(tmp_path):
    """Without a store the rows ``Z, U`` are held in memory; with one they are zarr arrays
    next to the solver state: the same iterations, bitwise; the saved model keeps the route."""
    X, y = _data()
    mem = _fit(Pinball(0.3), X, y, solver="admm", tol=1e-5)
    stored = _fit(Pinball(0.3), X, y, solver="admm", tol=1e-5, store=tmp_path / "fit.zarr")
    assert np.array_equal(mem.dual_coef_, stored.dual_coef_)
    assert mem.n_iter_ == stored.n_iter_
    import zarr

    solver = zarr.open_group(str(tmp_path / "fit.zarr"), mode="r")["solver"]
    (group,) = [g for _, g in solver.groups()]
    assert {"z_0", "z_1", "u_0", "u_1"} <= {name for name, _ in group.arrays()}
    assert group["z_0"].chunks == (64, 1)
    loaded = ds.load(tmp_path / "fit.zarr")
    assert loaded.solver_ == "admm"
    assert np.array_equal(loaded.predict(X), stored.predict(X))


_KILL_SCRIPT = textwrap.dedent("""
    import os, signal
    import numpy as np
    import dask
    import distsketch as ds, distsketch.solvers.lipschitz.routes as rg
    from distsketch.losses.quantile import Pinball
    X = np.load({x!r}); y = np.load({y!r})
    block = rg.admm_block
    count = [0]
    def killing(shared, item, ws):
        out = block(shared, item, ws)
        count[0] += 1
        if count[0] == {kill_at}:  # after this block's rows are written, mid-iteration
            os.kill(os.getpid(), signal.SIGKILL)
        return out
    rg.admm_block = killing
    with dask.config.set(scheduler="sync"):
        ds.SketchedRegressor(ds.Gaussian(gamma=0.5), loss=Pinball(0.3), sketch=ds.SubSampling(30),
                             lam=1e-3, tol=1e-5, max_iter=5000, random_state=1, solver="admm",
                             options=ds.EngineOptions(block_dtype="float64", block_rows=64),
                             store={store!r}).fit(X, y)
""")


@pytest.mark.slow
def test_resume_after_sigkill_mid_iteration(tmp_path):
    """Killed after some blocks of an iteration wrote their new ``Z, U`` (the other generation
    intact), a fit restarts that iteration and ends with the bitwise identical model."""
    X, y = _data()
    kw = dict(solver="admm", tol=1e-5)
    whole = _fit(Pinball(0.3), X, y, store=tmp_path / "whole.zarr", **kw)
    assert whole.n_iter_ > 30
    n_blocks = -(-len(X) // 64)
    kill_at = 25 * n_blocks + 2  # the 26th iteration, its first two blocks written
    np.save(tmp_path / "X.npy", X)
    np.save(tmp_path / "y.npy", y)
    store = tmp_path / "killed.zarr"
    script = _KILL_SCRIPT.format(x=str(tmp_path / "X.npy"), y=str(tmp_path / "y.npy"),
                                 kill_at=kill_at, store=str(store))
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    import zarr

    solver = zarr.open_group(str(store), mode="r")["solver"]
    (group,) = [g for _, g in solver.groups()]
    assert group.attrs["state"]["n_iter"] == 25  # the completed iterations only
    resumed = _fit(Pinball(0.3), X, y, store=store, **kw)
    assert np.array_equal(resumed.dual_coef_, whole.dual_coef_)
    assert np.array_equal(resumed.intercepts_, whole.intercepts_)
    assert resumed.n_iter_ == whole.n_iter_
    assert resumed.n_passes_ == whole.n_passes_ - 25  # neither the pass nor 25 sweeps redone


# --------------------------------------------------------------------------- the argument


@pytest.mark.parametrize("solver", ["bfgs", "", None, 1, "ADMM"])
def test_bad_solver_before_anything_is_written(tmp_path, solver):
    X, y = _data(n=40)
    est = ds.SketchedRegressor(sketch=ds.SubSampling(10), solver=solver,
                               store=tmp_path / "s.zarr")
    with pytest.raises(ValueError, match="solver"):
        est.fit(X, y)
    assert not (tmp_path / "s.zarr").exists()


def test_admm_without_a_store_needs_the_local_scheduler(tmp_path):
    import dask

    X, y = _data(n=40)
    est = ds.SketchedRegressor(sketch=ds.SubSampling(10), solver="admm")
    with dask.config.set(scheduler="processes"), pytest.raises(ValueError, match="store"):
        est.fit(X, y)


def test_auto_keeps_newton_below_the_threshold():
    X, y = _data(n=100)
    est = ds.SketchedRegressor(ds.Gaussian(gamma=GAMMA), loss=Huber(0.5),
                               sketch=ds.SubSampling(20), solver="auto", random_state=0,
                               options=F64).fit(X, y)
    assert est.solver_ == "newton"
    auto_rank = ds.Tuning().auto_rank
    assert choose_route("auto", auto_rank - 1) == "newton"
    assert choose_route("auto", auto_rank) == "admm"
    assert choose_route("newton", 10**6) == "newton"
    assert ds.SketchedRegressor().get_params()["solver"] == "newton"


class _NoProx(Huber):
    """A user's loss without a proximal operator."""

    prox = ds.losses.Loss.prox


def test_admm_refuses_a_loss_without_prox(tmp_path):
    X, y = _data(n=40)
    est = ds.SketchedRegressor(loss=_NoProx(0.5), sketch=ds.SubSampling(10), solver="admm",
                               store=tmp_path / "s.zarr")
    with pytest.raises(ValueError, match="solver: 'admm' needs a loss with a proximal"):
        est.fit(X, y)
    assert not (tmp_path / "s.zarr").exists()
