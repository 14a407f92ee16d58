"""Model selection's defaults and the warnings that say when it may have picked badly: a
chosen value at an edge of its grid is named in a warning; [select] cv is K-fold for
every model, on shuffled seeded folds by default; SISOKRCV's default scoring is the task's
metric where decoding the folds is affordable; the input kernel itself is a candidate of the
CV estimators, scored in the same pass as the widths."""

from __future__ import annotations

import contextlib
import warnings

import numpy as np
import pytest

import distsketch as ds
from distsketch import metrics
from distsketch.engine.sums import fold_ids
from distsketch.model_selection.grid import GridEdgeWarning, grid_edges
from distsketch.model_selection.scoring import auto_scoring
from distsketch.model_selection.select import fold_splits, select

LAMS = [1.0, 1e-1, 1e-2, 1e-3, 1e-4]  # an interior optimum on _data() (noise 1.0)
GAMMAS = [0.01, 0.1, 1.0]
SISO_LAMS = [1.0, 1e-1, 1e-2, 1e-3, 1e-4, 1e-5]  # an interior optimum on _labels()


@contextlib.contextmanager
def _edge_ok():
    """A reference fit whose own grid edge is beside the point (one candidate of a grid)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", GridEdgeWarning)
        yield


def _data(n=240, seed=0, noise=1.0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    return X, np.sin(X[:, 0]) + 0.5 * X[:, 1] + noise * rng.normal(size=n) + 3.0


def _labels(n=200, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    Y = (X @ rng.normal(size=(3, 5)) + 0.3 * rng.normal(size=(n, 5)) > 0).astype(float)
    return X, Y


# --------------------------------------------------------------------------- grid edges


def test_grid_edges_name_the_parameter_its_edge_value_and_the_fix():
    grids = {"lam": ("lams", [1e-1, 1e-3, 1e-6]), "gamma": ("gammas", [0.1, 1.0]),
             "rank": ("ranks", [2, 4])}
    msgs = grid_edges({"lam": 1e-6, "gamma": 1.0, "rank": 4}, grids, full_rank=10)
    assert len(msgs) == 3
    assert "λ = 1e-06 is the smallest value of lams" in msgs[0]
    assert "extend lams below 1e-06 (e.g. add 1e-07, 1e-08)" in msgs[0]
    assert "γ = 1 is the largest value of gammas" in msgs[1] and "add 10, 100" in msgs[1]
    assert "rank = 4 is the largest value of ranks" in msgs[2] and "add 8, 16" in msgs[2]
    # inside the grid, a grid of one value, the full rank, rank 1: nothing to extend
    assert grid_edges({"lam": 1e-3, "gamma": None, "rank": 4}, grids, full_rank=4) == []
    assert grid_edges({"lam": 1e-3}, {"lam": ("lams", [1e-3])}) == []
    assert grid_edges({"rank": 1}, {"rank": ("ranks", [1, 3])}) == []


def test_cv_estimator_warns_at_an_edge_and_not_inside():
    X, y = _data(noise=0.1)
    with pytest.warns(GridEdgeWarning, match=r"SketchedKRRCV: the selected λ = 1e-06 is the "
                                             r"smallest value of lams .* extend lams below"):
        m = ds.SketchedKRRCV(ds.Gaussian(0.1), sketch=ds.SubSampling(30),
                             lams=[1e-1, 1e-3, 1e-6], cv=4, random_state=1).fit(X, y)
    assert m.best_params_ == {"lam": 1e-6}
    X, y = _data()  # noisier: an interior λ and γ; no warning (filterwarnings = error)
    m = ds.SketchedKRRCV(ds.Gaussian(), sketch=ds.SubSampling(30), lams=LAMS, gammas=GAMMAS,
                         cv=4, random_state=1).fit(X, y)
    assert m.best_params_ == {"gamma": 0.1, "lam": 1e-2}
    # a saved model's choice is not warned about again on load
    with pytest.warns(GridEdgeWarning, match="γ = 0.03 is the smallest value of gammas"):
        ds.SketchedKRRCV(ds.Gaussian(), sketch=ds.SubSampling(30), lams=LAMS,
                         gammas=[0.03, 0.1, 0.3], cv=4, random_state=1).fit(X, y)


def test_select_warns_once_per_parameter_naming_the_select_keys():
    X, y = _data()
    model = ds.SketchedKRR(ds.Gaussian(), sketch=ds.SubSampling(30), lam=LAMS, random_state=1)
    with pytest.warns(GridEdgeWarning) as rec:
        sel = select(model, X, y, cv=4, gammas=[0.03, 0.1, 0.3],
                     kernels=["gaussian", "laplacian"])
    msgs = [str(w.message) for w in rec if issubclass(w.category, GridEdgeWarning)]
    assert sel.best["gamma"] == 0.03
    assert msgs == [m for m in msgs if m.startswith("select: ")] and len(msgs) == 1
    assert "select.gammas" in msgs[0] and "extend select.gammas below 0.03" in msgs[0]
    # the hold-out route too, naming model.lam
    with pytest.warns(GridEdgeWarning, match=r"select: the selected λ = 1e-06 .* model.lam"):
        select(ds.SketchedKRR(ds.Gaussian(0.1), sketch=ds.SubSampling(30),
                              lam=[1e-1, 1e-3, 1e-6], random_state=1), *_data(noise=0.1),
               validation=0.25)


# --------------------------------------------------------------------------- folds


def test_select_cv_folds_are_shuffled_by_seed_and_contiguous_on_request():
    X, y = _data()
    order = np.argsort(y)  # a file sorted by its target: contiguous folds are biased
    X, y = X[order], y[order]
    model = ds.SketchedKRR(ds.Gaussian(0.1), sketch=ds.SubSampling(30), lam=LAMS,
                           random_state=1)
    for kw, spec in [({}, "4:0"), ({"random_state": 3}, "4:3"), ({"shuffle": False}, 4)]:
        sel = select(model, X, y, cv=4, **kw)
        ref = ds.SketchedKRRCV(ds.Gaussian(0.1), sketch=ds.SubSampling(30), lams=LAMS, cv=spec,
                               random_state=1).fit(X, y)
        assert [r["score"] for r in sel.table] == pytest.approx(
            list(ref.cv_results_["mean_test_score"]), rel=1e-12)
    # the seeded folds are a partition of the rows, each spanning the sorted target
    splits = fold_splits(len(y), "4:0")
    assert np.array_equal(np.sort(np.concatenate([v for _, v in splits])), np.arange(len(y)))
    assert all(y[v].min() < np.quantile(y, 0.1) and y[v].max() > np.quantile(y, 0.9)
               for _, v in splits)


def test_sorted_rows_bias_contiguous_folds_not_shuffled_ones():
    """Rows sorted by the target: contiguous folds validate each model
    outside the target range it was trained on."""
    X, y = _data()
    order = np.argsort(y)
    X, y = X[order], y[order]
    model = ds.SketchedKRR(ds.Gaussian(0.1), sketch=ds.SubSampling(30), lam=LAMS,
                           random_state=1)
    contiguous = select(model, X, y, cv=4, shuffle=False)
    shuffled = select(model, X, y, cv=4)
    best = max(r["score"] for r in shuffled.table)
    assert max(r["score"] for r in contiguous.table) < 2 * best  # neg-MSE: far worse


@pytest.mark.slow
@pytest.mark.parametrize("make", [
    lambda: ds.SketchedRegressor(ds.Gaussian(0.1), loss="huber", sketch=ds.SubSampling(30),
                                 lam=LAMS, random_state=0),
    lambda: ds.SketchedQuantileRegressor(ds.Gaussian(0.1), quantiles=(0.2, 0.5, 0.8),
                                         sketch=ds.SubSampling(30), lam=LAMS, random_state=0),
    lambda: ds.SketchedKRR(ds.Gaussian(0.1), sketch=ds.SubSampling(30), lam=LAMS,
                           random_state=0),
], ids=["lipschitz", "quantile", "krr-mae"])
def test_select_cv_refits_per_fold_where_there_is_no_one_pass_cv(make):
    """K-fold for the Lipschitz and quantile models (and a metric the one-pass route lacks):
    one fit per fold on its training rows with the whole λ path, the table's score the mean
    over the folds of the metric on each fold's rows, the model refitted on all rows."""
    X, y = _data(n=160)
    metric = "mae" if isinstance(make(), ds.SketchedKRR) else None
    sel = select(make(), X, y, cv=3, random_state=5, metric=metric)
    name = sel.metric
    f = fold_ids(0, len(X), len(X), "3:5")
    want = {lam: [] for lam in LAMS}
    for k in range(3):
        est = make().fit(X[f != k], y[f != k])
        for lam in LAMS:
            est.set_lam(lam)
            pred = est.predict(X[f == k])
            want[lam].append(metrics.METRICS[name].func(est, X[f == k], y[f == k], pred))
    assert sel.route == "cv" and [r["lam"] for r in sel.table] == LAMS
    for r in sel.table:
        assert r["score"] == pytest.approx(np.mean(want[r["lam"]]), rel=1e-9)
        assert r["std"] == pytest.approx(np.std(want[r["lam"]]), rel=1e-6, abs=1e-12)
    assert sel.model.lam_ == sel.best["lam"]
    # the plain fit at the chosen λ first (the rest of the path after it, as select refits)
    plain = make().set_params(lam=[sel.best["lam"]] + [v for v in LAMS
                                                       if v != sel.best["lam"]]).fit(X, y)
    assert np.array_equal(sel.model.predict(X), plain.predict(X))


