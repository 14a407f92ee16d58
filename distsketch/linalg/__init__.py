"""Small dense linear algebra of the driver and the tasks: block products (:mod:`.blocks`),
whitening and shifted solves (:mod:`.solve`), top-k block math (:mod:`.topk`).

Block math: numpy and scipy only (no dask)."""
