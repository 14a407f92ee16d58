"""Appended rows and forgotten batches of the cross-validation estimators with a grid of input
kernels (``gammas``, ``kernels``): every width's scores, the choice (which may move to another
width) and the refit equal a fresh fit on the same rows with the same realised sketches.

A fresh fit is given the fitted draw (``sketch=``): every width shares it, each pre-whitened
for its own kernel where the input side is (``EngineOptions.prewhiten``). The fitted model's
``sketch_`` is the chosen width's, so the draw is its inner sketch where it is whitened
(:func:`draw`); the fresh fit whitens it again for each width from the same landmarks, which
gives the same ``T`` bit for bit (one BLAS thread).
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
import scipy.sparse as sp

import distsketch as ds
from distsketch.engine import accumulate
from distsketch.engine.sums import fold_ids
from distsketch.kernels import Gaussian
from distsketch.model_selection import krr_cv as krr_cv_module
from distsketch.sketches.whitened import WhitenedSketch
from growinghelpers import appended, cv_problem, killed_then_resumed, nan_rel
from reference.closed_forms import dense

# the grids' choices on these small problems may sit on an edge: advice, not an error here
pytestmark = pytest.mark.filterwarnings(
    "ignore::distsketch.model_selection.grid.GridEdgeWarning")

F64 = ds.EngineOptions(block_dtype="float64", block_rows=37)
LAMS = [1e-4, 1e-2, 1.0]
GAMMAS = [0.1, 0.5, 3.0]
FOLDS = "3:0"


def draw(sketch):
    """The realised draw every width shares: a whitened sketch's inner one."""
    return sketch.inner if isinstance(sketch, WhitenedSketch) else sketch


def krr_cv(sketch, options=F64, **kw):
    kw = {"lams": LAMS, "gammas": GAMMAS, "cv": FOLDS, **kw}
    return ds.SketchedKRRCV(Gaussian(gamma=0.3), sketch=sketch, random_state=0,
                            options=options, **kw)


def sisokr_cv(input_sketch, output_sketch, options=F64, **kw):
    kw = {"lams": LAMS, "ranks": [1, 3, 100], "gammas": GAMMAS, "cv": FOLDS,
          "scoring": "surrogate", **kw}
    return ds.SISOKRCV(Gaussian(gamma=0.3), Gaussian(gamma=0.5), input_sketch=input_sketch,
                       output_sketch=output_sketch, random_state=0, options=options, **kw)


def scores(model):
    return np.stack([model.cv_results_[f"split{k}_test_score"] for k in range(model.n_splits_)])


def assert_same_selection(model, fresh, tol):
    """The same grid (every width × λ), per-fold scores to ``tol``, ranks and choice."""
    assert model.cv_results_["params"] == fresh.cv_results_["params"]
    np.testing.assert_array_equal(np.isnan(scores(model)), np.isnan(scores(fresh)))
    assert nan_rel(scores(model), scores(fresh)) < tol
    np.testing.assert_array_equal(model.cv_results_["rank_test_score"],
                                  fresh.cv_results_["rank_test_score"])
    assert model.best_index_ == fresh.best_index_ and model.best_params_ == fresh.best_params_


def assert_same_krr(model, fresh, X, tol):
    assert_same_selection(model, fresh, tol)
    assert model.kernel_.gamma == fresh.kernel_.gamma and model.lam_ == fresh.lam_
    for lam in LAMS:  # the refit's whole λ path at the chosen width
        assert nan_rel(model.set_lam(lam).predict(X), fresh.set_lam(lam).predict(X)) < PRED_TOL


# float64 blocks: the two differ by the order of the sums' additions (the batches' left fold
# against one pass's tree), ~1e-16 relative per sum, amplified by the per-fold solves: at most
# 8e-12 measured here (the dense sketch, not whitened, at γ = 0.1, λ = 1e-4), so 1e-10 leaves
# a margin of ~10. (Smaller γ and λ amplify more, with or without a grid: γ = 0.02, λ = 1e-6
# reach 3e-6 for a single kernel.) The predictions at the smallest λ amplify more where the
# chosen width's side is not pre-whitened: 3.4e-10 measured (sub-sampling, γ = 0.1,
# λ = 1e-4), as much as a fit with that kernel alone appends to; 1e-8 leaves a margin of ~30.
TOL = 1e-10
PRED_TOL = 1e-8


