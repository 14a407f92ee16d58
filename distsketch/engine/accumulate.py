"""The streaming pass: one block map-reduce over the training rows.

For each row block ``I`` (docs/design/engine.md, "The streaming pass") a task computes::

    C_I = k_X(X_I, X_J) R_Xmixᵀ          written to pass/C[I]
    D_I = k_Y(Y_I, Y_JY) R_Ymixᵀ         written to pass/D[I]      (structured outputs)

and the partial sums the model asked for, each a *sum term* of
:data:`~distsketch.engine.sums.SUM_TERMS`::

    G += C_Iᵀ C_I     B += R_X[:, I] C_I     b += C_Iᵀ Y_I
    s += C_Iᵀ 1       y1 += Y_Iᵀ 1           (intercepts)
    M += D_Iᵀ C_I     E += R_Y[:, I] D_I
    C, D, Y           the row blocks themselves, placed (an exact side: n × m)
    U                 unique output rows and their first training row

A model declares the names it needs (``SISOKR`` with two sketched sides: ``G, B, M, E, U``;
``SketchedFeatures``: ``B``); a new sum is one function in :mod:`distsketch.engine.sums`
and one name in a model.

Blocks are computed in the block dtype (float32 by default: kernel values rounded to
float32, exponentials evaluated in float32) and partial sums are float64 sums of exactly
those values, so the store holds what the sums were made of; the store write runs in an
I/O thread beside them. A block read back from the store on resume therefore contributes
exactly what it contributed the first time, for either dtype (bitwise-identical resume),
and ``store=None`` fits the same model. The reduction is :func:`distsketch.engine.map_reduce`:
a tree whose shape depends only on the number of blocks, in block order, so the sums do not
depend on the scheduler or the number of workers. Block math runs in the fit's compute
backend (``EngineOptions.backend``); partial sums come back to the host.

This module holds the block task (compute or read back, store and sum one row block) and
the driver loop (:func:`run_pass`: retries after lost workers, resume from the stored
blocks, :func:`verify_data`). The plan and the sums are in :mod:`distsketch.engine.sums`;
a whole fit's pass (sketches, landmarks, store, block size) is
:func:`distsketch.engine.fitpass.fit_pass`.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import dask
import numpy as np

from .._hashing import checksum, data_fingerprint
from ..backends.base import get_backend
from ..options import start_idle_window
from .chunkwrite import write_rows
from .mapreduce import map_blocks, map_reduce, row_blocks, share
from .rows import RowSource, check_finite_block
from .schedulers import WorkersLost, compute, distributed_client, workers_back
from .store import CSUM, DSUM, RECORD, TOKEN, XFP, YFP, read_records
from .storeguard import DataChanged, StoreError
from .sums import (
    PASS_SUMS,
    BlockView,
    HeldBlocks,
    PassPlan,
    RowSparse,
    RowStack,
    sum_term,
    width_of,
)

__all__ = ["run_pass", "verify_data", "BlockRecords"]

logger = logging.getLogger(__name__)


def _float64(block, ws, name: str, xp):
    """``block`` as float64: itself, or converted into a reused work array."""
    if ws is None or getattr(block, "dtype", None) == np.float64:
        return xp.asarray(block, dtype=np.float64)
    out = ws.get(name, block.shape, np.float64, xp)
    xp.copyto(out, block)
    return out


def _block_sums(plan: PassPlan, i: int, C, D, yb, ws, width: int = 0, xb=None) -> dict:
    """Partial sums of block ``i`` from its blocks ``C`` (and ``D``), in float64: the sums of
    the input width ``width`` (0: the fit's own kernel; ``j``: ``plan.x_widths[j − 1]``, the
    sums named ``"…~j"``)."""
    be = get_backend(plan.backend)
    s, e = plan.rows(i)
    C = _float64(C, ws, "C64", be.xp)
    if D is not None:
        D = _float64(D, ws, "D64", be.xp)
    view = BlockView(plan, s + plan.row_offset, e + plan.row_offset, C, D, yb, be, xb)
    return {name: sum_term(name).func(view) for name in plan.sums if width_of(name)[1] == width}


def _width_sums(plan: PassPlan, i: int, xb, yb, D, block, ws) -> dict:
    """The sums of every further input width (:attr:`PassPlan.x_widths`) of block ``i``, each
    from its own block ``C_I^{(j)}`` computed from the input rows ``xb`` into one reused
    buffer (the sums are taken before the next width overwrites it) and the block's output
    side ``D`` (the same for every width)."""
    out: dict = {}
    for j, fmap in enumerate(plan.x_widths, start=1):
        Cj = fmap.block(xb, dtype=plan.dtype, out=block("C~", fmap.width))
        # the width's own sketch (pre-whitened for its kernel) for the sums that use it (B)
        out.update(_block_sums(replace(plan, x=fmap), i, Cj, D, yb, ws, width=j))
    return out


class BlockRecords:
    """The records of the blocks a pass used, ``{i: (token, x, y, c, d)}``: ``+=`` merges."""

    def __init__(self, records: dict):
        self.records = records

    def copy(self) -> "BlockRecords":
        return BlockRecords(dict(self.records))

    def __iadd__(self, other: "BlockRecords") -> "BlockRecords":
        self.records.update(other.records)
        return self


def _fingerprints(plan: PassPlan, xb, yb) -> tuple[int, int]:
    return data_fingerprint(xb), (0 if yb is None else data_fingerprint(yb))


def _stored_block(plan: PassPlan, i: int, record: tuple, xfp: int, yfp: int):
    """Blocks ``C`` (and ``D``) of block ``i`` read back from the store, or None when they fail
    their checksums (damaged, deleted or truncated chunks)."""
    s, e = plan.rows(i)
    _stored_block_identity(plan, i, record, xfp, yfp)
    try:
        C = plan.C[s:e]
        D = plan.D[s:e] if plan.needs_d else None
        if checksum(C) == record[CSUM] and (D is None or checksum(D) == record[DSUM]):
            return C, D
    except Exception as exc:  # a truncated or unreadable chunk
        logger.debug("store %s: block %d unreadable: %s", plan.location, i, exc)
    logger.warning("store %s: block %d (rows %d–%d) fails its checksum (damaged or deleted); "
                   "recomputing it", plan.location, i, s, e - 1)
    return None


def _pass_block(plan: PassPlan, item: tuple, ws) -> dict:
    """The block function of the pass: compute (or read back), store and sum one row block.

    ``item`` is ``(i, record, x, y)``: the block's input rows and, for a block an earlier run
    stored, its record (fit token, data fingerprints, checksums). A stored block is used when
    its inputs have the recorded fingerprints (else the data changed: refused) and its ``C``,
    ``D`` the recorded checksums (else it is recomputed). Block arrays come from the task's
    workspace (reused by the blocks of a fused task) unless the sums keep the blocks.
    """
    i, record, xb, yb = item
    if plan.keeps_blocks:
        ws = None
    be = get_backend(plan.backend)
    s, e = plan.rows(i)

    def block(name: str, m: int):
        shape = (e - s, m)
        return be.xp.empty(shape, dtype=plan.dtype) if ws is None else ws.get(
            name, shape, plan.dtype, be.xp)

    xfp, yfp = _fingerprints(plan, xb, yb) if plan.records is not None else (0, 0)
    if record is not None:
        stored = _stored_block(plan, i, record, xfp, yfp)
        if stored is not None:
            C, D = stored
            sums = _block_sums(plan, i, be.asarray(C), None if D is None else be.asarray(D),
                               yb, ws, xb=xb)
            if plan.x_widths:
                sums.update(_width_sums(plan, i, xb, yb, None if D is None else be.asarray(D),
                                        block, ws))
            sums["_records"] = BlockRecords({i: tuple(int(v) for v in record)})
            return sums

    if plan.check_x:
        check_finite_block(xb, argument="X", start=s)
    if plan.check_y and yb is not None:
        check_finite_block(yb, argument="Y", start=s)
    C = plan.x.block(xb, dtype=plan.dtype, out=block("C", plan.x_sketch.m))
    D = None
    if plan.needs_d:
        D = plan.y.block(yb, dtype=plan.dtype, out=block("D", plan.y_sketch.m))
    # the store writes (and their checksums) run in an I/O thread beside the partial sums
    # (both only read the blocks); the task ends when its blocks and record are written
    written = None
    if plan.records is not None:
        written = _io_pool().submit(_write_block, plan, i, be.to_numpy(C),
                                    None if D is None else be.to_numpy(D), xfp, yfp)
    sums = _block_sums(plan, i, C, D, yb, ws, xb=xb)
    if plan.x_widths:
        sums.update(_width_sums(plan, i, xb, yb, D, block, ws))
    if written is not None:
        sums["_records"] = BlockRecords({i: written.result()})  # re-raises a failed write
    return sums


def _write_block(plan: PassPlan, i: int, C: np.ndarray, D: np.ndarray | None, xfp: int,
                 yfp: int) -> tuple:
    """Write block ``i`` of ``C`` (and ``D``), then its record (I/O thread); returns it."""
    s, e = plan.rows(i)
    try:
        write_rows(plan.C, s, C, direct=plan.direct_io)
        if plan.D is not None and D is not None:
            write_rows(plan.D, s, D, direct=plan.direct_io)
        stored_dtype = np.dtype(plan.C.dtype)
        record = (plan.token, xfp, yfp, checksum(C.astype(stored_dtype, copy=False)),
                  0 if D is None else checksum(D.astype(stored_dtype, copy=False)))
        # only after both blocks are fully written: the record is what marks the block done
        plan.records[i] = np.asarray(record, dtype=np.uint64)
    except OSError as exc:
        raise OSError(exc.errno, f"store {plan.location!r}: writing block {i} (rows {s}–{e - 1}) "
                                 f"failed: {exc.strerror or exc}") from exc
    return record


_IO_POOL: ThreadPoolExecutor | None = None
_IO_POOL_LOCK = threading.Lock()


def _io_pool() -> ThreadPoolExecutor:
    """This process's threads for store writes (created on first use, in any worker)."""
    global _IO_POOL
    with _IO_POOL_LOCK:
        if _IO_POOL is None:
            _IO_POOL = ThreadPoolExecutor(max_workers=4, thread_name_prefix="distsketch-io")
        return _IO_POOL


