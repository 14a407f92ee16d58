"""SISOKR with centred vector outputs (``fit_intercept=True``) takes appended rows: the model,
its intercept and its decoding equal a fresh fit on all the rows with the same realised
sketches; ``forget`` a fresh fit without the batch; the re-centring against its dense
formula."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest

import distsketch as ds
from distsketch.engine.fitpass import PassResult
from distsketch.kernels import Gaussian, Linear
from distsketch.models.centring import Centring, recentred
from growinghelpers import appended

F64 = ds.EngineOptions(block_dtype="float64", block_rows=37)
F32 = ds.EngineOptions(block_rows=37)
LAMS = [1e-2, 1e-4]
SIDES = {
    "sub-gauss": (lambda: ds.SubSampling(30), lambda: ds.GaussianSketch(6)),
    "sub-sub": (lambda: ds.SubSampling(30), lambda: ds.SubSampling(20)),
    "gauss-sub": (lambda: ds.GaussianSketch(25), lambda: ds.SubSampling(10)),
}


def problem(n=150, d=4, mean=0.0, seed=3):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 5))
    Y = np.tanh(X[:, :d]) @ rng.normal(size=(d, d)) + 0.3 * rng.normal(size=(n, d))
    return X, Y + mean + np.arange(d)


def rel(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


def sisokr(sx, sy, options=F64, **kw):
    return ds.SISOKR(Gaussian(gamma=0.2), Linear(), input_sketch=sx, output_sketch=sy,
                     lam=LAMS, fit_intercept=True, random_state=0, options=options, **kw)


def fresh_of(model, X, Y, **kw):
    return sisokr(model.input_sketch_, model.output_sketch_, **kw).fit(X, Y)


def assert_same_model(model, fresh, X, Y, tol, ranks=(None,)):
    np.testing.assert_allclose(model.intercept_, fresh.intercept_, rtol=tol, atol=0)
    cand = Y[::7]
    for lam in LAMS:
        model.set_lam(lam), fresh.set_lam(lam)
        for p in ranks:
            model.set_rank(p), fresh.set_rank(p)
            assert rel(model.predict(X), fresh.predict(X)) < tol
            assert rel(model.coef_, fresh.coef_) < tol
            assert rel(model.score_candidates(X, cand), fresh.score_candidates(X, cand)) < tol
            idx, _ = model.predict_topk(X, cand, k=2)
            np.testing.assert_array_equal(idx, fresh.predict_topk(X, cand, k=2)[0])
            # the decoded rows are the candidates, centred and un-centred by each ȳ
            np.testing.assert_allclose(model.predict(X, cand), cand[idx[:, 0]],
                                       rtol=0, atol=1e-13 * np.abs(cand).max())


@pytest.mark.parametrize("sides", sorted(SIDES))
def test_appended_rows_equal_a_fresh_fit_with_the_same_sketches(sides):
    X, Y = problem()
    sx, sy = SIDES[sides]
    model = appended(sisokr(sx(), sy()), X, Y, [90, 125])
    assert [b["rows"] for b in model.batches_] == [90, 35, 25]
    fresh = fresh_of(model, X, Y)
    np.testing.assert_allclose(model.intercept_, Y.mean(axis=0), rtol=1e-13)
    assert_same_model(model, fresh, X, Y, 1e-10)
    assert rel(model.output_landmarks_, fresh.output_landmarks_) < 1e-13


def test_a_reduced_rank_is_that_of_the_fresh_fit():
    X, Y = problem()
    model = appended(sisokr(ds.SubSampling(30), ds.SubSampling(20), rank=[1, 3]), X, Y,
                     [100])
    fresh = fresh_of(model, X, Y, rank=[1, 3])
    assert_same_model(model, fresh, X, Y, 1e-10, ranks=(1, 3, None))


def test_float32_blocks_agree_to_float32_rounding():
    X, Y = problem()
    model = appended(sisokr(ds.SubSampling(30), ds.GaussianSketch(6), options=F32), X, Y,
                     [90, 125])
    fresh = fresh_of(model, X, Y, options=F32)
    np.testing.assert_allclose(model.intercept_, fresh.intercept_, rtol=1e-12)
    for lam in LAMS:
        assert rel(model.set_lam(lam).predict(X), fresh.set_lam(lam).predict(X)) < 1e-4


def test_forget_equals_a_fresh_fit_without_the_batch():
    X, Y = problem()
    model = appended(sisokr(ds.SubSampling(30), ds.SubSampling(20)), X, Y, [80, 110, 130])
    model.forget(2)  # rows 110–129
    keep = np.r_[0:110, 130:150]
    fresh = fresh_of(model, X[keep], Y[keep])
    np.testing.assert_allclose(model.intercept_, Y[keep].mean(axis=0), rtol=1e-13)
    assert_same_model(model, fresh, X, Y, 1e-10)
    model.forget(1), model.forget(3)
    first = sisokr(ds.SubSampling(30), ds.SubSampling(20)).fit(X[:80], Y[:80])
    np.testing.assert_allclose(model.intercept_, first.intercept_, rtol=0,
                               atol=1e-14 * np.abs(Y).max())  # c + (1/n) Σ (y − c)
    assert rel(model.predict(X), first.predict(X)) < 1e-10


def test_a_saved_model_takes_rows_after_loading(tmp_path):
    X, Y = problem()
    model = appended(sisokr(ds.SubSampling(30), ds.GaussianSketch(6)), X[:120], Y[:120], [90])
    model.save(str(tmp_path / "m.zarr"))
    back = ds.load(str(tmp_path / "m.zarr"))
    np.testing.assert_array_equal(back.intercept_, model.intercept_)
    back.partial_fit(X[120:], Y[120:])
    model.partial_fit(X[120:], Y[120:])
    np.testing.assert_array_equal(back.intercept_, model.intercept_)
    np.testing.assert_array_equal(back.predict(X), model.predict(X))
    assert_same_model(back, fresh_of(model, X, Y), X, Y, 1e-10)
    with pytest.raises(ValueError, match="batch 1 already"):  # offset rows, the same digest
        back.partial_fit(X[90:120], Y[90:120])


def test_lazy_batches_are_offset_as_numpy_ones():
    X, Y = problem()
    eager = appended(sisokr(ds.SubSampling(30), ds.SubSampling(20)), X, Y, [90])
    lazy = sisokr(ds.SubSampling(30), ds.SubSampling(20)).fit(X[:90], Y[:90])
    lazy.partial_fit(da.from_array(X[90:], chunks=(17, 5)), da.from_array(Y[90:], chunks=(17, 4)))
    np.testing.assert_array_equal(lazy.intercept_, eager.intercept_)
    assert rel(lazy.predict(X), eager.predict(X)) < 1e-13


@pytest.mark.parametrize("mean", [0.0, 1e2, 1e4, 1e6])
def test_outputs_with_a_large_mean(mean):
    """The centred rows ``y − ȳ`` carry a rounding of ``ε·|ȳ|`` in a fresh fit and in the
    batches' offset sums ``b = Cᵀ(Y − 1cᵀ)`` alike, so the two models differ by about
    ``κ ε (1 + |ȳ|/σ_y)`` relative (``σ_y``: the outputs' spread; ``κ``: the amplification
    of the solve, about 100 here at mean 0); the re-centring itself subtracts ``s δᵀ`` with
    ``δ = ȳ − c`` of the order of ``σ_y/√n``, not ``ȳ`` (distsketch.models.centring). The
    surrogate ``ĥ(x) = h(x) − ȳ`` and ``W(λ)`` are compared, not ``h(x)``, whose ȳ would
    hide the difference."""
    X, Y = problem(mean=mean)
    tol = 1e-10 + 10 * np.finfo(np.float64).eps * mean / Y.std(axis=0).min()
    model = appended(sisokr(ds.SubSampling(30), ds.SubSampling(20)), X, Y, [90, 125])
    fresh = fresh_of(model, X, Y)
    np.testing.assert_allclose(model.intercept_, fresh.intercept_, rtol=1e-14)
    for lam in LAMS:
        model.set_lam(lam), fresh.set_lam(lam)
        assert rel(model.predict(X) - model.intercept_, fresh.predict(X) - fresh.intercept_) < tol
        assert rel(model.coef_, fresh.coef_) < tol


def test_recentring_equals_the_dense_formula():
    """``M = DᵀC`` and ``E = R K_Y Rᵀ`` of the outputs centred by the mean of all the rows,
    from the sums of outputs offset by another ``c``."""
    rng = np.random.default_rng(0)
    n, d, mx = 60, 3, 7
    C = rng.normal(size=(n, mx))
    Y = rng.normal(size=(n, d)) + 50.0
    R = ds.GaussianSketch(5).realize(40, seed=1).grown(n)  # drawn on the first 40 rows
    J = R.support
    c = Y[:40].mean(axis=0)
    sums = {"b": C.T @ (Y - c), "s": C.sum(axis=0), "y1": (Y - c).sum(axis=0),
            "M": np.zeros((5, mx)), "E": np.zeros((5, 5))}
    res = PassResult(n=n, x_sketch=None, x_landmarks=None, y_sketch=R, y_landmarks=None,
                     sums=sums, store=None)
    out, ybar = recentred(res, Centring(c, Y[J] - c))
    Yc = Y - Y.mean(axis=0)
    Rd = np.asarray(R.matrix().toarray() if hasattr(R.matrix(), "toarray") else R.matrix())
    D = Yc @ Yc.T @ Rd.T  # K_Y R_Yᵀ of the centred outputs (n × m_Y)
    np.testing.assert_allclose(ybar, Y.mean(axis=0), rtol=1e-14)
    assert rel(out.sums["M"], D.T @ C) < 1e-12
    assert rel(out.sums["E"], Rd @ D) < 1e-12
    assert rel(out.y_landmarks, Yc[J]) < 1e-12
    assert out.sums["b"] is sums["b"]  # the offset sums stay as they were


def test_what_still_refuses():
    X, Y = problem()
    pcg = sisokr(ds.SubSampling(30), ds.SubSampling(20), solver="pcg").fit(X[:100], Y[:100])
    assert not hasattr(pcg, "partial_fit")  # no store: as SketchedKRR(solver="pcg")
    with pytest.raises(AttributeError, match="solver='pcg'.*kept store.*store="):
        pcg.partial_fit(X[100:], Y[100:])
    assert not hasattr(sisokr(ds.SubSampling(30), None), "partial_fit")  # exact output side
    with pytest.raises(ValueError, match="Y: has 2 columns, but SISOKR was fitted with 4"):
        sisokr(ds.SubSampling(30), ds.SubSampling(20)).fit(X[:100], Y[:100]).partial_fit(
            X[100:], Y[100:, :2])


def test_a_kept_store_appends_as_in_memory(tmp_path):
    """The centring of every batch is that of the fit with a kept store too: the store's
    batches, the model saved there and loaded back, equal the appends without a store."""
    X, Y = problem()
    stored = appended(sisokr(ds.SubSampling(30), ds.GaussianSketch(6),
                             store=str(tmp_path / "s.zarr")), X, Y, [90, 120])
    memory = appended(sisokr(ds.SubSampling(30), ds.GaussianSketch(6)), X, Y, [90, 120])
    back = ds.load(str(tmp_path / "s.zarr"))
    for model in (stored, back):
        np.testing.assert_array_equal(model.intercept_, memory.intercept_)
        np.testing.assert_array_equal(model.predict(X), memory.predict(X))
    assert_same_model(back, fresh_of(memory, X, Y), X, Y, 1e-10)
