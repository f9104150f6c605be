"""Write all-mpnet-base-v2 (float16 weights, tokenizer, config) and the GLUE files of its GPU
runs as one archive in numbered chunks, each small enough to travel with the working tree in
one GPU command, and ``manifest.json`` beside them, into the git-ignored ``.gpu-stage/``.

Usage::

    python benchmarks/gpu/make_stage.py [--model DIR] [--glue-dir DIR] [--out .gpu-stage]
                                        [--margin-mib 3] [--xz-preset 6]

The model is ``make mpnet``'s (:func:`isotropy.models.split_zip.model_path`) unless ``--model``
names a folder. Its weights are rounded to float16 (about 220 MB instead of 440 MB) and load
as float32 on the GPU machine (``config.json``'s ``isotropy_bundle`` says so); every word-piece
embedding row is kept, so the model reads any text. Each chunk is at most what 64 MiB leaves
beside the working tree measured now, less ``--margin-mib`` (room for the manifest and for
the tree to grow); the chunks are cut to equal sizes. The manifest holds each chunk's size
and SHA-256, the whole archive's, and the reference for the GPU's check
(``benchmarks/gpu/stage.py assemble``): the mean-pooled hidden states of a few fixed sentences
at the middle and last layer, computed here on the CPU from the very float16 weights of the
archive loaded as float32, with the tolerance the GPU's values must meet.

``--out`` must be new, empty, or a folder this script wrote: its chunks and manifest are
replaced (written under temporary names, then renamed; the manifest last); a folder holding
anything else is refused. ``docs/gpu.md`` ("Staged MPNet transfer") gives the calls.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import lzma
import math
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

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
from stage import FORMAT, MANIFEST, reference_states

TASKS = {"CoLA": ("train.tsv", "dev.tsv"), "MRPC": ("train.tsv", "dev.tsv"),
         "RTE": ("train.tsv", "dev.tsv"), "STS-B": ("train.tsv", "dev.tsv")}
MODEL_DIR = "mpnet-fp16"
GLUE_DIR = "glue_data"
SENTENCES = ("The cat sat on the mat.",
             "A man is playing a guitar on a stage in front of a small crowd.",
             "Isotropy measures how evenly the variance spreads over the dimensions.",
             "She didn't go to the bank on Tuesday, because it was closed.")
HEAD = 32  # values of each mean-pooled vector kept in the manifest (and the vector's norm)
# GPU float32 (TF32 off) against CPU float32: the summation orders differ, so each carries its
# own float32 rounding, about 1e-6 here (MPNet's CPU float32 values against float64: at most
# 1.0e-6 on values up to 2.1). Weights that are not these move them far more: one 768 x 768
# tensor of the last layer at a fresh random initialisation, by 0.85. 1e-3 sits between.
ATOL = RTOL = 1e-3


def model_files(model_dir: Path) -> dict[str, bytes]:
    """The files of the staged model: ``model.safetensors`` in float16, ``config.json``
    loading it as float32, and the tokenizer's files."""
    from safetensors.torch import load_file, save

    source = model_dir / "model.safetensors"
    half = to_float16(load_file(str(source)))
    config = float32_config(json.loads((model_dir / "config.json").read_text()), {
        "weights": f"float16 rounding of {model_dir.name}'s model.safetensors",
        "source_sha256": hashlib.sha256(source.read_bytes()).hexdigest(),
        "zeroed_word_embedding_rows": 0})
    files = {"config.json": json.dumps(config, indent=2).encode(),
             "model.safetensors": save(half, metadata={"format": "pt"})}
    for f in TOKENIZER_FILES:
        if (model_dir / f).is_file():
            files[f] = (model_dir / f).read_bytes()
    return files


