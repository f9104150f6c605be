r"""CosReg (Gao et al. 2019, as adapted in the I-STAR paper, eq. 1).

.. math::  L = L_\text{task} + \lambda\,\frac{1}{M^2}\sum_{i}\sum_{j\ne i}\hat x_i^\top\hat x_j
           = L_\text{task} + \lambda\,\frac{\lVert s\rVert^2 - M}{M^2},
           \qquad \hat x_i = \frac{x_i}{\lVert x_i\rVert},\quad s = \sum_i \hat x_i,

over the :math:`M` non-padding token states of one layer (default: the last), in
:math:`O(Md)`. Under ``torch.distributed`` (``sync_dist=True``) the sum runs over the global
token cloud: :math:`s` and :math:`M` are all-reduced, which equals gathering every rank's rows
at :math:`O(d)` communication. Each rank's gradient is then ``world_size`` times its share of the
single-process gradient (DDP's averaging reproduces the single-process gradient).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.distributed as dist

from isotropy._validation import accumulation_dtype, check_flag
from isotropy.distributed import all_reduce_sum, is_distributed
from isotropy.losses.base import Regularizer, RegularizerOutput
from isotropy.losses.istar import check_hidden_states, check_tuning

__all__ = ["CosRegLoss"]


class _AllReduceSum(torch.autograd.Function):
    """Sum over ranks; the gradient of each rank's input is the sum of all ranks' gradients."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, group: object | None) -> torch.Tensor:  # type: ignore[override]
        ctx.group = group
        return all_reduce_sum(x, group)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        grad = grad.contiguous().clone()
        dist.all_reduce(grad, op=dist.ReduceOp.SUM, group=ctx.group)
        return grad, None


