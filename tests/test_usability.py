"""What a new user meets first: quiet and scriptable commands, start-up time, data
input (missing values, lists of files, dropped columns, mulan's labels), clear messages, the
store's expected size and the config schema. Each test failed on the code before its fix."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest

import distsketch as ds
from confighelpers import CONFIG, toy_data
from distsketch.cli import config
from distsketch.cli.commands import main
from distsketch.cli.config import ConfigError, load_config

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("DISTSKETCH_DATA", ROOT.parent / "shared" / "data"))

KRR = """
[model]
type = "SketchedKRR"
lam = 1e-3
random_state = 0

[model.kernel]
name = "gaussian"
gamma = 0.2

[model.sketch]
name = "subsampling"
m = 40

[data]
{data}

[store]
path = "{store}"
"""


def _data(*parts: str) -> Path:
    path = DATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"real data set not available: {path} (set DISTSKETCH_DATA)")
    return path


def run_cli(*args, cwd, stdout=subprocess.PIPE):
    """The CLI in a subprocess: its exit status and streams are what users see."""
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    return subprocess.run([sys.executable, "-m", "distsketch", *map(str, args)], cwd=cwd,
                          stdout=stdout, stderr=subprocess.PIPE, text=True, env=env, timeout=300, check=False)


def _toy(tmp_path: Path) -> Path:
    return toy_data(tmp_path)


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    """A directory with the toy data, its config and a fitted store ``fit.zarr``."""
    work = _toy(tmp_path_factory.mktemp("fitted"))
    assert main(["-q", "fit", str(work / "fit.toml")]) == 0
    return work


def _regression_csv(path: Path, n: int = 150, *, seed: int = 0, header: bool = True,
                    nan_at: tuple[int, int] | None = None) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    y = np.sin(X[:, 0]) + 0.5 * X[:, 1] + 0.1 * rng.normal(size=n)
    if nan_at is not None:
        X[nan_at] = np.nan
    A = np.column_stack([X, y])
    with open(path, "w") as f:
        if header:
            f.write("a,b,c,target\n")
        f.writelines(",".join("nan" if np.isnan(v) else repr(float(v)) for v in row) + "\n" for row in A)
    return X, y


# --------------------------------------------------------------------------- 3. quiet, streams


def test_json_output_parses_with_and_without_quiet(fitted):
    """``--json`` is the only thing on stdout; progress bars go to stderr (and -q hides them)."""
    for args in (["-q", "evaluate", "fit.zarr", "--json"], ["evaluate", "fit.zarr", "--json"],
                 ["evaluate", "fit.zarr", "--json", "-q"]):
        out = run_cli(*args, cwd=fitted)
        assert out.returncode == 0, out.stderr
        results = json.loads(out.stdout)
        assert {"f1_samples", "surrogate_mse"} <= set(results)
        quiet = "-q" in args
        assert ("Completed" in out.stderr) is not quiet, (args, out.stderr)


def test_predict_progress_goes_to_stderr_and_q_silences_it(fitted):
    out = run_cli("predict", "fit.zarr", "--input", "test.npz", "--output", "p.npy", cwd=fitted)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("predictions of shape (40, 6) written to") and "Completed" not in out.stdout
    assert "Completed" in out.stderr
    out = run_cli("predict", "fit.zarr", "--input", "test.npz", "--output", "p.npy", "-q", cwd=fitted)
    assert out.returncode == 0 and out.stderr == "", out.stderr


def test_verbosity_flags_after_the_command(fitted, tmp_path):
    work = _toy(tmp_path)
    out = run_cli("fit", "fit.toml", "-v", "-q", cwd=work)
    assert out.returncode == 0, out.stderr
    assert "X: 4 features, Y: 6 targets" in out.stderr  # -v after the command: info logging
    assert "Completed" not in out.stderr  # -q after the command: no progress bar
    assert out.stdout.startswith("fitted SISOKR on 200 rows")
    out = run_cli("info", "fit.zarr", "-vv", cwd=work)
    assert out.returncode == 0 and out.stdout.startswith("store:")


def test_evaluate_results_are_plain_floats(fitted, capsys):
    assert main(["-q", "evaluate", str(fitted / "fit.zarr"), "--json"]) == 0
    results = json.loads(capsys.readouterr().out)
    assert all(type(v) is float for v in results.values())


# --------------------------------------------------------------------------- 9. messages


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


def test_evaluate_on_an_incomplete_store_says_so(fitted, tmp_path, capsys):
    import dask.array as da

    X = np.load(fitted / "train.npz")["X"].copy()
    X[150, 2] = np.nan
    with pytest.raises(ValueError):
        ds.SISOKR(input_sketch=ds.SubSampling(20), random_state=0, store=str(tmp_path / "broken.zarr"),
                  options=ds.EngineOptions(block_rows=50)).fit(
            da.from_array(X, chunks=(50, 4)), np.load(fitted / "train.npz")["Y"])
    assert main(["evaluate", str(tmp_path / "broken.zarr"), "--test", str(fitted / "test.npz")]) == 2
    err = capsys.readouterr().err
    assert "holds an incomplete fit (status 'pass')" in err and "distsketch fit" in err
    assert main(["evaluate", str(tmp_path / "broken.zarr")]) == 2  # not "no test data"
    assert "incomplete fit" in capsys.readouterr().err


def test_csv_parse_errors_name_the_key_file_and_row(tmp_path, capsys):
    _regression_csv(tmp_path / "train.csv")
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


def test_broken_pipe_is_quiet_and_exits_0(fitted):
    """``distsketch info STORE | head -1``: the reader went away; no traceback, status 0."""
    r, w = os.pipe()
    os.close(r)  # the reader is gone before anything is written: the first write fails
    try:
        out = run_cli("info", "fit.zarr", cwd=fitted, stdout=w)
    finally:
        os.close(w)
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""


def test_local_zero_is_refused(fitted):
    out = run_cli("fit", "fit.toml", "--local", "0", cwd=fitted)
    assert out.returncode == 2
    assert "argument --local: expected a positive integer (a number of workers), got 0" in out.stderr


def test_fit_into_a_foreign_directory_is_refused_before_reading_data(tmp_path, capsys):
    _regression_csv(tmp_path / "train.csv")
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


# --------------------------------------------------------------------------- 4. predict inputs


def test_predict_on_feature_only_csv_and_arff(tmp_path, capsys):
    X, y = _regression_csv(tmp_path / "train.csv")
    Xt, _ = _regression_csv(tmp_path / "test.csv", 30, seed=1)
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


def test_predict_on_feature_only_npz_and_zarr(fitted, tmp_path, capsys):
    import zarr

    Xt = np.load(fitted / "test.npz")["X"]
    np.savez(tmp_path / "x.npz", X=Xt)
    zarr.open_group(tmp_path / "x.zarr", mode="w").create_array("X", data=Xt)
    expected = ds.load(fitted / "fit.zarr").predict(Xt)
    for name in ("x.npz", "x.zarr"):
        assert main(["-q", "predict", str(fitted / "fit.zarr"), "--input", str(tmp_path / name),
                     "--output", str(tmp_path / "p.npy")]) == 0, capsys.readouterr().err
        np.testing.assert_array_equal(np.load(tmp_path / "p.npy"), expected)


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


# --------------------------------------------------------------------------- 5. metric names


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


# --------------------------------------------------------------------------- 6. start-up


_PROBE = """
import sys, time
t = time.perf_counter()
from distsketch.cli import main
try:
    main(["--help"])
