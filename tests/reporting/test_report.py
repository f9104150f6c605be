"""``isotropy report``: tables and figures from hand-made run directories with known numbers."""

from __future__ import annotations

import csv
import json
import statistics
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _runs import make_run

from isotropy.reporting.report import (
    collect_runs,
    expand_inputs,
    group_cells,
    table1_rows,
    table2_rows,
    table3_rows,
    write_report,
)

ISTAR_METRICS = {  # (lambda, zeta) -> per-seed metric
    (-1.0, 0.2): [0.60, 0.64, 0.65],
    (-1.0, 0.4): [0.70, 0.72],
    (1.0, 0.2): [0.55, 0.58, 0.50],
    (1.0, 0.4): [0.66, 0.71, 0.70],
}
BASE = [0.61, 0.63, 0.68]
COSREG = [0.59, 0.62]


@pytest.fixture
def sweep_root(tmp_path: Path) -> Path:
    root = tmp_path / "sweep"
    for i, m in enumerate(BASE):
        make_run(root, seed=i + 1, metric=m, iso=0.3 + 0.01 * i)
    for i, m in enumerate(COSREG):
        make_run(root, reg="cosreg", seed=i + 1, metric=m, layer_shift=0.5)
    for (lam, zeta), ms in ISTAR_METRICS.items():
        for i, m in enumerate(ms):
            make_run(root, reg="istar", lam=lam, zeta=zeta, seed=i + 1, metric=m,
                     iso=0.2 + 0.1 * lam + zeta + 0.01 * i, layer_shift=lam * 0.2)
    make_run(root, reg="istar", lam=-1.0, zeta=0.2, seed=9, metric=0.1, finished=False)
    (root / "garbage").mkdir()
    (root / "garbage" / "config.json").write_text("{not json")
    (root / "garbage" / "results.json").write_text("{}")
    return root


def test_cells_mean_std_match_numpy(sweep_root: Path) -> None:
    runs, skipped = collect_runs(expand_inputs([str(sweep_root)]))
    reasons = dict(skipped)
    assert len(runs) == len(BASE) + len(COSREG) + sum(map(len, ISTAR_METRICS.values()))
    assert any("no results.json" in why for why in reasons.values())
    assert any("unreadable config.json" in why for why in reasons.values())
    rows = {r["method"]: r for r in table1_rows(group_cells(runs))}
    assert set(rows) == {"none", "cosreg λ=1", "istar λ=-1 ζ=0.2", "istar λ=-1 ζ=0.4",
                         "istar λ=1 ζ=0.2", "istar λ=1 ζ=0.4"}
    assert rows["none"]["mean"] == pytest.approx(np.mean(BASE))
    assert rows["none"]["std"] == pytest.approx(np.std(BASE, ddof=1))
    assert rows["none"]["n_seeds"] == 3
    assert rows["cosreg λ=1"]["std"] == pytest.approx(statistics.stdev(COSREG))
    # by hand: mean(0.70, 0.72) = 0.71; sample std = |0.70 - 0.72| / sqrt(2)
    assert rows["istar λ=-1 ζ=0.4"]["mean"] == pytest.approx(0.71)
    assert rows["istar λ=-1 ζ=0.4"]["std"] == pytest.approx(0.02 / 2 ** 0.5)
    assert rows["istar λ=-1 ζ=0.4"]["seeds"] == "1 2"


def test_table2_best_istar(sweep_root: Path) -> None:
    runs, _ = collect_runs(expand_inputs([str(sweep_root)]))
    (row,) = table2_rows(group_cells(runs))
    means = {k: np.mean(v) for k, v in ISTAR_METRICS.items()}
    best = max(means, key=means.get)
    assert (row["lambda"], row["zeta"]) == best == (-1.0, 0.4)
    assert row["mean"] == pytest.approx(means[best])
    assert row["n_istar_cells"] == 4


def test_best_record_is_used_when_asked(sweep_root: Path) -> None:
    runs, _ = collect_runs(expand_inputs([str(sweep_root)]), which="best")
    rows = {r["method"]: r for r in table1_rows(group_cells(runs), which="best")}
    assert rows["none"]["mean"] == pytest.approx(np.mean(BASE) + 0.01)


def test_table3_last_30_percent(tmp_path: Path) -> None:
    # steps 10..100: the last 30% are steps >= 70 (70, 80, 90, 100)
    spec1 = [(s, [s / 100, 0.2, 0.1, 0.5, 0.3, 0.2]) for s in range(10, 101, 10)]
    spec2 = [(s, [s / 200, 0.1, 0.1, 0.4, 0.3, 0.2]) for s in range(10, 101, 10)]
    make_run(tmp_path, reg="entropy", seed=1, spectrum=spec1)
    make_run(tmp_path, reg="entropy", seed=2, spectrum=spec2)
    make_run(tmp_path, reg="entropy", select=False, seed=1)  # logged no spectrum
    runs, _ = collect_runs(expand_inputs([str(tmp_path)]))
    (row,) = table3_rows(group_cells(runs))
    assert row["method"] == "entropy β=1" and row["n_seeds"] == 2
    s1 = (0.7 + 0.8 + 0.9 + 1.0) / 4
    s2 = s1 / 2
    assert row["raw_1_mean"] == pytest.approx((s1 + s2) / 2)
    assert row["raw_1_std"] == pytest.approx(abs(s1 - s2) / 2 ** 0.5)
    assert row["raw_2_mean"] == pytest.approx(0.15)
    assert row["centred_1_mean"] == pytest.approx(0.45)
    assert row["centred_3_std"] == pytest.approx(0.0)


def test_table3_window_is_that_of_the_metric(tmp_path: Path) -> None:
    # 174 training steps, the spectrum logged every 10 (10..170): the last 30% are steps
    # >= 0.7 * 174 = 121.8, i.e. 130..170, as for the evaluations (not >= 0.7 * 170 = 119).
    spec = [(s, [s / 1000, 0.2, 0.1, 0.5, 0.3, 0.2]) for s in range(10, 171, 10)]
    make_run(tmp_path, reg="entropy", seed=1, spectrum=spec, global_step=174)
    runs, _ = collect_runs(expand_inputs([str(tmp_path)]))
    (row,) = table3_rows(group_cells(runs))
    assert row["raw_1_mean"] == pytest.approx((0.13 + 0.14 + 0.15 + 0.16 + 0.17) / 5)
    assert (row["n_seeds"], row["n_no_logs"]) == (1, 0)


def test_table3_counts_runs_with_no_log_in_the_window(tmp_path: Path) -> None:
    # Logged every 60 of 100 steps: step 60 only, before the window (>= 70): left out, counted.
    spec = [(s, [s / 1000, 0.2, 0.1, 0.5, 0.3, 0.2]) for s in range(10, 101, 10)]
    make_run(tmp_path, reg="entropy", seed=1, spectrum=spec, global_step=100)
    make_run(tmp_path, reg="entropy", seed=2, spectrum=[(60, [0.9] * 6)], global_step=100)
    runs, _ = collect_runs(expand_inputs([str(tmp_path)]))
    (row,) = table3_rows(group_cells(runs))
    assert (row["n_seeds"], row["n_no_logs"]) == (1, 1)
    assert row["raw_1_mean"] == pytest.approx((0.07 + 0.08 + 0.09 + 0.1) / 4)


