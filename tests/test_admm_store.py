"""Checksums of the ADMM route's stored rows ``Z, U``: a damaged, truncated or
foreign generation is never used.

Each generation of the stored rows carries a record (the iteration it holds, the CRC-32 of
every block's ``z`` and ``u``, the driver state after it), written after the rows. A fit
resumed from a store verifies the generation it continues from; a generation that fails (a
flipped bit, a truncated chunk, a truncated or missing record) is not used: the fit falls
back to the other generation when that verifies, else restarts ADMM from its warm start,
with a logged warning. ADMM is deterministic, so either way the final model equals the
uninterrupted fit's bitwise (only the number of sweeps differs).

The fits are interrupted in-process: an exception raised from the block function at a chosen
block of a chosen iteration (before or after that block wrote its rows), like the SIGKILL of
tests/test_admm.py but without a subprocess.
"""

from __future__ import annotations

import logging

import dask
import numpy as np
import pytest
import zarr

import distsketch as ds
from distsketch.engine.storeguard import StoreError
from distsketch.losses.quantile import Pinball
from reference.lipschitz import data

BLOCK = 64
N = 200
N_BLOCKS = -(-N // BLOCK)
STOP_ITER = 25  # the interrupted fit has completed this many iterations


class _Stop(Exception):
    """The interruption."""


def _fit(X, y, store):
    return ds.SketchedRegressor(
        ds.Gaussian(gamma=0.5), loss=Pinball(0.3), sketch=ds.SubSampling(30), lam=1e-3,
        tol=1e-5, max_iter=5000, random_state=1, solver="admm",
        options=ds.EngineOptions(block_dtype="float64", block_rows=BLOCK), store=store,
    ).fit(X, y)


@pytest.fixture(scope="module")
def whole(tmp_path_factory):
    X, y = data(N, 1, 0, 12)
    est = _fit(X, y, tmp_path_factory.mktemp("whole") / "whole.zarr")
    assert est.n_iter_ > STOP_ITER + 5
    return X, y, est


def _interrupt(monkeypatch, X, y, store, *, block: int, written: bool, hook=None):
    """Fit into ``store`` and stop at block ``block`` (1-based) of iteration
    ``STOP_ITER + 1``, after that block wrote its rows (``written``) or before; ``hook(count)``
    runs before each block."""
    import distsketch.solvers.lipschitz.routes as rg

    original = rg.admm_block
    stop_at = STOP_ITER * N_BLOCKS + block
    count = [0]

    def stopping(shared, item, ws):
        count[0] += 1
        if hook is not None:
            hook(count[0])
        if count[0] == stop_at and not written:
            raise _Stop
        out = original(shared, item, ws)
        if count[0] == stop_at:
            raise _Stop
        return out

    with monkeypatch.context() as mp:
        mp.setattr(rg, "admm_block", stopping)
        with dask.config.set(scheduler="sync"), pytest.raises(_Stop):
            _fit(X, y, store)


def _group(store, mode="a"):
    solver = zarr.open_group(str(store), mode=mode)["solver"]
    (group,) = [g for _, g in solver.groups()]
    return group


def _flip_bit(store, name: str, block: int) -> None:
    """One bit of one float in row block ``block`` of the stored array ``name``."""
    arr = _group(store)[name]
    s, e = block * BLOCK, min(N, (block + 1) * BLOCK)
    rows = np.array(arr[s:e])
    rows.view(np.uint64)[3, 0] ^= np.uint64(1 << 20)
    arr[s:e] = rows


def _admm_warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "distsketch.solvers.lipschitz.admm" and r.levelno >= logging.WARNING]


def _same_model(a, b) -> None:
    assert np.array_equal(a.dual_coef_, b.dual_coef_)
    assert np.array_equal(a.intercepts_, b.intercepts_)
    assert a.n_iter_ == b.n_iter_
    assert a.objective_ == b.objective_


