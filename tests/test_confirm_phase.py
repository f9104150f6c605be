"""``docs/results/confirm_phase.py``: the confirmatory step's CPU phase by the frozen plan of
``docs/results.md``. The runs it reads are the runs its specs name; the primary test against a
brute-force enumeration of the sign patterns and statsmodels' Holm; the Holm range while one
test of the family is missing; the committed runs against their files read directly."""

from __future__ import annotations

import doctest
import importlib.util
import itertools
import json
import re
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from _reference import holm

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"
_spec = importlib.util.spec_from_file_location("confirm_phase", RESULTS / "confirm_phase.py")
cp = importlib.util.module_from_spec(_spec)
sys.modules["confirm_phase"] = cp  # its dataclasses look their module up there
_spec.loader.exec_module(cp)
run_name = sys.modules["review_verdicts"].run_name  # the name isotropy train gives a run


def test_doctests() -> None:
    assert doctest.testmod(cp).failed == 0


@pytest.mark.parametrize("spec", [cp.ISTAR_ROOT, cp.ENTROPY_ROOT])
def test_every_run_looked_up_is_a_run_its_spec_names(spec: str) -> None:
    from isotropy.sweeps.points import expand
    from isotropy.sweeps.spec import load_spec
    from isotropy.training.settings import args_from_dict

    points = expand(load_spec(RESULTS / "specs" / f"{spec}.yaml"))
    named = {p.name: args_from_dict(p.settings) for p in points}
    wanted = [(t, c, s) for root, _, cell, tasks, _ in cp.CELLS if root == spec
              for t in tasks for c in [cell(t)] for s in cp.SEEDS]
    # every run of the spec is read, and nothing else
    assert {run_name(t, c, s) for t, c, s in wanted} == set(named)
    for task, cell, seed in wanted:
        iso, train = named[run_name(task, cell, seed)]
        assert train.seed == seed
        for key, value in cell.settings:
            got = getattr(iso, key) if hasattr(iso, key) else getattr(train, key)
            assert got == value, (task, key, got, value)


def test_the_primary_settings_are_the_ones_the_spec_named_before_its_runs() -> None:
    text = (RESULTS / "specs" / "confirm-cpu.yaml").read_text()
    named = {task: (float(lam), float(zeta)) for lam, zeta, task in re.findall(
        r"^#\s+lambda = (-?[\d.]+), zeta = ([\d.]+) on (\w+)$", text, re.M)}
    assert named == {t: cp.PAPER[t] for t in cp.ISTAR_TASKS}
    entropy = (RESULTS / "specs" / "confirm-entropy-cpu.yaml").read_text()
    assert ("selected bars (entropy_weight 1, select_features true) minus that of\n"
            "# no regularizer") in entropy
    assert cp.PRIMARY[1].cells("cola") == (cp.entropy_cell(True), cp.entropy_cell(None))
    assert cp.PRIMARY[1].read is cp.last_30 and cp.PRIMARY[0].read is cp.final_metric


def _brute_force(groups: list[list[float]]) -> tuple[float, float]:
    """S and its two-sided sign-flip p by listing every sign pattern (no code of isotropy)."""
    t = len(groups)
    w = [1 / (t * len(g)) for g in groups for _ in g]
    d = [x for g in groups for x in g]
    s = sum(wi * di for wi, di in zip(w, d, strict=True))
    hits = total = 0
    for signs in itertools.product((1, -1), repeat=len(d)):
        total += 1
        hits += abs(sum(e * wi * di for e, wi, di in zip(signs, w, d, strict=True))) \
            >= abs(s) - 1e-12
    return s, hits / total


class _FakeRun:
    total_steps = None  # no training logs or measurements: P1's growth reads as missing
    spectrum_logs: list = []
    measurement_records: list = []
    uncounted_evaluations: list = []

    def __init__(self, majority: float | None) -> None:
        self.majority = majority

    def value(self, name: str, which: str = "final") -> float | None:
        return self.majority if name == "majority_fraction" else None


def _patch(monkeypatch: pytest.MonkeyPatch, values: dict[tuple[str, str, int], float]) -> None:
    """``metric`` answers from ``values`` keyed by (sweep, run name, seed); absent keys are
    Missing."""
    def metric(runs, task, cell, seed):
        key = (cell.root, run_name(task, cell, seed), seed)
        if key not in values:
            raise cp.Missing(key[1])
        return values[key], _FakeRun(0.6)
    monkeypatch.setattr(cp, "metric", metric)
    monkeypatch.setattr(cp, "check_same_but_method", lambda a, b: None)  # no settings here
    monkeypatch.setattr(cp, "check_spec_point", lambda run, spec: None)
    monkeypatch.setattr(cp, "tail_metric", lambda run: None)  # never read below


