"""Appended rows (``partial_fit``) and forgotten batches (``forget``) against fresh fits on the
same rows with the fitted model's realised sketch (``sketch=model.sketch_``), and against the
dense closed form of a sketch padded with zero columns."""

from __future__ import annotations

import warnings

import dask
import dask.array as da
import numpy as np
import pytest
import scipy.sparse as sp

import distsketch as ds
from conftest import SKETCH_TYPES
from distsketch._hashing import rows_digest
from distsketch.kernels import Gaussian, Linear
from distsketch.sketches import Fixed, LeverageScores, sketch_from_config
from growinghelpers import appended, problem
from reference.closed_forms import sketched_krr_predict

F64 = ds.EngineOptions(block_dtype="float64", block_rows=37)
GAMMA = 0.3
LAMS = [1e-2, 1e-4]


def rel(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


SKETCHED = {name: make for name, make in SKETCH_TYPES.items() if name != "identity"}


def krr(sketch, options=F64, **kw):
    return ds.SketchedKRR(Gaussian(gamma=GAMMA), sketch=sketch, lam=LAMS, random_state=0,
                          options=options, **kw)


@pytest.mark.parametrize("name", sorted(SKETCHED))
@pytest.mark.parametrize("fit_intercept", [True, False])
def test_appended_rows_equal_a_fresh_fit_with_the_same_sketch(name, fit_intercept):
    X, y = problem()
    model = appended(krr(SKETCHED[name](24), fit_intercept=fit_intercept), X, y, [90, 120, 141])
    assert [b["rows"] for b in model.batches_] == [90, 30, 21, 9]
    assert model.sketch_.n == 150 and model.sketch_.rows_drawn == 90
    fresh = krr(model.sketch_, fit_intercept=fit_intercept).fit(X, y)
    for lam in LAMS:
        assert rel(model.set_lam(lam).predict(X), fresh.set_lam(lam).predict(X)) < 1e-10
    np.testing.assert_allclose(model.intercept_, fresh.intercept_, rtol=1e-12)


def test_appended_rows_equal_the_dense_closed_form_of_the_padded_sketch():
    """The model is the closed form ``β = (R K² Rᵀ + nλ R K Rᵀ)^† R K y`` with ``R = [R₀, 0]``:
    the sketch drawn on the first rows, zero columns for the appended ones."""
    X, y = problem(n=80)
    model = appended(krr(ds.GaussianSketch(12), fit_intercept=False), X, y, [50, 65])
    R = model.sketch_.matrix()
    assert R.shape == (12, 80) and not np.any(R[:, 50:])
    for lam in LAMS:
        want = sketched_krr_predict(Gaussian(gamma=GAMMA), R, X, y, X, lam)
        assert rel(model.set_lam(lam).predict(X), np.ravel(want)) < 1e-8


def test_float32_blocks_agree_to_float32_rounding():
    X, y = problem()
    model = appended(krr(ds.SubSampling(24), options=ds.EngineOptions(block_rows=37)), X, y,
                     [100])
    fresh = krr(model.sketch_, options=ds.EngineOptions(block_rows=37)).fit(X, y)
    assert rel(model.predict(X), fresh.predict(X)) < 1e-4


def test_leverage_scores_keep_their_landmarks():
    X, y = problem()
    model = appended(krr(LeverageScores(20, lam=1e-3)), X, y, [100])
    first = krr(LeverageScores(20, lam=1e-3)).fit(X[:100], y[:100])
    np.testing.assert_array_equal(model.landmarks_, first.landmarks_)
    fresh = krr(model.sketch_).fit(X, y)
    assert rel(model.predict(X), fresh.predict(X)) < 1e-10


@pytest.mark.parametrize("kind", ["sparse", "dask", "zarr", "1 row"])
def test_batches_of_every_input_kind(kind, tmp_path):
    X, y = problem()
    cut = 149 if kind == "1 row" else 110
    model = krr(ds.SubSampling(20)).fit(X[:cut], y[:cut])
    new = X[cut:]
    if kind == "sparse":
        new = sp.csr_array(new)
    elif kind == "dask":
        new = da.from_array(new, chunks=(13, 4))
    elif kind == "zarr":
        import zarr

        z = zarr.create_array(str(tmp_path / "x.zarr"), shape=new.shape, chunks=(11, 4),
                              dtype="f8")
        z[:] = new
        new = z
    model.partial_fit(new, y[cut:])
    fresh = krr(model.sketch_).fit(X, y)
    assert rel(model.predict(X), fresh.predict(X)) < 1e-10


def test_the_same_on_a_local_cluster():
    distributed = pytest.importorskip("distributed")
    X, y = problem()
    with dask.config.set(scheduler="threads"):
        want = appended(krr(ds.SubSampling(20)), X, y, [100]).predict(X)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster):
        got = appended(krr(ds.SubSampling(20)), X, y, [100]).predict(X)
    np.testing.assert_array_equal(got, want)


