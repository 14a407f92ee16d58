"""Input and output: data loaders (:mod:`.loaders`, dispatching to :mod:`.arff`,
:mod:`.delimited` and :mod:`.arrays`; tables and missing values in :mod:`.tables`, all
re-exported here) and saved models (:mod:`.persist`, their JSON in :mod:`.model_json`)."""

from .arff import load_arff, mulan_labels
from .arrays import load_hdf5, load_npz_or_npy, load_zarr
from .delimited import load_csv
from .loaders import count_columns, load_dataset, load_table
from .tables import MISSING, PathLike, Table, handle_missing

__all__ = ["MISSING", "Table", "handle_missing", "load_arff", "load_csv", "load_dataset",
           "load_hdf5", "load_npz_or_npy", "load_table", "load_zarr", "mulan_labels", "PathLike",
           "count_columns"]