# --------------------------------------------------------------------------- SISOKRCV scoring


def test_auto_scoring_rule_and_cost():
    kw = dict(n=2000, n_unique=1500, settings=7, m_y=200)  # Bibtex-2000-like: 4.2e9
    assert auto_scoring(binary=True, **kw) == ("f1_samples", None)
    assert auto_scoring(binary=False, **kw) == ("kernel_loss", None)
    scoring, msg = auto_scoring(binary=True, **kw, budget=1e9)
    assert scoring == "surrogate"
    assert "4.2e+09 multiply-adds" in msg and "pass scoring='f1_samples'" in msg


def test_sisokrcv_default_scoring_is_the_task_metric():
    X, Y = _labels()
    kw = dict(input_sketch=ds.SubSampling(40), output_sketch=ds.SubSampling(20),
              lams=SISO_LAMS, cv=3, random_state=0)
    auto = ds.SISOKRCV(ds.Gaussian(0.3), ds.Gaussian(0.5), **kw).fit(X, Y)
    f1 = ds.SISOKRCV(ds.Gaussian(0.3), ds.Gaussian(0.5), scoring="f1_samples", **kw).fit(X, Y)
    assert auto.scoring_ == "f1_samples"
    assert np.array_equal(auto.cv_results_["mean_test_score"], f1.cv_results_["mean_test_score"])
    # above the budget: the surrogate, with a warning saying they can disagree
    small = ds.EngineOptions(tuning=ds.Tuning(auto_decode_budget=10.0))
    with pytest.warns(UserWarning, match="surrogate error instead, which can choose another"):
        est = ds.SISOKRCV(ds.Gaussian(0.3), ds.Gaussian(0.5), options=small, **kw)
        try:
            est.fit(X, Y)
        except Exception:  # pragma: no cover
            raise
    assert est.scoring_ == "surrogate"


