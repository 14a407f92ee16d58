"""Cross-validation from one pass: SketchedKRRCV against brute force."""

import dataclasses

import numpy as np
import pytest

import distsketch as ds
from distsketch.engine.sums import fold_ids
from reference.errors import norm_rel_err
from reference.folds import sisokr_brute_force, whitened_features
from reference.kernels import gaussian_gram

GAMMA = 0.5
F64 = ds.EngineOptions(block_dtype="float64", block_rows=64)
LAMS = [1e-6, 1e-4, 1e-2, 1.0]


def _data(n=300, t=1, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    Y = np.sin(X[:, :1]) + 0.3 * np.arange(t)[None, :] * X[:, 1:2] + 0.1 * rng.normal(size=(n, t))
    return X, (Y[:, 0] if t == 1 else Y)


def _brute_force(model, X, y, lams, folds, scoring="neg_mean_squared_error", intercept=False,
                 gamma=GAMMA):
    """Fit on each fold's training rows with the realised sketch, score its validation rows:
    β = (C_trᵀ C_tr + n_tr λ B)^† C_trᵀ y_tr (Chen & Yang eq. 3 on the training rows); with an
    intercept, of the targets centred by their training mean, which is added back."""
    n = len(X)
    K = gaussian_gram(X, gamma=gamma)
    R = model.sketch_.matrix()
    R = R.toarray() if hasattr(R, "toarray") else np.asarray(R)
    C = K @ R.T
    B = R @ C
    Y = y.reshape(n, -1)
    f = fold_ids(0, n, n, folds)
    out = np.empty((f.max() + 1, len(lams)))
    for k in range(f.max() + 1):
        tr, va = f != k, f == k
        ybar = Y[tr].mean(axis=0) if intercept else np.zeros(Y.shape[1])
        for j, lam in enumerate(lams):
            A = C[tr].T @ C[tr] + tr.sum() * lam * B
            beta = np.linalg.pinv(0.5 * (A + A.T), rtol=1e-12, hermitian=True) @ C[tr].T @ (
                Y[tr] - ybar)
            res = Y[va] - C[va] @ beta - ybar
            if scoring == "r2":
                sst = ((Y[va] - Y[va].mean(axis=0)) ** 2).sum(axis=0)
                out[k, j] = np.mean(1 - (res ** 2).sum(axis=0) / sst)
            else:
                out[k, j] = -np.mean(res ** 2)
    return out


@pytest.mark.parametrize("cv, folds", [(5, "5"), ("kfold", "4:7")])
@pytest.mark.parametrize("t", [1, 3])
@pytest.mark.parametrize("intercept", [True, False])
def test_cv_results_equal_brute_force(cv, folds, t, intercept):
    X, y = _data(t=t)
    y = y + 5.0  # an offset the intercept must absorb
    if cv == "kfold":
        sklearn = pytest.importorskip("sklearn.model_selection")
        cv = sklearn.KFold(n_splits=4, shuffle=True, random_state=7)
    model = ds.SketchedKRRCV(ds.Gaussian(gamma=GAMMA), sketch=ds.SubSampling(40), lams=LAMS,
                             cv=cv, fit_intercept=intercept, random_state=0,
                             options=F64).fit(X, y)
    want = _brute_force(model, X, y, LAMS, folds, intercept=intercept)
    got = np.stack([model.cv_results_[f"split{k}_test_score"] for k in range(len(want))])
    assert norm_rel_err(got, want) <= 1e-8
    assert model.best_params_ == {"lam": LAMS[int(np.argmax(want.mean(axis=0)))]}
    assert model.cv_results_["rank_test_score"][model.best_index_] == 1


def test_r2_scoring_equals_brute_force():
    X, y = _data(t=2, seed=1)
    model = ds.SketchedKRRCV(ds.Gaussian(gamma=GAMMA), sketch=ds.PSparsified(40, p=0.1),
                             lams=LAMS, cv=3, scoring="r2", random_state=1, options=F64).fit(X, y)
    want = _brute_force(model, X, y, LAMS, "3", scoring="r2", intercept=True)
    got = np.stack([model.cv_results_[f"split{k}_test_score"] for k in range(3)])
    assert norm_rel_err(got, want) <= 1e-8


def test_refit_is_sketched_krr_at_the_best_lambda():
    X, y = _data(seed=2)
    cv = ds.SketchedKRRCV(ds.Gaussian(gamma=GAMMA), sketch=ds.SubSampling(40), lams=LAMS,
                          cv=5, random_state=3, options=F64).fit(X, y)
    krr = ds.SketchedKRR(ds.Gaussian(gamma=GAMMA), sketch=ds.SubSampling(40),
                         lam=cv.best_params_["lam"], random_state=3, options=F64).fit(X, y)
    assert norm_rel_err(cv.predict(X), krr.predict(X)) <= 1e-10
    cv.set_lam(1.0)
    assert norm_rel_err(cv.predict(X), krr.set_lam(1.0).predict(X)) <= 1e-10


def test_one_pass_and_independent_of_the_blocks(monkeypatch):
    """Every fold and λ from one pass: the kernel is evaluated once per row block (and never
    again for the refit); the scores do not depend on the block size."""
    from distsketch.engine.features import FeatureMap

    calls = []
    original = FeatureMap.block

    def counting(self, A, **kw):
        calls.append(len(A))
        return original(self, A, **kw)

    monkeypatch.setattr(FeatureMap, "block", counting)
    X, y = _data(seed=3)
    results = []
    for rows in (64, 37):
        calls.clear()
        model = ds.SketchedKRRCV(ds.Gaussian(gamma=GAMMA), sketch=ds.SubSampling(40), lams=LAMS,
                                 cv=4, random_state=0, options=ds.EngineOptions(
                                     block_dtype="float64", block_rows=rows)).fit(X, y)
        assert sum(calls) == len(X) and len(calls) == -(-len(X) // rows)
        results.append(model.cv_results_["mean_test_score"])
    # the block size changes only the rounding of the sums; a score amplifies it by the
    # conditioning of H + nλI (about 1e3 at λ = 1e-6 here) times the cancellation in
    # yy − 2⟨β, b⟩ + ⟨β, Gβ⟩ (Σy² against the squared error: about 10): 1e-9 relative
    assert np.allclose(results[0], results[1], rtol=1e-9, atol=0)


def test_saved_and_loaded(tmp_path):
    X, y = _data(seed=4)
    model = ds.SketchedKRRCV(ds.Gaussian(gamma=GAMMA), sketch=ds.SubSampling(30), lams=LAMS,
                             cv=3, random_state=0, store=tmp_path / "cv.zarr").fit(X, y)
    loaded = ds.load(tmp_path / "cv.zarr")
    assert loaded.best_params_ == model.best_params_ and loaded.lam_ == model.lam_
    assert np.array_equal(loaded.cv_results_["mean_test_score"],
                          model.cv_results_["mean_test_score"])
    assert np.array_equal(loaded.predict(X), model.predict(X))
    # the store's per-fold sums serve a plain SketchedKRR on the same pass
    krr = ds.SketchedKRR(ds.Gaussian(gamma=GAMMA), sketch=ds.SubSampling(30), lam=1e-4,
                         random_state=0).fit(X, y)
    assert krr.predict(X).shape == (len(X),)


@pytest.mark.filterwarnings("ignore::distsketch.model_selection.grid.GridEdgeWarning")  # not about the choice
@pytest.mark.parametrize("intercept", [True, False])
def test_exact_krr_cv_equals_exact_per_fold_krr(intercept):
    """SketchedKRRCV(sketch=None) cross-validates as SubSampling(n): its scores are exact KRR's
    fitted on each fold's rows alone, ``α = (K_tr + n_tr λ I)^{-1} (y_tr − ȳ_tr)``."""
    X, y = _data(n=60, t=2)
    lams = [1e-3, 1e-2, 1e-1]
    model = ds.SketchedKRRCV(ds.Gaussian(gamma=1.0), sketch=None, lams=lams, cv=4,
                             fit_intercept=intercept, random_state=0, options=F64).fit(X, y)
    K = gaussian_gram(X, gamma=1.0)
    f = fold_ids(0, 60, 60, "4")
    want = np.empty((4, len(lams)))
    for k in range(4):
        tr, va = f != k, f == k
        ybar = y[tr].mean(axis=0) if intercept else 0.0
        for j, lam in enumerate(lams):
            alpha = np.linalg.solve(K[np.ix_(tr, tr)] + tr.sum() * lam * np.eye(tr.sum()),
                                    y[tr] - ybar)
            want[k, j] = -np.mean((K[np.ix_(va, tr)] @ alpha + ybar - y[va]) ** 2)
    got = np.stack([model.cv_results_[f"split{k}_test_score"] for k in range(4)])
    assert norm_rel_err(got, want) <= 1e-8
    assert model.sketch is None and model.sketch_.m == 60
    ref = ds.SketchedKRR(ds.Gaussian(gamma=1.0), lam=model.best_params_["lam"],
                         fit_intercept=intercept, options=F64).fit(X, y)
    assert norm_rel_err(model.predict(X[:7]), ref.predict(X[:7])) <= 1e-8


@pytest.mark.parametrize("kw, match", [
    (dict(cv=1), r"^cv: the number of folds must be at least 2"),
    (dict(cv="five"), r"^cv: expected a number of folds"),
    (dict(lams=[]), r"^lams: empty sequence"),
    (dict(lams=[1e-3, -1.0]), r"^lams: the ridge parameter"),
    (dict(scoring="accuracy"), r"^scoring: expected one of"),
    (dict(cv=200), r"^cv: 200 folds need at least 400 rows"),
])
def test_bad_input_before_anything_is_written(tmp_path, kw, match):
    X, y = _data()
    store = tmp_path / "s.zarr"
    kw = {"sketch": ds.SubSampling(20), **kw}
    with pytest.raises(ValueError, match=match):
        ds.SketchedKRRCV(ds.Gaussian(gamma=GAMMA), store=store, **kw).fit(X, y)
    assert not store.exists()


GAMMAS = [0.3, 0.5, 1.5]


@pytest.mark.filterwarnings("ignore::distsketch.model_selection.grid.GridEdgeWarning")  # not about the choice
@pytest.mark.parametrize("intercept", [True, False])
def test_width_grid_in_one_pass_equals_brute_force(intercept):
    """A γ grid: every (γ, λ) scored from one pass equals the per-fold dense refits at that γ
    (same realised sketch), the best (γ, λ) is refitted, and it predicts as a plain
    SketchedKRR with that kernel and λ."""
    X, y = _data(t=2, seed=5)
    model = ds.SketchedKRRCV(ds.Gaussian(gamma=1.0), sketch=ds.SubSampling(40), lams=LAMS,
                             gammas=GAMMAS, cv=4, fit_intercept=intercept, random_state=0,
                             options=F64).fit(X, y + 3.0)
    want = np.concatenate([_brute_force(model, X, y + 3.0, LAMS, "4", intercept=intercept,
                                        gamma=g) for g in GAMMAS], axis=1)
    got = np.stack([model.cv_results_[f"split{k}_test_score"] for k in range(4)])
    assert norm_rel_err(got, want) <= 1e-8
    best = int(np.argmax(want.mean(axis=0)))
    g, lam = GAMMAS[best // len(LAMS)], LAMS[best % len(LAMS)]
    assert model.best_params_ == {"gamma": g, "lam": lam}
    assert list(model.cv_results_["param_gamma"]) == [v for v in GAMMAS for _ in LAMS]
    assert model.kernel_.gamma == g and model.lam_ == lam
    krr = ds.SketchedKRR(ds.Gaussian(gamma=g), sketch=ds.SubSampling(40), lam=lam,
                         fit_intercept=intercept, random_state=0, options=F64).fit(X, y + 3.0)
    # the refit's G is the folds' sums added, the plain fit's the blocks': the same sum in
    # another order (relative 1e-16 per entry), amplified by cond(H + nλI) ≈ 1e6 at γ = 0.3
    assert norm_rel_err(model.predict(X), krr.predict(X)) <= 1e-8


@pytest.mark.filterwarnings("ignore::distsketch.model_selection.grid.GridEdgeWarning")  # not about the choice
def test_width_grid_reads_each_block_once(monkeypatch):
    """Every width's block comes from the same rows read once per block: one FeatureMap.block
    call per (block, width), each block's widths on the same array."""
    from distsketch.engine.features import FeatureMap

    seen = []
    original = FeatureMap.block

    def counting(self, A, **kw):
        seen.append((A, self.kernel.gamma))
        return original(self, A, **kw)

    monkeypatch.setattr(FeatureMap, "block", counting)
    X, y = _data(seed=6)
    ds.SketchedKRRCV(ds.Gaussian(gamma=1.0), sketch=ds.SubSampling(30), lams=LAMS,
                     gammas=GAMMAS, cv=3, random_state=0, options=F64).fit(X, y)
    blocks = -(-len(X) // 64)
    assert len(seen) == blocks * len(GAMMAS)
    assert len({id(A) for A, _ in seen}) == blocks  # the arrays are alive: distinct ids
    assert sum(len(A) for A, g in seen if g == GAMMAS[1]) == len(X)


@pytest.mark.filterwarnings("ignore::distsketch.model_selection.grid.GridEdgeWarning")  # not about the choice
def test_width_grid_saved_resumed_and_refused(tmp_path):
    X, y = _data(seed=7)
    store = tmp_path / "w.zarr"
    kw = dict(sketch=ds.SubSampling(30), lams=LAMS, gammas=GAMMAS, cv=3, random_state=0)
    model = ds.SketchedKRRCV(ds.Gaussian(gamma=1.0), store=store, **kw).fit(X, y)
    loaded = ds.load(store)
    assert loaded.best_params_ == model.best_params_ and loaded.gammas_ == GAMMAS
    assert list(loaded.cv_results_["param_gamma"]) == list(model.cv_results_["param_gamma"])
    assert np.array_equal(loaded.predict(X), model.predict(X))
    again = ds.SketchedKRRCV(ds.Gaussian(gamma=1.0), store=store, **kw).fit(X, y)
    assert np.array_equal(again.cv_results_["mean_test_score"],
                          model.cv_results_["mean_test_score"])
    # another grid is another fit: the store refuses it rather than mixing the two
    with pytest.raises(Exception, match="overwrite"):
        ds.SketchedKRRCV(ds.Gaussian(gamma=1.0), store=store,
                         **{**kw, "gammas": [0.2, 0.4]}).fit(X, y)


@pytest.mark.parametrize("kernel, gammas, match", [
    (ds.Gaussian(gamma=1.0), [], r"^gammas: expected a non-empty list"),
    (ds.Gaussian(gamma=1.0), [0.5, -1.0], r"^gammas: expected a non-empty list"),
    (ds.Gaussian(gamma=1.0), [0.5, 0.5], r"^gammas: the widths must be distinct"),
    (ds.Gaussian(gamma=1.0), "0.5", r"^gammas: expected a non-empty list"),
    (ds.Linear(), [0.5, 1.0], r"^gammas: the kernel Linear\(\) has no width gamma"),
])
def test_width_grid_bad_input_before_anything_is_written(tmp_path, kernel, gammas, match):
    X, y = _data()
    store = tmp_path / "s.zarr"
    with pytest.raises(ValueError, match=match):
        ds.SketchedKRRCV(kernel, sketch=ds.SubSampling(20), gammas=gammas, store=store,
                         lams=LAMS).fit(X, y)
    assert not store.exists()


@pytest.mark.parametrize("route", ["default", "band 3", "eigen", "woodbury"])
@pytest.mark.parametrize("ranks", [None, [1, 3, 8, 100]])
def test_sisokr_cv_results_equal_brute_force(ranks, route, monkeypatch):
    """Every fold's factor route: the default (the band route at these sizes, bandwidth 96 >
    r_X: the fold matrix is its own band), a band reduction of bandwidth 3 (12 panels at
    r_X = 40), the eigendecomposition fallback (as if every banded factor were indefinite)
    and the Woodbury route (n_k = 40 = r_X)."""
    from distsketch.linalg.shifted import BandReduction

    tuning = {"default": ds.Tuning(), "band 3": ds.Tuning(fold_route="band", fold_band=3),
              "eigen": ds.Tuning(fold_route="band"),
              "woodbury": ds.Tuning(fold_route="woodbury")}[route]
    if route == "eigen":
        monkeypatch.setattr(BandReduction, "solve", lambda self, X, shift: None)
    rng = np.random.default_rng(5)
    X = rng.normal(size=(160, 4))
    Y = (X[:, :3] @ rng.normal(size=(3, 6)) + 0.3 * rng.normal(size=(160, 6)) > 0.5)
    Y = Y.astype(np.float64)
    lams = [1e-4, 1e-2, 1.0]
    model = ds.SISOKRCV(ds.Gaussian(gamma=0.3), ds.Gaussian(gamma=0.5),
                        input_sketch=ds.SubSampling(40), output_sketch=ds.SubSampling(30),
                        lams=lams, ranks=ranks, cv=4, random_state=0,
                        options=dataclasses.replace(F64, tuning=tuning),
                        scoring="surrogate").fit(X, Y)
    want = sisokr_brute_force(model, X, Y, lams, ranks, "4", 0.3, 0.5)
    got = np.stack([model.cv_results_[f"split{k}_test_score"] for k in range(4)])
    assert norm_rel_err(got, want) <= 1e-8
    best = model.cv_results_["params"][int(np.argmax(want.mean(axis=0)))]
    assert model.best_params_ == best
    # the refit is SISOKR at the best (λ, p) with the same sketches
    ref = ds.SISOKR(ds.Gaussian(gamma=0.3), ds.Gaussian(gamma=0.5),
                    input_sketch=ds.SubSampling(40), output_sketch=ds.SubSampling(30),
                    lam=best["lam"], rank=best["rank"], random_state=0, options=F64).fit(X, Y)
    Yc = Y[:20]
    assert norm_rel_err(model.score_candidates(X[:5], Yc), ref.score_candidates(X[:5], Yc)) <= 1e-9


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::distsketch.model_selection.grid.GridEdgeWarning")  # not about the choice
@pytest.mark.parametrize("scoring", ["surrogate", "f1_samples"])
def test_sisokr_cv_width_grid_in_one_pass_equals_brute_force(scoring, tmp_path):
    """SISOKRCV(gammas=…): every (γ, λ, p) from one pass equals the dense per-fold refits at
    that input width; the refit is SISOKR at the best (γ, λ, p); saved and loaded."""
    rng = np.random.default_rng(8)
    X = rng.normal(size=(160, 4))
    Y = (X[:, :3] @ rng.normal(size=(3, 6)) + 0.3 * rng.normal(size=(160, 6)) > 0.5)
    Y = Y.astype(np.float64)
    lams, ranks, gammas = [1e-4, 1e-2], [2, 4], [0.2, 0.3, 0.6]
    model = ds.SISOKRCV(ds.Gaussian(gamma=1.0), ds.Gaussian(gamma=0.5),
                        input_sketch=ds.SubSampling(40), output_sketch=ds.SubSampling(30),
                        lams=lams, ranks=ranks, gammas=gammas, cv=4, scoring=scoring,
                        random_state=0, options=F64, store=tmp_path / "w.zarr").fit(X, Y)
    got = np.stack([model.cv_results_[f"split{k}_test_score"] for k in range(4)])
    if scoring == "surrogate":
        want = np.concatenate([sisokr_brute_force(model, X, Y, lams, ranks, "4", g, 0.5)
                               for g in gammas], axis=1)
        assert norm_rel_err(got, want) <= 1e-8
    else:  # decoded: each width as its own SISOKRCV (the surrogate route checks the sums)
        want = np.concatenate([np.stack([ds.SISOKRCV(
            ds.Gaussian(gamma=g), ds.Gaussian(gamma=0.5), input_sketch=ds.SubSampling(40),
            output_sketch=ds.SubSampling(30), lams=lams, ranks=ranks, cv=4, scoring=scoring,
            random_state=0, options=F64).fit(X, Y).cv_results_[f"split{k}_test_score"]
            for k in range(4)]) for g in gammas], axis=1)
        assert np.array_equal(got, want)  # F1 of decoded rows: the same rows decoded
    best = model.cv_results_["params"][int(np.argmax(got.mean(axis=0)))]
    assert model.best_params_ == best and set(best) == {"gamma", "lam", "rank"}
    ref = ds.SISOKR(ds.Gaussian(gamma=best["gamma"]), ds.Gaussian(gamma=0.5),
                    input_sketch=ds.SubSampling(40), output_sketch=ds.SubSampling(30),
                    lam=best["lam"], rank=best["rank"], random_state=0, options=F64).fit(X, Y)
    Yc = Y[:20]
    assert norm_rel_err(model.score_candidates(X[:5], Yc), ref.score_candidates(X[:5], Yc)) <= 1e-9
    loaded = ds.load(tmp_path / "w.zarr")
    assert loaded.best_params_ == best and loaded.gammas_ == gammas
    assert loaded.cv_results_["params"] == model.cv_results_["params"]
    assert np.array_equal(loaded.score_candidates(X[:5], Yc), model.score_candidates(X[:5], Yc))


@pytest.mark.filterwarnings("ignore::distsketch.model_selection.grid.GridEdgeWarning")  # not about the choice
def test_sisokr_cv_bad_input_and_saved(tmp_path):
    X, Y = _data(t=3)
    Y = (Y > 0).astype(float)
    with pytest.raises(ValueError, match=r"^scoring: expected one of"):
        ds.SISOKRCV(input_sketch=ds.SubSampling(10), output_sketch=ds.SubSampling(10),
                    scoring="accuracy", store=tmp_path / "a").fit(X, Y)
    with pytest.raises(ValueError, match=r"^top_k: expected a positive integer"):
        ds.SISOKRCV(input_sketch=ds.SubSampling(10), output_sketch=ds.SubSampling(10),
                    scoring="topk_accuracy", top_k=0, store=tmp_path / "a").fit(X, Y)
    with pytest.raises(ValueError, match=r"^ranks: "):
        ds.SISOKRCV(input_sketch=ds.SubSampling(10), output_sketch=ds.SubSampling(10),
                    ranks=[0], store=tmp_path / "a", scoring="surrogate").fit(X, Y)
    assert not (tmp_path / "a").exists()
    model = ds.SISOKRCV(input_sketch=ds.SubSampling(20), output_sketch=ds.SubSampling(10),
                        lams=[1e-3, 1e-1], ranks=[2, 4], cv=3, random_state=0,
                        store=tmp_path / "cv.zarr", scoring="surrogate").fit(X, Y)
    loaded = ds.load(tmp_path / "cv.zarr")
    assert loaded.best_params_ == model.best_params_ and loaded.rank_ == model.rank_
    assert np.array_equal(loaded.score_candidates(X[:4], Y[:6]), model.score_candidates(X[:4], Y[:6]))


@pytest.mark.filterwarnings("ignore::distsketch.model_selection.grid.GridEdgeWarning")  # not about the choice
@pytest.mark.parametrize("route", ["band", "woodbury"])
@pytest.mark.parametrize("scoring", ["f1_samples", "kernel_loss", "topk_accuracy"])
@pytest.mark.parametrize("ranks", [None, [2, 5, 100]])
def test_sisokr_cv_decoded_scores_equal_brute_force(scoring, ranks, route):
    """Decoded scoring: each fold's rows decoded over the unique training outputs by SISOKR
    refitted densely without the fold (fixed feature maps), F1 or minus the kernel loss
    (the fold models from band reductions of bandwidth 5, or by the Woodbury route)."""
    from distsketch.metrics import f1_samples, kernel_loss

    options = dataclasses.replace(F64, tuning=ds.Tuning(fold_band=5, fold_route=route))

    rng = np.random.default_rng(7)
    n = 160
    X = rng.normal(size=(n, 4))
    Y = (X[:, :3] @ rng.normal(size=(3, 6)) + 0.5 * rng.normal(size=(n, 6)) > 0.5)
    Y = Y.astype(np.float64)
    lams = [1e-3, 1e-1]
    gx, gy = 0.3, 0.5
    model = ds.SISOKRCV(ds.Gaussian(gamma=gx), ds.Gaussian(gamma=gy),
                        input_sketch=ds.SubSampling(40), output_sketch=ds.SubSampling(30),
                        lams=lams, ranks=ranks, cv=4, scoring=scoring, top_k=3, random_state=0,
                        options=options).fit(X, Y)

    Px, Py, _ = whitened_features(model, X, Y, gx, gy)
    cand_rows = model.candidate_index_
    f = fold_ids(0, n, n, "4")
    for k in range(4):
        tr, va = f != k, f == k
        col = 0
        for lam in lams:
            W = Py[tr].T @ Px[tr] @ np.linalg.inv(Px[tr].T @ Px[tr] + tr.sum() * lam
                                                  * np.eye(Px.shape[1]))
            g = Px[va] @ W.T
            pred_tr = Px[tr] @ W.T
            _, Q = np.linalg.eigh(pred_tr.T @ pred_tr)
            for p in (ranks or [None]):
                gp = g if p is None else g @ Q[:, ::-1][:, :p] @ Q[:, ::-1][:, :p].T
                score = 1.0 - 2.0 * gp @ Py[cand_rows].T
                P = Y[cand_rows][np.argmin(score, axis=1)]
                if scoring == "topk_accuracy":  # own output among the 3 best (stable order)
                    own = [np.flatnonzero((Y[cand_rows] == y).all(axis=1))[0] for y in Y[va]]
                    top = np.argsort(score, axis=1, kind="stable")[:, :3]
                    want = np.mean([o in t for o, t in zip(own, top)])
                else:
                    want = (f1_samples(Y[va], P) if scoring == "f1_samples"
                            else -kernel_loss(ds.Gaussian(gamma=gy), Y[va], P))
                got = model.cv_results_[f"split{k}_test_score"][col]
                assert got == pytest.approx(want, rel=1e-12, abs=1e-12), (k, lam, p)
                col += 1


@pytest.mark.parametrize("r, band", [(1, 4), (2, 1), (7, 2), (40, 3), (61, 8), (30, 64)])
def test_band_reduction(r, band):
    """``A = Q Bd Qᵀ`` with ``Q`` orthogonal and ``Bd`` of bandwidth ``band``; shifted solves
    equal the dense solve. Orthogonal transformations only: errors of a few ulps times the
    size (1e-12 at these sizes, ‖A‖ ≈ 1); the solve's error is that times cond(A + cI) ≤ 1e3."""
    from distsketch.linalg.shifted import BandReduction

    rng = np.random.default_rng(r)
    F = rng.normal(size=(r, r))
    A = F @ F.T / r - 0.3 * np.eye(r)  # indefinite
    fac = BandReduction(A, band=band)
    X = rng.normal(size=(r, 5))
    assert np.abs(np.triu(fac.dense, band + 1)).max(initial=0.0) == 0.0
    assert np.allclose(fac.q_dot(fac.qt_dot(X)), X, rtol=0, atol=1e-12)
    assert np.allclose(fac.q_dot(fac.band_dot(fac.qt_dot(X))), A @ X, rtol=0, atol=1e-12)
    shift = 0.3 + 1e-3 * np.abs(np.linalg.eigvalsh(A)).max()
    want = np.linalg.solve(A + shift * np.eye(r), X)
    got = fac.q_dot(fac.solve(fac.qt_dot(X), shift))
    assert norm_rel_err(got, want) <= 1e-10
    if np.linalg.eigvalsh(A).min() < -1e-3:  # an indefinite shift is reported, not solved
        assert fac.solve(fac.qt_dot(X), 0.0) is None


@pytest.mark.filterwarnings("ignore::distsketch.model_selection.grid.GridEdgeWarning")  # not about the choice
@pytest.mark.parametrize("route", ["band", "woodbury"])
def test_sisokr_cv_scores_do_not_depend_on_the_fold_threads(route):
    """Each fold is computed the same way on any thread: bitwise equal scores."""
    rng = np.random.default_rng(11)
    X = rng.normal(size=(120, 3))
    Y = (X @ rng.normal(size=(3, 5)) > 0.3).astype(np.float64)
    got = []
    for threads in (1, 3):
        options = dataclasses.replace(F64, tuning=ds.Tuning(fold_route=route,
                                                            fold_threads=threads, fold_band=4))
        model = ds.SISOKRCV(ds.Gaussian(gamma=0.3), ds.Gaussian(gamma=0.5),
                            input_sketch=ds.SubSampling(30), output_sketch=ds.SubSampling(20),
                            lams=[1e-3, 1e-1], ranks=[2, 6], cv=3, random_state=0,
                            options=options, scoring="surrogate").fit(X, Y)
        got.append(np.stack([model.cv_results_[f"split{k}_test_score"] for k in range(3)]))
    assert np.array_equal(got[0], got[1])


def _exact_fold_errors(X, Y, lams, ranks, folds, gx, gy):
    """Exact IOKR trained on each fold's training rows only (n_tr × n_tr, no sketch), and its
    reduced rank: ``α(x) = (K_tr + n_tr λ I)^{-1} k_tr(x)``, ``ĥ(x) = Σ_j α_j(x) ψ(y_j)``;
    rank p projects onto the top-p principal directions of the training predictions, in the
    orthonormal coordinates ``K_Y,tr^{1/2} α`` of H_Y's training span."""
    f = fold_ids(0, len(X), len(X), folds)
    grid = [(lam, p) for lam in lams for p in (ranks or [None])]
    out = np.empty((f.max() + 1, len(grid)))
    for k in range(f.max() + 1):
        tr, va = f != k, f == k
        n_tr = tr.sum()
        Kx, kx = gaussian_gram(X[tr], gamma=gx), gaussian_gram(X[tr], X[va], gamma=gx)
        Ky, ky = gaussian_gram(Y[tr], gamma=gy), gaussian_gram(Y[tr], Y[va], gamma=gy)
        s, U = np.linalg.eigh(Ky)
        root, iroot = (U * np.sqrt(s)) @ U.T, (U / np.sqrt(s)) @ U.T
        for j, (lam, p) in enumerate(grid):
            inv = np.linalg.inv(Kx + n_tr * lam * np.eye(n_tr))
            alpha = inv @ kx  # (n_tr, n_va)
            if p is not None:
                F = root @ (inv @ Kx)  # training predictions' coordinates, one per column
                w, Q = np.linalg.eigh(F @ F.T)
                Qp = Q[:, ::-1][:, :p]
                alpha = iroot @ Qp @ Qp.T @ root @ alpha
            err = 1.0 - 2 * np.einsum("ij,ij->j", alpha, ky) \
                + np.einsum("ij,ij->j", alpha, Ky @ alpha)
            out[k, j] = -err.mean()
    return out


@pytest.mark.filterwarnings("ignore::distsketch.model_selection.grid.GridEdgeWarning")  # not about the choice
@pytest.mark.parametrize("sides", ["exact/exact", "exact/sketched", "sketched/exact"])
@pytest.mark.parametrize("route", ["woodbury", "band"])
def test_sisokr_cv_exact_sides_equal_exact_per_fold_models(sides, route, tmp_path):
    """An exact side (None) is cross-validated as SubSampling(n): its fold scores are those of
    the exact models trained on each fold's rows alone (representer theorem), for every λ and
    rank, by either fold route (n_k = 16 of 48 features); the refit equals SISOKR with the
    exact side at the best (λ, p)."""
    rng = np.random.default_rng(11)
    X = rng.normal(size=(48, 3))
    Y = X[:, :2] @ rng.normal(size=(2, 4)) + 0.3 * rng.normal(size=(48, 4))
    ins, outs = [None if s == "exact" else ds.SubSampling(48) for s in sides.split("/")]
    lams, ranks = [1e-3, 1e-1], [1, 3, 100]
    model = ds.SISOKRCV(ds.Gaussian(gamma=1.0), ds.Gaussian(gamma=0.5), input_sketch=ins,
                        output_sketch=outs, lams=lams, ranks=ranks, cv=3, random_state=0,
                        options=dataclasses.replace(F64, tuning=ds.Tuning(fold_route=route)),
                        scoring="surrogate").fit(X, Y)
    got = np.stack([model.cv_results_[f"split{k}_test_score"] for k in range(3)])
    want = _exact_fold_errors(X, Y, lams, ranks, "3", 1.0, 0.5)
    assert norm_rel_err(got, want) <= 1e-8
    assert model.input_sketch is ins and model.input_sketch_.m == 48  # params untouched
    best = model.best_params_
    ref = ds.SISOKR(ds.Gaussian(gamma=1.0), ds.Gaussian(gamma=0.5), input_sketch=ins,
                    output_sketch=outs, lam=best["lam"], rank=best["rank"], random_state=0,
                    options=F64).fit(X, Y)
    assert norm_rel_err(model.score_candidates(X[:5], Y[:7]),
                        ref.score_candidates(X[:5], Y[:7])) <= 1e-8


def test_sisokr_cv_refuses_fold_sums_beyond_the_driver_budget(tmp_path):
    X, Y = _data(n=200, t=3)
    below = ds.EngineOptions(tuning=ds.Tuning(max_fold_bytes=8 * 5 * 200 * 400 - 1))
    with pytest.raises(ValueError, match=r"^input_sketch: the per-fold sums .*"
                                         r"max_fold_bytes"):
        ds.SISOKRCV(cv=5, store=tmp_path / "a", scoring="surrogate", options=below).fit(X, Y)
    with pytest.raises(ValueError, match=r"^output_sketch: the per-fold sums"):
        ds.SISOKRCV(input_sketch=ds.SubSampling(200), cv=5, store=tmp_path / "a",
                    scoring="surrogate", options=below).fit(X, Y)
    assert not (tmp_path / "a").exists()
    at = ds.EngineOptions(tuning=ds.Tuning(max_fold_bytes=8 * 5 * 200 * 400))
    # exactly at the budget: fits
    ds.SISOKRCV(lams=[1e-2], cv=5, random_state=0, scoring="surrogate", options=at).fit(X, Y)
