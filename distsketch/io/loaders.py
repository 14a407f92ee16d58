"""Data loaders returning ``(X, Y)`` pairs, chosen by the file's extension.

Formats
-------
- ``.arff`` -- :func:`~distsketch.io.arff.load_arff`: Mulan ARFF, dense or sparse rows; the
  last ``n_targets`` attributes are ``Y``, or the labels named by mulan's XML file next to it
  (:func:`~distsketch.io.arff.mulan_labels`). X is a dense ndarray or a CSR matrix (sparse
  file); Y is dense.
- ``.npy`` / ``.npz`` -- :func:`~distsketch.io.arrays.load_npz_or_npy`: X only / named arrays
  ``X`` and ``Y`` (``y`` is accepted for ``Y``).
- ``.csv`` -- :func:`~distsketch.io.delimited.load_csv`: numeric text, targets chosen by
  position or header name.
- ``.h5`` / ``.hdf5`` -- :func:`~distsketch.io.arrays.load_hdf5`: named datasets read into
  memory (needs h5py, ``pip install distsketch[io]``).
- ``.zarr`` directory -- :func:`~distsketch.io.arrays.load_zarr`: named arrays of a zarr v3
  group, left on disk.

:func:`load_dataset` dispatches on the extension; :func:`load_table` does the same and also
returns the feature and target names the file declares (CSV header, ARFF attributes).
:func:`~distsketch.io.tables.handle_missing` checks, drops or imputes missing values (NaN),
naming file, column and row. Each format's loader lives in its own module (:mod:`.arff`,
:mod:`.delimited`, :mod:`.arrays`), tables and missing values in :mod:`.tables`. Only numpy
and scipy are needed at import time; h5py and zarr are imported when their loader is called.

Example::

    from distsketch.io import load_dataset

    X, Y = load_dataset("rf1-train.arff", n_targets=8)            # mulan ARFF
    X, Y = load_dataset("bibtex-train.arff")                       # labels from bibtex.xml
    X, Y = load_dataset("gt_2011.csv", target_columns=["NOX"], drop_columns=["CO"])
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import scipy.sparse as sp

from .arff import arff_header, load_arff, read_arff
from .arrays import load_hdf5, load_npz_or_npy, load_zarr
from .delimited import load_csv, read_csv
from .tables import PathLike, Table, columns, existing

__all__ = ["count_columns", "load_dataset", "load_table"]


def count_columns(path: PathLike, *, delimiter: str = ",") -> int:
    """The number of columns of a CSV file (its first line) or attributes of an ARFF file.

    Parameters
    ----------
    path : str or path-like
        A ``.arff`` file (its header is read), or a delimited text file (its first line,
        which may start with ``#``).
    delimiter : str, default ","
        The text file's delimiter.

    Returns
    -------
    int

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> from distsketch.io import count_columns
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     path = Path(tmp) / "data.csv"
    ...     _ = path.write_text("a,b,y\\n1,2,3\\n")
    ...     count_columns(path)
    3
    """
    path = existing(path)
    if path.suffix.lower() == ".arff":
        header: list[str] = []
        with open(path, encoding="utf-8") as f:
            for line in f:
                header.append(line)
                if line.strip()[:5].lower() == "@data":
                    break
        return len(arff_header(header, path)[0])
    with open(path, encoding="utf-8") as f:
        line = f.readline()
    return len(next(csv.reader([line.strip().lstrip("#").lstrip()], delimiter=delimiter), []))


# --------------------------------------------------------------------------- dispatch

_LOADERS = {
    ".arff": load_arff,
    ".npy": load_npz_or_npy,
    ".npz": load_npz_or_npy,
    ".csv": load_csv,
    ".h5": load_hdf5,
    ".hdf5": load_hdf5,
    ".zarr": load_zarr,
}


def load_dataset(path: PathLike, **kwargs: Any) -> tuple[Any, Any]:
    """Load ``(X, Y)`` with the loader matching the extension of ``path``.

    Parameters
    ----------
    path : str or path-like
        ``.arff``, ``.npy``, ``.npz``, ``.csv``, ``.h5``/``.hdf5``, or a ``.zarr`` directory
        (any directory holding ``zarr.json`` also counts as zarr).
    **kwargs
        Keyword arguments of the chosen loader (e.g. ``n_targets`` for ARFF).

    Returns
    -------
    X, Y
        As returned by the loader; ``Y`` may be None.

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> from distsketch.io import load_dataset
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     path = Path(tmp) / "data.csv"
    ...     _ = path.write_text("a,b,y\\n1,2,3\\n4,5,6\\n")
    ...     X, Y = load_dataset(path, target_columns=["y"])
    >>> X.shape, Y.shape
    ((2, 2), (2, 1))
    """
    path = existing(path)
    return _LOADERS[_format(path)](path, **kwargs)


def load_table(path: PathLike, *, features_only: bool = False,
               drop_columns: Sequence[int | str] | int | str | None = None, **kwargs: Any) -> Table:
    """:func:`load_dataset` with the column names the file declares.

    Parameters
    ----------
    path : str or path-like
        As for :func:`load_dataset`.
    features_only : bool, default False
        Every column is a feature (a file without targets, e.g. for ``predict``): ARFF and CSV
        files are read without ``n_targets`` / ``target_columns``, arrays without ``y_key``.
    drop_columns : sequence of int or str, optional
        Columns left out of ``X``: names or positions of the file's columns (CSV, ARFF), or
        positions of ``X``'s columns (arrays in memory).
    **kwargs
        Keyword arguments of the chosen loader.

    Returns
    -------
    Table
        ``(X, Y, feature_names, target_names)``; names are None where the format has none,
        ``Y`` is None for a file read without targets.

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> from distsketch.io import load_table
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     path = Path(tmp) / "data.csv"
    ...     _ = path.write_text("a,b,y\\n1,2,3\\n4,5,6\\n")
    ...     table = load_table(path, target_columns=["y"], drop_columns=["a"])
    >>> table.X.tolist(), table.feature_names, table.target_names
    ([[2.0], [5.0]], ['b'], ['y'])
    """
    path = existing(path)
    suffix = _format(path)
    if suffix == ".arff":
        if features_only:
            kwargs.pop("n_targets", None)
        t = read_arff(path, drop_columns=drop_columns, features_only=features_only, **kwargs)
    elif suffix == ".csv":
        targets = kwargs.pop("target_columns", None)
        if features_only:
            targets = []
        elif targets is None:
            raise ValueError(f"{path}: target_columns is required for CSV files (names or positions)")
        elif isinstance(targets, (int, str, np.integer)):
            targets = [targets]
        elif not list(targets):
            raise ValueError("target_columns must name at least one column")
        t = read_csv(path, target_columns=targets, drop_columns=drop_columns, **kwargs)
    else:
        if features_only:
            kwargs["y_key"] = None
        X, Y = _LOADERS[suffix](path, **kwargs)
        if drop_columns is not None:
            if not isinstance(X, np.ndarray) and not sp.issparse(X):
                raise ValueError(f"{path}: drop_columns is not supported for arrays read lazily "
                                 f"(zarr); drop the columns when writing the array")
            keep = sorted(set(range(X.shape[1])) - set(columns(drop_columns, None, X.shape[1],
                                                                path, "drop_columns")))
            X = X[:, keep]
        t = Table(X, Y, None, None)
    if features_only:
        t = t._replace(Y=None, target_names=None)
    return t


def _format(path: Path) -> str:
    suffix = ".zarr" if (path / "zarr.json").exists() else path.suffix.lower()
    if suffix not in _LOADERS or path.is_dir() != (suffix == ".zarr"):
        supported = sorted(_LOADERS)
        raise ValueError(f"{path}: unsupported data format; supported: {supported} (.zarr as a directory)")
    return suffix
