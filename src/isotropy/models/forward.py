"""The hidden-state pass: a model run over batches of inputs, yielding every batch's hidden
states.

Every reader of hidden states outside the training step goes through
:func:`hidden_state_batches`: Sigma_S estimation (:mod:`isotropy.models.shrinkage`), the
``measure`` and ``analyze`` commands (:mod:`isotropy.probing`). The training and evaluation
steps get theirs from the ``Trainer``'s own forward pass (:mod:`isotropy.training.trainer`),
and all of them hand the hidden states to the same consumers (streamed cloud statistics,
:class:`~isotropy.probing.eval_measures.EvalMeasures`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import torch

from isotropy.clouds import get_hidden_states
from isotropy.models.regularized import RegularizedModel

__all__ = ["hidden_state_batches", "model_device", "unwrap_model"]

HiddenStates = tuple[torch.Tensor, ...]


def unwrap_model(model: torch.nn.Module) -> torch.nn.Module:
    """The bare model: without DDP-style ``.module`` wrappers or a ``RegularizedModel``.

    A DDP wrapper is bypassed on purpose: its forward may synchronise buffers across ranks,
    and ranks may run different numbers of batches in a pass.

    >>> net = torch.nn.Linear(2, 2)
    >>> unwrap_model(torch.nn.DataParallel(net)) is net
    True
    """
    wrappers = (torch.nn.parallel.DistributedDataParallel, torch.nn.DataParallel)
    for _ in range(8):
        if isinstance(model, RegularizedModel):
            model = model.model
        elif isinstance(model, wrappers):
            model = model.module
        else:
            break
    return model


def model_device(model: torch.nn.Module) -> torch.device:
    """Where the model's first parameter (else buffer) lives; CPU for a model with neither.

    >>> model_device(torch.nn.Linear(2, 2))
    device(type='cpu')
    """
    for p in model.parameters():
        return p.device
    for b in model.buffers():
        return b.device
    return torch.device("cpu")


def hidden_state_batches(
    model: torch.nn.Module, batches: Iterable[Mapping[str, Any]]
) -> Iterator[tuple[HiddenStates, torch.Tensor | None]]:
    """``(hidden_states, attention_mask)`` of every batch of model inputs in ``batches``.

    The bare model (:func:`unwrap_model`) is called as ``model(**batch,
    output_hidden_states=True)`` (tensors moved to its device) in eval mode under
    ``torch.no_grad``, and put back into its previous mode when the caller stops (also on a
    ``break`` or an error). ``hidden_states[0]`` is the embedding output, ``1..L`` the layers;
    ``attention_mask`` is the batch's own (``None`` when it has none).

    >>> from types import SimpleNamespace
    >>> class Toy(torch.nn.Module):  # hidden states: the embeddings and twice them
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.emb = torch.nn.Embedding(5, 2)
    ...     def forward(self, input_ids, output_hidden_states=False):
    ...         e = self.emb(input_ids)
    ...         return SimpleNamespace(hidden_states=(e, 2 * e))
    >>> net = Toy()
    >>> [(len(hs), tuple(hs[1].shape), mask)
    ...  for hs, mask in hidden_state_batches(net, [{"input_ids": torch.tensor([[1, 2, 3]])}])]
    [(2, (1, 3, 2), None)]
    >>> net.training  # back in training mode
    True
    """
    inner = unwrap_model(model)
    device = model_device(inner)
    was_training = inner.training
    inner.eval()
    try:
        with torch.no_grad():
            for batch in batches:
                if not isinstance(batch, Mapping):
                    raise TypeError(
                        "the batches must be dicts of model inputs (input_ids, "
                        f"attention_mask, ...), got {type(batch).__name__}"
                    )
                ids = batch.get("input_ids")
                if isinstance(ids, torch.Tensor) and ids.dim() != 2:
                    raise ValueError(
                        "input_ids of a batch must be 2-D (batch, sequence), got shape "
                        f"{tuple(ids.shape)}: pass batches (a DataLoader with a collator), "
                        "not single examples")
                inputs = {k: v.to(device) if isinstance(v, torch.Tensor) else v
                          for k, v in batch.items()}
                inputs["output_hidden_states"] = True
                yield get_hidden_states(inner(**inputs)), inputs.get("attention_mask")
    finally:
        inner.train(was_training)
