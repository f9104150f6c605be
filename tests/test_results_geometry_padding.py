"""``docs/results.md``'s table of the geometry claims under the authors' padding states what the
two reports it compares computed: each row's counts ("k of n"), verdicts and Holm-adjusted p's
against ``claims.json`` of the exploratory sweep (``istar``, without padding) and of the
confirmatory CPU sweep (``confirm-cpu``, with padding), both regenerated from the committed
runs by ``tests/test_results_report.py``."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
REPORTS = ROOT / "docs" / "results" / "report" / "sweeps"
HEADING = "### The geometry claims under the authors' padding (CPU phase, beside the family)"
# the table's rows by their first words -> the claim in claims.json, and whether the row counts
# the values that went against the claim (C9: "the last layer more in n - k of n")
ROWS = {"C2: ρ(IsoScore": ("C2", False), "C3: CosReg centres": ("C3 centres", False),
        "C3: CosReg does not raise": ("C3 no rise", False),
        "C3: …nor of the union": ("C3 no rise, union", False),
        "C4: the paper's λ": ("C4 paper's λ", False), "C4: λ = −0.3": ("C4 λ = -0.3", False),
        "C4: λ = +1": ("C4 λ = +1", False), "C6: λ = +1": ("C6 λ = +1 hurts", False),
        "C8: ρ(TwoNN": ("C8", False), "C9: λ = +1": ("C9 early layers", True)}


def _claims(sweep: str) -> dict[str, dict]:
    path = REPORTS / sweep / "claims.json"
    return {c["claim"]: c for c in json.loads(path.read_text(encoding="utf-8"))["claims"]}


def _table() -> dict[str, tuple[str, str]]:
    """Each row of the section's table: (without padding, with padding) by its claim."""
    text = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
    assert HEADING in text, "docs/results.md lost the section on the geometry under padding"
    section = text.split(HEADING, 1)[1].split("\n### ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        key = next((k for k in ROWS if cells[0].startswith(k)), None)
        if key is not None:
            assert len(cells) == 3, line
            rows[ROWS[key][0]] = (cells[1], cells[2])
    return rows


def _counts(cell: str) -> list[tuple[int, int]]:
    return [(int(a), int(b)) for a, b in re.findall(r"\b(\d+) of (\d+)\b", cell)]


def _agrees(written: str, value: float) -> bool:
    """``written`` (a p printed with its digits) is ``value`` rounded to them."""
    decimals = len(written.split(".")[1]) if "." in written else 0
    return abs(float(written) - value) <= 0.5 * 10 ** -decimals + 1e-12


@pytest.fixture(scope="module")
def table() -> dict[str, tuple[str, str]]:
    if not (REPORTS / "confirm-cpu" / "claims.json").is_file():
        pytest.skip("no committed report of the confirmatory CPU sweep")
    return _table()


def test_the_table_has_a_row_for_every_geometry_claim(table) -> None:
    assert set(table) == {claim for claim, _ in ROWS.values()}


@pytest.mark.parametrize("claim,against", list(ROWS.values()))
def test_the_padded_column_is_confirm_cpus_report(table, claim: str, against: bool) -> None:
    c = _claims("confirm-cpu")[claim]
    cell = table[claim][1]
    k = c["n"] - c["k"] if against else c["k"]
    assert _counts(cell)[0] == (k, c["n"]), (claim, cell)
    assert c["verdict"] in cell, (claim, c["verdict"], cell)
    for written in re.findall(r"Holm p = (\d\.\d+)", cell):
        assert _agrees(written, c["p_holm"]), (claim, written, c["p_holm"])


@pytest.mark.parametrize("claim,against", list(ROWS.values()))
def test_the_unpadded_column_is_the_exploratory_report(table, claim: str,
                                                       against: bool) -> None:
    c = _claims("istar")[claim]
    cell = table[claim][0]
    seen = {(c["n"] - c["k"], c["n"]) if against else (c["k"], c["n"])}
    if c["counted_n"] is not None:  # with the constant predictors counted
        seen.add((c["counted_k"], c["counted_n"]))
    assert _counts(cell) and set(_counts(cell)) <= seen, (claim, cell, seen)
    verdicts = {c["verdict"], c["counted_verdict"]} - {None}
    assert any(v in cell for v in verdicts), (claim, verdicts, cell)
    for written in re.findall(r"Holm (?:p )?(\d\.\d+)", cell):
        assert _agrees(written, c["p_holm"]), (claim, written, c["p_holm"])
