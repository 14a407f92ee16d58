"""Appended batches in a kept store (``partial_fit`` / ``forget`` with ``store=``): against the
same appends without a store, a fresh fit with the fitted sketch, a killed append resumed, and
the store's guarantees (nothing written for refused input, earlier data never read again)."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import warnings

import dask.array as da
import numpy as np
import pytest
import zarr

import distsketch as ds
import distsketch.engine.accumulate as accumulate
import distsketch.models.growing as growing
from distsketch.cli.commands import main
from distsketch.engine.batchstore import stored_sums
from distsketch.engine.store import open_fit_store
from distsketch.engine.storeguard import StoreError
from distsketch.kernels import Gaussian
from growinghelpers import problem

F64 = ds.EngineOptions(block_dtype="float64", block_rows=37)
SMALL = ds.EngineOptions(block_dtype="float64", block_rows=10)
LAMS = [1e-2, 1e-4]


def krr(sketch=None, options=F64, **kw):
    return ds.SketchedKRR(Gaussian(gamma=0.3), sketch=sketch or ds.SubSampling(24), lam=LAMS,
                          random_state=0, options=options, **kw)


def rel(a, b):
    return float(np.max(np.abs(np.asarray(a) - b)) / np.max(np.abs(b)))


def listing(path) -> dict:
    """Every file under a store with its size and modification time, and its metadata."""
    out = {}
    for root, _, files in os.walk(path):
        for f in files:
            st = os.stat(os.path.join(root, f))
            out[os.path.relpath(os.path.join(root, f), path)] = (st.st_size, st.st_mtime_ns)
    return out


def store_meta(path) -> dict:
    return dict(zarr.open_group(str(path), mode="r").attrs["distsketch"])


CUTS = [(90, 120), (120, 141), (141, 150)]


@pytest.mark.parametrize("sketch", [ds.SubSampling(24), ds.GaussianSketch(12)],
                         ids=["subsampling", "gaussian"])
def test_appends_in_a_store_equal_those_without_and_a_fresh_fit(tmp_path, sketch):
    X, y = problem()
    kept = krr(sketch, store=str(tmp_path / "s.zarr")).fit(X[:90], y[:90])
    free = krr(sketch).fit(X[:90], y[:90])
    for a, b in CUTS:
        kept.partial_fit(X[a:b], y[a:b])
        free.partial_fit(X[a:b], y[a:b])
    fresh = krr(kept.sketch_).fit(X, y)
    for lam in LAMS:
        got = kept.set_lam(lam).predict(X)
        np.testing.assert_array_equal(got, free.set_lam(lam).predict(X))  # the same sums
        assert rel(got, fresh.set_lam(lam).predict(X)) < 1e-10
    assert [b["batch"] for b in kept.batches_] == [0, 1, 2, 3]
    meta = store_meta(tmp_path / "s.zarr")
    assert meta["status"] == "solved"
    assert [(b["batch"], b["rows"], b["status"]) for b in meta["batches"]] == [
        (0, 90, "complete"), (1, 30, "complete"), (2, 21, "complete"), (3, 9, "complete")]
    assert [b["digest"] for b in meta["batches"]] == [b["digest"] for b in kept.batches_]
    loaded = ds.load(tmp_path / "s.zarr")
    for lam in LAMS:
        np.testing.assert_array_equal(loaded.set_lam(lam).predict(X),
                                      kept.set_lam(lam).predict(X))
    assert loaded.batches_ == kept.batches_


def test_stored_batch_sums_equal_the_models_parts_bitwise(tmp_path):
    X, y = problem()
    model = krr(store=str(tmp_path / "s.zarr")).fit(X[:90], y[:90])
    model.partial_fit(X[90:120], y[90:120])
    model.partial_fit(X[120:], y[120:])
    with open_fit_store(str(tmp_path / "s.zarr")) as fs:
        for k, part in ((1, model._growth.parts[1]), (2, model._growth.parts[2])):
            stored = stored_sums(fs, k)
            assert set(part) <= set(stored)
            for name, value in part.items():
                np.testing.assert_array_equal(stored[name], value)
    # the batch's own arrays: blocks of the batch's rows, records written
    group = zarr.open_group(str(tmp_path / "s.zarr" / "batches" / "1"), mode="r")
    assert group["pass/C"].shape == (30, 24)
    assert (np.asarray(group["pass/blocks"][:, 0]) != 0).all()
    assert dict(group.attrs)["distsketch"]["status"] == "pass-complete"


def test_sisokr_appends_in_a_store(tmp_path):
    rng = np.random.default_rng(3)
    X = rng.normal(size=(120, 5))
    Y = (X[:, :4] + 0.3 * rng.normal(size=(120, 4)) > 0).astype(float)

    def make(sx, sy, **kw):
        return ds.SISOKR(Gaussian(gamma=0.2), Gaussian(gamma=0.5), input_sketch=sx,
                         output_sketch=sy, lam=LAMS, random_state=0, options=F64, **kw)

    kept = make(ds.SubSampling(30), ds.GaussianSketch(6), store=str(tmp_path / "s.zarr"))
    kept.fit(X[:80], Y[:80]).partial_fit(X[80:], Y[80:])
    free = make(ds.SubSampling(30), ds.GaussianSketch(6)).fit(X[:80], Y[:80])
    free.partial_fit(X[80:], Y[80:])
    fresh = make(kept.input_sketch_, kept.output_sketch_).fit(X, Y)
    assert zarr.open_group(str(tmp_path / "s.zarr/batches/1"), mode="r")["pass/D"].shape == (40, 6)
    loaded = ds.load(tmp_path / "s.zarr")
    np.testing.assert_array_equal(loaded.candidates_, fresh.candidates_)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for lam in LAMS:
            got = loaded.set_lam(lam).predict(X)
            np.testing.assert_array_equal(got, free.set_lam(lam).predict(X))
            np.testing.assert_array_equal(got, fresh.set_lam(lam).predict(X))


def test_load_append_load_again_and_the_first_batchs_data_is_never_read(tmp_path):
    """The fit reads its rows from a zarr array on disk, deleted before the appends: they
    succeed (nothing reads the earlier batches' data) and equal the appends of a model that
    kept its data."""
    X, y = problem()
    zarr.save_array(str(tmp_path / "X0.zarr"), X[:90])
    X0 = zarr.open_array(str(tmp_path / "X0.zarr"), mode="r")
    krr(store=str(tmp_path / "s.zarr")).fit(X0, y[:90])
    shutil.rmtree(tmp_path / "X0.zarr")
    free = krr().fit(X[:90], y[:90])
    for a, b in CUTS:
        loaded = ds.load(tmp_path / "s.zarr")
        loaded.partial_fit(X[a:b], y[a:b])
        free.partial_fit(X[a:b], y[a:b])
    again = ds.load(tmp_path / "s.zarr")
    assert [b["rows"] for b in again.batches_] == [90, 30, 21, 9]
    np.testing.assert_array_equal(again.predict(X), free.predict(X))


def test_a_moved_store_takes_its_appends_where_it_is_loaded_from(tmp_path):
    X, y = problem()
    krr(store=str(tmp_path / "a.zarr")).fit(X[:90], y[:90])
    shutil.copytree(tmp_path / "a.zarr", tmp_path / "b.zarr")
    before = listing(tmp_path / "a.zarr")
    moved = ds.load(tmp_path / "b.zarr")
    moved.partial_fit(X[90:], y[90:])
    assert listing(tmp_path / "a.zarr") == before  # never writes outside the store loaded
    assert [b["batch"] for b in ds.load(tmp_path / "b.zarr").batches_] == [0, 1]


def test_a_repeated_batch_is_refused_before_anything_is_written(tmp_path):
    X, y = problem()
    path = tmp_path / "s.zarr"
    model = krr(store=str(path)).fit(X[:90], y[:90])
    model.partial_fit(X[90:120], y[90:120])
    before, meta = listing(path), store_meta(path)
    order = np.random.default_rng(0).permutation(30)  # the same rows in another order
    with pytest.raises(ValueError, match="repeat=True"):
        model.partial_fit(X[90:120][order], y[90:120][order])
    with pytest.raises(ValueError, match="features"):  # bad input: named, nothing written
        model.partial_fit(X[90:120, :3], y[90:120])
    lazy = X[120:].copy()
    lazy[5, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        model.partial_fit(da.from_array(lazy, chunks=10), y[120:])
    assert listing(path) == before and store_meta(path) == meta
    model.partial_fit(X[90:120], y[90:120], repeat=True)
    assert [b["digest"] for b in model.batches_][1:] == [model.batches_[1]["digest"]] * 2
    assert len(store_meta(path)["batches"]) == 3


class Killed(Exception):
    """Stands for the SIGKILL of the appending process."""


def _kill_after(monkeypatch, blocks: int) -> list:
    """Make the pass's block writes fail once ``blocks`` are written (the append stops there,
    its store left as a killed process leaves it); the list counts the writes."""
    written = []
    real = accumulate._write_block
    lock = threading.Lock()

    def write(plan, i, *args):
        with lock:  # the pass's I/O threads write concurrently
            if len(written) >= blocks:
                raise Killed(f"killed after {blocks} blocks")
            written.append(i)
        return real(plan, i, *args)

    monkeypatch.setattr(accumulate, "_write_block", write)
    return written


def test_a_killed_append_leaves_the_previous_model_and_resumes_bitwise(tmp_path, monkeypatch,
                                                                       capsys):
    X, y = problem()
    path = tmp_path / "s.zarr"
    krr(options=SMALL, store=str(path)).fit(X[:90], y[:90])
    whole = krr(options=SMALL, store=str(tmp_path / "whole.zarr")).fit(X[:90], y[:90])
    whole.partial_fit(X[90:], y[90:])  # 60 rows: 6 blocks
    written = _kill_after(monkeypatch, 3)
    with pytest.raises(Killed):
        ds.load(path).partial_fit(X[90:], y[90:])
    monkeypatch.undo()
    assert len(written) == 3
    meta = store_meta(path)
    assert meta["status"] == "solved"
    assert [(b["batch"], b["status"]) for b in meta["batches"]] == [(0, "complete"),
                                                                     (1, "pending")]
    batch = dict(zarr.open_group(str(path / "batches" / "1"), mode="r").attrs)["distsketch"]
    assert batch["status"] == "pass"  # a killed batch never looks complete
    previous = ds.load(path)
    assert [b["batch"] for b in previous.batches_] == [0]
    assert main(["info", str(path)]) == 0
    out = capsys.readouterr().out
    assert "batch 1" in out and "60 rows" in out and "pending" in out
    counted = _kill_after(monkeypatch, 10**9)
    resumed = previous.partial_fit(X[90:], y[90:])
    assert len(counted) == 3  # the 3 blocks stored are read back, not computed
    for lam in LAMS:
        np.testing.assert_array_equal(resumed.set_lam(lam).predict(X),
                                      whole.set_lam(lam).predict(X))
    assert [b["status"] for b in store_meta(path)["batches"]] == ["complete", "complete"]
    again = ds.load(path)
    for lam in LAMS:
        np.testing.assert_array_equal(again.set_lam(lam).predict(X),
                                      whole.set_lam(lam).predict(X))


def test_a_pending_batch_is_replaced_by_other_rows_or_a_forget(tmp_path, monkeypatch, caplog):
    X, y = problem()
    path = tmp_path / "s.zarr"
    model = krr(options=SMALL, store=str(path)).fit(X[:90], y[:90])
    model.partial_fit(X[90:110], y[90:110])
    _kill_after(monkeypatch, 2)
    with pytest.raises(Killed):
        ds.load(path).partial_fit(X[110:140], y[110:140])
    monkeypatch.undo()
    with caplog.at_level(logging.WARNING, logger="distsketch"):
        ds.load(path).partial_fit(X[110:150], y[110:150])  # other rows: replaced
    assert "replacing it" in caplog.text
    free = krr(options=SMALL).fit(X[:90], y[:90])
    free.partial_fit(X[90:110], y[90:110])
    free.partial_fit(X[110:150], y[110:150])
    np.testing.assert_array_equal(ds.load(path).predict(X), free.predict(X))
    _kill_after(monkeypatch, 1)
    with pytest.raises(Killed):
        ds.load(path).partial_fit(X[:30] + 1.0, y[:30])
    monkeypatch.undo()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="distsketch"):
        ds.load(path).forget(1)
    assert "unfinished append of batch 3 is dropped" in caplog.text
    assert sorted(os.listdir(path / "batches")) == ["2", "zarr.json"]


def test_forget_in_a_store_equals_a_fresh_fit_without_the_batch(tmp_path):
    X, y = problem()
    path = tmp_path / "s.zarr"
    model = krr(store=str(path)).fit(X[:90], y[:90])
    free = krr().fit(X[:90], y[:90])
    for a, b in CUTS:
        model.partial_fit(X[a:b], y[a:b])
        free.partial_fit(X[a:b], y[a:b])
    model.forget(2)
    free.forget(2)
    keep = np.r_[0:120, 141:150]
    assert model.sketch_.n == len(keep)
    fresh = krr(model.sketch_).fit(X[keep], y[keep])
    for lam in LAMS:
        got = model.set_lam(lam).predict(X)
        np.testing.assert_array_equal(got, free.set_lam(lam).predict(X))
        assert rel(got, fresh.set_lam(lam).predict(X)) < 1e-10
    assert not os.path.exists(path / "batches" / "2")  # distsketch's group of it deleted
    meta = store_meta(path)
    assert [(b["batch"], b["status"]) for b in meta["batches"]] == [
        (0, "complete"), (1, "complete"), (2, "forgotten"), (3, "complete")]
    loaded = ds.load(path)
    assert [b["batch"] for b in loaded.batches_] == [0, 1, 3]
    for lam in LAMS:
        np.testing.assert_array_equal(loaded.set_lam(lam).predict(X),
                                      model.set_lam(lam).predict(X))
    # a model holding other batches than the store's saved model is refused, naming load
    stale = krr(store=str(tmp_path / "t.zarr")).fit(X[:90], y[:90])
    ds.load(tmp_path / "t.zarr").partial_fit(X[90:120], y[90:120])
    with pytest.raises(StoreError, match="distsketch.load"):
        stale.partial_fit(X[120:], y[120:])


def test_store_directory_appends_in_the_fits_own_store(tmp_path):
    X, y = problem()
    model = krr(store=ds.StoreDirectory(tmp_path / "stores")).fit(X[:90], y[:90])
    model.partial_fit(X[90:], y[90:])
    assert os.path.isdir(os.path.join(model.store_, "batches", "1"))
    free = krr().fit(X[:90], y[:90]).partial_fit(X[90:], y[90:])
    loaded = ds.load(model.store_)
    np.testing.assert_array_equal(loaded.predict(X), free.predict(X))
    assert [b["batch"] for b in loaded.batches_] == [0, 1]


def test_a_refit_on_the_store_starts_its_batches_afresh(tmp_path):
    X, y = problem()
    path = tmp_path / "s.zarr"
    krr(store=str(path)).fit(X[:90], y[:90]).partial_fit(X[90:], y[90:])
    refit = krr(store=str(path)).fit(X[:90], y[:90])  # the same pass: reused
    assert [b["batch"] for b in refit.batches_] == [0]
    assert [b["batch"] for b in store_meta(path)["batches"]] == [0]
    assert not os.path.exists(path / "batches" / "1")
    refit.partial_fit(X[90:], y[90:])
    free = krr().fit(X[:90], y[:90]).partial_fit(X[90:], y[90:])
    np.testing.assert_array_equal(ds.load(path).predict(X), free.predict(X))


def test_an_append_killed_before_its_save_reuses_the_complete_batch(tmp_path, monkeypatch):
    """Killed after the batch's sums are written, before the model is saved again: the saved
    model is the previous one, and the same rows appended again read the batch's sums back
    (no block computed)."""
    X, y = problem()
    path = tmp_path / "s.zarr"
    krr(store=str(path)).fit(X[:90], y[:90])
    def killed(*args, **kw):
        raise Killed("killed before the save")

    monkeypatch.setattr(growing.persist, "save", killed)
    with pytest.raises(Killed):
        ds.load(path).partial_fit(X[90:], y[90:])
    monkeypatch.undo()
    group = zarr.open_group(str(path / "batches" / "1"), mode="r")
    assert dict(group.attrs)["distsketch"]["status"] == "pass-complete"
    assert [b["batch"] for b in ds.load(path).batches_] == [0]
    assert store_meta(path)["batches"][1]["status"] == "pending"
    counted = _kill_after(monkeypatch, 10**9)
    resumed = ds.load(path).partial_fit(X[90:], y[90:])
    assert counted == []
    free = krr().fit(X[:90], y[:90]).partial_fit(X[90:], y[90:])
    np.testing.assert_array_equal(resumed.predict(X), free.predict(X))
    assert [b["status"] for b in store_meta(path)["batches"]] == ["complete", "complete"]


_CHILD = textwrap.dedent("""
    import os, signal, sys
    import numpy as np
    import distsketch as ds
    import distsketch.engine.accumulate as accumulate
    store, data, kill_at = sys.argv[1], sys.argv[2], int(sys.argv[3])
    real, count = accumulate._write_block, [0]
    def write(*args):
        out = real(*args)
        count[0] += 1
        if count[0] == kill_at:  # the k-th block and its record are on disk
            os.kill(os.getpid(), signal.SIGKILL)
        return out
    accumulate._write_block = write
    X, y = np.load(os.path.join(data, "X.npy")), np.load(os.path.join(data, "y.npy"))
    ds.load(store).partial_fit(X, y)
