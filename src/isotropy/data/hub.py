"""Task data from the Hugging Face hub through ``datasets`` (the optional ``isotropy[hub]``).

Each task maps to one hub dataset (:data:`HUB_DATASETS`): the GLUE tasks to ``nyu-mll/glue``
(configs ``sst2``, ``qnli``, ``rte``, ``mrpc``, ``qqp``, ``cola``, ``stsb``), SST-5 to
``SetFit/sst5`` and SQuAD v1.1 to ``rajpurkar/squad``. Rows become the same
:class:`~isotropy.data.glue.Example` objects as the local loader's:

* splits: ours ``train`` / ``dev`` / ``test`` are the hub's ``train`` / ``validation`` / ``test``;
* labels: GLUE's class indices are the local label indices (the hub's class names are checked,
  e.g. MRPC ``0 = not_equivalent``); GLUE marks unlabelled test rows with ``-1``, which becomes
  ``None`` (STS-B: float32 scores in [0, 5], read back as their shortest decimal, 3.8 rather
  than 3.799999952316284, as in the local TSV; ``-1.0`` on test); SST-5 labels are 0..4 (the local
  ``__label__N`` minus 1), checked against the ``label_text`` column where present;
* guids: ``"<split>-<idx>"`` from GLUE's ``idx`` column, which is the row's position in its
  split and so equals the local guid except for QQP (locally the TSV's pair ``id``);
  ``"<split>-<row>"`` for SST-5; the question ``id`` for SQuAD, whose ``answers`` column
  (``{"text": [...], "answer_start": [...]}``) becomes :class:`~isotropy.data.glue.Answer` s.

A hub that cannot be reached (``HF_HUB_OFFLINE=1``, no network) and a missing ``datasets``
package raise a one-line ``ValueError`` naming the way out: ``pip install isotropy[hub]`` or
local files with ``--data_source local --data_dir DIR``.
"""

from __future__ import annotations

import importlib.util
import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from isotropy.data.glue import SPLITS, Answer, Example, TaskSpec, check_score, get_task

__all__ = [
    "HUB_DATASETS",
    "HubDataset",
    "HubUnavailableError",
    "examples_from_columns",
    "hub_dataset",
    "load_hub_splits",
    "require_datasets",
]

_WAY_OUT = "or use local files with --data_source local --data_dir DIR (classic glue_data/ layout)"


class HubUnavailableError(ConnectionError, ValueError):
    """The hub dataset cannot be loaded (offline, unreachable): a ``ConnectionError`` that
    command-line error handling treats as bad input (``ValueError``)."""


@dataclass(frozen=True)
class HubDataset:
    """Where a task lives on the hub and how its columns map onto :class:`Example`.

    ``text_a`` / ``text_b``: the text columns (``text_b=None`` for single sentences).
    ``label``: the label column (``None`` for SQuAD). ``guid``: the id column, or ``None`` to
    number rows by position. ``label_names``: the expected class names of a ``ClassLabel``
    label, in index order. ``splits``: our split name -> the hub's.
    """

    path: str
    config: str | None
    text_a: str
    text_b: str | None
    label: str | None = "label"
    guid: str | None = "idx"
    label_names: tuple[str, ...] | None = None
    splits: tuple[tuple[str, str], ...] = (
        ("train", "train"), ("dev", "validation"), ("test", "test"))

    @property
    def name(self) -> str:
        """``path`` or ``path/config``."""
        return f"{self.path}/{self.config}" if self.config else self.path

    def hub_split(self, split: str) -> str:
        """The hub's name of our ``split``; ``ValueError`` for a split the dataset lacks."""
        table = dict(self.splits)
        if split not in table:
            raise ValueError(
                f"{self.name} has no {split!r} split; available: {', '.join(table)}"
            )
        return table[split]


