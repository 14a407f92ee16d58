"""Data loaders returning ``(X, Y)`` pairs.

Formats
-------
- ``.arff`` -- :func:`load_arff`: Mulan ARFF, dense or sparse rows; the last ``n_targets``
  attributes are ``Y``, or the labels named by mulan's XML file next to it
  (:func:`mulan_labels`). X is a dense ndarray or a CSR matrix (sparse file); Y is dense.
- ``.npy`` / ``.npz`` -- :func:`load_npz_or_npy`: X only / named arrays ``X`` and ``Y``
  (``y`` is accepted for ``Y``).
- ``.csv`` -- :func:`load_csv`: numeric text, targets chosen by position or header name.
- ``.h5`` / ``.hdf5`` -- :func:`load_hdf5`: named datasets read into memory (needs h5py,
  ``pip install distsketch[io]``).
- ``.zarr`` directory -- :func:`load_zarr`: named arrays of a zarr v3 group, left on disk.

:func:`load_dataset` dispatches on the extension; :func:`load_table` does the same and also
returns the feature and target names the file declares (CSV header, ARFF attributes).
:func:`handle_missing` checks, drops or imputes missing values (NaN), naming file, column and
row. Only numpy and scipy are needed at import time; h5py and zarr are imported when their
loader is called.

Example::

    from distsketch.io import load_dataset

    X, Y = load_dataset("rf1-train.arff", n_targets=8)            # mulan ARFF
    X, Y = load_dataset("bibtex-train.arff")                       # labels from bibtex.xml
    X, Y = load_dataset("gt_2011.csv", target_columns=["NOX"], drop_columns=["CO"])
"""

from __future__ import annotations

import csv
import itertools
import logging
import os
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any, NamedTuple, Sequence

import numpy as np
import scipy.sparse as sp