@pytest.mark.parametrize("name,sketch,prewhiten", [
    ("subsampling", lambda: ds.SubSampling(24), None),  # some widths whitened, some not
    ("subsampling-whitened", lambda: ds.SubSampling(24), True),  # each width its own T
    ("gaussian", lambda: ds.GaussianSketch(24), None),  # dense: one sketch for every width
    ("leverage", lambda: ds.LeverageScores(24, lam=1e-3), True),  # drawn from the rows
])
def test_krr_cv_grid_appends_as_a_fresh_fit_with_the_same_sketch(name, sketch, prewhiten):
    X, y, _ = cv_problem()
    options = ds.EngineOptions(block_dtype="float64", block_rows=37, prewhiten=prewhiten)
    model = krr_cv(sketch(), options=options).fit(X[:120], y[:120])
    fitted = dict(model.best_params_)
    model.partial_fit(X[120:160], y[120:160]).partial_fit(X[160:], y[160:])
    assert [b["rows"] for b in model.batches_] == [120, 40, 40]
    fresh = krr_cv(draw(model.sketch_), options=options).fit(X, y)
    assert_same_krr(model, fresh, X, TOL)
    if name == "subsampling":  # the appended rows move the choice to another width
        assert fitted["gamma"] != model.best_params_["gamma"]


def test_krr_cv_without_an_intercept_and_a_kernels_grid():
    X, y, _ = cv_problem()
    kw = {"fit_intercept": False, "kernels": ["gaussian", "laplacian"], "gammas": [0.1, 0.5]}
    model = appended(krr_cv(ds.SubSampling(24), **kw), X, y, [110])
    fresh = krr_cv(draw(model.sketch_), **kw).fit(X, y)
    assert_same_krr(model, fresh, X, TOL)
    assert model.kernels_ == fresh.kernels_ and len(model.cv_results_["params"]) == 4 * len(LAMS)


@pytest.mark.parametrize("grid", [{"gammas": GAMMAS[:3]},
                                  {"kernels": [{"name": "gaussian", "gamma": 0.1},
                                               {"name": "laplacian", "gamma": 0.3}],
                                   "gammas": None}])
@pytest.mark.parametrize("prewhiten", [None, True])
def test_sisokr_cv_grid_appends_as_a_fresh_fit_with_the_same_sketches(grid, prewhiten):
    X, _, Y = cv_problem()
    options = ds.EngineOptions(block_dtype="float64", block_rows=37, prewhiten=prewhiten)
    model = appended(sisokr_cv(ds.SubSampling(24), ds.SubSampling(16), options=options,
                               **grid), X, Y, [60, 130])
    fresh = sisokr_cv(draw(model.input_sketch_), model.output_sketch_, options=options,
                      **grid).fit(X, Y)
    assert_same_selection(model, fresh, TOL)
    assert (model.lam_, model.rank_) == (fresh.lam_, fresh.rank_)
    assert model.input_kernel_.get_params() == fresh.input_kernel_.get_params()
    np.testing.assert_array_equal(model.candidates_, fresh.candidates_)
    assert nan_rel(model.score_candidates(X[:20], Y[:30]), fresh.score_candidates(X[:20], Y[:30])) \
        < PRED_TOL


def test_forgetting_the_appended_batch_gives_back_the_fit():
    """Forgetting batch 1 re-adds batch 0's sums alone: the fit's every width, bitwise."""
    X, y, Y = cv_problem()
    model = krr_cv(ds.SubSampling(24)).fit(X[:120], y[:120])
    fit_scores, fit_pred = scores(model), model.predict(X)
    model.partial_fit(X[120:], y[120:]).forget(1)
    np.testing.assert_array_equal(scores(model), fit_scores)
    np.testing.assert_array_equal(model.predict(X), fit_pred)
    sis = sisokr_cv(ds.SubSampling(24), ds.SubSampling(16)).fit(X[:60], Y[:60])
    fit_scores, fit_pred = scores(sis), sis.score_candidates(X[:20], Y[:30])
    sis.partial_fit(X[60:], Y[60:]).forget(1)
    np.testing.assert_array_equal(scores(sis), fit_scores)
    np.testing.assert_array_equal(sis.score_candidates(X[:20], Y[:30]), fit_pred)