_GLUE = "nyu-mll/glue"
HUB_DATASETS: dict[str, HubDataset] = {
    "sst2": HubDataset(_GLUE, "sst2", "sentence", None, label_names=("negative", "positive")),
    "qnli": HubDataset(_GLUE, "qnli", "question", "sentence",
                       label_names=("entailment", "not_entailment")),
    "rte": HubDataset(_GLUE, "rte", "sentence1", "sentence2",
                      label_names=("entailment", "not_entailment")),
    "mrpc": HubDataset(_GLUE, "mrpc", "sentence1", "sentence2",
                       label_names=("not_equivalent", "equivalent")),
    "qqp": HubDataset(_GLUE, "qqp", "question1", "question2",
                      label_names=("not_duplicate", "duplicate")),
    "cola": HubDataset(_GLUE, "cola", "sentence", None,
                       label_names=("unacceptable", "acceptable")),
    "stsb": HubDataset(_GLUE, "stsb", "sentence1", "sentence2"),
    "sst5": HubDataset("SetFit/sst5", None, "text", None, guid=None),
    "squad": HubDataset("rajpurkar/squad", None, "question", "context", label=None, guid="id",
                        splits=(("train", "train"), ("dev", "validation"))),
}


def hub_dataset(task: str) -> HubDataset:
    """The :class:`HubDataset` of a task (any spelling :func:`get_task` accepts).

    >>> hub_dataset("STS-B").name, hub_dataset("sst5").hub_split("dev")
    ('nyu-mll/glue/stsb', 'validation')
    """
    return HUB_DATASETS[get_task(task).name]


def require_datasets() -> None:
    """``ValueError`` with the install command when ``datasets`` is not importable."""
    if importlib.util.find_spec("datasets") is None:
        raise ValueError(
            "--data_source hub needs the Hugging Face datasets package: "
            f"pip install 'isotropy[hub]', {_WAY_OUT}"
        )


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in {"1", "ON", "YES", "TRUE"}


def _unavailable(hub: HubDataset, err: BaseException) -> HubUnavailableError:
    first = (str(err).splitlines() or [""])[0]
    why = " (HF_HUB_OFFLINE is set)" if _offline() else ""
    return HubUnavailableError(
        f"could not load the hub dataset {hub.name}{why}: {type(err).__name__}: {first}; "
        f"run where the hub can be reached (pip install 'isotropy[hub]'), {_WAY_OUT}"
    )


def _revision(dataset: Any) -> str | None:
    """The hub commit a loaded split came from: the 40-hex directory of its cache files
    (``datasets`` caches under ``<name>/<config>/<version>/<commit>/``), else ``None``."""
    for entry in getattr(dataset, "cache_files", None) or []:
        for part in reversed(os.path.normpath(str(entry.get("filename", ""))).split(os.sep)):
            if re.fullmatch(r"[0-9a-f]{40}", part):
                return part
    return None


def _label_names(dataset: Any, column: str) -> list[str] | None:
    feature = getattr(dataset, "features", {}).get(column)
    names = getattr(feature, "names", None)
    return list(names) if names is not None else None


def _label(spec: TaskSpec, value: Any, where: str) -> int | float | None:
    """A hub label as the local loader's: ``None`` for GLUE's unlabelled ``-1``."""
    if value is None:
        return None
    if spec.kind == "regression":
        score = float(value)
        if not math.isfinite(score):
            raise ValueError(f"{where}: score {value!r} is not a finite number")
        if float(np.float32(score)) == score:  # a float32 column: its shortest decimal
            score = float(str(np.float32(score)))
        return None if score < 0 else check_score(spec, score, where)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{where}: label {value!r} is not a class index")
    if value == -1:
        return None
    if not 0 <= value < spec.num_labels:
        raise ValueError(f"{where}: label {value} is outside 0..{spec.num_labels - 1}")
    return value


def _answers(column: Any, context: str, where: str) -> tuple[Answer, ...]:
    if not isinstance(column, Mapping) or not {"text", "answer_start"} <= set(column):
        raise ValueError(f"{where}: answers must be a dict with 'text' and 'answer_start'")
    texts, starts = list(column["text"]), list(column["answer_start"])
    if len(texts) != len(starts):
        raise ValueError(f"{where}: {len(texts)} answer texts but {len(starts)} answer_start")
    out = []
    for text, start in zip(texts, starts, strict=True):
        if not 0 <= int(start) <= len(context):
            raise ValueError(
                f"{where}: answer_start = {start} lies outside the context (0..{len(context)})"
            )
        out.append(Answer(text=str(text), start=int(start)))
    return tuple(out)


