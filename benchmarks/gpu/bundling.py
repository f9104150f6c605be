"""What the scripts that pack data for a GPU machine share (``make_bundle.py``: MiniLM in one
archive; ``make_stage.py``: MPNet in chunks over several calls): a GPU command receives the
working tree plus carried paths, :data:`LIMIT_MIB` in all, so each measures the tree it
travels with; weights go as float16 (loaded as float32 on the machine); archives are built in
memory with fixed metadata and written under a temporary name, then renamed.
"""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
LIMIT_MIB = 64.0  # what one GPU command may carry: the working tree and the carried paths
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                   "vocab.txt")


def default_glue_dir() -> Path:
    """``$GLUE_DIR``, else ``../shared/glue_data`` beside the repository."""
    return Path(os.environ.get("GLUE_DIR", ROOT.parent / "shared" / "glue_data"))


def missing_glue_files(glue_dir: Path, tasks: dict[str, tuple[str, ...]]) -> list[str]:
    """The ``TASK/FILE`` names of ``tasks`` that ``glue_dir`` lacks."""
    return [f"{t}/{f}" for t, fs in tasks.items() for f in fs if not (glue_dir / t / f).is_file()]


def add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    """Add ``data`` to ``tar`` as the regular file ``name`` (mode 644, mtime 0: the same
    bytes give the same archive)."""
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = len(data), 0, 0o644
    tar.addfile(info, io.BytesIO(data))


def to_float16(state: dict[str, Any]) -> dict[str, Any]:
    """The floating tensors of ``state`` as contiguous float16 (integer buffers kept), same
    keys; prints the largest relative rounding error on entries in float16's normal range and
    how many nonzero entries lie below it."""
    import torch

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
    return half


def float32_config(config: dict[str, Any], note: dict[str, Any]) -> dict[str, Any]:
    """``config`` with the dtype to load as set to float32 (the file holds float16) and
    ``note`` as ``isotropy_bundle``: what the weights are and what they are for."""
    return {**config, "torch_dtype": "float32", "isotropy_bundle": note}


def tree_bytes(root: Path = ROOT) -> int:
    """Bytes of the working tree a GPU command carries: tracked files and untracked files
    that git does not ignore."""
    names: list[str] = []
    for extra in ([], ["--others", "--exclude-standard"]):
        out = subprocess.run(["git", "ls-files", "-z", *extra], cwd=root, capture_output=True,
                             check=True)
        names += out.stdout.decode().split("\0")
    return sum(os.path.getsize(root / n) for n in set(names) if n and (root / n).is_file())


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` under a temporary name in the same folder, then rename."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    tmp.replace(path)
