"""SQuAD v1.1 span extraction: windowed features, n-best post-processing, EM / F1.

A (question, context) pair longer than ``max_seq_length`` tokens is cut into overlapping
windows of the context ("features"): each window holds the question, then a slice of the
context, consecutive windows sharing ``doc_stride`` context tokens (Hugging Face's
``return_overflowing_tokens`` with ``stride``). For training, a window whose context does not
contain the whole first gold answer is labelled with the [CLS] position (0, 0), as BERT's
original SQuAD code does.

Post-processing: in every window of an example, the ``n_best`` highest start and end logits
over context tokens are paired; spans with ``end < start`` or longer than
``max_answer_length`` tokens are dropped; the best ``start_logit + end_logit`` over all windows
wins and its character offsets cut the answer text out of the context.

Exact match and F1 use the official SQuAD v1.1 answer normalisation (lower case, no
punctuation, no articles ``a``/``an``/``the``, single spaces), maximised over the gold answers,
as computed by ``torchmetrics.functional.text.squad``; reported in percent.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from isotropy.data.glue import Example

__all__ = [
    "SquadFeatures",
    "check_question_room",
    "squad_features",
    "squad_metrics",
    "postprocess_predictions",
]


@dataclass
class SquadFeatures:
    """Tokenised windows of SQuAD examples.

    ``inputs``: model inputs per window (``input_ids``, ``attention_mask``, and
    ``token_type_ids`` where the tokenizer makes them), lists of lists (not padded).
    ``example_index[f]``: the example window ``f`` came from. ``offsets[f][t]``: the
    ``(start, end)`` character span of token ``t`` in the context, ``None`` for question and
    special tokens. ``start_positions`` / ``end_positions``: training labels (token indices;
    0 = [CLS] when the window does not hold the whole answer).
    """

    inputs: dict[str, list[list[int]]]
    example_index: list[int]
    offsets: list[list[tuple[int, int] | None]]
    start_positions: list[int]
    end_positions: list[int]

    def __len__(self) -> int:
        return len(self.example_index)


def _check_window(tokenizer: Any, max_seq_length: int, doc_stride: int) -> None:
    if not getattr(tokenizer, "is_fast", False):
        raise ValueError(
            "SQuAD features need a fast (Rust) tokenizer for character offsets; "
            f"{type(tokenizer).__name__} is not one"
        )
    for name, value in (("max_seq_length", max_seq_length), ("doc_stride", doc_stride)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if doc_stride >= max_seq_length:
        raise ValueError(
            f"doc_stride ({doc_stride}) must be smaller than max_seq_length ({max_seq_length})"
        )


def check_question_room(tokenizer: Any, questions: Sequence[str], max_length: int,
                        doc_stride: int, length_name: str = "max_seq_length") -> None:
    """``ValueError`` unless a window of ``max_length`` tokens leaves more than ``doc_stride``
    context tokens next to the longest of ``questions`` (leading white space stripped) and the
    pair's special tokens; ``length_name`` is the flag named in the message."""
    ids = tokenizer([q.lstrip() for q in questions], add_special_tokens=False)["input_ids"]
    longest = max(len(x) for x in ids)
    room = max_length - longest - tokenizer.num_special_tokens_to_add(pair=True)
    if room <= doc_stride:
        raise ValueError(
            f"{length_name} {max_length} leaves {room} context tokens next to the longest "
            f"question ({longest} tokens); it must exceed doc_stride ({doc_stride}): raise "
            f"{length_name} or lower doc_stride"
        )


def squad_features(
    tokenizer: Any,
    examples: Sequence[Example],
    *,
    max_seq_length: int = 384,
    doc_stride: int = 128,
) -> SquadFeatures:
    """Windows of every example with offsets and training labels (module docstring).

    Leading white space of questions is stripped (some SQuAD questions have a lot of it and
    it would only use up the window). A question that leaves no room for the context in
    ``max_seq_length`` tokens raises ``ValueError``.
    """
    _check_window(tokenizer, max_seq_length, doc_stride)
    if not examples:
        raise ValueError("no SQuAD examples to tokenise")
    questions = [ex.text_a.lstrip() for ex in examples]
    contexts = [ex.text_b or "" for ex in examples]
    check_question_room(tokenizer, questions, max_seq_length, doc_stride)
    enc = tokenizer(
        questions,
        contexts,
        truncation="only_second",
        max_length=max_seq_length,
        stride=doc_stride,
        return_overflowing_tokens=True,
        return_offsets_mapping=True,
        padding=False,
    )
    keep = [k for k in ("input_ids", "attention_mask", "token_type_ids") if k in enc]
    inputs: dict[str, list[list[int]]] = {k: [] for k in keep}
    example_index: list[int] = []
    offsets: list[list[tuple[int, int] | None]] = []
    starts: list[int] = []
    ends: list[int] = []
    for f, ex_i in enumerate(enc["overflow_to_sample_mapping"]):
        seq_ids = enc.sequence_ids(f)
        spans = [
            (int(a), int(b)) if s == 1 else None
            for (a, b), s in zip(enc["offset_mapping"][f], seq_ids, strict=True)
        ]
        for k in keep:
            inputs[k].append(list(enc[k][f]))
        example_index.append(int(ex_i))
        offsets.append(spans)
        s_tok, e_tok = _label_window(spans, examples[ex_i])
        starts.append(s_tok)
        ends.append(e_tok)
    return SquadFeatures(inputs, example_index, offsets, starts, ends)


