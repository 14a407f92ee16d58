"""Data loaders returning ``(X, Y)`` pairs.

Formats
-------
- ``.arff`` -- :func:`load_arff`: Mulan ARFF, dense or sparse rows; the last ``n_targets``
  attributes are ``Y``. X is a dense ndarray or a CSR matrix (sparse file); Y is dense.
- ``.npy`` / ``.npz`` -- :func:`load_npz_or_npy`: X only / named arrays ``X`` and ``Y``.
- ``.csv`` -- :func:`load_csv`: numeric text, targets chosen by position or header name.
- ``.h5`` / ``.hdf5`` -- :func:`load_hdf5`: named datasets read into memory (needs h5py,
  ``pip install distsketch[io]``).
- ``.zarr`` directory -- :func:`load_zarr`: named arrays of a zarr v3 group, left on disk.

:func:`load_dataset` dispatches on the extension. Only numpy and scipy are needed at
import time; h5py and zarr are imported when their loader is called.
"""

from __future__ import annotations

import csv
import itertools
import logging
import os
import re
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import scipy.sparse as sp

__all__ = [
    "load_arff",
    "load_csv",
    "load_dataset",
    "load_hdf5",
    "load_npz_or_npy",
    "load_zarr",
]

logger = logging.getLogger(__name__)

PathLike = str | os.PathLike[str]

_NUMERIC_TYPES = {"numeric", "real", "integer"}
_ATTRIBUTE = re.compile(  # @attribute <'quoted' | "quoted" | bare name> <type>
    r"""@attribute\s+('(?:\\.|[^'\\])*'|"(?:\\.|[^"\\])*"|[^\s{]+)\s*(.*)""", re.I
)
_SPARSE_BODY = re.compile(r"\s*(?:\d+\s+[^\s,]+\s*(?:,\s*\d+\s+[^\s,]+\s*)*)?")


def _existing(path: PathLike) -> Path:
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no such file or directory: {str(path)!r}")
    return path


# --------------------------------------------------------------------------- ARFF


def _unquote(token: str) -> str:
    if len(token) >= 2 and token[0] == token[-1] and token[0] in "'\"":
        return re.sub(r"\\(.)", r"\1", token[1:-1])
    return token


def _arff_header(lines: Sequence[str], path: Path) -> tuple[list[str], int]:
    """Attribute names and the index of the first line after ``@data``.

    Every attribute must be numeric/real/integer or nominal with numeric values.
    """
    names: list[str] = []
    for i, line in enumerate(lines):
        s = line.strip()
        if not s or s[0] == "%":
            continue
        head = s[:10].lower()
        if head.startswith("@data"):
            return names, i + 1
        if head.startswith("@relation"):
            continue
        m = _ATTRIBUTE.match(s) if head.startswith("@attribute") else None
        if m is None:
            raise ValueError(f"{path}:{i + 1}: unexpected line in ARFF header (missing @data?): {s[:60]!r}")
        name, kind = _unquote(m.group(1)), m.group(2).strip()
        if kind.startswith("{") and kind.endswith("}"):
            values = [_unquote(v.strip()) for v in kind[1:-1].split(",")]
            try:
                [float(v) for v in values]
            except ValueError:
                raise ValueError(
                    f"{path}:{i + 1}: attribute {name!r} is nominal with non-numeric values "
                    f"{kind}; only numeric nominal values such as {{0,1}} are supported"
                ) from None
        elif kind.lower() not in _NUMERIC_TYPES:
            raise ValueError(f"{path}:{i + 1}: attribute {name!r} has unsupported type {kind!r}")
        names.append(name)
    raise ValueError(f"{path}:{len(lines)}: no @data section found")


def _floats(tokens: Sequence[str], cols: Sequence[int], names: Sequence[str], where: str) -> list[float]:
    """Parse values; ``?`` is NaN. ``cols[j]`` is the attribute index of ``tokens[j]``."""
    try:
        return list(map(float, tokens))  # fast path: no '?', no quotes
    except ValueError:
        pass
    out = []
    for tok, col in zip(tokens, cols):
        tok = _unquote(tok.strip())
        try:
            out.append(np.nan if tok == "?" else float(tok))
        except ValueError:
            raise ValueError(f"{where}: attribute {names[col]!r}: cannot parse value {tok!r}") from None
    return out


