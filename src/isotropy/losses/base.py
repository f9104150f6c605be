"""What every regularizer returns, and the call shape they share."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch


@dataclass
class RegularizerOutput:
    """``loss``: the term to add to the task loss (a differentiable scalar);
    ``logs``: plain floats for logging (e.g. the IsoScore* of the batch)."""

    loss: torch.Tensor
    logs: dict[str, float] = field(default_factory=dict)


class Regularizer(torch.nn.Module):
    """Base class. Subclasses implement

    ``forward(hidden_states, attention_mask=None, labels=None) -> RegularizerOutput``

    where ``hidden_states`` is the ``outputs.hidden_states`` tuple of a Hugging Face encoder
    (index 0 = embedding output), ``attention_mask`` is ``(batch, seq)`` and ``labels`` is
    ``(batch,)`` (used only by label-aware regularizers).
    """

    def forward(  # pragma: no cover - interface
        self,
        hidden_states: Sequence[torch.Tensor],
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
    ) -> RegularizerOutput:
        raise NotImplementedError
