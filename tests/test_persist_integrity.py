"""What ``load`` trusts of a saved model: nothing it has not checked. Declared shapes and dtypes
are checked against the model's own record before anything is read (no allocation a store can
dictate), values against their checksums and finiteness, the directory against links; every
failure names the store, the array and the fix; a full disk while saving names the store; a
reader racing a writer gets the model or a "being written" / "incomplete fit" error."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import zarr

import distsketch as ds
from distsketch.engine.storeguard import StoreError
from distsketch.io import persist

SRC = str(Path(ds.__file__).resolve().parents[1])


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(150, 4))
    return X, np.sin(X[:, 0]) + X[:, 1]


def krr(lam=1e-3):
    return ds.SketchedKRR(ds.Gaussian(0.4), sketch=ds.SubSampling(30), lam=lam, random_state=5)


@pytest.fixture(scope="module")
def fitted(data):
    X, y = data
    return krr().fit(X, y)


def saved(fitted, path: Path) -> Path:
    fitted.save(path)
    return path


def model_meta(path: Path) -> dict:
    return dict(zarr.open_group(str(path), mode="r")["model"].attrs["distsketch_model"])


def write_model_meta(path: Path, meta: dict, *, digest: bool = True) -> None:
    """Rewrite the saved model's metadata, the manifest recomputed as an attacker would (it is
    a digest, not a signature)."""
    if digest:
        meta["manifest"] = persist._manifest(meta)
    zarr.open_group(str(path), mode="r+")["model"].attrs["distsketch_model"] = meta


def edit_array_json(path: Path, array: str, **changes) -> None:
    meta_file = path / "model" / array / "zarr.json"
    doc = json.loads(meta_file.read_text())
    doc.update(changes)
    meta_file.write_text(json.dumps(doc))


def chunk_files(path: Path, array: str) -> list[Path]:
    return sorted(p for p in (path / "model" / array).rglob("*")
                  if p.is_file() and p.name != "zarr.json")


def as_previous_format(path: Path) -> None:
    """Make a saved model look as the previous format (3) wrote it: no array records, no token,
    the manifest over the keys that format covered."""
    meta = model_meta(path)
    for key in ("arrays", "token"):
        meta.pop(key, None)
    meta["model_format"] = 3
    write_model_meta(path, meta)


# --------------------------------------------------------------------------- declared shapes


BOMB = [30000, 30000]  # 6.7 GiB of float64


def _bomb_edited(path):
    edit_array_json(path, "T", shape=BOMB)


def _bomb_forged(path):
    """The array's zarr.json and the model's record both edited, the manifest recomputed."""
    edit_array_json(path, "T", shape=BOMB)
    meta = model_meta(path)
    meta["arrays"] = dict(meta["arrays"], T=dict(meta["arrays"]["T"], shape=BOMB))
    write_model_meta(path, meta)


def _bomb_previous_format(path):
    as_previous_format(path)
    edit_array_json(path, "T", shape=BOMB)


@pytest.mark.slow
@pytest.mark.parametrize("plant", [_bomb_edited, _bomb_forged, _bomb_previous_format],
                         ids=["edited", "forged-record", "previous-format"])
def test_a_declared_shape_bomb_is_refused_before_allocating(tmp_path, fitted, plant):
    """``load`` under an address-space limit 1.5 GiB above the process's own: a model array
    declaring 30 000 × 30 000 float64 (6.7 GiB) is refused naming the store and the array
    before anything is allocated, never a MemoryError: whether only its zarr.json was edited,
    the model's record too (the manifest recomputed), or the model predates the records."""
    path = saved(fitted, tmp_path / "s")
    plant(path)
    code = textwrap.dedent("""
        import resource, sys
        import distsketch as ds
        from distsketch import persist  # everything load imports is loaded before the limit
        with open("/proc/self/status") as f:
            vm = next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmSize"))
        resource.setrlimit(resource.RLIMIT_AS, (vm + 3 * 2**29, resource.RLIM_INFINITY))
        try:
            ds.load(sys.argv[1])
        except BaseException as exc:
            print(f"{type(exc).__name__}: {exc}")
        else:
            print("LOADED")
    """)
    env = dict(os.environ, PYTHONPATH=SRC, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1",
               OPENBLAS_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True,
                         env=env, timeout=120)
    line = out.stdout.strip()
    assert line.startswith("StoreError: "), (line, out.stderr[-2000:])
    assert f"store '{path}'" in line and "'T'" in line and "nothing was read" in line, line


# --------------------------------------------------------------------------- values