def build_archive(model: dict[str, bytes], glue_dir: Path, tasks: dict[str, tuple[str, ...]],
                  xz_preset: int | None) -> bytes:
    """One tar of ``MODEL_DIR/`` (``model``) and ``GLUE_DIR/TASK/FILE`` for ``tasks``,
    xz-compressed at ``xz_preset`` (``None``: plain tar)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name in sorted(model):
            add_bytes(tar, f"{MODEL_DIR}/{name}", model[name])
        for task, files in tasks.items():
            for f in files:
                add_bytes(tar, f"{GLUE_DIR}/{task}/{f}", (glue_dir / task / f).read_bytes())
    data = buf.getvalue()
    return data if xz_preset is None else lzma.compress(data, preset=xz_preset)


def split(data: bytes, max_chunk: int) -> list[bytes]:
    """``data`` cut into the fewest chunks of at most ``max_chunk`` bytes, of equal sizes
    (to a byte)."""
    if max_chunk <= 0:
        raise ValueError(f"a chunk must hold at least one byte, got {max_chunk}")
    n = max(1, math.ceil(len(data) / max_chunk))
    cut = [len(data) * i // n for i in range(n + 1)]
    return [data[cut[i]:cut[i + 1]] for i in range(n)]


def reference(model: dict[str, bytes], sentences: tuple[str, ...] = SENTENCES) -> dict[str, Any]:
    """The manifest's reference: the staged model's mean-pooled hidden states of
    ``sentences`` at its middle and last layer (:func:`stage.reference_states`, on the CPU,
    the float16 weights loaded as float32) rounded to 8 significant digits, with the
    tolerance."""
    config = json.loads(model["config.json"])
    depth = int(config["num_hidden_layers"])
    layers = sorted({max(1, depth // 2), depth})
    with tempfile.TemporaryDirectory() as tmp:
        for name, data in model.items():
            (Path(tmp) / name).write_bytes(data)
        got = reference_states(Path(tmp), list(sentences), layers, HEAD)
    mean = {k: [[float(f"{x:.8g}") for x in row] for row in rows]
            for k, rows in got["mean"].items()}
    norm = {k: [float(f"{x:.8g}") for x in rows] for k, rows in got["norm"].items()}
    return {"sentences": list(sentences), "layers": layers, "pooling": "mean over the tokens",
            "mean": mean, "norm": norm, "atol": ATOL, "rtol": RTOL,
            "computed_on": "CPU, float32, from the archive's float16 weights"}


def _clear_out(out: Path) -> None:
    """Make ``out`` ready for a new stage: made if absent; the chunks and manifest of a stage
    this script wrote there are removed; anything else there is refused (``SystemExit``)."""
    out.mkdir(parents=True, exist_ok=True)
    ours = {MANIFEST}
    if (out / MANIFEST).is_file():
        try:
            old = json.loads((out / MANIFEST).read_text())
            ours |= {c["name"] for c in old["chunks"]} if old.get("format") == FORMAT else set()
        except (ValueError, KeyError, TypeError):
            sys.exit(f"make_stage: {out / MANIFEST} is not a manifest this script wrote")
    others = sorted(p.name for p in out.iterdir() if p.name not in ours)
    if others:
        sys.exit(f"make_stage: {out} holds files this script did not write ({', '.join(others)}):"
                 " give a new or empty --out")
    for name in sorted(ours):
        (out / name).unlink(missing_ok=True)


def write_stage(out: Path, archive: bytes, max_chunk: int, ref: dict[str, Any],
                made: dict[str, Any]) -> dict[str, Any]:
    """Cut ``archive`` into chunks of at most ``max_chunk`` bytes and write them and the
    manifest (``ref`` its reference, ``made`` how it was made) into ``out``; returns the
    manifest."""
    chunks = split(archive, max_chunk)
    _clear_out(out)
    listed = []
    for i, data in enumerate(chunks):
        name = f"part-{i + 1:03d}"
        write_atomic(out / name, data)
        listed.append({"name": name, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()})
    manifest = {"format": FORMAT,
                "archive": {"size": len(archive), "sha256": hashlib.sha256(archive).hexdigest()},
                "chunks": listed, "model_dir": MODEL_DIR, "glue_dir": GLUE_DIR,
                "reference": ref, "made": made}
    write_atomic(out / MANIFEST, json.dumps(manifest, indent=1).encode())
    return manifest


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=None,
                    help="the model folder (default: make mpnet's all-mpnet-base-v2)")
    ap.add_argument("--glue-dir", type=Path, default=default_glue_dir())
    ap.add_argument("--out", type=Path, default=ROOT / ".gpu-stage")
    ap.add_argument("--margin-mib", type=float, default=3.0,
                    help="MiB left free in each command beside the tree and a chunk")
    ap.add_argument("--xz-preset", type=int, default=6, choices=range(10))
    args = ap.parse_args(argv)
    start = time.perf_counter()
    missing = missing_glue_files(args.glue_dir, TASKS)
    if missing:
        sys.exit(f"make_stage: {args.glue_dir} lacks {', '.join(missing)} (set --glue-dir)")
    if args.model is None:
        sys.path.insert(0, str(ROOT / "src"))
        from isotropy.models.split_zip import model_path

        try:
            args.model = Path(model_path())
        except (FileNotFoundError, ValueError) as err:
            sys.exit(f"make_stage: {err}")
    if not all((args.model / f).is_file() for f in ("model.safetensors", "config.json")):
        sys.exit(f"make_stage: {args.model} has no model.safetensors and config.json")
    tree = tree_bytes()
    max_chunk = int((LIMIT_MIB - args.margin_mib) * 2**20) - tree
    if max_chunk < 2**20:
        sys.exit(f"make_stage: the working tree ({tree / 2**20:.1f} MiB) leaves no room for a "
                 f"chunk in {LIMIT_MIB:.0f} MiB with a {args.margin_mib} MiB margin")
    model = model_files(args.model)
    ref = reference(model)
    t_archive = time.perf_counter()
    archive = build_archive(model, args.glue_dir, TASKS, args.xz_preset)
    t_archive = time.perf_counter() - t_archive
    manifest = write_stage(args.out, archive, max_chunk, ref, {
        "model": args.model.name, "tasks": sorted(TASKS), "xz_preset": args.xz_preset,
        "tree_mib": round(tree / 2**20, 2), "max_chunk_bytes": max_chunk})
    sizes = [c["size"] for c in manifest["chunks"]]
    manifest_mib = (args.out / MANIFEST).stat().st_size / 2**20
    print(f"{args.out}: {len(sizes)} chunks of {min(sizes) / 2**20:.2f}-"
          f"{max(sizes) / 2**20:.2f} MiB; archive {len(archive) / 2**20:.1f} MiB "
          f"(xz -{args.xz_preset}, {t_archive:.0f} s); sha256 {manifest['archive']['sha256']}")
    total = (tree + max(sizes)) / 2**20 + manifest_mib
    print(f"working tree {tree / 2**20:.1f} MiB + largest chunk + manifest = {total:.1f} of "
          f"{LIMIT_MIB:.0f} MiB ({LIMIT_MIB - total:.1f} MiB to spare); made in "
          f"{time.perf_counter() - start:.0f} s")
    return 0 if total < LIMIT_MIB else 1


if __name__ == "__main__":
    sys.exit(main())
