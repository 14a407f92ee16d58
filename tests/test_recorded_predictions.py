"""Predictions bitwise equal to the recorded ones (tests/reference/cases.py, recorded in
tests/data/reference_predictions.npz).

Bitwise equality of floating-point results depends on the BLAS library, its version and the
CPU kernels it picked, and on numpy's own loops, not only on distsketch's code. Where this
environment is the one the reference was recorded in, every array must be bitwise equal;
elsewhere the same comparison is made to a tolerance derived from the problems: float64
blocks carry rounding (about 1e-16 relative) amplified by the conditioning of the small
solves (at most 1/(nλ) = 1/(60 · 1e-3) ≈ 17 on the scaled problems, times the whitening's
threshold), so 1e-8 relative to the largest value; float32 blocks carry float32 rounding, so
1e-4 (tests/conftest.py's CLOSED_FORM_RTOL, which the closed-form tests measure). Indices of
the top-k are compared only where scores are not within that tolerance of a tie.

A surrogate ``S`` (queries × output coordinates) is written in the output side's whitened
basis, whose eigenvectors LAPACK returns up to sign (and, for close eigenvalues, rotation)
by the rounding of the CPU's kernels: float32 surrogates recorded with OpenBLAS's Haswell
kernels come back with flipped columns under its SkylakeX ones. Elsewhere than the recording
environment surrogates are therefore compared through ``S Sᵀ`` (the inner products of the
estimates in H_Y, which no basis changes), to ``2 √r`` times the tolerance (``|δ(S Sᵀ)| ≤
2 max‖s‖ max‖δs‖``, ``max‖δs‖ ≤ √r · tol · max|S|``); the decoding scores, compared
directly, are basis-free too.
"""

import json

import dask
import numpy as np
import pytest

from reference.cases import REFERENCE, cases, environment, sorted_blas

REF = np.load(REFERENCE)
RECORDED = json.loads(bytes(REF["__environment__"]))
SAME_ENVIRONMENT = {**RECORDED, "blas": sorted_blas(RECORDED["blas"])} == environment()
RTOL = {"float64": 1e-8, "float32": 1e-4}
CASES = cases()


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_predictions_equal_the_recorded_ones(name, dtype):
    with dask.config.set(scheduler="threads"):
        got = CASES[name](dtype)
    prefix = f"{name}/{dtype}/"
    recorded = {k[len(prefix):]: REF[k] for k in REF.files if k.startswith(prefix)}
    assert set(got) == set(recorded)
    for key, want in recorded.items():
        value = np.asarray(got[key])
        assert value.shape == want.shape, key
        if SAME_ENVIRONMENT:
            np.testing.assert_array_equal(value, want, err_msg=f"{prefix}{key}")
        elif key.startswith("idx"):
            continue  # ties may reorder under other rounding; the scores are compared
        elif key.startswith("surrogate"):
            gram, want_gram = value @ value.T, want @ want.T
            tol = 2 * np.sqrt(want.shape[1]) * RTOL[dtype] * np.max(np.abs(want_gram))
            np.testing.assert_allclose(gram, want_gram, rtol=0, atol=tol,
                                       err_msg=f"{prefix}{key} (as S Sᵀ)")
        else:
            scale = np.max(np.abs(want))
            np.testing.assert_allclose(value, want, rtol=0, atol=RTOL[dtype] * scale,
                                       err_msg=f"{prefix}{key}")
