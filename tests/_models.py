"""A tiny random BERT (and MPNet) and random padded token batches for tests that run a real
model."""

from __future__ import annotations

import torch

TINY_HIDDEN = 32  # hidden size of tiny_bert


def padding_mask(lengths: torch.Tensor, seq: int) -> torch.Tensor:
    """``(batch, seq)`` attention mask with the first ``lengths[b]`` positions of row b set."""
    return (torch.arange(seq)[None, :] < lengths[:, None]).long()


def random_inputs(
    g: torch.Generator, *, batch: int, seq: int, vocab_size: int, min_length: int
) -> dict[str, torch.Tensor]:
    """Token ids in ``[1, vocab_size)`` with lengths in ``[min_length, seq]``, padding id 0."""
    ids = torch.randint(1, vocab_size, (batch, seq), generator=g)
    lengths = torch.randint(min_length, seq + 1, (batch,), generator=g)
    mask = padding_mask(lengths, seq)
    return {"input_ids": ids * mask, "attention_mask": mask}


def tiny_bert(model_class: type, *, vocab_size: int, seed: int = 0, **config: object):
    """A freshly initialised 2-layer BERT (hidden size 32) of ``model_class``, seeded."""
    from transformers import BertConfig

    torch.manual_seed(seed)
    cfg = BertConfig(
        vocab_size=vocab_size,
        hidden_size=TINY_HIDDEN,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=32,
        **config,
    )
    return model_class(cfg)


def save_tiny_bert(root, words, *, name: str = "model", dtype: torch.dtype | None = None,
                   **config: object):
    """Save a :func:`tiny_bert` encoder (``BertModel``) and a WordPiece tokenizer whose
    vocabulary is the special tokens plus ``words`` into ``root/name``; returns that folder.
    The vocabulary is passed as ``vocab=`` from transformers 5 on (which ignores
    ``vocab_file=`` and would map every word to [UNK]), as ``vocab_file=`` before (which reads
    no ``vocab=``). ``dtype`` (e.g. ``torch.float64``) converts the weights."""
    from pathlib import Path

    from transformers import BertModel, BertTokenizerFast

    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]
    (root / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    from isotropy.training._compat import TRANSFORMERS_VERSION

    where = "vocab" if TRANSFORMERS_VERSION >= (5, 0) else "vocab_file"
    tok = BertTokenizerFast(**{where: str(root / "vocab.txt")}, do_lower_case=True)
    out = root / name
    model = tiny_bert(BertModel, vocab_size=len(vocab), seed=0, **config)
    (model if dtype is None else model.to(dtype)).save_pretrained(out)
    tok.save_pretrained(out)
    return out


def save_tiny_mpnet(root, words, *, name: str = "mpnet") -> object:
    """Save a freshly initialised 2-layer MPNet encoder (``MPNetModel``, hidden size 32,
    seeded) and its tokenizer (MPNet's special tokens, then ``words``) into ``root/name``;
    returns that folder. MPNet's positions start after its padding id, as RoBERTa's, so 40
    positions hold sequences of up to 38 tokens."""
    from pathlib import Path

    from transformers import MPNetConfig, MPNetModel, MPNetTokenizerFast

    from isotropy.training._compat import TRANSFORMERS_VERSION

    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    vocab = ["<s>", "<pad>", "</s>", "[UNK]", "<mask>", *words]
    (root / "mpnet-vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    where = "vocab" if TRANSFORMERS_VERSION >= (5, 0) else "vocab_file"
    tok = MPNetTokenizerFast(**{where: str(root / "mpnet-vocab.txt")})
    torch.manual_seed(0)
    cfg = MPNetConfig(vocab_size=len(vocab), hidden_size=TINY_HIDDEN, num_hidden_layers=2,
                      num_attention_heads=2, intermediate_size=64, max_position_embeddings=40,
                      pad_token_id=1)
    out = root / name
    MPNetModel(cfg).save_pretrained(out)
    tok.save_pretrained(out)
    return out


def labelled_rows(n: int, seed: int, *, vocab_size: int, seq: int = 9,
                  min_length: int = 3) -> list[dict[str, torch.Tensor]]:
    """``n`` examples (dicts of ``input_ids``, ``attention_mask`` and a 0/1 ``labels``) of
    :func:`random_inputs`, seeded: a dataset for a ``Trainer`` or a ``DataLoader``."""
    g = torch.Generator().manual_seed(seed)
    b = random_inputs(g, batch=n, seq=seq, vocab_size=vocab_size, min_length=min_length)
    labels = torch.randint(0, 2, (n,), generator=g)
    return [{"input_ids": b["input_ids"][i], "attention_mask": b["attention_mask"][i],
             "labels": labels[i]} for i in range(n)]