def _values(c, d: dict[str, list[float]], base: float = 0.5) -> dict:
    out = {}
    for task, ds in d.items():
        cell, ref = c.cells(task)
        for seed, delta in zip(cp.SEEDS, ds, strict=False):
            out[(ref.root, run_name(task, ref, seed), seed)] = base
            out[(cell.root, run_name(task, cell, seed), seed)] = base + delta / 100
    return out


def test_a_complete_primary_test_is_the_enumeration_and_waits_on_holm_only_when_it_must(
        monkeypatch: pytest.MonkeyPatch) -> None:
    istar = cp.PRIMARY[0]
    # every pair below 0 on MRPC and STS-B: p = 2 / 2^10, Holm in [p, 2p], both < 0.05
    d = {"mrpc": [-1.0, -2.0, -0.5, -1.5, -3.0], "stsb": [-0.2, -0.4, -0.1, -0.3, -0.6]}
    _patch(monkeypatch, _values(istar, d))
    text = "\n".join(cp.report(Path("unused"), gpu_parent=Path("unused")))
    s, p = _brute_force(list(d.values()))
    assert p == pytest.approx(2 / 1024, abs=1e-15)
    assert f"S = {s:+.2f} points, exact stratified sign-flip two-sided p = {p:.4g}" in text
    # three tests of the family missing: the adjusted p lies in [p, 4p]
    assert f"between {p:.3g} and {4 * p:.3g} until the family's other tests are complete" in text
    assert "**contradicted, the paper's effect excluded**" in text
    assert "Partial: 0 of 10 pairs. No test before all 10 are there" in text  # entropy
    # mixed signs: p between 0.0125 and 0.05 (4p above it) leaves the word to the other tests
    d = {"mrpc": [3.0, 2.0, 2.5, -0.4, 1.5], "stsb": [0.5, 0.4, -0.3, 0.6, 0.2]}
    _patch(monkeypatch, _values(istar, d))
    s, p = _brute_force(list(d.values()))
    assert 0.0125 <= p < 0.05
    text = "\n".join(cp.report(Path("unused"), gpu_parent=Path("unused")))
    assert (f"**undecided until the family's other tests are complete (its Holm-adjusted p "
            f"lies between {p:.3g} and {min(1, 4 * p):.3g})**") in text
    # one pair missing: no test at all
    values = _values(istar, d)
    values.pop((cp.ISTAR_ROOT, run_name("stsb", istar.cells("stsb")[0], 9), 9))
    _patch(monkeypatch, values)
    text = "\n".join(cp.report(Path("unused"), gpu_parent=Path("unused")))
    assert "Partial: 9 of 10 pairs." in text and "S =" not in text


def test_both_tests_complete_take_statsmodelsholm(monkeypatch: pytest.MonkeyPatch) -> None:
    from statsmodels.stats.multitest import multipletests

    d_istar = {"mrpc": [1.0, 2.0, -0.5, 1.5, 3.0], "stsb": [0.2, 0.4, 0.1, -0.3, 0.6]}
    d_ent = {"cola": [-1.0, -2.0, -0.5, -1.5, -3.0], "mrpc": [-0.2, -0.4, 0.1, -0.3, -0.6]}
    values = {**_values(cp.PRIMARY[0], d_istar), **_values(cp.PRIMARY[1], d_ent)}
    _patch(monkeypatch, values)
    monkeypatch.setattr(cp, "last_30", cp.final_metric)  # the fakes have no evaluations
    text = "\n".join(cp.report(Path("unused"), gpu_parent=Path("unused")))
    ps = [_brute_force(list(d.values()))[1] for d in (d_istar, d_ent)]
    # the GPU phase's two tests missing: at 0 and at 1 they give the ends of the range
    low = multipletests([*ps, 0.0, 0.0], method="holm")[1]
    high = multipletests([*ps, 1.0, 1.0], method="holm")[1]
    for i, p in enumerate(ps):
        assert (f"two-sided p = {p:.4g}, Holm-adjusted (the amendment's family of four) between "
                f"{low[i]:.3g} and {high[i]:.3g} until the family's other tests are complete"
                ) in text


@pytest.mark.parametrize(("known", "missing"), [([0.001], 1), ([0.02], 3), ([0.2], 3),
                                                ([0.01, 0.03], 2), ([0.04, 0.001], 2)])
def test_holm_range_brackets_every_p_the_missing_tests_could_give(known: list[float],
                                                                  missing: int) -> None:
    grid = [0.0, 0.0005, 0.005, 0.01, 0.02, 0.03, 0.05, 0.1, 0.5, 1.0]
    seen = [holm([*known, *rest])[: len(known)]
            for rest in itertools.product(grid, repeat=missing)]
    for i, (low, high) in enumerate(cp.holm_range(known, missing)):
        assert low == pytest.approx(min(s[i] for s in seen), abs=1e-12)
        assert high == pytest.approx(max(s[i] for s in seen), abs=1e-12)


