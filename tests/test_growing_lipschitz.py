"""Appended rows for the models solved by sweeps (Newton, ADMM): ``SketchedRegressor`` and
``SketchedQuantileRegressor`` with a kept store, re-solved over every batch's stored blocks and
kept targets, warm-started, against a fresh fit on all the rows with the fitted sketch.

Both the appended model and the fresh fit stop at a relative duality gap ``(P − D)/P ≤ tol``
on all rows, so each objective is within ``tol·P`` of the optimum ``P*``. The objective
``P(Ξ) = (1/n) Σ h(r_i) + (λ/2)‖Ξ‖²_F`` is λ-strongly convex in ``Ξ``, so without an
intercept each ``Ξ`` is within ``√(2·tol·P/λ)`` of ``Ξ*`` and the two within twice that; a
prediction ``φ(x)ᵀΞ`` with ``‖φ(x)‖² ≤ k(x, x) = 1`` (a Nyström feature of the Gaussian
kernel) moves by at most as much.
"""

from __future__ import annotations

import shutil

import dask
import dask.array as da
import numpy as np
import pytest
import scipy.sparse as sp
import zarr
from sklearn.base import clone

import distsketch as ds
import distsketch.solvers.lipschitz.resolve as resolve
from conftest import SKETCH_TYPES
from distsketch.engine.storeguard import StoreError
from distsketch.kernels import Gaussian
from growinghelpers import killed_then_resumed, problem

F64 = ds.EngineOptions(block_dtype="float64", block_rows=37)
LAMS = [1e-2, 1e-3]
TOL = 1e-10


def regressor(store, *, loss="huber", solver="newton", sketch=None, intercept=False, **kw):
    return ds.SketchedRegressor(Gaussian(gamma=0.3), loss=loss, sketch=sketch or
                                ds.SubSampling(30), lam=LAMS, solver=solver,
                                fit_intercept=intercept, tol=TOL, max_iter=500,
                                random_state=0, options=F64, store=store, **kw)


def data(n=260, seed=1):
    X, y = problem(n=n, seed=seed)
    rng = np.random.default_rng(seed + 10)
    return X, y + 0.5 * rng.standard_t(2, size=n)  # heavy tails: Huber's linear part in use


def huber(r, kappa=1.0):
    a = np.abs(r)
    return np.where(a <= kappa, 0.5 * r * r, kappa * a - 0.5 * kappa * kappa)


def fresh_like(model, X, y, **kw):
    """A fresh fit on ``X, y`` with the model's realised sketch and arguments."""
    return clone(model).set_params(sketch=model.sketch_, store=None, **kw).fit(X, y)


def check_same_optimum(a, b):
    """Both certified on all rows; objectives within tol·P of each other (module docstring)."""
    assert np.all(a.duality_gaps_ <= TOL) and np.all(b.duality_gaps_ <= TOL)
    scale = np.maximum(a.objectives_, b.objectives_)
    assert np.all(np.abs(a.objectives_ - b.objectives_) <= 2 * TOL * scale)


@pytest.mark.parametrize("solver", ["newton", "admm"])
def test_append_equals_fresh_fit_with_the_sketch(tmp_path, solver):
    X, y = data()
    model = regressor(tmp_path / "s", solver=solver).fit(X[:170], y[:170])
    model.partial_fit(X[170:230], y[170:230])
    model.partial_fit(X[230:], y[230:])
    assert [b["rows"] for b in model.batches_] == [170, 60, 30]
    assert model.solver_ == solver
    fresh = fresh_like(model, X, y)
    check_same_optimum(model, fresh)
    for k, lam in enumerate(LAMS):
        model.set_lam(lam)
        fresh.set_lam(lam)
        bound = 2 * np.sqrt(2 * TOL * max(model.objective_, fresh.objective_) / lam)
        assert np.max(np.abs(model.predict(X) - fresh.predict(X))) <= bound
        # the certified objective is that of all 260 rows: the naive formula
        naive = huber(model.predict(X) - y).mean() + 0.5 * lam * np.sum(model.coefs_[k] ** 2)
        assert abs(naive - model.objective_) <= 1e-10 * naive


