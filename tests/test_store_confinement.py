"""A fit's store stays inside its directory and names its damage: a symbolic link in a store is
refused before anything is read or written (resume, overwrite=True, a reader, a
StoreDirectory), so no user file is replaced or deleted through it; damaged pass metadata
raises a StoreError naming the store, the array and the fix, and overwrite=True recovers the
same model as a fresh fit."""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path

import dask
import numpy as np
import pytest
import zarr

import distsketch as ds
from distsketch.engine.store import open_fit_store
from distsketch.engine.storeguard import StoreError
from passhelpers import CountingGaussian, N, model, problem


def fit(path, *, kernel=None, overwrite=False):
    with dask.config.set(scheduler="synchronous"):
        return model(kernel=kernel, store=path, block_dtype="float64",
                     overwrite=overwrite).fit(*problem())


def killed(path):
    """A store as a kill leaves it: the pass half done."""
    with pytest.raises(RuntimeError, match="simulated failure"):
        fit(path, kernel=CountingGaussian(gamma=0.4, fail_after=6))
    assert open_fit_store(path).done_blocks().sum() == 6
    return path


def files(directory: Path, *, skip=()) -> dict[str, bytes | str]:
    """Every file below ``directory`` and its bytes (a link: its target, not followed)."""
    out = {}
    for root, dirs, names in os.walk(directory):
        for name in names + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
            full = os.path.join(root, name)
            rel = os.path.relpath(full, directory)
            if rel not in skip:
                out[rel] = (f"-> {os.readlink(full)}" if os.path.islink(full)
                            else Path(full).read_bytes())
    return out


def user_directory(tmp_path: Path) -> Path:
    """A user's directory with a file named like a chunk and one of their own."""
    user = tmp_path / "user"
    user.mkdir()
    (user / "0").write_bytes(b"the user's own file named 0\n" * 10)
    (user / "notes.txt").write_text("keep me")
    return user


def link(store: Path, rel: str, target: Path) -> None:
    """Replace ``store/rel`` (a directory, or nothing) with a symbolic link to ``target``."""
    where = store / rel
    if where.exists():
        shutil.rmtree(where)
    where.parent.mkdir(parents=True, exist_ok=True)
    where.symlink_to(target, target_is_directory=True)


# --------------------------------------------------------------------------- links


@pytest.mark.slow
@pytest.mark.parametrize("overwrite", [False, True])
def test_a_linked_chunk_directory_is_refused_and_its_files_kept(tmp_path, overwrite):
    path = killed(tmp_path / "s")
    user = user_directory(tmp_path)
    link(path, "pass/C/c/2", user)
    before = files(user)
    with pytest.raises(StoreError, match=rf"store '{path}' contains a symbolic link "
                                         rf"'pass/C/c/2' \(to '{user}'\); .*remove the link"):
        fit(path, overwrite=overwrite)
    assert files(user) == before
    assert (path / "pass/C/c/2").is_symlink()  # not ours to delete either
    (path / "pass/C/c/2").unlink()  # the fix the message names: the fit resumes
    np.testing.assert_array_equal(fit(path).coef_, fit(tmp_path / "fresh").coef_)


@pytest.mark.parametrize("overwrite", [False, True])
def test_a_linked_group_is_refused_and_its_files_kept(tmp_path, overwrite):
    path = tmp_path / "s"
    fit(path)
    user = user_directory(tmp_path)
    link(path, "sums", user)  # a plain directory: recomputed sums would be written there
    before = files(user)
    with pytest.raises(StoreError, match=rf"store '{path}' contains a symbolic link 'sums'"):
        fit(path, overwrite=overwrite)
    assert files(user) == before
    assert (path / "sums").is_symlink()


def test_a_reader_follows_no_link_out_of_the_store(tmp_path):
    path = tmp_path / "s"
    fit(path)
    (path / "sums").rename(tmp_path / "elsewhere")  # intact sums, read through a link
    (path / "sums").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    with pytest.raises(StoreError, match=rf"store '{path}' contains a symbolic link 'sums'"):
        open_fit_store(path).read_sums()