def _needed_columns(hub: HubDataset) -> list[str]:
    cols = [hub.text_a, hub.text_b, hub.label, hub.guid]
    if hub.label is None:
        cols.append("answers")
    return [c for c in cols if c is not None]


def examples_from_columns(
    task: str, split: str, columns: Mapping[str, Sequence[Any]], *, where: str = "hub"
) -> list[Example]:
    """:class:`Example` s of one split from the hub's columns (column name -> values).

    ``split`` is ours (``train``, ``dev``, ``test``); it prefixes the guids. ``where`` names
    the data in error messages. SST-5's ``label_text``, when given, must agree with the label.
    """
    spec = get_task(task)
    hub = HUB_DATASETS[spec.name]
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; use one of {', '.join(SPLITS)}")
    missing = [c for c in _needed_columns(hub) if c not in columns]
    if missing:
        raise ValueError(
            f"{where}: no column {missing[0]!r} (found {sorted(columns)}); "
            f"is this {hub.name}?"
        )
    n = len(columns[hub.text_a])
    label_text = columns.get("label_text") if spec.name == "sst5" else None
    out: list[Example] = []
    for i in range(n):
        at = f"{where}[{i}]"
        guid = str(columns[hub.guid][i]) if hub.guid is not None else str(i)
        text_a = columns[hub.text_a][i]
        text_b = columns[hub.text_b][i] if hub.text_b is not None else None
        if spec.kind == "span":
            out.append(Example(guid=guid, text_a=text_a, text_b=text_b, label=None,
                               answers=_answers(columns["answers"][i], text_b or "", at)))
            continue
        label = _label(spec, columns[hub.label][i], at) if hub.label is not None else None
        if label_text is not None and label is not None and \
                label_text[i] != spec.label_list[int(label)]:
            raise ValueError(
                f"{at}: label {label} is {spec.label_list[int(label)]!r} here but the row's "
                f"label_text is {label_text[i]!r}"
            )
        out.append(Example(guid=f"{split}-{guid}", text_a=text_a, text_b=text_b, label=label))
    return out


def load_hub_splits(
    task: str, splits: Sequence[str], *, revision: str | None = None
) -> tuple[dict[str, list[Example]], dict[str, Any]]:
    """Load ``splits`` (ours: ``train``, ``dev``, ``test``) of a task from the hub.

    Returns the examples per split and a description for ``config.json``: ``kind='hub'``,
    ``dataset``, ``config``, ``revision`` (the commit actually loaded where ``datasets``
    reveals it, else the one asked for), and ``splits`` (ours -> the hub's). Raises
    ``ValueError`` without ``datasets``, :class:`HubUnavailableError` when the hub cannot be
    reached and the dataset is not in the local ``datasets`` cache.
    """
    spec = get_task(task)
    hub = HUB_DATASETS[spec.name]
    names = {s: hub.hub_split(s) for s in splits}
    require_datasets()
    import datasets

    try:
        loaded = datasets.load_dataset(hub.path, hub.config, revision=revision)
    except (OSError, TimeoutError) as err:  # ConnectionError, offline mode, not found
        raise _unavailable(hub, err) from err
    out: dict[str, list[Example]] = {}
    resolved: str | None = None
    for split, name in names.items():
        if name not in loaded:
            raise ValueError(f"{hub.name} has no split {name!r} (found {list(loaded)})")
        ds = loaded[name]
        where = f"{hub.name}:{name}"
        expected = hub.label_names
        found = _label_names(ds, hub.label) if hub.label is not None else None
        if expected is not None and found is not None and tuple(found) != expected:
            raise ValueError(
                f"{where}: label classes are {found}, expected {list(expected)}; "
                "the hub dataset changed its label convention"
            )
        cols = [c for c in (*_needed_columns(hub), "label_text") if c in ds.column_names]
        out[split] = examples_from_columns(spec.name, split, ds.select_columns(cols).to_dict(),
                                           where=where)
        resolved = resolved or _revision(ds)
    source = {"kind": "hub", "task": spec.name, "dataset": hub.path, "config": hub.config,
              "revision": resolved or revision, "splits": names}
    return out, source
