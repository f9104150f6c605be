"""Turn a Hugging Face encoder's hidden states into point clouds.

Layer indices follow ``outputs.hidden_states``: index 0 is the embedding-layer output and
``1 .. L`` are the transformer layers' outputs; negative indices count from the end
(``-1`` is the last layer). ``"all"`` means every transformer layer, ``1 .. L``, without the
embedding output (as in the I-STAR paper).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import torch

from isotropy._validation import check_binary_mask

__all__ = [
    "get_hidden_states",
    "parse_layers",
    "select_layers",
    "token_cloud",
    "token_mask",
    "layer_token_clouds",
    "masked_token_rows",
    "pool",
    "POOLINGS",
    "first_token_rows",
    "pooled_rows",
    "check_rows_have_tokens",
]

Layers = Literal["all", "last"] | int | Sequence[int]
Pooling = Literal["cls", "mean"]
# the one row per example of a pooled cloud (measurements; decoders have no [CLS])
POOLINGS = ("cls", "last", "mean")


def get_hidden_states(outputs: Any) -> tuple[torch.Tensor, ...]:
    """The ``hidden_states`` tuple of a model output, with a clear error when it is missing."""
    hs = getattr(outputs, "hidden_states", None)
    if hs is None and isinstance(outputs, dict):
        hs = outputs.get("hidden_states")
    if hs is None:
        raise ValueError(
            "the model output has no hidden states: call the model with "
            "output_hidden_states=True (or set model.config.output_hidden_states = True)"
        )
    return tuple(hs)


def _layer_indices(n_states: int, layers: Layers) -> list[int]:
    n_layers = n_states - 1
    if n_states == 0:
        raise ValueError("hidden_states is empty: give a model's outputs.hidden_states "
                         "(embeddings, then each layer) or one (batch, seq, dim) tensor")
    if n_states == 1 and layers in ("all", "last"):
        return [0]  # one layer's states: that layer
    if layers == "all":
        return list(range(1, n_states))
    if layers == "last":
        return [n_states - 1]
    idx = [layers] if isinstance(layers, int) else list(layers)
    if not idx:
        raise ValueError("layers is empty: give 'all', 'last', an index or a list of indices")
    out = []
    for i in idx:
        if not isinstance(i, int) or isinstance(i, bool):
            raise TypeError(f"layer indices must be integers, got {i!r}")
        j = i + n_states if i < 0 else i
        if not 0 <= j < n_states:
            raise ValueError(
                f"layer index {i} is out of range: the model has {n_layers} transformer layers "
                f"(valid: 0 = embeddings, 1..{n_layers}, or -1..-{n_states})"
            )
        out.append(j)
    return out


def as_layers(hidden_states: Sequence[torch.Tensor] | torch.Tensor) -> Sequence[torch.Tensor]:
    """``hidden_states`` as a sequence of ``(batch, seq, dim)`` tensors: a model's
    ``outputs.hidden_states`` as it is, one such tensor as a sequence of one.

    >>> len(as_layers(torch.zeros(2, 3, 4))), len(as_layers([torch.zeros(2, 3, 4)] * 7))
    (1, 7)
    """
    if isinstance(hidden_states, torch.Tensor):
        if hidden_states.ndim != 3:
            raise ValueError(
                "hidden_states must be a model's outputs.hidden_states (a sequence of "
                "(batch, seq, dim) tensors) or one (batch, seq, dim) tensor, got a tensor of "
                f"shape {tuple(hidden_states.shape)}")
        return (hidden_states,)
    return hidden_states


def select_layers(
    hidden_states: Sequence[torch.Tensor] | torch.Tensor, layers: Layers = "all"
) -> list[torch.Tensor]:
    """The chosen hidden-state tensors, each of shape ``(batch, seq, dim)``.

    ``hidden_states`` is a model's ``outputs.hidden_states`` (index 0 the embeddings:
    ``"all"`` is every transformer layer, 1 to L) or one ``(batch, seq, dim)`` tensor (a
    sequence of one: ``"all"``, ``"last"``, 0 and -1 are that tensor).
    """
    states = as_layers(hidden_states)
    return [states[j] for j in _layer_indices(len(states), layers)]


def token_mask(h: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
    """The ``(batch, seq)`` boolean mask of real tokens of hidden states ``h`` (all ``True``
    without an ``attention_mask``); wrong shapes raise ``ValueError``.

    >>> token_mask(torch.zeros(2, 3, 4), torch.tensor([[1, 1, 0], [1, 0, 0]])).sum().item()
    3
    """
    if h.ndim != 3:
        raise ValueError(f"hidden states must have shape (batch, seq, dim), got {tuple(h.shape)}")
    if attention_mask is None:
        return torch.ones(h.shape[:2], dtype=torch.bool, device=h.device)
    if tuple(attention_mask.shape) != tuple(h.shape[:2]):
        raise ValueError(
            f"attention_mask shape {tuple(attention_mask.shape)} does not match hidden states "
            f"{tuple(h.shape[:2])}"
        )
    m = attention_mask
    check_binary_mask(m, name="attention_mask")
    return m.to(h.device).bool()


def check_rows_have_tokens(attention_mask: torch.Tensor | None, pooling: str,
                           *, always: bool = False) -> None:
    """Raise ``ValueError`` when a row of ``attention_mask`` has no real token (all 0): its
    pooled row is undefined (``cls`` and ``last`` would read a padding position). Checked
    where it costs no accelerator synchronisation (a mask on the CPU), or ``always``.

    >>> check_rows_have_tokens(torch.tensor([[1, 1], [0, 0]]), "cls")
    Traceback (most recent call last):
    ...
    ValueError: row 1 of attention_mask has no real token (all 0): cls pooling is undefined
    """
    if attention_mask is None or attention_mask.ndim != 2 or attention_mask.shape[1] == 0 \
            or not (always or attention_mask.device.type == "cpu"):
        return
    empty = ~attention_mask.detach().bool().any(1)
    if bool(empty.any()):
        rows = torch.nonzero(empty).reshape(-1)[:5].tolist()
        which = f"row {rows[0]}" if len(rows) == 1 else f"rows {', '.join(map(str, rows))}"
        raise ValueError(f"{which} of attention_mask has no real token (all 0): {pooling} "
                         "pooling is undefined")


def _check_finite(t: torch.Tensor, what: str) -> None:
    if not bool(torch.isfinite(t.detach()).all()):
        raise ValueError(f"{what} contain NaN or infinite values (diverged training or overflow?)")


def layer_token_clouds(
    hidden_states: Sequence[torch.Tensor] | torch.Tensor,
    attention_mask: torch.Tensor | None,
    layers: Layers = "all",
    *,
    check_finite: bool = True,
) -> list[torch.Tensor]:
    """Per chosen layer, the non-padding token states as a ``(n_tokens, dim)`` cloud, in
    row-major (batch, position) order.

    The rows are picked with one index computed once for all layers: on an accelerator that
    is a single host synchronisation (the number of tokens), none without an
    ``attention_mask``. ``check_finite``: raise ``ValueError`` on NaN or infinity (a host read
    per layer; the sync-free I-STAR route leaves it to the score, which is then NaN).
    """
    chosen = select_layers(hidden_states, layers)
    masks = [token_mask(h, attention_mask) for h in chosen]  # shapes checked per layer
    index = None
    if attention_mask is not None:
        index = torch.nonzero(masks[0].reshape(-1)).squeeze(1)
    clouds = []
    for h in chosen:
        rows = h.reshape(-1, h.shape[-1])
        cloud = rows if index is None else rows.index_select(0, index.to(h.device))
        if check_finite:
            _check_finite(cloud, "hidden states")
        clouds.append(cloud)
    return clouds


def token_cloud(
    hidden_states: Sequence[torch.Tensor] | torch.Tensor,
    attention_mask: torch.Tensor | None,
    layers: Layers = "all",
    *,
    check_finite: bool = True,
) -> torch.Tensor:
    """Union over the chosen layers of the non-padding token states (see
    :func:`layer_token_clouds`): a model's ``outputs.hidden_states``, or one ``(batch, seq,
    dim)`` tensor, to a cloud ``(n_layers * n_tokens, dim)``.

    >>> h = torch.arange(12.0).reshape(2, 3, 2)  # one layer: 2 sentences, 3 positions
    >>> token_cloud(h, torch.tensor([[1, 1, 0], [1, 0, 0]]))  # the 3 real tokens
    tensor([[0., 1.],
            [2., 3.],
            [6., 7.]])
    """
    clouds = layer_token_clouds(hidden_states, attention_mask, layers,
                                check_finite=check_finite)
    return clouds[0] if len(clouds) == 1 else torch.cat(clouds, dim=0)


def masked_token_rows(
    hidden_states: Sequence[torch.Tensor] | torch.Tensor,
    attention_mask: torch.Tensor | None,
    layers: Layers = "all",
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Every position's state of the chosen layers as rows ``(n_layers * batch * seq, dim)``,
    in :func:`token_cloud`'s order, and a bool per row that is ``True`` for a real token
    (``None`` without an ``attention_mask``): ``rows[real]`` is :func:`token_cloud`'s cloud.
    Nothing is selected, so nothing waits for an accelerator (a selection's size is a host
    read); the padding rows stay in, for a measure that takes a row mask.

    >>> h = torch.arange(12.0).reshape(2, 3, 2)
    >>> rows, real = masked_token_rows(h, torch.tensor([[1, 1, 0], [1, 0, 0]]))
    >>> rows.shape, real.tolist()
    (torch.Size([6, 2]), [True, True, False, True, False, False])
    """
    chosen = select_layers(hidden_states, layers)
    masks = [token_mask(h, attention_mask) for h in chosen]  # shapes checked per layer
    flat = [h.reshape(-1, h.shape[-1]) for h in chosen]
    rows = flat[0] if len(flat) == 1 else torch.cat(flat, dim=0)
    if attention_mask is None:
        return rows, None
    return rows, masks[0].reshape(-1).repeat(len(chosen))


