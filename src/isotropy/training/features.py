"""Task examples -> tokenised features (a torch ``Dataset``).

Features are unpadded lists of token ids; batches are padded per batch by
``transformers.DataCollatorWithPadding`` (dynamic padding), so length-bucketed sampling
(``--group_by_length``) removes most padding.

Classification and regression: one feature per example with ``labels``. SQuAD: one feature
per window of an example (:func:`isotropy.data.squad.squad_features`) with
``start_positions`` / ``end_positions``; the dataset keeps the windows (example index and
character offsets) for post-processing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from isotropy.data.glue import Example, TaskSpec
from isotropy.data.splits import seeded_subset, split_examples  # noqa: F401 (re-exported)
from isotropy.data.squad import SquadFeatures, squad_features

__all__ = [
    "TaskDataset",
    "seeded_subset",
    "split_examples",
    "tokenize_examples",
    "tokenize_squad",
]


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
