"""The engine: the block map-reduce (:mod:`.mapreduce`; the active scheduler and computing on it
:mod:`.schedulers`; row maps :mod:`.transform`), row access (:mod:`.rows`), feature maps
(:mod:`.features`), the streaming pass (its plan and sums :mod:`.sums`, its block task and
driver :mod:`.accumulate`, a whole fit's pass :mod:`.fitpass`), solver sweeps (:mod:`.sweep`)
and the zarr store of a fit (:mod:`.store`; its errors, lock and confinement
:mod:`.storeguard`; whole-chunk block writes :mod:`.chunkwrite`). Every n-sized computation
runs here; the package re-exports the map-reduce."""

from .mapreduce import (Reducer, Stored, Workspace, map_blocks, tree_reduce, map_reduce, row_blocks,
    share, map_local, GROUPS_PER_SLOT)
from .schedulers import (compute, parallel_slots, distributed_client, WorkersLost, workers_back,
    local_scheduler)
from .transform import transform_rows, TRANSFORM_ROWS

__all__ = ["Reducer", "Stored", "Workspace", "map_blocks", "tree_reduce", "map_reduce", "compute",
           "row_blocks", "transform_rows", "share", "map_local", "parallel_slots",
           "distributed_client", "WorkersLost", "workers_back", "GROUPS_PER_SLOT",
           "local_scheduler", "TRANSFORM_ROWS"]