def test_forget_equals_a_fresh_fit_without_the_batch():
    X, y = problem()
    model = appended(krr(ds.SubSampling(24)), X, y, [80, 110, 130])
    model.forget(2)  # rows 110–129
    assert [b["batch"] for b in model.batches_] == [0, 1, 3]
    keep = np.r_[0:110, 130:150]
    assert model.sketch_.n == 130
    fresh = krr(model.sketch_).fit(X[keep], y[keep])
    assert rel(model.predict(X), fresh.predict(X)) < 1e-10
    model.forget(1)
    model.forget(3)
    first = krr(ds.SubSampling(24)).fit(X[:80], y[:80])
    assert rel(model.predict(X), first.predict(X)) < 1e-10
    assert [b["batch"] for b in model.batches_] == [0]
    model.partial_fit(X[80:90], y[80:90])
    assert [b["batch"] for b in model.batches_] == [0, 4]  # numbers are never reused


def test_forget_refuses_unknown_batches_and_the_last_one():
    X, y = problem()
    model = appended(krr(ds.SubSampling(24)), X, y, [100])
    with pytest.raises(ValueError, match=r"batch: expected one of the batches held \[0, 1\]"):
        model.forget(5)
    with pytest.raises(ValueError, match="batch: expected one of"):
        model.forget(True)
    model.forget(0)
    with pytest.raises(ValueError, match="batch: batch 1 is the only one held"):
        model.forget(1)


@pytest.mark.parametrize("name", ["subsampling", "gaussian", "accumulation"])
def test_forgetting_the_fits_batch_keeps_its_landmarks_as_the_dictionary(name):
    """``β = (CᵀC + nλB)^† Cᵀy`` over the remaining rows, ``C = k(X_rest, X_J) R_mixᵀ``,
    ``B = R_mix K_JJ R_mixᵀ`` (the landmarks outside the training rows), dense."""
    X, y = problem()
    model = appended(krr(SKETCHED[name](20), fit_intercept=False), X, y, [60, 100])
    model.forget(0)
    assert [b["batch"] for b in model.batches_] == [1, 2] and model.sketch_.rows_drawn == 60
    R = model.sketch_
    mix = R.mixing.toarray() if hasattr(R.mixing, "toarray") else np.asarray(R.mixing)
    L = X[R.support]
    k = Gaussian(gamma=GAMMA)
    C = k(X[60:], L) @ mix.T
    B = mix @ k(L, L) @ mix.T
    for lam in LAMS:
        beta = np.linalg.pinv(C.T @ C + 90 * lam * B, rcond=1e-12) @ C.T @ y[60:]
        want = k(X, L) @ mix.T @ beta
        assert rel(model.set_lam(lam).predict(X), want) < 1e-7
    # a sliding window: a new batch goes after the sketch's rows, with zero columns of R
    model.partial_fit(X[:30] + 0.01, y[:30])
    C2 = np.vstack([C, k(X[:30] + 0.01, L) @ mix.T])
    y2 = np.r_[y[60:], y[:30]]
    beta = np.linalg.pinv(C2.T @ C2 + 120 * LAMS[-1] * B, rcond=1e-12) @ C2.T @ y2
    assert rel(model.set_lam(LAMS[-1]).predict(X), k(X, L) @ mix.T @ beta) < 1e-7