def test_select_sisokr_default_metric_is_the_task_metric():
    X, Y = _labels()
    model = ds.SISOKR(ds.Gaussian(0.3), ds.Gaussian(0.5), input_sketch=ds.SubSampling(40),
                      output_sketch=ds.SubSampling(20), lam=SISO_LAMS,
                      random_state=0)
    assert select(model, X, Y, cv=3).metric == "f1_samples"
    assert select(model, X, Y, validation=0.3).metric == "f1_samples"


# --------------------------------------------------------------------------- kernels


def test_cv_estimators_score_several_kernels_in_one_pass(monkeypatch, tmp_path):
    from distsketch.engine.features import FeatureMap

    X, y = _data()
    seen = []
    original = FeatureMap.block

    def counting(self, A, **kw):
        seen.append(id(A))
        return original(self, A, **kw)

    kw = dict(sketch=ds.SubSampling(30), lams=LAMS, cv=4, random_state=1,
              options=ds.EngineOptions(block_dtype="float64", block_rows=64))
    monkeypatch.setattr(FeatureMap, "block", counting)
    est = ds.SketchedKRRCV(ds.Gaussian(), kernels=["gaussian", "linear"], gammas=GAMMAS,
                           **kw).fit(X, y)
    monkeypatch.setattr(FeatureMap, "block", original)
    blocks = -(-len(X) // 64)
    assert len(set(seen)) == blocks and len(seen) == 4 * blocks  # one read, 4 candidates
    want = []
    for k in [ds.Gaussian(g) for g in GAMMAS] + [ds.Linear()]:
        with _edge_ok():
            want += list(ds.SketchedKRRCV(k, **kw).fit(X, y).cv_results_["mean_test_score"])
    assert list(est.cv_results_["mean_test_score"]) == pytest.approx(want, rel=1e-12)
    assert list(est.cv_results_["param_kernel"]) == ["gaussian"] * 15 + ["linear"] * 5
    assert est.best_params_ == {"kernel": "gaussian", "gamma": 0.1, "lam": 1e-2}
    assert est.kernel_ == ds.Gaussian(0.1)
    # saved with the model (names and tables only) and loaded with its table
    store = tmp_path / "cv.zarr"
    ds.SketchedKRRCV(ds.Gaussian(), kernels=["gaussian", {"name": "linear"}], gammas=GAMMAS,
                     store=store, **kw).fit(X, y)
    back = ds.load(store)
    assert back.cv_results_["params"] == est.cv_results_["params"]
    with pytest.raises(ValueError, match=r"kernels\[0\]: with a store"):
        ds.SketchedKRRCV(ds.Gaussian(), kernels=[ds.Linear()], store=tmp_path / "b",
                         **kw).fit(X, y)


def test_sisokrcv_kernel_choice_finds_the_linear_kernel():
    """A small multi-label case: the input kernel is a candidate, scored in the
    same pass, each candidate's scores equal its own SISOKRCV."""
    X, Y = _labels()
    kw = dict(input_sketch=ds.SubSampling(40), output_sketch=ds.SubSampling(20),
              lams=SISO_LAMS, cv=3, random_state=0)
    est = ds.SISOKRCV(ds.Gaussian(), ds.Gaussian(0.5), kernels=["linear", "gaussian"],
                      gammas=[0.03, 0.3, 3.0], **kw).fit(X, Y)
    want = []
    for k in [ds.Linear(), ds.Gaussian(0.03), ds.Gaussian(0.3), ds.Gaussian(3.0)]:
        with _edge_ok():
            want += list(ds.SISOKRCV(k, ds.Gaussian(0.5), **kw).fit(X, Y)
                         .cv_results_["mean_test_score"])
    assert list(est.cv_results_["mean_test_score"]) == pytest.approx(want, rel=1e-12)
    assert est.scoring_ == "f1_samples"
    assert est.best_params_["kernel"] == "linear"  # a linear task: the linear kernel wins
    assert est.input_kernel_ == ds.Linear()


# --------------------------------------------------------------------------- the CLI's keys


@pytest.mark.parametrize("table, match", [
    ("cv = 4\nshuffle = 1", "select.shuffle: expected true or false"),
])
def test_cli_select_shuffle_is_validated(tmp_path, table, match):
    from distsketch.cli.config import ConfigError, load_config

    X, y = _data()
    np.savez(tmp_path / "train.npz", X=X, Y=y)
    (tmp_path / "c.toml").write_text(
        f'[model]\ntype = "SketchedRegressor"\nlam = [1e-1, 1e-3]\n[model.kernel]\n'
        f'name = "gaussian"\n[model.sketch]\n'
        f'name = "subsampling"\nm = 20\n[data]\ntrain = "train.npz"\n[select]\n{table}\n')
    with pytest.raises(ConfigError, match=match):
        load_config(tmp_path / "c.toml")
    (tmp_path / "c.toml").write_text(
        '[model]\ntype = "SketchedRegressor"\nlam = [1e-1, 1e-3]\n[model.kernel]\n'
        'name = "gaussian"\n[model.sketch]\n'
        'name = "subsampling"\nm = 20\n[data]\ntrain = "train.npz"\n[select]\ncv = 3\n'
        'shuffle = false\nseed = 2\n')
    cfg = load_config(tmp_path / "c.toml")
    assert cfg.select == {"cv": 3, "random_state": 2, "shuffle": False}


@pytest.mark.slow
def test_cli_select_by_folds_says_which_way_is_better(tmp_path, capsys):
    """The table header of a K-fold selection by an error (rmse: smaller is better) says so; a
    one-pass selection's scores (greater is better) say that."""
    from distsketch.cli.commands import main

    X, y = _data()
    np.savez(tmp_path / "train.npz", X=X, Y=y)
    (tmp_path / "c.toml").write_text(
        '[model]\ntype = "SketchedRegressor"\nlam = [1e-1, 1e-2, 1e-3]\n[model.kernel]\n'
        'name = "gaussian"\n[model.sketch]\nname = "subsampling"\nm = 20\n'
        '[data]\ntrain = "train.npz"\n[select]\ncv = 3\nmetric = "rmse"\n')
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", GridEdgeWarning)
        assert main(["fit", str(tmp_path / "c.toml")]) == 0
    out = capsys.readouterr().out
    assert "model selection by cv: rmse (mean over folds, smaller is better)" in out, out
