"""Solver routes as objects (distsketch.solvers.routes): docs/guide/extending.md's "How to add a solver route"
followed in this file, editing no package file — plain gradient descent on the ridge objective
over the pass's sums fits SketchedKRR to the closed form — and the one resolver of ``solver=``."""

from __future__ import annotations

import pickle
import tarfile
from pathlib import Path

import numpy as np
import pytest

import distsketch as ds
from distsketch.linalg.solve import whitening
from distsketch.solvers.routes import ROUTES, CoefTable, Route, RouteFit, resolve_route
from reference.closed_forms import sketched_krr_predict


class GradientDescent(Route):
    """Plain gradient descent on SketchedKRR's objective, from the streaming pass's sums.

    In the whitened coordinates ``β = T γ`` (``Tᵀ B T = I``, ``B = R K Rᵀ``) the objective
    ``½[(1/n)‖y − Cβ‖² + λ βᵀBβ]`` has the gradient ``(1/n)(Tᵀ G T γ − Tᵀ b) + λγ``
    (``G = CᵀC``, ``b = Cᵀy``): steps of ``1/L``, ``L`` its largest curvature, until the
    gradient is ``tol`` of its value at 0. The recipe: a ``name`` (registers it), ``accepts``
    (the models it serves), ``run`` returning a RouteFit with a CoefTable of the model's
    coefficients (SketchedKRR: ``dual_coef_ = R_mixᵀ β`` on its landmarks).
    """

    name = "test_gradient_descent"

    def __init__(self, tol: float = 1e-13, max_iter: int = 200_000):
        self.tol = tol
        self.max_iter = max_iter

    def accepts(self, est) -> bool:
        return isinstance(est, ds.SketchedKRR) and not est.fit_intercept

    def run(self, est, spec) -> RouteFit:
        res = est.run_pass(spec)  # the model's pass: G, B, b (no intercept)
        G, B = (np.asarray(res.sums[k], dtype=np.float64) for k in ("G", "B"))
        b = np.asarray(res.sums["b"], dtype=np.float64).reshape(len(G), -1)
        T = whitening(B, rtol=spec.options.eig_rtol, argument="kernel")
        Gw, bw = T.T @ G @ T / res.n, T.T @ b / res.n
        coefs, iters = [], []
        for lam in spec.lams:
            step = 1.0 / (np.linalg.eigvalsh(Gw)[-1] + lam)
            gamma = np.zeros_like(bw)
            for it in range(1, self.max_iter + 1):
                grad = Gw @ gamma - bw + lam * gamma
                if np.linalg.norm(grad) <= self.tol * np.linalg.norm(bw):
                    break
                gamma -= step * grad
            coefs.append(res.x_sketch.transpose_dot(T @ gamma))
            iters.append(it)
        return RouteFit.from_pass(res, solver=self.name,
                                  path=CoefTable(spec.lams, np.stack(coefs), iters))