def test_forgetting_the_fits_batch_keeps_every_widths_dictionary():
    """Without the fit's batch, each width's fold scores are those of the Nyström models on
    the first batch's landmarks (its ``B~j`` kept), computed densely; one sketch for every
    width (``prewhiten=False``)."""
    X, y, _ = cv_problem()
    options = ds.EngineOptions(block_dtype="float64", block_rows=37, prewhiten=False)
    model = appended(krr_cv(ds.SubSampling(24), options=options), X, y, [100])
    model.forget(0)
    R = model.sketch_
    mix, L = dense(R.mixing), X[:100][R.support]
    Xr, yr = X[100:], y[100:]
    folds = fold_ids(100, 200, 200, FOLDS)
    want = np.empty((3, len(GAMMAS) * len(LAMS)))
    for w, g in enumerate(GAMMAS):
        k = Gaussian(gamma=g)
        C, B = k(Xr, L) @ mix.T, mix @ k(L, L) @ mix.T
        for f in range(3):
            tr, va = folds != f, folds == f
            ybar = yr[tr].mean()
            for i, lam in enumerate(LAMS):
                A = C[tr].T @ C[tr] + tr.sum() * lam * B
                beta = np.linalg.pinv(0.5 * (A + A.T), rtol=1e-12, hermitian=True) \
                    @ C[tr].T @ (yr[tr] - ybar)
                want[f, w * len(LAMS) + i] = -np.mean((yr[va] - C[va] @ beta - ybar) ** 2)
    assert nan_rel(scores(model), want) < 1e-8


def test_saved_grid_models_append_after_loading(tmp_path):
    """A loaded model appends at every width: its own side is the chosen width's, the
    batches keep every width's kernel and realised sketch."""
    X, y, Y = cv_problem()
    options = ds.EngineOptions(block_dtype="float64", block_rows=37, prewhiten=True)
    model = krr_cv(ds.SubSampling(24), options=options, gammas=GAMMAS[::-1]).fit(X[:120],
                                                                               y[:120])
    assert model.best_params_["gamma"] != GAMMAS[-1]  # sketch_ is not width 0's
    model.save(str(tmp_path / "m.zarr"))
    back = ds.load(str(tmp_path / "m.zarr"))
    for est in (model, back):
        est.partial_fit(X[120:], y[120:])
    np.testing.assert_array_equal(scores(back), scores(model))
    np.testing.assert_array_equal(back.predict(X), model.predict(X))
    assert back.best_params_ == model.best_params_ and back.kernels_ is None
    back.save(str(tmp_path / "again.zarr"))  # and saved again, forgets as the original
    again = ds.load(str(tmp_path / "again.zarr"))
    for est in (model, again):
        est.forget(0)
    np.testing.assert_array_equal(scores(again), scores(model))
    np.testing.assert_array_equal(again.predict(X), model.predict(X))
    grid = {"kernels": ["gaussian", "laplacian"], "gammas": [0.1, 0.5]}
    sis = sisokr_cv(ds.SubSampling(24), ds.SubSampling(16), options=options,
                    **grid).fit(X[:130], Y[:130])
    sis.save(str(tmp_path / "s.zarr"))
    back = ds.load(str(tmp_path / "s.zarr")).partial_fit(X[130:], Y[130:])
    sis.partial_fit(X[130:], Y[130:])
    np.testing.assert_array_equal(scores(back), scores(sis))
    np.testing.assert_array_equal(back.score_candidates(X[:20], Y[:30]),
                                  sis.score_candidates(X[:20], Y[:30]))
    assert back.best_params_ == sis.best_params_ and back.kernels_ == sis.kernels_