def _label_window(spans: list[tuple[int, int] | None], example: Example) -> tuple[int, int]:
    """Token positions of the first gold answer in this window, or (0, 0) if not all inside."""
    if not example.answers:
        return 0, 0
    answer = example.answers[0]
    a_start, a_end = answer.start, answer.start + len(answer.text)
    ctx = [t for t, span in enumerate(spans) if span is not None]
    if not ctx or spans[ctx[0]][0] > a_start or spans[ctx[-1]][1] < a_end:
        return 0, 0
    start = next(t for t in ctx if spans[t][1] > a_start)
    end = next(t for t in reversed(ctx) if spans[t][0] < a_end)
    return start, end


def postprocess_predictions(
    examples: Sequence[Example],
    features: SquadFeatures,
    start_logits: Sequence[Sequence[float]] | np.ndarray,
    end_logits: Sequence[Sequence[float]] | np.ndarray,
    *,
    n_best: int = 20,
    max_answer_length: int = 30,
) -> dict[str, str]:
    """The best answer text of every example (``guid -> text``), as the module doc says.

    ``start_logits[f]`` / ``end_logits[f]`` are window ``f``'s logits (padding beyond the
    window's length is ignored). An example none of whose windows has a valid span gets ``""``.
    """
    if len(start_logits) != len(features) or len(end_logits) != len(features):
        raise ValueError(
            f"{len(features)} windows but {len(start_logits)} start and {len(end_logits)} end "
            "logit rows"
        )
    for name, value in (("n_best", n_best), ("max_answer_length", max_answer_length)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    best: dict[int, tuple[float, str]] = {}
    for f, ex_i in enumerate(features.example_index):
        spans = features.offsets[f]
        ctx = np.array([t for t, s in enumerate(spans) if s is not None], dtype=np.int64)
        if ctx.size == 0:
            continue
        s_log = np.asarray(start_logits[f], dtype=np.float64)[: len(spans)]
        e_log = np.asarray(end_logits[f], dtype=np.float64)[: len(spans)]
        if not (np.isfinite(s_log[ctx]).all() and np.isfinite(e_log[ctx]).all()):
            raise ValueError(f"window {f} has NaN or infinite logits")
        top_s = ctx[np.argsort(-s_log[ctx], kind="stable")[:n_best]]
        top_e = ctx[np.argsort(-e_log[ctx], kind="stable")[:n_best]]
        context = examples[ex_i].text_b or ""
        for s in top_s:
            for e in top_e:
                if e < s or e - s + 1 > max_answer_length:
                    continue
                score = float(s_log[s] + e_log[e])
                if ex_i not in best or score > best[ex_i][0]:
                    best[ex_i] = (score, context[spans[s][0]: spans[e][1]])
    return {ex.guid: best[i][1] if i in best else "" for i, ex in enumerate(examples)}


def squad_metrics(
    predictions: Mapping[str, str], examples: Sequence[Example]
) -> dict[str, float]:
    """Exact match and F1 (percent) of ``guid -> answer text`` against the examples' answers.

    >>> from isotropy.data.glue import Answer
    >>> ex = [Example("q1", "Who?", "The cat sat.", None, (Answer("The cat", 0),))]
    >>> squad_metrics({"q1": "cat"}, ex)
    {'exact_match': 100.0, 'f1': 100.0}
    """
    from torchmetrics.functional.text import squad

    if not examples:
        raise ValueError("no SQuAD examples to score")
    missing = [ex.guid for ex in examples if ex.guid not in predictions]
    if missing:
        raise ValueError(f"{len(missing)} example(s) have no prediction, e.g. {missing[0]!r}")
    unanswered = [ex.guid for ex in examples if not ex.answers]
    if unanswered:
        raise ValueError(f"example {unanswered[0]!r} has no gold answer: cannot score it")
    preds = [{"id": ex.guid, "prediction_text": predictions[ex.guid]} for ex in examples]
    target = [
        {
            "id": ex.guid,
            "answers": {
                "text": [a.text for a in ex.answers],
                "answer_start": [a.start for a in ex.answers],
            },
        }
        for ex in examples
    ]
    scores = squad(preds, target)
    return {"exact_match": float(scores["exact_match"]), "f1": float(scores["f1"])}
