"""Kernels: functions evaluated on row blocks, ``kernel(A, B) -> K``, and their registry.

The base class, registry and argument checks (:mod:`.base`), the kernel families
(:mod:`.families`), kernels on standardised inputs (:mod:`.standardized`) and the route of
sparse operands (:mod:`.sparse`), re-exported here.

Block math: numpy and scipy only (no dask), run inside a task or on the driver."""

from .base import (
    KERNELS,
    CallableKernel,
    Kernel,
    check_kernel,
    kernel_description,
    kernel_from_config,
)
from .families import Gaussian, GaussianTanimoto, Laplacian, Linear, Matern, Polynomial, Tanimoto
from .sparse import Block, tuned
from .standardized import Standardized

__all__ = ["KERNELS", "CallableKernel", "Gaussian", "GaussianTanimoto", "Kernel", "Laplacian",
           "Linear", "Matern", "Polynomial", "Standardized", "Tanimoto", "check_kernel",
           "kernel_description", "kernel_from_config", "tuned", "Block"]
