"""Tuning knobs as options: each field of :class:`distsketch.Tuning`, passed as
``EngineOptions(tuning=Tuning(...))``, changes the behaviour it names; bad values are refused
naming ``options.tuning.<field>``; the defaults are the module constants they replace; options
with tuning pickle, save with a model and leave a store's identity alone (but for the density
rule away from its defaults)."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import json
import logging
import pickle
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

import distsketch as ds
import distsketch.model_selection.fold_algebra
from distsketch.engine.features import FeatureMap
from distsketch.kernels import base as kernel_base
from distsketch.kernels import sparse as kernel_sparse
from distsketch.options import check_options, options_from_dict
from distsketch.solvers.lipschitz.admm import choose_route
from distsketch.solvers.pcg import choose_solver
from distsketch.tuning import store_config
from reference.errors import norm_rel_err

F64 = ds.EngineOptions(block_dtype="float64", block_rows=64)


def _with(**fields) -> ds.EngineOptions:
    return dataclasses.replace(F64, tuning=ds.Tuning(**fields))


def _regression(n=120, d=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    return X, np.sin(X[:, 0]) + 0.1 * rng.normal(size=n)


def _labels(n=120, seed=5):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 4))
    Y = (X[:, :3] @ rng.normal(size=(3, 6)) + 0.3 * rng.normal(size=(n, 6)) > 0.5)
    return X, Y.astype(np.float64)


def _sisokrcv(options, cv=3):
    X, Y = _labels()
    model = ds.SISOKRCV(ds.Gaussian(gamma=0.3), ds.Gaussian(gamma=0.5),
                        input_sketch=ds.SubSampling(30), output_sketch=ds.SubSampling(20),
                        lams=[1e-3, 1e-1], ranks=[2, 6], cv=cv, random_state=0,
                        options=options, scoring="surrogate").fit(X, Y)
    return np.stack([model.cv_results_[f"split{k}_test_score"] for k in range(cv)])


# --------------------------------------------------------------------------- defaults


def test_defaults_are_the_values_the_module_constants_had():
    """The regression anchor: every default is the module constant it replaced (cv.FOLD_ROUTE,
    cv.FOLD_THREADS, cv.FOLD_BAND, cv.MAX_FOLD_BYTES, cv.AUTO_DECODE_BUDGET, admm.AUTO_RANK,
    pcg.AUTO_PCG_PASSES, pcg.AUTO_PASS_FLOPS, kernels._SPARSE_MAX_DENSITY,
    kernels._SPARSE_PANEL_BYTES, solve._EIGEN_CROSSOVER; the device threshold stays the
    backend's own)."""
    assert dataclasses.asdict(ds.Tuning()) == {
        "fold_route": None, "fold_threads": None, "fold_band": 96, "max_fold_bytes": 8 * 2**30,
        "auto_decode_budget": 1e11, "auto_rank": 4000, "auto_pcg_passes": 45,
        "auto_pass_flops": 360, "sparse_max_density": 0.08, "sparse_panel_bytes": 4 << 20,
        "device_sparse_max_density": None, "device_factor_min_m": None,
        "whole_problem_entries": 4000, "eigen_crossover": ((250, 5.2), (500, 7.1), (1000, 7.2), (2000, 19.6), (3000, 18.2)),
    }
    assert ds.EngineOptions().tuning == ds.Tuning()
    assert check_options(None).tuning == ds.Tuning()
    options = ds.EngineOptions()
    assert check_options(options).tuning is options.tuning  # valid: kept as given
    assert importlib.import_module("distsketch.backends.cuda").DEVICE_SPARSE_MAX_DENSITY == 0.02
    assert importlib.import_module("distsketch.backends.cuda").DEVICE_FACTOR_MIN_M == 4096


@pytest.mark.slow
@pytest.mark.parametrize("name", [
    "FOLD_ROUTE", "FOLD_THREADS", "FOLD_BAND", "MAX_FOLD_BYTES", "AUTO_DECODE_BUDGET", "AUTO_RANK",
    "AUTO_PCG_PASSES", "AUTO_PASS_FLOPS", "_SPARSE_MAX_DENSITY", "_SPARSE_PANEL_BYTES",
    "_EIGEN_CROSSOVER", "SECANT"])
def test_the_module_globals_are_gone(name):
    """One place for each value: a leftover global in any package module would be a second
    copy that setting it silently does nothing to (monkeypatch.setattr refuses a missing
    name)."""
    root = Path(distsketch.__file__).resolve().parent
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text())
        defined = {t.id for node in tree.body if isinstance(node, (ast.Assign, ast.AnnAssign))
                   for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
                   if isinstance(t, ast.Name)}
        assert name not in defined, path


