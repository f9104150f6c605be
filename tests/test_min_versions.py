"""The lowest supported versions: pyproject's lower bounds are the versions ``make test-min``
installs (``.ci/min-versions.txt``, torch at the Makefile's ``TORCH_PIN``), so that every
declared floor is one the suite runs on."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.floor  # run by make test-min too


def _lower_bounds() -> dict[str, Version]:
    tomllib = pytest.importorskip("tomllib")
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    out = {}
    for text in deps["project"]["dependencies"]:
        req = Requirement(text)
        floors = [Version(s.version) for s in req.specifier if s.operator == ">="]
        assert len(floors) == 1, f"{text}: one lower bound (>=) expected"
        out[req.name] = floors[0]
    return out


def _pins() -> dict[str, Version]:
    out = {}
    for line in (ROOT / ".ci" / "min-versions.txt").read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            name, version = line.split("==")
            out[name.strip()] = Version(version)
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    torch = re.search(r"^TORCH_PIN \?= torch==(\S+)$", makefile, re.MULTILINE)
    assert torch is not None, "TORCH_PIN ?= torch==X.Y.Z in the Makefile"
    out["torch"] = Version(torch.group(1))
    return out


def test_every_lower_bound_is_the_version_the_floor_environment_installs():
    assert _pins() == _lower_bounds()