@pytest.mark.slow
def test_honest_resume_verifies_without_warnings(whole, tmp_path, monkeypatch, caplog):
    """Stopped after two blocks of iteration 26 wrote their rows (so generation 1 is half
    overwritten): the complete generation verifies, nothing is warned, the model is
    bitwise the uninterrupted one and only the interrupted iteration is redone."""
    X, y, ref = whole
    store = tmp_path / "s.zarr"
    _interrupt(monkeypatch, X, y, store, block=2, written=True)
    group = _group(store, "r")
    assert group.attrs["state"]["n_iter"] == STOP_ITER
    assert group.attrs[f"rows_{(STOP_ITER - 1) % 2}"]["iteration"] == STOP_ITER - 1
    with caplog.at_level(logging.INFO, logger="distsketch.solvers.lipschitz.admm"):
        est = _fit(X, y, store)
    assert _admm_warnings(caplog) == []
    assert any(f"resuming the ADMM iterations at iteration {STOP_ITER}" in r.getMessage()
               for r in caplog.records)
    _same_model(est, ref)
    assert est.n_passes_ == ref.n_passes_ - STOP_ITER


@pytest.mark.slow
@pytest.mark.parametrize("name", ["z", "u"])
def test_flipped_bit_falls_back_to_the_other_generation(whole, tmp_path, monkeypatch,
                                                        caplog, name):
    """Stopped before iteration 26 wrote anything: both generations are complete. A bit
    flipped in one block of the newer one (``z`` or ``u``) is detected; the fit continues
    from the older generation (one iteration earlier) and ends bitwise equal."""
    X, y, ref = whole
    store = tmp_path / "s.zarr"
    _interrupt(monkeypatch, X, y, store, block=1, written=False)
    newer = (STOP_ITER - 1) % 2
    _flip_bit(store, f"{name}_{newer}", 1)
    with caplog.at_level(logging.WARNING, logger="distsketch.solvers.lipschitz.admm"):
        est = _fit(X, y, store)
    warned = " | ".join(_admm_warnings(caplog))
    assert f"generation {newer} (iteration {STOP_ITER}): block 1 (rows 64–127) of {name} " \
           f"fails its checksum" in warned
    assert f"resuming from the older generation {1 - newer} (iteration {STOP_ITER - 1}" in warned
    _same_model(est, ref)
    assert est.n_passes_ == ref.n_passes_ - (STOP_ITER - 1)


@pytest.mark.slow
def test_both_generations_damaged_restarts_from_the_warm_start(whole, tmp_path, monkeypatch,
                                                               caplog):
    """Stopped mid-iteration (the older generation half overwritten) and a bit flipped in the
    complete one: neither verifies, ADMM restarts from its warm start (every sweep redone) and
    ends bitwise equal — never a model from damaged rows, never an exception."""
    X, y, ref = whole
    store = tmp_path / "s.zarr"
    _interrupt(monkeypatch, X, y, store, block=2, written=True)
    _flip_bit(store, f"u_{(STOP_ITER - 1) % 2}", 2)
    with caplog.at_level(logging.WARNING, logger="distsketch.solvers.lipschitz.admm"):
        est = _fit(X, y, store)
    warned = " | ".join(_admm_warnings(caplog))
    assert "block 2 (rows 128–191) of u fails its checksum" in warned
    assert f"generation {STOP_ITER % 2} (iteration {STOP_ITER - 1}): block " in warned
    assert "restarting the ADMM iterations from the warm start" in warned
    _same_model(est, ref)
    assert est.n_passes_ == ref.n_passes_


def _truncate_z(rec):
    rec["z"] = rec["z"][:-1]


def _drop_u(rec):
    del rec["u"]


def _zero_entry(rec):
    rec["z"][2] = 0


def _drop_xi(rec):
    del rec["Xi"]


@pytest.mark.slow
@pytest.mark.parametrize("damage", [_truncate_z, _drop_u, _zero_entry, _drop_xi, None],
                         ids=["truncated-z", "missing-u", "zero-entry", "missing-Xi",
                              "no-record"])
def test_incomplete_record_is_not_used(whole, tmp_path, monkeypatch, caplog, damage):
    """A record with a truncated or missing checksum entry (or none at all) is an incomplete
    generation: not used, the other one is."""
    X, y, ref = whole
    store = tmp_path / "s.zarr"
    _interrupt(monkeypatch, X, y, store, block=1, written=False)
    newer = (STOP_ITER - 1) % 2
    group = _group(store)
    rec = group.attrs[f"rows_{newer}"]
    if damage is None:
        rec = None
    else:
        damage(rec)
    group.attrs[f"rows_{newer}"] = rec
    with caplog.at_level(logging.WARNING, logger="distsketch.solvers.lipschitz.admm"):
        est = _fit(X, y, store)
    warned = " | ".join(_admm_warnings(caplog))
    assert f"generation {newer}: " in warned
    assert "incomplete" in warned or "no record" in warned
    assert f"resuming from the older generation {1 - newer}" in warned
    _same_model(est, ref)
    assert est.n_passes_ == ref.n_passes_ - (STOP_ITER - 1)


