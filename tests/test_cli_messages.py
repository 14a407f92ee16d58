"""The command line's error messages name what is wrong and where: a path that is not a
store (a file, a plain directory, another program's zarr group), an incomplete store, an
unparsable CSV cell (key, file, row and column), ``--local 0``, a fit into a directory
distsketch did not write (refused before any data is read), and metric names (the help lists
them all; an unknown one is named before anything is read)."""

from __future__ import annotations

import numpy as np
import pytest

import distsketch as ds
from confighelpers import KRR, regression_csv, run_cli
from distsketch.cli.commands import main


def test_info_on_a_file_a_plain_directory_and_a_foreign_group(tmp_path, capsys):
    import zarr

    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path / "plain").mkdir()
    zarr.open_group(tmp_path / "theirs.zarr", mode="w").create_array("X", data=np.zeros(3))
    cases = {"notes.txt": "is a file, not a distsketch store",
             "plain": "is not a distsketch store (a directory without zarr metadata",
             "theirs.zarr": "is not a distsketch store (a zarr group distsketch did not write)",
             "absent": "does not exist"}
    for name, message in cases.items():
        for command in (["info"], ["evaluate"]):
            assert main([*command, str(tmp_path / name)]) == 2
            err = capsys.readouterr().err
            assert message in err, err
            assert "No group found" not in err
    assert main(["predict", str(tmp_path / "plain"), "--input", str(tmp_path / "x.npy")]) == 2
    assert "is not a distsketch store" in capsys.readouterr().err


def test_evaluate_on_an_incomplete_store_says_so(cli_fit, tmp_path, capsys):
    import dask.array as da

    X = np.load(cli_fit / "train.npz")["X"].copy()
    X[150, 2] = np.nan
    # row 150 is a landmark: pre-whitened (the default), the fit would refuse it before
    # writing anything (tests/test_prewhiten.py); without, the pass stops at its block
    with pytest.raises(ValueError):
        ds.SISOKR(input_sketch=ds.SubSampling(20), random_state=0, store=str(tmp_path / "broken.zarr"),
                  options=ds.EngineOptions(block_rows=50, prewhiten=False)).fit(
            da.from_array(X, chunks=(50, 4)), np.load(cli_fit / "train.npz")["Y"])
    assert main(["evaluate", str(tmp_path / "broken.zarr"), "--test", str(cli_fit / "test.npz")]) == 2
    err = capsys.readouterr().err
    assert "holds an incomplete fit (status 'pass')" in err and "distsketch fit" in err
    assert main(["evaluate", str(tmp_path / "broken.zarr")]) == 2  # not "no test data"
    assert "incomplete fit" in capsys.readouterr().err


def test_csv_parse_errors_name_the_key_file_and_row(tmp_path, capsys):
    regression_csv(tmp_path / "train.csv")
    text = (tmp_path / "train.csv").read_text().splitlines()
    text[3] = "0.1,abc,0.3,1.0"
    (tmp_path / "train.csv").write_text("\n".join(text) + "\n")
    (tmp_path / "fit.toml").write_text(KRR.format(data='train = "train.csv"\ntarget_columns = ["target"]',
                                                  store="krr.zarr"))
    assert main(["fit", str(tmp_path / "fit.toml")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"distsketch: error: data.train: {tmp_path / 'train.csv'}: cannot read it "
                          f"as numbers"), err
    assert "data row 2" in err and "column 1 ('b')" in err
    assert not (tmp_path / "krr.zarr").exists()


def test_local_zero_is_refused(cli_fit):
    out = run_cli("fit", "fit.toml", "--local", "0", cwd=cli_fit)
    assert out.returncode == 2
    assert "argument --local: expected a positive integer (a number of workers), got 0" in out.stderr


def test_fit_into_a_foreign_directory_is_refused_before_reading_data(tmp_path, capsys):
    regression_csv(tmp_path / "train.csv")
    (tmp_path / "train.csv").write_text("a,b\n1,x\n")  # unreadable: the store check comes first
    (tmp_path / "fit.toml").write_text(KRR.format(data='train = "train.csv"\ntarget_columns = ["b"]',
                                                  store="unused.zarr"))
    user = tmp_path / "mine"
    user.mkdir()
    (user / "notes.txt").write_text("mine")
    (tmp_path / "afile").write_text("mine")
    assert main(["fit", str(tmp_path / "fit.toml"), "--store", str(user)]) == 2
    err = capsys.readouterr().err
    assert "is a non-empty directory that is not a distsketch store (it holds ['notes.txt'])" in err
    assert sorted(p.name for p in user.iterdir()) == ["notes.txt"]
    assert main(["fit", str(tmp_path / "fit.toml"), "--store", str(tmp_path / "afile")]) == 2
    assert "afile is a file" in capsys.readouterr().err


def test_metric_names_of_the_help_are_the_metrics(capsys):
    from distsketch.cli.commands import _METRIC_NAMES
    from distsketch.metrics import METRICS

    assert set(_METRIC_NAMES) == set(METRICS)
    with pytest.raises(SystemExit):
        main(["evaluate", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    for name in METRICS:
        assert name in help_text


def test_metric_names_are_checked_before_anything_is_read(tmp_path, capsys):
    """An unknown metric is named even before the store is opened (no prediction runs)."""
    assert main(["evaluate", str(tmp_path / "absent.zarr"), "--metrics", "rmse", "acc"]) == 2
    err = capsys.readouterr().err
    assert "--metrics: unknown metric 'acc'; known metrics are" in err and "does not exist" not in err