class CosRegLoss(Regularizer):
    r"""The CosReg penalty :math:`\lambda\frac{1}{M^2}\sum_{i\ne j}\hat x_i^\top\hat x_j`.

    Args:
        tuning: :math:`\lambda` (the paper, after Gao et al., uses 1).
        layer: index into ``hidden_states`` (default ``-1``, the last layer).
        sync_dist: use the global token cloud under ``torch.distributed``.
        process_group: the ``torch.distributed`` group (default: the world).
        include_padding: count the padding positions as tokens, as the authors' code does
            (default ``False``: the attention mask leaves them out).
        eager_checks: as for :class:`~isotropy.losses.istar.IStarLoss` (``None``: eager on
            CPU; on accelerators no host read of a value, NaN for a zero-norm token, logs as
            detached tensors).

    ``logs``: ``cosreg_term`` (the penalty without :math:`\lambda`), ``avg_cosine`` (mean cosine
    of distinct pairs, :math:`\frac{M}{M-1}` times the term; absent for one point on CPU, 0
    up to rounding on the accelerators' route, which logs it at every step) and
    ``n_points`` (local :math:`M`).
    A token state of norm zero has no direction and is an error. Pass the batch's
    ``attention_mask``: without it every position, padding included, is counted as a token
    (a ``UserWarning`` says so, once per instance).

    >>> h = torch.tensor([[[1.0, 0.0], [0.0, 2.0], [3.0, 3.0], [9.0, 9.0]]])
    >>> mask = torch.tensor([[1, 1, 1, 0]])  # the last token is padding
    >>> out = CosRegLoss()((h, h), attention_mask=mask)
    >>> round(float(out.loss), 4)  # 2 * (0 + 2 / sqrt(2)) / 3**2
    0.3143
    """

    def __init__(
        self,
        tuning: float = 1.0,
        layer: int = -1,
        sync_dist: bool = True,
        process_group: object | None = None,
        include_padding: bool = False,
        eager_checks: bool | None = None,
    ) -> None:
        super().__init__()
        if eager_checks is not None and not isinstance(eager_checks, bool):
            raise TypeError(f"eager_checks must be True, False or None, got {eager_checks!r}")
        self.eager_checks = eager_checks
        self.tuning = check_tuning(tuning)
        self.include_padding = check_flag(include_padding, "include_padding")
        if isinstance(layer, bool) or not isinstance(layer, int):
            raise TypeError(f"layer must be an integer index into hidden_states, got {layer!r}")
        self.layer = layer
        self.sync_dist = check_flag(sync_dist, "sync_dist")
        self.process_group = process_group
        self._warned_no_mask = False

    def extra_repr(self) -> str:
        return (f"tuning={self.tuning}, layer={self.layer}, sync_dist={self.sync_dist}, "
                f"include_padding={self.include_padding}")

    def forward(
        self,
        hidden_states: Sequence[torch.Tensor],
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
    ) -> RegularizerOutput:
        r""":math:`\lambda(\lVert s\rVert^2 - M)/M^2` over the layer's non-padding token states
        (global under ``torch.distributed``; ``labels`` is ignored).

        Without ``attention_mask`` every position counts as a token, padding included (warned
        once per instance)."""
        hs = check_hidden_states(hidden_states, self.layer)
        sync = self.sync_dist and is_distributed(self.process_group)
        eager = hs[-1].device.type == "cpu" if self.eager_checks is None else self.eager_checks
        if not eager and not sync:
            return self._forward_on_device(hs, attention_mask)
        # under sync, NaN/inf and zero norms are found after the ranks' sums, so that every
        # rank raises (a rank raising alone would leave the others waiting in a collective)
        x = self._token_states(hs, attention_mask, self.layer, check_finite=not sync)
        m_local = x.shape[0]
        if m_local == 0:
            raise ValueError("the attention mask leaves no token in the batch: CosReg needs tokens")
        with torch.autocast(device_type=x.device.type, enabled=False):
            xa = x.to(accumulation_dtype(x))
            norms = torch.linalg.vector_norm(xa, dim=1, keepdim=True)
            zero = (norms == 0).sum().to(xa.dtype).reshape(1)
            if sync:
                zero = all_reduce_sum(zero, self.process_group)
            if bool(zero[0] > 0):
                raise ValueError(
                    "a token state has norm zero: its cosine similarity (CosReg) is undefined"
                    + (" (on some rank)" if sync else ""))
            s = (xa / norms).sum(0)
            m = float(m_local)
            if sync:
                s = _AllReduceSum.apply(s, self.process_group)
                m = float(all_reduce_sum(xa.new_tensor([m]), self.process_group)[0])
            term = ((s * s).sum() - m) / (m * m)
            if sync and not bool(torch.isfinite(term.detach())):
                raise ValueError("the CosReg term is not finite: the hidden states of some "
                                 "rank contain NaN or infinite values (diverged training or "
                                 "overflow?)")
        value = float(term.detach())
        logs = {"cosreg_term": value, "n_points": float(m_local)}
        if m > 1:
            logs["avg_cosine"] = value * m / (m - 1)
        return RegularizerOutput(loss=self.tuning * term, logs=logs)

    def _forward_on_device(self, hs: Sequence[torch.Tensor],
                           attention_mask: torch.Tensor | None) -> RegularizerOutput:
        r"""The same penalty on an accelerator, without a host read of a value: no eager
        checks (a token state of norm zero, or a batch without a token, makes the term NaN,
        which ``isotropy train`` reports at its next log), the layer's rows taken with a row
        mask rather than selected (a selection's size is a host read; the padding rows take
        no part and get no gradient), and the logs as detached tensors. ``avg_cosine`` is
        logged at every step: for a batch of one token, which has no pair, it is the term's
        own value there, the empty sum, 0 up to rounding (:math:`\lVert s\rVert^2 - 1`)."""
        x, real = self._token_rows(hs, attention_mask, self.layer)
        if x.shape[0] == 0:
            raise ValueError("the attention mask leaves no token in the batch: CosReg needs tokens")
        with torch.autocast(device_type=x.device.type, enabled=False):
            xa = x.to(accumulation_dtype(x))
            if real is None:
                u = xa / torch.linalg.vector_norm(xa, dim=1, keepdim=True)
                m = float(x.shape[0])
            else:  # the padding rows are zeroed first: no NaN of theirs reaches a gradient
                keep = real.unsqueeze(1)
                xa = torch.where(keep, xa, xa.new_zeros(()))
                norms = torch.linalg.vector_norm(xa, dim=1, keepdim=True)
                u = xa / torch.where(keep, norms, norms.new_ones(()))  # padding: 0 / 1
                m = real.sum().to(xa.dtype)
            s = u.sum(0)
            term = ((s * s).sum() - m) / (m * m)
        value = term.detach()
        pairs = max(m - 1, 1.0) if isinstance(m, float) else torch.clamp(m - 1, min=1)
        logs = {"cosreg_term": value, "n_points": m, "avg_cosine": value * (m / pairs)}
        return RegularizerOutput(loss=self.tuning * term, logs=logs)