def test_quantiles_and_intercept(tmp_path):
    X, y = data(seed=3)
    model = ds.SketchedQuantileRegressor(Gaussian(gamma=0.3), quantiles=[0.25, 0.75],
                                         sketch=ds.SubSampling(30), lam=LAMS, tol=TOL,
                                         max_iter=500, random_state=0, options=F64,
                                         store=tmp_path / "q")
    model.fit(X[:200], y[:200]).partial_fit(X[200:], y[200:])
    fresh = fresh_like(model, X, y)
    check_same_optimum(model, fresh)
    assert model.predict(X[:5]).shape == (5, 2)


def test_admm_with_intercept_epsilon_insensitive(tmp_path):
    X, y = data(seed=4)
    model = regressor(tmp_path / "e", loss="epsilon_insensitive", solver="admm",
                      intercept=True)
    model.fit(X[:180], y[:180]).partial_fit(X[180:], y[180:])
    check_same_optimum(model, fresh_like(model, X, y))


def test_forget_equals_fresh_fit_without_the_batch(tmp_path):
    X, y = data(seed=5)
    model = regressor(tmp_path / "f").fit(X[:150], y[:150])
    model.partial_fit(X[150:210], y[150:210]).partial_fit(X[210:], y[210:])
    model.forget(1)
    assert [b["batch"] for b in model.batches_] == [0, 2]
    keep = np.r_[0:150, 210:260]
    assert model.sketch_.n == 200  # the landmarks stay among the first 150 rows
    check_same_optimum(model, fresh_like(model, X[keep], y[keep]))


def test_loaded_model_appends_as_the_fitted_one(tmp_path):
    X, y = data(seed=6)
    a = regressor(tmp_path / "a").fit(X[:200], y[:200])
    shutil.copytree(tmp_path / "a", tmp_path / "b")  # a copied store loads and appends
    b = ds.load(str(tmp_path / "b"))
    a.partial_fit(X[200:], y[200:])
    b.partial_fit(X[200:], y[200:])
    assert np.array_equal(a.predict(X), b.predict(X))
    assert np.array_equal(ds.load(str(tmp_path / "a")).predict(X), a.predict(X))


def test_first_batch_input_deleted_before_the_append(tmp_path):
    X, y = data(seed=7)
    zarr.save_array(str(tmp_path / "x0.zarr"), X[:200])
    zarr.save_array(str(tmp_path / "y0.zarr"), y[:200])
    model = regressor(tmp_path / "d").fit(zarr.open_array(str(tmp_path / "x0.zarr")),
                                          zarr.open_array(str(tmp_path / "y0.zarr")))
    shutil.rmtree(tmp_path / "x0.zarr")
    shutil.rmtree(tmp_path / "y0.zarr")
    model.partial_fit(X[200:], y[200:])
    ref = regressor(tmp_path / "r").fit(X[:200], y[:200]).partial_fit(X[200:], y[200:])
    assert np.array_equal(model.predict(X), ref.predict(X))


def test_killed_resolve_resumes_bitwise(tmp_path, monkeypatch):
    X, y = data(seed=8)
    ref = regressor(tmp_path / "r").fit(X[:190], y[:190]).partial_fit(X[190:], y[190:])
    model = regressor(tmp_path / "k").fit(X[:190], y[:190])
    again = killed_then_resumed(model, (X[190:], y[190:]), monkeypatch=monkeypatch,
                                module=resolve, name="resolve_path", path=tmp_path / "k")
    assert np.array_equal(again.predict(X), ref.predict(X))


