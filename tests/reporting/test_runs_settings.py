"""A setting added to ``isotropy train`` after runs were recorded: an earlier run (no key) and
a later one (the key at its default) are the same experiment for the report."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from isotropy.reporting.runs import load_run

DEMO = Path(__file__).resolve().parents[2] / "docs" / "runs" / "demo-sst2" / "none"


@pytest.mark.parametrize(("key", "default"), [("validation_split_percentage", None),
                                              ("classifier_pooling", "cls")])
def test_a_run_from_before_a_setting_equals_one_at_its_default(tmp_path, key, default):
    old, new = tmp_path / "old", tmp_path / "new"
    shutil.copytree(DEMO, old)
    shutil.copytree(DEMO, new)
    for folder, value in ((old, None), (new, default)):
        config = json.loads((folder / "config.json").read_text())
        config["settings"]["isotropy"].pop(key, None)
        if folder is new:
            config["settings"]["isotropy"][key] = value
        (folder / "config.json").write_text(json.dumps(config))
    a, b = load_run(old), load_run(new)
    assert key in a.settings and a.settings == b.settings
    changed = json.loads((new / "config.json").read_text())
    changed["settings"]["isotropy"][key] = 10 if default is None else "mean"
    (new / "config.json").write_text(json.dumps(changed))
    assert load_run(new).settings[key] != a.settings[key]
