"""ARFF files (mulan's multi-label format): :func:`load_arff` and :func:`mulan_labels`.

Dense or sparse rows; the last ``n_targets`` attributes are ``Y``, or the labels named by
mulan's XML file next to the ARFF file. X is a dense ndarray or a CSR matrix (sparse file); Y
is dense.
"""

from __future__ import annotations

import logging
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import scipy.sparse as sp

from .tables import PathLike, Table, columns, existing

__all__ = ["arff_header", "load_arff", "mulan_labels", "read_arff", "unquote"]

logger = logging.getLogger(__name__)

_NUMERIC_TYPES = {"numeric", "real", "integer"}
_ATTRIBUTE = re.compile(  # @attribute <'quoted' | "quoted" | bare name> <type>
    r"""@attribute\s+('(?:\\.|[^'\\])*'|"(?:\\.|[^"\\])*"|[^\s{]+)\s*(.*)""", re.I
)
_SPARSE_BODY = re.compile(r"\s*(?:\d+\s+[^\s,]+\s*(?:,\s*\d+\s+[^\s,]+\s*)*)?")


# --------------------------------------------------------------------------- ARFF


def unquote(token: str) -> str:
    if len(token) >= 2 and token[0] == token[-1] and token[0] in "'\"":
        return re.sub(r"\\(.)", r"\1", token[1:-1])
    return token


def arff_header(lines: Sequence[str], path: Path) -> tuple[list[str], int]:
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
        name, kind = unquote(m.group(1)), m.group(2).strip()
        if kind.startswith("{") and kind.endswith("}"):
            values = [unquote(v.strip()) for v in kind[1:-1].split(",")]
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
        tok = unquote(tok.strip())
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

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> from distsketch.io import mulan_labels
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     _ = (Path(tmp) / "toy.xml").write_text(
    ...         '<labels><label name="l1"/><label name="l2"/></labels>')
    ...     mulan_labels(Path(tmp) / "toy-train.arff")
    ['l1', 'l2']
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

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> from distsketch.io import load_arff
    >>> arff = ("@relation toy\\n@attribute x1 numeric\\n@attribute x2 numeric\\n"
    ...         "@attribute l1 {0,1}\\n@attribute l2 {0,1}\\n@data\\n0.5,1,1,0\\n1.5,2,0,1\\n")
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     path = Path(tmp) / "toy.arff"
    ...     _ = path.write_text(arff)
    ...     X, Y = load_arff(path, n_targets=2)
    >>> X.tolist(), Y.tolist()
    ([[0.5, 1.0], [1.5, 2.0]], [[1.0, 0.0], [0.0, 1.0]])
    """
    t = read_arff(path, n_targets=n_targets, dtype=dtype, drop_columns=drop_columns)
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


def read_arff(path: PathLike, *, n_targets: Any = None, dtype: Any = np.float64,
               drop_columns: Sequence[int | str] | None = None,
               features_only: bool = False) -> Table:
    """:func:`load_arff` with names; ``features_only``: every attribute (not dropped) is X."""
    path = existing(path)
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    names, start = arff_header(lines, path)
    n_attr = len(names)
    tcols = _arff_targets(path, names, start, n_targets, features_only)
    dcols = columns(drop_columns, names, n_attr, path, "drop_columns")
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