def test_the_same_rows_twice_are_refused_unless_asked_for():
    X, y = problem()
    model = krr(ds.SubSampling(20)).fit(X[:100], y[:100])
    model.partial_fit(X[100:], y[100:])
    before = model.predict(X)
    with pytest.raises(ValueError, match="X: these rows are those of batch 1 already"):
        model.partial_fit(X[100:], y[100:])
    with pytest.raises(ValueError, match="batch 0 already"):  # the same rows, chunked lazily
        model.partial_fit(da.from_array(X[:100], chunks=(30, 4)), y[:100])
    np.testing.assert_array_equal(model.predict(X), before)  # refused: nothing changed
    assert len(model.batches_) == 2
    model.partial_fit(X[100:], y[100:], repeat=True)
    twice = np.r_[0:150, 100:150]
    fresh = krr(model.sketch_.grown(200)).fit(X[twice], y[twice])
    assert rel(model.predict(X), fresh.predict(X)) < 1e-10


def test_refusals_name_the_argument():
    X, y = problem()
    assert not hasattr(krr(None), "partial_fit")  # the exact model: its n × n system grows
    # contiguous folds (the default cv=5) move with n: tests/test_growing_cv.py has the rest
    assert not hasattr(ds.SketchedKRRCV(sketch=ds.SubSampling(5)), "partial_fit")
    assert hasattr(ds.SketchedKRRCV(sketch=ds.SubSampling(5), cv="5:0"), "partial_fit")
    model = krr(ds.SubSampling(20)).fit(X[:100], y[:100])
    with pytest.raises(ValueError, match="X has 3 features, but SketchedKRR is expecting 4"):
        model.partial_fit(X[100:, :3], y[100:])
    with pytest.raises(ValueError, match="y: has 2 columns, but SketchedKRR was fitted with 1"):
        model.partial_fit(X[100:], np.c_[y[100:], y[100:]])
    with pytest.raises(ValueError, match="y: has 50 rows but X has 49"):
        model.partial_fit(X[101:], y[100:])
    with pytest.raises(ValueError, match="X: contains NaN"):
        model.partial_fit(np.where(X[100:] > 2, np.nan, X[100:]), y[100:])
    pcg = krr(ds.SubSampling(20), solver="pcg").fit(X[:100], y[:100])
    with pytest.raises(AttributeError, match="SketchedKRR has no partial_fit: solver='pcg' "
                                             "re-solves over every row's inputs.*store="):
        pcg.partial_fit(X[100:], y[100:])  # without a store: tests/test_growing_pcg.py


def test_a_kept_store_takes_appended_rows(tmp_path):
    """More in tests/test_growing_store.py: the batch is a pass of its own in the store."""
    X, y = problem()
    model = krr(ds.SubSampling(20), store=str(tmp_path / "s.zarr")).fit(X[:100], y[:100])
    model.partial_fit(X[100:], y[100:])
    free = krr(ds.SubSampling(20)).fit(X[:100], y[:100]).partial_fit(X[100:], y[100:])
    np.testing.assert_array_equal(model.predict(X), free.predict(X))
    assert [b["batch"] for b in ds.load(tmp_path / "s.zarr").batches_] == [0, 1]


