"""Row blocks written as whole zarr chunks: O_DIRECT on a local store, the store's ``set``
elsewhere.

:func:`write_rows` is how the pass (and the candidate store) writes a row block that is exactly
one chunk of an uncompressed array: one object handed to the store instead of zarr's codec
pipeline, the stored bytes those zarr's own path would store (``benchmarks/ENGINE.md``,
"pass"). Any other write takes zarr's ordinary path.
"""

from __future__ import annotations

import errno
import logging
import mmap
import os
import threading
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import zarr
from zarr.buffer import default_buffer_prototype
from zarr.codecs import BytesCodec
from zarr.storage import LocalStore

try:  # zarr's public synchronous store protocol (zarr 3.1); older stores go through ``set``
    from zarr.abc.store import SupportsSetSync
    from zarr.storage import GpuMemoryStore
except ImportError:  # pragma: no cover - depends on the installed zarr
    SupportsSetSync = GpuMemoryStore = None

if TYPE_CHECKING:
    from zarr.abc.buffer import Buffer
    from zarr.abc.store import Store

__all__ = ["write_rows"]

logger = logging.getLogger(__name__)


#: Alignment of O_DIRECT buffers, file offsets and lengths (a page: at least the logical
#: block size of any local disk).
_DIRECT_ALIGN = 4096
_direct_local = threading.local()
#: Store roots where O_DIRECT was refused (e.g. tmpfs before Linux 6.6): written through the
#: page cache.
_NO_DIRECT: set[str] = set()


def _aligned_buffer(nbytes: int) -> mmap.mmap:
    """This thread's page-aligned scratch buffer of at least ``nbytes`` (kept for reuse)."""
    buf = getattr(_direct_local, "buffer", None)
    if buf is None or len(buf) < nbytes:
        buf = mmap.mmap(-1, nbytes)  # anonymous mappings start on a page boundary
        _direct_local.buffer = buf
    return buf


