"""A kernel grid's input widths in a saved model's batches: each width's kernel and realised
sketch.

A cross-validation over a grid of input kernels (``gammas``, ``kernels``) computes every
width's sums in one pass, each width with its own realised input sketch (the same draw,
pre-whitened for that width's kernel where the input side is). Its model's own side
(``kernel_``, ``sketch_``) is the chosen width's, so the batches it holds
(``distsketch.models.growing``) save every width's kernel and sketch themselves, for a loaded
model to append rows at every width (docs/design/growing.md, "Cross-validation").
"""

from __future__ import annotations

from typing import Any

from ..io.model_json import kernel_from_json, kernel_to_json
from ..sketches.base import RealizedSketch

__all__ = ["widths_state", "widths_from_state"]


def widths_state(kernels: dict, x_sketch: RealizedSketch, x_widths: tuple, *,
                 prefix: str) -> tuple[dict, dict]:
    """Every input width's kernel and realised sketch as a saved model's ``(arrays, json)``.

    Parameters
    ----------
    kernels : dict
        The fitted kernels by parameter name (the input one: width 0's).
    x_sketch : RealizedSketch
        Width 0's realised input sketch.
    x_widths : tuple of (Kernel, RealizedSketch)
        The further widths.
    prefix : str
        The arrays' name prefix (width ``j``'s sketch arrays are ``<prefix>width<j>__<key>``).

    Returns
    -------
    arrays : dict
    state : dict
        ``kernels`` (by name), ``further`` (the further widths' kernels) and ``sketches``
        (every width's sketch description, width 0 first): JSON.
    """
    arrays, metas = {}, []
    for j, sketch in enumerate([x_sketch] + [sk for _, sk in x_widths]):
        own, meta = sketch.get_state()
        arrays.update({f"{prefix}width{j}__{key}": v for key, v in own.items()})
        metas.append(meta)
    return arrays, {"kernels": {name: kernel_to_json(k) for name, k in kernels.items()},
                    "further": [kernel_to_json(k) for k, _ in x_widths], "sketches": metas}


def widths_from_state(arrays: dict, state: dict, *, prefix: str) -> tuple[dict, Any, tuple]:
    """Inverse of :func:`widths_state`.

    Parameters
    ----------
    arrays : dict
        The saved model's arrays (those of other names are not read).
    state : dict
        What :func:`widths_state` returned as JSON.
    prefix : str

    Returns
    -------
    kernels : dict
    x_sketch : RealizedSketch
    x_widths : tuple of (Kernel, RealizedSketch)
    """
    sketches = []
    for j, meta in enumerate(state["sketches"]):
        name = f"{prefix}width{j}__"
        sketches.append(RealizedSketch.from_state(
            {k[len(name):]: v for k, v in arrays.items() if k.startswith(name)}, meta))
    kernels = {name: kernel_from_json(cfg) for name, cfg in state["kernels"].items()}
    further = [kernel_from_json(cfg) for cfg in state["further"]]
    return kernels, sketches[0], tuple(zip(further, sketches[1:]))
