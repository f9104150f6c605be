"""Checks of ``isotropy train`` settings against the kind of model (encoder or decoder-only).

A decoder-only language model (GPT-2, Llama, ...) attends causally: its first token sees only
itself, so ``--pooling cls`` (the first token's row, the [CLS] of an encoder) would give the
persistent entropy a cloud that does not depend on the text. :func:`check_pooling` refuses it;
``--pooling mean`` pools every non-padding token. (``isotropy analyze`` pools a decoder's last
token by default.)
"""

from __future__ import annotations

from typing import Any

__all__ = ["check_pooling", "is_decoder_only"]


def is_decoder_only(config: Any) -> bool:
    """Whether a Hugging Face model config is a decoder-only model's: ``is_decoder`` set, or a
    model type with a causal-LM head class and no masked-LM one (GPT-2, Llama, ...; BERT has
    both). Encoder-decoder models are not.

    >>> from transformers import BertConfig, GPT2Config
    >>> is_decoder_only(GPT2Config()), is_decoder_only(BertConfig())
    (True, False)
    """
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_MASKED_LM_MAPPING_NAMES,
    )

    if getattr(config, "is_encoder_decoder", False):
        return False
    if getattr(config, "is_decoder", False):
        return True
    kind = getattr(config, "model_type", None)
    causal, masked = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, MODEL_FOR_MASKED_LM_MAPPING_NAMES
    return kind in causal and kind not in masked


def check_pooling(model_path: str, pooling: str, regularizers: Any) -> None:
    """``ValueError`` if the persistent entropy (in ``regularizers``) would pool a
    decoder-only model's first token (``pooling == "cls"``); reads the model's config only
    (``AutoConfig``). ``model_path`` is a resolved model directory or hub id."""
    if pooling != "cls" or "entropy" not in list(regularizers):
        return
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(model_path)
    if is_decoder_only(config):
        raise ValueError(
            f"--pooling cls takes the first token, but {model_path} is a decoder-only model "
            f"({config.model_type}) whose first token sees only itself: pass --pooling mean "
            "for the persistent entropy's cloud"
        )