def test_a_run_whose_settings_are_not_its_spec_points_is_refused(tmp_path: Path) -> None:
    import shutil

    from isotropy.reporting import packed

    # the sweep's runs while it runs (.pending/<sweep>/), else its archive (<sweep>.tar.xz)
    source = next((s for s in (RESULTS / "runs" / ".pending" / cp.ISTAR_ROOT,
                               RESULTS / "runs" / cp.ISTAR_ROOT) if packed.is_dir(s)), None)
    if source is None:
        pytest.skip("no committed confirmatory runs")
    base = run_name("mrpc", cp.istar_base("mrpc"), 5)
    shutil.copytree(packed.real_path(source / base), tmp_path / cp.ISTAR_ROOT / base)
    c = cp.PRIMARY[0]
    assert cp.pairs(tmp_path, c).count() == (0, 10)  # the cell's run is absent: no pair
    config = tmp_path / cp.ISTAR_ROOT / base / "config.json"
    data = json.loads(config.read_text())
    data["settings"]["training"]["num_train_epochs"] = 2.0  # a setting no cell names
    config.write_text(json.dumps(data))
    # refused though its pair's other run is missing
    with pytest.raises(ValueError, match="num_train_epochs"):
        cp.pairs(tmp_path, c)


def test_the_entropy_comparison_reads_the_last_30_percent(tmp_path: Path) -> None:
    run = SimpleNamespace(total_steps=100, evaluations=[(0, 0.1), (50, 0.2), (70, 0.5),
                                                        (100, 0.7)], path=tmp_path)
    assert cp.last_30(0.7, run) == pytest.approx(0.6)
    run.evaluations = [(0, 0.1), (50, 0.2)]
    with pytest.raises(ValueError, match="no evaluation in the last 30%"):
        cp.last_30(0.2, run)


def test_committed_runs_are_their_files_read_directly() -> None:
    # one archive per run while the sweep runs (.pending/<sweep>/<run>.tar.xz), else the
    # sweep's archive
    archives = sorted((RESULTS / "runs" / ".pending" / cp.ISTAR_ROOT).glob("*.tar.xz"))
    if not archives:
        archives = [a for a in [RESULTS / "runs" / f"{cp.ISTAR_ROOT}.tar.xz"] if a.is_file()]
    if not archives:
        pytest.skip("no committed confirmatory runs")
    final = {}
    for archive in archives:
        with tarfile.open(archive, "r:xz") as tar:
            final.update({m.name.split("/")[-2]: json.loads(tar.extractfile(m).read())["final"]
                          for m in tar.getmembers() if m.name.endswith("/results.json")})
    text = "\n".join(cp.report(RESULTS / "runs"))
    seen = 0
    for task in cp.ISTAR_TASKS:
        key = "eval_pearson" if task == "stsb" else "eval_accuracy"
        for seed in cp.SEEDS:
            names = [run_name(task, c, seed) for c in cp.PRIMARY[0].cells(task)]
            if all(n in final for n in names):
                a, b = (final[n][key] for n in names)
                assert f"{100 * (a - b):+.2f}" in text
                seen += 1
    assert seen >= 1
    assert f"`{cp.ISTAR_ROOT}`: {len(final)} of 50" in text


def test_results_md_shows_what_the_committed_runs_give() -> None:
    """docs/results.md's confirmatory section is the script's output on the committed runs
    (regenerate it with ``python docs/results/confirm_phase.py`` after ``sync.sh``)."""
    text = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
    fam = cp.family({cp.CPU.name: cp.cpu_lookup(RESULTS / "runs"),
                     cp.GPU.name: cp.GpuLookup(ROOT / "docs")})
    made = "\n".join(cp.report(RESULTS / "runs", fam=fam)).rstrip()
    assert made in text, "docs/results.md's confirmatory section is out of date"
    assert text.endswith(made + "\n")
    # the README's findings give the same count of finished CPU runs and the same tests
    done, total = cp.cpu_runs_done(made)
    assert total == 80
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    a, b = cp.readme_part(readme)
    assert readme[a:b] == cp.readme_paragraph(fam, done, total, RESULTS / "runs"), \
        "the README's paragraph on the confirmatory step is out of date"
    assert f"are under way: {done} of {total} CPU runs so far." in " ".join(readme[a:b].split())


