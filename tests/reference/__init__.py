"""The tests' references: every dense formula a numerical path is checked against, in one place.

Written directly from the papers' closed forms with full Gram matrices, pseudo-inverses and
brute-force loops; none of it shares code with the library's pass, solve or decoding.

- :mod:`reference.kernels`: kernel Gram matrices (the vectorised Gaussian Gram, and the
  double-loop formulas of every registered kernel).
- :mod:`reference.closed_forms`: IOKR, SISOKR (Prop. 1), sketched KRR (Chen & Yang eq. 3),
  reduced rank, the pass's sums, the distinct-landmark Nyström solve.
- :mod:`reference.errors`: the error measures the tests bound.
- :mod:`reference.folds`: cross-validation by refitting every fold densely (brute force).
- :mod:`reference.lipschitz`: the Lipschitz-loss problems solved by CVXPY (Clarabel), and
  their data.
- :mod:`reference.cases`: fits whose predictions are recorded in
  ``tests/data/reference_predictions.npz`` (:mod:`test_recorded_predictions`).

Tests import these by module name (``from reference.kernels import gaussian_gram``): pytest
puts ``tests/`` on ``sys.path``, as for the other helper modules there.
"""
