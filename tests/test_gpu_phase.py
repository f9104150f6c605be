"""``docs/results/gpu_phase.py``: the GPU phase of ``docs/gpu.md`` from the archived runs.
Each first copy's metric against scikit-learn/scipy on its own ``eval_predictions.csv``, the
first-copy rule on a run that came back three times, the comparisons on hand-made values,
and a cell and reference with other settings refused."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pandas as pd
import pytest
from scipy.stats import pearsonr
from sklearn.metrics import accuracy_score, matthews_corrcoef

ROOT = Path(__file__).resolve().parents[1]
ARCHIVES = ROOT / "docs" / "gpu-runs"
sys.path.insert(0, str(ROOT / "docs" / "results"))
_spec = importlib.util.spec_from_file_location("gpu_phase",
                                               ROOT / "docs" / "results" / "gpu_phase.py")
gp = importlib.util.module_from_spec(_spec)
sys.modules["gpu_phase"] = gp  # its dataclasses look their module up there
_spec.loader.exec_module(gp)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return gp.index(gp.unpack(ARCHIVES, tmp_path_factory.mktemp("gpu")))


def _recomputed(run_dir: Path, task: str) -> float:
    df = pd.read_csv(run_dir / "eval_predictions.csv")
    if task == "stsb":
        return float(pearsonr(df["prediction"], df["label"]).statistic)
    if task == "cola":
        return float(matthews_corrcoef(df["label"], df["prediction"]))
    return float(accuracy_score(df["label"], df["prediction"]))


def test_every_copy_matches_its_predictions(runs: dict) -> None:
    assert len(runs) >= 119  # GPU runs 3-8: 119 distinct runs, 144 copies
    assert sum(len(c) for c in runs.values()) >= 144
    for (key, _seed), copies in runs.items():
        for copy in copies:
            assert copy.value == pytest.approx(_recomputed(copy.run.path, key[0]),
                                               abs=1e-6), copy.run.path


def test_first_copy_rule(runs: dict) -> None:
    # MRPC's base run, seed 1, came back from GPU runs 3, 4 and 5 with 0.7966, 0.8039, 0.7966
    # (docs/gpu.md, from the run logs)
    copies = runs[gp.cell_key("mrpc", istar=False), 1]
    assert [c.gpu_run for c in copies] == [3, 4, 5]
    assert [round(c.value, 4) for c in copies] == [0.7966, 0.8039, 0.7966]
    c = gp.compare(runs, [(gp.cell_key("mrpc", pad=True), gp.cell_key("mrpc", istar=False))])
    first_b1 = runs[gp.cell_key("mrpc", pad=True), 1][0].value
    assert c.d["mrpc"][1] == pytest.approx(100 * (first_b1 - 0.79656862745098), abs=1e-9)


def test_seed0_differences_match_the_published_table(runs: dict) -> None:
    # docs/gpu.md, run 3's seed 0 (isotropy report's table at the time): SST-2 base 0.8612,
    # paper's 0.8280; CoLA's paper's cell predicts one class (Matthews 0) on every seed
    c = gp.compare(runs, [(gp.cell_key(t), gp.cell_key(t, istar=False)) for t in gp.TASKS])
    assert c.d["sst2"][0] == pytest.approx(100 * (0.8280 - 0.8612), abs=0.01)
    assert c.constant["cola"] and not c.constant["sst2"]


def test_verdict_words_only_with_all_seeds() -> None:
    full = gp.Comparison({"a": dict.fromkeys(range(5), 1.0),
                          "b": {0: 1.0, 1: 1.0, 2: 1.0, 3: 1.0, 4: -1.0}},
                         {"a": False, "b": False})
    text = gp.verdict(full)  # 9 of 10 above: p = 11/1024
    assert text.startswith("9 of 10 above 0, 1 below") and "p = 0.011" in text
    assert text.endswith("**supported**")
    partial = gp.Comparison({"a": {0: 1.0, 1: 1.0}}, {"a": False})
    assert "partial" in gp.verdict(partial) and "**" not in gp.verdict(partial)
    down = gp.Comparison({"a": dict.fromkeys(range(5), -1.0),
                          "b": {0: -1.0, 1: -1.0, 2: -1.0, 3: -1.0, 4: 0.0}},
                         {"a": False, "b": False})
    assert gp.verdict(down).endswith("**contradicted**")  # 9 of 10 below: p = 11/1024
    # a tie counts for neither side: 8 below and 2 ties of 10 is p = 56/1024 = 0.055
    ties = gp.Comparison({"a": dict.fromkeys(range(5), -1.0),
                          "b": {0: -1.0, 1: -1.0, 2: -1.0, 3: 0.0, 4: 0.0}},
                         {"a": False, "b": False})
    assert "8 below, 2 exactly 0" in gp.verdict(ties)
    assert gp.verdict(ties).endswith("**inconclusive**")


def test_a_pair_with_other_settings_is_refused(runs: dict) -> None:
    # MRPC at 3e-5 against MRPC's base run at 1e-4: the learning rate differs
    with pytest.raises(ValueError, match="differ in more than the method"):
        gp.compare(runs, [(gp.cell_key("mrpc", lr=3e-5), gp.cell_key("mrpc", istar=False))])


def test_metric_table_rows(runs: dict) -> None:
    lines = gp.metric_table(runs)
    row = next(x for x in lines if x.startswith("| MRPC"))
    assert "| 0.8015 / 0.7966 /" in row  # base, seeds 0 and 1 (first copies)
    sst2 = next(x for x in lines if x.startswith("| SST-2"))
    assert sst2.endswith("|  |  |")  # B2's cells are MRPC's and STS-B's only


def _fake_runs(values: dict[float | None, list[float]]) -> dict:
    """STS-B runs with the given Pearson per seed: key None is the base run."""
    from types import SimpleNamespace

    def run(v: float, name: str) -> object:
        return SimpleNamespace(settings={}, model="minilm", path=Path(name), main_metric="pearson",
                               value=lambda n, which="final": v if n == "pearson" else None)

    out = {}
    for lam, per_seed in values.items():
        key = (gp.cell_key("stsb", istar=False) if lam is None
               else gp.cell_key("stsb", lam=lam, zeta=0.2))
        for seed, v in enumerate(per_seed):
            out[key, seed] = [gp.Copy(9, run(v, f"{lam}-{seed}"))]
    return out


def test_b6_table_2s_rule_on_hand_made_values() -> None:
    base = [0.85, 0.84, 0.86, 0.85, 0.83]
    up = {None: base, **{lam: [b + 0.001 * (3 - abs(lam + 1)) for b in base]
                         for lam in gp.B6_GRID}}
    # lambda = -1 is best (+0.003); the best positive, +1, is 0.001 above base: -1 beats it on
    # every seed
    text = "\n".join(gp.b6(_fake_runs(up)))
    assert "| -1 | +0.30 | +0.30 | +0.30 | +0.30 | +0.30 |" in text
    assert "Highest mean: lambda = -1." in text and "(-1) - the best positive (+1)" in text
    assert "5 of 5 above 0" in text and text.rstrip().endswith("**supported**")
    down = {None: base, **{lam: [b + 0.001 * lam for b in base] for lam in gp.B6_GRID}}
    text = "\n".join(gp.b6(_fake_runs(down)))  # +5 best; the best negative, -1, below it
    assert "Highest mean: lambda = +5." in text and "0 of 5 above 0, 5 below" in text
    assert text.rstrip().endswith("**contradicted**")
    partial = {k: v[:3] for k, v in up.items()}
    text = "\n".join(gp.b6(_fake_runs(partial)))
    assert "partial: no verdict before all five seeds of every lambda" in text
    assert "**" not in text


def test_two_sided_p_matches_scipy_without_ties() -> None:
    from scipy.stats import binomtest

    for up, down in [(5, 15), (15, 5), (10, 10), (0, 6), (9, 1)]:
        c = gp.Comparison({"a": dict(enumerate([1.0] * up + [-1.0] * down))}, {"a": False})
        assert gp.two_sided(c) == pytest.approx(binomtest(up, up + down, 0.5).pvalue,
                                                rel=1e-12)


def test_multiplicity_is_holm_over_the_primary_comparisons() -> None:
    from statsmodels.stats.multitest import multipletests

    def comp(up: int, down: int) -> gp.Comparison:  # five seeds of four tasks: complete
        signs = [1.0] * up + [-1.0] * down
        return gp.Comparison({t: {s: signs[4 * s + i] for s in range(5)}
                              for i, t in enumerate("abcd")}, dict.fromkeys("abcd", False))

    family = {"B1: x": comp(2, 18), "B3: y": comp(6, 14), "B3: z": comp(10, 10)}
    lines = gp.multiplicity(family)
    raw = [gp.two_sided(c) for c in family.values()]
    expected = multipletests(raw, method="holm")[1]
    rows = [line for line in lines if line.startswith("| B")]
    assert [float(r.split(" | ")[2]) for r in rows] == pytest.approx(expected, abs=6e-4)
    assert rows[0].endswith("| contradicted |")  # 2 of 20 above: two-sided 4.0e-4, Holm 1.2e-3
    assert rows[2].endswith("| inconclusive |") and "Provisional" not in "".join(lines)
    partial = gp.multiplicity({**family, "B2: w": gp.Comparison({"a": {0: 1.0}}, {"a": False})})
    assert partial[-2].startswith("Provisional") and "| partial |" in "".join(partial)
    # a member with no pairs yet keeps the family's size (p = 1) and is listed as not run
    missing = gp.multiplicity({**family, "B2: w": gp.Comparison({"a": {}}, {"a": False})})
    assert "| not run |" in "".join(missing) and missing[-2].startswith("Provisional")
    holm4 = multipletests([*raw, 1.0], method="holm")[1]
    rows4 = [line for line in missing if line.startswith("| B")]
    assert [float(r.split(" | ")[2]) for r in rows4] == pytest.approx(holm4, abs=6e-4)


def test_the_plans_primary_test_is_scipys_sign_flip_test_under_holm() -> None:
    import numpy as np
    from scipy.stats import permutation_test
    from statsmodels.stats.multitest import multipletests

    def comp(values: list[list[float]]) -> gp.Comparison:
        return gp.Comparison({f"t{i}": dict(enumerate(v)) for i, v in enumerate(values)},
                             {f"t{i}": False for i in range(len(values))})

    family = {"B1: x": comp([[-1.0, -2.0, -0.5, -1.5, -3.0], [-0.2, 0.1, -0.4, -0.3, 0.0]]),
              "B3: y": comp([[0.3, -0.2, 0.1, 0.4, -0.1], [0.2, 0.0, -0.3, 0.1, 0.2]])}
    lines = gp.plan_reading(family)
    rows = [line.split(" | ") for line in lines if line.startswith("| B")]

    def scipy_p(c: gp.Comparison) -> float:
        groups = [list(v.values()) for v in c.d.values()]
        task = np.concatenate([[i] * len(g) for i, g in enumerate(groups)])

        def statistic(x: np.ndarray, axis: int = -1) -> np.ndarray:
            return np.mean([np.mean(x[..., task == i], axis=axis)
                            for i in range(len(groups))], axis=0)

        return float(permutation_test((np.concatenate(groups),), statistic,
                                      permutation_type="samples", n_resamples=np.inf,
                                      vectorized=True).pvalue)

    raw = [scipy_p(c) for c in family.values()]
    adjusted = multipletests(raw, method="holm")[1]
    assert [float(r[2]) for r in rows] == pytest.approx(raw, abs=6e-4)
    assert [float(r[3]) for r in rows] == pytest.approx(adjusted, abs=6e-4)
    # S: the mean of the two task means, (-1.6 - 0.16) / 2 and (0.1 + 0.04) / 2
    assert [r[1] for r in rows] == ["-0.88", "+0.07"]
    assert adjusted[0] < 0.05 and rows[0][4] == "contradicted |"
    assert adjusted[1] >= 0.05 and rows[1][4] == "inconclusive |"