# --------------------------------------------------------------------------- orchestration


def run_pass(plan: PassPlan, x: RowSource, y: RowSource | None, *, split_every: int,
             progress: bool = False) -> dict:
    """Run (or resume) the pass over all row blocks and return the reduced sums.

    Blocks recorded in the store are read back instead of recomputed, after checking that
    their input rows are the recorded ones (one read of the data) and that the blocks pass
    their checksums (damaged ones are recomputed). At the end, every block's record in the
    store must be the one this fit wrote or verified: a block rewritten meanwhile by another
    writer (orphaned workers of an earlier fit) is refused.

    Returns
    -------
    dict
        The sums of ``plan.sums``, float64: ``C``, ``D``, ``Y`` assembled (n × ·), ``B``,
        ``E`` dense (m × m), ``U`` as (unique rows, first-occurrence indices), ``held``
        the blocks of ``C`` in row order (float64 copies of the block-dtype values).
    """
    client = distributed_client()
    retries = int(dask.config.get("distsketch.pass-retries", 3))
    attempt, lost = 0, None

    def retry(exc: BaseException) -> bool:
        """Count one more attempt; whether to make it (the cluster has workers again)."""
        nonlocal attempt
        attempt += 1
        if client is None or attempt > retries or not workers_back(client):
            return False
        logger.warning("%s; resending the in-memory blocks and resuming from the blocks "
                       "stored so far (attempt %d of %d)", exc, attempt, retries)
        return True

    while True:
        try:
            items = _pass_items(plan, x, y, client)
            plan_ref = share(plan, name="pass-plan", client=client)
        except Exception as exc:
            if lost is None:
                raise
            # workers lost while the blocks are sent again (a second worker killed after the
            # first loss was seen): the same recovery, within the same retry budget
            if not retry(lost):
                raise lost from exc
            continue
        start = time.perf_counter()  # the pass proper: the inputs are on the workers by now
        try:
            result = map_reduce(_pass_block, items, reducer=PASS_SUMS, shared=plan_ref,
                                split_every=split_every, fuse=True, name="pass",
                                progress=progress)
            break
        except WorkersLost as exc:
            lost = exc
            if not retry(exc):
                raise
    seconds = time.perf_counter() - start
    if client is not None:  # the reduction ran on the workers (else PassSums.own started it)
        start_idle_window()  # the driver's BLAS-thread sample runs from here (options.py)
    logger.info("pass: %d rows in %.3f s (%.0f rows/s)", plan.n, seconds, plan.n / seconds,
                extra={"pass_seconds": seconds, "pass_rows": plan.n})
    used = result.pop("_records", None)
    if plan.records is not None:
        _check_records(plan, used.records)
    for key, value in result.items():
        if isinstance(value, RowStack):
            result[key] = value.assemble(plan.n)
        elif isinstance(value, RowSparse):
            result[key] = value.toarray()
        elif isinstance(value, HeldBlocks):
            result[key] = value.ordered()
    return result