def test_write_puts_the_text_and_the_paragraph_in_place(tmp_path: Path) -> None:
    text = ("### CPU phase: MiniLM-L6-H384, new\n\nRuns finished: `confirm-cpu`: 12 of 50; "
            "`confirm-entropy-cpu`: 3 of 30.\n\n### GPU phase: x\n\nRuns finished: "
            "`runs-confirm.yaml`: 7 of 100.")
    # the GPU phase's runs are not CPU runs
    assert cp.cpu_runs_done(text) == (15, 80)
    results_md, readme = tmp_path / "results.md", tmp_path / "README.md"
    results_md.write_text("# Results\n\nkept\n\n### CPU phase: MiniLM-L6-H384, old\n\nold\n")
    readme.write_text(f"# Title\n\nbefore\n{cp.README_START}\nold\nlines\n{cp.README_END}\nafter\n")
    cp.write_docs(text, results_md, readme, "new\nparagraph")
    assert results_md.read_text() == "# Results\n\nkept\n\n" + text + "\n"
    assert readme.read_text() == (f"# Title\n\nbefore\n{cp.README_START}\nnew\nparagraph\n"
                                  f"{cp.README_END}\nafter\n")
    # without its markers the README is refused, and neither file is written
    results_md.write_text("# Results\n\n### CPU phase: MiniLM-L6-H384, old\n")
    readme.write_text("no markers here\n")
    with pytest.raises(ValueError, match="no lines '<!-- the confirmatory step"):
        cp.write_docs(text, results_md, readme, "new")
    assert results_md.read_text() == "# Results\n\n### CPU phase: MiniLM-L6-H384, old\n"
    assert readme.read_text() == "no markers here\n"


def test_the_readme_paragraph_states_each_complete_test_in_a_sentence() -> None:
    """Stand-in tests with hand-picked numbers: no complete test says so; a complete one
    gives S, p, the verdict of its Holm range and the gain bound, wrapped at 100."""
    fam = cp.Family({}, {}, {})
    text = cp.readme_paragraph(fam, 7, 80)
    assert " ".join(text.split()).endswith(
        "are under way: 7 of 80 CPU runs so far. No primary test is complete yet, so no "
        "verdict. [The runs](docs/results.md#the-confirmatory-step-runs-as-they-finish).")
    istar = cp.primary(cp.CPU)[0]
    key = ("CPU", istar.title)
    t = cp.Primary(istar.title, -1.278, 0.043, -2.24, -0.31, paper=0.3)
    fam = cp.Family({key: (istar, None)}, {key: t}, {key: (0.043, 0.172)})
    text = cp.readme_paragraph(fam, 64, 80)
    assert max(len(line) for line in text.splitlines()) <= 100
    assert " ".join(text.split()).split("so far. ")[1] == (
        "The CPU phase's I-STAR (the paper's (λ, ζ) with padding minus the base run, MRPC and "
        "STS-B): S = -1.28 points, exact two-sided p = 0.043, undecided until the family's "
        "other tests are complete (its Holm-adjusted p lies between 0.043 and 0.172); any gain "
        "is excluded (the effect is below -0.31 points); the paper's gain on these tasks: +0.30. "
        "[The runs](docs/results.md#the-confirmatory-step-runs-as-they-finish).")
    # with the committed runs, the exploratory counterpart's S (B1's, read in the test above
    # from the same runs) follows its test
    text = cp.readme_paragraph(fam, 64, 80, RESULTS / "runs")
    assert ("on these tasks: +0.30. The exploratory runs of the same comparison (seeds 0-2) "
            "gave S = -1.27. [The runs]" in " ".join(text.split()))


@pytest.mark.parametrize(("index", "sweep", "claim", "sign"), [
    (("primary", 1), "entropy", "P2", 1),
    (("secondary", 0), "istar", "C7 CosReg no gain", 1),
    (("secondary", 1), "istar", "C6 λ = +1 hurts", -1),  # oriented: > 0 is "hurts"
    (("secondary", 3), "entropy", "P4 all bars on par", 1),
    (("secondary", 4), "entropy", "P3 metric", 1),
])
def test_the_exploratory_counterparts_are_the_committed_reports_task_means(
        index: tuple[str, int], sweep: str, claim: str, sign: int) -> None:
    """The counterpart's task means, read here from the runs, against the per-task means of
    the committed claims.json (written by ``isotropy report``, another reader of the runs)."""
    if not (RESULTS / "runs" / f"{sweep}.tar.xz").is_file():
        pytest.skip("no committed exploratory runs")
    c = (cp.PRIMARY if index[0] == "primary" else cp.SECONDARY)[index[1]]
    units = json.loads((RESULTS / "report" / "sweeps" / sweep / "claims.json").read_text())[
        "units"]
    want = {u["task"]: sign * 100 * u["mean"] for u in units if u["claim"] == claim}
    text = cp.counterpart_text(RESULTS / "runs", c)
    for task in c.tasks:
        assert f"{cp.LABEL[task]} {want[task]:+.2f}" in text, (task, text)