def test_sisokr_appends_rows():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(120, 5))
    Y = (X[:, :4] + 0.3 * rng.normal(size=(120, 4)) > 0).astype(float)

    def make(sx, sy):
        return ds.SISOKR(Gaussian(gamma=0.2), Gaussian(gamma=0.5), input_sketch=sx,
                         output_sketch=sy, lam=LAMS, random_state=0, options=F64)

    model = make(ds.SubSampling(30), ds.GaussianSketch(6)).fit(X[:80], Y[:80])
    model.partial_fit(X[80:], Y[80:])
    fresh = make(model.input_sketch_, model.output_sketch_).fit(X, Y)
    np.testing.assert_array_equal(model.candidates_, fresh.candidates_)  # the new rows' outputs
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for lam in LAMS:
            got = model.set_lam(lam).predict(X)
            want = fresh.set_lam(lam).predict(X)
            np.testing.assert_array_equal(got, want)
    lin = ds.SISOKR(Gaussian(gamma=0.2), Linear(), input_sketch=ds.SubSampling(30),
                    output_sketch=ds.SubSampling(20), fit_intercept=True, random_state=0)
    lin.fit(X[:80], Y[:80])
    lin.partial_fit(X[80:], Y[80:])  # re-centred by the mean of all rows: test_growing_intercept
    np.testing.assert_allclose(lin.intercept_, Y.mean(axis=0), rtol=1e-13)
    with pytest.raises(AttributeError, match="SISOKR has no partial_fit: solver='pcg'.*"
                                             "store="):  # PCG re-reads every row: a kept store
        lin.set_params(solver="pcg").fit(X[:80], Y[:80]).partial_fit(X[80:], Y[80:])


def test_features_do_not_change_with_appended_rows():
    """``B = R K Rᵀ`` involves the landmarks only, so the features of a landmark sketch stay
    those of the fit, as a fresh fit with the same sketch gives them."""
    X, _ = problem()
    tr = ds.SketchedFeatures(Gaussian(gamma=GAMMA), sketch=ds.SubSampling(20), random_state=0,
                             options=F64).fit(X[:100])
    before = tr.transform(X)
    tr.partial_fit(X[100:])
    fresh = ds.SketchedFeatures(Gaussian(gamma=GAMMA), sketch=tr.sketch_, options=F64).fit(X)
    np.testing.assert_array_equal(tr.transform(X), before)
    assert rel(tr.transform(X), fresh.transform(X)) < 1e-12


def test_an_unfitted_model_fits():
    X, y = problem()
    a = krr(ds.SubSampling(20)).partial_fit(X, y)
    b = krr(ds.SubSampling(20)).fit(X, y)
    np.testing.assert_array_equal(a.predict(X), b.predict(X))
    assert [r["batch"] for r in a.batches_] == [0]


def test_the_current_lam_path_is_solved():
    X, y = problem()
    model = krr(ds.SubSampling(20)).fit(X[:100], y[:100])
    model.lam = [1e-3]
    model.partial_fit(X[100:], y[100:])
    assert model.lams_ == (1e-3,)
    fresh = ds.SketchedKRR(Gaussian(gamma=GAMMA), sketch=model.sketch_, lam=1e-3,
                           options=F64).fit(X, y)
    assert rel(model.predict(X), fresh.predict(X)) < 1e-10


# --------------------------------------------------------------------------- the parts


@pytest.mark.parametrize("name", sorted(SKETCHED))
def test_a_grown_sketch_is_the_sketch_with_zero_columns(name):
    R = SKETCHED[name](5).realize(30, seed=4)
    G = R.grown(45)
    dense = lambda A: A.toarray() if hasattr(A, "toarray") else np.asarray(A)  # noqa: E731
    np.testing.assert_array_equal(dense(G.matrix())[:, :30], dense(R.matrix()))
    assert not np.any(dense(G.matrix())[:, 30:])
    assert G.to_config()["drawn"] == 30 and "drawn" not in R.to_config()
    back = type(G).from_state(*G.get_state())
    np.testing.assert_array_equal(dense(back.matrix()), dense(G.matrix()))
    assert R.grown(30) is R
    with pytest.raises(ValueError, match="drawn for 30 rows replays over at least as many"):
        G.grown(29)
    np.testing.assert_array_equal(dense(G.grown(33).matrix()), dense(G.matrix())[:, :33])
    assert G.grown(30).to_config() == R.to_config()
    with pytest.raises(ValueError, match="exact side"):
        ds.Identity().realize(10, seed=0).grown(12)


