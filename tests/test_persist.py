"""Saved models: identical predictions in a fresh process; incomplete or tampered stores refused."""

import json
import subprocess
import sys

import numpy as np
import pytest
import zarr

import distsketch as ds


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(150, 4))
    Y = (rng.random((150, 6)) < 0.4).astype(float)
    Xq = rng.normal(size=(20, 4))
    return X, Y, Xq


MODELS = {
    "sisokr": lambda s: ds.SISOKR(ds.Gaussian(gamma=0.5), ds.Gaussian(gamma=0.5),
                                  input_sketch=ds.SubSampling(40), output_sketch=ds.GaussianSketch(20),
                                  lam=[1e-3, 1e-2], random_state=0, store=s),
    "iokr": lambda s: ds.SISOKR(ds.Gaussian(gamma=0.5), ds.Gaussian(gamma=0.5), lam=1e-3, store=s),
    "linear-output": lambda s: ds.SISOKR(ds.Laplacian(gamma=0.3), ds.Linear(),
                                         input_sketch=ds.Accumulation(30, q=2), random_state=1, store=s),
    "krr-standardized": lambda s: ds.SketchedKRR(ds.Standardized(ds.Matern(nu=2.5), np.ones(4), 2 * np.ones(4)),
                                                 sketch=ds.PSparsified(30, p=0.2), lam=[1e-2, 1e-4],
                                                 random_state=2, store=s),
}


def _predict(model, Xq):
    if isinstance(model, ds.SISOKR) and model.candidates_ is not None:
        return np.concatenate([model.predict_topk(Xq, k=3)[1], model.predict(Xq)], axis=1)
    return np.asarray(model.predict(Xq)).reshape(len(Xq), -1)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(MODELS))
def test_saved_model_predicts_identically_in_a_fresh_process(tmp_path, data, name):
    X, Y, Xq = data
    target = Y[:, 0] if name.startswith("krr") else Y
    model = MODELS[name](str(tmp_path / "fit.zarr")).fit(X, target)
    np.save(tmp_path / "Xq.npy", Xq)
    code = ("import sys, numpy as np, distsketch as ds\n"
            "sys.path.insert(0, sys.argv[3])\n"
            "from test_persist import _predict\n"
            "m = ds.load(sys.argv[1])\n"
            "np.save(sys.argv[2], _predict(m, np.load(sys.argv[2].replace('out', 'Xq'))))\n")
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "fit.zarr"), str(tmp_path / "out.npy"),
                    str(__import__("pathlib").Path(__file__).parent)], check=True)
    np.testing.assert_array_equal(np.load(tmp_path / "out.npy"), _predict(model, Xq))
    loaded = ds.load(tmp_path / "fit.zarr")
    assert loaded.get_params(deep=False).keys() == model.get_params(deep=False).keys()
    if len(model.lams_) > 1:  # the λ path survives: set_lam works after loading
        np.testing.assert_array_equal(_predict(loaded.set_lam(model.lams_[1]), Xq),
                                      _predict(model.set_lam(model.lams_[1]), Xq))


@pytest.mark.slow
def test_model_fitted_without_store_can_be_saved(tmp_path, data):
    X, Y, Xq = data
    model = MODELS["sisokr"](None).fit(X, Y)
    assert model.store_ is None
    model.save(tmp_path / "m.zarr")
    np.testing.assert_array_equal(_predict(ds.load(tmp_path / "m.zarr"), Xq), _predict(model, Xq))
    with pytest.raises(ValueError, match="already holds a saved model; pass overwrite=True"):
        model.save(tmp_path / "m.zarr")
    model.save(tmp_path / "m.zarr", overwrite=True)


def _fitted_store(tmp_path, data):
    X, Y, _ = data
    MODELS["sisokr"](str(tmp_path / "s.zarr")).fit(X, Y)
    return tmp_path / "s.zarr"


def _set_meta(path, **changes):
    g = zarr.open_group(str(path), mode="r+")
    meta = dict(g.attrs["distsketch"])
    meta.update(changes)
    g.attrs["distsketch"] = meta


def test_tampered_array_is_refused(tmp_path, data):
    path = _fitted_store(tmp_path, data)
    arr = zarr.open_array(str(path), path="model/operator", mode="r+")
    values = arr[:]
    values[0, 0] += 1e-9
    arr[:] = values
    with pytest.raises(ValueError, match="'operator' does not match its recorded checksum"):
        ds.load(path)


def test_missing_array_is_refused(tmp_path, data):
    path = _fitted_store(tmp_path, data)
    del zarr.open_group(str(path), mode="r+")["model"]["H"]
    with pytest.raises(ValueError, match="missing array 'H'"):
        ds.load(path)


def test_other_format_version_is_refused(tmp_path, data):
    path = _fitted_store(tmp_path, data)
    _set_meta(path, format_version=99)
    with pytest.raises(ValueError, match="written with store format 99.*refit"):
        ds.load(path)


@pytest.mark.slow
@pytest.mark.parametrize("status", ["pass", "pass-complete", "saving-model"])
def test_incomplete_store_is_never_loadable(tmp_path, data, status):
    path = _fitted_store(tmp_path, data)
    _set_meta(path, status=status)
    with pytest.raises(ValueError, match=f"incomplete fit \\(status '{status}'\\)"):
        ds.load(path)


def test_failed_pass_store_is_not_loadable(tmp_path, data):
    X, Y, _ = data
    bad = X.copy()
    import dask.array as da

    bad[77, 0] = np.nan
    with pytest.raises(ValueError, match="X: contains NaN"):
        MODELS["sisokr"](str(tmp_path / "f.zarr")).fit(da.from_array(bad, chunks=(30, 4)), Y)
    with pytest.raises(ValueError, match="incomplete fit"):
        ds.load(tmp_path / "f.zarr")


def test_not_a_store(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        ds.load(tmp_path / "nowhere.zarr")
    zarr.open_group(str(tmp_path / "empty.zarr"), mode="w")
    with pytest.raises(ValueError, match="is not a distsketch store"):
        ds.load(tmp_path / "empty.zarr")
    (tmp_path / "data.csv").write_text("1,2\n")
    with pytest.raises(ValueError, match=r"data.csv' is a file, not a store"):
        ds.load(tmp_path / "data.csv")


def test_saved_params_are_json(tmp_path, data):
    path = _fitted_store(tmp_path, data)
    meta = zarr.open_group(str(path), mode="r")["model"].attrs["distsketch_model"]
    json.dumps(meta)
    assert meta["params"]["input_sketch"] == {"sketch": {"name": "subsampling", "m": 40}}
    assert meta["state"]["input_sketch"]["seed"] == ds.load(path).input_sketch_.seed
