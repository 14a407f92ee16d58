"""Kernels: functions evaluated on row blocks, ``kernel(A, B) -> K``, and their registry.

Block math: numpy and scipy only (no dask), run inside a task or on the driver."""

from .base import (KERNELS, CallableKernel, Gaussian, GaussianTanimoto, Kernel, Laplacian, Linear,
    Matern, Polynomial, Standardized, Tanimoto, check_kernel, kernel_description,
    kernel_from_config, tuned, Block)

__all__ = ["KERNELS", "CallableKernel", "Gaussian", "GaussianTanimoto", "Kernel", "Laplacian",
           "Linear", "Matern", "Polynomial", "Standardized", "Tanimoto", "check_kernel",
           "kernel_description", "kernel_from_config", "tuned", "Block"]