# --------------------------------------------------------------------------- validation


@pytest.mark.parametrize("field, value", [
    ("fold_route", "eigen"), ("fold_threads", 0), ("fold_threads", 1.5), ("fold_band", 0),
    ("fold_band", True), ("max_fold_bytes", -1), ("auto_decode_budget", -1.0),
    ("auto_rank", 0), ("auto_pcg_passes", -1), ("auto_pass_flops", float("nan")),
    ("sparse_max_density", 1.5), ("sparse_max_density", "0.1"), ("sparse_panel_bytes", -1),
    ("device_sparse_max_density", -0.1), ("device_factor_min_m", 0),
    ("device_factor_min_m", 2.5), ("whole_problem_entries", -1),
    ("whole_problem_entries", 1.5), ("eigen_crossover", ()),
    ("eigen_crossover", ((500, 1.0), (250, 2.0))), ("eigen_crossover", "fast"),
    ("eigen_crossover", ((250, -1.0),))])
def test_bad_values_are_refused_naming_the_field(field, value):
    with pytest.raises(ValueError, match=rf"^options\.tuning\.{field}: "):
        check_options(ds.EngineOptions(tuning=ds.Tuning(**{field: value})))


def test_a_bad_tuning_stops_a_fit_before_anything_is_written(tmp_path):
    X, y = _regression()
    with pytest.raises(ValueError, match=r"^options\.tuning\.fold_band: must be a positive"):
        ds.SketchedKRR(sketch=ds.SubSampling(10), store=tmp_path / "s.zarr",
                       options=_with(fold_band=0)).fit(X, y)
    assert not (tmp_path / "s.zarr").exists()
    with pytest.raises(ValueError, match=r"^options\.tuning: expected a distsketch\.Tuning"):
        check_options(ds.EngineOptions(tuning={"fold_route": "band"}))


def test_a_crossover_list_is_normalised_to_pairs():
    options = check_options(ds.EngineOptions(tuning=ds.Tuning(eigen_crossover=[[1, 2.0]])))
    assert options.tuning.eigen_crossover == ((1, 2.0),)
    hash(options)  # a frozen, hashable value again


# --------------------------------------------------------------------------- each knob


@pytest.mark.filterwarnings("ignore::distsketch.model_selection.grid.GridEdgeWarning")  # not about the choice
def test_fold_route_forces_the_route_with_the_same_scores(caplog):
    """``fold_route``: every fold by the named route (the fit's log says which), the scores
    the same to rounding (the routes agree to 1e-10 on these sums, test_cv_woodbury.py)."""
    scores = {}
    for route in ("band", "woodbury", None):
        caplog.clear()
        with caplog.at_level(logging.DEBUG, logger="distsketch.model_selection.fold_algebra"):
            scores[route] = _sisokrcv(_with(fold_route=route))
        message = [r.getMessage() for r in caplog.records if "cv folds:" in r.getMessage()]
        assert len(message) == 1
        if route == "band":
            assert message[0] == "cv folds: [] by the Woodbury route, [0, 1, 2] by the band route"
        elif route == "woodbury":
            assert message[0] == "cv folds: [0, 1, 2] by the Woodbury route, [] by the band route"
    assert norm_rel_err(scores["woodbury"], scores["band"]) <= 1e-8
    assert norm_rel_err(scores[None], scores["band"]) <= 1e-8
    assert distsketch.model_selection.fold_algebra.fold_route(976, m=2250, r=2247, r_y=200, n_lams=10,
                                    tuning=ds.Tuning(fold_route="band")) == "band"


@pytest.mark.filterwarnings("ignore::distsketch.model_selection.grid.GridEdgeWarning")
def test_fold_threads_and_band_reach_the_fold_algebra(monkeypatch):
    """``fold_threads``: the folds' thread pool has that many threads (bitwise the same
    scores); ``fold_band``: the band reductions have that bandwidth (the same scores to
    rounding)."""
    import distsketch.linalg.shifted

    pools, bands = [], []
    real_pool, real_band = (distsketch.model_selection.fold_algebra.ThreadPoolExecutor,
                            distsketch.linalg.shifted.BandReduction)

    def pool(workers):
        pools.append(workers)
        return real_pool(workers)

    def band(H, *, band):
        bands.append(band)
        return real_band(H, band=band)

    monkeypatch.setattr(distsketch.model_selection.fold_algebra, "ThreadPoolExecutor", pool)
    monkeypatch.setattr(distsketch.linalg.shifted, "BandReduction", band)
    one = _sisokrcv(_with(fold_route="band", fold_threads=1))
    two = _sisokrcv(_with(fold_route="band", fold_threads=2))
    assert pools == [1, 2] and np.array_equal(one, two)
    assert set(bands) == {96}
    bands.clear()
    narrow = _sisokrcv(_with(fold_route="band", fold_band=3))
    assert set(bands) == {3} and norm_rel_err(narrow, one) <= 1e-8


