"""Small dense linear algebra of the driver and the tasks: block products (:mod:`.blocks`),
whitening and the input side's factors (:mod:`.solve`), solves for many shifts
(:mod:`.shifted`), top-k block math (:mod:`.topk`).

Block math: numpy and scipy only (no dask)."""