def _data(n=240, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    y = np.sin(X[:, 0]) + 0.5 * X[:, 1] + 0.05 * rng.normal(size=n)
    return X, y


KW = dict(sketch=ds.SubSampling(40), lam=[1e-1, 1e-2], fit_intercept=False, random_state=0,
          options=ds.EngineOptions(block_dtype="float64"))


def test_a_route_from_this_file_fits_sketched_krr_to_the_closed_form(tmp_path):
    X, y = _data()
    kernel = ds.Gaussian(gamma=0.3)
    gd = ds.SketchedKRR(kernel, solver=GradientDescent(), **KW).fit(X, y)
    direct = ds.SketchedKRR(kernel, solver="direct", **KW).fit(X, y)
    assert gd.solver_ == "test_gradient_descent" and direct.solver_ == "direct"
    assert np.array_equal(gd.landmarks_, direct.landmarks_)  # the same realised sketch
    Xq = _data(60, seed=1)[0]
    R = gd.sketch_.matrix()
    for lam in KW["lam"]:
        gd.set_lam(lam)
        direct.set_lam(lam)
        p_gd, p_direct = gd.predict(Xq), direct.predict(Xq)
        # GD stops at a gradient 1e-13 of ‖Tᵀb‖/n; the condition number is at most
        # (‖G‖/n + λ)/λ ≤ 1e2 here: the coefficients agree to ~1e-11
        assert np.max(np.abs(p_gd - p_direct)) <= 1e-9 * np.max(np.abs(p_direct))
        assert gd.n_iter_ > 1
        ref = sketched_krr_predict(kernel, R, X, y, Xq, lam)  # the naive dense formula
        assert np.max(np.abs(p_gd - ref)) <= 1e-8 * np.max(np.abs(ref))
    # a table serves its fitted λ only
    with pytest.raises(ValueError, match="lam: 0.5 was not fitted"):
        gd.set_lam(0.5)
    # saved and loaded: the route recorded by its registered name, the same predictions
    gd2 = ds.SketchedKRR(kernel, solver=GradientDescent(), store=str(tmp_path / "gd.zarr"),
                         **KW).fit(X, y)
    loaded = ds.load(str(tmp_path / "gd.zarr"))
    assert loaded.solver_ == "test_gradient_descent"
    assert isinstance(loaded.solver, GradientDescent) and loaded.solver == GradientDescent()
    assert np.array_equal(loaded.predict(Xq), gd2.predict(Xq))
    assert list(loaded.n_iters_) == list(gd2.n_iters_)


def test_a_registered_route_is_found_by_its_name_and_is_an_ordinary_parameter():
    assert ROUTES["test_gradient_descent"] is GradientDescent
    X, y = _data()
    by_name = ds.SketchedKRR(ds.Gaussian(gamma=0.3), solver="test_gradient_descent", **KW)
    by_object = ds.SketchedKRR(ds.Gaussian(gamma=0.3), solver=GradientDescent(), **KW)
    assert isinstance(resolve_route(by_name, X), GradientDescent)
    assert np.array_equal(by_name.fit(X, y).dual_coef_, by_object.fit(X, y).dual_coef_)
    clone = pickle.loads(pickle.dumps(by_object))
    assert clone.solver == by_object.solver and clone.solver is not by_object.solver
    sklearn = pytest.importorskip("sklearn")
    assert sklearn.base.clone(by_object).solver == GradientDescent()


def test_a_route_a_model_cannot_take_is_refused_before_anything_is_written(tmp_path):
    X, y = _data()
    store = tmp_path / "refused.zarr"
    with pytest.raises(ValueError, match="solver: SketchedRegressor cannot take the route "
                                         "GradientDescent"):
        ds.SketchedRegressor(ds.Gaussian(gamma=0.3), solver=GradientDescent(),
                             store=str(store)).fit(X, y)
    with pytest.raises(ValueError, match="solver: SketchedKRR cannot take"):
        ds.SketchedKRR(ds.Gaussian(gamma=0.3), solver=GradientDescent()).fit(X, y)  # intercept
    with pytest.raises(ValueError, match="solver: expected 'auto', 'direct' or 'pcg'"):
        ds.SketchedKRR(ds.Gaussian(gamma=0.3), solver="newton").fit(X, y)

    class Unnamed(GradientDescent):
        name = None

    with pytest.raises(ValueError, match="has no registered name"):
        ds.SketchedKRR(ds.Gaussian(gamma=0.3), solver=Unnamed(), store=str(store),
                       **KW).fit(X, y)
    assert not store.exists()


def test_every_route_gives_a_model_one_shape():
    """The direct, PCG and a user's route leave the same fitted attributes (the λ path
    ``path_`` with the same methods), so prediction, set_lam and saving never ask which."""
    X, y = _data()
    fits = {solver: ds.SketchedKRR(ds.Gaussian(gamma=0.3), solver=solver, **KW).fit(X, y)
            for solver in ("direct", "pcg", GradientDescent())}
    names = [set(k for k in vars(m) if k.endswith("_") and not k.startswith("_"))
             for m in fits.values()]
    assert names[0] == names[1] == names[2]
    for m in fits.values():
        for method in ("coef", "fitted_lam", "n_iter", "iterations"):
            assert callable(getattr(m.path_, method))
    assert fits["direct"].path_.any_lam and not fits["pcg"].path_.any_lam


#: Models saved by release 0.1.0, before solver routes were objects (its direct and PCG
#: routes, SISOKR with a reduced rank, the Newton and PCG regressors), and what they predicted
#: then (expected.npz, the same archive; float64 blocks, SubSampling sketches of 120 rows).
SAVED = Path(__file__).parent / "data" / "saved_models_0.1.0.tar.gz"


@pytest.mark.slow
@pytest.mark.parametrize("name", ["krr_direct", "krr_pcg", "sisokr_direct", "sisokr_pcg",
                                  "regressor_newton", "regressor_pcg"])
def test_models_saved_before_routes_were_objects_load_and_predict_the_same(tmp_path, name):
    with tarfile.open(SAVED) as tar:
        tar.extractall(tmp_path, filter="data")
    expected = np.load(tmp_path / "expected.npz")
    model = ds.load(str(tmp_path / f"{name}.zarr"))
    Xq = expected["X"][:7]
    got = (model.score_candidates(Xq, expected["Y"][:9]) if name.startswith("sisokr")
           else model.predict(Xq))
    assert np.array_equal(np.asarray(got), expected[name])
    assert model.solver_ == name.split("_")[1]
    if name == "krr_pcg":  # a table: its fitted λ only
        model.set_lam(1e-2)
        with pytest.raises(ValueError, match="lam: 0.5 was not fitted"):
            model.set_lam(0.5)