@pytest.mark.filterwarnings("ignore::distsketch.model_selection.grid.GridEdgeWarning")
def test_max_fold_bytes_is_the_driver_budget():
    """An exact side's per-fold sums (5 folds × 50 × 50 float64 = 100 000 bytes) are refused
    one byte above the budget, naming the option, and fit at it."""
    X, y = _regression(n=50)
    kw = dict(sketch=None, lams=[1e-2], cv=5, random_state=0)
    with pytest.raises(ValueError, match=r"^sketch: the per-fold sums .*options\.tuning\."
                                         r"max_fold_bytes = 0 MiB"):
        ds.SketchedKRRCV(options=_with(max_fold_bytes=100_000 - 1), **kw).fit(X, y)
    ds.SketchedKRRCV(options=_with(max_fold_bytes=100_000), **kw).fit(X, y)


def test_auto_decode_budget_picks_the_scoring():
    from distsketch.model_selection.scoring import auto_scoring

    kw = dict(binary=True, n=10, n_unique=10, settings=10, m_y=10)  # 1e4 multiply-adds
    assert auto_scoring(**kw)[0] == "f1_samples"  # the default budget, 1e11
    assert auto_scoring(**kw, budget=ds.Tuning(auto_decode_budget=9999).auto_decode_budget)[0] \
        == "surrogate"


def test_auto_rank_moves_the_admm_threshold():
    """``auto_rank``: ``solver="auto"`` of the Lipschitz machines takes ADMM from that many
    whitened features."""
    from distsketch.losses.radial import Huber

    assert choose_route("auto", 3999) == "newton" and choose_route("auto", 4000) == "admm"
    assert choose_route("auto", 10, tuning=ds.Tuning(auto_rank=10)) == "admm"
    assert choose_route("auto", 9, tuning=ds.Tuning(auto_rank=10)) == "newton"
    assert choose_route("newton", 10, tuning=ds.Tuning(auto_rank=1)) == "newton"
    X, y = _regression(n=100)
    kw = dict(loss=Huber(0.5), sketch=ds.SubSampling(20), solver="auto", random_state=0)
    assert ds.SketchedRegressor(ds.Gaussian(0.5), options=F64, **kw).fit(X, y).solver_ == "newton"
    est = ds.SketchedRegressor(ds.Gaussian(0.5), options=_with(auto_rank=1), **kw).fit(X, y)
    assert est.solver_ == "admm"


def test_auto_pcg_passes_moves_the_pcg_threshold():
    """``auto_pcg_passes``, ``auto_pass_flops``: direct while ``2nm² ≤ passes · n·m · flops``;
    with PCG's passes free, ``solver="auto"`` takes PCG (the same model to its tol)."""
    sub = ds.SubSampling(100)
    assert choose_solver("auto", n=1000, m=100, sketch=sub, store=None) == "direct"
    for tuning in (ds.Tuning(auto_pcg_passes=0), ds.Tuning(auto_pass_flops=0),
                   ds.Tuning(auto_pcg_passes=1, auto_pass_flops=199)):
        assert choose_solver("auto", n=1000, m=100, sketch=sub, store=None,
                             tuning=tuning) == "pcg"
    assert choose_solver("auto", n=1000, m=100, sketch=sub, store=None,
                         tuning=ds.Tuning(auto_pcg_passes=1, auto_pass_flops=200)) == "direct"
    X, y = _regression()
    kw = dict(sketch=ds.SubSampling(20), lam=1e-3, solver="auto", tol=1e-12, random_state=0)
    direct = ds.SketchedKRR(ds.Gaussian(0.5), options=F64, **kw).fit(X, y)
    pcg = ds.SketchedKRR(ds.Gaussian(0.5), options=_with(auto_pcg_passes=0), **kw).fit(X, y)
    assert (direct.solver_, pcg.solver_) == ("direct", "pcg")
    assert norm_rel_err(pcg.predict(X), direct.predict(X)) <= 1e-8


