"""Model selection (distsketch.model_selection.select, the CLI's ``[select]``): every table row equals a
brute-force fit, the chosen values are the table's best, the final model is the plain fit at
those values."""

from __future__ import annotations

import numpy as np
import pytest

import distsketch as ds
from distsketch import metrics
from distsketch.model_selection.select import check_selection, select, split_rows

F64 = ds.EngineOptions(block_dtype="float64")
LAMS = [1e-1, 1e-3, 1e-6]


def _data(n=240, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    return X, np.sin(X[:, 0]) + 0.5 * X[:, 1] + 0.1 * rng.normal(size=n) + 3.0


def test_split_is_a_seeded_partition_of_the_requested_size():
    train, val = split_rows(10_000, 0.2, seed=3)
    assert np.array_equal(np.sort(np.r_[train, val]), np.arange(10_000))
    assert abs(len(val) / 10_000 - 0.2) < 0.02  # binomial: 5 standard deviations is 0.02
    assert np.array_equal(split_rows(10_000, 0.2, seed=3)[1], val)
    assert not np.array_equal(split_rows(10_000, 0.2, seed=4)[1], val)
    # a prefix of the rows is split the same way: independent of n and of chunking
    assert np.array_equal(split_rows(5_000, 0.2, seed=3)[1], val[val < 5_000])


@pytest.mark.filterwarnings("ignore::distsketch.model_selection.grid.GridEdgeWarning")  # not about the choice
def test_validation_route_equals_brute_force_and_refits_on_all_rows():
    X, y = _data()
    kw = dict(sketch=ds.SubSampling(30), random_state=1, options=F64)
    gammas = [0.1, 1.0]
    sel = select(ds.SketchedKRR(ds.Gaussian(gamma=0.5), lam=LAMS, **kw), X, y,
                 validation=0.25, metric="mae", gammas=gammas, random_state=7)
    train, val = split_rows(len(X), 0.25, 7)
    scores = {}
    for g in gammas:
        for lam in LAMS:
            est = ds.SketchedKRR(ds.Gaussian(gamma=g), lam=lam, **kw).fit(X[train], y[train])
            scores[(g, lam)] = metrics.mae(y[val], est.predict(X[val]))
    assert len(sel.table) == len(scores)
    for row in sel.table:
        assert row["score"] == pytest.approx(scores[(row["gamma"], row["lam"])], rel=1e-9)
    g, lam = min(scores, key=scores.get)
    assert sel.best == {"gamma": g, "lam": lam} and not sel.greater_is_better
    plain = ds.SketchedKRR(ds.Gaussian(gamma=g), lam=lam, **kw).fit(X, y)
    assert sel.model.lam_ == lam
    assert np.allclose(sel.model.predict(X), plain.predict(X), rtol=0, atol=1e-9)


@pytest.mark.filterwarnings("ignore::distsketch.model_selection.grid.GridEdgeWarning")  # not about the choice
def test_cv_route_is_the_one_pass_cv_estimator():
    X, y = _data()
    sel = select(ds.SketchedKRR(ds.Gaussian(gamma=0.5), sketch=ds.SubSampling(30), lam=LAMS,
                                random_state=1, options=F64), X, y, cv=4, metric="r2")
    ref = ds.SketchedKRRCV(ds.Gaussian(gamma=0.5), sketch=ds.SubSampling(30), lams=LAMS,
                           cv="4:0", scoring="r2", random_state=1, options=F64).fit(X, y)
    assert [r["score"] for r in sel.table] == pytest.approx(list(ref.cv_results_[
        "mean_test_score"]), rel=1e-12)
    assert sel.best == ref.best_params_ and sel.metric == "r2" and sel.greater_is_better
    assert np.array_equal(sel.model.predict(X), ref.predict(X))


@pytest.mark.filterwarnings("ignore::distsketch.model_selection.grid.GridEdgeWarning")  # not about the choice
def test_cv_route_scores_a_width_grid_in_one_pass(monkeypatch):
    """cv + gammas + kernels: every kernel × γ is one CV trial whose pass reads every row
    block once (SketchedKRRCV(kernels=, gammas=)); its rows equal one CV estimator per
    candidate."""
    from distsketch.engine.features import FeatureMap

    seen = []
    original = FeatureMap.block

    def counting(self, A, **kw):
        seen.append(A)
        return original(self, A, **kw)

    X, y = _data()
    gammas = [0.1, 0.5, 2.0]
    opts = ds.EngineOptions(block_dtype="float64", block_rows=64)
    model = ds.SketchedKRR(ds.Gaussian(gamma=1.0), sketch=ds.SubSampling(30), lam=LAMS,
                           random_state=1, options=opts)
    monkeypatch.setattr(FeatureMap, "block", counting)
    sel = select(model, X, y, cv=4, metric="rmse", gammas=gammas, kernels=["gaussian", "linear"])
    monkeypatch.setattr(FeatureMap, "block", original)
    blocks = -(-len(X) // 64)
    # the Gaussian's 3 widths and the linear kernel in one pass (SketchedKRRCV(kernels=)):
    # each row block read once, its features computed per candidate (the final model is the
    # trial's own fit without a store: no refit pass)
    assert len({id(A) for A in seen}) == blocks and len(seen) == (3 + 1) * blocks
    want = []
    for g in gammas:
        ref = ds.SketchedKRRCV(ds.Gaussian(gamma=g), sketch=ds.SubSampling(30), lams=LAMS,
                               cv="4:0", random_state=1, options=opts).fit(X, y)
        want += list(ref.cv_results_["mean_test_score"])
    ref = ds.SketchedKRRCV(ds.Linear(), sketch=ds.SubSampling(30), lams=LAMS, cv="4:0",
                           random_state=1, options=opts).fit(X, y)
    want += list(ref.cv_results_["mean_test_score"])
    assert [r["score"] for r in sel.table] == pytest.approx(want, rel=1e-12)
    assert [r["gamma"] for r in sel.table] == [g for g in gammas for _ in LAMS] + [None] * 3
    best = sel.table[int(np.argmax([r["score"] for r in sel.table]))]
    assert sel.best == {k: v for k, v in best.items() if k not in ("score", "std")}


@pytest.mark.filterwarnings("ignore::distsketch.model_selection.grid.GridEdgeWarning")  # not about the choice
def test_regressor_and_reduced_rank_through_validation():
    X, y = _data()
    sel = select(ds.SketchedRegressor(ds.Gaussian(gamma=0.5), loss="huber",
                                      sketch=ds.SubSampling(30), lam=LAMS, random_state=0),
                 X, y, validation=0.3)
    assert sel.metric == "rmse" and sel.best["lam"] == sel.model.lam_
    best = min(sel.table, key=lambda r: r["score"])
    assert best["lam"] == sel.best["lam"]
    Y = (np.c_[X[:, :2], -X[:, 0]] > 0).astype(float)
    sel = select(ds.SISOKR(ds.Gaussian(gamma=0.3), ds.Gaussian(gamma=0.5),
                           input_sketch=ds.SubSampling(40), output_sketch=ds.SubSampling(20),
                           lam=[1e-1, 1e-3], rank=[1, 3], random_state=0),
                 X, Y, validation=0.3, metric="f1_samples")
    assert {(r["lam"], r["rank"]) for r in sel.table} == {(1e-1, 1), (1e-1, 3), (1e-3, 1),
                                                          (1e-3, 3)}
    assert sel.greater_is_better
    assert max(sel.table, key=lambda r: r["score"])["rank"] == sel.model.rank


@pytest.mark.filterwarnings("ignore::distsketch.model_selection.grid.GridEdgeWarning")  # not about the choice
def test_exact_output_side_through_one_pass_cv():
    """SISOKR with an exact output side: select's cv route is SISOKRCV (exact side as
    SubSampling(n)), whose scores are the table's; the model is SISOKR at the best λ."""
    X, _ = _data()
    Y = np.c_[X[:, :2], -X[:, 0]] + 0.1 * np.random.default_rng(3).normal(size=(len(X), 3))
    kw = dict(input_sketch=ds.SubSampling(40), output_sketch=None, random_state=0)
    sel = select(ds.SISOKR(ds.Gaussian(gamma=0.3), ds.Gaussian(gamma=0.5), lam=[1e-1, 1e-3],
                           **kw), X, Y, cv=3)
    cv = ds.SISOKRCV(ds.Gaussian(gamma=0.3), ds.Gaussian(gamma=0.5), lams=[1e-1, 1e-3],
                     cv="3:0", scoring="kernel_loss", **kw).fit(X, Y)
    assert sel.best["lam"] == cv.best_params_["lam"] == sel.model.lam_
    assert sorted(r["score"] for r in sel.table) == sorted(cv.cv_results_["mean_test_score"])


@pytest.mark.parametrize("kw, match", [
    ({}, "select: give exactly one of cv"),
    ({"cv": 5, "validation": 0.2}, "select: give exactly one of cv"),
    ({"cv": 1}, r"select.cv: expected an integer ≥ 2"),
    ({"validation": 1.5}, r"select.validation: expected a fraction in \(0, 1\)"),
    ({"cv": 3, "metric": "accuracy"}, "select.metric: unknown metric 'accuracy'"),
    ({"cv": 3, "gammas": [0.1, -1]}, "select.gammas: expected a non-empty list"),
])
def test_bad_selection_arguments(kw, match):
    with pytest.raises(ValueError, match=match):
        check_selection(**kw)


def test_routes_a_model_cannot_take_are_refused_before_any_fit():
    X, y = _data(60)
    krr = ds.SketchedKRR(ds.Gaussian(), sketch=ds.SubSampling(10), lam=LAMS)
    with pytest.raises(ValueError, match="select.metric: metric 'pinball' does not apply"):
        select(krr, X, y, validation=0.2, metric="pinball")
    with pytest.raises(ValueError, match="select.gammas: the input kernel Linear"):
        select(ds.SketchedKRR(ds.Linear(), sketch=ds.SubSampling(10), lam=LAMS), X, y,
               validation=0.2, gammas=[1.0])


# --------------------------------------------------------------------------- the CLI's [select]

SELECT_TOML = """
[model]
type = "{type}"
lam = [1e-1, 1e-3, 1e-6]
random_state = 0
[model.kernel]
name = "gaussian"
gamma = 0.5
[model.sketch]
name = "subsampling"
m = 30
[data]
train = "train.npz"
test = "test.npz"
[select]
{select}
"""


@pytest.fixture
def cli_dir(tmp_path):
    X, y = _data(300)
    np.savez(tmp_path / "train.npz", X=X[:240], Y=y[:240])
    np.savez(tmp_path / "test.npz", X=X[240:], Y=y[240:])
    return tmp_path


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::distsketch.model_selection.grid.GridEdgeWarning")  # not about the choice
@pytest.mark.parametrize("select_table, route", [
    ('cv = 4\ngammas = [0.1, 1.0]\nmetric = "r2"', "cv"),
    ('validation = 0.25\nmetric = "mae"\nseed = 3', "validation"),
])
def test_cli_fit_selects_prints_the_table_and_evaluates_at_any_lam(cli_dir, capsys,
                                                                   select_table, route):
    import json

    from distsketch.cli.commands import main

    (cli_dir / "fit.toml").write_text(SELECT_TOML.format(type="SketchedKRR",
                                                         select=select_table))
    assert main(["-q", "fit", str(cli_dir / "fit.toml"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    sel = out["selection"]
    assert sel["route"] == route
    # the same selection through the API
    X, y = _data(300)
    kw = dict(cv=4, gammas=[0.1, 1.0], metric="r2") if route == "cv" else dict(
        validation=0.25, metric="mae", random_state=3)
    ref = select(ds.SketchedKRR(ds.Gaussian(gamma=0.5), sketch=ds.SubSampling(30), lam=LAMS,
                                random_state=0), X[:240], y[:240], **kw)
    assert sel["best"] == ref.best
    assert [r["score"] for r in sel["table"]] == pytest.approx([r["score"] for r in ref.table],
                                                               rel=1e-12)
    assert out["lam"] == ref.best["lam"]
    # the printed table marks the chosen row
    assert main(["-q", "fit", str(cli_dir / "fit.toml")]) == 0
    text = capsys.readouterr().out
    assert f"model selection by {route}" in text and text.count("*") == 1 and "chosen:" in text
    # evaluate at another λ of the path without refitting
    store = str(cli_dir / "fit.zarr")
    assert main(["-q", "evaluate", store, "--json", "--metrics", "rmse", "--lam", "0.1"]) == 0
    at = json.loads(capsys.readouterr().out)["rmse"]
    model = ds.load(store).set_lam(0.1)
    assert at == pytest.approx(metrics.rmse(y[240:], model.predict(X[240:])), rel=1e-12)


@pytest.mark.parametrize("type_, select_table, match", [
    ("SketchedKRR", "cv = 4\nvalidation = 0.2", "select: give exactly one of cv"),
    ("SketchedKRR", "cv = 4\nfolds = 3", r"select.folds: unknown key; allowed keys"),
    ("SketchedKRR", "validation = 2.0", r"select.validation: expected a fraction"),
    ("SketchedKRR", 'cv = 4\nmetric = "accuracy"', "select.metric: unknown metric"),
    ("SketchedKRR", "cv = 4\nseed = -1", "select.seed: expected a non-negative integer"),
])
def test_cli_select_errors_name_the_key(cli_dir, type_, select_table, match):
    from distsketch.cli.config import ConfigError, load_config

    (cli_dir / "bad.toml").write_text(SELECT_TOML.format(type=type_, select=select_table))
    with pytest.raises(ConfigError, match=match):
        load_config(cli_dir / "bad.toml")


@pytest.mark.filterwarnings("ignore::distsketch.model_selection.grid.GridEdgeWarning")  # not about the choice
def test_evaluate_lam_is_validated(cli_dir, capsys):
    from distsketch.cli.commands import main

    (cli_dir / "fit.toml").write_text(SELECT_TOML.format(type="SketchedKRR",
                                                         select="validation = 0.2"))
    assert main(["-q", "fit", str(cli_dir / "fit.toml")]) == 0
    capsys.readouterr()
    assert main(["-q", "evaluate", str(cli_dir / "fit.zarr"), "--lam", "-1"]) == 2
    assert "--lam: expected a positive number" in capsys.readouterr().err
    assert main(["-q", "evaluate", str(cli_dir / "fit.zarr"), "--rank", "2"]) == 2
    assert "--rank: a SketchedKRR has no rank" in capsys.readouterr().err


# --------------------------------------------------------------------------- kernel choice

KERNELS = ["gaussian", "linear", {"name": "polynomial", "degree": 2}]


def _candidate_kernels(X, gammas):
    """The brute-force list of (description, gamma, kernel) for KERNELS × gammas, each on the
    inputs standardised by all of X (what the model's Standardized kernel does)."""
    out = []
    for g in gammas:
        out.append(("gaussian", g, ds.standardized(ds.Gaussian(gamma=g), X)))
    out.append(("linear", None, ds.standardized(ds.Linear(), X)))
    for g in gammas:
        out.append(("polynomial(coef0=1.0, degree=2)", g,
                    ds.standardized(ds.Polynomial(degree=2, gamma=g), X)))
    return out


def _std_model(X, **kw):
    return ds.SketchedKRR(ds.standardized(ds.Gaussian(gamma=0.5), X), sketch=ds.SubSampling(30),
                          lam=LAMS, random_state=1, options=F64, **kw)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::distsketch.model_selection.grid.GridEdgeWarning")  # not about the choice
def test_kernel_choice_validation_route_equals_brute_force_and_refits_the_best():
    X, y = _data()
    gammas = [0.1, 1.0]
    sel = select(_std_model(X), X, y, validation=0.25, metric="mae", kernels=KERNELS,
                 gammas=gammas, random_state=7)
    train, val = split_rows(len(X), 0.25, 7)
    kw = dict(sketch=ds.SubSampling(30), random_state=1, options=F64)
    scores, kernels = {}, {}
    for desc, g, kernel in _candidate_kernels(X, gammas):
        kernels[(desc, g)] = kernel
        for lam in LAMS:
            est = ds.SketchedKRR(kernel, lam=lam, **kw).fit(X[train], y[train])
            scores[(desc, g, lam)] = metrics.mae(y[val], est.predict(X[val]))
    # kernel-major order, a kernel without a width once with gamma None
    assert [(r["kernel"], r["gamma"], r["lam"]) for r in sel.table] == list(scores)
    for row in sel.table:
        assert row["score"] == pytest.approx(scores[(row["kernel"], row["gamma"], row["lam"])],
                                             rel=1e-9)
    desc, g, lam = min(scores, key=scores.get)
    assert sel.best == {"kernel": desc, "gamma": g, "lam": lam}
    assert sel.model.kernel == kernels[(desc, g)] and sel.model.lam_ == lam
    plain = ds.SketchedKRR(kernels[(desc, g)], lam=lam, **kw).fit(X, y)
    assert np.allclose(sel.model.predict(X), plain.predict(X), rtol=0, atol=1e-9)


def test_the_linear_candidate_is_ridge_regression_on_the_standardised_features():
    # f(x) = ȳ + x_sᵀw, w = (X_sᵀX_s + nλ I)⁻¹ X_sᵀ(y − ȳ) on the training rows (n of them):
    # SubSampling(30) spans the 3-dimensional row space, so the sketch loses nothing
    X, y = _data()
    sel = select(_std_model(X), X, y, validation=0.25, metric="rmse",
                 kernels=["linear", {"name": "gaussian", "gamma": 0.3}], random_state=2)
    train, val = split_rows(len(X), 0.25, 2)
    Xs = (X - X.mean(axis=0)) / X.std(axis=0)
    ybar = y[train].mean()
    rows = {r["lam"]: r["score"] for r in sel.table if r["kernel"] == "linear"}
    assert [r["kernel"] for r in sel.table] == ["linear"] * 3 + ["gaussian(gamma=0.3)"] * 3
    for lam in LAMS:
        A = Xs[train].T @ Xs[train] + len(train) * lam * np.eye(3)
        w = np.linalg.solve(A, Xs[train].T @ (y[train] - ybar))
        assert rows[lam] == pytest.approx(metrics.rmse(y[val], ybar + Xs[val] @ w), rel=1e-8)


@pytest.mark.filterwarnings("ignore::distsketch.model_selection.grid.GridEdgeWarning")  # not about the choice
def test_kernel_choice_cv_route_is_the_cv_estimator_per_kernel(tmp_path):
    X, y = _data()
    kernels = [ds.Gaussian(gamma=0.1), ds.Gaussian(gamma=1.0), "linear"]
    sel = select(_std_model(X, store=str(tmp_path / "m.zarr")), X, y, cv=4, metric="rmse",
                 kernels=kernels)
    refs = {}
    for desc, kernel in [("gaussian(gamma=0.1)", ds.Gaussian(gamma=0.1)),
                         ("gaussian(gamma=1.0)", ds.Gaussian(gamma=1.0)),
                         ("linear", ds.Linear())]:
        refs[desc] = ds.SketchedKRRCV(ds.standardized(kernel, X), sketch=ds.SubSampling(30),
                                      lams=LAMS, cv="4:0", random_state=1,
                                      options=F64).fit(X, y)
    assert [r["kernel"] for r in sel.table] == [d for d in refs for _ in LAMS]
    assert "gamma" not in sel.table[0]  # no gammas grid: the width is in the description
    expected = [s for ref in refs.values() for s in ref.cv_results_["mean_test_score"]]
    assert [r["score"] for r in sel.table] == pytest.approx(expected, rel=1e-12)
    best = max(refs, key=lambda d: refs[d].best_score_)
    assert sel.best == {"kernel": best, **refs[best].best_params_}
    # several candidates and a store: the best one refitted into the store
    assert sel.model.kernel == refs[best].kernel
    assert np.allclose(sel.model.predict(X), refs[best].predict(X), rtol=0, atol=1e-9)
    assert np.allclose(ds.load(str(tmp_path / "m.zarr")).predict(X), refs[best].predict(X),
                       rtol=0, atol=1e-9)


@pytest.mark.parametrize("kw, match", [
    ({"kernels": "linear"}, r"select.kernels: expected a non-empty list of kernels"),
    ({"kernels": []}, r"select.kernels: expected a non-empty list of kernels"),
    ({"kernels": ["gausian"]}, r"select.kernels\[0\]: unknown kernel 'gausian'; use one of"),
    ({"kernels": ["linear", {"name": "gaussian", "width": 1}]},
     r"select.kernels\[1\]: unknown parameter 'width' for kernel 'gaussian'"),
    ({"kernels": [{"gamma": 1.0}]}, r"select.kernels\[0\].name: missing kernel name"),
    ({"kernels": [{"name": "gaussian", "gamma": -1}]}, r"select.kernels\[0\]: Gaussian: gamma"),
    ({"kernels": [{"name": "gaussian", "gamma": 0.1}, "linear"], "gammas": [1.0]},
     r"select.kernels\[0\].gamma: given here and by select.gammas; drop it here"),
    ({"kernels": ["linear", "tanimoto"], "gammas": [1.0]},
     r"select.gammas: none of select.kernels has a width gamma"),
    ({"kernels": ["linear", {"name": "linear"}]},
     r"select.kernels\[1\]: the same candidate as select.kernels\[0\] \(linear\)"),
    ({"kernels": [ds.Gaussian(gamma=0.1), ds.Gaussian(gamma=2.0)], "gammas": [0.5]},
     r"select.kernels\[1\]: the same candidate as select.kernels\[0\]"),
])
def test_bad_kernels_are_refused_naming_the_entry(kw, match):
    with pytest.raises(ValueError, match=match):
        check_selection(cv=3, **kw)


def test_kernels_are_validated_before_any_work():
    # X and Y are never touched: the errors come first
    model = ds.SketchedKRR(ds.Gaussian(), sketch=ds.SubSampling(10), lam=LAMS)
    with pytest.raises(ValueError, match=r"select.kernels\[0\]: unknown kernel"):
        select(model, None, None, validation=0.2, kernels=["gausian"])
    with pytest.raises(ValueError, match=r"select.gammas: none of select.kernels"):
        select(model, None, None, cv=3, kernels=["linear"], gammas=[0.1])


# SELECT_TOML for SketchedKRR with standardised inputs
KERNEL_TOML = SELECT_TOML.replace("{type}", "SketchedKRR").replace(
    'test = "test.npz"\n', 'test = "test.npz"\nstandardize = true\n')


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::distsketch.model_selection.grid.GridEdgeWarning")  # not about the choice
@pytest.mark.parametrize("select_table, route", [
    ('cv = 4\nkernels = ["gaussian", {name = "linear"}]\ngammas = [0.1, 1.0]', "cv"),
    ('validation = 0.25\nmetric = "mae"\nkernels = ["gaussian", "linear"]\ngammas = [0.1, 1.0]',
     "validation"),
])
def test_cli_kernel_choice_equals_the_api_and_prints_a_kernel_column(cli_dir, capsys,
                                                                     select_table, route):
    import json

    from distsketch.cli.commands import main

    (cli_dir / "fit.toml").write_text(KERNEL_TOML.format(select=select_table))
    assert main(["-q", "fit", str(cli_dir / "fit.toml"), "--json"]) == 0
    sel = json.loads(capsys.readouterr().out)["selection"]
    X, y = _data(300)
    kw = dict(cv=4) if route == "cv" else dict(validation=0.25, metric="mae")
    ref = select(ds.SketchedKRR(ds.standardized(ds.Gaussian(gamma=0.5), X[:240]),
                                sketch=ds.SubSampling(30), lam=LAMS, random_state=0),
                 X[:240], y[:240], kernels=["gaussian", "linear"], gammas=[0.1, 1.0], **kw)
    assert sel["best"] == ref.best
    assert [(r["kernel"], r["gamma"], r["lam"]) for r in sel["table"]] == [
        (r["kernel"], r["gamma"], r["lam"]) for r in ref.table]
    assert [r["score"] for r in sel["table"]] == pytest.approx([r["score"] for r in ref.table],
                                                               rel=1e-12)
    model = ds.load(str(cli_dir / "fit.zarr"))
    assert np.allclose(model.predict(X[240:]), ref.model.predict(X[240:]), rtol=0, atol=1e-9)
    assert main(["-q", "fit", str(cli_dir / "fit.toml")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].split()[:3] == ["kernel", "gamma", "lam"] and "linear" in lines[1 + 7]
    linear = [ln for ln in lines if ln.startswith("linear")]
    assert len(linear) == 3 and all(ln.split()[1] == "-" for ln in linear)
    assert sum(ln.endswith("*") for ln in lines) == 1
    assert lines[-2].startswith("chosen: kernel = " + ref.best["kernel"])


@pytest.mark.parametrize("select_table, match", [
    ('cv = 4\nkernels = ["gausian"]', r"select.kernels\[0\]: unknown kernel 'gausian'"),
    ('cv = 4\nkernels = "linear"', r"select.kernels: expected a non-empty list"),
    ('cv = 4\nkernels = [{name = "gaussian", gamma = 0.1}]\ngammas = [1.0]',
     r"select.kernels\[0\].gamma: given here and by select.gammas"),
    ('cv = 4\nkernels = ["linear"]\ngammas = [1.0]', r"select.gammas: none of select.kernels"),
])
def test_cli_bad_kernels_name_the_key(cli_dir, select_table, match):
    from distsketch.cli.config import ConfigError, load_config

    (cli_dir / "bad.toml").write_text(KERNEL_TOML.format(select=select_table))
    with pytest.raises(ConfigError, match=match):
        load_config(cli_dir / "bad.toml")
