"""What a probe reads, checked before any model runs: the texts (a file, a local GLUE split,
or the built-in sentences), the device, and the numeric options.

Texts are strings or ``(text_a, text_b)`` pairs (sentence-pair tasks; SQuAD gives (question,
context)); a model never sees a ``max_length`` its tokenizer cannot truncate to.
"""

from __future__ import annotations

import io
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from isotropy.data.glue import get_task, load_split, split_path
from isotropy.io import not_found, read_text_utf8

__all__ = [
    "BUILTIN_SENTENCES",
    "DEFAULT_MAX_TEXTS",
    "Text",
    "check_max_length",
    "check_positive",
    "check_texts",
    "load_texts",
    "min_max_length",
    "resolve_device",
]

DEFAULT_MAX_TEXTS = 512

Text = str | tuple[str, str]

BUILTIN_SENTENCES: tuple[str, ...] = (
    "The cat sat quietly on the warm windowsill.",
    "Stock markets fell sharply after the announcement.",
    "She plays the violin in a small orchestra.",
    "Heavy rain is expected across the north tomorrow.",
    "The new phone has a larger screen and a faster chip.",
    "He forgot his keys at the office again.",
    "Photosynthesis turns light into chemical energy.",
    "The museum opens at nine on weekdays.",
    "A good night's sleep improves memory.",
    "The committee postponed its decision until spring.",
    "Children were building a sandcastle on the beach.",
    "This film is a charming and often affecting journey.",
    "The soup was cold and the service was painfully slow.",
    "Quantum computers exploit superposition and entanglement.",
    "The river flooded the village after the storm.",
    "Our team won the match in the final minute.",
    "Please send me the report before Friday.",
    "The old library smelled of dust and paper.",
    "Electric cars are becoming cheaper every year.",
    "The recipe calls for two cups of flour.",
    "Migrating birds fly thousands of kilometres each autumn.",
    "The lecture on medieval history was surprisingly funny.",
    "A thick fog covered the harbour at dawn.",
    "The startup raised money from several investors.",
    "He apologised for arriving late to the interview.",
    "Volcanic ash grounded flights across the region.",
    "The novel's ending left many readers unsatisfied.",
    "Fresh bread is sold at the corner bakery.",
    "The judge dismissed the case for lack of evidence.",
    "Her garden is full of roses and lavender.",
    "The train to the airport leaves every fifteen minutes.",
    "Scientists discovered a new species of frog.",
    "The concert was cancelled because of the heat.",
    "My grandmother tells wonderful stories about her youth.",
    "The software update fixed several security bugs.",
    "A small boat drifted slowly across the lake.",
    "The price of coffee has doubled since last year.",
    "Students gathered in the hall for the exam.",
    "The mountain trail is closed during winter.",
    "This is the worst movie I have seen in years.",
)



def load_texts(
    *,
    texts_file: str | os.PathLike[str] | None = None,
    task: str | None = None,
    split: str = "dev",
    data_dir: str | os.PathLike[str] | None = None,
    max_texts: int | None = DEFAULT_MAX_TEXTS,
) -> tuple[list[Text], dict[str, Any]]:
    """Texts to measure and a description of where they came from.

    Exactly one of ``texts_file`` (UTF-8, one text per line, blank lines skipped) or ``task``
    (a local GLUE split, see :mod:`isotropy.data.glue`; sentence-pair tasks give pairs, SQuAD
    gives (question, context)) must be given. The first ``max_texts`` texts are kept
    (``None``: all).
    """
    if (texts_file is None) == (task is None):
        raise ValueError("give exactly one of texts_file or task")
    if max_texts is not None and max_texts < 1:
        raise ValueError(f"max_texts must be >= 1, got {max_texts}")
    texts: list[Text]
    if texts_file is not None:
        path = Path(texts_file)
        if (why := not_found(path)) is not None:
            raise FileNotFoundError(f"texts file {path} {why}")
        with io.StringIO(read_text_utf8(path)) as f:
            texts = [line.rstrip("\r\n") for line in f if line.strip()]
        if not texts:
            raise ValueError(f"texts file {path} has no non-blank line")
        source: dict[str, Any] = {"kind": "file", "path": str(path.resolve())}
    else:

        spec = get_task(str(task))
        examples = load_split(spec.name, split, data_dir)
        if not examples:
            raise ValueError(f"{spec.display_name} {split} split is empty")
        texts = [e.text_a if e.text_b is None else (e.text_a, e.text_b) for e in examples]
        source = {
            "kind": "task",
            "task": spec.name,
            "split": split,
            "path": str(split_path(spec.name, split, data_dir)),
            "pairs": spec.is_pair,
        }
    source["available"] = len(texts)
    if max_texts is not None:
        texts = texts[:max_texts]
    source["used"] = len(texts)
    return texts, source


def resolve_device(device: str | torch.device | None) -> torch.device:
    """The torch device a name means (``auto``/``None``: CUDA when available, else CPU);
    ``ValueError`` for a name torch does not know or CUDA on a machine without it.

    >>> resolve_device("cpu")
    device(type='cpu')
    """
    if device is None or str(device) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError) as err:
        raise ValueError(f"{device!r} is not a torch device (use auto, cpu, cuda, cuda:N)") from err
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r}: CUDA is not available on this machine")
    return dev


def check_positive(name: str, value: int) -> None:
    """``ValueError`` unless ``value`` is a positive integer (``bool`` is not one).

    >>> check_positive("batch_size", 0)
    Traceback (most recent call last):
    ...
    ValueError: batch_size must be a positive integer, got 0
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


def check_texts(texts: Sequence[Text]) -> bool:
    """At least 2 texts, all strings or all ``(a, b)`` string pairs; returns whether pairs.

    >>> check_texts(["a", "b"]), check_texts([("a", "b"), ("c", "d")])
    (False, True)
    """
    if len(texts) < 2:
        raise ValueError(f"need at least 2 texts, got {len(texts)}")
    pairs = [isinstance(t, (tuple, list)) for t in texts]
    if any(pairs) and not all(pairs):
        raise ValueError("texts must be all strings or all (text_a, text_b) pairs, not a mix")
    for i, t in enumerate(texts):
        parts = t if isinstance(t, (tuple, list)) else (t,)
        if len(parts) not in (1, 2) or (pairs[i] and len(parts) != 2) or not all(
            isinstance(part, str) for part in parts
        ):
            raise ValueError(f"text {i} is {t!r}: expected a string or a (text_a, text_b) pair")
    return all(pairs)


def min_max_length(tokenizer: Any, *, pairs: bool = False) -> int:
    """The smallest ``max_length`` that ``tokenizer`` can truncate to: its special tokens per
    text (or per pair), e.g. 2 for BERT's ``[CLS] a [SEP]`` and 3 for ``[CLS] a [SEP] b [SEP]``.

    A smaller ``max_length`` is not honoured by Hugging Face tokenizers: they return the whole
    text (with a logged warning only).
    """
    return max(1, int(tokenizer.num_special_tokens_to_add(pair=pairs)))


def check_max_length(tokenizer: Any, max_length: int, pairs: bool) -> None:
    """``ValueError`` when ``max_length`` is below :func:`min_max_length`."""
    least = min_max_length(tokenizer, pairs=pairs)
    if max_length < least:
        what = "sentence pair" if pairs else "text"
        raise ValueError(
            f"max_length {max_length} is too small: the tokenizer adds {least} special "
            f"token(s) to every {what}, so the smallest valid max_length is {least}"
        )
