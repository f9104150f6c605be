"""Each public measure states, in its own docstring, its paper, its input (shape, the fewest
points), what it returns and what bad input gets (scikit-learn's habit); the input and bad-input
statements are checked against what the function does."""

from __future__ import annotations

import inspect
import re

import pytest
import torch
from test_call_conventions import CLOUD_MEASURES, OTHER_MEASURES

import isotropy as iso

LABELS = ("- **Reference:**", "- **Input:**", "- **Returns:**", "- **Bad input:**")


def _doc(name: str) -> str:
    return inspect.getdoc(getattr(iso, name)) or ""


def _statement(name: str, label: str) -> str:
    """The text of one labelled statement, its wrapped lines joined."""
    doc = _doc(name)
    start = doc.index(f"- **{label}:**")
    lines = [doc[start:].splitlines()[0]]
    for line in doc[start:].splitlines()[1:]:
        if not line.startswith("  "):
            break
        lines.append(line.strip())
    return " ".join(lines)


@pytest.mark.parametrize("name", [*CLOUD_MEASURES, *OTHER_MEASURES])
def test_each_public_measure_states_its_paper_input_result_and_bad_input(name):
    doc = _doc(name)
    for label in LABELS:
        assert doc.count(label) == 1, f"{name}: {label} missing or repeated"
    assert [doc.index(label) for label in LABELS] == sorted(doc.index(label) for label in LABELS)
    reference = _statement(name, "Reference")
    assert re.search(r"\(\d{4}\)", reference), f"{name}: the reference names no year"


def _fewest_points(name: str) -> int:
    found = re.search(r"at least (\d+) points?", _statement(name, "Input"))
    assert found, f"{name}: the input statement names no fewest number of points"
    return int(found.group(1))


def _cloud(n: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(n)
    return torch.randn(n, 8, generator=g, dtype=torch.float64) + 1.0


@pytest.mark.parametrize("name", list(CLOUD_MEASURES))
def test_the_fewest_points_stated_are_the_fewest_taken(name):
    fewest = _fewest_points(name)
    measure = CLOUD_MEASURES[name]
    with pytest.raises(ValueError, match=f"at least {fewest} are needed"):
        measure(_cloud(fewest - 1))
    try:  # with the fewest stated, no refusal for the number of points
        measure(_cloud(fewest))
    except ValueError as err:
        assert "are needed" not in str(err), f"{name}: {err}"


@pytest.mark.parametrize("name", list(CLOUD_MEASURES))
def test_the_bad_input_stated_for_every_cloud_is_refused(name):
    bad = _statement(name, "Bad input")
    assert "not 2-D" in bad and "NaN or infinity" in bad
    measure = CLOUD_MEASURES[name]
    x = _cloud(12)
    with pytest.raises(ValueError, match="must be 2-D"):
        measure(x[0])
    for value in (float("nan"), float("inf")):
        y = x.clone()
        y[3, 2] = value
        with pytest.raises(ValueError, match="NaN or infinite"):
            measure(y)


@pytest.mark.parametrize("name", [n for n in OTHER_MEASURES if n.endswith("_from_stats")])
def test_the_streaming_twins_refuse_a_tensor_as_they_state(name):
    assert "``TypeError`` for anything but" in _statement(name, "Bad input")
    with pytest.raises(TypeError, match="Stats"):
        getattr(iso, name)(_cloud(12))
