"""Tests for distsketch.io: synthetic files compared exactly, error messages, real data shapes."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from distsketch.io.arff import arff_header, load_arff
from distsketch.io.arrays import load_hdf5, load_npz_or_npy, load_zarr
from distsketch.io.delimited import load_csv
from distsketch.io.loaders import load_dataset

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
nan = np.nan


def _data(*parts: str) -> Path:
    path = DATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"real data set not available: {path}")
    return path


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# --------------------------------------------------------------------------- ARFF, synthetic

DENSE_ARFF = """\
% a comment before the relation
@RELATION 'toy data'

@attribute 'a b' numeric
@Attribute "c,d" REAL
% comment between attributes
@ATTRIBUTE plain integer
@attribute lab1 {0,1}
@attribute 'lab 2' { 0 , 1 }

@DATA
% comment in the data
1.5, 2, 3, 0, 1

 -4 ,?,6e1,1,0
?,?,?,?,?
"""

SPARSE_ARFF = """\
@relation sparse
@attribute f0 {0,1}
@attribute 'f 1' numeric
@attribute f2 numeric
@attribute y0 {0,1}
@attribute y1 {0,1}
@data
{0 1,2 3.5,3 1}

% an empty row follows
{}
{1 ?, 4 1}
{ 1 -2 , 2 0, 3 0 }
"""


def test_arff_dense_exact(tmp_path):
    X, Y = load_arff(_write(tmp_path, "d.arff", DENSE_ARFF), n_targets=2)
    assert isinstance(X, np.ndarray) and X.dtype == np.float64 and Y.dtype == np.float64
    np.testing.assert_array_equal(X, [[1.5, 2, 3], [-4, nan, 60], [nan, nan, nan]])
    np.testing.assert_array_equal(Y, [[0, 1], [1, 0], [nan, nan]])


def test_arff_sparse_exact(tmp_path):
    X, Y = load_arff(_write(tmp_path, "s.arff", SPARSE_ARFF), n_targets=2)
    assert isinstance(X, sp.csr_matrix) and isinstance(Y, np.ndarray)
    np.testing.assert_array_equal(X.toarray(), [[1, 0, 3.5], [0, 0, 0], [0, nan, 0], [0, -2, 0]])
    np.testing.assert_array_equal(Y, [[1, 0], [0, 0], [0, 1], [0, 0]])
    assert X.nnz == 4  # the explicit "2 0" entry is not stored


def test_arff_header_names_and_dtype(tmp_path):
    path = _write(tmp_path, "d.arff", DENSE_ARFF)
    names, start = arff_header(path.read_text().splitlines(), path)
    assert names == ["a b", "c,d", "plain", "lab1", "lab 2"]
    assert start == 11  # the line after @DATA
    X, Y = load_arff(path, n_targets=4, dtype=np.float32)
    assert X.shape == (3, 1) and Y.shape == (3, 4) and X.dtype == Y.dtype == np.float32
    X, _ = load_arff(_write(tmp_path, "s.arff", SPARSE_ARFF), n_targets=1, dtype=np.float32)
    assert X.shape == (4, 4) and X.dtype == np.float32


HEADER = "@relation r\n@attribute x numeric\n@attribute y {0,1}\n@data\n"


@pytest.mark.parametrize(
    ("text", "match"),
    [
        (HEADER + "1,0\n1,0,1\n", r"\.arff:6: expected 2 comma-separated values, got 3"),
        (HEADER + "\n% c\n1\n", r"\.arff:7: expected 2 .* got 1"),
        (HEADER + "{0 1}\n{0 1 1 1}\n", r"\.arff:6: malformed sparse entry '0 1 1 1'"),
        (HEADER + "{0 1, 1}\n", r"\.arff:5: malformed sparse entry '1'"),
        (HEADER + "{0 1}\n{x 1}\n", r"\.arff:6: malformed sparse entry 'x 1'"),
        (HEADER + "{0 1}\n\n{2 1}\n", r"\.arff:7: sparse index 2 out of range for 2 attributes"),
        (HEADER + "{0 1}\n1,0\n", r"\.arff:6: expected a sparse row"),
        (HEADER + "1,0\n{0 1}\n", r"\.arff:6: sparse row in a dense file"),
        (HEADER + "1,0\nabc,1\n", r"\.arff:6: attribute 'x': cannot parse value 'abc'"),
        (HEADER + "{1 yes}\n", r"\.arff:5: attribute 'y': cannot parse value 'yes'"),
        ("@relation r\n@attribute x numeric\n\n% the end\n", r"\.arff:4: no @data section"),
        ("@relation r\n@attribute x numeric\n1,2\n", r"\.arff:3: unexpected line .*\(missing @data\?\)"),
        (
            "@relation r\n@attribute x numeric\n@attribute c {red,green}\n@data\n",
            r"\.arff:3: attribute 'c' is nominal with non-numeric values",
        ),
        ("@relation r\n@attribute s string\n@data\n", r"\.arff:2: attribute 's' has unsupported type 'string'"),
        ("@relation r\nbogus\n@data\n", r"\.arff:2: unexpected line"),
    ],
)
def test_arff_errors_name_file_and_line(tmp_path, text, match):
    with pytest.raises(ValueError, match=match):
        load_arff(_write(tmp_path, "bad.arff", text), n_targets=1)


@pytest.mark.parametrize("n_targets", [0, 2, 3, True, 1.0])
def test_arff_bad_n_targets(tmp_path, n_targets):
    with pytest.raises(ValueError, match=r"bad\.arff:4: n_targets=.* must be an integer in \[1, 1\]"):
        load_arff(_write(tmp_path, "bad.arff", HEADER + "1,0\n"), n_targets=n_targets)


# --------------------------------------------------------------------------- arrays


def test_npz_npy_round_trip(tmp_path):
    rng = np.random.default_rng(0)
    X, Y = rng.normal(size=(7, 3)), rng.normal(size=(7, 2))
    np.save(tmp_path / "x.npy", X)
    X1, Y1 = load_npz_or_npy(tmp_path / "x.npy")
    np.testing.assert_array_equal(X1, X)
    assert Y1 is None
    np.savez(tmp_path / "d.npz", X=X, Y=Y, feats=Y)
    X1, Y1 = load_npz_or_npy(tmp_path / "d.npz")
    np.testing.assert_array_equal(X1, X)
    np.testing.assert_array_equal(Y1, Y)
    X1, Y1 = load_npz_or_npy(tmp_path / "d.npz", x_key="feats", y_key=None)
    np.testing.assert_array_equal(X1, Y)
    assert Y1 is None
    with pytest.raises(ValueError, match=r"key 'labels' not found; keys present: \['X', 'Y', 'feats'\]"):
        load_npz_or_npy(tmp_path / "d.npz", y_key="labels")


def test_hdf5_round_trip(tmp_path):
    h5py = pytest.importorskip("h5py")
    X, Y = np.arange(12.0).reshape(4, 3), np.arange(4)
    with h5py.File(tmp_path / "d.h5", "w") as f:
        f["train/data"] = X
        f["train/target"] = Y
    X1, Y1 = load_hdf5(tmp_path / "d.h5", x_key="train/data", y_key="train/target")
    assert isinstance(X1, np.ndarray)
    np.testing.assert_array_equal(X1, X)
    np.testing.assert_array_equal(Y1, Y)
    assert load_hdf5(tmp_path / "d.h5", x_key="/train/data")[1] is None
    with pytest.raises(ValueError, match=r"key 'train' not found; keys present: \['train/data', 'train/target'\]"):
        load_hdf5(tmp_path / "d.h5", x_key="train")


def test_hdf5_missing_h5py_message(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "h5py", None)  # makes `import h5py` raise ImportError
    with pytest.raises(ImportError, match=r"pip install 'distsketch\[io\]' \(or pip install h5py\)"):
        load_hdf5(tmp_path / "d.h5", x_key="X")


def test_zarr_round_trip_is_lazy(tmp_path):
    zarr = pytest.importorskip("zarr")
    X, Y = np.arange(20.0).reshape(10, 2), np.arange(10.0)
    group = zarr.open_group(tmp_path / "d.zarr", mode="w")
    group.create_array("X", data=X, chunks=(5, 2))
    group.create_group("sub").create_array("Y", data=Y)
    X1, Y1 = load_zarr(tmp_path / "d.zarr", y_key="sub/Y")
    assert isinstance(X1, zarr.Array) and isinstance(Y1, zarr.Array)
    np.testing.assert_array_equal(X1[:], X)
    np.testing.assert_array_equal(Y1[:], Y)
    assert load_zarr(tmp_path / "d.zarr", y_key=None)[1] is None
    with pytest.raises(ValueError, match=r"key 'Y' \(or 'y'\) not found; keys present: \['X', 'sub/Y'\]"):
        load_zarr(tmp_path / "d.zarr")


# --------------------------------------------------------------------------- CSV

CSV = '# "t,1", a ,"b c",t2 \n1,2,3,4\n\n5,6,7,8\n# trailing comment\n'


def test_csv_targets_by_name_and_position(tmp_path):
    path = _write(tmp_path, "d.csv", CSV)
    X, Y = load_csv(path, target_columns=["t2", " t,1"])
    assert X.dtype == Y.dtype == np.float64
    np.testing.assert_array_equal(X, [[2, 3], [6, 7]])
    np.testing.assert_array_equal(Y, [[4, 1], [8, 5]])
    X, Y = load_csv(path, target_columns=["b c", 0])
    np.testing.assert_array_equal(X, [[2, 4], [6, 8]])
    np.testing.assert_array_equal(Y, [[3, 1], [7, 5]])
    for header in ("t1;a;t2\n", ""):  # header without '#' skipped automatically, or no header
        path = _write(tmp_path, "e.csv", header + "1;2;3\n4;5;6\n")
        X, Y = load_csv(path, target_columns=[-1], delimiter=";")
        np.testing.assert_array_equal(X, [[1, 2], [4, 5]])
        np.testing.assert_array_equal(Y, [[3], [6]])
    path = _write(tmp_path, "f.csv", "generated by hand\nx,y\n1,2\n")
    np.testing.assert_array_equal(load_csv(path, target_columns="y", skip_header=1)[1], [[2]])


@pytest.mark.parametrize(
    ("targets", "match"),
    [
        (["nope"], r"no column named 'nope'; columns are \['t,1', 'a', 'b c', 't2'\]"),
        ([4], r"target column 4 out of range for 4 columns"),
        ([-5], r"target column -5 out of range"),
        ([3, "t2"], r"repeat a column"),
        ([], r"at least one column"),
    ],
)
def test_csv_errors(tmp_path, targets, match):
    with pytest.raises(ValueError, match=match):
        load_csv(_write(tmp_path, "d.csv", CSV), target_columns=targets)


def test_csv_name_without_header(tmp_path):
    with pytest.raises(ValueError, match=r"given by name but line 1 is not a header"):
        load_csv(_write(tmp_path, "d.csv", "1,2\n3,4\n"), target_columns=["a"])


# --------------------------------------------------------------------------- dispatch


def test_load_dataset_dispatch(tmp_path):
    X = np.arange(6.0).reshape(3, 2)
    np.save(tmp_path / "x.npy", X)
    with open(tmp_path / "d.NPZ", "wb") as f:  # upper-case suffix; np.savez would append .npz
        np.savez(f, X=X, Y=X[:, :1])
    zarr = pytest.importorskip("zarr")
    zarr.open_group(tmp_path / "store", mode="w").create_array("X", data=X)
    np.testing.assert_array_equal(load_dataset(tmp_path / "x.npy")[0], X)
    np.testing.assert_array_equal(load_dataset(tmp_path / "d.NPZ")[1], X[:, :1])
    np.testing.assert_array_equal(load_dataset(str(tmp_path / "store"), y_key=None)[0][:], X)
    X1, Y1 = load_dataset(_write(tmp_path, "d.arff", DENSE_ARFF), n_targets=2)
    assert X1.shape == (3, 3) and Y1.shape == (3, 2)
    X1, Y1 = load_dataset(_write(tmp_path, "d.csv", CSV), target_columns=["t,1"])
    assert X1.shape == (2, 3) and Y1.shape == (2, 1)


def test_load_dataset_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match=re.escape(str(tmp_path / "absent.npy"))):
        load_dataset(tmp_path / "absent.npy")
    with pytest.raises(FileNotFoundError, match="absent.arff"):
        load_arff(tmp_path / "absent.arff", n_targets=1)
    path = _write(tmp_path, "d.parquet", "")
    match = re.escape(str(path)) + r": unsupported data format; supported: \[.*'\.arff'.*'\.zarr'\]"
    with pytest.raises(ValueError, match=match):
        load_dataset(path)
    (tmp_path / "plain_dir").mkdir()
    with pytest.raises(ValueError, match="unsupported data format"):
        load_dataset(tmp_path / "plain_dir")


# --------------------------------------------------------------------------- real data


@pytest.mark.slow
def test_real_bibtex():
    path = _data("bibtex", "bibtex-train.arff")
    X, Y = load_arff(path, n_targets=159)
    assert isinstance(X, sp.csr_matrix) and X.shape == (4880, 1836) and Y.shape == (4880, 159)
    np.testing.assert_array_equal(np.unique(X.data), [1.0])
    np.testing.assert_array_equal(np.unique(Y), [0.0, 1.0])
    lines = path.read_text().splitlines()
    names, start = arff_header(lines, path)
    assert names[1836] == "TAG_2005"
    # Y[:, 0] is attribute 1836 (TAG_2005): count the rows holding that sparse entry.
    tagged = [bool(re.search(r"[{,]1836 1[,}]", line)) for line in lines[start:] if line.startswith("{")]
    np.testing.assert_array_equal(Y[:, 0], tagged)
    X, Y = load_arff(_data("bibtex", "bibtex-test.arff"), n_targets=159)
    assert X.shape == (2515, 1836) and Y.shape == (2515, 159)


@pytest.mark.slow
def test_real_corel5k():
    X, Y = load_arff(_data("corel5k", "Corel5k-train-sparse.arff"), n_targets=374)
    assert isinstance(X, sp.csr_matrix) and X.shape == (4500, 499) and Y.shape == (4500, 374)
    np.testing.assert_array_equal(np.unique(Y), [0.0, 1.0])


@pytest.mark.slow
def test_real_rf1_missing_values():
    X, Y = load_arff(_data("mtr", "rf1-train.arff"), n_targets=8)
    assert X.shape == (4108, 64) and Y.shape == (4108, 8)
    missing = np.isnan(np.hstack([X, Y]))
    assert missing.sum() == 1632
    assert missing.any(axis=1).sum() == 60


@pytest.mark.slow
def test_real_casp():
    path = _data("casp", "CASP.csv")
    X, Y = load_csv(path, target_columns=["RMSD"])
    assert X.shape == (45730, 9) and Y.shape == (45730, 1)
    assert Y.min() >= 0 and Y.max() == 20.999
    X0, Y0 = load_csv(path, target_columns=[0])
    np.testing.assert_array_equal(X0, X)
    np.testing.assert_array_equal(Y0, Y)


@pytest.mark.slow
def test_real_gas_turbine_trailing_space_header():
    X, Y = load_csv(_data("gas_turbine_ppgas", "gt_2015.csv"), target_columns=["CO", "NOX"])
    assert X.shape == (7384, 9) and Y.shape == (7384, 2)
    np.testing.assert_array_equal(Y[0], [7.4491, 113.25])  # first data row: ...,CO,NOX


@pytest.mark.slow
def test_real_usps_hdf5():
    pytest.importorskip("h5py")
    X, Y = load_hdf5(_data("usps", "usps.h5"), x_key="train/data", y_key="train/target")
    assert X.shape == (7291, 256) and Y.shape == (7291,)
    np.testing.assert_array_equal(np.bincount(Y), [1194, 1005, 731, 658, 652, 556, 664, 645, 542, 644])
