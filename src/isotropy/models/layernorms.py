"""The output LayerNorm of every layer of a BERT-style encoder (``...layer.<i>.output.LayerNorm``:
BERT, RoBERTa, ELECTRA, MiniLM), stacked for
:func:`isotropy.measures.layernorm_outliers.layernorm_outliers`."""

from __future__ import annotations

import re

import torch

__all__ = ["output_layernorm_weights"]

_NAME = re.compile(r"^(.*?)(?:^|\.)?layer\.(\d+)\.output\.LayerNorm\.(weight|bias)$")


def output_layernorm_weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """``{"weight": (L, d), "bias": (L, d)}``: the scales and biases of the output LayerNorm of
    layers ``0..L-1``, in layer order (float64 copies). ``ValueError`` when the model has no
    such LayerNorm (decoder-only models normalise before each block, not after it)."""
    found: dict[str, dict[int, torch.Tensor]] = {"weight": {}, "bias": {}}
    stacks = set()
    for name, param in model.named_parameters():
        m = _NAME.match(name)
        if m:
            stacks.add(m.group(1))
            found[m.group(3)][int(m.group(2))] = param.detach().to("cpu", torch.float64)
    if not found["weight"]:
        raise ValueError("the model has no BERT-style output LayerNorm "
                         "(parameters named '...layer.<i>.output.LayerNorm.weight')")
    if len(stacks) > 1:
        raise ValueError(f"the model has {len(stacks)} stacks of layers with output LayerNorms "
                         f"({', '.join(sorted(repr(p) for p in stacks))}): pass one of them")
    out = {}
    for kind, by_layer in found.items():
        layers = sorted(by_layer)
        if layers != list(range(len(layers))):
            raise ValueError(f"the output LayerNorm {kind}s cover layers {layers}, not 0..L-1")
        out[kind] = torch.stack([by_layer[i] for i in layers])
    return out
