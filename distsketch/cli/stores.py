"""What the commands read of a store: open it, the fit's command-line record, the saved model,
and new data files read with the fit's ``[data]`` options.

Like :mod:`distsketch.cli.commands`, this module imports only the standard library at import
time; each function imports what it needs.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

__all__ = ["open_store", "stored_cli_config", "load_model", "with_progress", "input_file",
           "refuse_foreign_store_path", "store_size_estimate"]


def open_store(store: str, *, solved: bool):
    """The zarr group of a distsketch store, or a message saying what ``store`` is instead.

    ``solved``: the store must hold a fitted model (predict, evaluate), not an incomplete fit.
    """
    path = Path(store)
    if not path.exists():
        raise FileNotFoundError(f"store {store} does not exist")
    if not path.is_dir():
        raise ValueError(f"store {store} is a file, not a distsketch store (a store is the "
                         f"directory `distsketch fit` writes, [store] path of its config)")
    if not (path / "zarr.json").is_file():
        raise ValueError(f"store {store} is not a distsketch store (a directory without zarr "
                         f"metadata; a store is the directory `distsketch fit` writes)")
    import zarr

    from ..engine.storeguard import refuse_links

    refuse_links(path, location=str(store))  # info reads nothing through a link either
    try:
        group = zarr.open_group(store, mode="r")
        meta = dict(group.attrs.get("distsketch", {}))
    except Exception as exc:  # noqa: BLE001 - reported as what it means for the user
        raise ValueError(f"store {store}: its zarr metadata cannot be read ({type(exc).__name__}: "
                         f"{exc}); it is damaged or not a distsketch store") from None
    if not meta:
        raise ValueError(f"store {store} is not a distsketch store (a zarr group distsketch did "
                         f"not write)")
    if solved and meta.get("status") != "solved":
        raise ValueError(f"store {store} holds an incomplete fit (status {meta.get('status')!r}): "
                         f"no model to use yet; run `distsketch fit` again with the same config "
                         f"to complete it (`distsketch info {store}` shows what is done)")
    return group


def stored_cli_config(group) -> dict:
    return dict(group.attrs.get("distsketch_cli", {}))


def load_model(args):
    from ..io.persist import load

    model = load(args.store, trusted=args.trusted)
    if "options" in model.get_params(deep=False):  # the saved fit's choice of progress bars is not ours
        model.set_params(options=with_progress(model.options, not args.quiet))
    return model


def with_progress(options, progress: bool):
    import dataclasses

    from ..options import EngineOptions

    return dataclasses.replace(options or EngineOptions(), progress=progress)


def input_file(path, stored: dict, *, key: str, targets: bool, n_features: int | None):
    """Data for a saved model, read with the fit's ``[data]`` format options."""
    import numpy as np

    from .config import read_data

    data = dict(stored.get("data", {}))
    for k in ("train", "test"):
        data.pop(k, None)
    if not targets and data.get("missing") == "drop":
        data["missing"] = "error"  # dropping rows would misalign the predictions with the input
    means = stored.get("impute_means")
    if isinstance(path, list):
        path = [Path(p) for p in path]
    else:
        import glob

        found = sorted(glob.glob(path)) if glob.has_magic(str(path)) else None
        if found == []:
            raise FileNotFoundError(f"{key}: no file matches the pattern {path!r}")
        path = [Path(p) for p in found] if found else Path(path)
    out = read_data(path, data, key=key, targets=targets, n_features=n_features,
                    impute_means=None if means is None else np.asarray(means))
    fitted, given = stored.get("feature_names"), out.feature_names
    if fitted and given and list(given) != list(fitted):
        # columns are matched by position: a reordered or renamed file would predict wrongly
        seen, present = set(fitted), set(given)
        missing = [c for c in fitted if c not in present]
        unseen = [c for c in given if c not in seen]
        how = (f"lacks the training feature column(s) {missing[:5]}" if missing
               else f"has columns the training file had not ({unseen[:5]})" if unseen
               else "has the training file's columns in another order")
        raise ValueError(f"{key}: {path} {how}; the model reads features by position: give them "
                         f"as in training ({list(fitted)[:10]}{' …' if len(fitted) > 10 else ''})")
    return out


def refuse_foreign_store_path(path: Path) -> None:
    """``fit --store DIR``: a non-empty directory that is not a distsketch store, or a file, is
    refused before the data is read (the fit itself refuses it too, later)."""
    if path.is_file():
        raise ValueError(f"store: {path} is a file; give a new or empty directory, or an "
                         f"existing distsketch store")
    if path.is_dir() and any(path.iterdir()):
        meta = {}
        if (path / "zarr.json").is_file():
            import zarr

            with contextlib.suppress(Exception):
                meta = dict(zarr.open_group(os.fspath(path), mode="r").attrs.get("distsketch", {}))
        if not meta:
            held = sorted(p.name for p in path.iterdir())[:5]
            raise ValueError(f"store: {path} is a non-empty directory that is not a distsketch "
                             f"store (it holds {held}); distsketch never writes among files it "
                             f"did not write: use a new or empty path")


def store_size_estimate(model, n: int, d: int) -> str | None:
    """The expected size of the store a fit writes, in words (see store.expected_store_bytes)."""
    from ..engine.store import expected_store_bytes

    kinds = type(model)._param_kinds
    sketches = [k for k, kind in kinds.items() if kind == "sketch"]
    m_in = m_out = None
    exact_in = exact_out = False
    output_side = False
    for k in sketches:
        spec = getattr(model, k, None)
        m = getattr(spec, "m", None) if spec is not None else None
        if k.startswith("output"):
            output_side = True
            m_out, exact_out = (m, False) if m else (None, True)
        else:
            m_in, exact_in = (m, False) if m else (n, True)
    if m_in is None:
        return None
    opts = model.options
    dtype = "float64" if exact_in or exact_out else getattr(opts, "block_dtype", "float32")
    sizes = expected_store_bytes(n, m_in, m_out if output_side and not exact_out else None, dtype)
    total = sum(sizes.values())
    parts = ", ".join(f"{name} {_bytes(b)}" for name, b in sizes.items())
    return f"{_bytes(total)} ({parts}; n = {n:,}, m = {m_in}{f'/{m_out}' if m_out else ''}, {dtype})"


def _bytes(b: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if b < 1024 or unit == "TiB":
            return f"{b:.0f} {unit}" if unit == "B" else f"{b:.1f} {unit}"
        b /= 1024
    return f"{b:.1f} TiB"  # pragma: no cover
