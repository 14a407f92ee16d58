"""The streaming pass: sums vs dense formulas, invariance, read-once, resume, store states."""

import collections
import functools
import os
from pathlib import Path

import dask
import dask.array as da
import numpy as np
import pytest
import scipy.sparse as sp
import zarr
from zarr.storage import LocalStore, WrapperStore

import distsketch as ds
from conftest import all_sketches
from distsketch.engine.store import open_fit_store
from passhelpers import CountingGaussian, N, model, problem, sums_of
from reference.closed_forms import dense as _dense
from reference.closed_forms import pass_sums
from reference.errors import norm_rel_err

#: The papers' estimator (no intercept): what the dense formulas here write.
_KRR = functools.partial(ds.SketchedKRR, fit_intercept=False)

HERE = Path(__file__).resolve().parent


def assert_same_sums(a, b, tol=1e-12):
    assert set(a) == set(b)
    for key in a:
        if key == "U":
            np.testing.assert_array_equal(a[key][0], b[key][0])
            np.testing.assert_array_equal(a[key][1], b[key][1])
        else:
            assert norm_rel_err(a[key], b[key]) <= tol, key


SKETCH_PAIRS = [(name, name) for name in sorted(all_sketches(N))] + [
    ("identity", "gaussian"), ("subsampling", "identity")]


@pytest.mark.parametrize(("x_name", "y_name"), SKETCH_PAIRS)
def test_sums_equal_dense_formulas(tmp_path, x_name, y_name, block_dtype):
    """The sums are the dense formulas of docs/design/engine.md ("The streaming pass") applied to the blocks the store holds:
    float64 blocks are C = K_X R_Xᵀ and D = K_Y R_Yᵀ to rounding; float32 blocks are those
    values rounded to float32 (exponentials evaluated in float32), and the sums are float64
    sums of exactly the stored values, which is what makes a resumed pass bitwise the same."""
    X, Y = problem()
    sx, sy = all_sketches(N)[x_name], all_sketches(N)[y_name]
    kx, ky = ds.Gaussian(gamma=0.4), ds.Gaussian(gamma=0.5)
    m = ds.SISOKR(kx, ky, input_sketch=sx, output_sketch=sy, random_state=3, store=tmp_path / "s",
                  options=ds.EngineOptions(block_rows=17, gram_chunk=11,
                                           block_dtype=block_dtype)).fit(X, Y)
    Rx, Ry = _dense(m.input_sketch_.matrix()), _dense(m.output_sketch_.matrix())
    exact_c, exact_d = kx(X, X) @ Rx.T, ky(Y, Y) @ Ry.T
    stored = zarr.open_group(str(tmp_path / "s"), mode="r")["pass"]
    # an exact side's blocks enter the solve as they are: they stay float64
    dtype = "float64" if "identity" in (x_name, y_name) else block_dtype
    assert stored["C"].dtype == np.dtype(dtype)
    assert ("D" in stored) == (y_name != "identity")
    C = stored["C"][:]
    D = stored["D"][:] if "D" in stored else exact_d
    # float32 blocks: kernel values to about 2 float32 ulps (the exponent's rounding, then exp)
    block_tol = 1e-12 if dtype == "float64" else 5e-7
    assert norm_rel_err(C, exact_c) <= block_tol
    assert norm_rel_err(D, exact_d) <= block_tol
    want = pass_sums(kx, Rx, X, ky, Ry, Y, C=C, D=D)
    want["C"], want["D"] = C, D
    got = sums_of(tmp_path / "s")
    # an exact side needs C instead of its sums, and an exact input side takes D itself
    # instead of M = Dᵀ K_X (docs/design/engine.md, "The streaming pass"; distsketch.solvers.direct.sisokr_sums)
    expected = set()
    expected |= {"C"} if x_name == "identity" else {"G", "B"}
    if y_name == "identity":
        expected |= {"C"}
    else:
        expected |= {"D", "E"} if x_name == "identity" else {"M", "E"}
    # a model that can take appended rows keeps its rows' digest too (docs/design/growing.md)
    digest = {"digest"} if "identity" not in (x_name, y_name) else set()
    assert set(got) == expected | {"U"} | digest
    for key in expected:
        assert norm_rel_err(got[key], want[key]) <= 1e-12, key


