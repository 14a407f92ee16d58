"""Store writes: the direct whole-chunk path stores exactly what zarr's own path stores."""

import numpy as np
import pytest
import zarr

from distsketch.store import write_rows


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("compressed", [False, True])
def test_write_rows_matches_zarr_setitem(tmp_path, dtype, compressed):
    rng = np.random.default_rng(0)
    kw = {} if compressed else {"compressors": None}
    root = zarr.open_group(tmp_path / "g.zarr", mode="w")
    direct = root.require_group("pass").create_array("C", shape=(10, 3), chunks=(4, 3), dtype=dtype,
                                                      fill_value=0.0, **kw)
    plain = zarr.create_array(tmp_path / "plain.zarr", shape=(10, 3), chunks=(4, 3), dtype=dtype,
                              fill_value=0.0, **kw)
    for start in (4, 0, 8):  # out of order, last chunk partial
        block = rng.standard_normal((min(4, 10 - start), 3)).astype(dtype)
        write_rows(direct, start, block)
        plain[start:start + len(block)] = block
    reread = zarr.open_group(tmp_path / "g.zarr", mode="r")["pass/C"]
    np.testing.assert_array_equal(reread[:], plain[:])
    for key in ("c/0/0", "c/1/0", "c/2/0"):  # same bytes on disk, chunk by chunk
        a = (tmp_path / "g.zarr" / "pass" / "C" / key).read_bytes()
        b = (tmp_path / "plain.zarr" / key).read_bytes()
        assert a == b, key


def test_write_rows_rejects_nothing_silently(tmp_path):
    """A block of the wrong width fails like a zarr write would, naming the shapes."""
    z = zarr.create_array(tmp_path / "a.zarr", shape=(8, 3), chunks=(4, 3), dtype="float64",
                          fill_value=0.0, compressors=None)
    with pytest.raises(ValueError):
        write_rows(z, 0, np.ones((4, 2)))
