"""Thin helpers over ``torch.distributed`` (all no-ops when it is not initialised).

Gradient convention for every global quantity in this package: each rank returns the value
computed on the *global* batch, and its backward pass hands each rank the gradient of the
*sum of all ranks' (identical) losses* with respect to its local rows. DDP then averages
parameter gradients over ranks, which gives exactly the gradient of one process on the
concatenated batch.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from typing import TypeVar

import torch
import torch.distributed as dist

T = TypeVar("T")


def is_distributed(group: object | None = None) -> bool:
    """True when ``torch.distributed`` is initialised with more than one rank."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size(group) > 1


def world_size(group: object | None = None) -> int:
    """Number of ranks (1 when not distributed)."""
    return dist.get_world_size(group) if is_distributed(group) else 1


def on_main_process(fn: Callable[[], T]) -> T:
    """``fn()`` run by rank 0 alone, its result (or the exception it raised) handed to every
    rank; just ``fn()`` when not distributed.

    For work with side effects that must happen once (the files of a run directory that all
    ranks share): the other ranks wait, then return the same value or raise the same error.
    """
    if not is_distributed():
        return fn()
    box: list[object] = [None]
    error: Exception | None = None
    if dist.get_rank() == 0:
        try:
            box[0] = ("ok", fn())
        except Exception as err:
            error = err
            try:
                pickle.dumps(err)
                box[0] = ("error", err)
            except Exception:
                box[0] = ("error", RuntimeError(f"rank 0 failed: {type(err).__name__}: {err}"))
    dist.broadcast_object_list(box, src=0)
    if error is not None:
        raise error
    kind, value = box[0]  # type: ignore[misc]
    if kind == "error":
        raise value  # type: ignore[misc]
    return value  # type: ignore[return-value]


def all_reduce_sum(t: torch.Tensor, group: object | None = None) -> torch.Tensor:
    """Sum ``t`` over ranks (returns ``t`` itself when not distributed; no autograd)."""
    if not is_distributed(group):
        return t
    out = t.detach().clone()
    dist.all_reduce(out, op=dist.ReduceOp.SUM, group=group)
    return out


def all_reduce_max(t: torch.Tensor, group: object | None = None) -> torch.Tensor:
    """Element-wise maximum of ``t`` over ranks (``t`` itself when not distributed).

    >>> all_reduce_max(torch.tensor([1.0, 2.0]))
    tensor([1., 2.])
    """
    if not is_distributed(group):
        return t
    out = t.detach().clone()
    dist.all_reduce(out, op=dist.ReduceOp.MAX, group=group)
    return out


def gather_rows(x: torch.Tensor, group: object | None = None) -> torch.Tensor:
    """Concatenate ``x`` (shape ``(n_r, ...)``, ``n_r`` may differ) over ranks, differentiably.

    The local slice keeps its autograd history; the backward pass sums each slice's gradient
    over ranks (see the module docstring for why).
    """
    if not is_distributed(group):
        return x
    return _GatherRows.apply(x, group)


class _GatherRows(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, group: object | None) -> torch.Tensor:  # type: ignore[override]
        ws = dist.get_world_size(group)
        rank = dist.get_rank(group)
        n = torch.tensor([x.shape[0]], device=x.device, dtype=torch.long)
        sizes = [torch.zeros_like(n) for _ in range(ws)]
        dist.all_gather(sizes, n, group=group)
        counts = [int(s.item()) for s in sizes]
        top = max(counts)
        padded = x.new_zeros((top, *x.shape[1:]))
        padded[: x.shape[0]] = x
        bufs = [torch.empty_like(padded) for _ in range(ws)]
        dist.all_gather(bufs, padded.contiguous(), group=group)
        ctx.counts, ctx.rank, ctx.group = counts, rank, group
        return torch.cat([b[:c] for b, c in zip(bufs, counts, strict=True)], dim=0)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        grad = grad.contiguous().clone()
        dist.all_reduce(grad, op=dist.ReduceOp.SUM, group=ctx.group)
        start = sum(ctx.counts[: ctx.rank])
        return grad[start : start + ctx.counts[ctx.rank]], None