def test_vector_target_sum_b(tmp_path, block_dtype):
    X, Y = problem()
    k = ds.Gaussian(gamma=0.4)
    m = _KRR(k, sketch=ds.CountSketch(20), random_state=1, store=tmp_path / "k",
                       options=ds.EngineOptions(block_rows=13, block_dtype=block_dtype)).fit(X, Y[:, :2])
    C = zarr.open_group(str(tmp_path / "k"), mode="r")["pass/C"][:]
    want = pass_sums(k, m.sketch_.matrix(), X, targets=Y[:, :2], C=C)
    got = sums_of(tmp_path / "k")
    assert set(got) == {"G", "B", "b", "digest"}  # digest: the rows' identity for partial_fit
    for key in want:
        assert norm_rel_err(got[key], want[key]) <= 1e-12, key


def _fit_sums(tmp_path, tag, X, Y, block_rows, **kw):
    path = tmp_path / tag
    model(store=path, block_rows=block_rows, **kw).fit(X, Y)
    return sums_of(path)


@pytest.mark.slow
def test_sums_invariant_to_chunking_and_input_type(tmp_path):
    X, Y = problem()
    ref = _fit_sums(tmp_path, "ref", X, Y, N)  # one block
    variants = {
        "numpy-b7": (X, Y, 7),
        "numpy-b16": (X, Y, 16),
        "numpy-gram-chunk-5": (X, Y, 16, {"gram_chunk": 5}),
        "dask-odd-chunks": (da.from_array(X, chunks=(23, 2)), da.from_array(Y, chunks=(31, 6)), 10),
        "sparse": (sp.csr_array(X), sp.csr_matrix(Y), 9),
        "zarr": (_to_zarr(tmp_path / "x.zarr", X, 10), _to_zarr(tmp_path / "y.zarr", Y, 20), 20),
    }
    for tag, spec in variants.items():
        kw = spec[3] if len(spec) > 3 else {}
        assert_same_sums(_fit_sums(tmp_path, tag, spec[0], spec[1], spec[2], **kw), ref)


def _to_zarr(path, A, rows, store=None):
    z = zarr.create_array(store or str(path), shape=A.shape, chunks=(rows, A.shape[1]), dtype=A.dtype)
    z[:] = A
    return z


@pytest.mark.slow
@pytest.mark.parametrize("scheduler", ["synchronous", "threads", "processes"])
def test_sums_invariant_to_local_scheduler(tmp_path, scheduler):
    X, Y = problem()
    ref = _fit_sums(tmp_path, "ref", X, Y, 10)
    with dask.config.set(scheduler=scheduler):
        assert_same_sums(_fit_sums(tmp_path, scheduler, X, Y, 10), ref)


@pytest.mark.slow
@pytest.mark.cluster
@pytest.mark.parametrize("n_workers", [1, 2])
def test_sums_invariant_on_local_cluster(tmp_path, n_workers):
    distributed = pytest.importorskip("distributed")
    X, Y = problem()
    ref = _fit_sums(tmp_path, "ref", X, Y, 10)
    with distributed.LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster.scheduler_address):  # a cluster reached by its address
        got = _fit_sums(tmp_path, f"w{n_workers}", X, Y, 10)
        # also a lazy input read on the workers
        got_lazy = _fit_sums(tmp_path, f"w{n_workers}-zarr", _to_zarr(tmp_path / "xz", X, 10), Y, 10)
    assert_same_sums(got, ref)
    assert_same_sums(got_lazy, ref)


class CountingStore(WrapperStore):
    """Counts reads per key (shared counter survives zarr's read-only copies)."""

    def __init__(self, store, counter=None):
        super().__init__(store)
        self.gets = collections.Counter() if counter is None else counter

    async def get(self, key, prototype, byte_range=None):
        self.gets[key] += 1
        return await self._store.get(key, prototype, byte_range)

    def _with_store(self, store):
        return type(self)(store, self.gets)


