"""The committed report (``docs/results/report``) is what ``isotropy report`` makes of the
committed runs (``docs/results/runs``, packed sweeps read as folders): every table, claims
file and report text byte for byte (the figures, drawn by the installed matplotlib, aside).
A sync that completes a sweep therefore commits the regenerated report with it."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from isotropy.cli.main import main

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"
REGENERATE = ("isotropy report docs/results/runs --output-dir docs/results/report "
              "(docs/results/README.md)")


def _committed_text_files() -> list[str]:
    try:
        out = subprocess.run(["git", "ls-files", "docs/results/report"], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: the committed report cannot be listed")
    return [p[len("docs/results/report/"):] for p in out
            if p.endswith((".csv", ".json", ".md"))]


def _without_figures(text: bytes) -> bytes:
    """``report.md`` less its ``## Figures`` section (absent under ``--no-figures``)."""
    return re.sub(rb"\n## Figures\n.*?(?=\n## |\Z)", b"", text, flags=re.S)


@pytest.mark.timeout(600)
def test_the_committed_report_is_that_of_the_committed_runs(tmp_path: Path,
                                                           monkeypatch) -> None:
    names = _committed_text_files()
    assert "report.md" in names and "sweeps/istar/claims.md" in names
    monkeypatch.chdir(ROOT)  # the runs' paths in the report are as the command names them
    assert main(["report", "docs/results/runs", "--output-dir", str(tmp_path),
                 "--no-figures"]) == 0
    differ = []
    for name in names:
        made, kept = tmp_path / name, (RESULTS / "report" / name).read_bytes()
        if not made.is_file():
            differ.append(f"{name} (not made)")
        elif name.endswith("report.md"):
            if _without_figures(made.read_bytes()) != _without_figures(kept):
                differ.append(name)
        elif made.read_bytes() != kept:
            differ.append(name)
    assert not differ, f"the committed report differs from its runs in {differ}: {REGENERATE}"
    made = {p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")
            if p.suffix in (".csv", ".json", ".md")}
    left_out = sorted(made - set(names))
    if left_out:  # made, not committed: fine only where git is told to ignore it
        ignored = subprocess.run(
            ["git", "check-ignore", "--stdin"], cwd=ROOT, capture_output=True, text=True,
            input="\n".join(f"docs/results/report/{n}" for n in left_out)).stdout.split()
        left_out = [n for n in left_out if f"docs/results/report/{n}" not in ignored]
    assert not left_out, f"the report makes {left_out}, not committed: {REGENERATE}"
