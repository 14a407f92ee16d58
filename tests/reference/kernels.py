"""Kernel Gram matrices written from their formulas.

Two kinds, on purpose: :func:`gaussian_gram` is the vectorised Gaussian Gram the model
references build their dense matrices with; the ``naive_*`` functions are scalar formulas of
every registered kernel, evaluated pair by pair by :func:`naive_gram` (a double loop, no
vectorisation), which ``tests/test_kernels.py`` checks the kernels themselves against.
"""

import math

import numpy as np


def gaussian_gram(A, B=None, *, gamma):
    """Gaussian kernel matrix ``exp(−γ‖a_i − b_j‖²)`` of the rows of ``A`` (n, d) and ``B``
    (m, d; default ``A``), densely: (n, m)."""
    B = A if B is None else B
    return np.exp(-gamma * ((A[:, None, :] - B[None, :, :]) ** 2).sum(-1))


def naive_gaussian(x, y, gamma):
    return math.exp(-gamma * sum((x - y) ** 2))


def naive_laplacian(x, y, gamma):
    return math.exp(-gamma * sum(abs(x - y)))


def naive_linear(x, y):
    return sum(x * y)


def naive_polynomial(x, y, degree, gamma, coef0):
    return (gamma * sum(x * y) + coef0) ** degree


def naive_matern(x, y, nu, length_scale):
    r = math.sqrt(sum((x - y) ** 2)) / length_scale
    if nu == 0.5:
        return math.exp(-r)
    if nu == 1.5:
        return (1 + math.sqrt(3) * r) * math.exp(-math.sqrt(3) * r)
    return (1 + math.sqrt(5) * r + 5 * r**2 / 3) * math.exp(-math.sqrt(5) * r)


def naive_tanimoto(x, y):
    xy = sum(x * y)
    den = sum(x * x) + sum(y * y) - xy
    return 1.0 if den == 0 else xy / den


def naive_gaussian_tanimoto(x, y, gamma):
    return math.exp(-gamma * (2 - 2 * naive_tanimoto(x, y)))


def naive_gram(f, A, B, **params):
    return np.array([[f(a, b, **params) for b in B] for a in A])
