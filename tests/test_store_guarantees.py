"""What the store guarantees (docs/guide/store.md, "What the store guarantees"): it never returns a model for
other data, never deletes what distsketch did not write, never runs code it reads, detects
damaged blocks and sums, has one writer at a time, and never counts blocks written by another
fit."""

from __future__ import annotations

import errno
import logging
import os
import subprocess
import sys
from pathlib import Path

import dask
import dask.array as da
import numpy as np
import pytest
import zarr

import distsketch as ds
from distsketch.engine.store import open_fit_store
from distsketch.engine.storeguard import StoreError
from distsketch.io import persist
from passhelpers import CountingGaussian, N, model, problem, sums_of

HERE = Path(__file__).resolve().parent


def krr(store, kernel=None, **kw):
    opts = {"block_rows": 10, "block_dtype": "float64", **kw}
    return ds.SketchedKRR(kernel or ds.Gaussian(0.4), sketch=ds.SubSampling(30), lam=1e-3,
                          random_state=11, store=store, options=ds.EngineOptions(**opts))


def targets(X):
    return np.sin(X[:, 0]) + X[:, 1]


def counted(fail_after=None):
    return CountingGaussian(gamma=0.4, fail_after=fail_after)


# --------------------------------------------------------------------------- data identity


@pytest.mark.slow
def test_changed_targets_are_refused_on_a_complete_store(tmp_path):
    X, _ = problem()
    y = targets(X)
    path = tmp_path / "s"
    krr(path).fit(X, y)
    y2 = y.copy()
    y2[57] += 1.0  # block 5
    with pytest.raises(StoreError, match=r"training data differ .*\(Y, rows 50–59, block 5\); "
                                         r"fit on the same data, or use .*overwrite=True"):
        krr(path).fit(X, y2)
    assert open_fit_store(path).status == "solved"  # untouched
    refit = krr(path, overwrite=True).fit(X, y2)
    fresh = krr(tmp_path / "fresh").fit(X, y2)
    np.testing.assert_array_equal(refit.dual_coef_, fresh.dual_coef_)


def test_changed_inputs_outside_the_landmarks_are_refused(tmp_path):
    X, Y = problem()
    path = tmp_path / "s"
    m = model(store=path).fit(X, Y)
    row = int(np.setdiff1d(np.arange(N), m.input_sketch_.support)[-1])
    X2 = X.copy()
    X2[row, 0] += 1e-9  # a row no landmark holds
    with pytest.raises(StoreError, match=rf"\(X, rows {row // 10 * 10}–{row // 10 * 10 + 9}, "
                                         rf"block {row // 10}\)"):
        model(store=path).fit(X2, Y)


def test_changed_outputs_outside_the_supports_are_refused(tmp_path):
    X, Y = problem()
    path = tmp_path / "s"

    def fit(Y):
        return ds.SISOKR(ds.Gaussian(0.4), ds.Gaussian(0.5), input_sketch=ds.SubSampling(30),
                         output_sketch=ds.SubSampling(20), lam=1e-3, random_state=2, store=path,
                         options=ds.EngineOptions(block_rows=10)).fit(X, Y)

    m = fit(Y)
    outside = np.setdiff1d(np.arange(N), np.r_[m.input_sketch_.support, m.output_sketch_.support])
    Y2 = Y.copy()
    Y2[outside[0]] = 1.0 - Y2[outside[0]]
    with pytest.raises(StoreError, match=r"\(Y, rows"):
        fit(Y2)


def test_resuming_with_changed_data_is_refused(tmp_path):
    X, Y = problem()
    path = tmp_path / "s"
    with dask.config.set(scheduler="synchronous"):
        with pytest.raises(RuntimeError, match="simulated failure"):
            model(kernel=counted(fail_after=5), store=path).fit(X, Y)
    block = int(np.flatnonzero(open_fit_store(path).done_blocks())[0])
    X2 = X.copy()
    X2[10 * block + 3] *= 1.5  # a block already stored
    with pytest.raises(StoreError, match=rf"\(X, rows {10 * block}–{10 * block + 9}, "
                                         rf"block {block}\)"):
        model(store=path).fit(X2, Y)


