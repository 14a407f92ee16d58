"""Array files: ``.npy`` / ``.npz`` (:func:`load_npz_or_npy`), HDF5 (:func:`load_hdf5`, needs
h5py) and zarr v3 groups (:func:`load_zarr`, left on disk), read by array name.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np

from .tables import PathLike, existing

__all__ = ["load_hdf5", "load_npz_or_npy", "load_zarr"]


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

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> import numpy as np
    >>> from distsketch.io import load_npz_or_npy
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     np.savez(Path(tmp) / "data.npz", X=np.ones((3, 2)), y=np.zeros(3))
    ...     X, Y = load_npz_or_npy(Path(tmp) / "data.npz")
    >>> X.shape, Y.shape
    ((3, 2), (3,))
    """
    path = existing(path)
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

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> import h5py
    >>> import numpy as np
    >>> from distsketch.io import load_hdf5
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     with h5py.File(Path(tmp) / "data.h5", "w") as f:
    ...         _ = f.create_dataset("train/X", data=np.ones((3, 2)))
    ...     X, Y = load_hdf5(Path(tmp) / "data.h5", x_key="train/X")
    >>> X.shape, Y is None
    ((3, 2), True)
    """
    try:
        import h5py
    except ImportError as exc:
        raise ImportError("load_hdf5 needs h5py: pip install 'distsketch[io]' (or pip install h5py)") from exc
    path = existing(path)
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

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> import numpy as np
    >>> import zarr
    >>> from distsketch.io import load_zarr
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     group = zarr.open_group(Path(tmp) / "data.zarr", mode="w")
    ...     _ = group.create_array("X", data=np.ones((4, 2)))
    ...     _ = group.create_array("Y", data=np.zeros(4))
    ...     X, Y = load_zarr(Path(tmp) / "data.zarr")
    ...     X[:2].shape, Y.shape
    ((2, 2), (4,))
    """
    import zarr

    path = existing(path)
    group = zarr.open_group(path, mode="r")
    present = [name for name, node in group.members(max_depth=None) if isinstance(node, zarr.Array)]
    x_key, y_key = (_find_key(path, k, present) for k in (x_key, y_key))
    return group[x_key], None if y_key is None else group[y_key]
