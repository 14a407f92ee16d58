"""Shared fixtures of the command-line tests: the SISOKR config they fit."""

CONFIG = """
[model]
type = "SISOKR"
lam = [1e-3, 1e-2]
random_state = 0

[model.input_kernel]
name = "gaussian"
gamma = 0.5

[model.output_kernel]
name = "gaussian"
gamma = 0.5

[model.input_sketch]
name = "subsampling"
m = 60

[model.output_sketch]
name = "p_sparsified"
m = 25
p = "20/n"
kind = "gaussian"

[data]
train = "train.npz"
test = "test.npz"
standardize = true

[store]
path = "fit.zarr"

[engine]
block_rows = 64
"""
