"""Delimited text files (CSV): :func:`load_csv`, targets chosen by position or header name.
"""

from __future__ import annotations

import csv
import itertools
import re
from pathlib import Path
from typing import Sequence

import numpy as np

from .arff import unquote
from .tables import PathLike, Table, columns, existing

__all__ = ["load_csv", "read_csv"]


def load_csv(
    path: PathLike,
    *,
    target_columns: Sequence[int | str] | int | str,
    delimiter: str = ",",
    skip_header: int | None = None,
    drop_columns: Sequence[int | str] | int | str | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Load a numeric delimited text file and split off the target columns.

    Parameters
    ----------
    path : str or path-like
        Text file; blank lines and lines starting with ``#`` after the header are skipped.
    target_columns : sequence of int or str
        Target columns by position (negative allowed) or by name. Names are read from the
        header line, which may start with ``#`` (``# "RMSD","F1",...``); whitespace and
        quotes around names are stripped.
    delimiter : str, default ","
    skip_header : int, optional
        Lines to skip before the header (names) or before the data (positions). ``None``:
        no skipping before the header; with positions only, the first line is skipped
        when it is a header, i.e. not all its fields are numbers.
    drop_columns : sequence of int or str, optional
        Columns left out of ``X`` (identifiers, other targets), by name or position.

    Returns
    -------
    X : ndarray of shape (n_samples, n_columns - n_targets - n_dropped), float64
        The remaining columns in file order.
    Y : ndarray of shape (n_samples, n_targets), float64
        Target columns in the order given.

    Raises
    ------
    ValueError
        Naming the file: an unknown or repeated column, a value that is not a number (with
        its line), rows of different lengths.

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> from distsketch.io import load_csv
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     path = Path(tmp) / "data.csv"
    ...     _ = path.write_text("a,b,y\\n1,2,3\\n4,5,6\\n")
    ...     X, Y = load_csv(path, target_columns=["y"])
    >>> X.tolist(), Y.tolist()
    ([[1.0, 2.0], [4.0, 5.0]], [[3.0], [6.0]])
    """
    single = isinstance(target_columns, (int, str, np.integer))
    targets = [target_columns] if single else list(target_columns)
    if not targets:
        raise ValueError("target_columns must name at least one column")
    t = read_csv(path, target_columns=targets, delimiter=delimiter, skip_header=skip_header,
                  drop_columns=drop_columns)
    return t.X, t.Y


def _csv_header(path: Path, *, delimiter: str, skip: int) -> list[str] | None:
    """The names of the header line (``skip`` lines down), or None when it is a data row."""
    with open(path, encoding="utf-8") as f:
        line = next(itertools.islice(f, skip, None), "")
    fields = next(csv.reader([line.strip().lstrip("#").lstrip()], delimiter=delimiter), [])
    header = [unquote(s.strip()) for s in fields]
    try:
        [float(s) for s in header]
    except ValueError:
        return header
    return None  # all numbers: a data row


def _empty_as_nan(field: str) -> float:
    """A CSV field as a float, an empty (or blank) field as NaN: a missing value, as
    ``pandas.to_csv`` writes NaN."""
    return float(field) if field.strip() else np.nan


def _loadtxt(path: Path, *, delimiter: str, skiprows: int) -> np.ndarray:
    """The numbers of a CSV file (n, columns), empty fields as NaN (missing values, handled by
    ``[data] missing``). numpy's C parser first; only a file with an empty field is parsed
    again through the (slower) per-field converter."""
    kw = dict(delimiter=delimiter, skiprows=skiprows, quotechar='"', ndmin=2, dtype=np.float64)
    try:
        return np.loadtxt(path, **kw)
    except ValueError as exc:
        if "could not convert string ''" not in str(exc) and "string '' " not in str(exc):
            raise
    return np.loadtxt(path, converters=_empty_as_nan, **kw)


def read_csv(path: PathLike, *, target_columns: Sequence[int | str], delimiter: str = ",",
              skip_header: int | None = None,
              drop_columns: Sequence[int | str] | int | str | None = None) -> Table:
    """:func:`load_csv` with names; an empty ``target_columns`` makes every column (not
    dropped) a feature, with ``Y`` of width 0."""
    path = existing(path)
    targets = list(target_columns)
    by_name = any(isinstance(t, str) for t in targets) or any(
        isinstance(t, str) for t in ([drop_columns] if isinstance(drop_columns, str) else drop_columns or []))
    skip = skip_header or 0
    header = _csv_header(path, delimiter=delimiter, skip=skip)
    if by_name and header is None:
        raise ValueError(f"{path}: target_columns {targets} given by name but line {skip + 1} is not a header")
    skiprows = skip + (header is not None and (by_name or skip_header is None))
    try:
        A = _loadtxt(path, delimiter=delimiter, skiprows=skiprows)
    except ValueError as exc:
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        m = re.search(r"at row (\d+), column (\d+)", msg)
        where = ""
        if m:  # numpy counts data rows from 0 after skiprows, columns from 1
            col = int(m.group(2)) - 1
            name = f" ({header[col]!r})" if header is not None and col < len(header) else ""
            where = f" (data row {m.group(1)} counting from 0, column {col}{name})"
        raise ValueError(f"{path}: cannot read it as numbers separated by {delimiter!r}: "
                         f"{msg}{where}; non-numeric columns must be dropped or converted "
                         f"beforehand") from None
    n_cols = A.shape[1]
    if header is not None and len(header) != n_cols:
        raise ValueError(f"{path}: header has {len(header)} names but rows have {n_cols} values")
    names = header
    cols = []
    for t in targets:
        if isinstance(t, str):
            if t.strip() not in header:
                raise ValueError(f"{path}: no column named {t!r}; columns are {header}")
            cols.append(header.index(t.strip()))
        elif isinstance(t, (int, np.integer)) and -n_cols <= t < n_cols:
            cols.append(int(t) % n_cols)
        else:
            raise ValueError(f"{path}: target column {t} out of range for {n_cols} columns")
    if len(set(cols)) != len(cols):
        raise ValueError(f"{path}: target_columns {targets} repeat a column")
    dropped = columns(drop_columns, names, n_cols, path, "drop_columns")
    if set(dropped) & set(cols):
        raise ValueError(f"{path}: drop_columns {drop_columns} name a target column")
    rest = sorted(set(range(n_cols)) - set(cols) - set(dropped))
    return Table(A[:, rest], A[:, cols], None if names is None else [names[i] for i in rest],
                 None if names is None else [names[i] for i in cols])