def _gpu_run(parent: Path, call: int, root: str, name: str, value: float,
             **change: object) -> None:
    """One GPU run as a call brings it back (``runs/<name>/`` in a call's archive), its
    ``config.json`` written from its spec point as ``isotropy train`` records one, the model
    a path of the GPU machine's, ``change`` applied to the training settings."""
    import dataclasses
    import enum
    import io

    from isotropy.training.settings import args_from_dict

    point = cp.spec_points(root, gpu=True)[name]
    sections = {}
    for section, args in zip(("isotropy", "training"), args_from_dict(point.settings),
                             strict=True):
        values = {}
        for f in dataclasses.fields(args):
            v = getattr(args, f.name)
            values[f.name] = json.loads(json.dumps(v.value if isinstance(v, enum.Enum) else v,
                                                   default=str))
        sections[section] = values
    sections["isotropy"]["model"] = f"/tmp/isotropy-gpu.AbCd/{cp.gpu_model(root)}"
    sections["training"]["dataloader_pin_memory"] = True  # as a machine with CUDA writes it
    sections["training"] |= change
    task = sections["isotropy"]["task"]
    metric = {"stsb": "pearson", "cola": "matthews_correlation"}.get(task, "accuracy")
    files = {"config.json": {"settings": sections},
             "results.json": {"main_metric": metric, "task": task,
                              "final": {f"eval_{metric}": value},
                              "best": {f"eval_{metric}": value}}}
    folder = parent / cp.GPU_SWEEPS[root][1] / str(call)
    folder.mkdir(parents=True, exist_ok=True)
    archive = folder / f"runs-{task}-{name}.tar.xz"
    with tarfile.open(archive, "w:xz") as tar:
        for fname, data in files.items():
            blob = json.dumps(data).encode()
            info = tarfile.TarInfo(f"runs/{name}/{fname}")
            info.size = len(blob)
            tar.addfile(info, io.BytesIO(blob))


def test_the_gpu_phase_reads_each_runs_first_copy_and_checks_every_setting(
        tmp_path: Path) -> None:
    istar = cp.primary(cp.GPU)[0]
    cell, ref = istar.cells("sst2")
    cell_name, ref_name = (run_name("sst2", cp.Cell(c.root, tuple(
        (k, f"/gpu/{cp.GPU_MODEL}" if k == "model" else v) for k, v in c.settings)), 5)
        for c in (cell, ref))
    assert ref_name == "sst2-minilm-fp16-none-seed5"  # as run.sh's sweep names it
    _gpu_run(tmp_path, 1, cp.ISTAR_ROOT, cell_name, 0.80)
    _gpu_run(tmp_path, 1, cp.ISTAR_ROOT, ref_name, 0.85)
    _gpu_run(tmp_path, 2, cp.ISTAR_ROOT, ref_name, 0.10)  # a later copy: not read
    look = cp.GpuLookup(tmp_path)
    p = cp.pairs(look, istar)
    assert p.count() == (1, 20)
    assert p.d["sst2"][5] == pytest.approx(-5.0)
    text = "\n".join(cp.report(Path("unused"), gpu_parent=tmp_path))
    gpu = text[text.index("### GPU phase"):]
    assert "| runs-confirm.yaml | SST-2 | base run | 0.8500 | – |" in gpu
    assert "Partial: 1 of 20 pairs. No test before all 20 are there" in gpu
    assert "#### RTE at its chosen learning rate" in gpu
    assert ("not chosen yet" in gpu) == (cp.rte_rate() is None)  # until the spec is committed
    # a run whose schedule is not its spec's is refused
    _gpu_run(tmp_path / "bad", 1, cp.ISTAR_ROOT, ref_name, 0.85, num_train_epochs=2.0)
    with pytest.raises(ValueError, match="num_train_epochs"):
        cp.pairs(cp.GpuLookup(tmp_path / "bad"), istar)


def test_every_gpu_cell_is_a_run_its_gpu_spec_names() -> None:
    for ph_cells in cp.cells(cp.GPU):
        root, _, cell, tasks, _ = ph_cells
        names = cp.spec_points(root, gpu=True)
        for task in tasks:
            c = cell(task)
            gpu = cp.Cell(c.root, tuple((k, f"/gpu/{cp.GPU_MODEL}" if k == "model" else v)
                                        for k, v in c.settings))
            for seed in cp.SEEDS:
                assert run_name(task, gpu, seed) in names, (task, c)
    n = sum(len(tasks) for _, _, _, tasks, _ in cp.cells(cp.GPU)) * len(cp.SEEDS)
    roots = (cp.ISTAR_ROOT, cp.ENTROPY_ROOT) + ((cp.RTE_ROOT,) if cp.rte_rate() else ())
    assert n == sum(len(cp.spec_points(root, gpu=True)) for root in roots)  # and nothing else