@pytest.mark.slow
def test_truncated_chunk_file_is_not_used(whole, tmp_path, monkeypatch, caplog):
    """A chunk file of ``z`` cut short on disk (cannot be decoded, or decodes to other
    bytes): the generation is not used."""
    X, y, ref = whole
    store = tmp_path / "s.zarr"
    _interrupt(monkeypatch, X, y, store, block=1, written=False)
    newer = (STOP_ITER - 1) % 2
    group = _group(store, "r")
    chunk = store / "solver" / group.basename / f"z_{newer}" / "c" / "1" / "0"
    assert chunk.is_file()
    raw = chunk.read_bytes()
    chunk.write_bytes(raw[: len(raw) // 2])
    with caplog.at_level(logging.WARNING, logger="distsketch.solvers.lipschitz.admm"):
        est = _fit(X, y, store)
    warned = " | ".join(_admm_warnings(caplog))
    assert f"generation {newer} (iteration {STOP_ITER}): " in warned
    assert f"resuming from the older generation {1 - newer}" in warned
    _same_model(est, ref)


@pytest.mark.slow
def test_damage_during_the_fit_is_caught_by_the_sweep(whole, tmp_path, monkeypatch, caplog):
    """Rows damaged between two sweeps of a running fit (no resume involved): the block that
    reads them refuses them (StoreError naming the rows), and fitting again falls back to
    the generation that verifies."""
    X, y, ref = whole
    store = tmp_path / "s.zarr"
    read_gen = (STOP_ITER - 1) % 2

    def damage(count):
        if count == STOP_ITER * N_BLOCKS + 1:  # iteration 26 about to read generation 0 or 1
            _flip_bit(store, f"z_{read_gen}", 3)

    import distsketch.solvers.lipschitz.routes as rg

    original = rg.admm_block
    count = [0]

    def hooked(shared, item, ws):
        count[0] += 1
        damage(count[0])
        return original(shared, item, ws)

    with monkeypatch.context() as mp:
        mp.setattr(rg, "admm_block", hooked)
        with dask.config.set(scheduler="sync"), \
                pytest.raises(StoreError, match=r"rows 192–199 of the ADMM variable z"):
            _fit(X, y, store)
    with caplog.at_level(logging.WARNING, logger="distsketch.solvers.lipschitz.admm"):
        est = _fit(X, y, store)
    assert "block 3 (rows 192–199) of z fails its checksum" in " | ".join(_admm_warnings(caplog))
    _same_model(est, ref)


@pytest.mark.slow
def test_killed_between_record_and_solver_state(whole, tmp_path, monkeypatch, caplog):
    """Stopped after iteration 26's record but before its solver state: the record newer than
    the state is passed over (no warning), the fit resumes at iteration 25 and ends bitwise
    equal."""
    import distsketch.solvers.lipschitz.admm as admm

    X, y, ref = whole
    store = tmp_path / "s.zarr"
    save = admm._save

    def stopping(state, v):
        if v["n_iter"] == STOP_ITER + 1:
            raise _Stop
        save(state, v)

    with monkeypatch.context() as mp:
        mp.setattr(admm, "_save", stopping)
        with pytest.raises(_Stop):
            _fit(X, y, store)
    group = _group(store, "r")
    assert group.attrs["state"]["n_iter"] == STOP_ITER
    assert group.attrs[f"rows_{STOP_ITER % 2}"]["iteration"] == STOP_ITER
    with caplog.at_level(logging.INFO, logger="distsketch.solvers.lipschitz.admm"):
        est = _fit(X, y, store)
    assert _admm_warnings(caplog) == []
    assert any("newer than the solver state" in r.getMessage() for r in caplog.records)
    _same_model(est, ref)
    assert est.n_passes_ == ref.n_passes_ - STOP_ITER
