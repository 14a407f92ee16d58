"""Appended rows for the models solved by PCG (``SketchedKRR(solver="pcg")``, the squared-loss
``SketchedRegressor``): with a kept store each batch's inputs and targets are kept and the
model is solved again by PCG over all of them, warm-started, against fresh fits with the fitted
sketch by PCG and by the direct route (an independent solver of the same normal equations).

Both PCG solutions stop at a relative residual ``‖Pᵀ(z − Hα)‖ / ‖Pᵀz‖ ≤ tol = 1e-12`` of the
same system, so they differ by at most ``κ(PᵀHP)·tol`` relative, ``κ`` the preconditioned
condition number (order 1–10 with Falkon's preconditioner at these sizes): predictions agree
to 1e-9 relative (float64 blocks); the direct route's eigendecompositions add their own
rounding, ``≈ cond(B)·ε``: 1e-7; Newton's certificate its bound (tests/test_growing_lipschitz.py).
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import zarr

import distsketch as ds
import distsketch.solvers.pcg as pcg
from distsketch.kernels import Gaussian, Linear
from growinghelpers import killed_then_resumed, problem

F64 = ds.EngineOptions(block_dtype="float64", block_rows=37)
LAMS = [1e-2, 1e-4]


def model(cls, store, sketch=None, **kw):
    extra = {"loss": "squared"} if cls is ds.SketchedRegressor else {}
    return cls(Gaussian(gamma=0.3), sketch=sketch or ds.SubSampling(30), lam=LAMS,
               solver=kw.pop("solver", "pcg"), tol=1e-12, max_iter=400, random_state=0,
               options=F64, store=store, **extra, **kw)


def rel(a, b):
    return float(np.max(np.abs(np.asarray(a) - b)) / np.max(np.abs(b)))


CLASSES = [ds.SketchedKRR, ds.SketchedRegressor]


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_append_equals_fresh_fits_with_the_sketch(cls, tmp_path):
    X, y = problem(n=300, seed=1)
    m = model(cls, tmp_path / "s").fit(X[:180], y[:180])
    m.partial_fit(X[180:250], y[180:250]).partial_fit(X[250:], y[250:])
    assert [b["rows"] for b in m.batches_] == [180, 70, 50] and m.solver_ == "pcg"
    fresh = model(cls, None, sketch=m.sketch_).fit(X, y)
    other = "direct" if cls is ds.SketchedKRR else "newton"  # an independent solver
    independent = model(cls, None, sketch=m.sketch_, solver=other).fit(X, y)
    for lam in LAMS:
        got = m.set_lam(lam).predict(X)
        assert rel(got, fresh.set_lam(lam).predict(X)) < 1e-9
        want = independent.set_lam(lam).predict(X)
        if cls is ds.SketchedKRR:
            assert rel(got, want) < 1e-7
        else:  # Newton's certificate: a gap ≤ tol·P puts Ξ within √(2·tol·P/λ) of the optimum
            bound = np.sqrt(2 * 1e-12 * independent.objective_ / lam)  # and ‖φ(x)‖ ≤ 1
            assert np.max(np.abs(got - want)) <= bound
    assert np.all(m.n_iters_ < 400)  # converged (a ConvergenceWarning would be an error)


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_forget_and_load(cls, tmp_path):
    X, y = problem(n=260, seed=2)
    m = model(cls, tmp_path / "f").fit(X[:160], y[:160])
    shutil.copytree(tmp_path / "f", tmp_path / "g")
    loaded = ds.load(str(tmp_path / "g"))  # a copied store: appends as the fitted model
    m.partial_fit(X[160:220], y[160:220])
    loaded.partial_fit(X[160:220], y[160:220])
    assert np.array_equal(m.predict(X), loaded.predict(X))
    m.partial_fit(X[220:], y[220:])
    m.forget(1)
    keep = np.r_[0:160, 220:260]
    fresh = model(cls, None, sketch=m.sketch_).fit(X[keep], y[keep])
    assert rel(m.predict(X), fresh.predict(X)) < 1e-9
    again = ds.load(str(tmp_path / "f"))
    assert [b["batch"] for b in again.batches_] == [0, 2]
    assert np.array_equal(again.predict(X), m.predict(X))


def test_first_batch_input_deleted_before_the_append(tmp_path):
    X, y = problem(n=240, seed=3)
    zarr.save_array(str(tmp_path / "x0.zarr"), X[:170])
    m = model(ds.SketchedKRR, tmp_path / "d").fit(zarr.open_array(str(tmp_path / "x0.zarr")),
                                                   y[:170])
    shutil.rmtree(tmp_path / "x0.zarr")  # PCG re-reads every row: from the store's copy
    m.partial_fit(X[170:], y[170:])
    ref = model(ds.SketchedKRR, tmp_path / "r").fit(X[:170], y[:170]).partial_fit(X[170:],
                                                                                   y[170:])
    assert np.array_equal(m.predict(X), ref.predict(X))


def test_killed_append_resumes_bitwise(tmp_path, monkeypatch):
    X, y = problem(n=240, seed=4)
    ref = model(ds.SketchedKRR, tmp_path / "r").fit(X[:170], y[:170]).partial_fit(X[170:],
                                                                                   y[170:])
    m = model(ds.SketchedKRR, tmp_path / "k").fit(X[:170], y[:170])
    again = killed_then_resumed(m, (X[170:], y[170:]), monkeypatch=monkeypatch, module=pcg,
                                name="pcg_path", path=tmp_path / "k")
    assert np.array_equal(again.predict(X), ref.predict(X))


def test_refusals(tmp_path):
    X, y = problem(n=200, seed=5)
    without = model(ds.SketchedKRR, None).fit(X[:150], y[:150])
    assert not hasattr(without, "partial_fit")
    with pytest.raises(AttributeError, match="store="):
        without.partial_fit(X[150:], y[150:])
    m = model(ds.SketchedKRR, tmp_path / "p").fit(X[:150], y[:150])
    m.partial_fit(X[150:], y[150:])
    with pytest.raises(ValueError, match="repeat=True"):
        m.partial_fit(X[150:], y[150:])


def test_sisokr_input_side_by_pcg_appends(tmp_path):
    """SISOKR by PCG: each batch's pass adds its ``M``, ``E``, ``U`` (no block stored), the
    input side is solved again over every batch's kept inputs; against a fresh PCG fit with
    both fitted sketches, the coefficients agree to the CG tolerance and the default
    candidates are every row's outputs."""
    X, y = problem(n=320, seed=7)
    Y = np.c_[np.sin(X[:, 0]), X[:, 1] * X[:, 2], y]

    def sisokr(store=None, **kw):
        return ds.SISOKR(input_kernel=Gaussian(gamma=0.3), output_kernel=Gaussian(gamma=0.5),
                         input_sketch=kw.pop("input_sketch", ds.SubSampling(30)),
                         output_sketch=kw.pop("output_sketch", ds.SubSampling(20)), lam=LAMS,
                         solver="pcg", tol=1e-12, max_iter=400, random_state=0, options=F64,
                         store=store, **kw)

    m = sisokr(tmp_path / "s").fit(X[:200], Y[:200])
    m.partial_fit(X[200:270], Y[200:270]).partial_fit(X[270:], Y[270:])
    fresh = sisokr(input_sketch=m.input_sketch_, output_sketch=m.output_sketch_).fit(X, Y)
    assert m.candidates_.shape == fresh.candidates_.shape == (320, 3)
    for k in range(len(LAMS)):
        assert rel(m.path_.coefs[k], fresh.path_.coefs[k]) < 1e-9
    np.testing.assert_array_equal(m.predict(X[:40]), fresh.predict(X[:40]))
    m.forget(1)
    keep = np.r_[0:200, 270:320]
    fresh = sisokr(input_sketch=m.input_sketch_, output_sketch=m.output_sketch_).fit(X[keep],
                                                                                    Y[keep])
    assert rel(m.path_.coefs[0], fresh.path_.coefs[0]) < 1e-9
    loaded = ds.load(str(tmp_path / "s"))
    assert np.array_equal(loaded.path_.coefs, m.path_.coefs)