def load_arff(
    path: PathLike, *, n_targets: int, dtype: Any = np.float64
) -> tuple[np.ndarray | sp.csr_matrix, np.ndarray]:
    """Load a Mulan ARFF file, dense or sparse; the last ``n_targets`` attributes are ``Y``.

    Parameters
    ----------
    path : str or path-like
        ARFF file. Attributes must be numeric/real/integer or nominal with numeric values
        (``{0,1}``). Sparse rows ``{index value, ...}`` use 0-based indices over all
        attributes; absent indices are 0. ``?`` is a missing value and becomes NaN.
    n_targets : int
        Number of trailing attributes that are targets, ``1 <= n_targets < n_attributes``.
    dtype : numpy dtype, default float64
        Floating dtype of ``X`` and ``Y`` (NaN needs a floating dtype).

    Returns
    -------
    X : ndarray or scipy.sparse.csr_matrix of shape (n_samples, n_attributes - n_targets)
        CSR when the data rows are sparse, dense otherwise.
    Y : ndarray of shape (n_samples, n_targets)
        Always dense.

    Raises
    ------
    ValueError
        With the file and line number, for a bad header, a missing ``@data`` section, an
        invalid ``n_targets``, a row with the wrong number of values, a malformed or
        out-of-range sparse entry, or an unparsable value.
    """
    path = _existing(path)
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    names, start = _arff_header(lines, path)
    n_attr = len(names)
    is_int = isinstance(n_targets, (int, np.integer)) and not isinstance(n_targets, bool)
    if not (is_int and 1 <= n_targets < n_attr):
        raise ValueError(
            f"{path}:{start}: n_targets={n_targets!r} must be an integer in [1, {n_attr - 1}] "
            f"({n_attr} attributes declared before @data)"
        )
    n_x = n_attr - n_targets
    rows = [(i + 1, s) for i in range(start, len(lines)) if (s := lines[i].strip()) and s[0] != "%"]
    sparse = bool(rows) and rows[0][1][0] == "{"

    if not sparse:
        cols = range(n_attr)
        values = []
        for lineno, s in rows:
            tokens = s.split(",")
            if s[0] == "{":
                raise ValueError(f"{path}:{lineno}: sparse row in a dense file (the first data row is dense)")
            if len(tokens) != n_attr:
                raise ValueError(f"{path}:{lineno}: expected {n_attr} comma-separated values, got {len(tokens)}")
            values.append(_floats(tokens, cols, names, f"{path}:{lineno}"))
        A = np.array(values, dtype=np.float64).reshape(len(rows), n_attr)
        X = np.ascontiguousarray(A[:, :n_x], dtype=dtype)
        Y = np.ascontiguousarray(A[:, n_x:], dtype=dtype)
    else:
        counts, all_cols, all_vals = [], [], []
        for lineno, s in rows:
            where = f"{path}:{lineno}"
            if s[0] != "{" or s[-1] != "}":
                raise ValueError(f"{where}: expected a sparse row '{{index value, ...}}', got {s[:60]!r}")
            body = s[1:-1]
            if not _SPARSE_BODY.fullmatch(body):
                entries = (e.split() for e in body.split(","))
                bad = " ".join(next((e for e in entries if len(e) != 2 or not e[0].isdigit()), [body]))
                raise ValueError(f"{where}: malformed sparse entry {bad.strip()!r} (expected 'index value')")
            tokens = body.replace(",", " ").split()
            idx = list(map(int, tokens[0::2]))
            if idx and max(idx) >= n_attr:
                raise ValueError(f"{where}: sparse index {max(idx)} out of range for {n_attr} attributes")
            all_vals.extend(_floats(tokens[1::2], idx, names, where))
            all_cols.extend(idx)
            counts.append(len(idx))
        r = np.repeat(np.arange(len(rows)), counts)
        c = np.asarray(all_cols, dtype=np.int64)
        v = np.asarray(all_vals, dtype=np.float64)
        is_x = c < n_x
        X = sp.csr_matrix((v[is_x].astype(dtype), (r[is_x], c[is_x])), shape=(len(rows), n_x))
        X.eliminate_zeros()
        Y = np.zeros((len(rows), n_targets), dtype=dtype)
        Y[r[~is_x], c[~is_x] - n_x] = v[~is_x]
    logger.debug("loaded %s: X %s (%s), Y %s", path, X.shape, "sparse" if sparse else "dense", Y.shape)
    return X, Y


# --------------------------------------------------------------------------- arrays


def _missing_key(path: Path, key: str, present: Sequence[str]) -> ValueError:
    return ValueError(f"{path}: key {key!r} not found; keys present: {sorted(present)}")


def load_npz_or_npy(
    path: PathLike, *, x_key: str = "X", y_key: str | None = "Y"
) -> tuple[np.ndarray, np.ndarray | None]:
    """Load ``X`` from a ``.npy`` file, or ``X`` and ``Y`` from a ``.npz`` archive.

    Parameters
    ----------
    path : str or path-like
        ``.npy`` (holds ``X`` only; the keys are ignored) or ``.npz``.
    x_key, y_key : str
        Array names inside a ``.npz``; ``y_key=None`` reads ``X`` only.

    Returns
    -------
    X : ndarray of shape (n_samples, ...)
    Y : ndarray of shape (n_samples, ...) or None
    """
    path = _existing(path)
    suffix = path.suffix.lower()
    if suffix == ".npy":
        return np.load(path, allow_pickle=False), None
    if suffix != ".npz":
        raise ValueError(f"{path}: expected a .npy or .npz file")
    with np.load(path, allow_pickle=False) as f:
        for key in (x_key, y_key):
            if key is not None and key not in f.files:
                raise _missing_key(path, key, f.files)
        return f[x_key], None if y_key is None else f[y_key]