def test_a_real_gpu_run_passes_the_check_against_its_gpu_spec_point(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run the GPU machine wrote (the earlier GPU phase's, of runs.yaml) against its point,
    expanded here on a CPU as the confirmatory GPU specs are: the settings that depend on the
    machine (the model's path, pinned memory) are read as the GPU machine writes them."""
    from isotropy.reporting.runs import load_run

    archive = ROOT / "docs" / "gpu-runs" / "7" / "runs-stsb.tar.xz"
    if not archive.is_file():
        pytest.skip("no committed GPU runs")
    with tarfile.open(archive) as tar:
        tar.extractall(tmp_path, filter="data")
    monkeypatch.setitem(cp.GPU_SWEEPS, "gpu-phase", ("runs.yaml", "gpu-runs"))
    runs = sorted(p for p in (tmp_path / "runs").iterdir() if p.is_dir())
    assert runs
    for path in runs:
        run = load_run(path)
        assert json.loads((path / "config.json").read_text())["settings"]["training"][
            "dataloader_pin_memory"] is True
        cp.check_spec_point(run, "gpu-phase", gpu=True)  # raises on any other difference
    config = json.loads((runs[0] / "config.json").read_text())
    config["settings"]["training"]["learning_rate"] = 1.0
    (runs[0] / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="learning_rate"):
        cp.check_spec_point(load_run(runs[0]), "gpu-phase", gpu=True)


def test_every_gpu_cells_settings_are_its_points() -> None:
    from isotropy.training.settings import args_from_dict

    for root, _, cell, tasks, _ in cp.cells(cp.GPU):
        points = cp.spec_points(root, gpu=True)
        for task in tasks:
            c = cell(task)
            gpu = cp.Cell(c.root, tuple((k, f"/gpu/{cp.GPU_MODEL}" if k == "model" else v)
                                        for k, v in c.settings))
            iso, train = args_from_dict(points[run_name(task, gpu, 5)].settings)
            for key, value in c.settings:
                if key != "model":
                    got = getattr(iso, key) if hasattr(iso, key) else getattr(train, key)
                    assert got == value, (task, key, got, value)


def test_p1_growth_is_read_from_step_0_and_from_the_first_training_log(tmp_path: Path) -> None:
    """The entropy spec's runs without a regularizer, hand-made with known spectra: the growth
    from step 0 (evaluation set) and from the first training log, per seed; with every run
    there, the brute-force sign-flip p of the mean of the task means."""
    from _runs import make_run

    from isotropy.reporting.runs import load_run

    # raw growth from step 0 per seed: CoLA +0.1, +0.2, +0.3, +0.4, -0.1; MRPC all +0.05
    growth = {"cola": [0.1, 0.2, 0.3, 0.4, -0.1], "mrpc": [0.05] * 5}
    runs = {}
    for task, gs in growth.items():
        for seed, g in zip(cp.SEEDS, gs, strict=True):
            # training logs: first 0.3 raw at step 10, 0.5 in the window: growth +0.2 each
            spectrum = [(10, [0.3, 0.1, 0.1, 0.2, 0.1, 0.1]), (90, [0.5, 0.1, 0.1, 0.2, 0.1,
                                                                    0.1])]
            d = make_run(tmp_path / task, task=task, seed=seed, global_step=100,
                         spectrum=spectrum, evals=[(0, 0.5), (100, 0.5)],
                         eval_spectra=[(0, 0.4, 0.1), (100, 0.4 + g, 0.1)])
            runs[task, seed] = load_run(d)

    def look(task, cell, seed):
        assert cell == cp.entropy_cell(None)
        if (task, seed) not in runs:
            raise cp.Missing(f"{task} {seed}")
        return 0.5, runs[task, seed]

    text = "\n".join(cp.growth_section(look, cp.CPU, tmp_path / "no-runs"))
    assert "| CoLA | raw | from step 0 (evaluation set) | +0.100 | +0.200 | +0.300 | +0.400 | " \
           "-0.100 | +0.180 (5) |" in text
    assert "| MRPC | raw | from the first training log | +0.200 | +0.200 | +0.200 | +0.200 | " \
           "+0.200 | +0.200 (5) |" in text
    s, p = _brute_force(list(growth.values()))
    assert (f"- Raw, from step 0 (evaluation set): grows in 9 of 10 runs; mean of the task means "
            f"{s:+.3f}, exact stratified sign-flip two-sided p = {p:.4g}") in text
    # the centred share does not move from step 0: ten ties, S = 0, p = 1
    assert "- Centred, from step 0 (evaluation set): grows in 0 of 10 runs; mean of the task " \
           "means +0.000, exact stratified sign-flip two-sided p = 1" in text
    assert "Exploratory counterpart (phase B with B5): its runs are not committed." in text
    del runs["mrpc", 9]
    text = "\n".join(cp.growth_section(look, cp.CPU, tmp_path / "no-runs"))
    assert "- Raw, from step 0 (evaluation set): 9 of 10 runs." in text


def test_a_resumes_uncounted_evaluation_is_named_under_the_runs(tmp_path: Path) -> None:
    from _runs import make_run

    from isotropy.reporting.runs import load_run

    grid = {"eval_on_start": True, "eval_strategy": "steps", "eval_steps": 20}
    resumed = load_run(make_run(tmp_path, task="cola", seed=5, global_step=100, training=grid,
                                evals=[(0, 0.1), (20, 0.2), (67, 0.9), (80, 0.3), (100, 0.4)]))

    def look(task, cell, seed):
        if (task, seed) != ("cola", 5) or cell != cp.entropy_cell(None):
            raise cp.Missing(task)
        return 0.4, resumed

    lines, n = cp.runs_section(look)
    text = "\n".join(lines)
    assert n == 1
    # the last-30% metric (t >= 70): 80 and 100, not the resume's 67
    assert "| confirm-entropy-cpu | CoLA | no regularizer | 0.3500 | – |" in text
    assert "Evaluations not counted (a resume's evaluation at its checkpoint's step" in text
    assert f"{Path(resumed.path).name} (step 67)." in text


@pytest.fixture
def rte_spec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[float]:
    """The GPU specs with ``runs-confirm-rte.yaml`` as ``make_rte_confirm_spec.py`` writes it
    for a rate of 3e-5; returns the rate."""
    import shutil

    spec = importlib.util.spec_from_file_location(
        "make_rte_confirm_spec", ROOT / "benchmarks" / "gpu" / "make_rte_confirm_spec.py")
    make = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make)
    specs = tmp_path / "specs"
    specs.mkdir()
    for name in ("runs-confirm.yaml", "runs-entropy.yaml"):
        shutil.copy(cp.GPU_SPECS / name, specs / name)
    (specs / "runs-confirm-rte.yaml").write_text(
        make.spec_text(3e-5, {1e-5: 0.6, 3e-5: 0.7, 5e-5: 0.65}))
    monkeypatch.setattr(cp, "GPU_SPECS", specs)
    cp.spec_points.cache_clear()
    yield 3e-5
    cp.spec_points.cache_clear()


def test_rtes_cells_are_the_runs_its_written_spec_names(rte_spec: float) -> None:
    from isotropy.training.settings import args_from_dict

    assert cp.rte_rate() == rte_spec
    points = cp.spec_points(cp.RTE_ROOT, gpu=True)
    rte = [(cell, tasks) for root, _, cell, tasks, _ in cp.cells(cp.GPU) if root == cp.RTE_ROOT]
    assert len(rte) == 5 and all(tasks == ("rte",) for _, tasks in rte)
    names = set()
    for cell, _ in rte:
        c = cell("rte")
        gpu = cp.Cell(c.root, tuple((k, f"/gpu/{cp.GPU_MODEL}" if k == "model" else v)
                                    for k, v in c.settings))
        for seed in cp.SEEDS:
            name = run_name("rte", gpu, seed)
            assert name in points, (c, name)
            names.add(name)
            iso, train = args_from_dict(points[name].settings)
            for key, value in c.settings:
                if key != "model":
                    got = getattr(iso, key) if hasattr(iso, key) else getattr(train, key)
                    assert got == value, (key, got, value)
    assert names == set(points)  # and nothing else


def test_rtes_gpu_cells_are_reported_beside_the_family(rte_spec: float, tmp_path: Path) -> None:
    base, paper = cp.rte_cell(method="none"), cp.rte_cell()

    def name(c: cp.Cell, seed: int) -> str:
        return run_name("rte", cp.Cell(c.root, tuple(
            (k, f"/gpu/{cp.GPU_MODEL}" if k == "model" else v) for k, v in c.settings)), seed)

    runs = tmp_path / "gpu"
    _gpu_run(runs, 1, cp.RTE_ROOT, name(base, 5), 0.60)
    _gpu_run(runs, 1, cp.RTE_ROOT, name(paper, 5), 0.62)
    text = "\n".join(cp.report(Path("unused"), gpu_parent=runs))
    gpu = text[text.index("### GPU phase"):]
    assert "| runs-confirm-rte.yaml | RTE | base run | 0.6000 | – |" in gpu
    assert ("Learning rate 3e-05, as the spec names it. The spec's header: \"Mean held-out "
            "accuracy per rate: 1e-05: 0.6000, 3e-05: 0.7000, 5e-05: 0.6500; RTE's rate: "
            "3e-05.\"") in gpu
    head = "##### RTE: I-STAR, the paper's (λ, ζ), padding minus the base run"
    part = gpu[gpu.index(head):]
    assert "| RTE | +2.00 | – | – | – | – | +2.00 (1) |" in part
    assert "Partial: 1 of 5 pairs." in part
    for seed in (6, 7, 8, 9):  # every seed above the base run: the least two-sided p, 2/32
        _gpu_run(runs, 2, cp.RTE_ROOT, name(base, seed), 0.60)
        _gpu_run(runs, 2, cp.RTE_ROOT, name(paper, seed), 0.60 + seed / 100)
    text = "\n".join(cp.report(Path("unused"), gpu_parent=runs))
    part = text[text.index(head):]
    assert ("All 5 pairs: S = +6.40 points, exact stratified sign-flip two-sided p = 0.0625 "
            "(unadjusted, not in the plan's family).") in part
    assert "Holm" not in part.split("#####")[1]  # never a test of the family


def test_rte_counts_every_cell_in_the_gpu_spec_check(rte_spec: float) -> None:
    """With RTE's spec written, the GPU cells are the three specs' points, nothing else."""
    test_every_gpu_cell_is_a_run_its_gpu_spec_names()


def test_a_rte_spec_with_two_rates_is_refused(rte_spec: float) -> None:
    path = cp.GPU_SPECS / "runs-confirm-rte.yaml"
    text = path.read_text()
    path.write_text(text.replace("learning_rate: 3.0e-05, regularizer: none",
                                 "learning_rate: 1.0e-05, regularizer: none"))
    cp.spec_points.cache_clear()
    with pytest.raises(ValueError, match="names 2 learning rates, not one"):
        cp.rte_rate()


def test_every_mpnet_cell_is_a_point_of_runs_mpnet_with_its_settings() -> None:
    from isotropy.training.settings import args_from_dict

    points = cp.spec_points(cp.MPNET_ROOT, gpu=True)
    names = set()
    for task in cp.MPNET_TASKS:
        for c in (cp.mpnet_cell(task, base=True), cp.mpnet_cell(task),
                  cp.mpnet_cell(task, -0.1)):
            for seed in cp.MPNET_SEEDS:
                name = run_name(task, cp.on_gpu(c), seed)
                iso, train = args_from_dict(points[name].settings)
                for key, value in c.settings:
                    if key != "model":
                        got = getattr(iso, key) if hasattr(iso, key) else getattr(train, key)
                        assert got == value, (name, key, got, value)
                names.add(name)
    assert names == set(points) and len(names) == 36  # 4 tasks x 3 cells x seeds 0-2


def test_mpnets_gpu_runs_are_reported_beside_the_step(tmp_path: Path) -> None:
    text = "\n".join(cp.report(Path("unused"), gpu_parent=tmp_path))
    part = text[text.index("### MPNet-base on a GPU"):]
    assert "No run has come back yet (`docs/gpu-runs-mpnet/`; 0 of 36)." in part
    base = {t: cp.mpnet_cell(t, base=True) for t in cp.MPNET_TASKS}
    paper = {t: cp.mpnet_cell(t) for t in cp.MPNET_TASKS}
    for seed in cp.MPNET_SEEDS:  # every task and seed one point above its base run
        for task in cp.MPNET_TASKS:
            _gpu_run(tmp_path, 1 + seed, cp.MPNET_ROOT, run_name(task, cp.on_gpu(base[task]),
                                                                 seed), 0.60)
            _gpu_run(tmp_path, 1 + seed, cp.MPNET_ROOT, run_name(task, cp.on_gpu(paper[task]),
                                                                 seed), 0.61)
    text = "\n".join(cp.report(Path("unused"), gpu_parent=tmp_path))
    part = text[text.index("### MPNet-base on a GPU"):]
    assert "Runs finished: 24 of 36." in part
    assert "| RTE | base run | 0.6000 | 0.6000 | 0.6000 |" in part
    assert "| CoLA | I-STAR λ = −0.1, padding | – | – | – |" in part
    head = "##### MPNet: I-STAR, the paper's (λ, ζ), padding minus the base run"
    one = part[part.index(head):].split("##### ")[1]
    assert "| STS-B | +1.00 | +1.00 | +1.00 | +1.00 (3) |" in one
    assert ("All 12 pairs: S = +1.00 points (the mean of the task means); no test: too few "
            "seeds for the plan's.") in one and "p =" not in one  # the plan: no test here
    assert "Partial: 0 of 12 pairs." in part[part.index("##### MPNet: I-STAR λ = −0.1, padding"):]
    assert "### GPU phase" in text and text.index("### GPU phase") < text.index("### MPNet")
