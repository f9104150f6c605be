"""Texts to batches of model inputs, for :func:`~isotropy.models.forward.hidden_state_batches`.

Two orders, one per use:

* :func:`longest_first_batches` (``measure``): texts sorted longest first, so that a batch
  holds texts of similar length and carries little padding; the clouds do not depend on the
  order (a token sample is drawn with its own seeded keys).
* :func:`ordered_batches` (``analyze``, Sigma_S): texts in their given order, as the
  evaluations of ``isotropy train`` read them (its token cap takes the *first* tokens), with
  decoder position ids and SQuAD windows.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import torch

from isotropy.models.loading import ensure_pad_token, longest_input
from isotropy.probing.inputs import Text

__all__ = ["capped_max_length", "longest_first_batches", "ordered_batches"]

MODEL_KEYS = ("input_ids", "attention_mask", "token_type_ids")


def capped_max_length(tokenizer: Any, max_length: int, model_config: Any = None) -> int:
    """``max_length``, capped by the most tokens the model takes: the tokenizer's own
    ``model_max_length`` when it sets one (Hugging Face uses a huge number for "no limit"),
    and with ``model_config`` its position table
    (:func:`~isotropy.models.loading.longest_input`).

    >>> from types import SimpleNamespace
    >>> capped_max_length(SimpleNamespace(model_max_length=64), 128)
    64
    >>> capped_max_length(SimpleNamespace(model_max_length=10**30), 128,
    ...                   SimpleNamespace(max_position_embeddings=32, model_type="bert"))
    32
    """
    limit, _ = longest_input(model_config, tokenizer)
    return max_length if limit is None else min(max_length, limit)


def longest_first_batches(tokenizer: Any, texts: Sequence[Text], *, pairs: bool,
                          batch_size: int, max_length: int) -> Iterator[dict[str, torch.Tensor]]:
    """Batches of ``texts`` truncated at ``max_length`` (see :func:`capped_max_length`),
    longest first (ties in text order), each padded to its longest text."""
    ensure_pad_token(tokenizer)
    if pairs:
        enc = tokenizer([t[0] for t in texts], [t[1] for t in texts], truncation=True,
                        max_length=max_length)
    else:
        enc = tokenizer(list(texts), truncation=True, max_length=max_length)
    keys = [key for key in MODEL_KEYS if key in enc]
    lengths = [len(ids) for ids in enc["input_ids"]]
    order = sorted(range(len(texts)), key=lambda i: -lengths[i])
    for s in range(0, len(order), batch_size):
        feats = [{key: enc[key][i] for key in keys} for i in order[s:s + batch_size]]
        yield dict(tokenizer.pad(feats, padding=True, return_tensors="pt"))


def ordered_batches(tokenizer: Any, texts: Sequence[Text], *, batch_size: int, max_length: int,
                    decoder: bool, doc_stride: int | None = None
                    ) -> Iterator[dict[str, torch.Tensor]]:
    """Model inputs of ``texts`` in order, tokenized batch by batch and padded on the
    tokenizer's side; decoders also get ``position_ids = cumsum(mask) - 1`` (0 on padding),
    so that a text's states do not depend on the padding side or its batch. With
    ``doc_stride``, each (question, context) of a batch gives all its SQuAD windows (so a
    batch may hold more than ``batch_size`` rows)."""
    for s in range(0, len(texts), batch_size):
        chunk = texts[s:s + batch_size]
        if doc_stride is not None:
            enc = tokenizer([t[0].lstrip() for t in chunk], [t[1] for t in chunk],
                            truncation="only_second", max_length=max_length, stride=doc_stride,
                            return_overflowing_tokens=True, padding=True, return_tensors="pt")
        elif isinstance(chunk[0], (tuple, list)):
            enc = tokenizer([t[0] for t in chunk], [t[1] for t in chunk], truncation=True,
                            max_length=max_length, padding=True, return_tensors="pt")
        else:
            enc = tokenizer(list(chunk), truncation=True, max_length=max_length, padding=True,
                            return_tensors="pt")
        batch = {k: enc[k] for k in MODEL_KEYS if k in enc}
        if decoder:
            mask = batch["attention_mask"].long()
            batch["position_ids"] = (mask.cumsum(1) - 1).clamp(min=0)
        yield batch
