"""Missing values in the inputs: named by file, column and row (CSV, ARFF, lazy zarr data
standardised), dropped or imputed with the training means on request (``data.missing``), the
same from empty CSV cells as from "nan" ones, and predict imputing new rows with the stored
means."""

from __future__ import annotations

import json

import numpy as np
import pytest

import distsketch as ds
from confighelpers import KRR, regression_csv
from conftest import data_path
from distsketch.cli.commands import main
from distsketch.cli.config import ConfigError, load_config


def _krr_fit(tmp_path, data: str, *args) -> int:
    (tmp_path / "fit.toml").write_text(KRR.format(data=data, store="krr.zarr"))
    return main(["-q", *args, "fit", str(tmp_path / "fit.toml")])


def test_missing_values_error_names_file_column_and_row(tmp_path, capsys):
    regression_csv(tmp_path / "train.csv", nan_at=(7, 1))
    assert _krr_fit(tmp_path, 'train = "train.csv"\ntarget_columns = ["target"]\nstandardize = true') == 2
    err = capsys.readouterr().err.strip()
    assert (f"data.train: {tmp_path / 'train.csv'}: missing value (NaN) in input column 1 ('b') at "
            f"row 7 (counting data rows from 0)") in err, err
    assert 'data.missing = "drop" or "impute-mean"' in err
    assert "scale must be finite" not in err
    assert not (tmp_path / "krr.zarr").exists()


def test_standardize_on_lazy_data_with_nan_names_file_and_row(tmp_path, capsys):
    import zarr

    X, y = np.random.default_rng(0).normal(size=(100, 3)), np.arange(100.0)
    X[42, 0] = np.nan
    g = zarr.open_group(tmp_path / "train.zarr", mode="w")
    g.create_array("X", data=X, chunks=(25, 3))
    g.create_array("Y", data=y, chunks=(25,))
    assert _krr_fit(tmp_path, 'train = "train.zarr"\nstandardize = true') == 2
    err = capsys.readouterr().err
    assert (f"data.standardize: {tmp_path / 'train.zarr'}: missing value (NaN) in the inputs at row 42"
            in err), err


def test_missing_drop_and_impute_mean(tmp_path, capsys):
    X, y = regression_csv(tmp_path / "train.csv", nan_at=(7, 1))
    Xt, _ = regression_csv(tmp_path / "test.csv", 30, seed=1, nan_at=(3, 2))
    common = 'train = "train.csv"\ntest = "test.csv"\ntarget_columns = ["target"]\n'
    assert _krr_fit(tmp_path, common + 'missing = "drop"') == 0
    assert "on 149 rows" in capsys.readouterr().out
    dropped = ds.load(tmp_path / "krr.zarr")
    keep = np.arange(150) != 7
    ref = ds.SketchedKRR(ds.Gaussian(0.2), sketch=ds.SubSampling(40), lam=1e-3, random_state=0).fit(
        X[keep], y[keep])
    np.testing.assert_allclose(dropped.predict(Xt[[0, 1]]).ravel(), ref.predict(Xt[[0, 1]]), rtol=1e-10)
    # predict cannot drop rows (the outputs would not line up with the input): it says so
    assert main(["predict", str(tmp_path / "krr.zarr"), "--input", str(tmp_path / "test.csv")]) == 2
    assert "missing value (NaN) in input column 2 ('c') at row 3" in capsys.readouterr().err

    (tmp_path / "krr.zarr").rename(tmp_path / "dropped.zarr")
    assert _krr_fit(tmp_path, common + 'missing = "impute-mean"', "-v") == 0, capsys.readouterr().err
    capsys.readouterr()
    means = np.nanmean(X, axis=0)
    Xi = X.copy()
    Xi[7, 1] = means[1]
    ref = ds.SketchedKRR(ds.Gaussian(0.2), sketch=ds.SubSampling(40), lam=1e-3, random_state=0).fit(Xi, y)
    imputed = ds.load(tmp_path / "krr.zarr")
    np.testing.assert_allclose(imputed.predict(Xi).ravel(), ref.predict(Xi), rtol=1e-10)
    # new data are imputed with the *training* means, stored with the model
    assert main(["-q", "predict", str(tmp_path / "krr.zarr"), "--input", str(tmp_path / "test.csv"),
                 "--output", str(tmp_path / "p.npy")]) == 0
    Xti = Xt.copy()
    Xti[3, 2] = means[2]
    np.testing.assert_allclose(np.load(tmp_path / "p.npy").ravel(), ref.predict(Xti), rtol=1e-10)
    capsys.readouterr()
    assert main(["-q", "evaluate", str(tmp_path / "krr.zarr"), "--json"]) == 0
    assert np.isfinite(json.loads(capsys.readouterr().out)["rmse"])