def test_sparse_max_density_keeps_or_densifies_with_the_same_values(monkeypatch):
    """``sparse_max_density`` 1 keeps every sparse operand sparse, 0 densifies each: the same
    kernel values to rounding, directly (``kernels.tuned``) and in a fit's pass, whose tasks
    get the value from their feature maps (on whatever thread or worker runs them)."""
    rng = np.random.default_rng(3)
    X = sp.csr_array(sp.random(150, 40, density=0.1, random_state=rng, format="csr"))
    y = np.asarray(X.sum(axis=1)).ravel() + 0.1 * rng.normal(size=150)
    kernel = ds.Gaussian(0.5)
    want = kernel(X.toarray(), X[:30].toarray())
    seen = []
    real = kernel_sparse.cheaper_form

    def spy(A, be):
        out = real(A, be)
        if sp.issparse(A):
            seen.append(sp.issparse(out))
        return out

    monkeypatch.setattr(kernel_base, "cheaper_form", spy)  # where Kernel looks it up
    for density, kept in ((1.0, True), (0.0, False)):
        seen.clear()
        with kernel_sparse.tuned(ds.Tuning(sparse_max_density=density)):
            got = kernel(X, X[:30])
        assert seen and set(seen) == {kept}
        assert norm_rel_err(got, want) <= 1e-14
    # a fit: every sparse block of the pass kept (1) or densified (0); the model to rounding
    models = {}
    for density, kept in ((1.0, True), (0.0, False)):
        seen.clear()
        models[kept] = ds.SketchedKRR(kernel, sketch=ds.SubSampling(30), lam=1e-3,
                                      random_state=0,
                                      options=_with(sparse_max_density=density)).fit(X, y)
        assert seen and set(seen) == {kept}
    Xd = X.toarray()
    assert norm_rel_err(models[True].predict(Xd), models[False].predict(Xd)) <= 1e-10
    # the value travels with the feature map (pickled into every task)
    fmap = FeatureMap(kernel, X[:30], None, 16, ds.Tuning(sparse_max_density=1.0))
    assert pickle.loads(pickle.dumps(fmap)).tuning == ds.Tuning(sparse_max_density=1.0)
    seen.clear()
    fmap.block(X)
    assert seen and set(seen) == {True}


def test_sparse_panel_bytes_sets_the_panels():
    """``sparse_panel_bytes``: the sparse route's panels of right-operand columns (64 columns
    at least; 0: one CSR × CSR product)."""
    assert kernel_sparse._panels(10, 500) == [(0, 500)]  # 4 MiB: 43 690 columns of d + 2 = 12
    with kernel_sparse.tuned(ds.Tuning(sparse_panel_bytes=1)):
        assert kernel_sparse._panels(10, 500) == [(c, min(c + 64, 500)) for c in range(0, 500, 64)]
    with kernel_sparse.tuned(ds.Tuning(sparse_panel_bytes=0)):
        assert kernel_sparse._panels(10, 500) == [(0, 500)]
        with kernel_sparse.tuned(None):  # None leaves the current ones
            assert kernel_sparse._tuning().sparse_panel_bytes == 0
    assert kernel_sparse._tuning() == ds.Tuning()  # restored on exit


@pytest.mark.filterwarnings("ignore::distsketch.model_selection.grid.GridEdgeWarning")
def test_eigen_crossover_picks_the_driver_route():
    """``eigen_crossover``: a λ path longer than the crossover is solved from one
    eigendecomposition (``InputSolution.V`` set), a shorter one by a Cholesky factorisation
    per λ; the same scores to rounding."""
    from distsketch.solvers.direct import eigen_pays

    assert not eigen_pays(2, 500) and eigen_pays(8, 500)  # the default: 7.1 at r = 500
    assert eigen_pays(2, 500, tuning=ds.Tuning(eigen_crossover=((1, 1.5),)))
    X, y = _regression()
    kw = dict(sketch=ds.SubSampling(20), lams=[1e-3, 1e-1], cv=3, random_state=0)
    plain = ds.SketchedKRRCV(ds.Gaussian(0.5), options=F64, **kw).fit(X, y)
    eigen = ds.SketchedKRRCV(ds.Gaussian(0.5), options=_with(eigen_crossover=((1, 1.5),)),
                             **kw).fit(X, y)
    assert plain.input_solution_.V is None and eigen.input_solution_.V is not None
    assert norm_rel_err(eigen.predict(X), plain.predict(X)) <= 1e-8
    assert np.allclose(eigen.cv_results_["mean_test_score"], plain.cv_results_["mean_test_score"],
                       rtol=1e-10, atol=0)


# --------------------------------------------------------------------------- persistence