@pytest.mark.slow
@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_a_non_finite_value_planted_in_a_saved_array_is_refused(tmp_path, fitted, data, value):
    """NaN or infinity written into ``T`` with its checksum and the manifest recomputed: the
    checksums agree, the model would predict NaN; the record says ``T`` was finite."""
    path = saved(fitted, tmp_path / "s")
    arr = zarr.open_array(str(path), path="model/T", mode="r+")
    values = arr[...]
    values[3, 4] = value
    arr[...] = values
    meta = model_meta(path)
    meta["checksums"] = dict(meta["checksums"], T=persist._sha(values))
    write_model_meta(path, meta)
    with pytest.raises(ValueError, match=rf"^store '{path}': saved model array 'T' holds 1 NaN "
                                         r"or infinite value"):
        ds.load(path)


def test_a_non_finite_array_recorded_at_save_loads(tmp_path, fitted, data):
    """Finiteness is checked against the record: an array that held NaN when saved (a fold's
    score of a degenerate split) still loads."""
    path = saved(fitted, tmp_path / "s")
    meta = model_meta(path)
    arr = zarr.open_array(str(path), path="model/intercept", mode="r+")
    values = arr[...]
    values[0] = np.nan
    arr[...] = values
    meta["checksums"] = dict(meta["checksums"], intercept=persist._sha(values))
    meta["arrays"] = dict(meta["arrays"], intercept=dict(meta["arrays"]["intercept"], finite=False))
    write_model_meta(path, meta)
    assert np.isnan(ds.load(path).intercept_).all()


# --------------------------------------------------------------------------- damage


