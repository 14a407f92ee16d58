"""Tables of data: what the loaders return, the checks they share, and missing values.

:class:`Table` is a loaded data set with the column names its file declares; :func:`existing`
and :func:`columns` are the path and column checks every loader runs; :func:`handle_missing`
checks, drops or imputes missing values (NaN), naming file, column and row (the ways:
:data:`MISSING`). The loaders themselves: :mod:`distsketch.io.loaders`.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, NamedTuple, Sequence

import numpy as np
import scipy.sparse as sp

__all__ = ["MISSING", "PathLike", "Table", "columns", "existing", "handle_missing"]

logger = logging.getLogger(__name__)

PathLike = str | os.PathLike[str]


def existing(path: PathLike) -> Path:
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no such file or directory: {str(path)!r}")
    return path


def columns(spec: Sequence[int | str] | int | str | None, names: Sequence[str] | None,
             n_cols: int, path: Path, what: str) -> list[int]:
    """Positions of the columns named (header names) or numbered (negative allowed) by ``spec``."""
    if spec is None:
        return []
    items = [spec] if isinstance(spec, (int, str, np.integer)) else list(spec)
    out = []
    for t in items:
        if isinstance(t, str):
            if names is None:
                raise ValueError(f"{path}: {what} {items} given by name but the file has no header")
            stripped = [n.strip() for n in names]
            if t.strip() not in stripped:
                raise ValueError(f"{path}: {what}: no column named {t!r}; columns are {list(names)}")
            out.append(stripped.index(t.strip()))
        elif isinstance(t, (int, np.integer)) and not isinstance(t, bool) and -n_cols <= t < n_cols:
            out.append(int(t) % n_cols)
        else:
            raise ValueError(f"{path}: {what}: column {t!r} out of range for {n_cols} columns")
    if len(set(out)) != len(out):
        raise ValueError(f"{path}: {what} {items} repeat a column")
    return out


class Table(NamedTuple):
    """A loaded data set: ``X``, ``Y`` (or None) and the column names the file declares.

    Parameters
    ----------
    X : array of shape (n_samples, n_features)
        Inputs: an ndarray, a scipy.sparse matrix (sparse ARFF) or a zarr array.
    Y : array of shape (n_samples, ...) or None
        Targets; None for a file read without them.
    feature_names, target_names : list of str or None
        The column names the file declares (CSV header, ARFF attributes); None where the
        format has none.
    """

    X: Any
    Y: Any
    feature_names: list[str] | None
    target_names: list[str] | None


#: The ways :func:`handle_missing` treats missing values (NaN).
MISSING = ("error", "drop", "impute-mean")


def _locate(row: int, sources: Sequence[tuple[str, int]]) -> tuple[str, int]:
    """``(file, row in that file)`` of a row of the concatenation of ``sources``."""
    for name, n in sources:
        if row < n:
            return name, row
        row -= n
    return sources[-1][0], row  # pragma: no cover - row out of range


def _nan_cells(A) -> tuple[np.ndarray, np.ndarray]:
    """Rows and columns of the NaN entries of a dense or sparse matrix, row-major order."""
    if sp.issparse(A):
        coo = sp.coo_matrix(A)
        bad = np.isnan(coo.data)
        r, c = coo.row[bad], coo.col[bad]
        order = np.lexsort((c, r))
        return r[order], c[order]
    A = np.asarray(A)
    if A.dtype.kind not in "fc":
        return np.zeros(0, int), np.zeros(0, int)
    r, c = np.nonzero(np.isnan(A.reshape(len(A), -1)))
    return r, c


def handle_missing(X: Any, Y: Any = None, how: str = "error", *,
                   sources: Sequence[tuple[str, int]] | str = "X",
                   feature_names: Sequence[str] | None = None,
                   target_names: Sequence[str] | None = None, means: Any = None,
                   argument: str = "missing") -> tuple[Any, Any, np.ndarray | None]:
    """Check, drop or impute the missing values (NaN) of in-memory data.

    Parameters
    ----------
    X : ndarray or scipy.sparse matrix of shape (n_samples, n_features)
    Y : ndarray of shape (n_samples, ...), optional
    how : {"error", "drop", "impute-mean"}
        ``"error"``: a ``ValueError`` naming the file, column and row of the first missing
        value. ``"drop"``: rows with a missing input or target are left out.
        ``"impute-mean"``: missing inputs become their column's mean (over the rows where it
        is present, or ``means`` when given: the training means, for new data); a missing
        target is still an error (use ``"drop"``).
    sources : str or sequence of (str, int)
        The file the rows come from, or ``(file, n_rows)`` per file of a concatenation: error
        messages name the file and the row inside it.
    feature_names, target_names : sequence of str, optional
        Column names for the messages.
    means : ndarray of shape (n_features,), optional
        Means to impute with (``how="impute-mean"``); computed from ``X`` when omitted.
    argument : str
        The option's name in messages.

    Returns
    -------
    X, Y : the data, with rows dropped or values imputed (copies only where changed)
    means : ndarray of shape (n_features,) or None
        The means imputed with (``"impute-mean"``), None otherwise.

    Examples
    --------
    >>> import numpy as np
    >>> from distsketch.io import handle_missing
    >>> X = np.array([[1.0, np.nan], [3.0, 4.0]])
    >>> X2, _, means = handle_missing(X, how="impute-mean")
    >>> X2.tolist(), means.tolist()
    ([[1.0, 4.0], [3.0, 4.0]], [2.0, 4.0])
    >>> handle_missing(X, np.array([1.0, 2.0]), how="drop")[1]
    array([2.])
    """
    if how not in MISSING:
        raise ValueError(f"{argument}: expected one of {list(MISSING)}, got {how!r}")
    if isinstance(sources, str):
        sources = [(sources, X.shape[0])]
    if not (isinstance(X, np.ndarray) or sp.issparse(X)):
        if how != "error":
            raise ValueError(f"{argument}: {how!r} needs data read into memory (.npy, .npz, .csv, "
                             f".arff, .h5), not arrays read lazily ({type(X).__name__}); "
                             f"their missing values are reported by the fit")
        return X, Y, None  # checked block by block by the pass

    def cell(kind, names, r, c):
        name, row = _locate(int(r), sources)
        col = f"{kind} column {int(c)}" + (f" ({names[c]!r})" if names is not None and c < len(names) else "")
        return f"{name}: missing value (NaN) in {col} at row {row} (counting data rows from 0)"

    xr, xc = _nan_cells(X)
    yr, yc = _nan_cells(Y) if Y is not None else (np.zeros(0, int), np.zeros(0, int))
    if how == "error" and (xr.size or yr.size):
        kind, names, r, c = (("input", feature_names, xr[0], xc[0])
                             if xr.size and (not yr.size or xr[0] <= yr[0])
                             else ("target", target_names, yr[0], yc[0]))
        rows = np.union1d(xr, yr).size
        raise ValueError(f"{cell(kind, names, r, c)}; {xr.size + yr.size} missing values in "
                         f"{rows} rows: set {argument} = \"drop\" or \"impute-mean\" (inputs), "
                         f"or fill them in the file")
    if how == "drop":
        bad = np.union1d(xr, yr)
        if bad.size:
            keep = np.setdiff1d(np.arange(X.shape[0]), bad)
            logger.info("%s: dropped %d of %d rows with missing values", argument, bad.size, X.shape[0])
            X = X[keep]
            Y = None if Y is None else Y[keep]
        return X, Y, None
    if how == "impute-mean":
        if yr.size:
            raise ValueError(f"{cell('target', target_names, yr[0], yc[0])}: targets are not "
                             f"imputed; set {argument} = \"drop\" to leave such rows out")
        d = X.shape[1]
        if means is None:
            if sp.issparse(X):
                A = sp.csc_matrix(X)
                nan_per_col = np.bincount(xc, minlength=d)
                data = np.where(np.isnan(A.data), 0.0, A.data)
                sums = np.add.reduceat(np.append(data, 0.0), A.indptr[:-1])
                sums[np.diff(A.indptr) == 0] = 0.0
                present = X.shape[0] - nan_per_col
                means = np.divide(sums, present, out=np.full(d, np.nan), where=present > 0)
            else:
                with np.errstate(invalid="ignore", divide="ignore"):
                    present = (~np.isnan(X)).sum(axis=0)
                    means = np.where(present > 0, np.nansum(X, axis=0) / np.maximum(present, 1), np.nan)
            empty = np.flatnonzero(np.isnan(means))
            if empty.size:
                col = int(empty[0])
                name = f" ({feature_names[col]!r})" if feature_names is not None else ""
                raise ValueError(f"{sources[0][0]}: input column {col}{name} has no values to "
                                 f"impute its mean from; drop it (drop_columns)")
        means = np.asarray(means, dtype=np.float64)
        if means.shape != (d,):
            raise ValueError(f"{argument}: {means.size} imputation means for {d} input columns")
        if xr.size:
            if sp.issparse(X):
                X = sp.csr_matrix(X, copy=True)
                bad = np.isnan(X.data)
                X.data[bad] = means[X.indices[bad]]
            else:
                X = np.array(X, dtype=np.result_type(X.dtype, np.float64) if X.dtype.kind != "f" else X.dtype)
                X[xr, xc] = means[xc]
            logger.info("%s: imputed %d missing inputs with the training means", argument, xr.size)
        return X, Y, means
    return X, Y, None
