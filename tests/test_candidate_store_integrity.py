"""Candidate stores trust their cached features only as far as their records: per-chunk
checksums of the features, fingerprints of the candidates they were computed from, no links."""

import os
import pickle
import subprocess
import sys
import warnings

import numpy as np
import pytest

import distsketch as ds
import distsketch.decoding.candidates as candidates_module
from distsketch.engine.features import FeatureMap

KX, KY = ds.Gaussian(gamma=0.5), ds.Gaussian(gamma=0.3)
ROWS = 500  # candidate rows per stored chunk: 3000 candidates are 6 chunks


@pytest.fixture(scope="module")
def fitted():
    rng = np.random.default_rng(5)
    X = rng.normal(size=(300, 5))
    Y = (rng.random((300, 10)) < 0.35).astype(float)
    model = ds.SISOKR(KX, KY, input_sketch=ds.SubSampling(80), output_sketch=ds.SubSampling(40),
                      lam=1e-3, random_state=0).fit(X, Y)
    model._fold = "unfolded"  # score the stored features themselves (no folded copy)
    Xq = rng.normal(size=(250, 5))
    C = rng.random((3000, 10))  # no ties: every candidate has its own score
    return model, Xq, C


def fresh_topk(model, Xq, C, where, k=5):
    """Top-k from a new store over the same candidates: the reference, bitwise."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return model.predict_topk(Xq, ds.CandidateStore.create(where, C, chunk_rows=ROWS), k=k)


def assert_bitwise(got, want):
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])


def chunk_file(store_path, model, array, i):
    return os.path.join(store_path, "features", model.output_key_, array, "c", str(i),
                        *(["0"] if array == "phi" else []))


def cached_store(tmp_path, model, Xq, C):
    path = str(tmp_path / "cands")
    store = ds.CandidateStore.create(path, C, chunk_rows=ROWS)
    model.predict_topk(Xq, store, k=5)  # caches the features
    assert store.cached_features(model.output_key_) is not None
    return path


@pytest.mark.slow
def test_flipped_bits_in_cached_features_are_detected_and_recomputed(tmp_path, fitted,
                                                                     monkeypatch, feature_rows):
    model, Xq, C = fitted
    path = cached_store(tmp_path, model, Xq, C)
    name = chunk_file(path, model, "phi", 2)
    raw = np.fromfile(name, dtype="<u8")
    flip = np.random.default_rng(0).choice(raw.size, size=raw.size // 100, replace=False)
    raw[flip] ^= np.uint64(1) << np.uint64(62)  # the top exponent bit: values off by ~1e308
    raw.tofile(name)
    store = ds.CandidateStore.open(path)
    assert store.cached_features(model.output_key_) is None  # damaged: not served
    seen = feature_rows()
    with pytest.warns(RuntimeWarning, match=r"fail their checksums.*features/"
                      + model.output_key_ + r"/phi/c/2/0 \(chunk 2, candidate rows 1000–1499\)"):
        got = model.predict_topk(Xq, store, k=5)
    assert sum(seen) == ROWS  # only the damaged chunk
    monkeypatch.undo()
    assert_bitwise(got, fresh_topk(model, Xq, C, tmp_path / "fresh"))
    with warnings.catch_warnings():  # repaired: verified, nothing recomputed, no warning
        warnings.simplefilter("error")
        assert_bitwise(model.predict_topk(Xq, ds.CandidateStore.open(path), k=5), got)


def test_candidates_edited_after_caching_get_fresh_features(tmp_path, fitted, monkeypatch,
                                                             feature_rows):
    model, Xq, C = fitted
    path = cached_store(tmp_path, model, Xq, C)
    best = int(model.predict_topk(Xq[:1], C, k=1)[0][0, 0])
    assert best // ROWS != 2
    edited = C.copy()
    edited[1234] = C[best]  # one row of chunk 2, changed in place: now a best candidate
    store = ds.CandidateStore.open(path)
    store.candidates[1234] = edited[1234]
    seen = feature_rows()
    with pytest.warns(RuntimeWarning, match=r"candidate rows that changed.*candidates/c/2/0 "
                                            r"\(chunk 2, candidate rows 1000–1499\)"):
        got = model.predict_topk(Xq, ds.CandidateStore.open(path), k=5)
    assert sum(seen) == ROWS  # the chunk holding the edited row, and only it
    monkeypatch.undo()
    want = fresh_topk(model, Xq, edited, tmp_path / "fresh")
    assert_bitwise(got, want)
    assert 1234 in got[0][0, :2]


def test_edited_ragged_store_is_never_stale(tmp_path, fitted):
    model, Xq, C = fitted
    sets, qs = [C[:700], C[700:1800], C[1800:]], np.arange(len(Xq)) % 3
    store = ds.CandidateStore.create(tmp_path / "r", sets=sets, query_sets=qs, chunk_rows=ROWS)
    model.predict_topk(Xq, candidate_sets=store, k=3)
    store.candidates[2999] = 1.0 - C[2999]
    with pytest.warns(RuntimeWarning, match=r"candidates/c/5/0"):
        got = model.predict_topk(Xq, candidate_sets=ds.CandidateStore.open(tmp_path / "r"), k=3)
    edited = [s.copy() for s in sets]
    edited[2][-1] = 1.0 - C[2999]
    fresh = ds.CandidateStore.create(tmp_path / "f", sets=edited, query_sets=qs, chunk_rows=ROWS)
    assert_bitwise(got, model.predict_topk(Xq, candidate_sets=fresh, k=3))


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["truncated phi", "deleted phi", "truncated kyy",
                                    "deleted kyy"])
def test_truncated_or_deleted_feature_chunks_are_recomputed(tmp_path, fitted, damage):
    model, Xq, C = fitted
    path = cached_store(tmp_path, model, Xq, C)
    how, array = damage.split()
    name = chunk_file(path, model, array, 4)
    if how == "deleted":
        os.remove(name)
    else:
        with open(name, "r+b") as f:
            f.truncate(os.path.getsize(name) // 2)
    with pytest.warns(RuntimeWarning, match=rf"features/{model.output_key_}/{array}/c/4"):
        got = model.predict_topk(Xq, ds.CandidateStore.open(path), k=5)
    assert_bitwise(got, fresh_topk(model, Xq, C, tmp_path / "fresh"))


@pytest.mark.slow
def test_a_chunk_killed_mid_write_has_no_record(tmp_path, fitted, monkeypatch):
    model, Xq, C = fitted
    path = cached_store(tmp_path, model, Xq, C)
    name = chunk_file(path, model, "phi", 1)
    with open(name, "r+b") as f:
        f.write(b"\xff" * 64)  # damaged: its features will be rewritten
    original = candidates_module.write_rows

    def killed(array, start, block, **kw):  # half the chunk reaches the disk, then the end
        original(array, start, block, **kw)
        with open(name, "r+b") as f:
            f.truncate(os.path.getsize(name) // 2)
        raise KeyboardInterrupt("killed")

    monkeypatch.setattr(candidates_module, "write_rows", killed)
    store = ds.CandidateStore.open(path)
    with pytest.raises(KeyboardInterrupt), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        store.ensure_features(model.output_feature_map_, model.output_key_)
    monkeypatch.undo()
    records = np.asarray(store.group[f"features/{model.output_key_}/blocks"][:])
    assert not records[1].any() and records[[0, 2, 3, 4, 5]].all()
    assert store.cached_features(model.output_key_) is None
    with warnings.catch_warnings():  # a chunk without a record is simply computed
        warnings.simplefilter("error")
        got = model.predict_topk(Xq, ds.CandidateStore.open(path), k=5)
    assert_bitwise(got, fresh_topk(model, Xq, C, tmp_path / "fresh"))


@pytest.mark.parametrize("where", ["features", "candidates"])
def test_a_symbolic_link_inside_a_candidate_store_is_refused(tmp_path, fitted, where):
    model, Xq, C = fitted
    path = cached_store(tmp_path, model, Xq, C)
    outside = tmp_path / "outside"
    outside.mkdir()
    inside = os.path.join(path, where, "elsewhere")
    os.symlink(outside, inside)
    with pytest.raises(ValueError, match=rf"candidate store .*symbolic link '{where}/elsewhere'"):
        ds.CandidateStore.open(path)
    with pytest.raises(ValueError, match=rf"symbolic link '{where}/elsewhere'"):
        ds.CandidateStore.create(path, C, overwrite=True)
    assert os.path.islink(inside) and os.path.isdir(outside)  # nothing deleted


@pytest.mark.slow
def test_fingerprints_and_checksums_are_the_same_in_another_process(tmp_path, fitted,
                                                                     monkeypatch):
    model, Xq, C = fitted
    # 700 rows a chunk: the last chunk is partial (stored at full size, checked in place)
    ours = ds.CandidateStore.create(tmp_path / "ours", C, chunk_rows=700)
    ours.ensure_features(model.output_feature_map_)
    theirs = ds.CandidateStore.create(tmp_path / "theirs", C, chunk_rows=700)
    with open(tmp_path / "fmap.pkl", "wb") as f:
        pickle.dump(model.output_feature_map_, f)
    script = ("import pickle, sys, distsketch as ds\n"
              "fmap = pickle.load(open(sys.argv[1], 'rb'))\n"
              "ds.CandidateStore.open(sys.argv[2]).ensure_features(fmap)\n")
    env = dict(os.environ, PYTHONHASHSEED="12345")
    subprocess.run([sys.executable, "-c", script, str(tmp_path / "fmap.pkl"),
                    str(tmp_path / "theirs")], check=True, env=env, timeout=300)
    key = f"features/{model.output_key_}/blocks"
    np.testing.assert_array_equal(theirs.group[key][:], ours.group[key][:])
    assert ours.group[key][:].all()

    def refuse(self, Y, **kw):
        raise AssertionError("features recomputed")

    monkeypatch.setattr(FeatureMap, "tiles", refuse)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ds.CandidateStore.open(tmp_path / "theirs").ensure_features(model.output_feature_map_)


def test_a_cache_key_that_is_not_a_plain_name_is_refused(tmp_path, fitted):
    model, Xq, C = fitted
    store = ds.CandidateStore.create(tmp_path / "s", C[:10])
    with pytest.raises(ValueError, match=r"feature cache key '\.\./x' is not a plain name"):
        store.ensure_features(model.output_feature_map_, "../x")
    assert not (tmp_path / "x").exists()


def test_unreadable_candidates_are_named_with_the_fix(tmp_path, fitted):
    model, Xq, C = fitted
    path = cached_store(tmp_path, model, Xq, C)
    name = os.path.join(path, "candidates", "c", "3", "0")
    with open(name, "r+b") as f:
        f.truncate(os.path.getsize(name) // 2)
    with pytest.raises(ValueError, match=r"candidate chunk 'candidates/c/3/0' \(rows 1500–1999\) "
                                         r"cannot be read.*create the store again"):
        model.predict_topk(Xq, ds.CandidateStore.open(path), k=5)


@pytest.mark.slow
def test_features_without_records_are_recomputed(tmp_path, fitted, monkeypatch, feature_rows):
    model, Xq, C = fitted
    path = cached_store(tmp_path, model, Xq, C)
    blocks = os.path.join(path, "features", model.output_key_, "blocks")
    for root, dirs, files in os.walk(blocks, topdown=False):  # features cached without records
        for f in files:
            os.remove(os.path.join(root, f))
        os.rmdir(root)
    seen = feature_rows()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = model.predict_topk(Xq, ds.CandidateStore.open(path), k=5)
    assert sum(seen) == len(C)  # nothing unverifiable is used
    monkeypatch.undo()
    assert_bitwise(got, fresh_topk(model, Xq, C, tmp_path / "fresh"))


@pytest.mark.slow
def test_a_model_folding_an_edited_store_folds_it_again(tmp_path, fitted, monkeypatch):
    model, Xq, C = fitted
    monkeypatch.setattr(model, "_fold", "features")  # keeps φ_Y(C) W per store token
    path = cached_store(tmp_path, model, Xq, C)
    best = int(model.predict_topk(Xq[:1], C, k=1)[0][0, 0])
    edited = C.copy()
    edited[1234] = C[best]
    ds.CandidateStore.open(path).candidates[1234] = edited[1234]
    with pytest.warns(RuntimeWarning, match=r"candidates/c/2/0"):
        got = model.predict_topk(Xq, ds.CandidateStore.open(path), k=5)
    assert 1234 in got[0][0, :2]
    assert_bitwise(got, fresh_topk(model, Xq, edited, tmp_path / "fresh"))


@pytest.mark.slow
def test_verified_chunks_are_not_read_again_until_a_file_changes(tmp_path, fitted, monkeypatch):
    """A process verifies each chunk once: a second decode reads no cached feature chunk to
    check it (a decode from cached features reads them once, not twice). A chunk file written
    since — even with its modification time set back — is verified again (its ctime moved)."""
    import time

    model, Xq, C = fitted
    path = cached_store(tmp_path, model, Xq, C)
    time.sleep(2 * candidates_module._RACY_NS / 1e9)
    checked = []
    real = candidates_module._stored_damage
    monkeypatch.setattr(candidates_module, "_stored_damage",
                        lambda phi, kyy, i, *a: checked.append(i) or real(phi, kyy, i, *a))
    store = ds.CandidateStore.open(path)
    first = model.predict_topk(Xq, store, k=5)
    assert checked == []  # written by this process: their files are as it left them
    candidates_module._VERIFIED.clear()  # as in a fresh process: each chunk verified once
    assert_bitwise(model.predict_topk(Xq, store, k=5), first)
    assert sorted(checked) == list(range(6))
    checked.clear()
    assert_bitwise(model.predict_topk(Xq, store, k=5), first)
    assert checked == []
    name = chunk_file(path, model, "phi", 4)
    st = os.stat(name)
    raw = np.fromfile(name, dtype="<u8")
    raw[7] ^= np.uint64(1) << np.uint64(62)
    raw.tofile(name)
    os.utime(name, ns=(st.st_atime_ns, st.st_mtime_ns))  # mtime set back; ctime cannot be
    with pytest.warns(RuntimeWarning, match=r"phi/c/4/0 \(chunk 4"):
        again = model.predict_topk(Xq, store, k=5)
    assert checked == [4]
    assert_bitwise(again, first)