except SystemExit:
    pass
print(time.perf_counter() - t, file=sys.stderr)
heavy = sorted(m for m in ("dask.array", "zarr", "sklearn", "scipy", "distributed") if m in sys.modules)
print(",".join(heavy), file=sys.stderr)
"""


def test_help_and_version_do_not_import_the_package():
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    assert "usage: distsketch" in out.stdout
    _, heavy = out.stderr.split("\n")[-3:-1]  # the last two lines (the second may be empty)
    assert heavy == "", f"`distsketch --help` imported {heavy}"


_FIT_PROBE = """
import sys
import numpy as np
import dask
import distsketch as ds
X = np.random.default_rng(0).normal(size=(200, 3)); Y = (X > 0).astype(float)
if len(sys.argv) > 1:
    dask.config.set(scheduler=sys.argv[1])
m = ds.SISOKR(ds.Gaussian(0.3), ds.Gaussian(0.5), input_sketch=ds.SubSampling(30),
              output_sketch=ds.SubSampling(20), lam=1e-3, random_state=0).fit(X, Y)
m.predict(X[:20])
print("distributed" in sys.modules)
"""


@pytest.mark.parametrize("scheduler", [None, "threads", "sync"])
def test_a_local_fit_does_not_import_distributed(scheduler):
    """Without a cluster nothing imports ``distributed`` (dask's own scheduler lookup would:
    0.16 s of a first fit, benchmarks/bench_import.py; engine.local_scheduler)."""
    args = [sys.executable, "-c", _FIT_PROBE] + ([scheduler] if scheduler else [])
    out = subprocess.run(args, capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


# The start-up times themselves are measured by benchmarks/bench_import.py (RESULTS.md).


# --------------------------------------------------------------------------- 7. missing values


def _krr_fit(tmp_path, data: str, *args) -> int:
    (tmp_path / "fit.toml").write_text(KRR.format(data=data, store="krr.zarr"))
    return main(["-q", *args, "fit", str(tmp_path / "fit.toml")])


def test_missing_values_error_names_file_column_and_row(tmp_path, capsys):
    _regression_csv(tmp_path / "train.csv", nan_at=(7, 1))
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
    X, y = _regression_csv(tmp_path / "train.csv", nan_at=(7, 1))
    Xt, _ = _regression_csv(tmp_path / "test.csv", 30, seed=1, nan_at=(3, 2))
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


def test_empty_csv_cells_are_missing_values(tmp_path, capsys):
    """A CSV written by pandas with NaN (empty fields) reads its empty cells as missing values:
    the default names the cell, "drop" and "impute-mean" fit as from "nan" cells, and predict
    reads empty cells too (they used to be refused as non-numeric)."""
    pd = pytest.importorskip("pandas")
    X, y = _regression_csv(tmp_path / "nan.csv", nan_at=(7, 1))
    Xt, _ = _regression_csv(tmp_path / "test_nan.csv", 30, seed=1, nan_at=(3, 2))
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
    _regression_csv(tmp_path / "train.csv")
    (tmp_path / "fit.toml").write_text(KRR.format(
        data='train = "train.csv"\ntarget_columns = ["target"]\nmissing = "zero"', store="k.zarr"))
    with pytest.raises(ConfigError, match=r"^data.missing: expected one of \['error', 'drop', 'impute-mean'\]"):
        load_config(tmp_path / "fit.toml")


@pytest.mark.slow
def test_real_rf1_with_imputed_means(tmp_path, capsys):
    """mulan's rf1 has 60 training and test rows with missing inputs; imputed, it fits and
    evaluates through the CLI with finite errors."""
    train, test = _data("mtr", "rf1-train.arff"), _data("mtr", "rf1-test.arff")
    data = f'train = "{train}"\ntest = "{test}"\nn_targets = 8\nstandardize = true\nmissing = "impute-mean"'
    assert _krr_fit(tmp_path, data) == 0
    assert main(["-q", "evaluate", str(tmp_path / "krr.zarr"), "--json", "--metrics", "rmse"]) == 0
    assert np.isfinite(json.loads(capsys.readouterr().out.splitlines()[-1])["rmse"])


# --------------------------------------------------------------------------- 8. data input


def test_lists_and_globs_of_training_files(tmp_path):
    X, y = _regression_csv(tmp_path / "all.csv", 90)
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

    X, y = _regression_csv(tmp_path / "d.csv", 20)
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
    _regression_csv(tmp_path / "train.csv")
    (tmp_path / "fit.toml").write_text(KRR.format(data='train = "train.csv"\ntarget_columns = ["target"]',
                                                  store="k.zarr"))
    cfg = load_config(tmp_path / "fit.toml")
    with caplog.at_level(logging.INFO, logger="distsketch.cli.config"):
        config.read_data(cfg.data["train"], cfg.data)
    assert "150 rows; X: 3 features, Y: 1 targets (target)" in caplog.text


def test_readme_shows_how_to_load_a_data_set():
    import distsketch.io as dio

    readme = (ROOT / "README.md").read_text()
    m = re.search(r"from distsketch\.io import ([\w, ]+)", readme)
    assert m, "the README does not show how to load a data set"
    for name in m.group(1).split(","):
        assert hasattr(dio, name.strip())


@pytest.mark.slow
def test_real_mulan_labels_and_gas_turbine_glob(tmp_path):
    from distsketch.io.arff import load_arff

    X, Y = load_arff(_data("bibtex", "bibtex-train.arff"))  # bibtex.xml next to it
    assert X.shape == (4880, 1836) and Y.shape == (4880, 159)
    X, Y = load_arff(_data("corel5k", "Corel5k-train-sparse.arff"))
    assert X.shape == (4500, 499) and Y.shape == (4500, 374)
    with pytest.raises(ValueError, match="disagrees with mulan's XML file"):
        load_arff(_data("corel5k", "Corel5k-train-sparse.arff"), n_targets=373)
    gas = _data("gas_turbine_ppgas")
    (tmp_path / "fit.toml").write_text(KRR.format(
        data=f'train = "{gas}/gt_201[1-3].csv"\ntarget_columns = ["NOX"]\ndrop_columns = ["CO"]',
        store="k.zarr"))
    cfg = load_config(tmp_path / "fit.toml")
    got = config.read_data(cfg.data["train"], cfg.data)
    assert got.X.shape == (7411 + 7628 + 7152, 9) and got.Y.shape == (22191, 1)
    assert "CO" not in got.feature_names and got.target_names == ["NOX"]


# --------------------------------------------------------------------------- 10. store size


def test_expected_store_size_is_logged_and_close(tmp_path, caplog):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(3000, 5))
    np.savez(tmp_path / "big.npz", X=X, Y=np.sin(X[:, 0]))
    (tmp_path / "fit.toml").write_text(KRR.format(data='train = "big.npz"', store="big.zarr")
                                       .replace("m = 40", "m = 300"))
    with caplog.at_level(logging.INFO, logger="distsketch"):
        assert main(["-q", "-v", "fit", str(tmp_path / "fit.toml")]) == 0
    err = caplog.text
    m = re.search(r"store \S+big\.zarr: expected size about ([\d.]+) (KiB|MiB) \(pass/C ", err)
    assert m, err
    expected = float(m.group(1)) * {"KiB": 2**10, "MiB": 2**20}[m.group(2)]
    actual = sum(f.stat().st_size for f in (tmp_path / "big.zarr").rglob("*") if f.is_file())
    assert 0.8 <= actual / expected <= 1.25, (actual, expected)


def test_store_guide_says_when_to_fit_without_a_store():
    guide = (ROOT / "docs" / "guide" / "store.md").read_text()
    assert "When `store = None` is the better choice" in guide


# --------------------------------------------------------------------------- 11. schema, packaging


def test_config_schema_lists_every_key():
    import dataclasses

    from distsketch._registry import MODELS
    from distsketch.kernels.base import KERNELS
    from distsketch.options import EngineOptions
    from distsketch.sketches.base import SKETCHES

    doc = config.__doc__
    keys = set(config._DATA_KEYS) | {"path", "overwrite", "metrics", "type", "lam", "random_state"}
    keys |= {f.name for f in dataclasses.fields(EngineOptions)}
    def shipped(cls) -> bool:  # other tests register their own kernels, sketches, models
        return cls.__module__.startswith("distsketch.")

    for cls in MODELS.values():
        if cls._configurable and shipped(cls):
            keys |= {k for k, kind in cls._param_kinds.items() if kind not in ("store", "options")}
    for name, cls in KERNELS.items():
        if name != "standardized" and shipped(cls):  # written as [data] standardize = true
            keys |= {name, *cls._param_names()}
    for name, cls in SKETCHES.items():
        if shipped(cls):
            keys |= {name, *cls._param_names()}
    missing = sorted(k for k in keys if not re.search(rf"``[^`]*\b{re.escape(k)}\b[^`]*``", doc))
    assert not missing, f"distsketch/config.py's schema does not list {missing}"


def test_engine_overwrite_is_deprecated_for_store_overwrite(fitted, tmp_path):
    text = CONFIG.replace("block_rows = 64", "block_rows = 64\noverwrite = true")
    (tmp_path / "train.npz").write_bytes((fitted / "train.npz").read_bytes())
    (tmp_path / "a.toml").write_text(text)
    with pytest.warns(FutureWarning, match=r"engine.overwrite is deprecated: write overwrite = true under \[store\]"):
        cfg = load_config(tmp_path / "a.toml")
    assert cfg.overwrite is True
    (tmp_path / "b.toml").write_text(text.replace('path = "fit.zarr"', 'path = "fit.zarr"\noverwrite = false'))
    with pytest.raises(ConfigError, match=r"^engine.overwrite: contradicts store.overwrite = false"):
        load_config(tmp_path / "b.toml")


def test_license_is_an_spdx_string():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["license"] == "BSD-3-Clause"  # PEP 639; the table form is deprecated
    assert any(r.replace(" ", "").startswith("setuptools>=77") for r in project["build-system"]["requires"])


def test_demo_figure_shows_each_digit_class_once():
    from distsketch.cli.demo import N_FIGURE, _figure_index

    labels = np.array([5, 0, 5, 1, 2, 5, 3, 4, 6, 7, 8, 9, 5, 0])
    shown = labels[_figure_index(labels, N_FIGURE)]
    assert list(shown) == list(range(10))


def _bars(out: str) -> int:
    return out.replace("\r", "\n").count("100% Completed")


def test_an_iterative_fit_shows_the_pass_bar_and_no_bar_per_short_sweep(tmp_path, capsys,
                                                                        monkeypatch):
    """A Huber fit whose blocks are not held in memory (``sweep_memory=0``) sweeps its stored
    blocks once per iteration through dask: with ``progress=True`` the pass shows its bar, a
    sweep only past ``SWEEP_PROGRESS_MINIMUM`` (one bar per sweep before)."""
    from distsketch.engine import sweep

    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 3))
    y = np.sin(X[:, 0]) + 0.1 * rng.standard_t(2, size=300)

    def fit(path):
        return ds.SketchedRegressor(ds.Gaussian(0.5), loss="huber", sketch=ds.SubSampling(30),
                                    lam=1e-3, random_state=0, store=str(tmp_path / path),
                                    options=ds.EngineOptions(progress=True, sweep_memory=0)
                                    ).fit(X, y)

    capsys.readouterr()
    model = fit("a.zarr")
    assert model.n_iter_ >= 2
    assert _bars(capsys.readouterr().out) == 1  # the pass
    monkeypatch.setattr(sweep, "SWEEP_PROGRESS_MINIMUM", 0.0)
    again = fit("b.zarr")
    assert _bars(capsys.readouterr().out) >= 1 + again.n_iter_  # a bar for every sweep
    np.testing.assert_array_equal(again.predict(X), model.predict(X))


def test_progress_keeps_the_in_memory_sweeps(capsys, monkeypatch):
    """``store=None``: the sweeps read the pass's blocks held in memory whether or not a
    progress bar is asked for (a bar used to send every sweep through dask), bitwise the same
    model."""
    from distsketch.solvers.lipschitz import routes as lipschitz_routes

    rng = np.random.default_rng(1)
    X = rng.normal(size=(300, 3))
    y = np.abs(X[:, 1]) + 0.1 * rng.standard_t(2, size=300)
    held = []
    real = lipschitz_routes.held_sweeps
    monkeypatch.setattr(lipschitz_routes, "held_sweeps",
                        lambda *a: held.append(real(*a)) or held[-1])

    def fit(progress):
        return ds.SketchedRegressor(ds.Gaussian(0.5), loss="huber", sketch=ds.SubSampling(30),
                                    lam=1e-3, random_state=0,
                                    options=ds.EngineOptions(progress=progress)).fit(X, y)

    quiet, shown = fit(False), fit(True)
    assert len(held) == 2 and all(h is not None for h in held)
    np.testing.assert_array_equal(shown.predict(X), quiet.predict(X))
    assert _bars(capsys.readouterr().out) == 1  # the pass of the second fit


def test_a_local_cluster_fit_keeps_distributeds_chatter_out_of_the_default_output(fitted,
                                                                                  tmp_path):
    """``fit --local N`` used to print distributed's INFO lines (workers and nannies starting,
    comms closing, at times a shutdown traceback) on every run; by default it prints the
    cluster line and the result, ``-vv`` shows distributed's log."""
    out = run_cli("-q", "fit", fitted / "fit.toml", "--store", tmp_path / "a.zarr",
                  "--local", "1", cwd=fitted)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("fitted ")
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("distsketch: dask: 1 workers at"), lines
    out = run_cli("-q", "-vv", "fit", fitted / "fit.toml", "--store", tmp_path / "b.zarr",
                  "--local", "1", cwd=fitted)
    assert out.returncode == 0 and "Start Nanny" in out.stderr


def test_predict_reads_a_features_only_csv_and_refuses_reordered_columns(tmp_path):
    """A fit with ``drop_columns``: ``predict --input`` takes a file of exactly the model's
    input columns (it used to be refused: the dropped column was counted as missing) and the
    training layout alike, with the same predictions; a header naming the training columns in
    another order is refused (columns are read by position)."""
    X, y = _regression_csv(tmp_path / "d.csv", 120)
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


def test_compute_progress_numpy_true_is_a_plain_bar(capsys):
    """``progress`` from a numpy boolean (a config value) shows the bar at once, as ``True``;
    a number of seconds is a threshold (a short computation then shows none)."""
    import dask

    from distsketch.engine.schedulers import compute

    task = dask.delayed(sum)([1, 2])
    capsys.readouterr()
    assert compute([task], progress=np.True_) == [3]
    assert _bars(capsys.readouterr().out) == 1
    assert compute([task], progress=5.0) == [3]
    assert _bars(capsys.readouterr().out) == 0