def test_pass_reads_training_data_once(tmp_path):
    X, Y = problem()
    rows = 10
    _to_zarr(tmp_path / "x.zarr", X, rows)
    _to_zarr(tmp_path / "y.zarr", Y, rows)
    cs_x = CountingStore(LocalStore(str(tmp_path / "x.zarr")))
    cs_y = CountingStore(LocalStore(str(tmp_path / "y.zarr")))
    Xz = zarr.open_array(cs_x, mode="r")
    Yz = zarr.open_array(cs_y, mode="r")
    m = model(store=tmp_path / "s", block_rows=2 * rows).fit(Xz, Yz)
    n_chunks = N // rows
    for counter, sketch in ((cs_x.gets, m.input_sketch_), (cs_y.gets, m.output_sketch_)):
        chunk_reads = {k: v for k, v in counter.items() if "/c/" in k or k.startswith("c/")}
        assert len(chunk_reads) == n_chunks  # every chunk read ...
        # ... once by the pass, plus once more only if it holds a landmark row of the support
        landmark_chunks = {int(j) // rows for j in sketch.support}
        for key, count in chunk_reads.items():
            chunk = int(key.rsplit("/", 2)[-2])
            assert count == 1 + (chunk in landmark_chunks), key
    # SubSampling(30) touches some chunks; the GaussianSketch support is every row
    assert sum(cs_y.gets[k] for k in cs_y.gets if "c/" in k) == 2 * n_chunks


@pytest.mark.slow
def test_failed_pass_resumes_with_identical_sums(tmp_path):
    """float64 blocks: the resumed blocks contribute what they contributed the first time
    (float32 blocks, the default, agree to float32 rounding: tests/test_float32.py)."""
    X, Y = problem()
    path = tmp_path / "s"
    with dask.config.set(scheduler="synchronous"):
        with pytest.raises(RuntimeError, match="simulated failure"):
            model(kernel=CountingGaussian(gamma=0.4, fail_after=5), store=path,
                  block_dtype="float64").fit(X, Y)
    fs = open_fit_store(path)
    assert fs.status == "pass"  # a failed run never looks complete
    assert fs.done_blocks().sum() == 5
    with pytest.raises(ValueError, match="not complete"):
        fs.read_sums()
    # resume with the same configuration: only the 7 missing blocks are computed
    resumed = CountingGaussian(gamma=0.4)
    model(kernel=resumed, store=path, block_dtype="float64").fit(X, Y)
    assert resumed.calls["blocks"] == N // 10 - 5
    uninterrupted = tmp_path / "u"
    model(store=uninterrupted, block_dtype="float64").fit(X, Y)
    a, b = sums_of(path), sums_of(uninterrupted)
    for key in ("G", "B", "M", "E"):
        np.testing.assert_array_equal(a[key], b[key])


def test_complete_store_is_reused_without_reading_inputs(tmp_path):
    X, Y = problem()
    path = tmp_path / "s"
    first = model(store=path).fit(X, Y)
    kernel = CountingGaussian(gamma=0.4)
    again = model(kernel=kernel, store=path).fit(X, Y)
    assert kernel.calls["blocks"] == 0
    np.testing.assert_array_equal(first.coef_, again.coef_)
    np.testing.assert_array_equal(first.candidates_, again.candidates_)


def test_store_with_other_fit_is_refused_unless_overwrite(tmp_path):
    X, Y = problem()
    path = tmp_path / "s"
    model(store=path).fit(X, Y)
    other = ds.SISOKR(ds.Gaussian(gamma=0.9), ds.Gaussian(gamma=0.5), input_sketch=ds.SubSampling(30),
                      output_sketch=ds.GaussianSketch(12), random_state=11, store=path,
                      options=ds.EngineOptions(block_rows=10))
    with pytest.raises(ValueError, match=r"store: .* already holds a fit with a different configuration"):
        other.fit(X, Y)
    assert open_fit_store(path).status == "solved"  # untouched
    other.set_params(options=ds.EngineOptions(block_rows=10, overwrite=True)).fit(X, Y)
    assert open_fit_store(path).meta["pass"]["input"]["kernel"]["gamma"] == 0.9


def test_lazy_input_with_nan_fails_naming_argument(tmp_path):
    X, Y = problem()
    Xbad = X.copy()
    Xbad[55, 1] = np.nan
    with pytest.raises(ValueError, match=r"^X: contains NaN or infinity \(first at row 55\)"):
        model(store=tmp_path / "s").fit(da.from_array(Xbad, chunks=(10, 4)), Y)
    assert open_fit_store(tmp_path / "s").status == "pass"


def test_temporary_store_is_removed(tmp_path, monkeypatch):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    X, Y = problem()
    m = model().fit(X, Y)
    assert m.store_ is None
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
@pytest.mark.parametrize(("spec", "n", "max_support"), [
    (ds.SubSampling(100), 10**12, 100),
    (ds.Accumulation(100, q=3), 10**12, 300),
    # p-sparsified draws its mask tile by tile, so it visits n / TILE tiles (time O(n))
    (ds.PSparsified(100, p=1e-6), 10**7, 2000),
], ids=str)
def test_small_support_sketch_holds_no_n_sized_state(spec, n, max_support):
    """A sketch of 10^12 rows is its support and mixing matrix: O(nnz) memory, not O(n)."""
    import tracemalloc

    tracemalloc.start()
    try:
        sk = spec.realize(n, seed=0)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * 2**20
    assert sk.support_size <= max_support and sk.mixing.shape == (100, sk.support_size)
    # and a block of training rows far into the data set maps to the right sketch rows
    j = int(sk.support[-1])
    block = np.arange(12.0).reshape(4, 3)
    got = sk.left_columns(block, j - 2, j + 2)
    want = np.outer(sk.mixing.toarray()[:, -1], block[2])
    if sk.support_size > 1 and int(sk.support[-2]) >= j - 2:
        pytest.skip("two support rows fall in the probe block")
    np.testing.assert_allclose(got, want, rtol=0, atol=0)


def test_temporary_fit_writes_no_blocks_and_equals_a_stored_fit(tmp_path, monkeypatch):
    """``store=None``: the blocks could never be read back, so none is written."""
    import distsketch.engine.accumulate as acc

    X, Y = problem()
    stored = model(store=tmp_path / "kept").fit(X, Y)

    def refuse(*args, **kwargs):
        raise AssertionError("a temporary fit wrote a pass block")

    monkeypatch.setattr(acc, "write_rows", refuse)
    temporary = model().fit(X, Y)
    assert temporary.store_ is None
    np.testing.assert_array_equal(temporary.coef_, stored.coef_)


def _pass_task_layout(fit) -> collections.Counter:
    """``{blocks per task: tasks}`` of the pass tasks a call runs, read from the keys dask
    executes (engine.map_blocks names them ``pass-block-…`` and ``pass-group-…``)."""
    from dask.callbacks import Callback

    keys = []
    with Callback(pretask=lambda key, dsk, state: keys.append(str(key))):
        fit()
    layout = collections.Counter()
    for key in keys:
        if key.startswith("pass-block-"):
            layout[1] += 1
        elif key.startswith("pass-group-"):
            layout[SPLIT] += 1
    return layout


SPLIT = 3  # 12 blocks of 10 rows: 4 first-level nodes of 3


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sisokr", "exact_input", "targets"])
def test_leaf_task_sums_blocks_as_the_tree_node_would(tmp_path, kind):
    """With many blocks per core, one task per first-level tree node (its ``split_every``
    blocks computed in order and added incrementally) gives bitwise the sums of one task
    per block followed by the node, the layout the reduction order is defined by
    (docs/design/engine.md, "The block map-reduce"). Half the blocks are read back from the store (a
    resume), so the nodes mix computed and stored blocks. The layout follows the scheduler's
    parallel slots (dask's ``num_workers``): one thread fuses every node but the last (12
    blocks >= engine.GROUPS_PER_SLOT · 3 · 1), eight threads run one task per block."""
    from distsketch.engine import mapreduce as engine

    assert engine.GROUPS_PER_SLOT * SPLIT == N // 10
    X, Y = problem()

    def fit(path, fail_after=None):
        kernel = CountingGaussian(gamma=0.4, fail_after=fail_after)
        opts = {"block_dtype": "float64", "split_every": SPLIT}
        if kind == "sisokr":
            return model(kernel=kernel, store=path, **opts).fit(X, Y)
        est = _KRR(kernel, sketch=None if kind == "exact_input" else ds.SubSampling(30),
                             lam=1e-3, random_state=0, store=path,
                             options=ds.EngineOptions(block_rows=10, **opts))
        return est.fit(X, Y[:, :2])

    layouts = {"fused": (1, {SPLIT: 3, 1: 3}), "per_block": (8, {1: 12})}
    for name, (threads, want) in layouts.items():
        with dask.config.set(scheduler="synchronous"):  # a deterministic half-done store
            with pytest.raises(RuntimeError, match="simulated failure"):
                fit(tmp_path / name, fail_after=6)
        assert open_fit_store(tmp_path / name).done_blocks().sum() == 6
        with dask.config.set(scheduler="threads", num_workers=threads):
            assert _pass_task_layout(lambda: fit(tmp_path / name)) == want, name
    a, b = sums_of(tmp_path / "fused"), sums_of(tmp_path / "per_block")
    assert set(a) == set(b)
    for key in a:
        for u, v in zip(*((x,) if key != "U" else x for x in (a[key], b[key]))):
            np.testing.assert_array_equal(u, v, err_msg=key)


def test_pass_tasks_keep_every_core_busy():
    """Few blocks per core: one task per block (fused leaves would idle cores)."""
    from distsketch.engine.schedulers import parallel_slots

    assert parallel_slots() == (os.cpu_count() or 1)
    with dask.config.set(scheduler="synchronous"):
        assert parallel_slots() == 1
    with dask.config.set(num_workers=3):
        assert parallel_slots() == 3
    X, Y = problem()
    with dask.config.set(num_workers=2):
        # N // 10 blocks < GROUPS_PER_SLOT · split_every · 2
        layout = _pass_task_layout(lambda: model().fit(X, Y))
    assert layout == {1: N // 10}


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64, bool])
def test_unique_rows_are_numpys_in_order_of_first_occurrence(dtype):
    """The byte-keyed unique rows equal ``np.unique(axis=0)``'s set, each at its first
    occurrence; ``-0.0`` and ``0.0`` are one row; the block merge keeps the earliest index."""
    from distsketch.engine.sums import _merge_unique, _unique_rows

    rng = np.random.default_rng(0)
    Y = rng.integers(-1, 2, size=(300, 4)).astype(dtype)
    if np.dtype(dtype).kind == "f":
        Y[::7] *= -1.0  # makes -0.0 entries where the row had 0
        assert np.signbit(Y[Y == 0]).any()
    rows, first = _unique_rows(Y, 1000)
    want_rows, want_first = np.unique(Y, axis=0, return_index=True)
    order = np.argsort(want_first)
    assert np.array_equal(first, want_first[order] + 1000)
    assert np.array_equal(rows, want_rows[order])
    merged = _merge_unique([_unique_rows(Y[:120], 0), _unique_rows(Y[120:], 120)])
    assert np.array_equal(merged[1], want_first[order]) and np.array_equal(merged[0], rows)