def load_hdf5(
    path: PathLike, *, x_key: str, y_key: str | None = None
) -> tuple[np.ndarray, np.ndarray | None]:
    """Read datasets ``x_key`` (and ``y_key``) of an HDF5 file into memory.

    Parameters
    ----------
    path : str or path-like
        HDF5 file.
    x_key, y_key : str
        Dataset paths such as ``"train/data"``; ``y_key=None`` reads ``X`` only.

    Returns
    -------
    X : ndarray of shape (n_samples, ...)
    Y : ndarray of shape (n_samples, ...) or None
    """
    try:
        import h5py
    except ImportError as exc:
        raise ImportError("load_hdf5 needs h5py: pip install 'distsketch[io]' (or pip install h5py)") from exc
    path = _existing(path)
    with h5py.File(path, "r") as f:
        present: list[str] = []
        f.visititems(lambda name, obj: present.append(name) if isinstance(obj, h5py.Dataset) else None)
        for key in (x_key, y_key):
            if key is not None and key.strip("/") not in present:
                raise _missing_key(path, key, present)
        return f[x_key][()], None if y_key is None else f[y_key][()]


def load_zarr(path: PathLike, *, x_key: str = "X", y_key: str | None = "Y") -> tuple[Any, Any]:
    """Open arrays ``x_key`` (and ``y_key``) of a zarr v3 group, read-only and lazily.

    Parameters
    ----------
    path : str or path-like
        Directory store of a zarr group.
    x_key, y_key : str
        Array paths inside the group (``"a/b"`` allowed); ``y_key=None`` opens ``X`` only.

    Returns
    -------
    X : zarr.Array of shape (n_samples, ...)
        Not loaded into memory; wrap with ``dask.array.from_zarr`` or slice it.
    Y : zarr.Array of shape (n_samples, ...) or None
    """
    import zarr

    path = _existing(path)
    group = zarr.open_group(path, mode="r")
    present = [name for name, node in group.members(max_depth=None) if isinstance(node, zarr.Array)]
    for key in (x_key, y_key):
        if key is not None and key.strip("/") not in present:
            raise _missing_key(path, key, present)
    return group[x_key], None if y_key is None else group[y_key]


# --------------------------------------------------------------------------- CSV


def load_csv(
    path: PathLike,
    *,
    target_columns: Sequence[int | str] | int | str,
    delimiter: str = ",",
    skip_header: int | None = None,
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

    Returns
    -------
    X : ndarray of shape (n_samples, n_columns - n_targets), float64
        The remaining columns in file order.
    Y : ndarray of shape (n_samples, n_targets), float64
        Target columns in the order given.
    """
    path = _existing(path)
    single = isinstance(target_columns, (int, str, np.integer))
    targets = [target_columns] if single else list(target_columns)
    if not targets:
        raise ValueError("target_columns must name at least one column")
    by_name = any(isinstance(t, str) for t in targets)
    skip = skip_header or 0
    with open(path, encoding="utf-8") as f:
        line = next(itertools.islice(f, skip, None), "")
    fields = next(csv.reader([line.strip().lstrip("#").lstrip()], delimiter=delimiter), [])
    header = [_unquote(s.strip()) for s in fields]
    try:
        [float(s) for s in header]
        header = None  # all numbers: a data row
    except ValueError:
        pass
    if by_name and header is None:
        raise ValueError(f"{path}: target_columns {targets} given by name but line {skip + 1} is not a header")
    skiprows = skip + (header is not None and (by_name or skip_header is None))
    A = np.loadtxt(path, delimiter=delimiter, skiprows=skiprows, quotechar='"', ndmin=2, dtype=np.float64)
    n_cols = A.shape[1]
    if header is not None and len(header) != n_cols:
        raise ValueError(f"{path}: header has {len(header)} names but rows have {n_cols} values")
    cols = []
    for t in targets:
        if isinstance(t, str):
            if t.strip() not in header:
                raise ValueError(f"{path}: no column named {t!r}; columns are {header}")
            cols.append(header.index(t.strip()))
        elif -n_cols <= t < n_cols:
            cols.append(int(t) % n_cols)
        else:
            raise ValueError(f"{path}: target column {t} out of range for {n_cols} columns")
    if len(set(cols)) != len(cols):
        raise ValueError(f"{path}: target_columns {targets} repeat a column")
    rest = sorted(set(range(n_cols)) - set(cols))
    return A[:, rest], A[:, cols]


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
    """
    path = _existing(path)
    suffix = ".zarr" if (path / "zarr.json").exists() else path.suffix.lower()
    if suffix not in _LOADERS or path.is_dir() != (suffix == ".zarr"):
        supported = sorted(_LOADERS)
        raise ValueError(f"{path}: unsupported data format; supported: {supported} (.zarr as a directory)")
    return _LOADERS[suffix](path, **kwargs)