def test_damaged_kept_targets_are_refused(tmp_path):
    X, y = data(seed=9)
    model = regressor(tmp_path / "t").fit(X[:200], y[:200])
    arr = zarr.open_group(str(tmp_path / "t"), mode="r+")["rows/Y"]
    arr[3] = arr[3] + 1.0
    with pytest.raises(StoreError, match="rows/Y"):
        model.partial_fit(X[200:], y[200:])


def test_without_a_store_there_is_no_partial_fit_and_the_message_names_store():
    X, y = data(seed=2)
    model = regressor(None).fit(X[:200], y[:200])
    assert not hasattr(model, "partial_fit") and not hasattr(model, "forget")
    with pytest.raises(AttributeError, match="store="):
        model.partial_fit(X[200:], y[200:])


def test_repeated_batch_refused(tmp_path):
    X, y = data(seed=11)
    model = regressor(tmp_path / "p").fit(X[:130], y[:130])
    model.partial_fit(X[130:], y[130:])
    with pytest.raises(ValueError, match="repeat=True"):
        model.partial_fit(X[130:], y[130:])


@pytest.mark.parametrize("kind", ["sparse", "dask", "zarr"])
def test_every_input_kind_appends_as_numpy(kind, tmp_path):
    """The batch's blocks and kept targets do not depend on how its rows are given."""
    X, y = data(seed=12)
    want = regressor(tmp_path / "n").fit(X[:200], y[:200]).partial_fit(X[200:], y[200:])
    if kind == "sparse":
        Xn, yn = sp.csr_array(X[200:]), y[200:]
    elif kind == "dask":
        Xn, yn = da.from_array(X[200:], chunks=(13, 4)), da.from_array(y[200:], chunks=13)
    else:
        Xn = zarr.create_array(str(tmp_path / "x.zarr"), shape=(60, 4), chunks=(11, 4),
                               dtype="f8")
        Xn[:] = X[200:]
        yn = zarr.create_array(str(tmp_path / "y.zarr"), shape=(60,), chunks=(11,),
                               dtype="f8")
        yn[:] = y[200:]
    got = regressor(tmp_path / kind).fit(X[:200], y[:200]).partial_fit(Xn, yn)
    np.testing.assert_array_equal(got.predict(X), want.predict(X))


@pytest.mark.slow
@pytest.mark.parametrize("solver", ["newton", "admm"])
def test_a_local_cluster_appends_as_the_threaded_scheduler(solver, tmp_path):
    """Newton's re-solve is bitwise the threaded one's; ADMM's per-row variables stay in
    memory only on the local scheduler, so on a cluster its re-solve runs Newton's sweeps,
    to the same certificate."""
    distributed = pytest.importorskip("distributed")
    X, y = data(seed=13)

    def grown(path):
        model = regressor(path, solver=solver).fit(X[:160], y[:160])
        model.partial_fit(X[160:220], y[160:220])
        return model.partial_fit(X[220:], y[220:])

    with dask.config.set(scheduler="threads"):
        want = grown(tmp_path / "threads")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster):
        got = grown(tmp_path / "cluster")
    if solver == "newton":
        np.testing.assert_array_equal(got.predict(X), want.predict(X))
    else:
        check_same_optimum(got, want)


@pytest.mark.parametrize("name", sorted(n for n in SKETCH_TYPES if n != "identity"))
def test_every_sketch_type_appends_as_a_fresh_fit(name, tmp_path):
    """Newton over every sketch type: the appended model and a fresh fit with the fitted
    sketch reach the same optimum (certified on all rows), predictions within the bound of the
    module docstring."""
    X, y = data(n=200, seed=14)
    model = regressor(tmp_path / "s", sketch=SKETCH_TYPES[name](20)).fit(X[:140], y[:140])
    model.partial_fit(X[140:], y[140:])
    fresh = fresh_like(model, X, y)
    check_same_optimum(model, fresh)
    lam = model.lam_
    bound = 2 * np.sqrt(2 * TOL * max(model.objective_, fresh.objective_) / lam)
    assert np.max(np.abs(model.predict(X) - fresh.predict(X))) <= bound