def test_options_with_tuning_pickle_and_round_trip_a_saved_model(tmp_path):
    tuning = ds.Tuning(fold_threads=2, sparse_max_density=0.5,
                       eigen_crossover=((100, 3.0), (200, 4.5)))
    options = dataclasses.replace(F64, tuning=tuning)
    assert pickle.loads(pickle.dumps(options)) == options
    assert options_from_dict(json.loads(json.dumps(dataclasses.asdict(options)))) == options
    # options saved before Tuning existed load with the defaults
    old = {k: v for k, v in dataclasses.asdict(F64).items() if k != "tuning"}
    assert options_from_dict(old) == F64
    with pytest.raises(ValueError, match=r"^options\.tuning: unknown field\(s\) \['secant'\]"):
        options_from_dict({"tuning": {"secant": True}})
    X, y = _regression()
    model = ds.SketchedKRR(ds.Gaussian(0.5), sketch=ds.SubSampling(20), lam=1e-3,
                           random_state=0, options=options).fit(X, y)
    model.save(tmp_path / "m.zarr")
    loaded = ds.load(tmp_path / "m.zarr")
    assert loaded.get_params()["options"] == options
    assert np.array_equal(loaded.predict(X), model.predict(X))


def test_tuning_leaves_a_stores_identity_alone_but_for_the_density_rule(tmp_path, caplog):
    """A store written at the defaults resumes under any tuning that does not touch the pass's
    blocks (its recorded configuration has no tuning at all: stores written before Tuning
    existed resume); the density rule away from its defaults is another pass (as another
    ``gram_chunk`` is), refused without ``overwrite``."""
    from distsketch.engine.storeguard import StoreError

    assert store_config(ds.Tuning()) == {}
    assert store_config(ds.Tuning(fold_route="band", fold_threads=1, fold_band=8,
                                  max_fold_bytes=1, auto_decode_budget=1.0, auto_rank=1,
                                  auto_pcg_passes=0, auto_pass_flops=0, device_factor_min_m=1,
                                  eigen_crossover=((1, 1.0),))) == {}
    assert store_config(ds.Tuning(sparse_max_density=1.0)) == {"block_tuning": {
        "sparse_max_density": 1.0, "sparse_panel_bytes": 4 << 20,
        "device_sparse_max_density": None}}
    X, y = _regression()
    store = tmp_path / "s.zarr"
    kw = dict(sketch=ds.SubSampling(20), lam=1e-3, random_state=0, store=store)
    first = ds.SketchedKRR(ds.Gaussian(0.5), options=F64, **kw).fit(X, y)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="distsketch.engine.store"):
        again = ds.SketchedKRR(ds.Gaussian(0.5), options=_with(fold_threads=1, auto_rank=7,
                                                                max_fold_bytes=1), **kw).fit(X, y)
    assert "resuming the pass recorded there" in caplog.text
    assert np.array_equal(again.predict(X), first.predict(X))
    with pytest.raises(StoreError, match=r"differs in \['block_tuning'\]"):
        ds.SketchedKRR(ds.Gaussian(0.5), options=_with(sparse_max_density=1.0), **kw).fit(X, y)


def test_a_config_file_sets_tuning_as_an_engine_table(tmp_path):
    """``[engine.tuning]`` in a TOML config: a :class:`Tuning` (lists as pairs), its errors
    naming ``engine.tuning.<field>``."""
    from confighelpers import CONFIG, toy_data
    from distsketch.cli.config import ConfigError, load_config

    toy_data(tmp_path)
    table = '\n[engine.tuning]\nfold_threads = 1\neigen_crossover = [[100, 3.5], [200, 4.0]]\n'
    (tmp_path / "fit.toml").write_text(CONFIG + table)
    cfg = load_config(tmp_path / "fit.toml")
    assert cfg.options.tuning == ds.Tuning(fold_threads=1,
                                           eigen_crossover=((100, 3.5), (200, 4.0)))
    assert cfg.options.block_rows == 64
    (tmp_path / "bad.toml").write_text(CONFIG + "\n[engine.tuning]\nfold_route = \"eigen\"\n")
    with pytest.raises(ConfigError, match=r"^engine\.tuning\.fold_route: expected None"):
        load_config(tmp_path / "bad.toml")
    (tmp_path / "unknown.toml").write_text(CONFIG + "\n[engine.tuning]\nsecant = true\n")
    with pytest.raises(ConfigError, match=r"^engine\.tuning: unknown field\(s\) \['secant'\]"):
        load_config(tmp_path / "unknown.toml")