def test_a_kept_store_appends_as_in_memory_and_resumes_a_killed_append(tmp_path, monkeypatch):
    """With a kept store each batch's pass (every width's sums) is a group of the store; the
    model is that of the same appends in memory, and the model loaded from the store appends
    and forgets as it. An append killed in its re-solve leaves the fit's model; appending the
    rows again gives the uninterrupted append's model bitwise."""
    X, y, _ = cv_problem()
    path = tmp_path / "s.zarr"
    stored = appended(krr_cv(ds.SubSampling(20), store=str(path)), X, y, [120, 160])
    memory = appended(krr_cv(ds.SubSampling(20)), X, y, [120, 160])
    np.testing.assert_array_equal(scores(stored), scores(memory))
    np.testing.assert_array_equal(stored.predict(X), memory.predict(X))
    back = ds.load(str(path))
    assert [b["rows"] for b in back.batches_] == [120, 40, 40]
    for est in (back, memory):
        est.forget(1)
    np.testing.assert_array_equal(scores(back), scores(memory))
    np.testing.assert_array_equal(back.predict(X), memory.predict(X))
    killed = tmp_path / "k.zarr"
    fitted = krr_cv(ds.SubSampling(20), store=str(killed)).fit(X[:120], y[:120])
    again = killed_then_resumed(fitted, (X[120:], y[120:]), monkeypatch=monkeypatch,
                                module=krr_cv_module, name="set_best", path=killed)
    whole = krr_cv(ds.SubSampling(20)).fit(X[:120], y[:120]).partial_fit(X[120:], y[120:])
    np.testing.assert_array_equal(scores(again), scores(whole))
    np.testing.assert_array_equal(again.predict(X), whole.predict(X))


class Killed(Exception):
    """Stands for the SIGKILL of the appending process."""


def test_an_append_killed_in_its_pass_resumes_every_width_bitwise(tmp_path, monkeypatch):
    """Killed after the batch's first stored block: appending the rows again reads that block
    back (its further widths' blocks computed again from the rows) and computes the others;
    the model is the uninterrupted append's, bitwise."""
    X, y, _ = cv_problem()
    path = tmp_path / "s.zarr"
    krr_cv(ds.SubSampling(20), store=str(path)).fit(X[:120], y[:120])
    written, real, lock = [], accumulate._write_block, threading.Lock()

    def write(plan, i, *args):
        with lock:  # the pass's I/O threads write concurrently
            if len(written) >= limit[0]:
                raise Killed("killed after a block")
            written.append(i)
        return real(plan, i, *args)

    limit = [1]
    monkeypatch.setattr(accumulate, "_write_block", write)
    with pytest.raises(Killed):
        ds.load(str(path)).partial_fit(X[120:], y[120:])  # 80 rows: blocks of 37, 37, 6
    limit[0] = 10**9
    resumed = ds.load(str(path)).partial_fit(X[120:], y[120:])
    monkeypatch.undo()
    assert len(written) == 3  # one block stored by the killed append, two by the resumed one
    whole = krr_cv(ds.SubSampling(20)).fit(X[:120], y[:120]).partial_fit(X[120:], y[120:])
    np.testing.assert_array_equal(scores(resumed), scores(whole))
    np.testing.assert_array_equal(resumed.predict(X), whole.predict(X))


def test_sparse_and_dask_batches():
    da = pytest.importorskip("dask.array")
    X, y, Y = cv_problem()
    Xs = sp.csr_array(np.where(np.abs(X) > 0.5, X, 0.0))
    model = krr_cv(ds.SubSampling(24)).fit(Xs[:120], y[:120]).partial_fit(Xs[120:], y[120:])
    fresh = krr_cv(draw(model.sketch_)).fit(Xs, y)
    assert_same_krr(model, fresh, Xs, TOL)
    sis = sisokr_cv(ds.SubSampling(24), ds.SubSampling(16)).fit(X[:90], Y[:90])
    sis.partial_fit(da.from_array(X[90:], chunks=(13, 3)), da.from_array(Y[90:], chunks=(13, 6)))
    fresh = sisokr_cv(draw(sis.input_sketch_), sis.output_sketch_).fit(X, Y)
    assert_same_selection(sis, fresh, TOL)


def test_the_fitted_grid_is_scored():
    """A grid given after the fit (set_params) is not re-scored: the batches hold the fitted
    widths' sums, and the re-solve scores those, labelled as fitted."""
    X, y, _ = cv_problem()
    model = krr_cv(ds.SubSampling(24)).fit(X[:120], y[:120])
    model.set_params(gammas=[1.0, 2.0])
    model.partial_fit(X[120:], y[120:])
    assert model.gammas_ == GAMMAS
    assert [p["gamma"] for p in model.cv_results_["params"][::len(LAMS)]] == GAMMAS
