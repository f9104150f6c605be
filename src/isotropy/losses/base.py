"""What every regularizer returns, and the call shape they share."""

from __future__ import annotations

import sys
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from isotropy.clouds import Layers, masked_token_rows, token_cloud

_INTERNAL_DIRS = (str(Path(__file__).resolve().parents[1]), str(Path(torch.nn.__file__).parent))


def _user_stacklevel() -> int:
    """``stacklevel`` for ``warnings.warn`` called here that names the first frame outside
    isotropy and ``torch.nn`` (the user's call of the loss)."""
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_code.co_filename.startswith(_INTERNAL_DIRS):
        frame, level = frame.f_back, level + 1
    return level


def warn_no_attention_mask(name: str) -> None:
    """Warn that, without an ``attention_mask``, padded positions are counted as tokens."""
    warnings.warn(
        f"{name} was called without attention_mask: every position, padding included, is "
        "counted as a token of the cloud. Pass the batch's attention_mask "
        "(reg(outputs.hidden_states, batch['attention_mask'])) to leave padding out.",
        UserWarning,
        stacklevel=_user_stacklevel(),
    )


@dataclass
class RegularizerOutput:
    """``loss``: the term to add to the task loss (a differentiable scalar);
    ``logs``: values for logging (e.g. the IsoScore* of the batch): plain floats, or detached
    0-d tensors where reading them would make the host wait for an accelerator (read them
    with ``float()`` when they are logged)."""

    loss: torch.Tensor
    logs: dict[str, float | torch.Tensor] = field(default_factory=dict)


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

    def _token_states(self, hidden_states: Sequence[torch.Tensor],
                      attention_mask: torch.Tensor | None, layers: Layers,
                      check_finite: bool = True) -> torch.Tensor:
        """The token states of ``layers`` stacked as one cloud: the non-padding ones, or every
        position with ``self.include_padding`` or without an ``attention_mask`` (warned once
        per instance)."""
        return token_cloud(hidden_states, self._counted_mask(attention_mask), layers,
                           check_finite=check_finite)

    def _token_rows(self, hidden_states: Sequence[torch.Tensor],
                    attention_mask: torch.Tensor | None, layers: Layers,
                    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """:meth:`_token_states` without selecting the rows
        (:func:`~isotropy.clouds.masked_token_rows`): every position's row and whether it
        counts (``None``: all count)."""
        return masked_token_rows(hidden_states, self._counted_mask(attention_mask), layers)

    def _counted_mask(self, attention_mask: torch.Tensor | None) -> torch.Tensor | None:
        """The mask of the positions that count as tokens: ``None`` (all) with
        ``self.include_padding`` or without an ``attention_mask`` (warned once per
        instance)."""
        if getattr(self, "include_padding", False):
            return None
        if attention_mask is None and not getattr(self, "_warned_no_mask", False):
            warn_no_attention_mask(type(self).__name__)
            self._warned_no_mask = True
        return attention_mask