@pytest.mark.parametrize("n", [60, 511, 512, 1000, 4880, 10_000, 200_001])
@pytest.mark.parametrize("width", [300, 4445])
def test_derived_blocks_are_equal_and_a_multiple_of_four(n, width, monkeypatch):
    """``block_rows=None``: the fewest blocks within ``block_memory``, their count rounded up
    to a multiple of ``BLOCK_MULTIPLE`` (halved while blocks would fall below
    ``MIN_BLOCK_ROWS``), in equal blocks (the last short by less than one row per block), and
    the same on any machine (no core count involved)."""
    from distsketch.engine import fitpass
    from distsketch.options import EngineOptions

    opts = EngineOptions()
    per_row = 8 * (opts.gram_chunk + width) + 4 * width
    b_mem = max(64, opts.block_memory // per_row)
    b = fitpass.choose_block_rows(opts, n, width, None, np.dtype("float32"))
    k = -(-n // b)
    assert b <= b_mem and k >= -(-n // b_mem)
    assert 0 <= b * k - n < k  # equal blocks
    if k % fitpass.BLOCK_MULTIPLE:  # rounded up only as far as MIN_BLOCK_ROWS allows
        assert k == -(-n // b_mem) or 2 * k > n // fitpass.MIN_BLOCK_ROWS
    if n == 4880 and width == 4445:  # Bibtex SISOKR: 4 blocks of 1220 (were 1924, 1924, 1032)
        assert (b, k) == (1220, 4)
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    assert fitpass.choose_block_rows(opts, n, width, None, np.dtype("float32")) == b
    # given block_rows is taken as it is
    assert fitpass.choose_block_rows(EngineOptions(block_rows=100), n, width, None,
                                         np.dtype("float32")) == min(100, n)


def test_row_sparse_sums_equal_the_dense_sums():
    """``RowSparse``: disjoint parts kept and placed, equal rows added in place, overlapping
    ones merged — always the dense sum (bitwise: adding exact zeros changes no float sum), and
    the parts ``+=`` took from another sum are never written to."""
    from distsketch.engine.sums import RowSparse

    rng = np.random.default_rng(0)
    m, k = 30, 3
    for trial in range(200):
        parts = []
        for _ in range(rng.integers(1, 6)):
            kind = rng.integers(3)
            if kind == 0:
                r = np.arange(m)
            elif kind == 1:  # a run, as sub-sampling's landmarks in a row block
                a = rng.integers(0, m)
                r = np.arange(a, min(m, a + rng.integers(0, 8)))
            else:
                r = np.unique(rng.choice(m, rng.integers(0, 10)))
            parts.append((r.astype(np.int64), rng.normal(size=(r.size, k))))
        frozen = [v.copy() for _, v in parts]
        acc = RowSparse(m, *parts[0]).copy()
        want = np.zeros((m, k))
        want[parts[0][0]] = parts[0][1]
        for r, v in parts[1:]:
            acc += RowSparse(m, r, v)
            dense = np.zeros((m, k))
            dense[r] = v
            want = want + dense
        np.testing.assert_array_equal(acc.toarray(), want, err_msg=str(trial))
        for (_, v), f in zip(parts, frozen):
            np.testing.assert_array_equal(v, f)

