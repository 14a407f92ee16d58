"""Store writes: the direct whole-chunk path stores exactly what zarr's own path stores."""

import errno
import mmap
import os

import numpy as np
import pytest
import zarr

from distsketch.engine import chunkwrite
from distsketch.engine.chunkwrite import write_rows


@pytest.mark.parametrize("direct", [True, False])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("compressed", [False, True])
def test_write_rows_matches_zarr_setitem(tmp_path, dtype, compressed, direct):
    rng = np.random.default_rng(0)
    kw = {} if compressed else {"compressors": None}
    root = zarr.open_group(tmp_path / "g.zarr", mode="w")
    target = root.require_group("pass").create_array("C", shape=(10, 3), chunks=(4, 3), dtype=dtype,
                                                      fill_value=0.0, **kw)
    plain = zarr.create_array(tmp_path / "plain.zarr", shape=(10, 3), chunks=(4, 3), dtype=dtype,
                              fill_value=0.0, **kw)
    for start in (4, 0, 8):  # out of order, last chunk partial
        block = rng.standard_normal((min(4, 10 - start), 3)).astype(dtype)
        write_rows(target, start, block, direct=direct)
        plain[start:start + len(block)] = block
    reread = zarr.open_group(tmp_path / "g.zarr", mode="r")["pass/C"]
    np.testing.assert_array_equal(reread[:], plain[:])
    for key in ("c/0/0", "c/1/0", "c/2/0"):  # same bytes on disk, chunk by chunk
        a = (tmp_path / "g.zarr" / "pass" / "C" / key).read_bytes()
        b = (tmp_path / "plain.zarr" / key).read_bytes()
        assert a == b, key
    assert not list(tmp_path.rglob("*.partial"))


def _chunk_bytes(path):
    return (path / "c" / "0" / "0").read_bytes(), (path / "c" / "1" / "0").read_bytes()


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_direct_write_converts_and_aligns(tmp_path, dtype):
    """O_DIRECT writes (page-aligned buffers, lengths padded then truncated) store zarr's
    bytes for float64 blocks into float32 arrays, misaligned views and blocks that are
    already page-aligned (written from their own memory)."""
    rng = np.random.default_rng(1)
    rows, cols = 512, 8  # 32 KiB float64 chunks: whole pages
    data = rng.standard_normal((2 * rows, cols))
    pages = mmap.mmap(-1, data.nbytes), mmap.mmap(-1, data.nbytes + 4096)
    aligned = np.frombuffer(pages[0], dtype=np.float64, count=data.size).reshape(data.shape)
    aligned[:] = data
    shifted = np.frombuffer(pages[1], dtype=np.float64, count=data.size,
                            offset=8).reshape(data.shape)
    shifted[:] = data  # 8 bytes past a page boundary
    assert aligned.ctypes.data % 4096 == 0 and shifted.ctypes.data % 4096 == 8
    out = {}
    for name, source, direct in (("ref", data, False), ("aligned", aligned, True),
                                 ("shifted", shifted, True)):
        z = zarr.create_array(tmp_path / f"{name}.zarr", shape=data.shape, chunks=(rows, cols),
                              dtype=dtype, fill_value=0.0, compressors=None)
        for start in (0, rows):
            write_rows(z, start, source[start:start + rows], direct=direct)
        out[name] = _chunk_bytes(tmp_path / f"{name}.zarr")
        np.testing.assert_array_equal(z[:], data.astype(dtype))
    assert out["aligned"] == out["ref"] and out["shifted"] == out["ref"]
    assert not list(tmp_path.rglob("*.partial"))


def _direct_io_supported(directory) -> bool:
    """Whether this file system takes an O_DIRECT write of one aligned page."""
    if not hasattr(os, "O_DIRECT"):
        return False
    path = os.path.join(directory, "o_direct.probe")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_DIRECT, 0o600)
    except OSError:
        return False
    try:
        os.write(fd, mmap.mmap(-1, 4096))
        return True
    except OSError:
        return False
    finally:
        os.close(fd)
        os.unlink(path)


@pytest.fixture
def direct_io(tmp_path):
    if not _direct_io_supported(tmp_path):
        pytest.skip(f"the file system of {tmp_path} does not support O_DIRECT writes")


def test_direct_write_bypasses_the_page_cache_where_supported(tmp_path, monkeypatch, direct_io):
    """Local stores open the chunk file with O_DIRECT; a file system that refuses it
    (EINVAL, as tmpfs did before Linux 6.6) is written through the page cache instead,
    and remembered so later blocks do not retry."""
    flags = []
    real_open = os.open

    def spy(path, flag, *args, **kwargs):
        flags.append(flag)
        return real_open(path, flag, *args, **kwargs)

    monkeypatch.setattr(chunkwrite.os, "open", spy)
    z = zarr.create_array(tmp_path / "a.zarr", shape=(8, 3), chunks=(4, 3), dtype="float64",
                          fill_value=0.0, compressors=None)
    write_rows(z, 0, np.ones((4, 3)))
    assert any(f & os.O_DIRECT for f in flags)

    def refuse(path, flag, *args, **kwargs):
        if flag & os.O_DIRECT:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_open(path, flag, *args, **kwargs)

    monkeypatch.setattr(chunkwrite.os, "open", refuse)
    write_rows(z, 4, np.full((4, 3), 2.0))
    np.testing.assert_array_equal(z[:], np.r_[np.ones((4, 3)), np.full((4, 3), 2.0)])
    assert str(z.store_path.store.root) in chunkwrite._NO_DIRECT
    chunkwrite._NO_DIRECT.discard(str(z.store_path.store.root))
    assert not list(tmp_path.rglob("*.partial"))


def test_failed_direct_write_leaves_no_chunk(tmp_path, monkeypatch, direct_io):
    """A write that fails (here: disk full) raises and leaves neither the chunk nor its
    temporary file, so the block is not mistaken for written."""
    z = zarr.create_array(tmp_path / "a.zarr", shape=(8, 3), chunks=(4, 3), dtype="float64",
                          fill_value=0.0, compressors=None)

    def full(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(chunkwrite.os, "write", full)
    with pytest.raises(OSError, match="No space"):
        write_rows(z, 0, np.ones((4, 3)))
    assert not (tmp_path / "a.zarr" / "c" / "0" / "0").exists()
    assert not list(tmp_path.rglob("*.partial"))


def test_write_rows_rejects_nothing_silently(tmp_path):
    """A block of the wrong width fails like a zarr write would, naming the shapes."""
    z = zarr.create_array(tmp_path / "a.zarr", shape=(8, 3), chunks=(4, 3), dtype="float64",
                          fill_value=0.0, compressors=None)
    with pytest.raises(ValueError):
        write_rows(z, 0, np.ones((4, 2)))