def test_reusing_a_complete_pass_reads_the_data_once_and_computes_nothing(tmp_path):
    X, Y = problem()
    path = tmp_path / "s"
    first = model(store=path).fit(X, Y)
    kernel = counted()
    again = model(kernel=kernel, store=path).fit(X, Y)
    assert kernel.calls["blocks"] == 0
    np.testing.assert_array_equal(again.coef_, first.coef_)


# --------------------------------------------------------------------------- never delete


def test_user_arrays_in_an_existing_group_survive(tmp_path):
    """A zarr group that is not a distsketch store is refused, overwrite=True or not — also
    when the fit reads its inputs lazily from that very group."""
    X, _ = problem()
    y = targets(X)
    path = tmp_path / "data.zarr"
    group = zarr.open_group(str(path), mode="w")
    group.create_array("X", data=X, chunks=(30, 4))
    group.create_array("y", data=y, chunks=(30,))
    Xz, yz = zarr.open_group(str(path), mode="r")["X"], zarr.open_group(str(path), mode="r")["y"]
    for overwrite in (False, True):
        with pytest.raises(StoreError, match=r"is a zarr group that is not a distsketch store "
                                             r"\(it holds \['X', 'y'\]\); distsketch never deletes"):
            krr(path, overwrite=overwrite).fit(Xz, yz)
    reread = zarr.open_group(str(path), mode="r")
    np.testing.assert_array_equal(reread["X"][:], X)
    np.testing.assert_array_equal(reread["y"][:], y)


def test_non_empty_directories_and_empty_paths_are_refused(tmp_path):
    X, _ = problem()
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "paper.tex").write_text("keep me")
    with pytest.raises(StoreError, match=r"non-empty directory that is not a distsketch store"):
        krr(tmp_path / "notes", overwrite=True).fit(X, targets(X))
    assert sorted(p.name for p in (tmp_path / "notes").iterdir()) == ["paper.tex"]
    with pytest.raises(StoreError, match=r"^store: an empty path"):
        krr("").fit(X, targets(X))
    fitted = krr(None).fit(X, targets(X))
    with pytest.raises(StoreError, match="not a distsketch store"):
        fitted.save(tmp_path / "notes")
    with pytest.raises(ValueError, match="is not a candidate store"):
        ds.CandidateStore.create(tmp_path / "notes", X, overwrite=True)
    assert (tmp_path / "notes" / "paper.tex").read_text() == "keep me"


def test_a_saved_model_is_replaced_only_with_overwrite(tmp_path):
    X, _ = problem()
    fitted = krr(None).fit(X, targets(X))
    fitted.save(tmp_path / "m")
    with pytest.raises(StoreError, match="already holds a saved model"):
        krr(tmp_path / "m").fit(X, targets(X))


# --------------------------------------------------------------------------- loading runs no code


def _plant_payload(store: Path, module: str) -> Path:
    """Make a saved model name ``module:kernel`` and ship that module in the store directory,
    as an attacker would (the manifest recomputed: it is a digest, not a signature)."""
    group = zarr.open_group(str(store), mode="r+")["model"]
    meta = dict(group.attrs["distsketch_model"])
    meta["state"] = dict(meta["state"], input_kernel={"callable": f"{module}:kernel"})
    meta["manifest"] = persist._manifest(meta)
    group.attrs["distsketch_model"] = meta
    marker = store / "payload-ran"
    (store / f"{module}.py").write_text(
        f"open({str(marker)!r}, 'w').write('ran')\n"
        "def kernel(A, B):\n    return A @ B.T\n")
    return marker


@pytest.mark.slow
def test_load_imports_no_module_named_by_the_store(tmp_path):
    X, _ = problem()
    krr(tmp_path / "s").fit(X, targets(X))
    marker = _plant_payload(tmp_path / "s", "payload_mod")
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    np.save(tmp_path / "q.npy", X[:5])
    for cmd in (["-c", "import distsketch; distsketch.load('.')"],
                ["-m", "distsketch", "predict", ".", "--input", str(tmp_path / "q.npy")]):
        out = subprocess.run([sys.executable, *cmd], cwd=tmp_path / "s", capture_output=True,
                             text=True, env=env, timeout=120)
        assert out.returncode != 0 and "trusted=True" in out.stderr + out.stdout, out.stderr
        assert not marker.exists()
    out = subprocess.run([sys.executable, "-c", "import distsketch; distsketch.load('.', trusted=True)"],
                         cwd=tmp_path / "s", capture_output=True, text=True, env=env, timeout=120)
    assert marker.exists(), out.stderr  # the opt-in imports what the store names


