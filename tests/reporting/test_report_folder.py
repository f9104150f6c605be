"""A report folder holds one report: an earlier report's files that a new one does not write
are removed (and only those), a folder holding files no report wrote is refused before
anything is written, and a packed sweep that cannot be read is skipped with its reason."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest
from _runs import make_run

from isotropy.cli.main import main
from isotropy.reporting.folder import MANIFEST
from isotropy.reporting.write import write_report


def _files(folder: Path) -> set[str]:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}


def _grid(root: Path) -> None:
    for lr, metric in ((1e-4, 0.6), (3e-5, 0.7)):
        make_run(root, seed=1, metric=metric, training={"learning_rate": lr})


def test_a_second_report_leaves_none_of_the_first_ones_files(tmp_path: Path) -> None:
    _grid(tmp_path / "grid")
    make_run(tmp_path / "other", task="mrpc", seed=1)
    out = tmp_path / "report"
    write_report([str(tmp_path / "grid")], out, pick_best_over=("learning_rate",))
    first = _files(out)
    assert "picks.csv" in first and any(f.startswith("figures/rte_") or "_rte_" in f
                                        for f in first)
    res = write_report([str(tmp_path / "other")], out, figures=False)
    now = _files(out)
    # exactly the new report's files and its manifest: no picks.csv, no figure of rte
    assert now == {p.relative_to(out).as_posix() for p in res["files"]} | {MANIFEST}
    assert "picks.csv" not in now and not (out / "figures").exists()
    manifest = json.loads((out / MANIFEST).read_text())
    assert manifest["complete"] is True
    assert set(manifest["files"]) == now - {MANIFEST}


def test_a_folder_with_files_no_report_wrote_is_refused_and_kept(tmp_path: Path) -> None:
    make_run(tmp_path / "runs", seed=1)
    out = tmp_path / "report"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    (out / "claims.json").write_text('{"my": "notes"}')  # a report's name, not a report's file
    (out / ".gitignore").write_text("*.svg\n")  # hidden: allowed, kept
    before = {p: p.read_bytes() for p in out.iterdir()}
    with pytest.raises(ValueError, match=r"holds 2 file\(s\) that isotropy report did not "
                                         r"write \(claims.json, notes.txt\)"):
        write_report([str(tmp_path / "runs")], out, figures=False)
    assert {p: p.read_bytes() for p in out.iterdir()} == before  # nothing written or removed
    (out / "notes.txt").unlink()
    (out / "claims.json").unlink()
    write_report([str(tmp_path / "runs")], out, figures=False)
    assert (out / ".gitignore").read_text() == "*.svg\n"


def test_a_file_added_to_a_report_folder_is_refused(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    make_run(tmp_path / "runs", seed=1)
    out = tmp_path / "report"
    assert main(["report", str(tmp_path / "runs"), "--output-dir", str(out),
                 "--no-figures"]) == 0
    (out / "figures").mkdir()
    (out / "figures" / "my-plot.png").write_bytes(b"png")
    report_md = (out / "report.md").read_bytes()
    with pytest.raises(SystemExit) as exc:
        main(["report", str(tmp_path / "runs"), "--output-dir", str(out), "--no-figures"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "figures/my-plot.png" in err and len(err.strip().splitlines()) == 1
    assert (out / "figures" / "my-plot.png").read_bytes() == b"png"
    assert (out / "report.md").read_bytes() == report_md


def test_a_report_written_before_manifests_is_replaced_whole(tmp_path: Path) -> None:
    _grid(tmp_path / "grid")
    make_run(tmp_path / "other", task="mrpc", seed=1)
    out = tmp_path / "report"
    write_report([str(tmp_path / "grid")], out, figures=False, pick_best_over=("learning_rate",))
    (out / MANIFEST).unlink()  # as an older version left it
    write_report([str(tmp_path / "other")], out, figures=False)
    assert not (out / "picks.csv").exists()


def test_a_report_cut_short_is_recognised_and_cleaned(tmp_path: Path) -> None:
    _grid(tmp_path / "grid")
    make_run(tmp_path / "other", task="mrpc", seed=1)
    out = tmp_path / "report"
    write_report([str(tmp_path / "grid")], out, figures=False, pick_best_over=("learning_rate",))
    # cut short after its tables: the manifest says it was being written, with the files it
    # had recorded by then
    manifest = json.loads((out / MANIFEST).read_text())
    (out / MANIFEST).write_text(json.dumps({**manifest, "complete": False}))
    write_report([str(tmp_path / "other")], out, figures=False)
    assert not (out / "picks.csv").exists()


def test_a_users_file_named_like_an_output_is_kept_after_a_report_cut_short(
        tmp_path: Path) -> None:
    # a report cut short before it recorded any file, then a file of the user's, named like
    # one of a report's outputs: it is refused, never taken for the report's and removed
    make_run(tmp_path / "runs", seed=1)
    out = tmp_path / "report"
    out.mkdir()
    (out / MANIFEST).write_text(json.dumps({"generated_by": "isotropy report",
                                            "complete": False, "files": []}))
    (out / "report.md").write_text("# Report of an earlier run\n")  # cut before recording it
    (out / "claims.md").write_text("my own notes")
    with pytest.raises(ValueError, match="cut short") as err:
        write_report([str(tmp_path / "runs")], out, figures=False)
    assert "claims.md" in str(err.value) and "report.md" in str(err.value)
    assert (out / "claims.md").read_text() == "my own notes"
    assert sorted(p.name for p in out.iterdir()) == [MANIFEST, "claims.md", "report.md"]


def test_a_file_where_the_report_folder_should_be_is_refused(tmp_path: Path) -> None:
    from isotropy.reporting.folder import folder_problem

    (tmp_path / "report").write_text("precious")
    assert "is a file, not a folder" in folder_problem(tmp_path / "report")
    make_run(tmp_path / "runs", seed=1)
    with pytest.raises(ValueError, match="is a file, not a folder"):
        write_report([str(tmp_path / "runs")], tmp_path / "report", figures=False)
    assert (tmp_path / "report").read_text() == "precious"


def test_a_manifest_never_removes_what_is_not_a_report_output(tmp_path: Path) -> None:
    make_run(tmp_path / "runs", seed=1)
    out = tmp_path / "report"
    write_report([str(tmp_path / "runs")], out, figures=False)
    manifest = json.loads((out / MANIFEST).read_text())
    manifest["files"] += ["../keep.txt", str(tmp_path / "keep.txt")]  # damaged or edited
    (out / MANIFEST).write_text(json.dumps(manifest))
    (tmp_path / "keep.txt").write_text("mine")
    write_report([str(tmp_path / "runs")], out, figures=False)
    assert (tmp_path / "keep.txt").read_text() == "mine"


def test_a_corrupt_packed_sweep_is_skipped_with_a_line(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    make_run(runs / "good", seed=1)
    make_run(runs / "good", seed=2)
    (runs / "broken.tar.xz").write_bytes(b"\xfd7zXZ\x00" + b"\x00" * 40)  # an xz head, then junk
    fine = tmp_path / "fine.tar.xz"
    with tarfile.open(fine, "w:xz") as tar:
        tar.add(runs / "good", arcname="fine")
    (runs / "cut.tar.xz").write_bytes(fine.read_bytes()[:60])  # cut short
    (runs / "good" / "sweep.json").write_text("{}")
    res = write_report([str(runs)], tmp_path / "report", figures=False)
    assert len(res["runs"]) == 2
    skipped = dict(res["skipped"])
    for name in ("broken", "cut"):
        assert f"unreadable packed sweep {runs / (name + '.tar.xz')}" in skipped[str(runs / name)]
    md = (tmp_path / "report" / "report.md").read_text()
    assert f"- `{runs / 'broken'}`: unreadable packed sweep" in md
    # a glob that goes on inside the broken archive: the archive is skipped, said once
    res = write_report([str(runs / "*" / "*seed1")], tmp_path / "report2", figures=False)
    assert [str(r.path) for r in res["runs"]] == [str(next((runs / "good").glob("*seed1")))]
    assert {p for p, _ in res["skipped"]} == {str(runs / "broken"), str(runs / "cut")}