def _direct_put(path: Path, block: np.ndarray, dtype: np.dtype) -> bool:
    """Write ``block`` as little-endian ``dtype`` bytes to ``path``, bypassing the page cache.

    O_DIRECT hands the buffer to the disk by DMA, so a write costs little of this
    process's CPU (the copy into the aligned buffer included), where a buffered write of
    a new file costs the CPU of allocating and filling page-cache pages; see the "pass"
    section of ``benchmarks/ENGINE.md`` for measurements.
    The block is converted into a page-aligned buffer (unless it is aligned already),
    padded to a whole page and truncated back, and written to a temporary file renamed
    into place, as zarr's local store does. Returns False where the file system refuses
    O_DIRECT (nothing is left behind); the caller then writes through the page cache.
    """
    size = block.size * dtype.itemsize
    padded = -(-size // _DIRECT_ALIGN) * _DIRECT_ALIGN
    if (block.dtype == dtype and block.flags.c_contiguous and size == padded
            and block.ctypes.data % _DIRECT_ALIGN == 0):
        view = memoryview(block).cast("B")
    else:
        buf = _aligned_buffer(padded)
        np.copyto(np.frombuffer(buf, dtype=dtype, count=block.size).reshape(block.shape),
                  block, casting="same_kind")
        if padded > size:
            buf[size:padded] = bytes(padded - size)
        view = memoryview(buf)[:padded]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{uuid.uuid4().hex}.partial")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_DIRECT | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(tmp, flags, 0o666)
    except OSError as exc:
        if exc.errno in (errno.EINVAL, errno.EOPNOTSUPP):
            return False
        raise
    try:
        try:
            done = 0
            while done < padded:
                done += os.write(fd, view[done:])
        except OSError as exc:
            if exc.errno != errno.EINVAL:
                raise
            return False  # finally removes the temporary file
        if padded > size:
            os.ftruncate(fd, size)
        os.close(fd)
        fd = -1
        os.replace(tmp, path)
        tmp = None
        return True
    finally:
        if fd >= 0:
            os.close(fd)
        if tmp is not None:
            tmp.unlink(missing_ok=True)


def write_rows(array: zarr.Array, start: int, block: np.ndarray, *, direct: bool = True) -> None:
    """``array[start:start + len(block)] = block``, one whole chunk written without copies.

    The pass writes row blocks that are exactly one chunk of an uncompressed array
    (``compressors=None``: the codec chain is the little-endian bytes codec alone), so
    the chunk's encoded form is the block's own memory, converted to the array's dtype.
    Such a block goes to the store as one object instead of through zarr's codec
    pipeline, which copies it twice first (much slower for large blocks; see the "pass"
    section of ``benchmarks/ENGINE.md``): on a local store, by default, as one O_DIRECT
    file write (:func:`_direct_put`; ``direct`` False, or a file system without O_DIRECT,
    writes through the page cache), elsewhere with the store's ``set``
    (:func:`_store_set`). Any other write (a partial last chunk, a compressed, filtered,
    sharded, big-endian or zarr v2 array) takes zarr's ordinary path. Either way the
    stored bytes are the same.
    """
    rows, cols = array.chunks
    index = start // rows
    # the codec chain is the little-endian bytes codec alone (a zarr v2 array has no
    # serializer; a sharded one reports its inner serializer, hence the shards test)
    serializer = array.serializer
    chunked = (
        start % rows == 0
        and cols == array.shape[1]
        and block.shape == (rows, cols)
        and isinstance(serializer, BytesCodec)
        and getattr(serializer.endian, "value", None) == "little"
        and not array.filters
        and not array.compressors
        and array.shards is None
    )
    if not chunked:
        array[start:start + len(block)] = block
        return
    dtype = np.dtype(array.dtype).newbyteorder("<")
    store = array.store
    prefix = array.path
    key = array.metadata.encode_chunk_key((index, 0))
    key = f"{prefix}/{key}" if prefix else key
    if (direct and hasattr(os, "O_DIRECT") and isinstance(store, LocalStore)
            and not store.read_only and str(store.root) not in _NO_DIRECT):
        if _direct_put(store.root / key, block, dtype):
            return
        logger.debug("store %s: O_DIRECT refused, writing through the page cache", store.root)
        _NO_DIRECT.add(str(store.root))
    data = np.ascontiguousarray(block, dtype=dtype)
    buffer = default_buffer_prototype().buffer.from_bytes(memoryview(data).cast("B"))
    _store_set(store, key, buffer)


def _store_set(store: Store, key: str, buffer: Buffer) -> None:
    """``store.set(key, buffer)`` from synchronous code (any thread, a dask worker's included).

    Stores with zarr's public synchronous API (:class:`zarr.abc.store.SupportsSetSync`:
    the local and memory stores) are written with ``set_sync``, which needs no event
    loop. ``GpuMemoryStore`` inherits ``MemoryStore.set_sync`` without the conversion to
    a GPU buffer that its ``set`` makes, so it goes through ``set`` like other stores.
    """
    if (SupportsSetSync is not None and isinstance(store, SupportsSetSync)
            and not isinstance(store, GpuMemoryStore)):
        store.set_sync(key, buffer)
    else:
        _run_on_zarr_loop(store.set(key, buffer))


def _run_on_zarr_loop(coro: Any) -> Any:
    """Run a store coroutine to completion on zarr's own event loop; returns its result.

    The one zarr internal used here: zarr (3.1) has no public way to run a coroutine of
    an async-only store (fsspec, obstore, zip, wrapper stores) from synchronous code.
    ``asyncio.run`` is no substitute: such stores may hold clients bound to zarr's loop
    (its I/O thread), and it fails in a thread whose event loop is running. zarr's
    ``sync`` hands the coroutine to that loop and blocks this thread until it finishes,
    from any thread but the loop's own, as zarr's synchronous API does itself.
    """
    from zarr.core.sync import sync

    return sync(coro)