def _truncate_chunk(path):
    (chunk,) = chunk_files(path, "T")
    chunk.write_bytes(chunk.read_bytes()[: chunk.stat().st_size // 2])


def _delete_chunk(path):
    (chunk,) = chunk_files(path, "T")
    chunk.unlink()


def _delete_array_json(path):
    (path / "model" / "T" / "zarr.json").unlink()


def _edit_dtype(path):
    edit_array_json(path, "T", data_type="float32")


DAMAGE = {
    "truncated-chunk": (_truncate_chunk, r"saved model array 'T' cannot be read \(RuntimeError"),
    "deleted-chunk": (_delete_chunk, r"saved model array 'T' does not match its recorded checksum"),
    "deleted-zarr-json": (_delete_array_json, r"the saved model is missing array 'T'"),
    "edited-dtype": (_edit_dtype, r"saved model array 'T' declares shape \(30, 30\) float32, but "
                                  r"the saved model records shape \(30, 30\) float64"),
}


@pytest.mark.slow
@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_model_array_names_the_store_and_the_array(tmp_path, fitted, damage):
    path = saved(fitted, tmp_path / "s")
    harm, message = DAMAGE[damage]
    harm(path)
    with pytest.raises(ValueError, match=rf"^store '{path}': {message}.*refit the model") as info:
        ds.load(path)
    assert isinstance(info.value, StoreError)


@pytest.mark.slow
@pytest.mark.parametrize("key", ["class", "params", "state", "checksums", "arrays", "token"])
def test_missing_model_metadata_is_named(tmp_path, fitted, key):
    path = saved(fitted, tmp_path / "s")
    meta = model_meta(path)
    del meta[key]
    write_model_meta(path, meta, digest=False)
    with pytest.raises(ValueError, match=rf"^store '{path}': the saved model's metadata "
                                         rf"\(model/zarr.json\) lack \['{key}'\]: damaged or edited"):
        ds.load(path)


def test_a_missing_state_entry_is_named_not_raised_raw(tmp_path, fitted):
    """A state entry removed, the manifest recomputed: a StoreError naming the store, not a
    raw ``KeyError``."""
    path = saved(fitted, tmp_path / "s")
    meta = model_meta(path)
    meta["state"] = {k: v for k, v in meta["state"].items() if k != "n"}
    write_model_meta(path, meta)
    with pytest.raises(ValueError, match=rf"^store '{path}': the saved model cannot be rebuilt "
                                         r"from what the store holds \(KeyError: 'n'\)"):
        ds.load(path)


def test_empty_model_metadata_of_a_solved_store_are_named(tmp_path, fitted):
    path = saved(fitted, tmp_path / "s")
    zarr.open_group(str(path), mode="r+")["model"].attrs["distsketch_model"] = {}
    with pytest.raises(ValueError, match=rf"^store '{path}': the saved model's metadata "
                                         r"\(model/zarr.json\) are missing"):
        ds.load(path)


def test_a_model_saved_in_the_previous_format_still_loads(tmp_path, fitted, data):
    path = saved(fitted, tmp_path / "s")
    as_previous_format(path)
    X, _ = data
    np.testing.assert_array_equal(ds.load(path).predict(X), fitted.predict(X))


# --------------------------------------------------------------------------- writing


def test_a_full_disk_while_saving_names_the_store(tmp_path, fitted, monkeypatch):
    store_cls = zarr.storage.LocalStore
    set_async, set_sync = store_cls.set, store_cls.set_sync

    def full(key):
        if key.startswith("model/") and "/c/" in key:  # the model's chunks: the disk fills
            raise OSError(errno.ENOSPC, "No space left on device")

    async def set_full(self, key, value):
        full(key)
        return await set_async(self, key, value)

    def set_sync_full(self, key, value):
        full(key)
        return set_sync(self, key, value)

    monkeypatch.setattr(store_cls, "set", set_full)
    monkeypatch.setattr(store_cls, "set_sync", set_sync_full)
    path = tmp_path / "s"
    with pytest.raises(OSError, match=rf"^\[Errno {errno.ENOSPC}\] store '{path}': writing the "
                                      r"saved model \(array '\w+'\) failed: No space left on "
                                      r"device; .*save again") as info:
        fitted.save(path)
    assert info.value.errno == errno.ENOSPC
    monkeypatch.undo()
    with pytest.raises(ValueError, match=r"incomplete fit \(status 'saving-model'\)"):
        ds.load(path)
    fitted.save(path, overwrite=True)
    ds.load(path)


def _tree(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def test_a_model_array_linked_to_another_store_is_refused(tmp_path, fitted, data):
    """``model/T`` replaced by a link to the same array of another saved store (its checksum
    matches): ``load`` and ``save`` refuse it, the linked-to files are unchanged."""
    other = saved(fitted, tmp_path / "other")
    path = saved(fitted, tmp_path / "s")
    before = _tree(other)
    shutil.rmtree(path / "model" / "T")
    os.symlink(other / "model" / "T", path / "model" / "T")
    with pytest.raises(ValueError, match=rf"^store '{path}' contains a symbolic link "
                                         r"'model/T'"):
        ds.load(path)
    with pytest.raises(ValueError, match="contains a symbolic link 'model/T'"):
        fitted.save(path, overwrite=True)
    assert _tree(other) == before
    assert os.path.islink(path / "model" / "T")


# --------------------------------------------------------------------------- a racing writer


WRITER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    import numpy as np
    import distsketch as ds
    target, mode, stop, ready = sys.argv[1], sys.argv[2], Path(sys.argv[3]), Path(sys.argv[4])
    rng = np.random.default_rng(3)
    X = rng.normal(size=(150, 4))
    y = np.sin(X[:, 0]) + X[:, 1]
    models = [ds.load(p) for p in sys.argv[5:]]
    saves = 0
    ready.write_text("ready")
    while not stop.exists():
        if mode == "save":
            models[saves % 2].save(target, overwrite=True)
        else:  # refit into the store: the pass reset, solved again and saved
            ds.SketchedKRR(ds.Gaussian(0.4), sketch=ds.SubSampling(30), lam=(1e-3, 1e-1)[saves % 2],
                           random_state=5, store=target,
                           options=ds.EngineOptions(overwrite=True)).fit(X, y)
        saves += 1
        time.sleep(0.03 * (saves % 3))
    print(saves)
""")


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["save", "fit"])
def test_a_reader_racing_a_writer_gets_the_model_or_a_being_written_error(tmp_path, data, mode):
    """One process rewrites a store with two models in turn (saving with overwrite, or fitting
    into it again), another loads it 200 times: every load gives one of the two models, or a
    StoreError saying the store is being written or holds an incomplete fit; never a raw
    exception, never "tampered"."""
    X, y = data
    sources = [tmp_path / "a", tmp_path / "b"]
    for lam, source in zip((1e-3, 1e-1), sources):
        ds.SketchedKRR(ds.Gaussian(0.4), sketch=ds.SubSampling(30), lam=lam, random_state=5,
                       store=source).fit(X, y)
    expected = [ds.load(source).predict(X[:10]) for source in sources]
    target = tmp_path / "s"
    ds.load(sources[0]).save(target)
    env = dict(os.environ, PYTHONPATH=SRC, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1")
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(target), mode,
                               str(tmp_path / "stop"), str(tmp_path / "ready"), *map(str, sources)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "ready").exists():
            assert writer.poll() is None and time.monotonic() < deadline, writer.stderr.read()
            time.sleep(0.05)
        loaded, refused = 0, []
        for i in range(200):
            time.sleep(0.01 * (i % 4))  # loads spread over the writer's saves
            try:
                model = ds.load(target)
            except Exception as exc:  # noqa: BLE001 - any exception is recorded, then judged
                refused.append(f"{type(exc).__name__}: {exc}")
                continue
            pred = model.predict(X[:10])
            assert any(np.allclose(pred, e, rtol=1e-6, atol=1e-9) for e in expected)
            loaded += 1
    finally:
        (tmp_path / "stop").write_text("stop")
        out, err = writer.communicate(timeout=60)
    assert writer.returncode == 0, err[-2000:]
    saves = int(out.strip())
    bad = {m for m in refused if not m.startswith(f"StoreError: store '{target}'")
           or not ("being written" in m or "incomplete fit" in m) or "tampered" in m}
    assert not bad, sorted(bad)[:6]
    assert saves >= 10 and loaded >= 1, (saves, loaded)  # both while the store was rewritten