def pool(
    hidden: torch.Tensor, attention_mask: torch.Tensor | None = None, pooling: Pooling = "cls"
) -> torch.Tensor:
    """Sentence embeddings ``(batch, dim)``: the first non-padding ([CLS]) token (position 0
    unless the tokenizer pads on the left) or the non-padding mean.

    >>> h = torch.arange(12.0).reshape(2, 3, 2)
    >>> pool(h, torch.tensor([[1, 1, 0], [0, 1, 1]]))  # the second is padded on the left
    tensor([[0., 1.],
            [8., 9.]])
    """
    m = token_mask(hidden, attention_mask)
    if pooling in ("cls", "mean"):  # (a host read: the pooled rows are read below anyway)
        check_rows_have_tokens(m, pooling, always=True)
    if pooling == "cls":
        first = m.int().argmax(dim=1)
        out = hidden[torch.arange(hidden.shape[0], device=hidden.device), first]
    elif pooling == "mean":
        w = m.to(hidden.dtype).unsqueeze(-1)
        out = (hidden * w).sum(1) / w.sum(1)
    else:
        raise ValueError(f"pooling must be 'cls' or 'mean', got {pooling!r}")
    _check_finite(out, "pooled embeddings")
    return out


def first_token_rows(hidden: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
    """``(batch, dim)``: each example's first non-padding token ([CLS]; position 0 unless the
    tokenizer pads on the left), detached. A row without a real token raises ``ValueError``
    where the mask is on the CPU (:func:`check_rows_have_tokens`)."""
    mask = token_mask(hidden, attention_mask)
    check_rows_have_tokens(attention_mask, "cls")
    first = mask.int().argmax(dim=1)
    return hidden.detach()[torch.arange(hidden.shape[0], device=hidden.device), first]


def pooled_rows(hidden: torch.Tensor, attention_mask: torch.Tensor | None,
                pooling: str = "cls") -> torch.Tensor:
    r"""``(batch, dim)``: one row per example, detached. ``cls``: the first non-padding token
    (:func:`first_token_rows`); ``last``: the last non-padding token (the right-most position
    whose mask is 1, so left and right padding give the same row); ``mean``:
    :math:`\sum_t m_t h_t / \sum_t m_t` over the non-padding positions. A row without a real
    token raises ``ValueError`` where the mask is on the CPU (:func:`check_rows_have_tokens`;
    on an accelerator, ``mean`` gives it 0)."""
    if pooling == "cls":
        return first_token_rows(hidden, attention_mask)
    mask = token_mask(hidden, attention_mask)
    if pooling in POOLINGS:
        check_rows_have_tokens(attention_mask, pooling)
    h = hidden.detach()
    if pooling == "last":
        last = mask.shape[1] - 1 - mask.int().flip(1).argmax(dim=1)
        return h[torch.arange(h.shape[0], device=h.device), last]
    if pooling == "mean":
        m = mask.to(h.dtype).unsqueeze(-1)
        return (h * m).sum(1) / m.sum(1).clamp(min=1)
    raise ValueError(f"pooling must be one of {', '.join(POOLINGS)}, got {pooling!r}")

def parse_layers(text: str | int | Sequence[int]) -> str | int | list[int]:
    """``'all'``, ``'last'``, one index or a list of indices from a flag value.

    >>> parse_layers("all"), parse_layers("3"), parse_layers("1,2,-1")
    ('all', 3, [1, 2, -1])
    """
    if isinstance(text, int) or (isinstance(text, Sequence) and not isinstance(text, str)):
        return text if isinstance(text, int) else list(text)
    t = str(text).strip().lower()
    if t in ("all", "last"):
        return t
    try:
        values = [int(v) for v in t.split(",") if v.strip()]
    except ValueError as err:
        raise ValueError(
            f"--istar_layers must be all, last, an index or a comma-separated list, got {text!r}"
        ) from err
    if not values:
        raise ValueError("--istar_layers is empty")
    return values[0] if len(values) == 1 else values