__all__ = [
    "MISSING",
    "Table",
    "handle_missing",
    "load_arff",
    "load_csv",
    "load_dataset",
    "load_hdf5",
    "load_npz_or_npy",
    "load_table",
    "load_zarr",
    "mulan_labels",
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


def mulan_labels(path: PathLike) -> list[str] | None:
    """Label names from mulan's XML file next to an ARFF file, or None when there is none.

    Mulan ships one ``<name>.xml`` per data set (``<labels><label name="..."/>...``) beside
    its ARFF files, whose names extend it (``bibtex.xml`` for ``bibtex-train.arff``):
    the XML file whose name is the longest prefix of the ARFF file's name is used.

    Parameters
    ----------
    path : str or path-like
        The ARFF file.

    Returns
    -------
    list of str or None
        The label names in the XML file's order.
    """
    path = Path(path)
    stem = path.stem.lower()
    found = sorted((p for p in path.parent.glob("*.xml") if stem.startswith(p.stem.lower())),
                   key=lambda p: len(p.stem), reverse=True)
    if not found:
        return None
    xml = found[0]
    try:
        root = ET.parse(xml).getroot()
    except ET.ParseError as exc:
        raise ValueError(f"{xml}: not valid XML ({exc}); mulan's label file lists "
                         f"<label name=\"...\"> elements") from None
    names = [el.get("name") for el in root.iter() if el.tag.rsplit("}", 1)[-1] == "label"]
    if not names or any(n is None for n in names):
        raise ValueError(f"{xml}: expected mulan's <labels><label name=\"...\"/>...</labels>")
    return names


def _columns(spec: Sequence[int | str] | int | str | None, names: Sequence[str] | None,
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
    """A loaded data set: ``X``, ``Y`` (or None) and the column names the file declares."""

    X: Any
    Y: Any
    feature_names: list[str] | None
    target_names: list[str] | None


def load_arff(
    path: PathLike, *, n_targets: int | None = None, dtype: Any = np.float64,
    drop_columns: Sequence[int | str] | None = None,
) -> tuple[np.ndarray | sp.csr_matrix, np.ndarray]:
    """Load a Mulan ARFF file, dense or sparse; the last ``n_targets`` attributes are ``Y``.

    Parameters
    ----------
    path : str or path-like
        ARFF file. Attributes must be numeric/real/integer or nominal with numeric values
        (``{0,1}``). Sparse rows ``{index value, ...}`` use 0-based indices over all
        attributes; absent indices are 0. ``?`` is a missing value and becomes NaN.
    n_targets : int, optional
        Number of trailing attributes that are targets, ``1 <= n_targets < n_attributes``.
        When omitted, the labels are those named by mulan's XML file next to ``path``
        (:func:`mulan_labels`), wherever they are among the attributes; when given and an XML
        file is present, it must name the last ``n_targets`` attributes.
    dtype : numpy dtype, default float64
        Floating dtype of ``X`` and ``Y`` (NaN needs a floating dtype).
    drop_columns : sequence of int or str, optional
        Attributes left out of ``X``, by name or by position among all attributes.

    Returns
    -------
    X : ndarray or scipy.sparse.csr_matrix of shape (n_samples, n_attributes - n_targets - n_dropped)
        CSR when the data rows are sparse, dense otherwise.
    Y : ndarray of shape (n_samples, n_targets)
        Always dense.

    Raises
    ------
    ValueError
        With the file and line number, for a bad header, a missing ``@data`` section, an
        invalid ``n_targets`` (or one that disagrees with the XML file), a row with the wrong
        number of values, a malformed or out-of-range sparse entry, or an unparsable value.
    """
    t = _read_arff(path, n_targets=n_targets, dtype=dtype, drop_columns=drop_columns)
    return t.X, t.Y


def _arff_targets(path: Path, names: list[str], start: int, n_targets: Any,
                  features_only: bool) -> list[int]:
    """Attribute positions of the targets: the last ``n_targets``, or mulan's XML labels."""
    n_attr = len(names)
    if features_only:
        return []
    labels = mulan_labels(path)
    if n_targets is None:
        if labels is None:
            raise ValueError(f"{path}: n_targets is required (the number of trailing attributes "
                             f"that are targets): no mulan XML label file next to it")
        missing = [lab for lab in labels if lab not in names]
        if missing:
            raise ValueError(f"{path}: the labels {missing[:5]} of mulan's XML file are not "
                             f"attributes of this file")
        return [names.index(lab) for lab in labels]
    is_int = isinstance(n_targets, (int, np.integer)) and not isinstance(n_targets, bool)
    if not (is_int and 1 <= n_targets < n_attr):
        raise ValueError(
            f"{path}:{start}: n_targets={n_targets!r} must be an integer in [1, {n_attr - 1}] "
            f"({n_attr} attributes declared before @data)"
        )
    cols = list(range(n_attr - n_targets, n_attr))
    if labels is not None and [names[c] for c in cols] != labels:
        raise ValueError(
            f"{path}: n_targets={n_targets} disagrees with mulan's XML file, which names "
            f"{len(labels)} labels ({labels[:3]}...); the last {n_targets} attributes are "
            f"{[names[c] for c in cols][:3]}...: leave n_targets out to use the XML labels")
    return cols


def _read_arff(path: PathLike, *, n_targets: Any = None, dtype: Any = np.float64,
               drop_columns: Sequence[int | str] | None = None,
               features_only: bool = False) -> Table:
    """:func:`load_arff` with names; ``features_only``: every attribute (not dropped) is X."""
    path = _existing(path)
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    names, start = _arff_header(lines, path)
    n_attr = len(names)
    tcols = _arff_targets(path, names, start, n_targets, features_only)
    dcols = _columns(drop_columns, names, n_attr, path, "drop_columns")
    if set(dcols) & set(tcols):
        raise ValueError(f"{path}: drop_columns {drop_columns} name a target attribute")
    xcols = [c for c in range(n_attr) if c not in set(tcols) | set(dcols)]
    n_t = len(tcols)
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
        X = np.ascontiguousarray(A[:, xcols], dtype=dtype)
        Y = np.ascontiguousarray(A[:, tcols], dtype=dtype)
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
        xpos = np.full(n_attr, -1, dtype=np.int64)
        xpos[xcols] = np.arange(len(xcols))
        tpos = np.full(n_attr, -1, dtype=np.int64)
        tpos[tcols] = np.arange(n_t)
        is_x, is_t = xpos[c] >= 0, tpos[c] >= 0
        X = sp.csr_matrix((v[is_x].astype(dtype), (r[is_x], xpos[c[is_x]])), shape=(len(rows), len(xcols)))
        X.eliminate_zeros()
        Y = np.zeros((len(rows), n_t), dtype=dtype)
        Y[r[is_t], tpos[c[is_t]]] = v[is_t]
    logger.debug("loaded %s: X %s (%s), Y %s", path, X.shape, "sparse" if sparse else "dense", Y.shape)
    return Table(X, Y, [names[c] for c in xcols], [names[c] for c in tcols])


# --------------------------------------------------------------------------- arrays



def _missing_key(path: Path, key: str, present: Sequence[str]) -> ValueError:
    return ValueError(f"{path}: key {key!r} not found; keys present: {sorted(present)}")


def _find_key(path: Path, key: str | None, present: Sequence[str]) -> str | None:
    """``key`` if present; the default names ``X``/``Y`` also match ``x``/``y``."""
    if key is None or key.strip("/") in present:
        return key
    if key in ("X", "Y") and key.lower() in present:
        return key.lower()
    if key in ("X", "Y"):
        raise ValueError(f"{path}: key {key!r} (or {key.lower()!r}) not found; keys present: "
                         f"{sorted(present)}; name the arrays with x_key / y_key")
    raise _missing_key(path, key, present)


def load_npz_or_npy(
    path: PathLike, *, x_key: str = "X", y_key: str | None = "Y"
) -> tuple[np.ndarray, np.ndarray | None]:
    """Load ``X`` from a ``.npy`` file, or ``X`` and ``Y`` from a ``.npz`` archive.

    Parameters
    ----------
    path : str or path-like
        ``.npy`` (holds ``X`` only; the keys are ignored) or ``.npz``.
    x_key, y_key : str
        Array names inside a ``.npz``; ``y_key=None`` reads ``X`` only. The default names
        ``"X"`` and ``"Y"`` also find arrays saved as ``x`` and ``y``.

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
        x_key, y_key = (_find_key(path, k, f.files) for k in (x_key, y_key))
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
        x_key, y_key = (_find_key(path, k, present) for k in (x_key, y_key))
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
    x_key, y_key = (_find_key(path, k, present) for k in (x_key, y_key))
    return group[x_key], None if y_key is None else group[y_key]


# --------------------------------------------------------------------------- CSV


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
    """
    single = isinstance(target_columns, (int, str, np.integer))
    targets = [target_columns] if single else list(target_columns)
    if not targets:
        raise ValueError("target_columns must name at least one column")
    t = _read_csv(path, target_columns=targets, delimiter=delimiter, skip_header=skip_header,
                  drop_columns=drop_columns)
    return t.X, t.Y


def _csv_header(path: Path, *, delimiter: str, skip: int) -> list[str] | None:
    """The names of the header line (``skip`` lines down), or None when it is a data row."""
    with open(path, encoding="utf-8") as f:
        line = next(itertools.islice(f, skip, None), "")
    fields = next(csv.reader([line.strip().lstrip("#").lstrip()], delimiter=delimiter), [])
    header = [_unquote(s.strip()) for s in fields]
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


def _read_csv(path: PathLike, *, target_columns: Sequence[int | str], delimiter: str = ",",
              skip_header: int | None = None,
              drop_columns: Sequence[int | str] | int | str | None = None) -> Table:
    """:func:`load_csv` with names; an empty ``target_columns`` makes every column (not
    dropped) a feature, with ``Y`` of width 0."""
    path = _existing(path)
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
    dropped = _columns(drop_columns, names, n_cols, path, "drop_columns")
    if set(dropped) & set(cols):
        raise ValueError(f"{path}: drop_columns {drop_columns} name a target column")
    rest = sorted(set(range(n_cols)) - set(cols) - set(dropped))
    return Table(A[:, rest], A[:, cols], None if names is None else [names[i] for i in rest],
                 None if names is None else [names[i] for i in cols])


def count_columns(path: PathLike, *, delimiter: str = ",") -> int:
    """The number of columns of a CSV file (its first line) or attributes of an ARFF file."""
    path = _existing(path)
    if path.suffix.lower() == ".arff":
        header: list[str] = []
        with open(path, encoding="utf-8") as f:
            for line in f:
                header.append(line)
                if line.strip()[:5].lower() == "@data":
                    break
        return len(_arff_header(header, path)[0])
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
    """
    path = _existing(path)
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
    """
    path = _existing(path)
    suffix = _format(path)
    if suffix == ".arff":
        if features_only:
            kwargs.pop("n_targets", None)
        t = _read_arff(path, drop_columns=drop_columns, features_only=features_only, **kwargs)
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
        t = _read_csv(path, target_columns=targets, drop_columns=drop_columns, **kwargs)
    else:
        if features_only:
            kwargs["y_key"] = None
        X, Y = _LOADERS[suffix](path, **kwargs)
        if drop_columns is not None:
            if not isinstance(X, np.ndarray) and not sp.issparse(X):
                raise ValueError(f"{path}: drop_columns is not supported for arrays read lazily "
                                 f"(zarr); drop the columns when writing the array")
            keep = sorted(set(range(X.shape[1])) - set(_columns(drop_columns, None, X.shape[1],
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


def handle_missing(X, Y=None, how: str = "error", *, sources: Sequence[tuple[str, int]] | str = "X",
                   feature_names: Sequence[str] | None = None,
                   target_names: Sequence[str] | None = None, means=None, argument: str = "missing"):
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