def _pass_items(plan: PassPlan, x: RowSource, y: RowSource | None, client) -> list:
    """One item per block: ``(i, record or None, x rows, y rows)`` (records read now: a
    retried pass resumes from the blocks stored by the attempt before)."""
    records = (np.zeros((plan.n_blocks, len(RECORD)), dtype=np.uint64) if plan.records is None
               else read_records(plan.records, location=plan.location))
    done = records[:, TOKEN] != 0
    x_blocks = row_blocks(x, plan.block_rows, client=client)
    y_blocks = (row_blocks(y, plan.block_rows, client=client) if y is not None
                else [None] * plan.n_blocks)
    logger.info("pass: %d blocks (%d already in the store), %d rows per block",
                plan.n_blocks, int(done.sum()), plan.block_rows)
    return [(i, tuple(int(v) for v in records[i]) if done[i] else None, x_blocks[i], y_blocks[i])
            for i in range(plan.n_blocks)]


def _check_records(plan: PassPlan, used: dict) -> None:
    """Every block's record in the store is the one this pass wrote or verified."""
    now = read_records(plan.records, location=plan.location)
    for i in range(plan.n_blocks):
        if tuple(int(v) for v in now[i]) != used.get(i):
            s, e = plan.rows(i)
            raise StoreError(
                f"store {plan.location!r}: block {i} (rows {s}–{e - 1}) was rewritten by another "
                f"writer during this fit (orphaned workers of an earlier fit?); fit again to "
                f"recompute it")


