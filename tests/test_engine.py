"""The block map-reduce (distsketch.engine): fixed tree shape, bitwise-equal layouts and
schedulers, stored blocks read in the task, one workspace per task."""

from __future__ import annotations

import dask
import numpy as np
import pytest
import zarr

from distsketch.engine.mapreduce import Reducer, Stored, map_blocks, map_reduce, tree_reduce


class Shape(Reducer):
    """Records the tree: a node of parts ``a, b, …`` becomes the tuple ``(a, b, …)``."""

    def own(self, part):
        return (part,)

    def add(self, acc, part):
        return acc + (part,)


class Sum(Reducer):
    def own(self, part):
        return part.copy()

    def add(self, acc, part):
        acc += part
        return acc


def _leaf(shared, item, ws):
    return item


def _gram(shared, item, ws):
    """A partial sum ``Aᵀ A`` of a row block, through a reused work array."""
    block = np.asarray(item, dtype=np.float64)
    buf = ws.get("f64", block.shape, np.float64)
    np.copyto(buf, block)
    if shared is not None:
        shared.append((ws, buf))  # kept alive: identities stay meaningful
    return buf.T @ buf


def test_tree_shape_depends_only_on_the_number_of_parts():
    with dask.config.set(scheduler="synchronous"):
        leaves = map_blocks(_leaf, list(range(10)), name="t")
        (got,) = dask.compute(tree_reduce(leaves, Shape(), split_every=4))
    assert got == ((0, 1, 2, 3), (4, 5, 6, 7), (8, 9))  # children in block order
    with dask.config.set(scheduler="synchronous"):
        leaves = map_blocks(_leaf, list(range(17)), name="t")
        (got,) = dask.compute(tree_reduce(leaves, Shape(), split_every=4))
        (one,) = dask.compute(tree_reduce(map_blocks(_leaf, [7], name="t"), Shape()))
    assert got == (((0, 1, 2, 3), (4, 5, 6, 7), (8, 9, 10, 11), (12, 13, 14, 15)), ((16,),))
    assert one == 7  # a single block is its own result


def _blocks(n=96, d=5, rows=8, seed=0):
    X = np.random.default_rng(seed).normal(size=(n, d)) * 10.0 ** np.arange(d)
    return X, [X[s:s + rows] for s in range(0, n, rows)]


def _sum_in_tree_order(parts, split_every):
    """The reference: the tree's additions written out in numpy (left folds per node)."""
    while len(parts) > 1:
        nodes = []
        for j in range(0, len(parts), split_every):
            acc = parts[j].copy()
            for p in parts[j + 1:j + split_every]:
                acc += p
            nodes.append(acc)
        parts = nodes
    return parts[0]


@pytest.mark.slow
@pytest.mark.parametrize("scheduler", ["synchronous", "threads", "processes"])
@pytest.mark.parametrize(("fuse", "slots"), [(False, None), (True, 1), (True, 2), (True, 10**6)])
def test_sums_bitwise_equal_to_the_tree_order_in_any_layout(scheduler, fuse, slots):
    """12 blocks, split_every 3: fused first-level tasks (slots 1, 2) or one task per block
    give bitwise the sums of the tree's order, on every local scheduler."""
    X, blocks = _blocks()
    want = _sum_in_tree_order([b.T @ b for b in blocks], 3)
    with dask.config.set(scheduler=scheduler):
        got = map_reduce(_gram, blocks, reducer=Sum(), split_every=3, fuse=fuse, slots=slots)
    np.testing.assert_array_equal(got, want)


def test_fused_tasks_share_one_workspace():
    """With fused first-level nodes a task reuses its block arrays; each task has its own."""
    X, blocks = _blocks()
    calls: list = []
    with dask.config.set(scheduler="synchronous"):
        leaves = map_blocks(_gram, blocks, shared=calls, reducer=Sum(), split_every=3,
                            fuse=True, slots=1, name="ws")
        assert sum(str(leaf.key).startswith("ws-group-") for leaf in leaves) == 3
        dask.compute(tree_reduce(leaves, Sum(), split_every=3))
    assert len(calls) == 12
    # 3 fused tasks of 3 blocks (one workspace and one buffer each) + 3 single-block tasks
    assert len({id(ws) for ws, _ in calls}) == 6 and len({id(b) for _, b in calls}) == 6
    for ws, buf in calls:
        assert all(b is buf for w, b in calls if w is ws)


def test_stored_blocks_are_read_inside_the_task(tmp_path):
    """A pass over a stored array: ``Stored`` references travel in the graph, the rows are
    read by the task; the result equals the pass over the in-memory blocks."""
    X, blocks = _blocks()
    z = zarr.create_array(str(tmp_path / "c.zarr"), shape=X.shape, chunks=(8, 5), dtype="f8")
    z[:] = X
    items = [Stored(z, s, s + 8) for s in range(0, len(X), 8)]
    with dask.config.set(scheduler="threads"):
        got = map_reduce(_gram, items, reducer=Sum(), split_every=4)
        want = map_reduce(_gram, blocks, reducer=Sum(), split_every=4)
    np.testing.assert_array_equal(got, want)


def test_errors():
    with pytest.raises(ValueError, match="fuse=True needs the reducer"):
        map_blocks(_leaf, [1, 2], fuse=True)
    with pytest.raises(ValueError, match="split_every must be >= 2"):
        tree_reduce([1, 2], Sum(), split_every=1)
    with pytest.raises(ValueError, match="nothing to reduce"):
        tree_reduce([], Sum())


@pytest.mark.cluster
def test_sums_on_a_local_cluster_equal_the_threaded_ones():
    distributed = pytest.importorskip("distributed")
    X, blocks = _blocks()
    with dask.config.set(scheduler="threads"):
        want = map_reduce(_gram, blocks, reducer=Sum(), split_every=3)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster):
        got = map_reduce(_gram, blocks, reducer=Sum(), split_every=3)
    np.testing.assert_array_equal(got, want)