def test_a_model_fitted_with_a_fixed_sketch_saves_and_loads(tmp_path):
    X, y = problem()
    base = krr(ds.GaussianSketch(10)).fit(X[:100], y[:100])
    spec = sketch_from_config(Fixed(base.sketch_).to_config())
    np.testing.assert_array_equal(spec.realize(150, seed=1).matrix(),
                                  base.sketch_.grown(150).matrix())
    model = krr(base.sketch_).fit(X, y)
    model.save(str(tmp_path / "m.zarr"))
    back = ds.load(str(tmp_path / "m.zarr"))
    np.testing.assert_array_equal(back.predict(X), model.predict(X))
    with pytest.raises(ValueError, match="sketch: the realised sketch was drawn for 100 rows"):
        krr(base.sketch_).fit(X[:60], y[:60])
    with pytest.raises(ValueError, match="exact side"):
        krr(ds.Identity().realize(10, seed=0)).fit(X[:10], y[:10])


def test_the_rows_digest_is_a_sum_over_rows():
    rng = np.random.default_rng(0)
    X, Y = rng.normal(size=(50, 3)), rng.integers(0, 2, size=(50, 2))
    whole = rows_digest(X, Y)
    with np.errstate(over="ignore"):
        parts = sum((rows_digest(X[a:a + 7], Y[a:a + 7]) for a in range(0, 50, 7)), np.uint64(0))
    assert parts == whole
    perm = rng.permutation(50)
    assert rows_digest(X[perm], Y[perm]) == whole  # a set of rows: order-free
    assert rows_digest(sp.csr_array(X), Y) == whole
    assert rows_digest(X, Y.astype(float)) == whole
    X2 = X.copy()
    X2[3, 1] = np.nextafter(X2[3, 1], 1)
    assert rows_digest(X2, Y) != whole
    Y2 = Y.copy()
    Y2[[0, 1]] = Y2[[1, 0]]  # the same x and y values, paired differently
    assert (Y2 != Y).any() and rows_digest(X, Y2) != whole


def test_a_saved_model_takes_rows_after_loading(tmp_path):
    X, y = problem()
    model = appended(krr(ds.SubSampling(20)), X, y, [80, 110])
    model.save(str(tmp_path / "m.zarr"))
    back = ds.load(str(tmp_path / "m.zarr"))
    assert back.batches_ == model.batches_
    for est in (model, back):
        est.forget(0)
        est.partial_fit(X[:30] + 0.01, y[:30])
    np.testing.assert_array_equal(back.predict(X), model.predict(X))
    with pytest.raises(ValueError, match="batch 1 already"):
        back.partial_fit(X[80:110], y[80:110])
    rng = np.random.default_rng(7)
    Y = (rng.normal(size=(150, 3)) > 0).astype(float)
    sis = ds.SISOKR(Gaussian(gamma=0.2), Gaussian(gamma=0.5), input_sketch=ds.SubSampling(20),
                    output_sketch=ds.SubSampling(10), lam=LAMS, random_state=0, options=F64)
    sis.fit(X[:100], Y[:100]).save(str(tmp_path / "s.zarr"))
    back = ds.load(str(tmp_path / "s.zarr")).partial_fit(X[100:], Y[100:])
    sis.partial_fit(X[100:], Y[100:])
    np.testing.assert_array_equal(back.candidates_, sis.candidates_)
    np.testing.assert_array_equal(back.predict(X), sis.predict(X))


def test_info_lists_the_batches(tmp_path, capsys):
    from distsketch.cli.commands import main

    X, y = problem()
    model = appended(krr(ds.SubSampling(20)), X, y, [80, 110])
    model.save(str(tmp_path / "m.zarr"))
    capsys.readouterr()
    assert main(["info", str(tmp_path / "m.zarr")]) == 0
    out = capsys.readouterr().out
    for b in model.batches_:
        assert f"batch {b['batch']:<8} {b['rows']:,} rows, added {b['added']}, digest " \
               f"{b['digest']}" in out