def test_a_link_in_a_store_directory_is_refused(tmp_path):
    X, Y = problem()

    def search():
        return model(store=ds.StoreDirectory(tmp_path / "fits")).fit(X, Y)

    where = Path(search().store_)
    shutil.rmtree(where)
    user = tmp_path / "user"
    user.mkdir()
    where.symlink_to(user, target_is_directory=True)
    with pytest.raises(StoreError, match=rf"store '{where}' .* is a symbolic link"):
        search()
    assert list(user.iterdir()) == []


# --------------------------------------------------------------------------- damaged metadata


def _edit_json(rel, **changes):
    def damage(path):
        meta = json.loads((path / rel).read_text())
        meta.update(changes)
        (path / rel).write_text(json.dumps(meta))
    return damage


DAMAGE = {
    "C metadata deleted": (lambda p: (p / "pass/C/zarr.json").unlink(),
                           r"the array 'pass/C' is missing"),
    "C dtype edited": (_edit_json("pass/C/zarr.json", data_type="int16"),
                       r"the array 'pass/C' has .* dtype int16, where this fit needs .* float64"),
    "blocks metadata deleted": (lambda p: (p / "pass/blocks/zarr.json").unlink(),
                                r"the array 'pass/blocks' is missing"),
    "blocks shape edited": (_edit_json("pass/blocks/zarr.json", shape=[3, 5]),
                            r"the array 'pass/blocks' has shape \(3, 5\)"),
    "pass metadata deleted": (lambda p: (p / "pass/zarr.json").unlink(),
                              r"the group 'pass' is missing"),
}


@pytest.mark.slow
@pytest.mark.parametrize("complete", [False, True], ids=["killed", "complete"])
@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_damaged_pass_metadata_is_named_and_overwrite_recovers(tmp_path, damage, complete):
    path = tmp_path / "s"
    if complete:
        fit(path)
    else:
        killed(path)
    harm, what = DAMAGE[damage]
    harm(path)
    before = files(path, skip={"zarr.json"})  # the root's holder is rewritten at opening
    with pytest.raises(StoreError, match=rf"store '{path}': the stored pass is damaged: {what}"
                                         r".*; fit again with EngineOptions\(overwrite=True\)"):
        fit(path)
    assert files(path, skip={"zarr.json"}) == before  # nothing written
    np.testing.assert_array_equal(fit(path, overwrite=True).coef_,
                                  fit(tmp_path / "fresh").coef_)
    assert open_fit_store(path).status == "solved"


@pytest.mark.parametrize("overwrite", [False, True])
def test_a_truncated_root_metadata_is_left_alone_with_the_fix(tmp_path, overwrite):
    """Unreadable root metadata: nothing says the directory is distsketch's, so not even
    overwrite=True rewrites or deletes it; the message says so and what to do."""
    path = tmp_path / "s"
    fit(path)
    root = path / "zarr.json"
    root.write_bytes(root.read_bytes()[:40])
    before = files(path)
    with pytest.raises(StoreError, match=rf"store '{path}': cannot be opened as a zarr group: "
                                         r"its root metadata \(zarr.json\) is damaged .* cannot "
                                         r"tell whether it wrote this directory .* if it is a "
                                         r"distsketch store, delete it"):
        fit(path, overwrite=overwrite)
    assert files(path) == before


def _set_meta(path, **changes):
    group = zarr.open_group(str(path), mode="r+")
    group.attrs["distsketch"] = {**dict(group.attrs["distsketch"]), **changes}


ATTRIBUTE_DAMAGE = {
    "not a mapping": (lambda path: zarr.open_group(str(path), mode="r+").attrs.update(
        distsketch="damaged"), r": its metadata is damaged .* EngineOptions\(overwrite=True\)"),
    "pass record not a mapping": (lambda path: _set_meta(path, **{"pass": "damaged"}),
                                  r" already holds a fit whose recorded configuration is "
                                  r"damaged .* EngineOptions\(overwrite=True\)"),
}


