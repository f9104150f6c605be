"""Seeded subsets of a task's examples and seeded train/eval splits of its dev split."""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np

from isotropy.data.glue import Example

__all__ = ["seeded_subset", "split_examples"]


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
    groups: Sequence[Hashable] | None = None, *, option: str | None = None,
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
        given = option or f"--split_dev_for_training {train_fraction}"
        raise ValueError(f"{given} of {len(keys)} {unit} leaves an empty part")
    perm = np.random.default_rng(seed).permutation(len(keys))
    train_keys = {keys[i] for i in perm[:k]}
    member = groups if groups is not None else range(n)
    train = [e for e, g in zip(examples, member, strict=True) if g in train_keys]
    evaluation = [e for e, g in zip(examples, member, strict=True) if g not in train_keys]
    return train, evaluation
