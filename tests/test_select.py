"""Model selection (distsketch.select, the CLI's ``[select]``): every table row equals a
brute-force fit, the chosen values are the table's best, the final model is the plain fit at
those values."""

from __future__ import annotations

import numpy as np
import pytest

import distsketch as ds
from distsketch import metrics
from distsketch.select import check_selection, select, split_rows

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


def test_cv_route_is_the_one_pass_cv_estimator():
    X, y = _data()
    sel = select(ds.SketchedKRR(ds.Gaussian(gamma=0.5), sketch=ds.SubSampling(30), lam=LAMS,
                                random_state=1, options=F64), X, y, cv=4, metric="r2")
    ref = ds.SketchedKRRCV(ds.Gaussian(gamma=0.5), sketch=ds.SubSampling(30), lams=LAMS, cv=4,
                           scoring="r2", random_state=1, options=F64).fit(X, y)
    assert [r["score"] for r in sel.table] == pytest.approx(list(ref.cv_results_[
        "mean_test_score"]), rel=1e-12)
    assert sel.best == ref.best_params_ and sel.metric == "r2" and sel.greater_is_better
    assert np.array_equal(sel.model.predict(X), ref.predict(X))


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
    reg = ds.SketchedRegressor(ds.Gaussian(), sketch=ds.SubSampling(10), lam=LAMS)
    with pytest.raises(ValueError, match="select.cv: .* for SketchedRegressor use "
                                         "select.validation"):
        select(reg, X, y, cv=3)
    krr = ds.SketchedKRR(ds.Gaussian(), sketch=ds.SubSampling(10), lam=LAMS)
    with pytest.raises(ValueError, match="select.metric: .* for 'mae' use select.validation"):
        select(krr, X, y, cv=3, metric="mae")
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


@pytest.mark.parametrize("select_table, route", [
    ('cv = 4\ngammas = [0.1, 1.0]\nmetric = "r2"', "cv"),
    ('validation = 0.25\nmetric = "mae"\nseed = 3', "validation"),
])
def test_cli_fit_selects_prints_the_table_and_evaluates_at_any_lam(cli_dir, capsys,
                                                                   select_table, route):
    import json

    from distsketch.cli import main

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
    from distsketch.config import ConfigError, load_config

    (cli_dir / "bad.toml").write_text(SELECT_TOML.format(type=type_, select=select_table))
    with pytest.raises(ConfigError, match=match):
        load_config(cli_dir / "bad.toml")


def test_evaluate_lam_is_validated(cli_dir, capsys):
    from distsketch.cli import main

    (cli_dir / "fit.toml").write_text(SELECT_TOML.format(type="SketchedKRR",
                                                         select="validation = 0.2"))
    assert main(["-q", "fit", str(cli_dir / "fit.toml")]) == 0
    capsys.readouterr()
    assert main(["-q", "evaluate", str(cli_dir / "fit.zarr"), "--lam", "-1"]) == 2
    assert "--lam: expected a positive number" in capsys.readouterr().err
    assert main(["-q", "evaluate", str(cli_dir / "fit.zarr"), "--rank", "2"]) == 2
    assert "--rank: a SketchedKRR has no rank" in capsys.readouterr().err
