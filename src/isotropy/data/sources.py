"""Train/eval examples of ``isotropy train`` from one of two sources, ``--data_source``:

* ``local`` (default): a directory in the classic ``glue_data/`` layout (``--data_dir``,
  default ``$GLUE_DIR``), read by :func:`~isotropy.data.glue.load_split`;
* ``hub``: the task's Hugging Face dataset through ``datasets``
  (:mod:`isotropy.data.hub`; ``pip install isotropy[hub]``).

Both give the same :class:`~isotropy.data.glue.Example` lists; what is done with them is the
same for both: ``--split_dev_for_training f`` splits the dev split into ``round(f*n)`` training
and ``n - round(f*n)`` evaluation examples (seeded with the run's seed; for SQuAD, ``n``
counts context paragraphs, whose questions stay together on one side), then
``--max_train_samples`` / ``--max_eval_samples`` draw seeded subsets (seeds ``seed`` and
``seed + 1``). Every split a run needs is located before any is read; a missing file or an
unreachable hub raises a one-line error first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from isotropy.data.glue import Example, get_task, load_split, require_split
from isotropy.data.splits import seeded_subset, split_examples

__all__ = ["DATA_SOURCES", "DataSettings", "TaskData", "check_data_source", "load_splits",
           "load_task_data"]

DATA_SOURCES = ("local", "hub")


@dataclass
class TaskData:
    """Train/eval examples and where they came from (recorded in ``config.json``)."""

    train: list[Example]
    eval: list[Example]
    source: dict[str, Any]


def check_data_source(name: str) -> str:
    """The canonical ``--data_source`` value; ``ValueError`` for an unknown one, and for
    ``hub`` when ``datasets`` is not installed.

    >>> check_data_source(" Local ")
    'local'
    """
    value = str(name).strip().lower()
    if value not in DATA_SOURCES:
        raise ValueError(f"--data_source must be one of {', '.join(DATA_SOURCES)}, got {name!r}")
    if value == "hub":
        from isotropy.data.hub import require_datasets

        require_datasets()
    return value


def load_splits(
    task: str, splits: Sequence[str], *, source: str = "local", data_dir: str | None = None
) -> tuple[dict[str, list[Example]], dict[str, Any], dict[str, str]]:
    """Examples of ``splits`` (``train``, ``dev``, ``test``) of a task from ``source``.

    Returns the examples per split, a description of the source (``kind``, ``task``, and
    ``data_dir`` or the hub ``dataset`` / ``config`` / ``revision``) and, per split, where it
    came from (a file path, or the hub's split name).
    """
    spec = get_task(task)
    if check_data_source(source) == "hub":
        from isotropy.data.hub import load_hub_splits

        examples, info = load_hub_splits(spec.name, splits)
        where = dict(info.pop("splits"))
        return examples, info, where
    paths = {s: require_split(spec.name, s, data_dir) for s in splits}
    info = {"kind": "local", "task": spec.name,
            "data_dir": str(next(iter(paths.values())).parent.parent)}
    examples = {s: load_split(spec.name, s, data_dir) for s in splits}
    return examples, info, {s: str(p) for s, p in paths.items()}


class DataSettings(Protocol):
    """The data settings :func:`load_task_data` reads (``isotropy train``'s
    :class:`~isotropy.training.config.IsotropyArguments` has them)."""

    task: str
    data_source: str
    data_dir: str | None
    split_dev_for_training: float | None
    validation_split_percentage: int | None
    max_train_samples: int | None
    max_eval_samples: int | None


def load_task_data(settings: DataSettings, seed: int) -> TaskData:
    """The train and eval examples of ``settings.task`` from ``settings.data_source``, with the
    seeded dev split and subsets of the module docstring."""
    spec = get_task(settings.task)
    split_dev = settings.split_dev_for_training is not None
    held_out = getattr(settings, "validation_split_percentage", None)
    splits = ("dev",) if split_dev else ("train",) if held_out is not None else ("dev", "train")
    examples, source, where = load_splits(spec.name, splits, source=settings.data_source,
                                          data_dir=settings.data_dir)
    key = "file" if source["kind"] == "local" else "split"
    span = spec.kind == "span"
    for split, found in examples.items():  # before any split or subset hides which file
        if not span and any(e.label is None for e in found):
            raise ValueError(f"{where[split]}: {spec.display_name}'s {split} split has no "
                             f"labels (no column {spec.columns[2]!r}): training and its "
                             "evaluation need labelled examples")
    unit = "context paragraph" if span else "example"
    if split_dev:
        groups = [e.text_b for e in examples["dev"]] if span else None
        train, evaluation = split_examples(examples["dev"], settings.split_dev_for_training, seed,
                                           groups=groups)
        source.update({f"train_{key}": where["dev"], f"eval_{key}": where["dev"],
                       "split_dev_for_training": settings.split_dev_for_training,
                       "split_seed": seed, "split_unit": unit})
    elif held_out is not None:  # the dev split is not read
        groups = [e.text_b for e in examples["train"]] if span else None
        train, evaluation = split_examples(
            examples["train"], 1.0 - held_out / 100.0, seed, groups=groups,
            option=f"--validation_split_percentage {held_out}")
        source.update({f"train_{key}": where["train"], f"eval_{key}": where["train"],
                       "validation_split_percentage": held_out,
                       "split_seed": seed, "split_unit": unit})
    else:
        train, evaluation = examples["train"], examples["dev"]
        source.update({f"train_{key}": where["train"], f"eval_{key}": where["dev"]})
    source.update(n_train_available=len(train), n_eval_available=len(evaluation))
    train = seeded_subset(train, settings.max_train_samples, seed)
    evaluation = seeded_subset(evaluation, settings.max_eval_samples, seed + 1)
    source.update(n_train=len(train), n_eval=len(evaluation), subset_seeds=[seed, seed + 1])
    if not train or not evaluation:
        raise ValueError(f"{spec.display_name}: the train or eval set is empty")
    return TaskData(train, evaluation, source)
