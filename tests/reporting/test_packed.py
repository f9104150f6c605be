"""Packed sweeps (``<sweep>.tar.xz``) read as their folders: the same runs, paths and report,
globs that reach inside, and archives that are not packed sweeps refused before unpacking."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest
from _runs import make_run

from isotropy.cli.main import main
from isotropy.reporting import packed
from isotropy.reporting.discovery import expand_inputs, sweeps_inside
from isotropy.reporting.runs import load_run


def _pack(folder: Path) -> Path:
    """``folder`` as ``folder.tar.xz`` beside it (written with tarfile), the folder removed."""
    archive = folder.with_name(folder.name + ".tar.xz")
    with tarfile.open(archive, "w:xz") as tar:
        tar.add(folder, arcname=folder.name)
    for p in sorted(folder.rglob("*"), reverse=True):
        p.rmdir() if p.is_dir() else p.unlink()
    folder.rmdir()
    return archive


def _sweep(root: Path) -> None:
    for seed, (base, reg) in enumerate([(0.61, 0.66), (0.63, 0.70), (0.68, 0.71)]):
        make_run(root, seed=seed, metric=base, iso=0.3)
        make_run(root, reg="istar", lam=-1.0, zeta=0.2, seed=seed, metric=reg, iso=0.5)
    (root / "sweep.json").write_text("{}")


def _outputs(out: Path) -> dict[str, bytes]:
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*"))
            if p.is_file()}


def test_a_report_of_packed_sweeps_is_that_of_their_folders(tmp_path: Path, monkeypatch
                                                             ) -> None:
    monkeypatch.chdir(tmp_path)
    for where in ("a", "b"):
        _sweep(Path(where) / "runs" / "istar")
        _sweep(Path(where) / "runs" / "entropy")
    _pack(Path("b/runs/istar"))
    _pack(Path("b/runs/entropy"))
    got = {}
    for where in ("a", "b"):
        monkeypatch.chdir(tmp_path / where)
        assert [name for name, _ in sweeps_inside(["runs"])] == ["entropy", "istar"]
        assert main(["report", "runs", "--output-dir", "out", "--no-figures"]) == 0
        got[where] = _outputs(Path("out"))
    assert got["a"] == got["b"] and "report.md" in got["b"] and "sweeps/istar/runs.csv" in got["b"]
    assert b"runs/istar/rte-minilm-istar" in got["b"]["sweeps/istar/runs.csv"]  # as the folder


def test_paths_and_globs_inside_a_packed_sweep(tmp_path: Path) -> None:
    _sweep(tmp_path / "runs" / "dose")
    (tmp_path / "runs" / ".hidden").mkdir()
    archive = _pack(tmp_path / "runs" / "dose")
    dose = tmp_path / "runs" / "dose"
    assert packed.list_dir(tmp_path / "runs") == [".hidden", "dose", "dose.tar.xz"]
    assert packed.is_dir(dose) and packed.is_file(dose / "sweep.json")
    assert not packed.exists(dose / "absent") and not packed.exists(tmp_path / "no" / "x")
    seed1 = packed.glob_packed(str(tmp_path / "*" / "*" / "*-seed1"))
    assert len(seed1) == 2 and all(Path(p).parent == dose and p.endswith("-seed1")
                                   for p in seed1)
    assert packed.glob_packed(str(tmp_path / "runs" / "*")) == [str(dose), str(archive)]
    assert packed.glob_packed(str(tmp_path / "runs" / ".*")) == [str(tmp_path / "runs" / ".hidden")]
    runs = expand_inputs([str(dose / "*-seed0")])
    assert len(runs) == 2 and all(p.parent == dose for p in runs)
    run = load_run(runs[0])
    assert run.path == runs[0] and run.seed == 0 and run.metrics_records  # read from the copy
    # unpacked once per process (the same copy for every read)
    assert packed.real_path(runs[0]) == packed.real_path(runs[0]) != runs[0]


def test_the_folder_wins_where_both_are_there(tmp_path: Path) -> None:
    _sweep(tmp_path / "runs" / "dose")
    _pack(tmp_path / "runs" / "dose")
    make_run(tmp_path / "runs" / "dose", seed=7, metric=0.5)
    assert [p.name[-5:] for p in expand_inputs([str(tmp_path / "runs" / "dose")])] == ["seed7"]


@pytest.mark.parametrize("name, kind", [("dose/../evil", tarfile.REGTYPE),
                                        ("/abs/dose", tarfile.REGTYPE),
                                        ("other/run/config.json", tarfile.REGTYPE),
                                        ("dose/link", tarfile.SYMTYPE)])
def test_an_archive_that_is_not_a_packed_sweep_is_refused(tmp_path: Path, name: str,
                                                          kind: bytes) -> None:
    archive = tmp_path / "dose.tar.xz"
    with tarfile.open(archive, "w:xz") as tar:
        info = tarfile.TarInfo(name)
        info.type = kind
        info.linkname = "/etc/passwd" if kind == tarfile.SYMTYPE else ""
        tar.addfile(info, io.BytesIO(b"") if kind == tarfile.REGTYPE else None)
    with pytest.raises(ValueError, match=r"is not a packed sweep: it holds"):
        packed.real_path(tmp_path / "dose" / "x")
    assert not (tmp_path / "evil").exists() and not os.path.lexists(tmp_path / "link")


def test_an_unreadable_archive_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "dose.tar.xz").write_bytes(b"not xz at all")
    with pytest.raises(ValueError, match="unreadable packed sweep"):
        expand_inputs([str(tmp_path / "dose")])


def test_another_kind_of_archive_beside_the_sweeps_is_not_a_folder(tmp_path: Path) -> None:
    _sweep(tmp_path / "runs" / "istar")
    with tarfile.open(tmp_path / "runs" / "backup.tar.xz", "w:xz") as tar:
        info = tarfile.TarInfo("something/else.txt")
        tar.addfile(info, io.BytesIO(b""))
    assert packed.list_dir(tmp_path / "runs") == ["backup.tar.xz", "istar"]
    assert len(expand_inputs([str(tmp_path / "runs")])) == 6
    assert len(expand_inputs([str(tmp_path / "runs" / "*")])) == 6


def test_damaged_xz_data_is_a_clear_error(tmp_path: Path) -> None:
    _sweep(tmp_path / "runs" / "dose")
    archive = _pack(tmp_path / "runs" / "dose")
    data = bytearray(archive.read_bytes())
    data[len(data) // 2] ^= 0xFF
    archive.write_bytes(bytes(data))
    # the folder is listed as one unit, which the report skips with the reason
    # (tests/reporting/test_report_folder.py); reading it is the clear error
    assert expand_inputs([str(tmp_path / "runs")]) == [tmp_path / "runs" / "dose"]
    with pytest.raises(ValueError, match="unreadable packed sweep"):
        packed.real_path(tmp_path / "runs" / "dose")


def test_an_archive_replaced_under_the_same_name_is_read_again(tmp_path: Path) -> None:
    _sweep(tmp_path / "runs" / "dose")
    archive = _pack(tmp_path / "runs" / "dose")
    stamp = archive.stat()
    assert packed.is_file(tmp_path / "runs" / "dose" / "sweep.json")
    with tarfile.open(archive, "w:xz") as tar:  # another sweep, its time set back
        info = tarfile.TarInfo("dose/other.json")
        tar.addfile(info, io.BytesIO(b""))
    os.utime(archive, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
    assert packed.is_file(tmp_path / "runs" / "dose" / "other.json")
    assert not packed.exists(tmp_path / "runs" / "dose" / "sweep.json")


def test_dotdot_after_a_packed_folder_is_resolved_by_name(tmp_path: Path) -> None:
    _sweep(tmp_path / "runs" / "dose")
    _pack(tmp_path / "runs" / "dose")
    (tmp_path / "runs" / "notes").mkdir()
    assert packed.is_dir(tmp_path / "runs" / "dose" / ".." / "notes")
    assert packed.is_file(tmp_path / "runs" / "notes" / ".." / "dose" / "sweep.json")


def test_an_archive_too_large_to_be_a_sweep_is_refused(tmp_path: Path, monkeypatch) -> None:
    _sweep(tmp_path / "runs" / "dose")
    _pack(tmp_path / "runs" / "dose")
    monkeypatch.setattr(packed, "MAX_UNPACKED_BYTES", 1000)
    with pytest.raises(ValueError, match="would unpack to .* more than a packed sweep"):
        packed.real_path(tmp_path / "runs" / "dose" / "sweep.json")


def test_a_packed_sweep_named_by_its_archive_reads_as_its_folder(tmp_path: Path) -> None:
    _sweep(tmp_path / "runs" / "dose")
    archive = _pack(tmp_path / "runs" / "dose")
    runs = expand_inputs([str(archive)])
    assert len(runs) == 6 and {p.parent for p in runs} == {tmp_path / "runs" / "dose"}
    other = tmp_path / "other.tar.xz"
    with tarfile.open(other, "w:xz") as tar:
        tar.addfile(tarfile.TarInfo("elsewhere/x"), io.BytesIO(b""))
    assert packed.as_folder(other) == other  # not a packed sweep: a file as it is
