"""``distsketch update STORE --input NEW`` and ``--forget BATCH``: appended rows read with the
fit's ``[data]`` options (columns by name, missing values, standardisation), in every input
format ``fit`` reads, equal to the Python ``partial_fit`` / ``forget`` of the stored model."""

import shutil

import numpy as np
import pytest
import zarr

import distsketch as ds
from confighelpers import KRR, regression_csv
from distsketch.cli.commands import main

DATA = ('train = "train.csv"\ntarget_columns = ["target"]\nstandardize = true\n'
        'missing = "impute-mean"')
F64 = '\n[engine]\nblock_dtype = "float64"\n'


def fitted(tmp_path, data=DATA, store="krr.zarr"):
    """A CLI fit of the KRR config on 150 rows of train.csv; the new rows (60, one of them
    with a missing value) in new.csv; returns the store's path and the new rows."""
    regression_csv(tmp_path / "train.csv", 150, seed=0)
    Xn, yn = regression_csv(tmp_path / "new.csv", 60, seed=1, nan_at=(7, 2))
    (tmp_path / "fit.toml").write_text(KRR.format(data=data, store=store) + F64)
    assert main(["-q", "fit", str(tmp_path / "fit.toml")]) == 0
    return tmp_path / store, Xn, yn


def imputed(model_store, X):
    """``X`` with its missing values replaced by the training means the fit stored (if any)."""
    means = zarr.open_group(str(model_store), mode="r").attrs["distsketch_cli"]["impute_means"]
    return X if means is None else np.where(np.isnan(X), np.asarray(means), X)


def by_python(store, X, y, tmp_path):
    """The stored model (a copy of the store, so the CLI's is untouched) appended in Python
    without a store: the reference for the CLI's update."""
    copy = tmp_path / "copy.zarr"
    shutil.copytree(store, copy)
    model = ds.load(copy)
    model.set_params(store=None)
    return model.partial_fit(imputed(store, X), y)


def test_update_appends_rows_read_with_the_fits_data_options(tmp_path, capsys):
    store, Xn, yn = fitted(tmp_path)
    before = ds.load(store)
    expected = by_python(store, Xn, yn, tmp_path)
    capsys.readouterr()
    assert main(["-q", "update", str(store), "--input", str(tmp_path / "new.csv")]) == 0
    out = capsys.readouterr().out
    assert "appended batch 1 (60 rows)" in out and "210 rows in 2 batches" in out, out
    after = ds.load(store)
    assert [b["rows"] for b in after.batches_] == [150, 60]
    Xt, _ = regression_csv(tmp_path / "test.csv", 40, seed=2)
    np.testing.assert_allclose(after.predict(Xt), expected.predict(Xt), rtol=1e-12, atol=0)
    assert np.abs(after.predict(Xt) - before.predict(Xt)).max() > 1e-6  # the rows count
    # the same rows again are refused (naming the option), appended with --repeat
    assert main(["update", str(store), "--input", str(tmp_path / "new.csv")]) == 2
    assert "--repeat" in capsys.readouterr().err
    assert [b["rows"] for b in ds.load(store).batches_] == [150, 60]
    # info lists the batches; forgetting batch 1 gives back the fitted model
    assert main(["info", str(store)]) == 0
    info = capsys.readouterr().out
    for b in after.batches_:
        assert f"batch {b['batch']:<8} {b['rows']:,} rows" in info and b["digest"] in info
    assert main(["-q", "update", str(store), "--forget", "1"]) == 0
    assert "forgot batch 1" in capsys.readouterr().out
    back = ds.load(store)
    assert [b["batch"] for b in back.batches_] == [0]
    np.testing.assert_allclose(back.predict(Xt), before.predict(Xt), rtol=1e-12, atol=0)


def write(path, X, y):
    """Rows ``(X, y)`` in the format of ``path``'s extension, as ``fit`` reads them."""
    kind = path.suffix[1:]
    if kind == "npz":
        np.savez(path, X=X, Y=y)
    elif kind == "zarr":
        group = zarr.open_group(str(path), mode="w")
        group.create_array("X", data=X)
        group.create_array("Y", data=y)
    else:  # ARFF: the target is the last attribute ([data] n_targets = 1)
        header = "@relation r\n" + "".join(f"@attribute {c} numeric\n" for c in "abc")
        path.write_text(header + "@attribute target numeric\n@data\n" + "\n".join(
            ",".join(map(repr, map(float, r))) for r in np.column_stack([X, y])) + "\n")


@pytest.mark.slow
@pytest.mark.parametrize(("train", "new"), [("npz", "npz"), ("npz", "zarr"), ("zarr", "npz"),
                                            ("arff", "arff")])