@pytest.mark.parametrize("output_sketch", [ds.SubSampling(20), ds.GaussianSketch(6)],
                         ids=["sub", "gauss"])
def test_sisokr_centred_outputs_by_pcg_append(tmp_path, output_sketch):
    """SISOKR by PCG with ``fit_intercept=True``: the batches' intercept sums re-centre the
    outputs by the mean of every row held (outputs with a large mean): the intercept is that
    mean, the coefficients a fresh PCG fit's on all rows with both fitted sketches (to the CG
    tolerance), the predictions the direct route's (its own rounding, 1e-7)."""
    X, y = problem(n=300, seed=8)
    Y = np.c_[y, -2 * y + X[:, 0]] + np.array([50.0, -20.0])

    def sisokr(store=None, solver="pcg", **kw):
        return ds.SISOKR(input_kernel=Gaussian(gamma=0.3), output_kernel=Linear(),
                         input_sketch=kw.pop("input_sketch", ds.SubSampling(30)),
                         output_sketch=kw.pop("output_sketch", output_sketch), lam=LAMS,
                         solver=solver, fit_intercept=True, tol=1e-12, max_iter=400,
                         random_state=0, options=F64, store=store, **kw)

    m = sisokr(tmp_path / "c").fit(X[:170], Y[:170])
    m.partial_fit(X[170:240], Y[170:240]).partial_fit(X[240:], Y[240:])
    np.testing.assert_allclose(m.intercept_, Y.mean(axis=0), rtol=1e-13)
    sketches = dict(input_sketch=m.input_sketch_, output_sketch=m.output_sketch_)
    fresh = sisokr(**sketches).fit(X, Y)
    direct = sisokr(solver="direct", **sketches).fit(X, Y)
    for k, lam in enumerate(LAMS):
        assert rel(m.path_.coefs[k], fresh.path_.coefs[k]) < 1e-9
        got = m.set_lam(lam).predict(X)
        assert rel(got, fresh.set_lam(lam).predict(X)) < 1e-9
        assert rel(got, direct.set_lam(lam).predict(X)) < 1e-7
    m.forget(1)
    keep = np.r_[0:170, 240:300]
    np.testing.assert_allclose(m.intercept_, Y[keep].mean(axis=0), rtol=1e-13)
    fresh = sisokr(**sketches).fit(X[keep], Y[keep])
    assert rel(m.set_lam(LAMS[0]).predict(X), fresh.set_lam(LAMS[0]).predict(X)) < 1e-9
    loaded = ds.load(str(tmp_path / "c"))
    np.testing.assert_array_equal(loaded.intercept_, m.intercept_)
    np.testing.assert_array_equal(loaded.path_.coefs, m.path_.coefs)


def test_fresh_pcg_fit_takes_a_fitted_landmark_sketch():
    """``sketch=model.sketch_`` of a PCG fit (a diagonal R_mix) is a PCG sketch; a mixing
    realisation is refused by PCG, naming the sketch."""
    X, y = problem(n=150, seed=6)
    m = model(ds.SketchedKRR, None).fit(X, y)
    assert ds.sketches.Fixed(m.sketch_).selects_landmarks
    g = ds.SketchedKRR(Gaussian(gamma=0.3), sketch=ds.GaussianSketch(20), random_state=0,
                       options=F64).fit(X, y)
    with pytest.raises(ValueError, match="needs landmarks"):
        model(ds.SketchedKRR, None, sketch=g.sketch_).fit(X, y)
