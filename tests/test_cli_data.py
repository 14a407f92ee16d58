"""Data through the command line: ``[data] train`` as a list or a glob of files,
``drop_columns``, mulan's label XML, the shapes read logged at info; ``predict --input`` from
every format, with the features only or in the training layout (columns in another order are
refused); npz keys; and the README's way to load a data set."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import numpy as np
import pytest

import distsketch as ds
from confighelpers import KRR, regression_csv, run_cli
from conftest import data_path
from distsketch.cli import config
from distsketch.cli.commands import main
from distsketch.cli.config import ConfigError, load_config


@pytest.mark.slow
def test_predict_on_feature_only_csv_and_arff(tmp_path, capsys):
    X, y = regression_csv(tmp_path / "train.csv")
    Xt, _ = regression_csv(tmp_path / "test.csv", 30, seed=1)
    np.savetxt(tmp_path / "features.csv", Xt, delimiter=",", header="a,b,c", comments="")
    (tmp_path / "fit.toml").write_text(KRR.format(
        data='train = "train.csv"\ntarget_columns = ["target"]\nstandardize = true', store="krr.zarr"))
    assert main(["-q", "fit", str(tmp_path / "fit.toml")]) == 0
    model = ds.load(tmp_path / "krr.zarr")
    expected = model.predict(Xt)
    for name in ("test.csv", "features.csv"):  # training layout (target ignored) or features only
        assert main(["-q", "predict", str(tmp_path / "krr.zarr"), "--input", str(tmp_path / name),
                     "--output", str(tmp_path / "p.npy")]) == 0, capsys.readouterr().err
        np.testing.assert_allclose(np.load(tmp_path / "p.npy"), expected, rtol=1e-12)
    assert main(["-q", "predict", str(tmp_path / "krr.zarr"), "--input", str(tmp_path / "features.csv"),
                 "--output", str(tmp_path / "p.csv")]) == 0
    assert (tmp_path / "p.csv").read_text().splitlines()[0] == "target"  # the training target's name
    np.testing.assert_allclose(np.loadtxt(tmp_path / "p.csv", skiprows=1), expected.ravel(), rtol=1e-12)
    # ARFF: the same rows with and without the target attribute
    header = "@relation r\n" + "".join(f"@attribute {c} numeric\n" for c in "abc")
    (tmp_path / "train.arff").write_text(header + "@attribute target numeric\n@data\n" + "\n".join(
        ",".join(map(repr, map(float, r))) for r in np.column_stack([X, y])) + "\n")
    (tmp_path / "features.arff").write_text(header + "@data\n" + "\n".join(
        ",".join(map(repr, map(float, r))) for r in Xt) + "\n")
    (tmp_path / "arff.toml").write_text(KRR.format(data='train = "train.arff"\nn_targets = 1',
                                                   store="arff.zarr"))
    assert main(["-q", "fit", str(tmp_path / "arff.toml")]) == 0
    assert main(["-q", "predict", str(tmp_path / "arff.zarr"), "--input", str(tmp_path / "features.arff"),
                 "--output", str(tmp_path / "pa.npy")]) == 0, capsys.readouterr().err
    np.testing.assert_allclose(np.load(tmp_path / "pa.npy"), ds.load(tmp_path / "arff.zarr").predict(Xt))
    # a file of the wrong width is refused naming both widths
    np.savetxt(tmp_path / "narrow.csv", Xt[:, :2], delimiter=",")
    assert main(["predict", str(tmp_path / "krr.zarr"), "--input", str(tmp_path / "narrow.csv")]) == 2
    err = capsys.readouterr().err
    assert "narrow.csv has 2 columns; the model was fitted on 3 inputs" in err, err


def test_predict_on_feature_only_npz_and_zarr(cli_fit, tmp_path, capsys):
    import zarr

    Xt = np.load(cli_fit / "test.npz")["X"]
    np.savez(tmp_path / "x.npz", X=Xt)
    zarr.open_group(tmp_path / "x.zarr", mode="w").create_array("X", data=Xt)
    expected = ds.load(cli_fit / "fit.zarr").predict(Xt)
    for name in ("x.npz", "x.zarr"):
        assert main(["-q", "predict", str(cli_fit / "fit.zarr"), "--input", str(tmp_path / name),
                     "--output", str(tmp_path / "p.npy")]) == 0, capsys.readouterr().err
        np.testing.assert_array_equal(np.load(tmp_path / "p.npy"), expected)


@pytest.mark.slow
def test_predict_reads_a_features_only_csv_and_refuses_reordered_columns(tmp_path):
    """A fit with ``drop_columns``: ``predict --input`` takes a file of exactly the model's
    input columns (it used to be refused: the dropped column was counted as missing) and the
    training layout alike, with the same predictions; a header naming the training columns in
    another order is refused (columns are read by position)."""
    X, y = regression_csv(tmp_path / "d.csv", 120)
    (tmp_path / "fit.toml").write_text(KRR.format(
        data='train = "d.csv"\ntarget_columns = ["target"]\ndrop_columns = ["b"]',
        store="k.zarr"))
    assert main(["-q", "fit", str(tmp_path / "fit.toml")]) == 0
    lines = (tmp_path / "d.csv").read_text().splitlines()
    rows = [ln.split(",") for ln in lines]
    (tmp_path / "feat.csv").write_text("\n".join(f"{r[0]},{r[2]}" for r in rows) + "\n")
    (tmp_path / "perm.csv").write_text("\n".join(f"{r[2]},{r[0]}" for r in rows) + "\n")
    for name in ("d.csv", "feat.csv"):
        out = run_cli("-q", "predict", "k.zarr", "--input", name, "--output", f"{name}.npy",
                      cwd=tmp_path)
        assert out.returncode == 0, out.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "feat.csv.npy"),
                                  np.load(tmp_path / "d.csv.npy"))
    out = run_cli("-q", "predict", "k.zarr", "--input", "perm.csv", "--output", "p.npy",
                  cwd=tmp_path)
    assert out.returncode == 2
    assert "--input: perm.csv has the training file's columns in another order" in out.stderr
    assert not (tmp_path / "p.npy").exists()


def test_npz_with_lower_case_y(tmp_path):
    from distsketch.io.loaders import load_dataset

    X, Y = np.arange(6.0).reshape(3, 2), np.arange(3.0)
    np.savez(tmp_path / "d.npz", x=X, y=Y)
    got = load_dataset(tmp_path / "d.npz")
    np.testing.assert_array_equal(got[0], X)
    np.testing.assert_array_equal(got[1], Y)
    np.savez(tmp_path / "e.npz", X=X, labels=Y)
    with pytest.raises(ValueError, match=r"key 'Y' \(or 'y'\) not found; keys present: \['X', 'labels'\]"):
        load_dataset(tmp_path / "e.npz")


def test_lists_and_globs_of_training_files(tmp_path):
    X, y = regression_csv(tmp_path / "all.csv", 90)
    lines = (tmp_path / "all.csv").read_text().splitlines()
    for i in range(3):
        (tmp_path / f"part-{i}.csv").write_text("\n".join([lines[0], *lines[1 + 30 * i: 31 + 30 * i]]) + "\n")
    for train in ('"part-*.csv"', '["part-0.csv", "part-1.csv", "part-2.csv"]', '["part-[01].csv", "part-2.csv"]'):
        (tmp_path / "fit.toml").write_text(KRR.format(data=f'train = {train}\ntarget_columns = ["target"]',
                                                      store="k.zarr"))
        cfg = load_config(tmp_path / "fit.toml")
        got = config.read_data(cfg.data["train"], cfg.data)
        np.testing.assert_array_equal(got.X, X)
        np.testing.assert_array_equal(got.Y[:, 0], y)
    (tmp_path / "fit.toml").write_text(KRR.format(data='train = "nothing-*.csv"\ntarget_columns = [0]',
                                                  store="k.zarr"))
    with pytest.raises(ConfigError, match=r"^data.train: no file matches the pattern 'nothing-\*.csv'"):
        load_config(tmp_path / "fit.toml")
    (tmp_path / "other.csv").write_text("a,b,target\n1,2,3\n")
    (tmp_path / "fit.toml").write_text(KRR.format(data='train = ["part-0.csv", "other.csv"]\n'
                                                       'target_columns = ["target"]', store="k.zarr"))
    cfg = load_config(tmp_path / "fit.toml")
    with pytest.raises(ConfigError, match=r"other.csv has X \(2,\)"):
        config.read_data(cfg.data["train"], cfg.data)


def test_drop_columns(tmp_path):
    from distsketch.io.arff import load_arff
    from distsketch.io.delimited import load_csv
    from distsketch.io.loaders import load_table

    X, y = regression_csv(tmp_path / "d.csv", 20)
    Xd, _ = load_csv(tmp_path / "d.csv", target_columns=["target"], drop_columns=["b"])
    np.testing.assert_array_equal(Xd, X[:, [0, 2]])
    t = load_table(tmp_path / "d.csv", target_columns=[-1], drop_columns=[0])
    assert t.feature_names == ["b", "c"] and t.target_names == ["target"]
    with pytest.raises(ValueError, match="drop_columns .* name a target column"):
        load_csv(tmp_path / "d.csv", target_columns=["target"], drop_columns=["target"])
    with pytest.raises(ValueError, match=r"drop_columns: no column named 'z'"):
        load_csv(tmp_path / "d.csv", target_columns=["target"], drop_columns=["z"])
    header = "@relation r\n" + "".join(f"@attribute {c} numeric\n" for c in ("a", "b", "c", "t"))
    (tmp_path / "d.arff").write_text(header + "@data\n1,2,3,4\n5,6,7,8\n")
    Xa, Ya = load_arff(tmp_path / "d.arff", n_targets=1, drop_columns=["a", 2])
    np.testing.assert_array_equal(Xa, [[2], [6]])
    np.testing.assert_array_equal(Ya, [[4], [8]])
    np.savez(tmp_path / "d.npz", X=X, Y=y)
    (tmp_path / "fit.toml").write_text(KRR.format(data='train = "d.npz"\ndrop_columns = [1]', store="k.zarr"))
    cfg = load_config(tmp_path / "fit.toml")
    np.testing.assert_array_equal(config.read_data(cfg.data["train"], cfg.data).X, X[:, [0, 2]])


MULAN = """@relation toy
@attribute f0 numeric
@attribute lab1 {0,1}
@attribute f1 numeric
@attribute lab2 {0,1}
@data
0.5,1,2.0,0
1.5,0,3.0,1
"""


LABELS = """<?xml version="1.0" encoding="utf-8"?>
<labels xmlns="http://mulan.sourceforge.net/labels">
<label name="lab1"></label>
<label name="lab2"></label>
</labels>
"""


def test_labels_from_mulans_xml(tmp_path):
    from distsketch.io.arff import load_arff, mulan_labels

    (tmp_path / "toy-train.arff").write_text(MULAN)
    with pytest.raises(ValueError, match="n_targets is required"):
        load_arff(tmp_path / "toy-train.arff")
    (tmp_path / "toy.xml").write_text(LABELS)
    assert mulan_labels(tmp_path / "toy-train.arff") == ["lab1", "lab2"]
    X, Y = load_arff(tmp_path / "toy-train.arff")  # labels wherever they are, in the XML's order
    np.testing.assert_array_equal(X, [[0.5, 2.0], [1.5, 3.0]])
    np.testing.assert_array_equal(Y, [[1, 0], [0, 1]])
    with pytest.raises(ValueError, match=r"n_targets=2 disagrees with mulan's XML file"):
        load_arff(tmp_path / "toy-train.arff", n_targets=2)  # would take f1 for a label
    # a config without n_targets uses the XML; a wrong n_targets is refused naming both
    (tmp_path / "fit.toml").write_text(KRR.format(data='train = "toy-train.arff"', store="k.zarr"))
    cfg = load_config(tmp_path / "fit.toml")
    got = config.read_data(cfg.data["train"], cfg.data)
    assert got.target_names == ["lab1", "lab2"] and got.feature_names == ["f0", "f1"]


def test_shapes_are_logged_at_info(tmp_path, caplog):
    regression_csv(tmp_path / "train.csv")
    (tmp_path / "fit.toml").write_text(KRR.format(data='train = "train.csv"\ntarget_columns = ["target"]',
                                                  store="k.zarr"))
    cfg = load_config(tmp_path / "fit.toml")
    with caplog.at_level(logging.INFO, logger="distsketch.cli.config"):
        config.read_data(cfg.data["train"], cfg.data)
    assert "150 rows; X: 3 features, Y: 1 targets (target)" in caplog.text


def test_readme_shows_how_to_load_a_data_set():
    import distsketch.io as dio

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    m = re.search(r"from distsketch\.io import ([\w, ]+)", readme)
    assert m, "the README does not show how to load a data set"
    for name in m.group(1).split(","):
        assert hasattr(dio, name.strip())


@pytest.mark.slow
def test_real_mulan_labels_and_gas_turbine_glob(tmp_path):
    from distsketch.io.arff import load_arff

    X, Y = load_arff(data_path("bibtex", "bibtex-train.arff"))  # bibtex.xml next to it
    assert X.shape == (4880, 1836) and Y.shape == (4880, 159)
    X, Y = load_arff(data_path("corel5k", "Corel5k-train-sparse.arff"))
    assert X.shape == (4500, 499) and Y.shape == (4500, 374)
    with pytest.raises(ValueError, match="disagrees with mulan's XML file"):
        load_arff(data_path("corel5k", "Corel5k-train-sparse.arff"), n_targets=373)
    gas = data_path("gas_turbine_ppgas")
    (tmp_path / "fit.toml").write_text(KRR.format(
        data=f'train = "{gas}/gt_201[1-3].csv"\ntarget_columns = ["NOX"]\ndrop_columns = ["CO"]',
        store="k.zarr"))
    cfg = load_config(tmp_path / "fit.toml")
    got = config.read_data(cfg.data["train"], cfg.data)
    assert got.X.shape == (7411 + 7628 + 7152, 9) and got.Y.shape == (22191, 1)
    assert "CO" not in got.feature_names and got.target_names == ["NOX"]