def test_every_input_format_appends_the_same_rows(tmp_path, train, new, capsys):
    """A fit on one file format, rows appended from a file of that or another format ``fit``
    reads with the same ``[data]`` options: the model the Python ``partial_fit`` gives."""
    rng = np.random.default_rng(4)
    X = rng.normal(size=(200, 3))
    y = np.sin(X[:, 0]) + 0.5 * X[:, 1] + 0.1 * rng.normal(size=200)
    write(tmp_path / f"train.{train}", X[:150], y[:150])
    write(tmp_path / f"more.{new}", X[150:], y[150:])
    data = f'train = "train.{train}"\nstandardize = true' + ("\nn_targets = 1" if train == "arff" else "")
    (tmp_path / "fit.toml").write_text(KRR.format(data=data, store="krr.zarr") + F64)
    assert main(["-q", "fit", str(tmp_path / "fit.toml")]) == 0
    store = tmp_path / "krr.zarr"
    expected = by_python(store, X[150:], y[150:], tmp_path)
    assert main(["-q", "update", str(store), "--input", str(tmp_path / f"more.{new}")]) == 0, \
        capsys.readouterr().err
    got = ds.load(store)
    assert [b["rows"] for b in got.batches_] == [150, 50]
    np.testing.assert_allclose(got.predict(X), expected.predict(X), rtol=1e-12)
    fresh = ds.SketchedKRR(got.kernel_, sketch=got.sketch_, lam=got.lam,
                           options=ds.EngineOptions(block_dtype="float64")).fit(X, y)
    np.testing.assert_allclose(np.ravel(got.predict(X)), fresh.predict(X), rtol=1e-10)


def test_update_refusals_exit_2_with_one_line(tmp_path, capsys):
    store, Xn, _ = fitted(tmp_path)
    np.savetxt(tmp_path / "features.csv", Xn[:, :2], delimiter=",", header="a,b", comments="")
    cases = [
        ([], "give --input FILE (rows to append) or --forget BATCH"),
        (["--forget", "3"], "batch: expected one of the batches held [0], got 3"),
        (["--forget", "0"], "batch 0 is the only one held"),
        (["--input", str(tmp_path / "missing.csv")], "missing.csv"),
        (["--input", str(tmp_path / "features.csv")], "--input"),
    ]
    for args, message in cases:
        capsys.readouterr()
        assert main(["update", str(store), *args]) == 2, args
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("distsketch: error: "), err
        assert message in err[0], err[0]
    assert [b["rows"] for b in ds.load(store).batches_] == [150]


def test_update_json_is_one_object_with_the_batches(tmp_path, capsys):
    import json

    store, _, _ = fitted(tmp_path)
    capsys.readouterr()
    assert main(["-q", "update", str(store), "--input", str(tmp_path / "new.csv"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["model"] == "SketchedKRR" and out["rows"] == 210 and out["store"] == str(store)
    assert [b["rows"] for b in out["batches"]] == [150, 60]
    assert out["batches"] == ds.load(store).batches_


def test_update_of_a_model_solved_by_sweeps_equals_its_python_append(tmp_path, capsys):
    """A κ-Huber regressor (Newton's sweeps) fitted by the command line: ``update`` re-solves
    over the store's blocks and kept targets as ``partial_fit`` on the loaded model does."""
    config = KRR.replace('type = "SketchedKRR"', 'type = "SketchedRegressor"\nloss = "huber"'
                         '\ntol = 1e-10\nmax_iter = 300')
    regression_csv(tmp_path / "train.csv", 150, seed=0)
    Xn, yn = regression_csv(tmp_path / "new.csv", 60, seed=1)
    (tmp_path / "fit.toml").write_text(config.format(data=DATA, store="reg.zarr") + F64)
    assert main(["-q", "fit", str(tmp_path / "fit.toml")]) == 0
    store = tmp_path / "reg.zarr"
    copy = tmp_path / "copy.zarr"
    shutil.copytree(store, copy)
    expected = ds.load(copy).partial_fit(imputed(store, Xn), yn)
    assert main(["-q", "update", str(store), "--input", str(tmp_path / "new.csv")]) == 0
    after = ds.load(store)
    assert [b["rows"] for b in after.batches_] == [150, 60] and after.solver_ == "newton"
    assert after.duality_gap_ <= 1e-10
    Xt, _ = regression_csv(tmp_path / "test.csv", 40, seed=2)
    # the CSV's decimal text rounds the new rows' inputs (relative 1e-16): not bitwise
    np.testing.assert_allclose(after.predict(Xt), expected.predict(Xt), rtol=1e-10, atol=0)
    assert np.abs(after.predict(Xt) - ds.load(copy).predict(Xt)).max() < 1e-10


def test_update_of_a_pcg_model_equals_its_python_append(tmp_path):
    """KRR by PCG: the store keeps every batch's inputs and targets, ``update`` runs PCG over
    all of them as ``partial_fit`` on the loaded model does."""
    config = KRR.replace('random_state = 0', 'random_state = 0\nsolver = "pcg"\ntol = 1e-10')
    regression_csv(tmp_path / "train.csv", 150, seed=0)
    Xn, yn = regression_csv(tmp_path / "new.csv", 60, seed=1)
    (tmp_path / "fit.toml").write_text(config.format(data=DATA, store="pcg.zarr") + F64)
    assert main(["-q", "fit", str(tmp_path / "fit.toml")]) == 0
    store, copy = tmp_path / "pcg.zarr", tmp_path / "copy.zarr"
    shutil.copytree(store, copy)
    expected = ds.load(copy).partial_fit(imputed(store, Xn), yn)
    assert main(["-q", "update", str(store), "--input", str(tmp_path / "new.csv")]) == 0
    after = ds.load(store)
    assert [b["rows"] for b in after.batches_] == [150, 60] and after.solver_ == "pcg"
    Xt, _ = regression_csv(tmp_path / "test.csv", 40, seed=2)
    # the CSV's decimal text rounds the new rows' inputs (relative 1e-16): not bitwise
    np.testing.assert_allclose(after.predict(Xt), expected.predict(Xt), rtol=1e-9, atol=0)