@pytest.mark.slow
@pytest.mark.parametrize("damage", sorted(ATTRIBUTE_DAMAGE))
def test_damaged_root_attributes_are_named_and_overwrite_recovers(tmp_path, damage):
    path = tmp_path / "s"
    fit(path)
    harm, message = ATTRIBUTE_DAMAGE[damage]
    harm(path)
    with pytest.raises(StoreError, match=rf"store:? '{path}'{message}"):
        fit(path)
    np.testing.assert_array_equal(fit(path, overwrite=True).coef_, fit(tmp_path / "fresh").coef_)


RECORD_DAMAGE = {"truncated": lambda p: p.write_bytes(p.read_bytes()[:7]),
                 "deleted": lambda p: p.unlink()}


@pytest.mark.slow
@pytest.mark.parametrize("complete, damage", [(False, "truncated"), (True, "truncated"),
                                              (True, "deleted")])
def test_a_lost_block_record_recomputes_that_block(tmp_path, caplog, complete, damage):
    path = tmp_path / "s"
    if complete:
        fit(path)
    else:
        killed(path)
    i = int(np.flatnonzero(open_fit_store(path).done_blocks())[0])
    RECORD_DAMAGE[damage](path / "pass" / "blocks" / "c" / str(i) / "0")
    kernel = CountingGaussian(gamma=0.4)
    with caplog.at_level(logging.WARNING, logger="distsketch"):
        again = fit(path, kernel=kernel)
    assert f"blocks [{i}]" in caplog.text
    assert kernel.calls["blocks"] == (1 if complete else N // 10 - 6 + 1)  # and no other
    np.testing.assert_array_equal(again.coef_, fit(tmp_path / "fresh").coef_)


def test_a_damaged_record_of_the_sums_is_recomputed_from_the_blocks(tmp_path):
    path = tmp_path / "s"
    first = fit(path)
    _set_meta(path, sums="damaged")
    kernel = CountingGaussian(gamma=0.4)
    np.testing.assert_array_equal(fit(path, kernel=kernel).coef_, first.coef_)
    assert kernel.calls["blocks"] == 0  # every block verified and re-summed


def test_a_store_of_another_format_is_replaced_only_with_overwrite(tmp_path):
    path = tmp_path / "s"
    first = fit(path)
    _set_meta(path, format_version=1)
    with pytest.raises(StoreError, match=rf"store '{path}' was written with store format 1.*"
                                         r"EngineOptions\(overwrite=True\) to replace it"):
        fit(path)
    np.testing.assert_array_equal(fit(path, overwrite=True).coef_, first.coef_)



@pytest.mark.slow
@pytest.mark.parametrize("damage", sorted(ATTRIBUTE_DAMAGE))
def test_damaged_root_attributes_of_a_pcg_fit_overwrite_recovers(tmp_path, damage):
    """The PCG route reads the recorded seeds through the same tolerant metadata: with
    overwrite=True a damaged store is refitted, to the fresh PCG model."""
    X = np.random.default_rng(3).normal(size=(200, 4))
    y = np.sin(X[:, 0])

    def pcg(path, seed=0, **kw):
        return ds.SketchedKRR(ds.Gaussian(0.4), sketch=ds.SubSampling(30), lam=1e-3,
                              solver="pcg", random_state=seed, store=path,
                              options=ds.EngineOptions(block_rows=50, block_dtype="float64",
                                                       **kw)).fit(X, y)

    path = tmp_path / "s"
    pcg(path)
    ATTRIBUTE_DAMAGE[damage][0](path)
    with pytest.raises(StoreError, match=str(path)):
        pcg(path)
    np.testing.assert_array_equal(pcg(path, overwrite=True).dual_coef_,
                                  pcg(tmp_path / "fresh").dual_coef_)
    # without a seed the fit reads the seeds the store recorded: damaged, it draws new ones
    ATTRIBUTE_DAMAGE[damage][0](path)
    refit = pcg(path, seed=None, overwrite=True)
    assert len(refit.dual_coef_) == 30 and np.isfinite(refit.dual_coef_).all()
