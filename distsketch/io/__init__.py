"""Input and output: data loaders (:mod:`.loaders`, re-exported here) and saved models
(:mod:`.persist`)."""

from .loaders import (MISSING, Table, handle_missing, load_arff, load_csv, load_dataset, load_hdf5,
    load_npz_or_npy, load_table, load_zarr, mulan_labels, PathLike, count_columns)

__all__ = ["MISSING", "Table", "handle_missing", "load_arff", "load_csv", "load_dataset",
           "load_hdf5", "load_npz_or_npy", "load_table", "load_zarr", "mulan_labels", "PathLike",
           "count_columns"]