@pytest.mark.slow
def test_empty_csv_cells_are_missing_values(tmp_path, capsys):
    """A CSV written by pandas with NaN (empty fields) reads its empty cells as missing values:
    the default names the cell, "drop" and "impute-mean" fit as from "nan" cells, and predict
    reads empty cells too (they used to be refused as non-numeric)."""
    pd = pytest.importorskip("pandas")
    X, y = regression_csv(tmp_path / "nan.csv", nan_at=(7, 1))
    Xt, _ = regression_csv(tmp_path / "test_nan.csv", 30, seed=1, nan_at=(3, 2))
    for name in ("nan", "test_nan"):
        frame = pd.read_csv(tmp_path / f"{name}.csv")
        frame.to_csv(tmp_path / f"{name.replace('nan', 'empty')}.csv", index=False)
    assert ",," in (tmp_path / "empty.csv").read_text()  # pandas writes NaN as an empty field
    common = 'train = "empty.csv"\ntarget_columns = ["target"]\n'
    assert _krr_fit(tmp_path, common) == 2
    err = capsys.readouterr().err
    assert "missing value (NaN) in input column 1 ('b') at row 7" in err, err
    assert "non-numeric" not in err
    for how in ("drop", "impute-mean"):
        assert _krr_fit(tmp_path, common + f'test = "test_empty.csv"\nmissing = "{how}"') == 0
        from_empty = ds.load(tmp_path / "krr.zarr")
        (tmp_path / "krr.zarr").rename(tmp_path / f"empty-{how}.zarr")
        assert _krr_fit(tmp_path, f'train = "nan.csv"\ntarget_columns = ["target"]\nmissing = "{how}"') == 0
        from_nan = ds.load(tmp_path / "krr.zarr")
        (tmp_path / "krr.zarr").rename(tmp_path / f"nan-{how}.zarr")
        np.testing.assert_array_equal(from_empty.predict(Xt[[0, 1]]), from_nan.predict(Xt[[0, 1]]))
    capsys.readouterr()
    assert main(["-q", "predict", str(tmp_path / "empty-impute-mean.zarr"), "--input",
                 str(tmp_path / "test_empty.csv"), "--output", str(tmp_path / "p.npy")]) == 0
    means = np.nanmean(X, axis=0)
    Xti = Xt.copy()
    Xti[3, 2] = means[2]
    np.testing.assert_allclose(np.load(tmp_path / "p.npy"), from_empty.predict(Xti), rtol=1e-10)


def test_standardized_names_the_columns_holding_nan():
    X = np.random.default_rng(0).normal(size=(20, 4))
    X[3, 2] = np.nan
    with pytest.raises(ValueError, match=r"NaN or infinity in 1 column\(s\) \(2\)") as info:
        ds.standardized(ds.Gaussian(1.0), X)
    assert "impute or drop" in str(info.value) and "scale must be finite" not in str(info.value)


def test_missing_key_is_validated(tmp_path):
    regression_csv(tmp_path / "train.csv")
    (tmp_path / "fit.toml").write_text(KRR.format(
        data='train = "train.csv"\ntarget_columns = ["target"]\nmissing = "zero"', store="k.zarr"))
    with pytest.raises(ConfigError, match=r"^data.missing: expected one of \['error', 'drop', 'impute-mean'\]"):
        load_config(tmp_path / "fit.toml")


@pytest.mark.slow
def test_real_rf1_with_imputed_means(tmp_path, capsys):
    """mulan's rf1 has 60 training and test rows with missing inputs; imputed, it fits and
    evaluates through the CLI with finite errors."""
    train, test = data_path("mtr", "rf1-train.arff"), data_path("mtr", "rf1-test.arff")
    data = f'train = "{train}"\ntest = "{test}"\nn_targets = 8\nstandardize = true\nmissing = "impute-mean"'
    assert _krr_fit(tmp_path, data) == 0
    assert main(["-q", "evaluate", str(tmp_path / "krr.zarr"), "--json", "--metrics", "rmse"]) == 0
    assert np.isfinite(json.loads(capsys.readouterr().out.splitlines()[-1])["rmse"])
