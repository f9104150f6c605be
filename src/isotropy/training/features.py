"""Task examples -> tokenised features (a torch ``Dataset``), seeded subsets and dev splits.

Features are unpadded lists of token ids; batches are padded per batch by
``transformers.DataCollatorWithPadding`` (dynamic padding), so length-bucketed sampling
(``--group_by_length``) removes most padding.

Classification and regression: one feature per example with ``labels``. SQuAD: one feature
per window of an example (:func:`isotropy.data.squad.squad_features`) with
``start_positions`` / ``end_positions``; the dataset keeps the windows (example index and
character offsets) for post-processing.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from isotropy.data.glue import Example, TaskSpec
from isotropy.data.squad import SquadFeatures, squad_features

__all__ = [
    "TaskDataset",
    "seeded_subset",
    "split_examples",
    "tokenize_examples",
    "tokenize_squad",
]


def seeded_subset(examples: Sequence[Example], k: int | None, seed: int) -> list[Example]:
    """``k`` examples drawn without replacement with ``seed``, in their original order
    (all of them when ``k`` is ``None`` or at least ``len(examples)``).

    >>> ex = [Example(str(i), "t", None, 0) for i in range(10)]
    >>> [e.guid for e in seeded_subset(ex, 3, seed=0)] == [e.guid for e in seeded_subset(ex, 3, 0)]
    True
    """
    if k is None or k >= len(examples):
        return list(examples)
    idx = np.sort(np.random.default_rng(seed).permutation(len(examples))[:k])
    return [examples[i] for i in idx]


def split_examples(
    examples: Sequence[Example], train_fraction: float, seed: int,
    groups: Sequence[Hashable] | None = None,
) -> tuple[list[Example], list[Example]]:
    """A seeded, disjoint split: ``round(train_fraction * n)`` examples for training, the rest
    for evaluation (each part keeps the original order). With ``groups`` (one key per
    example), whole groups go to one side: ``round(train_fraction * n_groups)`` groups for
    training, so no group is in both parts (SQuAD: questions on one context paragraph).

    >>> ex = [Example(str(i), "t", None, 0) for i in range(10)]
    >>> a, b = split_examples(ex, 0.7, seed=1)
    >>> len(a), len(b), set(e.guid for e in a).isdisjoint(e.guid for e in b)
    (7, 3, True)
    >>> a, b = split_examples(ex, 0.5, seed=1, groups=[i // 4 for i in range(10)])
    >>> sorted({int(e.guid) // 4 for e in a} & {int(e.guid) // 4 for e in b})
    []
    """
    n = len(examples)
    if groups is not None and len(groups) != n:
        raise ValueError(f"{len(groups)} group keys for {n} examples")
    keys = list(dict.fromkeys(groups)) if groups is not None else list(range(n))
    k = int(round(train_fraction * len(keys)))
    if k < 1 or k >= len(keys):
        unit = "groups" if groups is not None else "examples"
        raise ValueError(
            f"--split_dev_for_training {train_fraction} of {len(keys)} {unit} leaves an empty "
            "part"
        )
    perm = np.random.default_rng(seed).permutation(len(keys))
    train_keys = {keys[i] for i in perm[:k]}
    member = groups if groups is not None else range(n)
    train = [e for e, g in zip(examples, member, strict=True) if g in train_keys]
    evaluation = [e for e, g in zip(examples, member, strict=True) if g not in train_keys]
    return train, evaluation


@dataclass
class TaskDataset(torch.utils.data.Dataset):
    """Tokenised examples: item ``i`` is a dict of id lists plus ``labels`` (int or float), or
    for SQuAD one window with ``start_positions`` and ``end_positions`` (then ``windows``
    maps every item to its example and its tokens to context characters)."""

    features: list[dict[str, Any]]
    examples: list[Example]
    windows: SquadFeatures | None = None

    def __len__(self) -> int:
        return len(self.features)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return self.features[i]


def tokenize_examples(
    examples: Sequence[Example], tokenizer: Any, spec: TaskSpec, max_seq_length: int
) -> TaskDataset:
    """Tokenise single sentences or pairs (truncated to ``max_seq_length``), unpadded."""
    if not examples:
        raise ValueError(f"no {spec.display_name} examples to tokenise")
    if any(e.label is None for e in examples):
        raise ValueError(f"{spec.display_name}: unlabelled examples cannot be trained on")
    a = [e.text_a for e in examples]
    b = [e.text_b for e in examples] if spec.is_pair else None
    enc = tokenizer(a, b, truncation=True, max_length=max_seq_length)
    keys = [k for k in enc if k in ("input_ids", "attention_mask", "token_type_ids")]
    cast = float if spec.kind == "regression" else int
    features = [
        {**{k: enc[k][i] for k in keys}, "labels": cast(e.label)} for i, e in enumerate(examples)
    ]
    return TaskDataset(features, list(examples))


def tokenize_squad(
    examples: Sequence[Example], tokenizer: Any, max_seq_length: int, doc_stride: int
) -> TaskDataset:
    """SQuAD windows (``max_seq_length`` tokens, ``doc_stride`` shared context tokens), each
    an item with its start/end token labels (0, 0 = [CLS] when the window lacks the answer)."""
    if not examples:
        raise ValueError("no SQuAD v1.1 examples to tokenise")
    unanswered = [e.guid for e in examples if not e.answers]
    if unanswered:
        raise ValueError(
            f"SQuAD v1.1: example {unanswered[0]!r} has no gold answer and cannot be trained on"
        )
    windows = squad_features(tokenizer, examples, max_seq_length=max_seq_length,
                             doc_stride=doc_stride)
    features = [
        {
            **{k: ids[f] for k, ids in windows.inputs.items()},
            "start_positions": windows.start_positions[f],
            "end_positions": windows.end_positions[f],
        }
        for f in range(len(windows))
    ]
    return TaskDataset(features, list(examples), windows)