def verify_data(plan: PassPlan, x: RowSource, y: RowSource | None, *,
                progress: bool = False) -> list[int]:
    """Check that the data are those a complete pass was computed from: every block's input
    rows have their recorded fingerprints (one read of the data, no kernel evaluation).

    Returns the blocks that have no record (lost or unreadable: a damaged store), whose data
    cannot be checked: the caller computes them again."""
    records = read_records(plan.records, location=plan.location)
    client = distributed_client()
    x_blocks = row_blocks(x, plan.block_rows, client=client)
    y_blocks = (row_blocks(y, plan.block_rows, client=client) if y is not None
                else [None] * plan.n_blocks)
    items = [(i, x_blocks[i], y_blocks[i]) for i in range(plan.n_blocks)]
    found = compute(map_blocks(_fingerprint_block, items, name="verify-data"),
                    progress=progress, what="verify data")
    missing = []
    for i, (xfp, yfp) in enumerate(found):
        if records[i, TOKEN] == 0:
            missing.append(i)
        else:
            _stored_block_identity(plan, i, tuple(int(v) for v in records[i]), xfp, yfp)
    return missing


def _fingerprint_block(shared, item, ws) -> tuple[int, int]:
    i, xb, yb = item
    return data_fingerprint(xb), (0 if yb is None else data_fingerprint(yb))


def _stored_block_identity(plan: PassPlan, i: int, record: tuple, xfp: int, yfp: int) -> None:
    """Refuse (:class:`DataChanged`) block ``i`` of a stored pass (``record``: written) when its
    input rows do not have the recorded fingerprints."""
    if (xfp, yfp) != (record[XFP], record[YFP]):
        s, e = plan.rows(i)
        which = "X" if xfp != record[XFP] else "Y"
        raise DataChanged(
            f"store {plan.location!r}: the training data differ from those the stored pass was "
            f"computed from ({which}, rows {s}–{e - 1}, block {i}); fit on the same data, or "
            f"use EngineOptions(overwrite=True) or a new store path")