def test_unsavable_callable_kernels_are_refused_before_the_pass(tmp_path):
    X, _ = problem()
    y = targets(X)
    with pytest.raises(ValueError, match=r"^kernel: CallableKernel\(<lambda>\) cannot be saved with "
                                         r"the model \(a lambda or nested function"):
        krr(tmp_path / "s", kernel=lambda A, B: A @ B.T).fit(X, y)

    def main_kernel(A, B):
        return A @ B.T

    main_kernel.__module__ = "__main__"
    with pytest.raises(ValueError, match=r"function of the __main__ script cannot be imported"):
        krr(tmp_path / "s", kernel=main_kernel).fit(X, y)
    assert not (tmp_path / "s").exists()
    krr(None, kernel=lambda A, B: A @ B.T).fit(X, y)  # nothing to save: allowed


# --------------------------------------------------------------------------- damaged storage


def _chunk(path: Path, array: str, block: int) -> Path:
    return path / "pass" / array / "c" / str(block) / "0"


def _file_chunk(array_dir: Path) -> Path:
    return next(p for p in sorted(array_dir.rglob("*")) if p.is_file() and p.name != "zarr.json")


DAMAGE = {
    "flipped": lambda p, other: p.write_bytes(_flip(p.read_bytes())),
    "deleted": lambda p, other: p.unlink(),
    "replaced": lambda p, other: p.write_bytes(other.read_bytes()),
    "truncated": lambda p, other: p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2]),
}


