"""The engine: the block map-reduce (:mod:`.mapreduce`; the active scheduler and computing on it
:mod:`.schedulers`; row maps :mod:`.transform`), row access (:mod:`.rows`), feature maps
(:mod:`.features`), the streaming pass (its plan and sums :mod:`.sums`, its block task and
driver :mod:`.accumulate`, a whole fit's pass :mod:`.fitpass`), solver sweeps (:mod:`.sweep`)
and the zarr store of a fit (:mod:`.store`; its errors, lock and confinement
:mod:`.storeguard`; whole-chunk block writes :mod:`.chunkwrite`). Every n-sized computation
runs here; the package re-exports the map-reduce."""

from .mapreduce import (
    GROUPS_PER_SLOT,
    Reducer,
    Stored,
    Workspace,
    map_blocks,
    map_local,
    map_reduce,
    row_blocks,
    share,
    tree_reduce,
)
from .schedulers import (
    WorkersLost,
    compute,
    distributed_client,
    local_scheduler,
    parallel_slots,
    workers_back,
)
from .transform import TRANSFORM_ROWS, transform_rows

__all__ = ["Reducer", "Stored", "Workspace", "map_blocks", "tree_reduce", "map_reduce", "compute",
           "row_blocks", "transform_rows", "share", "map_local", "parallel_slots",
           "distributed_client", "WorkersLost", "workers_back", "GROUPS_PER_SLOT",
           "local_scheduler", "TRANSFORM_ROWS"]
