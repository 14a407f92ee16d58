"""Appended batches in a kept store: each ``partial_fit`` a pass of its own beside the fit's.

Layout (inside the fit's store, :mod:`distsketch.engine.store`)::

    <store>/                         attrs["distsketch"]["batches"]: one record per batch,
                                     {batch, rows, digest, added, status} (status "complete",
                                     "pending" or "forgotten"; batch 0 is the fit's pass)
        batches/<k>/                 attrs["distsketch"] = {status, pass: the batch's config,
                                                            sums: {name: checksum}}
            pass/C      (rows, m_X)  the batch's blocks ``C_I = k(X_I, X_J) R_mixᵀ``
            pass/D      (rows, m_Y)  ``D_I`` (sketched structured outputs only)
            pass/blocks              per-block records (:data:`~distsketch.engine.store.RECORD`)
            sums/<name>              the batch's own sums (float64; the digest uint64),
                                     checksummed

A batch group is a :class:`~distsketch.engine.store.FitStore` of its own (the root's lock
covers it): its blocks, records and sums are written, resumed and verified exactly as the
fit's pass. Its configuration (:func:`batch_config`) names the batch number, the training-row
position of its first row, its rows, their digest and the block layout; its status moves
``"pass"`` → ``"pass-complete"``. The batch's rows are identified by their digest
(:func:`batch_digest`) before anything is written; the earlier batches' data are never read.
The model saved in the store refers to the appended batches' sums where they are
(:func:`batch_reference`: the group, its first row's position and the sums' checksums) rather
than copying them, so saving it again after an append writes the same bytes whatever the
number of batches; loading reads them back checksum-verified (:func:`referenced_sums`). The model side — which batch is held, the re-solve, the
saved model — is :mod:`distsketch.models.growing`'s.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

import numpy as np
import zarr

from .._hashing import rows_digest
from .accumulate import run_pass
from .batches import local_sums
from .keptrows import keep_batch_rows
from .mapreduce import map_blocks, row_blocks
from .rows import RowSource, check_finite_block
from .schedulers import compute, distributed_client
from .store import FitStore, open_fit_store
from .storeguard import DataChanged, StoreError
from .sums import PassPlan

__all__ = ["BATCHES", "batch_digest", "batch_config", "batch_group", "stored_batch",
           "held_in_store", "record_batches", "drop_batch_group", "batch_groups", "stored_sums",
           "batch_reference", "referenced_sums", "kept_batch"]

logger = logging.getLogger(__name__)

#: The group of a store that holds the appended batches, ``batches/<k>``.
BATCHES = "batches"
_MODEL_ATTR = "distsketch_model"


def _digest_block(shared, item, ws) -> int:
    """One row block's digest (:func:`~distsketch._hashing.rows_digest`), its values checked
    finite first where the input is lazy (``shared``: the plan)."""
    start, xb, yb = item
    if shared.check_x:
        check_finite_block(xb, argument="X", start=start)
    if shared.check_y and yb is not None:
        check_finite_block(yb, argument="Y", start=start)
    return int(rows_digest(xb, yb))


def batch_digest(plan: PassPlan, X: RowSource, Y: RowSource | None, *,
                 progress: bool = False) -> str:
    """The digest of a batch's rows (16 hex digits): ``Σ_blocks rows_digest(X_I, Y_I) mod 2⁶⁴``,
    the order-free sum the pass computes as its ``"digest"`` sum, here by one read of the rows
    without a kernel block (and a lazy input's NaN refused), before anything is written."""
    client = distributed_client()
    x_blocks = row_blocks(X, plan.block_rows, client=client)
    y_blocks = (row_blocks(Y, plan.block_rows, client=client) if Y is not None
                else [None] * plan.n_blocks)
    items = [(plan.rows(i)[0], x_blocks[i], y_blocks[i]) for i in range(plan.n_blocks)]
    found = compute(map_blocks(_digest_block, items, shared=plan, name="batch-digest"),
                    progress=progress, what="batch digest")
    return f"{sum(int(d) for d in found) % 2**64:016x}"


def batch_config(plan: PassPlan, *, batch: int, digest: str) -> dict:
    """A batch's configuration as its group records it: a stored batch is resumed only under
    the same one (the fields :meth:`~distsketch.engine.store.FitStore.reset` reads, and the
    batch's number, first position, digest and sums)."""
    return {"batch": int(batch), "offset": int(plan.row_offset), "n": int(plan.n),
            "rows": int(plan.n), "digest": digest, "block_rows": int(plan.block_rows),
            "block_dtype": np.dtype(plan.dtype).name, "m_x": int(plan.x_sketch.m),
            "m_y": int(plan.y_sketch.m) if plan.needs_d else None,
            "sums": list(plan.sums)}


def batch_group(fs: FitStore, batch: int) -> FitStore:
    """The :class:`FitStore` of batch ``batch``'s group (created empty if absent), under the
    root's lock."""
    group = fs.group.require_group(BATCHES).require_group(str(int(batch)))
    sub = FitStore(group, location=f"{fs.location}/{BATCHES}/{int(batch)}", temporary=False)
    sub.token = fs.token
    return sub


def stored_batch(fs: FitStore, plan: PassPlan, X: RowSource, Y: RowSource | None, *,
                 batch: int, digest: str, split_every: int, progress: bool = False) -> dict:
    """Run, resume or reuse the pass of batch ``batch`` in its group; its sums.

    The group of a batch the saved model does not hold (the caller's guarantee) is written
    afresh, or resumed where it holds the same configuration: blocks with valid records are
    read back (their rows' fingerprints checked, their checksums verified), the others
    computed; a complete batch's sums are read back, checksum-verified. An incomplete batch
    of other rows or another layout (a killed append) is replaced, with a warning.

    Returns
    -------
    dict
        The batch's sums, as :func:`~distsketch.engine.accumulate.run_pass` returns them.
    """
    config = batch_config(plan, batch=batch, digest=digest)
    sub = batch_group(fs, batch)
    previous = sub.meta_or_none()
    if previous is None or (previous and previous.get("pass") != config):
        logger.warning("store %s: batch %d holds an unfinished append of other rows or "
                       "another layout (%s rows at position %s); replacing it", fs.location,
                       batch, (previous or {}).get("pass", {}).get("rows", "?"),
                       (previous or {}).get("pass", {}).get("offset", "?"))
    sub.prepare_pass(config, overwrite=True)
    if sub.pass_complete:
        try:
            sums = sub.read_sums()
            if all(s in sums for s in plan.sums):
                logger.info("store %s: batch %d complete already, reusing its sums",
                            fs.location, batch)
                return sums
        except StoreError as exc:
            logger.warning("%s; recomputing batch %d from its stored blocks", exc, batch)
        sub.mark("pass")

    def run():
        C, D, records = sub.pass_arrays()
        stored = replace(plan, C=C, D=D, records=records, token=sub.token,
                         location=sub.location)
        return run_pass(stored, X, Y, split_every=split_every, progress=progress)

    try:
        sums = run()
    except DataChanged as exc:  # an unfinished batch of other rows with the same digest
        logger.warning("%s; replacing the unfinished batch %d", exc, batch)
        sub.reset(config)
        sums = run()
    found = f"{int(np.asarray(sums['digest']).reshape(-1)[0]):016x}"
    if found != digest:
        raise StoreError(f"store {fs.location!r}: the rows of batch {batch} changed while it "
                         f"was appended (digest {found}, {digest} before the pass); append "
                         f"them again")
    sub.write_sums(sums)
    return sums


def kept_batch(fs: FitStore, plan: PassPlan, X: RowSource, Y: RowSource | None, *,
               batch: int, digest: str, names: tuple, split_every: int = 4,
               progress: bool = False) -> dict:
    """Batch ``batch`` of a route whose iterations recompute every row's kernel blocks (PCG):
    its group keeps the rows ``names`` (:func:`~distsketch.engine.keptrows.keep_batch_rows`)
    and the batch's sums — their digest, and where the plan has others (SISOKR's ``M``,
    ``E``, ``U``) those of a pass whose blocks are not stored. Written afresh each time (a
    killed append writes it again).

    Returns
    -------
    dict
        The batch's sums, as :func:`~distsketch.engine.accumulate.run_pass` gives them.
    """
    config = {**batch_config(plan, batch=batch, digest=digest), "m_x": None, "m_y": None,
              "kept": list(names)}
    sub = batch_group(fs, batch)
    sub.reset(config)
    found = keep_batch_rows(sub.group, tuple(names), X, Y, block_rows=plan.block_rows)
    sums = {"digest": np.array([int(digest, 16)], dtype=np.uint64)}
    if any(s != "digest" for s in plan.sums):
        sums = run_pass(plan, X, Y, split_every=split_every, progress=progress)
        found = f"{int(np.asarray(sums['digest']).reshape(-1)[0]):016x}"
    if found != digest:
        raise StoreError(f"store {fs.location!r}: the rows of batch {batch} changed while it "
                         f"was appended (digest {found}, {digest} before); append them again")
    sub.write_sums(sums)
    return sums


def held_in_store(fs: FitStore) -> list[dict] | None:
    """The batches the store's saved model holds (its ``growth`` state), or None where the
    store holds no saved model that took batches."""
    try:
        if fs.meta.get("status") != "solved" or "model" not in fs.group:
            return None
        state = dict(fs.group["model"].attrs.get(_MODEL_ATTR, {})).get("state", {})
        growth = state.get("growth") if isinstance(state, dict) else None
    except (KeyError, TypeError, AttributeError):
        return None
    batches = growth.get("batches") if isinstance(growth, dict) else None
    return [dict(b) for b in batches] if isinstance(batches, list) else None


def record_batches(fs: FitStore, held: list[dict], *, pending: dict | None = None,
                   forgotten: dict | None = None, fresh: bool = False) -> None:
    """Write the store's batch list: the batches recorded forgotten before (``fresh``: none),
    ``forgotten``, the ``held`` ones (complete) and ``pending`` (an append under way)."""
    before = [] if fresh else fs.meta.get("batches") or []
    entries = {int(b["batch"]): dict(b) for b in before
               if isinstance(b, dict) and b.get("status") == "forgotten"}
    if forgotten is not None:
        entries[int(forgotten["batch"])] = {**forgotten, "status": "forgotten"}
    for b in held:
        entries[int(b["batch"])] = {**b, "status": "complete"}
    if pending is not None:
        entries[int(pending["batch"])] = {**pending, "status": "pending"}
    fs.update_meta(batches=[entries[k] for k in sorted(entries)])


def drop_batch_group(fs: FitStore, batch: int) -> bool:
    """Delete batch ``batch``'s group (written by distsketch: a forgotten or unfinished
    append); whether there was one."""
    try:
        group = fs.group[BATCHES]
    except KeyError:
        return False
    if not isinstance(group, zarr.Group) or str(int(batch)) not in group:
        return False
    del group[str(int(batch))]
    return True


def batch_groups(fs: FitStore) -> list[int]:
    """The batch numbers that have a group in the store."""
    try:
        group = fs.group[BATCHES]
    except KeyError:
        return []
    return sorted(int(k) for k in group.keys() if k.isdigit())


def stored_sums(fs: FitStore, batch: int) -> dict[str, Any]:
    """Batch ``batch``'s sums read back from its group, checksum-verified."""
    try:
        group = fs.group[f"{BATCHES}/{int(batch)}"]
    except KeyError:
        raise StoreError(f"store {fs.location!r}: holds no batch {batch}") from None
    return FitStore(group, location=f"{fs.location}/{BATCHES}/{int(batch)}",
                    temporary=False).read_sums()



def batch_reference(fs: FitStore, batch: int) -> dict:
    """What a model saved in the store records of batch ``batch``'s sums instead of copying
    them: the batch, the position of its first row and the checksums its group recorded."""
    sub = FitStore(fs.group[f"{BATCHES}/{int(batch)}"],
                   location=f"{fs.location}/{BATCHES}/{int(batch)}", temporary=False)
    meta = sub.meta
    return {"batch": int(batch), "offset": int(meta["pass"]["offset"]),
            "sums": dict(meta["sums"])}


def referenced_sums(location: str, ref: dict) -> dict[str, Any]:
    """The sums of the batch a saved model refers to (:func:`batch_reference`), read from the
    store at ``location`` (read-only, checksum-verified) as the model holds them: without the
    digest, ``U``'s positions counted from the batch's first row.

    Raises
    ------
    StoreError
        If the batch's group is gone, or its sums are not those the model recorded.
    """
    k = int(ref["batch"])
    fs = open_fit_store(location)
    try:
        group = fs.group[f"{BATCHES}/{k}"]
    except KeyError:
        raise StoreError(f"store {location!r}: the saved model's batch {k} has no group "
                         f"({BATCHES}/{k}) in the store; the store is damaged: fit again"
                         ) from None
    sub = FitStore(group, location=f"{location}/{BATCHES}/{k}", temporary=False)
    meta = sub.meta_or_none() or {}
    if meta.get("sums") != ref["sums"] or (meta.get("pass") or {}).get("offset") != ref["offset"]:
        raise StoreError(f"store {location!r}: batch {k}'s stored sums are not those the saved "
                         f"model recorded (changed or damaged); load a store as it was saved, "
                         f"or fit again")
    sums = sub.read_sums()
    sums.pop("digest", None)
    return local_sums(sums, int(ref["offset"]))