""")


@pytest.mark.slow
def test_an_append_sigkilled_mid_batch_resumes_bitwise(tmp_path, monkeypatch):
    """The appending process SIGKILLed after 4 of the batch's 6 blocks: the store keeps the
    previous model (status solved, the batch pending and not complete), and appending the
    same rows to the loaded model computes the 2 missing blocks only, bitwise."""
    X, y = problem()
    path = tmp_path / "s.zarr"
    krr(options=SMALL, store=str(path)).fit(X[:90], y[:90])
    np.save(tmp_path / "X.npy", X[90:])
    np.save(tmp_path / "y.npy", y[90:])
    env = dict(os.environ, DASK_SCHEDULER="synchronous")
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(path), str(tmp_path), "4"],
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    meta = store_meta(path)
    assert meta["status"] == "solved"
    assert [b["status"] for b in meta["batches"]] == ["complete", "pending"]
    with open_fit_store(str(path)) as fs:
        batch = fs.group["batches/1"]
        assert dict(batch.attrs)["distsketch"]["status"] == "pass"
        stored = int((np.asarray(batch["pass/blocks"][:, 0]) != 0).sum())
    assert 4 <= stored < 6  # 4 (one block at a time); more only where blocks ran beside it
    previous = ds.load(path)
    assert [b["batch"] for b in previous.batches_] == [0]
    counted = _kill_after(monkeypatch, 10**9)
    previous.partial_fit(X[90:], y[90:])
    assert len(counted) == 6 - stored
    whole = krr(options=SMALL).fit(X[:90], y[:90]).partial_fit(X[90:], y[90:])
    again = ds.load(path)
    for lam in LAMS:
        np.testing.assert_array_equal(again.set_lam(lam).predict(X),
                                      whole.set_lam(lam).predict(X))


def test_the_saved_model_refers_to_the_stored_batches(tmp_path):
    """The model saved in the store copies the fit's sums only: the appended batches' sums are
    referred to in their groups, so its arrays do not grow with the batches; the model loads
    (and a copy of the store loads) with bitwise the same parts; a changed batch sum is
    refused, naming the batch; a loaded model saved elsewhere carries its sums with it."""
    X, y = problem()
    path = tmp_path / "s.zarr"
    model = krr(store=str(path)).fit(X[:90], y[:90])

    def saved_arrays():
        return sorted(zarr.open_group(str(path / "model"), mode="r").array_keys())

    model.partial_fit(X[90:110], y[90:110])
    first = saved_arrays()
    model.partial_fit(X[110:130], y[110:130])
    model.partial_fit(X[130:], y[130:])
    assert saved_arrays() == first
    shutil.copytree(path, tmp_path / "copy.zarr")
    for where in (path, tmp_path / "copy.zarr"):
        back = ds.load(str(where))
        assert back.batches_ == model.batches_
        for got, want in zip(back._held_growth().parts, model._growth.parts):
            assert set(got) == set(want)
            for name in want:
                np.testing.assert_array_equal(np.asarray(got[name], dtype=object)
                                              if name == "U" else got[name],
                                              np.asarray(want[name], dtype=object)
                                              if name == "U" else want[name])
    elsewhere = str(tmp_path / "model-only.zarr")
    ds.load(str(path)).save(elsewhere)
    shutil.rmtree(tmp_path / "copy.zarr")
    moved = ds.load(elsewhere)
    assert moved.batches_ == model.batches_
    moved.set_params(store=None)
    moved.forget(2)
    model.set_params(store=None)
    np.testing.assert_array_equal(moved.predict(X), model.forget(2).predict(X))
    # a batch's stored sum changed behind the model's back
    g = zarr.open_group(str(path / "batches" / "1" / "sums"), mode="r+")
    g["G"][0, 0] = g["G"][0, 0] + 1.0
    with pytest.raises(StoreError, match="batches/1.*sums/G does not match its checksum"):
        ds.load(str(path)).batches_