def _flip(data: bytes) -> bytes:
    b = bytearray(data)
    b[len(b) // 2] ^= 0x10
    return bytes(b)


@pytest.mark.slow
@pytest.mark.parametrize("array", ["C", "D"])
@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_damaged_pass_blocks_are_recomputed_on_resume(tmp_path, caplog, damage, array):
    X, Y = problem()
    path = tmp_path / "s"
    with dask.config.set(scheduler="synchronous"):
        with pytest.raises(RuntimeError, match="simulated failure"):
            model(kernel=counted(fail_after=6), store=path, block_dtype="float64").fit(X, Y)
        done = np.flatnonzero(open_fit_store(path).done_blocks())
        assert done.size == 6
        i = int(done[0])
        DAMAGE[damage](_chunk(path, array, i), _chunk(path, array, int(done[1])))
        kernel = counted()
        with caplog.at_level(logging.WARNING, logger="distsketch"):
            model(kernel=kernel, store=path, block_dtype="float64").fit(X, Y)
    assert f"block {i} (rows {10 * i}–{10 * i + 9}) fails its checksum" in caplog.text
    assert kernel.calls["blocks"] == N // 10 - 6 + 1  # the missing blocks and the damaged one
    model(store=tmp_path / "whole", block_dtype="float64").fit(X, Y)
    a, b = sums_of(path), sums_of(tmp_path / "whole")
    for key in ("G", "B", "M", "E"):
        np.testing.assert_array_equal(a[key], b[key])


@pytest.mark.slow
def test_damaged_sums_are_detected_and_recomputed_from_the_blocks(tmp_path, caplog):
    X, Y = problem()
    path = tmp_path / "s"
    first = model(store=path).fit(X, Y)
    chunk = _file_chunk(path / "sums" / "G")
    chunk.write_bytes(_flip(chunk.read_bytes()))
    with pytest.raises(StoreError, match=r"sums/G (does not match its checksum|cannot be read)"):
        open_fit_store(path).read_sums()
    kernel = counted()
    with caplog.at_level(logging.WARNING, logger="distsketch"):
        again = model(kernel=kernel, store=path).fit(X, Y)
    assert "recomputing the sums from the stored blocks" in caplog.text
    assert kernel.calls["blocks"] == 0  # every block read back, verified, re-summed
    np.testing.assert_array_equal(again.coef_, first.coef_)


@pytest.mark.slow
def test_edited_model_json_is_refused(tmp_path):
    X, _ = problem()
    krr(tmp_path / "s").fit(X, targets(X))
    group = zarr.open_group(str(tmp_path / "s"), mode="r+")["model"]
    meta = dict(group.attrs["distsketch_model"])
    for edit in ({"state": dict(meta["state"], lam=0.5)},
                 {"params": dict(meta["params"], lam=[0.5])}):
        group.attrs["distsketch_model"] = {**meta, **edit}
        with pytest.raises(ValueError, match="does not match its manifest digest"):
            ds.load(tmp_path / "s")
    group.attrs["distsketch_model"] = meta
    ds.load(tmp_path / "s")


def test_a_kill_during_the_model_save_keeps_the_sums(tmp_path):
    """A store whose save was interrupted never loads, and fitting again reuses its sums."""
    X, Y = problem()
    path = tmp_path / "s"
    first = model(store=path).fit(X, Y)
    zarr.open_group(str(path), mode="r+")["model"].attrs["distsketch_model"] = {}
    meta = dict(zarr.open_group(str(path), mode="r").attrs["distsketch"], status="saving-model")
    zarr.open_group(str(path), mode="r+").attrs["distsketch"] = meta
    with pytest.raises(ValueError, match="incomplete fit"):
        ds.load(path)
    kernel = counted()
    again = model(kernel=kernel, store=path).fit(X, Y)
    assert kernel.calls["blocks"] == 0
    np.testing.assert_array_equal(again.coef_, first.coef_)
    ds.load(path)


# --------------------------------------------------------------------------- one writer


def test_a_second_writer_is_refused_naming_the_holder(tmp_path):
    X, Y = problem()
    path = tmp_path / "s"
    model(store=path).fit(X, Y)
    holder = open_fit_store(path, lock=True)
    try:
        with pytest.raises(StoreError, match=rf"being written by another fit \(pid {os.getpid()} "
                                             r"on host .* since .*, fit token [0-9a-f]+\); wait"):
            model(store=path).fit(X, Y)
        with pytest.raises(StoreError, match="being written by another fit"):
            krr(None).fit(X, targets(X)).save(path, overwrite=True)
    finally:
        holder.close()
    model(store=path).fit(X, Y)  # free again


class OrphanWriter(CountingGaussian):
    """Rewrites the record of a block this fit already wrote, with another fit's token, half-way
    through the pass, as an orphaned worker of a killed fit would."""

    def block_seen(self, A):
        if len(A) == 10 and self.calls["blocks"] == 8:
            blocks = zarr.open_group(self.path, mode="r+")["pass/blocks"]
            i = int(np.flatnonzero(blocks[:, 0])[0])
            self.rewritten = i
            blocks[i] = blocks[i] + np.asarray([1, 0, 0, 0, 0], dtype=np.uint64)
        super().block_seen(A)


def test_blocks_rewritten_by_another_writer_are_never_counted(tmp_path):
    X, Y = problem()
    path = tmp_path / "s"
    kernel = OrphanWriter(gamma=0.4)
    kernel.path = str(path)
    with dask.config.set(scheduler="synchronous"):
        with pytest.raises(StoreError, match=r"was rewritten by another writer during this fit") as info:
            model(kernel=kernel, store=path).fit(X, Y)
    assert f"block {kernel.rewritten} " in str(info.value)
    assert not open_fit_store(path).pass_complete


# --------------------------------------------------------------------------- resuming, searching


def test_random_state_none_resumes_with_the_recorded_seeds(tmp_path, caplog):
    X, Y = problem()
    path = tmp_path / "s"

    def fit(kernel):
        return ds.SISOKR(kernel, ds.Gaussian(0.5), input_sketch=ds.SubSampling(30),
                         output_sketch=ds.GaussianSketch(12), lam=1e-3, random_state=None,
                         store=path, options=ds.EngineOptions(block_rows=10)).fit(X, Y)

    with dask.config.set(scheduler="synchronous"):
        with pytest.raises(RuntimeError, match="simulated failure"):
            fit(counted(fail_after=4))
        kernel = counted()
        with caplog.at_level(logging.INFO, logger="distsketch"):
            first = fit(kernel)
    assert "resuming with the sketch seeds it recorded" in caplog.text
    assert kernel.calls["blocks"] == N // 10 - 4
    np.testing.assert_array_equal(fit(counted()).coef_, first.coef_)


@pytest.mark.slow
def test_grid_search_with_a_store_directory(tmp_path):
    model_selection = pytest.importorskip("sklearn.model_selection")
    X, _ = problem()
    y = targets(X)

    def search(kernel):
        est = ds.SketchedKRR(kernel, sketch=ds.SubSampling(20), random_state=0,
                             store=ds.StoreDirectory(tmp_path / "fits"),
                             options=ds.EngineOptions(block_rows=10))
        return model_selection.GridSearchCV(est, {"lam": [1e-3, 1e-2]}, cv=3,
                                            error_score="raise").fit(X, y)

    first = search(ds.Gaussian(0.4))
    assert len(list((tmp_path / "fits").iterdir())) == 4  # 3 folds and the refit: one pass each
    kernel = counted()
    again = search(kernel)  # every pass reused (its data verified): no kernel evaluation
    assert kernel.calls["blocks"] == 0
    assert again.best_params_ == first.best_params_
    np.testing.assert_array_equal(again.best_estimator_.dual_coef_, first.best_estimator_.dual_coef_)
    assert Path(again.best_estimator_.store_).parent == tmp_path / "fits"


# --------------------------------------------------------------------------- clear messages


def test_a_full_disk_names_the_store(tmp_path, monkeypatch):
    import distsketch.engine.accumulate as acc

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(acc, "write_rows", full)
    X, Y = problem()
    with pytest.raises(OSError, match=rf"store '{tmp_path / 's'}': writing block \d+ \(rows "
                                      rf"\d+–\d+\) failed: No space left on device"):
        model(store=tmp_path / "s").fit(X, Y)


def test_damaged_metadata_names_the_store(tmp_path):
    X, Y = problem()
    path = tmp_path / "s"
    model(store=path).fit(X, Y)
    (path / "zarr.json").write_text("{ not json")
    with pytest.raises(StoreError, match=rf"store '{path}': cannot be opened as a zarr group"):
        model(store=path).fit(X, Y)
    with pytest.raises(ValueError, match=rf"store '{path}' is not a distsketch store or its "
                                         r"metadata is damaged"):
        ds.load(path)


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_inputs_that_overflow_the_kernel_are_named():
    X, _ = problem()
    with pytest.raises(ValueError, match=r"^kernel: the sum CᵀC holds NaN or infinity: the kernel "
                                         r"overflowed"):
        krr(None, prewhiten=False).fit(X * 1e160, targets(X))
    # pre-whitened (the default for sub-sampling): the landmarks' own R K Rᵀ, before the pass
    with pytest.raises(ValueError, match=r"^kernel: the sketched Gram matrix R K Rᵀ holds NaN or "
                                         r"infinity: the kernel overflowed"):
        krr(None).fit(X * 1e160, targets(X))
    with pytest.raises(ValueError, match=r"^input_kernel: .* overflowed"):
        model().fit(X * 1e160, problem()[1])
    with pytest.raises(ValueError, match=r"^input_kernel: .* overflowed"):
        model(prewhiten=False).fit(X * 1e160, problem()[1])


def test_dask_arrays_of_unknown_chunk_sizes_are_named():
    X, _ = problem()
    Xd = da.from_array(X, chunks=(30, 4))
    Xd = Xd[Xd[:, 0] > -10]  # a boolean mask: unknown row chunks
    with pytest.raises(ValueError, match=r"^X: a dask array with unknown chunk sizes .*"
                                         r"compute_chunk_sizes\(\)"):
        krr(None).fit(Xd, targets(X))


class NAType:
    """Stands in for pandas' ``pd.NA`` (pandas is not a dependency): ``float()`` refuses it."""

    def __float__(self):
        raise TypeError("float() argument must be a string or a real number, not 'NAType'")


def test_missing_values_are_named():
    X, _ = problem()
    Xo = X.astype(object)
    Xo[7, 2] = NAType()
    with pytest.raises(ValueError, match=r"^X: holds missing values \(pd.NA\); impute or drop"):
        krr(None).fit(Xo, targets(X))