def test_write_report_tables(sweep_root: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    res = write_report([str(sweep_root)], out, figures=False)
    md = (out / "report.md").read_text()
    assert "Table 1" in md and "garbage" in md and "no results.json" in md
    assert f"{np.mean(BASE):.4f} ± {np.std(BASE, ddof=1):.4f} (n=3)" in md
    with open(out / "table1.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(res["cells"]) == 6
    none = next(r for r in rows if r["method"] == "none")
    assert float(none["mean"]) == pytest.approx(np.mean(BASE))
    with open(out / "table2.csv") as f:
        (t2,) = list(csv.DictReader(f))
    assert float(t2["lambda"]) == -1.0 and float(t2["zeta"]) == 0.4
    single = make_run(tmp_path / "one", seed=5, metric=0.5)
    write_report([str(single)], tmp_path / "out1", figures=False)
    with open(tmp_path / "out1" / "table1.csv") as f:
        (row,) = list(csv.DictReader(f))
    assert row["std"] == "" and row["n_seeds"] == "1"


def test_duplicate_and_other_format(tmp_path: Path) -> None:
    a = make_run(tmp_path / "a", seed=1)
    b = make_run(tmp_path / "b", seed=1)
    c = make_run(tmp_path / "c", seed=2)
    results = json.loads((c / "results.json").read_text())
    del results["main_metric"]
    (c / "results.json").write_text(json.dumps(results))
    runs, skipped = collect_runs([a, b, c])
    assert [r.path for r in runs] == [a]
    reasons = dict(skipped)
    assert "duplicate" in reasons[str(b)]
    assert "another format" in reasons[str(c)] and "main_metric" in reasons[str(c)]


def test_figure_files_keep_a_dotted_model_name_whole(tmp_path: Path) -> None:
    """``Qwen2.5-0.5B`` and ``Qwen2.5-0.6B``: the figure's name was cut at the last dot
    (``Path.with_suffix``), so both models' figures went to ``..._Qwen2.5-0.png``."""
    from matplotlib.figure import Figure

    from isotropy.reporting.plotting import _save

    paths = [p.name for stem in ("fig4_sst2_Qwen2.5-0.5B", "fig4_sst2_Qwen2.5-0.6B")
             for p in _save(Figure(), tmp_path / stem)]
    assert paths == ["fig4_sst2_Qwen2.5-0.5B.png", "fig4_sst2_Qwen2.5-0.5B.svg",
                     "fig4_sst2_Qwen2.5-0.6B.png", "fig4_sst2_Qwen2.5-0.6B.svg"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(paths)


@pytest.mark.parametrize("task", ["x/../../escaped", "..", "a\\b", ""])
def test_a_task_that_is_not_a_name_is_left_out_and_names_no_file(tmp_path: Path,
                                                                  task: str) -> None:
    """The task names the figure files (``fig4_<task>_<model>.png``): a results.json whose
    task holds a path (before: the figures were written outside the report's folder) is
    left out with its reason, and nothing is written outside ``--output-dir``."""
    good = make_run(tmp_path / "runs" / "a", seed=1)
    bad = make_run(tmp_path / "runs" / "b", seed=2)
    results = json.loads((bad / "results.json").read_text())
    results["task"] = task
    (bad / "results.json").write_text(json.dumps(results))
    config = json.loads((bad / "config.json").read_text())
    config["settings"]["isotropy"]["task"] = task
    (bad / "config.json").write_text(json.dumps(config))
    runs, skipped = collect_runs([good, bad])
    assert [r.path for r in runs] == [good]
    assert "is not a task's name" in dict(skipped)[str(bad)]
    before = {p for p in tmp_path.rglob("*") if "out" not in p.parts}
    write_report([str(tmp_path / "runs" / "*")], tmp_path / "deep" / "out")
    after = {p for p in tmp_path.rglob("*") if "out" not in p.parts}
    assert after - before == {tmp_path / "deep"} and before <= after


def test_no_usable_run_and_empty_glob(tmp_path: Path) -> None:
    run = make_run(tmp_path / "r", finished=False)
    with pytest.raises(ValueError, match="no usable run"):
        write_report([str(tmp_path / "r")], tmp_path / "out")
    assert not (tmp_path / "out").exists()
    with pytest.raises(FileNotFoundError, match="matches no directory"):
        expand_inputs([str(tmp_path / "nothing-*")])
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(FileNotFoundError, match="matches no directory"):
        expand_inputs([str(tmp_path / "notes*")])
    assert expand_inputs([str(tmp_path / "*")]) == [run]  # r/ is a root; notes.txt ignored
    # an isotropy sweep output root: its logs/ folder is not a run, as a root or by a glob
    (tmp_path / "r" / "logs").mkdir()
    assert expand_inputs([str(tmp_path / "r")]) == [tmp_path / "r" / "logs", run]  # no sweep
    (tmp_path / "r" / "sweep.json").write_text("{}")
    assert expand_inputs([str(tmp_path / "r")]) == [run]
    assert expand_inputs([str(tmp_path / "r" / "*")]) == [run]


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


FIG_PIXELS = (800, 500)


@pytest.mark.slow
def test_figures_from_fixture_runs(sweep_root: Path, tmp_path: Path) -> None:
    for seed in (1, 2):
        spec = [(s, [0.9 - s / 1000, 0.05, 0.02, 0.3, 0.2, 0.1 + seed / 100])
                for s in range(10, 101, 10)]
        make_run(sweep_root, reg="entropy", seed=seed, spectrum=spec, metric=0.6)
        make_run(sweep_root, reg="entropy", select=False, seed=seed, spectrum=spec)
        make_run(sweep_root, reg="none", task="cola", seed=seed, spectrum=spec)
    for layer, ms in ONE_LAYER.items():
        for i, m in enumerate(ms):
            make_run(sweep_root, reg="istar", lam=-1.0, zeta=0.2, seed=i + 1, metric=m,
                     istar_layers=layer)
    out = tmp_path / "out"
    res = write_report([str(sweep_root)], out)
    stems = {f.stem for f in res["files"] if f.parent.name == "figures"}
    expected = {f"{n}_rte_minilm"
                for n in ("fig3", "fig4", "fig5", "fig6", "fig7", "fig8", "pe_fig1")}
    assert expected <= stems
    assert "pe_fig1_cola_minilm" in stems and "fig3_cola_minilm" not in stems
    for stem in stems:
        png, svg = out / "figures" / f"{stem}.png", out / "figures" / f"{stem}.svg"
        assert png_size(png) == FIG_PIXELS
        assert svg.stat().st_size > 0 and b"<svg" in svg.read_bytes()[:2000]
    skipped = dict(res["skipped_figures"])
    assert any(k.startswith("fig3_cola_minilm") for k in skipped)
    md = (out / "report.md").read_text()
    assert "![fig3_rte_minilm](figures/fig3_rte_minilm.png)" in md
    assert "fig7_cola_minilm" in md and "at least two ζ" in md


ONE_LAYER = {"3": [0.70, 0.74], "1": [0.52], "2": [0.66, 0.60, 0.62]}  # layer -> per seed


def test_fig8_numbers_and_table2_ignore_one_layer_runs(sweep_root: Path) -> None:
    from isotropy.reporting.figures import fig8_data

    # at (-1, 0.4): not the first global cell in (λ, ζ) order, so matching the global line on
    # λ alone or on ζ alone would pick another cell
    for layer, ms in ONE_LAYER.items():
        for i, m in enumerate(ms):
            make_run(sweep_root, reg="istar", lam=-1.0, zeta=0.4, seed=i + 1, metric=m,
                     istar_layers=layer)
    # at (1, 0.2): written "-1" and "last" (= layer 3 of N_LAYERS = 3) and " 1"
    for layer, m in (("-1", 0.50), (" 1", 0.40)):
        make_run(sweep_root, reg="istar", lam=1.0, zeta=0.2, seed=1, metric=m,
                 istar_layers=layer)
    make_run(sweep_root, reg="istar", lam=1.0, zeta=0.2, seed=2, metric=0.60,
             istar_layers="3")  # layer 3 again, spelled otherwise: pooled with "-1"
    make_run(sweep_root, reg="istar", lam=3.0, zeta=0.2, seed=1, metric=0.3,
             istar_layers="last")  # no global run at (3, 0.2)
    runs, _ = collect_runs(expand_inputs([str(sweep_root)]))
    cells = group_cells(runs)
    d_m1, d_p1, d_p3 = fig8_data(cells)
    assert [(d["lambda"], d["zeta"]) for d in (d_m1, d_p1, d_p3)] == [(-1, 0.4), (1, 0.2),
                                                                         (3, 0.2)]
    # by hand: layer 1 one seed (no std); layer 2 mean 1.88 / 3, sample std
    # sqrt((0.0333² + 0.0267² + 0.0067²) / 2) = 0.0305505; layer 3 mean 0.72, std 0.04 / √2
    assert [t[0] for t in d_m1["layers"]] == [1, 2, 3]
    assert d_m1["layers"][0][1:] == (0.52, None, 1)
    assert d_m1["layers"][1][1:] == pytest.approx((1.88 / 3, 0.0305505, 3), abs=1e-6)
    assert d_m1["layers"][2][1:] == pytest.approx((0.72, 0.04 / 2 ** 0.5, 2))
    glob = ISTAR_METRICS[(-1.0, 0.4)]
    assert d_m1["global"] == pytest.approx((statistics.mean(glob), statistics.stdev(glob), 2))
    assert d_m1["base"] == pytest.approx((statistics.mean(BASE), statistics.stdev(BASE), 3))
    assert d_p1["layers"][0] == (1, 0.40, None, 1)
    assert d_p1["layers"][1] == pytest.approx((3, 0.55, 0.1 / 2 ** 0.5, 2))
    glob = ISTAR_METRICS[(1.0, 0.2)]
    assert d_p1["global"] == pytest.approx((statistics.mean(glob), statistics.stdev(glob), 3))
    assert d_p3["layers"] == [(3, 0.3, None, 1)] and d_p3["global"] is None
    # Table 2 is over the global penalty only: layer 3's 0.72 beats every global cell's mean
    # but (-1, 0.4) at 0.71 stays the best; Table 1 lists the one-layer cells with their layer
    (row,) = table2_rows(cells)
    assert (row["lambda"], row["zeta"], row["n_istar_cells"]) == (-1.0, 0.4, 4)
    labels = {r["method"] for r in table1_rows(cells)}
    assert {"istar λ=-1 ζ=0.4 layers 1", "istar λ=1 ζ=0.2 layers -1",
            "istar λ=1 ζ=0.2 layers 1", "istar λ=3 ζ=0.2 layers last"} <= labels


def _series_colours(fig: Any) -> dict[str, str]:
    from matplotlib.colors import to_hex

    out = {}
    for ax in fig.axes:
        for c in ax.containers:
            if hasattr(c, "lines") and not c.get_label().startswith("_"):
                out[c.get_label()] = to_hex(c.lines[0].get_color())
        for line in ax.get_lines():
            if not line.get_label().startswith("_"):
                out[line.get_label()] = to_hex(line.get_color())
    return out


def test_colours_are_fixed_per_method_and_distinct_within_a_figure(sweep_root: Path,
                                                                   tmp_path: Path) -> None:
    from isotropy.reporting.figures import (
        ENTROPY_COLOURS,
        _fig5,
        _fig7,
        _fig8,
        _pe_fig1,
        lambda_colour,
    )

    spec = [(s, [0.9, 0.05, 0.02, 0.3, 0.2, 0.1]) for s in range(10, 101, 10)]
    make_run(tmp_path / "a", reg="entropy", select=False, spectrum=spec)
    make_run(tmp_path / "b", reg="none", spectrum=spec)
    make_run(tmp_path / "b", reg="entropy", select=False, spectrum=spec)
    make_run(tmp_path / "b", reg="entropy", beta=0.5, select=False, spectrum=spec)
    for root in (tmp_path / "a", tmp_path / "b"):  # the same colour whatever else is drawn
        cells = group_cells(collect_runs(expand_inputs([str(root)]))[0])
        colours = _series_colours(_pe_fig1(("rte", "minilm"), cells, "final"))
        assert colours["entropy β=1 (all bars), σ1"] == ENTROPY_COLOURS[False].lower()
        firsts = [c for label, c in colours.items() if label.endswith("σ1")]
        assert len(set(firsts)) == len(firsts)  # β = 0.5 gets a colour of its own
    assert colours["none, σ1"] == "#000000"

    for zeta in (0.4, 0.2):  # one λ, two ζ: two series that must not share a colour
        make_run(sweep_root, reg="istar", lam=-1.0, zeta=zeta, seed=1, metric=0.6,
                 istar_layers="2")
    cells = group_cells(collect_runs(expand_inputs([str(sweep_root)]))[0])
    key = ("rte", "minilm")
    fig5, fig7, fig8 = (_series_colours(f(key, cells, "final")) for f in (_fig5, _fig7, _fig8))
    lams = [-1.0, 1.0]
    assert lambda_colour(-1, lams) != lambda_colour(1, lams)
    assert fig5["I-STAR λ=-1 (ζ=0.4)"] == fig7["λ=-1"] == lambda_colour(-1, lams)
    assert fig5["I-STAR λ=1 (ζ=0.4)"] == fig7["λ=1"] == lambda_colour(1, lams)
    # (-1, 0.2) comes first and keeps λ's colour; (-1, 0.4) and its global line get another
    assert fig8["one layer, λ=-1, ζ=0.2 (mean ± std, n=1)"] == lambda_colour(-1, lams)
    other = fig8["one layer, λ=-1, ζ=0.4 (mean ± std, n=1)"]
    assert other != lambda_colour(-1, lams)
    assert fig8["all layers, λ=-1, ζ=0.4 (mean ± 1 std band, n=2)"] == other
    assert len(set(fig5.values())) == len(fig5)


def _error_bar_lengths(fig: Any) -> list[float]:
    """The length of every error bar drawn (NaN bars, which matplotlib skips, left out)."""
    from matplotlib.container import ErrorbarContainer

    out = []
    for ax in fig.axes:
        for c in ax.containers:
            if isinstance(c, ErrorbarContainer):
                for coll in c.lines[2]:
                    out += [float(np.abs(seg[1] - seg[0]).max()) for seg in coll.get_segments()
                            if len(seg) == 2 and np.isfinite(seg).all()]
    return out


def test_one_seed_draws_no_error_bars(tmp_path: Path) -> None:
    from isotropy.reporting.figures import _fig3, _fig4, _fig5, _fig6, _fig7, _fig8, _pe_fig1

    root = tmp_path / "runs"
    spec = [(s, [0.9, 0.05, 0.02, 0.3, 0.2, 0.1]) for s in range(10, 101, 10)]
    make_run(root, seed=1, spectrum=spec)
    make_run(root, reg="cosreg", seed=1, layer_shift=0.5)
    make_run(root, reg="entropy", seed=1, spectrum=spec)
    for lam in (-1.0, 1.0):
        for zeta in (0.2, 0.4):
            make_run(root, reg="istar", lam=lam, zeta=zeta, seed=1, metric=0.5 + lam / 10,
                     iso=0.2 + zeta, layer_shift=lam * 0.2)
    make_run(root, reg="istar", lam=-1.0, zeta=0.2, seed=1, metric=0.6, istar_layers="1")
    cells = group_cells(collect_runs(expand_inputs([str(root)]))[0])
    key = ("rte", "minilm")
    for draw in (_fig3, _fig4, _fig5, _fig6, _fig7, _fig8, _pe_fig1):
        assert _error_bar_lengths(draw(key, cells, "final")) == [], draw.__name__
    # a second seed of layer 2 only: its bar is drawn, layer 1's single seed gets none
    for seed, m in ((1, 0.60), (2, 0.70)):
        make_run(root, reg="istar", lam=-1.0, zeta=0.2, seed=seed, metric=m, istar_layers="2")
    cells = group_cells(collect_runs(expand_inputs([str(root)]))[0])
    assert _error_bar_lengths(_fig8(key, cells, "final")) == pytest.approx(
        [2 * statistics.stdev([0.60, 0.70])])


def test_isoscore_star_of_different_measurement_zeta_is_not_compared(tmp_path: Path) -> None:
    from isotropy.reporting.figures import _fig3, _fig6, _Skip

    root = tmp_path / "runs"
    make_run(root, seed=1)
    for lam in (-1.0, 1.0):
        make_run(root, reg="istar", lam=lam, zeta=0.8, seed=1, measured_zeta=0.2)
    cells = group_cells(collect_runs(expand_inputs([str(root)]))[0])
    fig = _fig3(("rte", "minilm"), cells, "final")
    assert "ζ=0.2" in fig.axes[0].get_xlabel()
    base = next(c for c in fig.axes[0].containers if c.get_label() == "no regularizer")
    assert base.lines[0].get_xydata().tolist() == [[0.1, 0.5]]  # make_run's defaults
    assert "ζ=0.2" in _fig6(("rte", "minilm"), cells, "final").axes[0].get_ylabel()
    make_run(root, reg="istar", lam=3.0, zeta=0.8, seed=1, measured_zeta=0.8)  # an older run
    cells = group_cells(collect_runs(expand_inputs([str(root)]))[0])
    for draw in (_fig3, _fig6):
        with pytest.raises(_Skip, match=r"different ζ \(0.2, 0.8\)"):
            draw(("rte", "minilm"), cells, "final")


@pytest.mark.slow
def test_runs_of_other_settings_are_kept_apart_not_pooled(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    for seed, (a, b) in enumerate([(0.60, 0.70), (0.62, 0.74)], start=1):
        make_run(root, seed=seed, metric=a, training={"learning_rate": 1e-5})
        make_run(root, seed=seed, metric=b, training={"learning_rate": 3e-5})
        make_run(root, reg="istar", lam=-1.0, seed=seed, metric=b - 0.1,
                 training={"learning_rate": 3e-5})
        make_run(root, reg="istar", lam=1.0, seed=seed, metric=b - 0.2,
                 training={"learning_rate": 3e-5})
    make_run(tmp_path / "again", seed=1, metric=0.0, training={"learning_rate": 3e-5})
    runs, skipped = collect_runs(expand_inputs([str(root), str(tmp_path / "again")]))
    assert len(runs) == 8
    ((dup, why),) = skipped  # same cell, same setting, same seed
    assert "again" in dup and why.startswith("duplicate of")
    cells = group_cells(runs)
    rows = {(r["method"], r["setting"]): r for r in table1_rows(cells)}
    assert set(rows) == {("none", "learning_rate=1e-05"), ("none", "learning_rate=3e-05"),
                         ("istar λ=-1 ζ=0.2", "learning_rate=3e-05"),
                         ("istar λ=1 ζ=0.2", "learning_rate=3e-05")}
    assert rows[("none", "learning_rate=1e-05")]["mean"] == pytest.approx(0.61)
    assert rows[("none", "learning_rate=3e-05")]["mean"] == pytest.approx(0.72)
    (t2,) = table2_rows(cells)
    assert t2["setting"] == "learning_rate=3e-05" and t2["lambda"] == -1.0
    res = write_report([str(root)], tmp_path / "out")
    stems = {f.stem for f in res["files"] if f.suffix == ".png"}
    assert "fig3_rte_minilm_s2" in stems  # s2: learning_rate=3e-05, named in report.md
    assert "fig5_rte_minilm_s1" in stems  # base alone
    md = (tmp_path / "out" / "report.md").read_text()
    assert "| none [learning_rate=1e-05] | 0.6100" in md
    assert "`s1`: `learning_rate=1e-05`; `s2`: `learning_rate=3e-05`" in md
    # with one learning rate only, nothing is labelled
    only = group_cells(collect_runs(expand_inputs([str(p) for p in root.iterdir()
                                                   if "3e-05" in p.name]))[0])
    assert {c.setting for c in only} == {""}


def test_equal_settings_spelled_otherwise_and_bookkeeping_settings_pool(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    # the same experiment: epochs as 3, 3.0 or "3" (a YAML config), lr as "1e-4" or 0.0001;
    # logging, data loading, evaluation batch, device and measurement settings differ
    variants = [
        {"num_train_epochs": 3, "learning_rate": "1e-4", "logging_steps": 10},
        {"num_train_epochs": 3.0, "learning_rate": 0.0001, "dataloader_num_workers": 2,
         "per_device_eval_batch_size": 64, "use_cpu": True, "report_to": ["tensorboard"]},
        {"num_train_epochs": "3", "learning_rate": 1e-4, "logging_dir": None, "save_steps": 7},
    ]
    for seed, training in enumerate(variants, start=1):
        make_run(root, seed=seed, metric=0.5 + seed / 100, training=training,
                 measured_zeta=0.2 if seed > 1 else 0.4)
    runs, skipped = collect_runs(expand_inputs([str(root)]))
    assert not skipped and {r.setting for r in runs} == {""}
    (row,) = table1_rows(group_cells(runs))
    assert (row["setting"], row["n_seeds"]) == ("", 3)
    # a real difference (epochs 3 vs 4) still splits
    make_run(root, seed=1, metric=0.7, training={"num_train_epochs": 4, "learning_rate": 1e-4})
    runs, _ = collect_runs(expand_inputs([str(root)]))
    assert sorted({r.setting for r in runs}) == ["num_train_epochs=3", "num_train_epochs=4"]


def test_cli_report(sweep_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from isotropy.cli.main import main

    out = tmp_path / "cli-out"
    assert main(["report", str(sweep_root / "rte-*"), "--output-dir", str(out),
                 "--no-figures"]) == 0
    assert (out / "report.md").is_file() and (out / "table1.csv").is_file()
    assert not (out / "figures").exists()
    with pytest.raises(SystemExit) as exc:
        main(["report", str(tmp_path / "nothing-*"), "--output-dir", str(out)])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("isotropy report: error:") and "matches no directory" in err
    assert "\n" not in err
    unfinished = make_run(tmp_path / "u", finished=False)
    with pytest.raises(SystemExit) as exc:
        main(["report", str(unfinished), "--output-dir", str(tmp_path / "o2")])
    assert exc.value.code == 2
    assert "no usable run" in capsys.readouterr().err
    assert not (tmp_path / "o2").exists()


# --------------------------------------------------------------- persistent-entropy Table 2


def test_pe_table2_averages_the_evaluations_of_the_last_30_percent(tmp_path: Path) -> None:
    from isotropy.reporting.report import pe_table2_rows

    root = tmp_path / "runs"
    # 100 steps: the window is steps >= 70. Step 100 is logged twice (the best model evaluated
    # again at the end): only the first counts.
    make_run(root, reg="entropy", seed=1, global_step=100,
             evals=[(20, 0.5), (40, 0.6), (60, 0.65), (70, 0.7), (80, 0.8), (100, 0.9),
                    (100, 0.0)])
    make_run(root, reg="entropy", seed=2, global_step=100,
             evals=[(20, 0.4), (69, 0.5), (70, 0.6), (80, 0.7), (100, 0.8)])
    # base: one evaluation per epoch of 3 (steps 33, 66, 100): only the last is in the window
    make_run(root, seed=1, global_step=100, evals=[(33, 0.5), (66, 0.6), (100, 0.62)])
    make_run(root, seed=2, global_step=100, evals=[(33, 0.5), (66, 0.6), (100, 0.66)])
    make_run(root, seed=3, global_step=100, evals=[(50, 0.9)])  # none in the window
    runs, _ = collect_runs(expand_inputs([str(root)]))
    rows = {r["method"]: r for r in pe_table2_rows(group_cells(runs))}
    ent = rows["entropy β=1"]
    # by hand: seed 1 (0.7 + 0.8 + 0.9) / 3 = 0.8, seed 2 (0.6 + 0.7 + 0.8) / 3 = 0.7
    assert ent["mean"] == pytest.approx(0.75)
    assert ent["std"] == pytest.approx(0.1 / 2 ** 0.5)
    assert (ent["n_evals"], ent["few_evals"], ent["n_no_evals"]) == ("3 3", False, 0)
    base = rows["none"]
    assert base["mean"] == pytest.approx(0.64) and base["std"] == pytest.approx(0.04 / 2 ** 0.5)
    assert (base["n_seeds"], base["seeds"], base["n_evals"]) == (2, "1 2", "1 1")
    assert base["few_evals"] is True and base["n_no_evals"] == 1

    out = tmp_path / "out"
    res = write_report([str(root)], out, figures=False)
    assert out / "pe_table2.csv" in res["files"]
    with open(out / "pe_table2.csv") as f:
        csv_rows = {r["method"]: r for r in csv.DictReader(f)}
    assert float(csv_rows["entropy β=1"]["mean"]) == pytest.approx(0.75)
    assert csv_rows["none"]["few_evals"] == "True"
    md = (out / "report.md").read_text()
    assert "## Persistent-entropy Table 2: main metric over the last 30% of training" in md
    assert ("| rte | minilm | none | accuracy | 0.6400 ± 0.0283 | 2 | 1 1 (a run has fewer "
            "than 2); 1 run(s) with none, left out |") in md
    assert "| rte | minilm | entropy β=1 | accuracy | 0.7500 ± 0.0707 | 2 | 3 3 |" in md
    assert "Note: in 1 of 2 cells a run had fewer than 2 evaluations" in md


def test_pe_table2_total_steps_fall_back_to_the_last_logged_step(tmp_path: Path) -> None:
    from isotropy.reporting.report import tail_evaluations

    d = make_run(tmp_path, evals=[(10, 0.1), (25, 0.2), (30, 0.4)])  # no train.global_step
    (run,), _ = collect_runs([d])
    assert run.total_steps == 30.0 and run.evaluations == [(10, 0.1), (25, 0.2), (30, 0.4)]
    assert tail_evaluations(run.evaluations, run.total_steps) == [0.2, 0.4]  # steps >= 21
    d = make_run(tmp_path / "g", evals=[(10, 0.1), (25, 0.2), (30, 0.4)], global_step=100)
    (run,), _ = collect_runs([d])
    assert run.total_steps == 100.0
    assert tail_evaluations(run.evaluations, run.total_steps) == []


def test_pe_fig2_mean_and_band_over_seeds(tmp_path: Path) -> None:
    from matplotlib.collections import PolyCollection

    from isotropy.reporting.figures import ENTROPY_COLOURS, _pe_fig2, pe_fig2_data

    root = tmp_path / "runs"
    make_run(root, reg="entropy", seed=1, global_step=100, evals=[(50, 0.6), (100, 0.8)])
    make_run(root, reg="entropy", seed=2, global_step=100, evals=[(50, 0.7), (100, 0.7)])
    make_run(root, seed=1, global_step=100, evals=[(50, 0.5), (100, 0.55)])
    make_run(root, reg="istar", lam=-1.0, seed=1)  # not in Fig. 2
    cells = group_cells(collect_runs(expand_inputs([str(root)]))[0])
    data = {d["cell"].method.label: d for d in pe_fig2_data(cells)}
    assert set(data) == {"none", "entropy β=1"}
    ent = data["entropy β=1"]
    assert ent["steps"] == [50.0, 100.0] and ent["n"] == 2
    assert ent["mean"] == pytest.approx([0.65, 0.75])
    assert ent["std"] == pytest.approx([0.1 / 2 ** 0.5, 0.1 / 2 ** 0.5])
    assert data["none"]["std"] is None  # one seed: no band
    fig = _pe_fig2(("rte", "minilm"), cells, "final")
    colours = _series_colours(fig)
    assert colours["none (mean, n=1)"] == "#000000"
    assert colours["entropy β=1 (mean ± 1 std band, n=2)"] == ENTROPY_COLOURS[True].lower()
    bands = [c for c in fig.axes[0].collections if isinstance(c, PolyCollection)]
    assert len(bands) == 1  # the entropy band only
    lo, hi = bands[0].get_paths()[0].vertices[:, 1].min(), bands[0].get_paths()[0].vertices[
        :, 1].max()
    assert (lo, hi) == pytest.approx((0.65 - 0.1 / 2 ** 0.5, 0.75 + 0.1 / 2 ** 0.5))
    res = write_report([str(root)], tmp_path / "out")
    assert {"pe_fig2_rte_minilm.png", "pe_fig2_rte_minilm.svg"} <= {f.name for f in res["files"]}
    assert png_size(tmp_path / "out" / "figures" / "pe_fig2_rte_minilm.png") == FIG_PIXELS
    only_istar = group_cells(collect_runs([next(root.glob("*istar*"))])[0])
    from isotropy.reporting.figures import _Skip

    with pytest.raises(_Skip, match="no base or entropy run"):
        _pe_fig2(("rte", "minilm"), only_istar, "final")


# --------------------------------------------------------------- SQuAD F1 and EM


def test_table1_squad_shows_f1_and_em(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    for seed, (f1, em) in enumerate([(80.0, 70.0), (84.0, 73.0)], start=1):
        make_run(root, task="squad", seed=seed, metric=f1, em=em)
        make_run(root, task="squad", reg="cosreg", seed=seed, metric=f1 - 10, em=em - 10)
    make_run(root, seed=1, metric=0.6)  # rte: accuracy only
    runs, _ = collect_runs(expand_inputs([str(root)]))
    rows = table1_rows(group_cells(runs))
    squad = [(r["method"], r["metric"]) for r in rows if r["task"] == "squad"]
    assert squad == [("none", "f1"), ("none", "exact_match"), ("cosreg λ=1", "f1"),
                     ("cosreg λ=1", "exact_match")]
    em = next(r for r in rows if r["metric"] == "exact_match" and r["method"] == "none")
    assert em["mean"] == pytest.approx(71.5) and em["std"] == pytest.approx(3 / 2 ** 0.5)
    assert [r["metric"] for r in rows if r["task"] == "rte"] == ["accuracy"]
    write_report([str(root)], tmp_path / "out", figures=False)
    md = (tmp_path / "out" / "report.md").read_text()
    assert "| method | rte (accuracy) | squad (f1 / exact_match) |" in md
    # by hand: F1 82 ± 4/√2 = 2.8284, EM 71.5 ± 3/√2 = 2.1213
    assert "| none | 0.6000 (n=1) | 82.0000 ± 2.8284 / 71.5000 ± 2.1213 (n=2) |" in md
    assert "| cosreg λ=1 | – | 72.0000 ± 2.8284 / 61.5000 ± 2.1213 (n=2) |" in md
    # an older SQuAD run without EM: F1 shown, EM "–"
    make_run(tmp_path / "old", task="squad", seed=1, metric=50.0)
    write_report([str(tmp_path / "old")], tmp_path / "out2", figures=False)
    assert "| none | 50.0000 / – (n=1) |" in (tmp_path / "out2" / "report.md").read_text()


# --------------------------------------------------------------- measurement format


def test_measurement_format_is_read_from_config(tmp_path: Path) -> None:
    from isotropy.reporting.report import measurement_format

    assert measurement_format({}) == 1
    assert measurement_format({"measurement_format": 1}) == 1
    assert measurement_format({"measurement_format": 2}) == 2
    for bad in (3, "2", True, 2.0, None):
        with pytest.raises(ValueError, match="measurement_format"):
            measurement_format({"measurement_format": bad})
    a, b, c = make_run(tmp_path, seed=1), make_run(tmp_path, seed=2, fmt=2), make_run(
        tmp_path, seed=3, fmt=7)
    runs, skipped = collect_runs([a, b, c])
    assert [r.measurement_format for r in runs] == [1, 2]
    ((path, why),) = skipped
    assert path == str(c) and "measurement_format 7" in why and "\n" not in why


def _spectrum(seed: int) -> list[tuple[int, list[float]]]:
    return [(s, [0.9, 0.05, 0.02, 0.3, 0.2, 0.1 + seed / 100]) for s in range(10, 101, 10)]


def _format_runs(root: Path, formats: tuple[Any, Any]) -> None:
    """Base and entropy runs (with spectra) and I-STAR λ = ±1, seed 1 of format formats[0] and
    seed 2 of formats[1]."""
    for seed, fmt in enumerate(formats, start=1):
        make_run(root, seed=seed, fmt=fmt, spectrum=_spectrum(seed), metric=0.5 + seed / 10)
        make_run(root, reg="entropy", seed=seed, fmt=fmt, spectrum=_spectrum(seed))
        for lam in (-1.0, 1.0):
            make_run(root, reg="istar", lam=lam, seed=seed, fmt=fmt, iso=0.1 + lam / 10)


FORMAT_1_NOTE = (
    "Measurement format 1 (all runs): per-layer IsoScore* (Fig. 6, "
    "`eval_isoscore_star_{cls,token}_layer*`, `eval_isoscore_star_last`) was shrunk toward the "
    "union-of-layers Σ_S, not each layer's own, and the training [CLS] spectrum (Table 3, "
    "persistent-entropy Fig. 1) was taken per micro-batch, not over the gradient-accumulation "
    "cycle; these values are not comparable with runs of format 2.")
MIXED = ("runs of measurement format 1 (per-layer IsoScore* shrunk toward the union's Σ_S; "
         "training [CLS] spectrum per micro-batch) and format 2 (per-layer IsoScore* shrunk "
         "toward each layer's own Σ_S; training [CLS] spectrum over the whole "
         "gradient-accumulation cycle) cannot be pooled; report them separately")


def test_mixed_measurement_formats_are_not_pooled_per_layer_or_spectrum(tmp_path: Path,
                                                                        capsys: Any) -> None:
    from isotropy.cli.main import main

    root = tmp_path / "runs"
    _format_runs(root, (None, 2))  # seed 1 recorded before the mark (format 1), seed 2 after
    out = tmp_path / "out"
    res = write_report([str(root)], out)
    assert set(res["refused"]) == {"fig6", "table3", "pe_fig1"}
    stems = {f.stem for f in res["files"] if f.suffix == ".png"}
    assert not {"fig6_rte_minilm", "pe_fig1_rte_minilm"} & stems
    assert {"fig3_rte_minilm", "fig5_rte_minilm", "pe_fig2_rte_minilm"} <= stems
    # refused outputs are said once, not as a per-figure skip
    assert not any(k.startswith(("fig6", "pe_fig1")) for k, _ in res["skipped_figures"])
    md = (out / "report.md").read_text()
    for line in (f"- Fig. 6 (I-STAR, IsoScore* per layer) not drawn: {MIXED}",
                 "- persistent-entropy Fig. 1 ([CLS] spectrum over training) not drawn: "
                 + MIXED,
                 "Table 3 (persistent entropy, [CLS] spectrum over the last 30% of training) "
                 f"not drawn: {MIXED}."):
        assert line in md
    assert md.count("Fig. 6 (I-STAR, IsoScore* per layer) not drawn") == 2  # top and Figures
    assert "Measurement formats differ (4 of format 1, 4 of format 2)" in md
    assert FORMAT_1_NOTE not in md
    with open(out / "table3.csv") as f:
        assert list(csv.DictReader(f)) == []
    # Table 1 and the union IsoScore* pool both formats: base seeds 1 and 2, 0.6 and 0.7
    with open(out / "table1.csv") as f:
        none = next(r for r in csv.DictReader(f) if r["method"] == "none")
    assert (none["n_seeds"], float(none["mean"])) == ("2", pytest.approx(0.65))
    with open(out / "runs.csv") as f:
        assert sorted(r["measurement_format"] for r in csv.DictReader(f)) == ["1"] * 4 + ["2"] * 4
    assert main(["report", str(root), "--output-dir", str(tmp_path / "cli")]) == 0
    assert f"Fig. 6 (I-STAR, IsoScore* per layer) not drawn: {MIXED}" in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.parametrize("fmt", [None, 1, 2])
def test_one_measurement_format_draws_everything_and_says_which(tmp_path: Path,
                                                                fmt: Any) -> None:
    root = tmp_path / "runs"
    _format_runs(root, (fmt, fmt))
    res = write_report([str(root)], tmp_path / "out")
    assert res["refused"] == {}
    stems = {f.stem for f in res["files"] if f.suffix == ".png"}
    assert {"fig6_rte_minilm", "pe_fig1_rte_minilm"} <= stems
    md = (tmp_path / "out" / "report.md").read_text()
    assert "cannot be pooled" not in md
    with open(tmp_path / "out" / "table3.csv") as f:
        assert len(list(csv.DictReader(f))) == 2
    if fmt == 2:
        assert FORMAT_1_NOTE not in md
        assert ("Measurement format 2 (all runs): per-layer IsoScore* shrunk toward each "
                "layer's own Σ_S; training [CLS] spectrum over the whole gradient-accumulation "
                "cycle.") in md
    else:
        assert FORMAT_1_NOTE in md


# --------------------------------------------------------------- --pick-best-over


GRID = {  # (method, learning rate, epochs) -> per-seed metric
    ("none", 1e-5, 3): [0.60, 0.62], ("none", 1e-5, 4): [0.64, 0.66],
    ("none", 3e-5, 3): [0.70, 0.68], ("none", 3e-5, 4): [0.50, 0.52],
    ("istar", 1e-5, 3): [0.55, 0.55], ("istar", 1e-5, 4): [0.72, 0.74],
    ("istar", 3e-5, 3): [0.71, 0.73], ("istar", 3e-5, 4): [0.40, 0.40],
}


def _grid(root: Path, extra: dict[str, Any] | None = None, shift: float = 0.0) -> None:
    for (reg, lr, epochs), ms in GRID.items():
        for seed, m in enumerate(ms, start=1):
            make_run(root, reg=reg, lam=-1.0, seed=seed, metric=m + shift,
                     training={"learning_rate": lr, "num_train_epochs": epochs, **(extra or {})})


def test_pick_best_over_a_tuning_grid(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    _grid(root)
    out = tmp_path / "out"
    res = write_report([str(root)], out, figures=False,
                       pick_best_over=("learning_rate", "num_train_epochs"))
    picks = {p["method"]: p for p in res["picks"]}
    # by hand: base means 0.61, 0.65, 0.69, 0.51 -> lr 3e-5, 3 epochs; I-STAR 0.55, 0.73,
    # 0.72, 0.40 -> lr 1e-5, 4 epochs
    assert picks["none"]["picked"] == "learning_rate=3e-05, num_train_epochs=3"
    assert picks["istar λ=-1 ζ=0.2"]["picked"] == "learning_rate=1e-05, num_train_epochs=4"
    assert picks["none"]["mean"] == pytest.approx(0.69)
    assert {p["n_candidates"] for p in picks.values()} == {4}
    assert len(res["runs"]) == 4
    rows = {r["method"]: r for r in table1_rows(res["cells"])}
    assert set(rows) == {"none", "istar λ=-1 ζ=0.2"}  # not split by the picked settings
    assert rows["none"]["setting"] == "" and rows["none"]["mean"] == pytest.approx(0.69)
    assert rows["istar λ=-1 ζ=0.2"]["mean"] == pytest.approx(0.73)
    md = (out / "report.md").read_text()
    assert "## Settings picked over `learning_rate`, `num_train_epochs`" in md
    assert ("| rte | minilm | none | learning_rate=3e-05, num_train_epochs=3 | accuracy | "
            "0.6900 | 2 | 4 |") in md
    assert ("| rte | minilm | istar λ=-1 ζ=0.2 | learning_rate=1e-05, num_train_epochs=4 | "
            "accuracy | 0.7300 | 2 | 4 |") in md
    with open(out / "picks.csv") as f:
        assert len(list(csv.DictReader(f))) == 2
    # default: every setting kept apart, as before
    res = write_report([str(root)], tmp_path / "plain", figures=False)
    assert len(res["cells"]) == 8 and res["picks"] == []
    assert not (tmp_path / "plain" / "picks.csv").exists()


def test_pick_best_over_keeps_other_settings_apart_and_minimises_a_loss(tmp_path: Path) -> None:
    from isotropy.reporting.report import lower_is_better, pick_best

    root = tmp_path / "runs"
    _grid(root, {"max_seq_length": 128})
    _grid(root, {"max_seq_length": 256}, shift=0.01)
    runs, _ = collect_runs(expand_inputs([str(root)]), pick_over=("learning_rate",
                                                                  "num_train_epochs"))
    kept, picks = pick_best(runs)
    assert sorted({p["setting"] for p in picks}) == ["max_seq_length=128", "max_seq_length=256"]
    assert len(picks) == 4 and len(kept) == 8
    # only the learning rate is tuned: epochs still split the cells
    runs, _ = collect_runs(expand_inputs([str(root)]), pick_over=("learning_rate",))
    _, picks = pick_best(runs)
    assert len(picks) == 8 and {p["n_candidates"] for p in picks} == {2}
    assert lower_is_better("loss") and lower_is_better("eval_loss")
    assert not lower_is_better("accuracy") and not lower_is_better("f1")
    # a loss as the main metric: the least mean wins; a tie goes to the first in text order
    loss_root = tmp_path / "loss"
    for lr, losses in ((1e-5, [0.3, 0.5]), (3e-5, [0.2, 0.4]), (5e-5, [0.35, 0.35])):
        for seed, loss in enumerate(losses, start=1):
            d = make_run(loss_root, seed=seed, training={"learning_rate": lr})
            res = json.loads((d / "results.json").read_text())
            res["main_metric"] = "loss"
            res["final"]["eval_loss"] = loss
            (d / "results.json").write_text(json.dumps(res))
    runs, _ = collect_runs(expand_inputs([str(loss_root)]), pick_over=("learning_rate",))
    _, (pick,) = pick_best(runs)
    assert pick["picked"] == "learning_rate=3e-05" and pick["mean"] == pytest.approx(0.3)
    for r in runs:  # make every mean 0.4: the first in text order wins
        r.final["eval_loss"] = 0.4
    _, (pick,) = pick_best(runs)
    assert pick["picked"] == "learning_rate=1e-05"


def test_cli_pick_best_over(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from isotropy.cli.main import main

    root = tmp_path / "runs"
    _grid(root)
    assert main(["report", str(root), "--output-dir", str(tmp_path / "o"), "--no-figures",
                 "--pick-best-over", "learning_rate, num_train_epochs"]) == 0
    assert "4 runs in 2 cells" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exc:
        main(["report", str(root), "--output-dir", str(tmp_path / "o2"),
              "--pick-best-over", "learning_rate,batch"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("isotropy report: error:") and "batch: not a setting" in err
    assert "\n" not in err and not (tmp_path / "o2").exists()
    with pytest.raises(SystemExit) as exc:
        main(["report", str(root), "--output-dir", str(tmp_path / "o2"), "--pick-best-over",
              " , "])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "--pick-best-over: no setting named in ' , ': give the settings to choose the " \
        "best run over, comma-separated, such as learning_rate,num_train_epochs" in err
    assert "\n" not in err and not (tmp_path / "o2").exists()


def test_docs_quote_the_format_lines_report_writes() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "report.md").read_text("utf-8")
    assert f"- Fig. 6 (I-STAR, IsoScore* per layer) not drawn: {MIXED}" in doc
    assert FORMAT_1_NOTE in doc


def test_entropy_accumulation_and_padding_are_part_of_the_method(tmp_path):
    """A persistent-entropy run without entropy_accumulation (written before it existed) used
    the sliding window: labelled so, never pooled with an exact one; include_padding marks
    I-STAR and CosReg methods; the base run is shared by all."""
    from isotropy.reporting.report import collect_runs, expand_inputs

    make_run(tmp_path, reg="entropy", seed=1, accumulation=None)
    make_run(tmp_path, reg="entropy", seed=2, accumulation="exact")
    make_run(tmp_path, reg="istar", lam=-1.0, seed=1, padding=True)
    make_run(tmp_path, reg="none", seed=1, accumulation=None)
    runs, skipped = collect_runs(expand_inputs([str(tmp_path)]))
    assert not skipped
    labels = sorted(r.method.label for r in runs)
    assert labels == ["entropy β=1", "entropy β=1 (window)", "istar λ=-1 ζ=0.2 with padding",
                      "none"]
    assert len({r.setting for r in runs}) == 1  # one cell setting: the base compares to all


def test_a_cut_jsonl_is_used_up_to_its_last_whole_record_and_said(tmp_path: Path) -> None:
    """metrics.jsonl cut mid-line (records written after the cut too): Table 3 averages only
    the whole records before the cut, by hand; a cut measurements.jsonl keeps its whole
    records; report.md names both files and lines."""
    spec = [(s, [s / 100, 0.2, 0.1, 0.5, 0.3, 0.2]) for s in range(10, 101, 10)]
    run = make_run(tmp_path / "runs", reg="entropy", seed=1, spectrum=spec)
    lines = (run / "metrics.jsonl").read_text().splitlines(keepends=True)
    # cut the record of step 80: steps 10..70 stay; Table 3's last 30% is of the last logged
    # step (70): steps >= 49, i.e. 50, 60, 70
    cut = next(i for i, x in enumerate(lines) if '"step": 80' in x)
    damaged = "".join(lines[:cut]) + lines[cut][:25] + "\n" + "".join(lines[cut + 1:])
    (run / "metrics.jsonl").write_text(damaged)
    meas = run / "measurements.jsonl"
    whole = meas.read_text() if meas.exists() else ""
    n_whole = len(whole.splitlines())
    meas.write_text(whole + '{"step": 100, "layers": [')
    out = tmp_path / "out"
    write_report([str(tmp_path / "runs")], out, figures=False)
    md = (out / "report.md").read_text()
    assert "## Runs read in part" in md
    assert (f"metrics.jsonl: line {cut + 1} of {len(lines)} is cut short or unreadable; the "
            f"{cut} whole records before it are used") in md
    assert (f"measurements.jsonl: line {n_whole + 1} of {n_whole + 1} is cut short or "
            f"unreadable; the {n_whole} whole records before it are used") in md
    with open(out / "table3.csv") as f:
        (row,) = list(csv.DictReader(f))
    assert float(row["raw_1_mean"]) == pytest.approx((0.5 + 0.6 + 0.7) / 3)


def test_a_folder_of_sweep_roots_reads_as_all_their_runs(tmp_path: Path) -> None:
    study = tmp_path / "study"
    a = make_run(study / "phase-a", seed=1)
    b = make_run(study / "phase-b", reg="cosreg", seed=1)
    loose = study / "notes"  # not a sweep root: kept as one entry, skipped with its reason
    loose.mkdir(parents=True)
    for root in ("phase-a", "phase-b"):
        (study / root / "sweep.json").write_text("{}")
        (study / root / "logs").mkdir()
    assert expand_inputs([str(study)]) == [loose, a, b]
    runs, skipped = collect_runs(expand_inputs([str(study)]))
    assert sorted(r.path for r in runs) == sorted([a, b])
    assert [p for p, _ in skipped] == [str(loose)]


def test_cli_reports_each_sweep_of_a_folder_on_its_own(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Two sweeps of one task at different learning rates: pooled, their cells are kept apart
    # and tagged by the setting; each sweep's own report has no such tag.
    from isotropy.cli.main import main
    from isotropy.reporting.report import sweeps_inside

    study = tmp_path / "study"
    for seed, metric in ((1, 0.60), (2, 0.64)):
        make_run(study / "a", seed=seed, metric=metric, training={"learning_rate": 1e-4})
        make_run(study / "b", reg="cosreg", seed=seed, metric=metric + 0.1,
                 training={"learning_rate": 3e-5})
    (study / "c").mkdir()  # a sweep without a finished run yet
    for root in ("a", "b", "c"):
        (study / root / "sweep.json").write_text("{}")
    assert sweeps_inside([str(study)]) == [("a", study / "a"), ("b", study / "b"),
                                           ("c", study / "c")]
    assert sweeps_inside([str(study / "a")]) == []  # a sweep root itself: no sub-report
    out = tmp_path / "rep"
    assert main(["report", str(study), "--output-dir", str(out), "--no-figures"]) == 0
    printed = capsys.readouterr().out
    assert f"{out / 'sweeps' / 'c'}: no finished run in {study / 'c'}, no report\n" in printed
    # pooled, the two sweeps' settings differ: no claims.md, and the command says why
    assert "claims.md not written: the runs of rte differ in settings" in printed
    assert not (out / "claims.md").exists()
    pooled = (out / "report.md").read_text()
    assert "| none [learning_rate=0.0001] | 0.6200 ± 0.0283 (n=2) |" in pooled
    for name, label, mean in (("a", "none", "0.6200"), ("b", "cosreg λ=1", "0.7200")):
        md = (out / "sweeps" / name / "report.md").read_text()
        assert f"| {label} | {mean} ± 0.0283 (n=2) |" in md
        assert "learning_rate=" not in md
        with open(out / "sweeps" / name / "runs.csv") as f:
            assert len(list(csv.DictReader(f))) == 2
    assert not (out / "sweeps" / "c").exists()
    # the same folder twice, or a glob of the roots themselves: no second copy, no sub-reports
    assert sweeps_inside([str(study), str(study)]) == sweeps_inside([str(study)])
    assert sweeps_inside([str(study / "*")]) == []
    # two folders that both hold a sweep "a": refused before anything is written
    other = tmp_path / "other"
    make_run(other / "a", seed=1)
    (other / "a" / "sweep.json").write_text("{}")
    with pytest.raises(SystemExit) as exc:
        main(["report", str(study), str(other), "--output-dir", str(tmp_path / "rep2")])
    assert exc.value.code == 2
    assert "two sweeps would both be reported as sweeps/a" in capsys.readouterr().err
    assert not (tmp_path / "rep2").exists()


def test_gzip_archived_runs_give_the_same_report(sweep_root: Path, tmp_path: Path) -> None:
    """Archived runs store results/metrics/measurements/predictions as ``name.gz``: the report
    reads them where the plain file is absent, and writes the same bytes."""
    import gzip
    import shutil

    plain_out, gz_out = tmp_path / "plain", tmp_path / "gz"
    write_report([str(sweep_root)], plain_out, figures=False)
    gz_root = tmp_path / "gz_root"
    shutil.copytree(sweep_root, gz_root)
    n = 0
    for name in ("results.json", "metrics.jsonl", "measurements.jsonl", "eval_predictions.csv"):
        for f in gz_root.glob(f"*/{name}"):
            f.with_name(name + ".gz").write_bytes(gzip.compress(f.read_bytes()))
            f.unlink()
            n += 1
    assert n >= 3 * len(list(gz_root.glob("*/config.json"))) - 3  # most runs had all three
    write_report([str(gz_root)], gz_out, figures=False)
    for out in plain_out.iterdir():
        if out.suffix in (".md", ".csv"):
            want = out.read_text().replace(str(sweep_root), "ROOT")
            got = (gz_out / out.name).read_text().replace(str(gz_root), "ROOT")
            assert got == want, out.name
    # a damaged .gz is a clear per-run reason, not a stack trace
    victim = next(gz_root.glob("*/results.json.gz"))
    victim.write_bytes(b"not gzip")
    write_report([str(gz_root)], tmp_path / "bad", figures=False)
    assert "not readable gzip data" in (tmp_path / "bad" / "report.md").read_text()


def test_a_gz_file_cut_short_keeps_its_whole_records(tmp_path: Path) -> None:
    import gzip

    from isotropy.reporting.runs import read_jsonl_whole

    lines = b"".join(b'{"step": %d, "loss": 0.5}\n' % i for i in range(2000))
    data = gzip.compress(lines)
    path = tmp_path / "metrics.jsonl.gz"
    path.write_bytes(data[: len(data) * 2 // 3])  # cut inside the deflate stream
    records, note = read_jsonl_whole(path)
    assert 0 < len(records) < 2000
    assert [r["step"] for r in records] == list(range(len(records)))
    assert note is None or "cut short" in note
